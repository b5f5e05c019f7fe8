/* test_diff.c — unit tests for master/tools/diff (`psbench-master diff A.json
 * B.json`): the table (metrics, values, B-A, percent change, "-" for a
 * metric one run lacks, "all" before ranks, ranks in numeric order), the
 * configuration differences, --csv (written whole: a target that cannot be
 * written gives the path and the errno by name and leaves no temporary
 * file; a write cut short leaves the old file complete; checked before
 * comparing: its folder made, a folder or FIFO in its place refused), a
 * failed run said first and compared only with --allow-failed, inputs that
 * are not regular files refused without blocking, and the exit codes for
 * unreadable input or a failed run (1) and bad usage (2); what a change
 * costs training (issue 43): the loss per epoch with B-A, the final
 * parameters' relative distance from their params.bin files, "not
 * comparable: why" where there is none, and their CSV rows. */
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

#include "master/tools/diff.h"
#include "shared/paramsfile.h"
#include "fixture.h"


/* The whole file, NUL-terminated; NULL if it cannot be read. */
/* Files in tmpdir whose name holds ".tmp." (an atomic write's temporary). */
static int temporaries(void)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* The line of text that contains needle (copied into line). */
static void find_line(const char *text, const char *needle, char *line, size_t len)
{
    const char *p = strstr(text, needle);
    if (!p) {
        print_error("no line with \"%s\" in:\n%s\n", needle, text);
        fail();
    }
    const char *s = p;
    while (s > text && s[-1] != '\n')
        s--;
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n >= len)
        n = len - 1;
    memcpy(line, s, n);
    line[n] = '\0';
}

#define STATS(mean, p50, p90, p99, count)                                                                      \
    "{\"count\": " #count ", \"min\": 1.0, \"max\": 100.0, \"mean\": " #mean ", \"variance\": 4.0, "           \
    "\"stdev\": 2.0, \"p50\": " #p50 ", \"p75\": 1.0, \"p90\": " #p90 ", \"p95\": 1.0, \"p99\": " #p99 "}"

static const char *run_a =
    "{\"configuration\": {\"batch_size\": 10, \"model\": \"Synthetic\", \"ntrainer\": 2},\n"
    " \"groups\": {\n"
    "  \"trainer\": {\n"
    "   \"all\": {\"batch_level_metric,batch_all\": " STATS(10.0, 9.0, 12.0, 20.0, 100) ",\n"
    "            \"hook_future_metric,rpc_dense\": " STATS(4.0, 4.0, 5.0, 6.0, 400) "},\n"
    "   \"ranks\": {\"10\": {\"batch_level_metric,batch_all\": " STATS(11.0, 9.0, 12.0, 20.0, 50) "},\n"
    "             \"2\": {\"batch_level_metric,batch_all\": " STATS(9.0, 9.0, 12.0, 20.0, 50) "}}},\n"
    "  \"server\": {\n"
    "   \"all\": {\"method_metric,average computation\": " STATS(0.5, 0.5, 0.6, 0.7, 80) "},\n"
    "   \"ranks\": {\"0\": {\"method_metric,average computation\": " STATS(0.5, 0.5, 0.6, 0.7, 80) "}}}\n"
    " },\n"
    " \"trainers\": [{\"rank\": 0, \"host\": \"a\"}]}\n";

static const char *run_b =
    "{\"configuration\": {\"batch_size\": 20, \"model\": \"Synthetic\", \"ntrainer\": 2},\n"
    " \"groups\": {\n"
    "  \"trainer\": {\n"
    "   \"all\": {\"batch_level_metric,batch_all\": " STATS(12.0, 9.0, 10.8, 20.0, 100) ",\n"
    "            \"forward_metric,forward_pass\": " STATS(3.0, 3.0, 3.0, 3.0, 100) "},\n"
    "   \"ranks\": {\"2\": {\"batch_level_metric,batch_all\": " STATS(9.0, 9.0, 12.0, 20.0, 50) "}}},\n"
    "  \"server\": {\n"
    "   \"all\": {\"method_metric,average computation\": " STATS(0.25, 0.5, 0.6, 0.7, 80) "},\n"
    "   \"ranks\": {}}\n"
    " }}\n";

/* Environments: the master's kernel changed; every trainer's BLAS core
 * changed alike; one server's fold changed; finished_at never counts. */
