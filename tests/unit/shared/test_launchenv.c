/* test_launchenv.c — a rank's place from a launcher's environment
 * (shared/launchenv.c): each launcher's variables, the precedence (a flag
 * beats PSBENCH_* beats the launcher), the ports beside MASTER_PORT, Slurm's
 * host lists as scontrol expands them, and psbench-node's rank map. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "shared/launchenv.h"

static launch_place read_ok(const launch_flags *f, char *const *envp)
{
    launch_place p;
    char err[300] = "";
    if (launch_read(&p, f, envp, err, sizeof err) != 0)
        fail_msg("refused: %s", err);
    return p;
}

static void read_refused(const launch_flags *f, char *const *envp, const char *want)
{
    launch_place p;
    char err[300] = "";
    assert_int_equal(launch_read(&p, f, envp, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("'%s' does not say '%s'", err, want);
}

#define NUM(n, val, src)                                                                                           \
    do {                                                                                                           \
        assert_true((n).set);                                                                                      \
        assert_int_equal((n).v, (val));                                                                            \
        assert_string_equal((n).from, (src));                                                                      \
    } while (0)

static void test_torchrun(void **state)
{
    (void)state;
    char *env[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
                   "MASTER_ADDR=10.0.0.5", "MASTER_PORT=29400", "TORCHELASTIC_RUN_ID=abc", NULL};
    launch_place p = read_ok(NULL, env);
    assert_string_equal(p.launcher, "torchrun");
    NUM(p.rank, 3, "RANK");
    NUM(p.world, 4, "WORLD_SIZE");
    NUM(p.local_rank, 1, "LOCAL_RANK");
    assert_string_equal(p.master_addr.v, "10.0.0.5");
    assert_string_equal(p.master_addr.from, "MASTER_ADDR");
    /* Never MASTER_PORT itself: torchrun's store may hold it. */
    NUM(p.port, 29401, "MASTER_PORT+1");
    NUM(p.http_port, 29402, "MASTER_PORT+2");
}

static void test_pytorchjob_and_ray(void **state)
{
    (void)state;
    /* PyTorchJob: the same variables, no TorchElastic; a host name. */
    char *job[] = {"RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=job-master-0.job.ns.svc", "MASTER_PORT=23456", NULL};
    launch_place p = read_ok(NULL, job);
    assert_string_equal(p.launcher, "pytorch");
    assert_string_equal(p.master_addr.v, "job-master-0.job.ns.svc");
    NUM(p.port, 23457, "MASTER_PORT+1");
    /* Ray Train's two variables, the rank given as a flag. */
    char *ray[] = {"MASTER_ADDR=172.16.0.2", "MASTER_PORT=40000", NULL};
    launch_flags f = {.rank = "2", .world_size = "4"};
    p = read_ok(&f, ray);
    assert_string_equal(p.launcher, "pytorch");
    NUM(p.rank, 2, "--rank");
    NUM(p.world, 4, "--world-size");
    assert_false(p.local_rank.set);
    NUM(p.http_port, 40002, "MASTER_PORT+2");
}

