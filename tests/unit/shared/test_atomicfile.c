/* test_atomicfile.c — unit tests for shared/atomicfile: a file is replaced
 * whole (content, mode from the umask, no temporary file left), and on any
 * error — the file size limit reached part way (as a full disk shows), a
 * missing directory, a target that cannot be replaced — the old file stays
 * complete, no temporary file is left, and the error names the path and the
 * errno by name and text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/atomicfile.h"
#include "fixture.h"


/* The whole file, NUL-terminated; NULL if it does not exist. */
/* Entries in tmpdir other than . and .., and whether one is a temporary. */
static int dir_entries(int *temporaries)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    *temporaries = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        n++;
        *temporaries += strstr(e->d_name, ".tmp.") != NULL;
    }
    closedir(d);
    return n;
}

static void test_write_and_replace(void **state)
{
    (void)state;
    char err[512] = "";
    const char *p = tmp_path("results.json");
    mode_t old = umask(022);
    assert_int_equal(afile_write(p, "first\n", 6, err, sizeof err), 0);
    umask(old);
    char *got = slurp(p, NULL);
    assert_string_equal(got, "first\n");
    free(got);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644); /* as fopen would make it */
    json_t *doc = json_pack("{s:i, s:[f]}", "a", 1, "b", 0.5);
    assert_int_equal(afile_write_json(p, doc, JSON_COMPACT, err, sizeof err), 0);
    json_decref(doc);
    got = slurp(p, NULL);
    assert_string_equal(got, "{\"a\":1,\"b\":[0.5]}\n");
    free(got);
    int tmps;
    assert_int_equal(dir_entries(&tmps), 1);
    assert_int_equal(tmps, 0);
    /* A file built in a memory stream: written whole, the stream closed
     * and its buffer freed (one owner: the call). */
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    assert_non_null(f);
    fprintf(f, "a,b\n%d,%d\n", 1, 2);
    assert_int_equal(afile_write_memstream(p, f, &text, &tlen, err, sizeof err), 0);
    assert_null(text);
    got = slurp(p, NULL);
    assert_string_equal(got, "a,b\n1,2\n");
    free(got);
    /* An empty file is a file too. */
    assert_int_equal(afile_write(p, "", 0, err, sizeof err), 0);
    size_t len = 99;
    got = slurp(p, &len);
    assert_int_equal(len, 0);
    free(got);
    unlink(p);
}

/* The file size limit stops a write part way, as a full disk does: the old
 * file stays complete, the temporary goes, the error says why. */
static void test_cut_short_keeps_old_file(void **state)
{
    (void)state;
    char err[512] = "";
    const char *p = tmp_path("big.csv");
    assert_int_equal(afile_write(p, "old,complete\n", 13, err, sizeof err), 0);
    size_t n = 1 << 20;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'x', n);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 64 * 1024;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* a failed write, not a dead process */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = afile_write(p, big, n, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    free(big);
    assert_int_equal(rc, -1);
    char want[400];
    snprintf(want, sizeof want, "cannot write %s: EFBIG: %s", p, strerror(EFBIG));
    assert_string_equal(err, want);
    char *got = slurp(p, NULL);
    assert_string_equal(got, "old,complete\n");
    free(got);
    int tmps;
    assert_int_equal(dir_entries(&tmps), 1);
    assert_int_equal(tmps, 0);
    unlink(p);
}

static void test_errors_name_path_and_errno(void **state)
{
    (void)state;
    char err[512] = "";
    const char *p = tmp_path("no-such-dir/results.json");
    assert_int_equal(afile_write(p, "x", 1, err, sizeof err), -1);
    char want[400];
    snprintf(want, sizeof want, "cannot write %s: ENOENT: %s", p, strerror(ENOENT));
    assert_string_equal(err, want);
    /* A directory where the file should go: rename refuses, nothing left. */
    const char *d = tmp_path("adir");
    assert_int_equal(mkdir(d, 0755), 0);
    assert_int_equal(afile_write(d, "x", 1, err, sizeof err), -1);
    snprintf(want, sizeof want, "cannot write %s: EISDIR: %s", d, strerror(EISDIR));
    assert_string_equal(err, want);
    int tmps;
    assert_int_equal(dir_entries(&tmps), 1);
    assert_int_equal(tmps, 0);
    rmdir(d);
    char num[32];
    assert_string_equal(afile_errname(ENOSPC, num, sizeof num), "ENOSPC");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_replace),
        cmocka_unit_test(test_cut_short_keeps_old_file),
        cmocka_unit_test(test_errors_name_path_and_errno),
    };
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
