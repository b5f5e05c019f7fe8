/* follow.c — the --follow supervisor: one child per job (follow.h). */
#include "shared/follow.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The supervisor's side. Set by the handler: the first SIGINT, SIGTERM or
 * SIGHUP. The child's pid is read there too, to pass the signal on. */
static volatile sig_atomic_t follow_signal;
static volatile sig_atomic_t follow_child_pid;

/* The child's side: the write end of the pipe its retry reason goes back
 * through (-1: not a follower's child). */
static int follow_reason_fd = -1;

/* What the child passes on: SIGHUP (a closed terminal or SSH session) is
 * SIGTERM to the job, as the master treats it. */
static int follow_passed_on(int sig)
{
    return sig == SIGHUP ? SIGTERM : sig;
}

static const char *follow_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

static void follow_on_signal(int sig)
{
    if (!follow_signal)
        follow_signal = sig;
    pid_t child = (pid_t)follow_child_pid;
    if (child > 0)
        kill(child, follow_passed_on(sig));
}

bool follow_in_child(void)
{
    return follow_reason_fd >= 0;
}

/* Best effort, into an empty pipe: without it the supervisor only knows
 * how the child ended. */
static void follow_say(const char *bytes, size_t n)
{
    if (follow_reason_fd < 0)
        return;
    ssize_t w = write(follow_reason_fd, bytes, n);
    (void)w;
}

void follow_say_retry(const char *why)
{
    follow_say(why, strlen(why));
}

void follow_say_answered(void)
{
    const char mark = FOLLOW_MARK_ANSWERED;
    follow_say(&mark, 1);
}

static void follow_mask(int how)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGHUP);
    sigprocmask(how, &s, NULL);
}

/* In the child, just forked with the signals blocked: the job's own
 * handling of SIGINT and SIGTERM (the default, or what the job installs),
 * SIGHUP ignored (the supervisor passes it on as SIGTERM), death with the
 * supervisor, then the job. Never returns. */
static void follow_child(int fd, pid_t parent, follow_job_fn job, void *ctx, double reach_s)
{
    /* If the supervisor is killed outright, the job must not go on alone;
     * one that died before this line is caught by getppid. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_IGN);
    follow_child_pid = 0;
    follow_reason_fd = fd;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    follow_mask(SIG_UNBLOCK);
    /* exit(), not _exit(): the job ends as main returning would (stdio
     * flushed, atexit handlers run). */
    exit(job(ctx, reach_s));
}

/* One try, as the supervisor sees it. */
typedef enum {
    FOLLOW_TRY_REACHING, /* no master has answered: bounded by the try's deadline; whatever ends it is no job */
    FOLLOW_TRY_JOB,      /* a master answered (FOLLOW_MARK_ANSWERED came): a job, bounded by its own rules */
} follow_try_state;

typedef struct {
    pid_t pid;
    int rfd;                /* the pipe's read end */
    follow_try_state state;
    double deadline;        /* while reaching: the child is stopped past it */
    bool overdue;           /* it was stopped so */
    int status;             /* its wait status */
    char why[512];          /* what it said back (the mark taken out) */
    size_t len;
} follow_try_t;

/* Take what the child wrote: the mark moves the try to a job, the rest is
 * its reason. false at the end of the pipe (the child is gone). */
static bool follow_read(follow_try_t *t)
{
    char buf[256];
    ssize_t n = read(t->rfd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
        return true;
    if (n <= 0)
        return false;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == FOLLOW_MARK_ANSWERED)
            t->state = FOLLOW_TRY_JOB;
        else if (t->len + 1 < sizeof t->why)
            t->why[t->len++] = buf[i];
    }
    t->why[t->len] = '\0';
    return true;
}

/* Wait for the child (signals are passed on meanwhile). Until a master
 * answers, no longer than the try's deadline: then the child is killed
 * (it hung where no bound of its own holds: a name that does not resolve,
 * a setup that does not return). 0 with t->status, or -1. */
static int follow_reap(follow_try_t *t)
{
    bool open = true;
    while (open && t->state == FOLLOW_TRY_REACHING) { /* a job: waitpid alone, as long as it runs */
        double left = t->deadline - clock_now_s();
        struct pollfd pfd = {.fd = t->rfd, .events = POLLIN};
        int r = poll(&pfd, 1, left > 0 ? (int)(left * 1000) + 1 : 0);
        if (r > 0) {
            open = follow_read(t); /* a mark that came by the deadline still counts */
        } else if (r < 0 && errno != EINTR) {
            break; /* waitpid below still reaps it */
        } else if (r == 0 && left <= 0) {
            kill(t->pid, SIGKILL);
            t->overdue = true;
            break;
        }
    }
    for (;;) {
        pid_t r = waitpid(t->pid, &t->status, 0);
        if (r == t->pid)
            break;
        if (r < 0 && errno == EINTR)
            continue;
        return -1;
    }
    follow_child_pid = 0;
    /* The child is gone, and with it the write end: read to the end. */
    while (follow_read(t))
        ;
    return 0;
}

/* Sleep up to s seconds; a signal cuts it short. */
static void follow_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    if (!follow_signal)
        nanosleep(&ts, NULL);
}

/* One try: a child that runs the job, given reach_s to reach a master.
 * 0 with *t filled, or -1 when no child could be started or reaped. */
