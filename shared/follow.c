/* follow.c — the --follow supervisor: one child per job (follow.h). */
#include "shared/follow.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The supervisor's side. Set by the handler: the first SIGINT/SIGTERM.
 * The child's pid is read there too, to pass the signal on. */
static volatile sig_atomic_t follow_signal;
static volatile sig_atomic_t follow_child_pid;

/* The child's side: the write end of the pipe its retry reason goes back
 * through (-1: not a follower's child). */
static int follow_reason_fd = -1;

static void follow_on_signal(int sig)
{
    if (!follow_signal)
        follow_signal = sig;
    pid_t child = (pid_t)follow_child_pid;
    if (child > 0)
        kill(child, sig);
}

bool follow_in_child(void)
{
    return follow_reason_fd >= 0;
}

void follow_say_retry(const char *why)
{
    if (follow_reason_fd < 0)
        return;
    /* One short write into an empty pipe, best effort: without it the
     * supervisor only knows there was no job. */
    ssize_t w = write(follow_reason_fd, why, strlen(why));
    (void)w;
}

static void follow_mask(int how)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigprocmask(how, &s, NULL);
}

/* In the child, just forked with SIGINT/SIGTERM blocked: the job's own
 * handling of signals (the default, or what the job installs), death with
 * the supervisor, then the job. Never returns. */
static void follow_child(int fd, pid_t parent, follow_job_fn job, void *ctx, double reach_s)
{
    /* If the supervisor is killed outright, the job must not go on alone;
     * one that died before this line is caught by getppid. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    follow_child_pid = 0;
    follow_reason_fd = fd;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    follow_mask(SIG_UNBLOCK);
    /* exit(), not _exit(): the job ends as main returning would (stdio
     * flushed, atexit handlers run). */
    exit(job(ctx, reach_s));
}

/* Wait for the child (signals are passed on meanwhile); what it said back
 * through the pipe into why. 0 with *status, or -1. */
static int follow_reap(pid_t pid, int rfd, int *status, char *why, size_t whylen)
{
    for (;;) {
        pid_t r = waitpid(pid, status, 0);
        if (r == pid)
            break;
        if (r < 0 && errno == EINTR)
            continue;
        return -1;
    }
    follow_child_pid = 0;
    /* The child is gone, and with it the write end: read to the end. */
    size_t len = 0;
    for (;;) {
        ssize_t n = read(rfd, why + len, whylen - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == whylen - 1)
            break;
    }
    why[len] = '\0';
    return 0;
}

/* Sleep up to s seconds; a signal cuts it short. */
static void follow_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    if (!follow_signal)
        nanosleep(&ts, NULL);
}

/* One try: a child that runs the job. The child's wait status, or -1
 * with err when no child could be started. */
static int follow_try(follow_job_fn job, void *ctx, double reach_s, int *status, char *why, size_t whylen)
{
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
    follow_child_pid = pid;
    if (follow_signal) /* came before the fork: the job stops at once */
        kill(pid, follow_signal);
    follow_mask(SIG_UNBLOCK);
    int rc = follow_reap(pid, fds[0], status, why, whylen);
    close(fds[0]);
    if (rc < 0)
        log_error("--follow: waitpid: %s", strerror(errno));
    return rc;
}

int follow_run(const follow_opts *o, follow_job_fn job, void *ctx)
{
    assert(o->idle_s > 0 && o->connect_timeout_s > 0);
    struct sigaction sa = {.sa_handler = follow_on_signal}; /* no SA_RESTART: waits end early */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    log_info("following the jobs of the master at %s (exits after %g s without one)", o->master, o->idle_s);
    double t_idle = clock_now_s(); /* since the last job ended (or the start) */
    char said[512] = "", why[512];
    unsigned jobs = 0;
    for (;;) {
        double left = o->idle_s - (clock_now_s() - t_idle);
        if (follow_signal) {
            log_info("%s: stopped while waiting for a job", follow_signal == SIGINT ? "SIGINT" : "SIGTERM");
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
        int status;
        if (follow_try(job, ctx, reach, &status, why, sizeof why) < 0)
            return 1;
        if (WIFSIGNALED(status) && follow_signal && WTERMSIG(status) == follow_signal)
            return 128 + follow_signal; /* the job stopped by our signal, as it would have */
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (code == PSB_EXIT_RETRY) {
            if (strcmp(why, said) != 0 && why[0]) {
                log_info("no job yet: %s (trying again every %g s)", why, FOLLOW_RETRY_S);
                snprintf(said, sizeof said, "%s", why);
            }
            follow_sleep(FOLLOW_RETRY_S);
            continue;
        }
        if (follow_signal)
            return code < 0 ? 128 + follow_signal : code;
        if (code != 0 && code != 1 && code != -1)
            return code; /* it cannot follow: the child said why */
        jobs++;
        if (code < 0)
            log_info("job %u: the node was killed by signal %d; waiting for the next job", jobs, WTERMSIG(status));
        else
            log_info("job %u ended (%s); waiting for the next one", jobs, code == 0 ? "done" : "failed");
        said[0] = '\0';
        t_idle = clock_now_s();
    }
}