#define ENV(kernel, when) "{\"kernel\": \"" kernel "\", \"cpus\": 16, \"finished_at\": \"" when "\"}"
#define TENV(core) "{\"cpu_model\": \"X\", \"blas\": {\"library\": \"OpenBLAS\", \"core\": \"" core "\"}}"
#define SENV(fold) "{\"cpu_model\": \"X\", \"fold\": \"" fold "\"}"
static const char *env_a =
    "{\"configuration\": {}, \"groups\": {\"trainer\": {\"all\": {\"batch_level_metric,batch_all\": "
    STATS(10.0, 9.0, 12.0, 20.0, 100) "}}},\n"
    " \"environment\": " ENV("6.1", "2026-01-01T00:00:00Z") ",\n"
    " \"trainers\": [{\"rank\": 0, \"environment\": " TENV("Cooperlake") "},"
    "                {\"rank\": 1, \"environment\": " TENV("Cooperlake") "}],\n"
    " \"servers\": [{\"rank\": 0, \"environment\": " SENV("avx2") "},"
    "               {\"rank\": 1, \"environment\": " SENV("avx2") "}]}\n";
static const char *env_b =
    "{\"configuration\": {}, \"groups\": {\"trainer\": {\"all\": {\"batch_level_metric,batch_all\": "
    STATS(12.0, 9.0, 12.0, 20.0, 100) "}}},\n"
    " \"environment\": " ENV("6.18", "2026-02-02T00:00:00Z") ",\n"
    " \"trainers\": [{\"rank\": 0, \"environment\": " TENV("Prescott") "},"
    "                {\"rank\": 1, \"environment\": " TENV("Prescott") "}],\n"
    " \"servers\": [{\"rank\": 0, \"environment\": " SENV("avx2") "},"
    "               {\"rank\": 1, \"environment\": " SENV("portable") "}]}\n";

/* DDP + RPC runs: the seed's pattern, psbench's, and one from before the
 * pattern was recorded (psbench's way). */
#define DDP(pattern) \
    "{\"configuration\": {}, \"groups\": {\"trainer\": {\"all\": {\"epoch_metric,epoch\": " \
    STATS(10.0, 9.0, 12.0, 20.0, 100) "}}}, \"ddp_rpc\": {\"epochs\": []" pattern "}}\n"
static const char *ddp_seed = DDP(", \"rpc_pattern\": \"seed\"");
static const char *ddp_psbench = DDP(", \"rpc_pattern\": \"psbench\"");
static const char *ddp_old = DDP("");

static int diff_setup(void **state)
{
    if (tmpdir_setup(state) < 0)
        return -1;
    write_file("ddp_seed.json", ddp_seed);
    write_file("ddp_psbench.json", ddp_psbench);
    write_file("ddp_old.json", ddp_old);
    write_file("a.json", run_a);
    write_file("b.json", run_b);
    write_file("env_a.json", env_a);
    write_file("env_b.json", env_b);
    return 0;
}

/* Run diff_main with the given arguments (after "diff"), capturing both
 * streams. */
typedef struct result {
    int rc;
    char *out, *err;
} result;

static result run(const char *a1, const char *a2, const char *a3, const char *a4)
{
    const char *in[] = {a1, a2, a3, a4};
    char *argv[6];
    int argc = 0;
    argv[argc++] = strdup("diff");
    for (int i = 0; i < 4 && in[i]; i++)
        argv[argc++] = strdup(in[i]);
    argv[argc] = NULL;
    result r = {0};
    size_t ol = 0, el = 0;
    FILE *out = open_memstream(&r.out, &ol);
    FILE *err = open_memstream(&r.err, &el);
    r.rc = diff_main(argc, argv, out, err);
    fclose(out);
    fclose(err);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return r;
}

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