static int follow_try(follow_job_fn job, void *ctx, double reach_s, follow_try_t *t)
{
    memset(t, 0, sizeof *t);
    t->state = FOLLOW_TRY_REACHING;
    t->deadline = clock_now_s() + reach_s + FOLLOW_TEARDOWN_S;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        log_error("--follow: pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    follow_mask(SIG_BLOCK); /* no signal between fork and knowing the pid */
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        follow_child(fds[1], parent, job, ctx, reach_s);
    }
    close(fds[1]);
    if (pid < 0) {
        follow_mask(SIG_UNBLOCK);
        close(fds[0]);
        log_error("--follow: fork: %s", strerror(errno));
        return -1;
    }
    t->pid = pid;
    t->rfd = fds[0];
    follow_child_pid = pid;
    if (follow_signal) /* came before the fork: the job stops at once */
        kill(pid, follow_passed_on(follow_signal));
    follow_mask(SIG_UNBLOCK);
    int rc = follow_reap(t);
    close(fds[0]);
    if (rc < 0)
        log_error("--follow: waitpid: %s", strerror(errno));
    return rc;
}

/* A try that was no job: why, for the lines the supervisor prints. */
static void follow_no_job_reason(const follow_opts *o, double reach, follow_try_t *t)
{
    if (t->overdue && t->why[0]) {
        /* It said why, then outlived the try's end (its exit's teardown:
         * seen with ASan's leak check on a loaded host): what it said
         * stands, the stop is added. */
        size_t l = strlen(t->why);
        snprintf(t->why + l, sizeof t->why - l, " (then the try was stopped after %g s)", reach + FOLLOW_TEARDOWN_S);
    } else if (t->overdue)
        snprintf(t->why, sizeof t->why, "no master at %s answered within %g s (the try was stopped)", o->master,
                 reach + FOLLOW_TEARDOWN_S);
    else if (!t->why[0] && WIFSIGNALED(t->status))
        snprintf(t->why, sizeof t->why, "the try was killed by signal %d before a master at %s answered",
                 WTERMSIG(t->status), o->master);
    else if (!t->why[0] && WIFEXITED(t->status) && WEXITSTATUS(t->status) != PSB_EXIT_RETRY)
        snprintf(t->why, sizeof t->why, "the try ended (status %d) before a master at %s answered",
                 WEXITSTATUS(t->status), o->master);
}

int follow_run(const follow_opts *o, follow_job_fn job, void *ctx)
{
    assert(o->idle_s > 0 && o->connect_timeout_s > 0);
    follow_signal = 0; /* once a process in use; tests run it again */
    struct sigaction sa = {.sa_handler = follow_on_signal}; /* no SA_RESTART: waits end early */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    log_info("following the jobs of the master at %s (exits after %g s without one)", o->master, o->idle_s);
    double t_idle = clock_now_s(); /* since the last job ended (or the start) */
    char said[512] = "";
    unsigned jobs = 0;
    for (;;) {
        double left = o->idle_s - (clock_now_s() - t_idle);
        if (follow_signal) {
            log_info("%s: stopped while waiting for a job (after %u job(s)): exiting",
                     follow_signal_name(follow_signal), jobs);
            return 0;
        }
        if (left <= 0) {
            log_info("no job for %g s (--follow-idle) after %u job(s): exiting (last: %s)", o->idle_s, jobs,
                     said[0] ? said : "no master answered");
            return 0;
        }
        /* At least one short try, even with little left: connecting to a
         * master that listens takes no time. */
        double reach = o->connect_timeout_s < left ? o->connect_timeout_s : left;
        if (reach < FOLLOW_RETRY_S)
            reach = FOLLOW_RETRY_S;
        follow_try_t t;
        if (follow_try(job, ctx, reach, &t) < 0)
            return 1;
        int code = WIFEXITED(t.status) ? WEXITSTATUS(t.status) : -1;
        /* No job: no master answered (whatever the child's status, short
         * of one that says it cannot follow), or it refused with retry.
         * Neither counts as a job nor restarts the idle clock. */
        if (code == PSB_EXIT_RETRY || (t.state == FOLLOW_TRY_REACHING && (code == 0 || code == 1 || code == -1))) {
            follow_no_job_reason(o, reach, &t);
            if (strcmp(t.why, said) != 0 && t.why[0] && !follow_signal) {
                log_info("no job yet: %s (trying again every %g s)", t.why, FOLLOW_RETRY_S);
                snprintf(said, sizeof said, "%s", t.why);
            }
            follow_sleep(FOLLOW_RETRY_S);
            continue;
        }
        if (WIFSIGNALED(t.status) && follow_signal && WTERMSIG(t.status) == follow_passed_on(follow_signal))
            return 128 + follow_signal; /* the job stopped by our signal, as it would have */
        if (follow_signal)
            return code < 0 ? 128 + follow_signal : code;
        if (code != 0 && code != 1 && code != -1)
            return code; /* it cannot follow: the child said why */
        jobs++;
        if (code < 0)
            log_info("job %u: the node was killed by signal %d; waiting for the next job", jobs,
                     WTERMSIG(t.status));
        else
            log_info("job %u ended (%s); waiting for the next one", jobs, code == 0 ? "done" : "failed");
        said[0] = '\0';
        t_idle = clock_now_s();
    }
}