static void test_slurm(void **state)
{
    (void)state;
    char *env[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_NODEID=2",
                   "SLURM_JOB_NODELIST=node[01-03,7]", NULL};
    launch_place p = read_ok(NULL, env);
    assert_string_equal(p.launcher, "slurm");
    NUM(p.rank, 5, "SLURM_PROCID");
    NUM(p.world, 8, "SLURM_NTASKS");
    NUM(p.local_rank, 1, "SLURM_LOCALID");
    assert_string_equal(p.master_addr.v, "node01");
    assert_string_equal(p.master_addr.from, "SLURM_JOB_NODELIST");
    NUM(p.port, 29500, "default");
    NUM(p.http_port, 8080, "default");
    /* The step's list first; MASTER_ADDR beats both. */
    char *step[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_STEP_NODELIST=b[3-4]", "SLURM_JOB_NODELIST=a[1-2]",
                    NULL};
    p = read_ok(NULL, step);
    assert_string_equal(p.master_addr.v, "b3");
    assert_string_equal(p.master_addr.from, "SLURM_STEP_NODELIST");
    char *addr[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_NODELIST=a[1-2]", "MASTER_ADDR=head", NULL};
    p = read_ok(NULL, addr);
    assert_string_equal(p.master_addr.v, "head");
    /* A list that does not parse is refused, naming the variable. */
    char *bad[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_NODELIST=node[01-", NULL};
    read_refused(NULL, bad, "SLURM_JOB_NODELIST='node[01-'");
}

static void test_kubernetes(void **state)
{
    (void)state;
    char *env[] = {"JOB_COMPLETION_INDEX=2", NULL};
    launch_flags f = {.master_addr = "psb-0.psb"};
    launch_place p = read_ok(&f, env);
    assert_string_equal(p.launcher, "kubernetes");
    NUM(p.rank, 2, "JOB_COMPLETION_INDEX");
    assert_false(p.world.set);
    assert_string_equal(p.master_addr.v, "psb-0.psb");
    assert_string_equal(p.master_addr.from, "--master-addr");
    char *env2[] = {"JOB_COMPLETION_INDEX=0", "PSBENCH_MASTER_ADDR=js-workers-0-0.js", NULL};
    p = read_ok(NULL, env2);
    assert_string_equal(p.master_addr.from, "PSBENCH_MASTER_ADDR");
}

static void test_precedence(void **state)
{
    (void)state;
    char *env[] = {"RANK=1", "PSBENCH_RANK=2", "WORLD_SIZE=8", "PSBENCH_WORLD_SIZE=6", "LOCAL_RANK=1",
                   "PSBENCH_LOCAL_RANK=0", "MASTER_ADDR=a", "PSBENCH_MASTER_ADDR=b", "MASTER_PORT=1000",
                   "PSBENCH_PORT=2000", "PSBENCH_HTTP_PORT=3000", "TORCHELASTIC_RUN_ID=x", NULL};
    /* PSBENCH_* beats the launcher ... */
    launch_place p = read_ok(NULL, env);
    NUM(p.rank, 2, "PSBENCH_RANK");
    NUM(p.world, 6, "PSBENCH_WORLD_SIZE");
    NUM(p.local_rank, 0, "PSBENCH_LOCAL_RANK");
    assert_string_equal(p.master_addr.v, "b");
    NUM(p.port, 2000, "PSBENCH_PORT");
    NUM(p.http_port, 3000, "PSBENCH_HTTP_PORT");
    assert_string_equal(p.launcher, "torchrun"); /* still what set the rest */
    /* ... and a flag beats both. */
    launch_flags f = {.rank = "3", .world_size = "5", .local_rank = "4", .master_addr = "c", .port = "4000",
                      .http_port = "5000"};
    p = read_ok(&f, env);
    NUM(p.rank, 3, "--rank");
    NUM(p.world, 5, "--world-size");
    NUM(p.local_rank, 4, "--local-rank");
    assert_string_equal(p.master_addr.v, "c");
    NUM(p.port, 4000, "--port");
    NUM(p.http_port, 5000, "--http-port");
    /* Only PSBENCH_*: psbench's own place. */
    char *own[] = {"PSBENCH_RANK=0", "PSBENCH_WORLD_SIZE=2", NULL};
    p = read_ok(NULL, own);
    assert_string_equal(p.launcher, "psbench");
    /* An empty variable is an unset one. */
    char *empty[] = {"PSBENCH_RANK=", "RANK=1", "WORLD_SIZE=2", NULL};
    p = read_ok(NULL, empty);
    NUM(p.rank, 1, "RANK");
}

static void test_refusals(void **state)
{
    (void)state;
    char *r1[] = {"RANK=x", NULL};
    read_refused(NULL, r1, "RANK='x' is not a rank");
    char *r2[] = {"RANK=-1", NULL};
    read_refused(NULL, r2, "RANK='-1'");
    char *r3[] = {"RANK=4", "WORLD_SIZE=4", NULL};
    read_refused(NULL, r3, "RANK=4 is not below WORLD_SIZE=4");
    char *r4[] = {"WORLD_SIZE=0", NULL};
    read_refused(NULL, r4, "WORLD_SIZE=0");
    char *r5[] = {"MASTER_PORT=70000", NULL};
    read_refused(NULL, r5, "MASTER_PORT='70000' is not a port");
    char *r6[] = {"MASTER_PORT=65534", NULL};
    read_refused(NULL, r6, "MASTER_PORT+1 and +2");
    char *r7[] = {"MASTER_ADDR=a b", NULL};
    read_refused(NULL, r7, "MASTER_ADDR='a b' is not a host");
    launch_flags f = {.port = "8080"};
    read_refused(&f, NULL, "both 8080");
    char *r8[] = {"RANK= 1", NULL};
    read_refused(NULL, r8, "RANK=' 1'");
    /* A flag's bad value is named by the flag. */
    launch_flags g = {.rank = "two"};
    read_refused(&g, NULL, "--rank='two'");
}

/* ---- host lists ---------------------------------------------------------- */

typedef struct hosts {
    char all[1024];
} hosts;

static int collect(const char *h, void *ctx)
{
    hosts *c = ctx;
    size_t n = strlen(c->all);
    snprintf(c->all + n, sizeof c->all - n, "%s%s", n ? " " : "", h);
    return 0;
}

static void expands(const char *list, const char *want)
{
    hosts c = {{0}};
    char err[200] = "";
    long n = launch_hostlist_expand(list, collect, &c, err, sizeof err);
    if (n < 0)
        fail_msg("'%s' refused: %s", list, err);
    assert_string_equal(c.all, want);
}

static void refuses_hostlist(const char *list, const char *want)
{
    char err[200] = "";
    assert_int_equal(launch_hostlist_expand(list, NULL, NULL, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("'%s': '%s' does not say '%s'", list, err, want);
}

static void test_hostlists(void **state)
{
    (void)state;
    expands("node[01-03,7]", "node01 node02 node03 node7");
    expands("a[1-2],b3", "a1 a2 b3");
    expands("n1", "n1");
    expands("n1,n2", "n1 n2");
    expands("x[098-101]", "x098 x099 x100 x101");
    expands("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expands("n[5]", "n5");
    expands("gpu[1-2].cluster", "gpu1.cluster gpu2.cluster");
    char first[64];
    char err[200];
    assert_int_equal(launch_hostlist_first("node[01-03,7]", first, sizeof first, err, sizeof err), 0);
    assert_string_equal(first, "node01");
    refuses_hostlist("", "empty host list");
    refuses_hostlist("n[1-", "without its ']'");
    refuses_hostlist("n1]", "without its '['");
    refuses_hostlist("n[3-1]", "'3-1' is not a range");
    refuses_hostlist("n[a-b]", "not a range");
    refuses_hostlist("n[]", "empty '[]'");
    refuses_hostlist("n[1,]", "empty range");
    refuses_hostlist("n[[1]]", "nested");
    refuses_hostlist("a,,b", "empty host");
    refuses_hostlist("a,", "list's end");
    refuses_hostlist("n[1-999999]", "more than 65536 hosts");
    refuses_hostlist("a b", "blank");
    assert_int_equal(launch_hostlist_first("n[2-1]", first, sizeof first, err, sizeof err), -1);
}

/* ---- the rank map -------------------------------------------------------- */

static void role_is(const launch_map *m, uint32_t r, launch_role role, uint32_t rr, bool cuda)
{
    launch_role got;
    uint32_t got_rr;
    bool got_cuda;
    assert_int_equal(launch_map_role(m, r, &got, &got_rr, &got_cuda), 0);
    assert_int_equal(got, role);
    assert_int_equal(got_rr, rr);
    assert_int_equal(got_cuda, cuda);
}

static void map_refused(const launch_counts *c, uint32_t world, const char *want)
{
    launch_map m;
    char err[300] = "";
    assert_int_equal(launch_map_make(&m, c, world, "WORLD_SIZE", err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("'%s' does not say '%s'", err, want);
}

static void test_map(void **state)
{
    (void)state;
    char err[300];
    launch_map m;
    /* PyTorch's: trainers, servers, the master last. */
    launch_counts c = {.ntrainer_set = true, .nserver_set = true, .ntrainer = 2, .nserver = 1};
    assert_int_equal(launch_map_make(&m, &c, 4, "WORLD_SIZE", err, sizeof err), 0);
    assert_int_equal(launch_map_world(&m), 4);
    role_is(&m, 0, LAUNCH_TRAINER, 0, false);
    role_is(&m, 1, LAUNCH_TRAINER, 1, false);
    role_is(&m, 2, LAUNCH_SERVER, 0, false);
    role_is(&m, 3, LAUNCH_MASTER, 0, false);
    launch_role r;
    uint32_t rr;
    bool cu;
    assert_int_equal(launch_map_role(&m, 4, &r, &rr, &cu), -1);
    /* --master-rank 0: the others shifted up. */
    m.master_first = true;
    role_is(&m, 0, LAUNCH_MASTER, 0, false);
    role_is(&m, 1, LAUNCH_TRAINER, 0, false);
    role_is(&m, 2, LAUNCH_TRAINER, 1, false);
    role_is(&m, 3, LAUNCH_SERVER, 0, false);
    /* CPU then CUDA, trainers and servers alike. */
    launch_counts cc = {.ntrainer_set = true, .nserver_set = true, .ntrainer = 1, .ncudatrainer = 2, .nserver = 1,
                        .ncudaserver = 1};
    assert_int_equal(launch_map_make(&m, &cc, 6, "WORLD_SIZE", err, sizeof err), 0);
    role_is(&m, 0, LAUNCH_TRAINER, 0, false);
    role_is(&m, 1, LAUNCH_TRAINER, 1, true);
    role_is(&m, 2, LAUNCH_TRAINER, 2, true);
    role_is(&m, 3, LAUNCH_SERVER, 0, false);
    role_is(&m, 4, LAUNCH_SERVER, 1, true);
    role_is(&m, 5, LAUNCH_MASTER, 0, false);
    /* One count given: the other derived from the world size. */
    launch_counts only_s = {.nserver_set = true, .nserver = 2};
    assert_int_equal(launch_map_make(&m, &only_s, 6, "WORLD_SIZE", err, sizeof err), 0);
    assert_int_equal(m.ntrainer, 3);
    assert_int_equal(m.nserver, 2);
    launch_counts only_t = {.ntrainer_set = true, .ntrainer = 2};
    assert_int_equal(launch_map_make(&m, &only_t, 6, "WORLD_SIZE", err, sizeof err), 0);
    assert_int_equal(m.nserver, 3);
    launch_counts none = {0};
    assert_int_equal(launch_map_make(&m, &none, 5, "WORLD_SIZE", err, sizeof err), 0);
    assert_int_equal(m.nserver, 1);
    assert_int_equal(m.ntrainer, 3);
    /* No world size (Kubernetes): both counts make it. */
    assert_int_equal(launch_map_make(&m, &c, 0, NULL, err, sizeof err), 0);
    assert_int_equal(launch_map_world(&m), 4);
    /* Refusals. */
    map_refused(&c, 5, "WORLD_SIZE=5, but 2 trainer(s) + 1 server(s) + the master make 4");
    map_refused(&c, 3, "WORLD_SIZE=3, but");
    map_refused(&only_t, 2, "WORLD_SIZE=2 is too small for 2 trainer(s)");
    map_refused(&only_s, 3, "no rank for a trainer");
    map_refused(&none, 2, "no rank for a trainer");
    map_refused(&only_s, 0, "give both --ntrainer and --nserver");
    assert_string_equal(launch_role_name(LAUNCH_SERVER), "server");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torchrun),   cmocka_unit_test(test_pytorchjob_and_ray), cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_kubernetes), cmocka_unit_test(test_precedence),         cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_hostlists),  cmocka_unit_test(test_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