static void test_table(void **state)
{
    (void)state;
    result r = run(tmp_path("a.json"), tmp_path("b.json"), NULL, NULL);
    if (r.rc != 0)
        print_error("%s\n", r.err);
    assert_int_equal(r.rc, 0);
    const char *o = r.out;
    assert_contains(o, "A: ");
    assert_contains(o, "a.json");
    assert_contains(o, "B-A");
    assert_contains(o, "change");

    /* The mean of batch_all: 10 -> 12, +2, +20%. */
    char line[512];
    find_line(o, "batch_level_metric,batch_all", line, sizeof line);
    assert_contains(line, "count");
    assert_contains(line, "100");
    find_line(strstr(o, "batch_level_metric,batch_all"), "mean", line, sizeof line);
    assert_contains(line, "10.000");
    assert_contains(line, "12.000");
    assert_contains(line, "+2.000");
    assert_contains(line, "+20.0%");
    /* p90: 12 -> 10.8, -1.2, -10%. */
    find_line(strstr(o, "batch_level_metric,batch_all"), "p90", line, sizeof line);
    assert_contains(line, "12.000");
    assert_contains(line, "10.800");
    assert_contains(line, "-1.200");
    assert_contains(line, "-10.0%");
    /* Unchanged p50: +0.0%. */
    find_line(strstr(o, "batch_level_metric,batch_all"), "p50", line, sizeof line);
    assert_contains(line, "+0.000");
    assert_contains(line, "+0.0%");

    /* A metric only in A, and one only in B: "-" on the other side. */
    find_line(o, "hook_future_metric,rpc_dense", line, sizeof line);
    assert_contains(line, "400");
    assert_contains(line, " -");
    find_line(o, "forward_metric,forward_pass", line, sizeof line);
    assert_contains(line, "100");
    assert_contains(line, "- ");

    /* Server: the average computation halves. */
    const char *srv = strstr(o, "== server: all ranks ==");
    assert_non_null(srv);
    find_line(strstr(srv, "method_metric,average computation"), "mean", line, sizeof line);
    assert_contains(line, "0.500");
    assert_contains(line, "0.250");
    assert_contains(line, "-0.250");
    assert_contains(line, "-50.0%");

    /* Order: trainer before server, "all" before ranks, ranks numeric. */
    const char *t_all = strstr(o, "== trainer: all ranks ==");
    const char *t_2 = strstr(o, "== trainer: rank 2 ==");
    const char *t_10 = strstr(o, "== trainer: rank 10 ==");
    const char *s_0 = strstr(o, "== server: rank 0 ==");
    assert_non_null(t_all);
    assert_non_null(t_2);
    assert_non_null(t_10);
    assert_non_null(s_0);
    assert_true(t_all < t_2 && t_2 < t_10 && t_10 < srv && srv < s_0);

    /* Configuration differences. */
    assert_contains(o, "configuration differences:");
    assert_contains(o, "batch_size: 10 -> 20");
    assert_null(strstr(o, "model: "));
    assert_string_equal(r.err, "");
    result_free(&r);
}

/* What the runs computed with differs: said before any figure. */
static void test_environment(void **state)
{
    (void)state;
    result r = run(tmp_path("env_a.json"), tmp_path("env_b.json"), NULL, NULL);
    assert_int_equal(r.rc, 0);
    const char *o = r.out;
    const char *head = strstr(o, "environment differences");
    assert_non_null(head);
    assert_contains(o, "  master: kernel: \"6.1\" -> \"6.18\"\n");
    assert_contains(o, "  every trainer (2): blas.core: \"Cooperlake\" -> \"Prescott\"\n");
    assert_contains(o, "  server 1: fold: \"avx2\" -> \"portable\"\n");
    assert_null(strstr(o, "server 0:"));
    assert_null(strstr(o, "finished_at"));
    assert_null(strstr(o, "cpu_model"));
    const char *figures = strstr(o, "== trainer: all ranks ==");
    assert_non_null(figures);
    assert_true(head < figures);
    result_free(&r);
    /* The same file: the same environment; files without: not recorded. */
    r = run(tmp_path("env_a.json"), tmp_path("env_a.json"), NULL, NULL);
    assert_contains(r.out, "environment: same\n");
    result_free(&r);
    r = run(tmp_path("a.json"), tmp_path("b.json"), NULL, NULL);
    assert_contains(r.out, "environment: not recorded\n");
    result_free(&r);
}

