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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/follow.h"
#include "shared/log.h"

typedef struct {
    char path[64];
    const int *script; /* the exit status of try 1, 2, ...; the last repeats */
    size_t n;
    double max_reach;  /* a try given more reach than this fails the test (status 3) */
    bool unanswered;   /* no try hears a master's answer (a silent peer, garbage, ...) */
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
    if (code != PSB_EXIT_RETRY && !p->unanswered)
        follow_say_answered(); /* a job: a master answered */
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
    p->unanswered = false;
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

/* Issue 39: tries that end without a master's answer (a peer that was
 * silent, closed, answered garbage: the job's status 1) are no job: they
 * neither count nor restart the idle clock, so the supervisor exits 0 once
 * idle. Counted as jobs, the 50 quick failures would restart the clock
 * until the script's 2 ends it. */
static void test_unanswered_is_no_job(void **state)
{
    (void)state;
    int script[51];
    for (int i = 0; i < 50; i++)
        script[i] = 1;
    script[50] = 2;
    plan p;
    plan_init(&p, script, 51, 1.5);
    p.unanswered = true;
    follow_opts o = {.idle_s = 1.5, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    assert_int_equal(follow_run(&o, scripted_job, &p), 0);
    assert_true(tries(p.path) >= 2 && tries(p.path) < 50);
    unlink(p.path);
}

/* A try that hangs before any master answers (where no bound of the job's
 * own holds) is killed once its reach and FOLLOW_TEARDOWN_S are past: the
 * supervisor still exits 0 when idle, its last line naming the stop; a try
 * that said why before it hung (a slow exit after a silent peer) keeps its
 * reason there. ctx: that reason, or NULL. alarm: a hung supervisor fails
 * the test rather than blocking it, far past what the bound promises. */
static int hung_job(void *ctx, double reach_s)
{
    (void)reach_s;
    if (ctx)
        follow_say_retry(ctx);
    for (;;)
        pause();
}

/* follow_run's last line (its log on stderr, taken into a file). */
static int run_last_line(const follow_opts *o, follow_job_fn job, void *ctx, char *last, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_follow_log.%d", (int)getpid());
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0 && dup2(fileno(f), 2) == 2);
    log_init("test_follow", LOG_INFO);
    int rc = follow_run(o, job, ctx);
    fflush(stderr);
    log_init("test_follow", LOG_ERROR);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    char line[1024];
    last[0] = '\0';
    while (fgets(line, sizeof line, f))
        snprintf(last, len, "%s", line);
    fclose(f);
    unlink(path);
    return rc;
}

static void test_hung_try(void **state)
{
    (void)state;
    follow_opts o = {.idle_s = 0.5, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    char last[1024];
    alarm(120);
    assert_int_equal(run_last_line(&o, hung_job, NULL, last, sizeof last), 0);
    assert_non_null(strstr(last, "(last: no master at 127.0.0.1:9 answered within 5.5 s (the try was stopped))"));
    char why[] = "127.0.0.1:9 accepted the connection but did not answer within 0.5 s: is it a psbench master?";
    assert_int_equal(run_last_line(&o, hung_job, why, last, sizeof last), 0);
    assert_non_null(strstr(last, "(last: 127.0.0.1:9 accepted the connection but did not answer within 0.5 s: is it "
                                 "a psbench master? (then the try was stopped after 5.5 s))"));
    alarm(0);
}

/* The job signals its supervisor (as a user would), then waits: the
 * signal comes back to it and stops it. ctx: the signal; with answered,
 * a master answered it first (a job in progress). */
typedef struct {
    int sig;
    bool answered;
} signal_plan;

static int signalled_job(void *ctx, double reach_s)
{
    const signal_plan *sp = ctx;
    (void)reach_s;
    if (sp->answered)
        follow_say_answered();
    kill(getppid(), sp->sig);
    for (;;)
        pause();
}

/* During a job: the job stops as it would without --follow, the node's
 * status 128 + the signal (SIGHUP is passed on as SIGTERM, as the master
 * treats it, and reported as itself). While waiting for a master's answer:
 * exit 0 (issue 39). */
static void test_signal(void **state)
{
    (void)state;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    follow_opts o = {.idle_s = 60, .connect_timeout_s = 30, .master = "127.0.0.1:9"};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        signal_plan job = {sigs[i], true}, waiting = {sigs[i], false};
        assert_int_equal(follow_run(&o, signalled_job, &job), 128 + sigs[i]);
        assert_int_equal(follow_run(&o, signalled_job, &waiting), 0);
    }
}

int main(void)
{
    log_init("test_follow", LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_idle),
        cmocka_unit_test(test_unanswered_is_no_job),
        cmocka_unit_test(test_hung_try),
        cmocka_unit_test(test_signal), /* last: it leaves follow_run's handlers installed */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
