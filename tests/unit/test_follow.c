/* test_follow.c — the --follow supervisor (shared/follow.c): a job's exit
 * status steers it (no job: try again; a job: next one; anything else:
 * stop with it), --follow-idle ends it with 0, each try's reach is capped,
 * and a signal goes to the job in progress. Each job runs in a child, so
 * the jobs here keep their count in a file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "shared/follow.h"
#include "shared/log.h"

typedef struct {
    char path[64];
    const int *script; /* the exit status of try 1, 2, ...; the last repeats */
    size_t n;
    double max_reach;  /* a try given more reach than this fails the test (status 3) */
} plan;

/* Append one byte for this try; return how many tries there were. */
static size_t count_try(const char *path)
{
    FILE *f = fopen(path, "a+");
    if (!f)
        return 0;
    fputc('x', f);
    long n = ftell(f);
    fclose(f);
    return n > 0 ? (size_t)n : 0;
}

static size_t tries(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n > 0 ? (size_t)n : 0;
}

static int scripted_job(void *ctx, double reach_s)
{
    const plan *p = ctx;
    if (!follow_in_child() || reach_s > p->max_reach || reach_s < FOLLOW_RETRY_S)
        return 3;
    size_t k = count_try(p->path); /* 1 on the first try */
    if (k == 0)
        return 3;
    int code = p->script[k <= p->n ? k - 1 : p->n - 1];
    if (code == PSB_EXIT_RETRY)
        follow_say_retry("the master refused this trainer: all 2 trainers are already registered");
    return code;
}

static void plan_init(plan *p, const int *script, size_t n, double max_reach)
{
    snprintf(p->path, sizeof p->path, "/tmp/test_follow.%d", (int)getpid());
    unlink(p->path);
    p->script = script;
    p->n = n;
    p->max_reach = max_reach;
}

static void test_statuses(void **state)
{
    (void)state;
    /* no job, no job, done, failed, then a refusal for good */
    static const int script[] = {PSB_EXIT_RETRY, PSB_EXIT_RETRY, 0, 1, 2};
    plan p;
    plan_init(&p, script, 5, 30);
    follow_opts o = {.idle_s = 60, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    assert_int_equal(follow_run(&o, scripted_job, &p), 2);
    assert_int_equal(tries(p.path), 5);
    unlink(p.path);
}

static void test_idle(void **state)
{
    (void)state;
    /* Never a job: 0 once idle; each try's reach within what is left. */
    static const int script[] = {PSB_EXIT_RETRY};
    plan p;
    plan_init(&p, script, 1, 1.5);
    follow_opts o = {.idle_s = 1.5, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    assert_int_equal(follow_run(&o, scripted_job, &p), 0);
    assert_true(tries(p.path) >= 2);
    unlink(p.path);
}

/* The job signals its supervisor (as a user would), then waits: the
 * signal comes back to it and stops it. */
static int signalled_job(void *ctx, double reach_s)
{
    (void)ctx;
    (void)reach_s;
    kill(getppid(), SIGTERM);
    for (;;)
        pause();
}

static void test_signal(void **state)
{
    (void)state;
    follow_opts o = {.idle_s = 60, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    assert_int_equal(follow_run(&o, signalled_job, NULL), 128 + SIGTERM);
}

int main(void)
{
    log_init("test_follow", LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_signal), /* last: it leaves follow_run's handlers installed */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
