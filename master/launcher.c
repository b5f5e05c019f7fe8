/* launcher.c — child processes for `psbench-master --local` (see launcher.h). */
#include "master/launcher.h"
#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct child {
    launcher *l;
    char label[32]; /* "server 0" */
    pid_t pid;
    bool exited;
    int status;
    int fd[2];                  /* stdout, stderr pipes (-1 once closed) */
    struct event *ev[2];
    char line[2][4096];         /* partial line per stream */
    size_t len[2];
} child;

struct launcher {
    launcher_job job;
    child *kids;               /* servers (rank order), then trainers */
    size_t n;
    struct event *sigchld;
    int kill_rounds;
    char bin_dir[4096];
    char master_addr[300], listen_addr[300];
};

/* A child's line, relayed with its label. Its stdout (its ready line, its
 * own summary and table as it exits) only at --log-level info or debug and
 * without --tables none: under either the master prints the headline
 * alone, and what a child has to warn of comes on its stderr, at the level
 * it was given. */
static void launcher_emit(child *c, int stream, const char *s, size_t n)
{
    if (stream == 0 && (log_get_level() < LOG_INFO || !c->l->job.child_stdout))
        return;
    FILE *out = stream == 0 ? stdout : stderr;
    fprintf(out, "[%s] %.*s\n", c->label, (int)n, s);
    fflush(out);
}

static void launcher_on_output(evutil_socket_t fd, short what, void *arg);

static void launcher_close_stream(child *c, int k)
{
    if (c->len[k]) {
        launcher_emit(c, k, c->line[k], c->len[k]);
        c->len[k] = 0;
    }
    if (c->ev[k]) {
        event_free(c->ev[k]);
        c->ev[k] = NULL;
    }
    if (c->fd[k] >= 0)
        close(c->fd[k]);
    c->fd[k] = -1;
}

static void launcher_on_output(evutil_socket_t fd, short what, void *arg)
{
    child *c = arg;
    int k = fd == c->fd[0] ? 0 : 1;
    char buf[8192];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        launcher_close_stream(c, k);
        return;
    }
    for (ssize_t i = 0; i < r; i++) {
        if (buf[i] == '\n' || c->len[k] == sizeof c->line[k]) {
            launcher_emit(c, k, c->line[k], c->len[k]);
            c->len[k] = 0;
            if (buf[i] == '\n')
                continue;
        }
        c->line[k][c->len[k]++] = buf[i];
    }
}

static void launcher_reap(launcher *l)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < l->n; i++) {
            child *c = &l->kids[i];
            if (c->pid != pid)
                continue;
            c->exited = true;
            c->status = status;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                continue;
            char why[128];
            if (WIFSIGNALED(status))
                snprintf(why, sizeof why, "%s (pid %d) was killed by signal %d", c->label, (int)pid,
                         WTERMSIG(status));
            else
                snprintf(why, sizeof why, "%s (pid %d) exited with status %d", c->label, (int)pid,
                         WEXITSTATUS(status));
            l->job.child_failed(l->job.ctx, why);
        }
    }
}

static void launcher_on_sigchld(evutil_socket_t sig, short what, void *arg)
{
    launcher_reap(arg);
}

