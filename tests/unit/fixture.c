/* fixture.c — see fixture.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* program_invocation_short_name */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

char tmpdir[64];

int tmpdir_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/psbench_%s_XXXXXX", program_invocation_short_name);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tmpdir_teardown(void **state)
{
    (void)state;
    if (!tmpdir[0])
        return 0;
    return nftw(tmpdir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int config_setup(void **state)
{
#ifdef PSBENCH_SOURCE_CONFIG_DIR
    setenv("PSBENCH_CONFIG_DIR", PSBENCH_SOURCE_CONFIG_DIR, 1);
    unsetenv("PSBENCH_TOKEN");
    return tmpdir_setup(state);
#else
    (void)state;
    fprintf(stderr, "config_setup: this test is built without PSBENCH_SOURCE_CONFIG_DIR\n");
    return -1;
#endif
}

const char *tmp_path(const char *name)
{
    static char p[8][256];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof p[i], "%s/%s", tmpdir, name);
    return p[i];
}

void write_file(const char *name, const char *text)
{
    FILE *f = fopen(tmp_path(name), "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 256;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        buf[n++] = (char)c;
    }
    fclose(f);
    if (!buf)
        buf = calloc(1, 1);
    assert_non_null(buf);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

void assert_contains(const char *hay, const char *needle)
{
    if (!hay || !strstr(hay, needle)) {
        print_error("expected \"%s\" in:\n%s\n", needle, hay ? hay : "(null)");
        fail();
    }
}

const float *src_at(const void *ctx, uint32_t i)
{
    float *const *s = ctx;
    return s[i];
}