/* Runs in different RPC patterns say so before any figure. */
static void test_rpc_pattern(void **state)
{
    (void)state;
    result r = run(tmp_path("ddp_seed.json"), tmp_path("ddp_psbench.json"), NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "DDP + RPC rpc_pattern differs: seed -> psbench (the runs measure different patterns)\n");
    assert_true(strstr(r.out, "rpc_pattern differs") < strstr(r.out, "== trainer: all ranks =="));
    result_free(&r);
    r = run(tmp_path("ddp_old.json"), tmp_path("ddp_seed.json"), NULL, NULL);
    assert_contains(r.out, "DDP + RPC rpc_pattern differs: psbench (a result from before rpc_pattern: psbench's "
                           "way) -> seed");
    result_free(&r);
    r = run(tmp_path("ddp_seed.json"), tmp_path("ddp_seed.json"), NULL, NULL);
    assert_contains(r.out, "DDP + RPC rpc_pattern: seed (both)\n");
    result_free(&r);
    r = run(tmp_path("a.json"), tmp_path("b.json"), NULL, NULL); /* not DDP + RPC: nothing said */
    assert_null(strstr(r.out, "rpc_pattern"));
    result_free(&r);
}

static void test_same_file(void **state)
{
    (void)state;
    result r = run(tmp_path("a.json"), tmp_path("a.json"), NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "configuration: same");
    assert_null(strstr(r.out, "+20.0%"));
    assert_contains(r.out, "+0.0%");
    result_free(&r);
}

static void test_csv(void **state)
{
    (void)state;
    result r = run("--csv", tmp_path("out.csv"), tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 0);
    result_free(&r);
    FILE *f = fopen(tmp_path("out.csv"), "r");
    assert_non_null(f);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_contains(buf, "group,rank,metric,stat,a,b,b_minus_a,change_pct\n");
    assert_contains(buf, "trainer,all,\"batch_level_metric,batch_all\",mean,10.000000,12.000000,2.000000,20.000\n");
    assert_contains(buf, "trainer,all,\"hook_future_metric,rpc_dense\",mean,4.000000,,,\n");
    assert_contains(buf, "server,0,\"method_metric,average computation\",mean,0.500000,,,\n");
    /* The full file, to the last row (server rank 0, max). */
    assert_true(n < sizeof buf - 1);
    const char *last = "server,0,\"method_metric,average computation\",max,100.000000,,,\n";
    assert_true(n > strlen(last));
    assert_string_equal(buf + n - strlen(last), last);
    assert_int_equal(temporaries(), 0);
}

/* A --csv target that cannot be written: exit 1, the path and the errno by
 * name and text, no temporary file left, an existing file left whole. */