static int launcher_spawn(launcher *l, child *c, const char *bin, char *const argv[], char *err,
                          size_t errlen)
{
    int out[2], er[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        goto fail;
    if (pipe2(er, O_CLOEXEC) < 0) {
        close(out[0]);
        close(out[1]);
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]), close(out[1]), close(er[0]), close(er[1]);
        goto fail;
    }
    if (pid == 0) {
        /* Die with the master, whatever way it goes. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        dup2(out[1], 1);
        dup2(er[1], 2);
        /* Ctrl-C, and the hangup of a closed terminal, go to the master,
         * which stops us (after its last reports are in). */
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        execv(bin, argv);
        fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(er[1]);
    c->pid = pid;
    c->fd[0] = out[0];
    c->fd[1] = er[0];
    for (int k = 0; k < 2; k++) {
        fcntl(c->fd[k], F_SETFL, O_NONBLOCK);
        c->ev[k] = event_new(l->job.base, c->fd[k], EV_READ | EV_PERSIST, launcher_on_output, c);
        event_add(c->ev[k], NULL);
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot start %s: %s", c->label, strerror(errno));
    return -1;
}

/* Start kid i: server i, or trainer i - nserver. */
static int launcher_spawn_kid(launcher *l, size_t i, char *err, size_t errlen)
{
    const launcher_job *j = &l->job;
    child *c = &l->kids[i];
    memset(c, 0, sizeof *c);
    c->l = l;
    c->fd[0] = c->fd[1] = -1;
    bool server = i < j->nserver;
    unsigned rank = server ? (unsigned)i : (unsigned)(i - j->nserver);
    bool cuda = server ? rank >= j->nserver - j->ncudaserver : rank >= j->ntrainer - j->ncudatrainer;
    snprintf(c->label, sizeof c->label, "%s %u", server ? "server" : "trainer", rank);
    char bin[4200], rank_s[16];
    snprintf(bin, sizeof bin, "%s/%s", l->bin_dir, server ? "psbench-server" : "psbench-trainer");
    snprintf(rank_s, sizeof rank_s, "%u", rank);
    /* Children log at the master's level (--log-level debug shows the
     * nodes' debug lines too, e.g. the batch-update trainer's per batch). */
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    /* A CUDA slot asks for the GPU; any other says no --device, so that
     * a server takes its default: the CPU, or $PSBENCH_SERVER_DEVICE (the
     * suites that run every server test on the fake or a real GPU set it,
     * and a CPU slot saying --device cpu would override it). */
    char *argv[16];
    size_t a = 0;
    argv[a++] = bin;
    argv[a++] = "--master";
    argv[a++] = l->master_addr;
    argv[a++] = "--rank";
    argv[a++] = rank_s;
    if (cuda) {
        argv[a++] = "--device";
        argv[a++] = "cuda";
    }
    argv[a++] = "--log-level";
    argv[a++] = (char *)levels[log_get_level()];
    argv[a++] = "--transport";
    argv[a++] = (char *)psb_transport_name(l->job.transport);
    if (server) {
        argv[a++] = "--listen";
        argv[a++] = l->listen_addr;
    }
    argv[a] = NULL;
    assert(a < sizeof argv / sizeof *argv);
    if (launcher_spawn(l, c, bin, argv, err, errlen) < 0) {
        c->exited = true; /* nothing to wait for, nothing to kill */
        return -1;
    }
    return 0;
}

launcher *launcher_start(const launcher_job *job, const char *bin_dir, const char *ctl_host, uint16_t ctl_port,
                         char *err, size_t errlen)
{
    assert(job->child_failed && job->ncudaserver <= job->nserver && job->ncudatrainer <= job->ntrainer);
    launcher *l = calloc(1, sizeof *l);
    size_t n = (size_t)job->nserver + job->ntrainer;
    if (!l || !(l->kids = calloc(n, sizeof *l->kids))) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->job = *job;
    l->sigchld = evsignal_new(job->base, SIGCHLD, launcher_on_sigchld, l);
    event_add(l->sigchld, NULL);
    snprintf(l->bin_dir, sizeof l->bin_dir, "%s", bin_dir);
    /* Children reach the master where it listens; a wildcard address
     * means this host, reached by its loopback. Servers listen there too. */
    const char *host = ctl_host;
    if (!*host || strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    bool v6 = strchr(host, ':') != NULL;
    snprintf(l->master_addr, sizeof l->master_addr, v6 ? "[%s]:%u" : "%s:%u", host, ctl_port);
    snprintf(l->listen_addr, sizeof l->listen_addr, v6 ? "[%s]:0" : "%s:0", host);
    for (size_t i = 0; i < n; i++) {
        l->n++;
        if (launcher_spawn_kid(l, i, err, errlen) < 0) {
            launcher_free(l);
            return NULL;
        }
    }
    return l;
}

bool launcher_trainers_exited(const launcher *l)
{
    for (size_t i = l->job.nserver; i < l->n; i++)
        if (!l->kids[i].exited || l->kids[i].fd[0] >= 0 || l->kids[i].fd[1] >= 0)
            return false;
    return true;
}

int launcher_restart_trainers(launcher *l, char *err, size_t errlen)
{
    if (!launcher_trainers_exited(l)) {
        snprintf(err, errlen, "the last run's trainers are still running");
        return -1;
    }
    for (size_t i = l->job.nserver; i < l->n; i++)
        if (launcher_spawn_kid(l, i, err, errlen) < 0)
            return -1;
    return 0;
}

bool launcher_all_exited(const launcher *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (!l->kids[i].exited || l->kids[i].fd[0] >= 0 || l->kids[i].fd[1] >= 0)
            return false;
    return true;
}

void launcher_kill_all(launcher *l)
{
    int sig = l->kill_rounds++ == 0 ? SIGTERM : SIGKILL;
    for (size_t i = 0; i < l->n; i++)
        if (!l->kids[i].exited)
            kill(l->kids[i].pid, sig);
}

void launcher_free(launcher *l)
{
    if (!l)
        return;
    launcher_reap(l);
    for (size_t i = 0; i < l->n; i++)
        if (!l->kids[i].exited)
            kill(l->kids[i].pid, SIGTERM);
    /* Give them a moment, then make sure. */
    for (int tries = 0; tries < 50; tries++) {
        bool all = true;
        for (size_t i = 0; i < l->n; i++) {
            child *c = &l->kids[i];
            if (!c->exited && waitpid(c->pid, &c->status, WNOHANG) == c->pid)
                c->exited = true;
            all &= c->exited;
        }
        if (all)
            break;
        usleep(100 * 1000);
    }
    for (size_t i = 0; i < l->n; i++) {
        child *c = &l->kids[i];
        if (!c->exited) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            c->exited = true;
        }
        for (int k = 0; k < 2; k++)
            launcher_close_stream(c, k);
    }
    if (l->sigchld)
        event_free(l->sigchld);
    free(l->kids);
    free(l);
}
