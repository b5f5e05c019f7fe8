/* fixture.h — the helpers the unit tests share, written once (issue 41):
 * a scratch folder per test program and the files in it, reading a file
 * whole, and the checks more than one test makes. cmocka's headers come
 * first in the test. The server's device under test: devfixture.h.
 */
#ifndef PSBENCH_TESTS_FIXTURE_H
#define PSBENCH_TESTS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

/* The scratch folder: /tmp/psbench_<program>_XXXXXX, made by
 * tmpdir_setup, removed with all it holds by tmpdir_teardown (cmocka
 * group fixtures: 0, or -1 where the folder could not be made or
 * removed). */
extern char tmpdir[64];
int tmpdir_setup(void **state);
int tmpdir_teardown(void **state);

/* The master's tests (test_config*, built with PSBENCH_SOURCE_CONFIG_DIR):
 * configuration classes from the source tree's configs/, no token from
 * the caller's environment, and the scratch folder. */
int config_setup(void **state);

/* tmpdir/name, in one of 8 buffers used in turn (8 paths at once). */
const char *tmp_path(const char *name);

/* tmpdir/name holding text (the test fails where it cannot be written). */
void write_file(const char *name, const char *text);

/* The whole of path, NUL-terminated, its length in *len where len is not
 * NULL; NULL where path cannot be opened. The caller frees it. */
char *slurp(const char *path, size_t *len);

/* Fails the test, showing both, unless hay holds needle. */
void assert_contains(const char *hay, const char *needle);

/* The reduce callbacks' source i out of an array of float pointers. */
const float *src_at(const void *ctx, uint32_t i);

#endif