static void test_csv_unwritable(void **state)
{
    (void)state;
    char want[600];
    /* A folder that does not exist is made (like mkdir -p). */
    const char *p = tmp_path("no-such-dir/x.csv");
    result r = run("--csv", p, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "== trainer: all ranks ==");
    result_free(&r);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(rmdir(tmp_path("no-such-dir")), 0);

    /* Checked before anything is compared (exit 2, nothing on out): a
     * directory where the file should go, a FIFO there, a regular file
     * where its folder should be. */
    const char *d = tmp_path("adir");
    assert_int_equal(mkdir(d, 0755), 0);
    r = run("--csv", d, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 2);
    snprintf(want, sizeof want, "psbench-master diff: --csv %s: %s is a directory, not a regular file\n", d, d);
    assert_string_equal(r.err, want);
    assert_string_equal(r.out, "");
    result_free(&r);
    assert_int_equal(temporaries(), 0);
    assert_int_equal(rmdir(d), 0);
    const char *fifo = tmp_path("fifo.csv");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    r = run("--csv", fifo, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 2);
    snprintf(want, sizeof want, "psbench-master diff: --csv %s: %s is a FIFO (named pipe), not a regular file\n",
             fifo, fifo);
    assert_string_equal(r.err, want);
    assert_string_equal(r.out, "");
    result_free(&r);
    assert_int_equal(unlink(fifo), 0);
    const char *under = tmp_path("a.json/x.csv");
    r = run("--csv", under, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 2);
    snprintf(want, sizeof want, "psbench-master diff: --csv %s: %s is a regular file, not a directory\n", under,
             tmp_path("a.json"));
    assert_string_equal(r.err, want);
    assert_string_equal(r.out, "");
    result_free(&r);
    assert_int_equal(temporaries(), 0);

    /* The file size limit stops the write part way, as a full disk does:
     * the old CSV stays complete, never cut short. */
    const char *k = tmp_path("keep.csv");
    r = run("--csv", k, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(r.rc, 0);
    result_free(&r);
    char *before = slurp(k, NULL);
    assert_non_null(before);
    assert_true(strlen(before) > 1024);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 512;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* a failed write, not a dead process */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    r = run("--csv", k, tmp_path("a.json"), tmp_path("b.json"));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(r.rc, 1);
    snprintf(want, sizeof want, "psbench-master diff: cannot write %s: EFBIG: %s\n", k, strerror(EFBIG));
    assert_string_equal(r.err, want);
    result_free(&r);
    char *after = slurp(k, NULL);
    assert_non_null(after);
    assert_string_equal(after, before);
    free(before);
    free(after);
    assert_int_equal(temporaries(), 0);
}

static void test_unreadable(void **state)
{
    (void)state;
    /* A missing file: 1, the message names it. */
    result r = run(tmp_path("missing.json"), tmp_path("b.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "missing.json");
    assert_contains(r.err, "No such file");
    result_free(&r);
    r = run(tmp_path("a.json"), tmp_path("missing.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "missing.json");
    result_free(&r);

    /* Malformed JSON: file, line and column. */
    write_file("bad.json", "{\"groups\": {\n  \"trainer\": [1,,]\n}}\n");
    r = run(tmp_path("a.json"), tmp_path("bad.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    char want[300];
    snprintf(want, sizeof want, "%s:2:", tmp_path("bad.json"));
    assert_contains(r.err, want);
    assert_contains(r.err, "invalid JSON");
    result_free(&r);

    /* Valid JSON that is not a results.json. */
    write_file("nogroups.json", "{\"unit\": \"ms\"}\n");
    r = run(tmp_path("nogroups.json"), tmp_path("b.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "nogroups.json");
    assert_contains(r.err, "no 'groups' object");
    result_free(&r);

    write_file("array.json", "[1, 2, 3]\n");
    r = run(tmp_path("a.json"), tmp_path("array.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "array.json");
    assert_contains(r.err, "not a JSON object");
    result_free(&r);

    write_file("badrank.json", "{\"groups\": {\"trainer\": {\"ranks\": {\"0\": {\"m\": 5}}}}}\n");
    r = run(tmp_path("a.json"), tmp_path("badrank.json"), NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "badrank.json: groups.trainer.ranks.0.m is not a stats object");
    result_free(&r);

}

/* Inputs that are not regular files: refused at once, naming the path and
 * what it is, never read (a FIFO would block for ever; alarm() turns a
 * hang into a failure). */
static void test_not_regular(void **state)
{
    (void)state;
    const char *fifo = tmp_path("in.fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20);
    result r = run(fifo, tmp_path("b.json"), NULL, NULL);
    alarm(0);
    assert_int_equal(r.rc, 1);
    char want[600];
    snprintf(want, sizeof want, "psbench-master diff: cannot read %s: a FIFO (named pipe), not a regular file\n",
             fifo);
    assert_string_equal(r.err, want);
    result_free(&r);
    assert_int_equal(unlink(fifo), 0);
    r = run(tmp_path("a.json"), tmpdir, NULL, NULL);
    assert_int_equal(r.rc, 1);
    snprintf(want, sizeof want, "psbench-master diff: cannot read %s: a directory, not a regular file\n", tmpdir);
    assert_string_equal(r.err, want);
    result_free(&r);
}

/* A failed run: said first; not compared (exit 1) unless --allow-failed,
 * which compares it with the failure as the output's first line. A run's
 * warnings come before its figures. */
static void test_failed_run(void **state)
{
    (void)state;
    /* run_a with how it ended: failed, and a warning. */
    char failed[4096];
    snprintf(failed, sizeof failed, "{\"phase\": \"failed\", \"error\": \"server 0 (h1) disconnected\", "
             "\"warnings\": [\"trainer 1 (h2): loss diverged\"], %s", strchr(run_a, '{') + 1);
    write_file("failed.json", failed);
    write_file("done.json", "{\"phase\": \"done\", \"error\": null, \"groups\": {}}\n");
    const char *fp = tmp_path("failed.json"), *dp = tmp_path("done.json");
    char want[1200];
    result r = run(dp, fp, NULL, NULL);
    assert_int_equal(r.rc, 1);
    snprintf(want, sizeof want, "psbench-master diff: %s is a failed run: server 0 (h1) disconnected (its figures "
             "stop where it ended; --allow-failed compares it anyway)\n", fp);
    assert_string_equal(r.err, want);
    assert_string_equal(r.out, "");
    result_free(&r);
    r = run(fp, dp, NULL, NULL); /* as A too */
    assert_int_equal(r.rc, 1);
    assert_contains(r.err, "is a failed run: server 0 (h1) disconnected");
    result_free(&r);

    r = run("--allow-failed", dp, fp, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.err, "");
    snprintf(want, sizeof want, "B (%s) is a failed run: server 0 (h1) disconnected\nB: warning: trainer 1 (h2): "
             "loss diverged\ncomparable: not known (a configuration is not recorded); no environment differs\nA: %s\nB: "
             "%s\n", fp, dp, fp);
    assert_true(strncmp(r.out, want, strlen(want)) == 0);
    assert_contains(r.out, "== trainer: all ranks ==");
    result_free(&r);

    /* Two finished runs: no such line. */
    r = run(dp, dp, NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "comparable: ", 12) == 0);
    result_free(&r);
    unlink(fp);
    unlink(dp);
}

static void test_usage(void **state)
{
    (void)state;
    result r = run(NULL, NULL, NULL, NULL);
    assert_int_equal(r.rc, 2);
    assert_contains(r.err, "usage: psbench-master diff");
    result_free(&r);

    r = run(tmp_path("a.json"), NULL, NULL, NULL);
    assert_int_equal(r.rc, 2);
    assert_contains(r.err, "two results.json files");
    result_free(&r);

    r = run(tmp_path("a.json"), tmp_path("b.json"), tmp_path("a.json"), NULL);
    assert_int_equal(r.rc, 2);
    assert_contains(r.err, "too many arguments");
    result_free(&r);

    r = run("--frobnicate", tmp_path("a.json"), tmp_path("b.json"), NULL);
    assert_int_equal(r.rc, 2);
    assert_contains(r.err, "unknown option '--frobnicate'");
    result_free(&r);

    r = run(tmp_path("a.json"), tmp_path("b.json"), "--csv", NULL);
    assert_int_equal(r.rc, 2);
    assert_contains(r.err, "--csv needs a file name");
    result_free(&r);

    r = run("--help", NULL, NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "usage: psbench-master diff");
    assert_string_equal(r.err, "");
    result_free(&r);
}

/* Comparable first: runs of different models are refused unless --force;
 * a nested configuration value that differs is named by its path, keys
 * that do not matter (listen, http, out) are not. */
static void test_comparable(void **state)
{
    (void)state;
    write_file("dummy.json", "{\"configuration\": {\"model\": \"DummyModel\", \"listen\": \"a:1\", \"out\": \"x\","
                             " \"resolved\": {\"trainer\": {\"bucket_cap_mb\": 25, \"lr\": 0.1}}}, \"groups\": {}}\n");
    write_file("dummy4.json", "{\"configuration\": {\"model\": \"DummyModel\", \"listen\": \"b:2\", \"out\": \"y\","
                              " \"resolved\": {\"trainer\": {\"bucket_cap_mb\": 4, \"lr\": 0.1}}}, \"groups\": {}}\n");
    write_file("dummy_out.json", "{\"configuration\": {\"model\": \"DummyModel\", \"listen\": \"c:3\", \"http\": "
                                 "\"h\", \"out\": \"z\", \"resolved\": {\"trainer\": {\"bucket_cap_mb\": 25, \"lr\": "
                                 "0.1}}}, \"groups\": {}}\n");
    write_file("hybrid.json", "{\"configuration\": {\"model\": \"HybridModel\"}, \"groups\": {}}\n");
    const char *d = tmp_path("dummy.json"), *d4 = tmp_path("dummy4.json"), *h = tmp_path("hybrid.json");
    result r = run(d, h, NULL, NULL);
    assert_int_equal(r.rc, 1);
    assert_string_equal(r.out, "");
    assert_contains(r.err, "are not comparable: model DummyModel -> HybridModel (different workloads; --force "
                           "compares them anyway)\n");
    result_free(&r);
    r = run("--force", d, h, NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "comparable: no (model DummyModel -> HybridModel: different workloads), compared "
                               "as --force asks\n", 80) == 0);
    result_free(&r);
    r = run(d, d4, NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "comparable: yes, configurations differ in resolved.trainer.bucket_cap_mb; no "
                               "environment differs\n", 60) == 0);
    assert_contains(r.out, "configuration differences:\n  resolved.trainer.bucket_cap_mb: 25 -> 4\n");
    assert_null(strstr(r.out, "differs\n  resolved: differs"));
    assert_null(strstr(r.out, "listen:"));
    assert_null(strstr(r.out, "out:"));
    result_free(&r);
    r = run(d, tmp_path("dummy_out.json"), NULL, NULL); /* only where it listened and wrote */
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "comparable: yes, the same configuration; no environment differs\n", 60) == 0);
    assert_contains(r.out, "configuration: same\n");
    result_free(&r);
    unlink(d);
    unlink(d4);
    unlink(h);
    unlink(tmp_path("dummy_out.json"));
}

/* A --runs series: DIR/run-001/results.json with DIR/summary.json. */
static void write_series(const char *dir, double mean, double lo, double hi, double mine)
{
    char path[300], text[1200];
    snprintf(path, sizeof path, "%s/%s", tmpdir, dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/run-001", tmpdir, dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/run-001/results.json", dir);
    snprintf(text, sizeof text, "{\"configuration\": {\"model\": \"DummyModel\"}, \"groups\": {}, \"run\": 1, "
             "\"runs\": 3, \"headline\": {\"trainers\": [{\"trainer\": \"all\", \"step_p50_ms\": %g}]}}\n", mine);
    write_file(path, text);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    snprintf(text, sizeof text, "{\"runs\": 3, \"trainers\": [{\"trainer\": \"all\", \"step_p50_ms\": {\"n\": 3, "
             "\"mean\": %g, \"stdev\": 1, \"ci95\": [%g, %g], \"values\": [%g, %g, %g]}}]}\n", mean, lo, hi,
             mean - 1, mean, mean + 1);
    write_file(path, text);
}

static void unlink_series(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/run-001/results.json", dir);
    unlink(tmp_path(path));
    snprintf(path, sizeof path, "%s/summary.json", dir);
    unlink(tmp_path(path));
    snprintf(path, sizeof path, "%s/run-001", dir);
    rmdir(tmp_path(path));
    rmdir(tmp_path(dir));
}

/* The headline's noise: within noise where both sides are series whose
 * intervals overlap, beyond where they do not; one run each says so. */
static void test_noise(void **state)
{
    (void)state;
    write_series("sa", 100, 90, 110, 99);
    write_series("sb", 105, 95, 115, 105);
    write_series("sc", 150, 140, 160, 151);
    write_series("sd", 150, 140, 160, 42); /* a summary of another series (the folder reused) */
    char line[512];
    result r = run(tmp_path("sa/run-001/results.json"), tmp_path("sb/run-001/results.json"), NULL, NULL);
    assert_int_equal(r.rc, 0);
    find_line(r.out, "  step_p50_ms", line, sizeof line);
    assert_contains(line, "100 [90, 110]");
    assert_contains(line, "105 [95, 115]");
    assert_contains(line, "+5.0%");
    assert_contains(line, "within noise");
    assert_contains(r.out, "noise: within noise where the two 95% intervals overlap (3 and 3 runs)\n");
    assert_true(strstr(r.out, "  step_p50_ms") < strstr(r.out, "configuration: same"));
    result_free(&r);
    r = run(tmp_path("sa/run-001/results.json"), tmp_path("sc/run-001/results.json"), NULL, NULL);
    find_line(r.out, "  step_p50_ms", line, sizeof line);
    assert_contains(line, "beyond noise");
    result_free(&r);
    r = run(tmp_path("a.json"), tmp_path("b.json"), NULL, NULL);
    assert_contains(r.out, "one run each: no noise estimate");
    assert_null(strstr(r.out, "within noise"));
    result_free(&r);
    r = run(tmp_path("sa/run-001/results.json"), tmp_path("sd/run-001/results.json"), NULL, NULL);
    find_line(r.out, "  step_p50_ms", line, sizeof line);
    assert_contains(line, "100 [90, 110]");
    assert_contains(line, " 42 ");
    assert_contains(r.out, "B is one run (no summary.json of its series beside it): no noise estimate\n");
    result_free(&r);
    unlink_series("sd");
    unlink_series("sa");
    unlink_series("sb");
    unlink_series("sc");
}


/* A results.json with trainer 0's loss per epoch and final_params naming
 * `params` (written with the n floats v beside it; NULL: no final_params). */
static void write_trained(const char *name, const char *loss, const char *params, const float *v, uint64_t n)
{
    char hex[65] = "", err[512], doc[2048];
    if (params) {
        assert_int_equal(paramsfile_sha256(v, n, hex), 0);
        assert_int_equal(paramsfile_write(tmp_path(params), v, n, hex, err, sizeof err), 0);
    }
    char fp[512] = "";
    if (params)
        snprintf(fp, sizeof fp, ", \"final_params\": {\"trainer\": 0, \"file\": \"%s\", \"count\": %llu, "
                 "\"sha256\": \"%s\", \"l2_norm\": %.17g, \"why\": null}", params, (unsigned long long)n, hex,
                 paramsfile_l2_norm(v, n));
    snprintf(doc, sizeof doc,
             "{\"configuration\": {\"model\": \"Tiny\"}, \"groups\": {}, \"trainers\": [{\"rank\": 0, "
             "\"loss_per_epoch\": %s}]%s}\n", loss, fp);
    write_file(name, doc);
}

/* What a change costs training (issue 43): the loss per epoch with B-A,
 * the final parameters' relative distance from their files, and "not
 * comparable: why" where it cannot be given; the CSV's training rows. */
static void test_training(void **state)
{
    (void)state;
    const float a[2] = {3.0f, 4.0f}, b[2] = {3.0f, 4.5f}, c[3] = {1, 2, 3};
    write_trained("ta.json", "[2.5, 2.0]", "ta.bin", a, 2);
    write_trained("tb.json", "[2.5, 1.75]", "tb.bin", b, 2);
    result r = run("--csv", tmp_path("t.csv"), tmp_path("ta.json"), tmp_path("tb.json"));
    assert_int_equal(r.rc, 0);
    char line[512];
    find_line(r.out, "      0      2", line, sizeof line);
    assert_contains(line, "2");
    assert_contains(line, "1.75");
    assert_contains(line, "-0.25");
    assert_contains(r.out, "final parameters: ||A|| 5, ||B|| 5.40832691\n");
    assert_contains(r.out, "relative distance ||B-A||/||A||: 0.1 (2 parameters)\n");
    result_free(&r);
    char *csv = slurp(tmp_path("t.csv"), NULL);
    assert_non_null(csv);
    assert_contains(csv, "training,0,loss_epoch_2,mean,2,1.75,-0.25,-12.5\n");
    assert_contains(csv, "training,0,final_params,relative_l2_distance,,,0.1,\n");
    free(csv);
    /* The same run: distance 0, every loss difference 0. */
    r = run(tmp_path("ta.json"), tmp_path("ta.json"), NULL, NULL);
    assert_contains(r.out, "relative distance ||B-A||/||A||: 0 (2 parameters)\n");
    find_line(r.out, "      0      1", line, sizeof line);
    assert_contains(line, "+0");
    result_free(&r);
    /* B without final_params (an older run), B of another model size, B's
     * file changed after its results.json: not comparable, and why. */
    write_trained("old.json", "[2.5, 1.75]", NULL, NULL, 0);
    r = run(tmp_path("ta.json"), tmp_path("old.json"), NULL, NULL);
    assert_int_equal(r.rc, 0);
    assert_contains(r.out, "relative distance ||B-A||/||A||: not comparable: ");
    assert_contains(r.out, "old.json has no final_params");
    result_free(&r);
    write_trained("tc.json", "[2.5, 1.75]", "tc.bin", c, 3);
    r = run(tmp_path("ta.json"), tmp_path("tc.json"), NULL, NULL);
    assert_contains(r.out, "not comparable: A has 2 parameters, B 3 (another model)\n");
    result_free(&r);
    char hex[65], err[512];
    assert_int_equal(paramsfile_sha256(a, 2, hex), 0);
    assert_int_equal(paramsfile_write(tmp_path("tb.bin"), a, 2, hex, err, sizeof err), 0);
    r = run(tmp_path("ta.json"), tmp_path("tb.json"), NULL, NULL);
    assert_contains(r.out, "not comparable: ");
    assert_contains(r.out, "holds other parameters than");
    result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_same_file),
        cmocka_unit_test(test_rpc_pattern),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_csv_unwritable),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_failed_run),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_comparable),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_training),
    };
    return cmocka_run_group_tests(tests, diff_setup, tmpdir_teardown);
}
