/* sweep_child.c — a sweep's child processes: this binary run again with a
 * point's flags (its --dry-run, then the point), its output to a file or
 * read back, a signal passed on to it (master/tools/sweep_int.h). */
#include "master/tools/sweep_int.h"

#include "shared/paramsfile.h"
#include "shared/userpath.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

volatile sig_atomic_t sweep_signal; /* the signal that stops the sweep, or 0 */
static volatile pid_t sweep_child;

/* ---- children ---------------------------------------------------------------------- */

void sweep_on_signal(int sig)
{
    if (!sweep_signal) /* the first one says how the sweep ends */
        sweep_signal = sig;
    pid_t c = sweep_child;
    if (c > 0)
        kill(c, sig); /* the point's master ends its run, its children with it */
}

const char *sweep_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* In the child: its own process group (a Ctrl-C reaches the sweep, which
 * passes it on once), death with the sweep, the default signal actions,
 * output to fd; then the binary. */
_Noreturn static void sweep_exec(const char *exe, char **args, int fd, const sigset_t *mask)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(exe, args);
    dprintf(STDERR_FILENO, "psbench-master sweep: cannot run %s: %s\n", exe, strerror(errno));
    _exit(127);
}

/* ---- a child's output -------------------------------------------------------------- */

/* What the sweep keeps of a child's output in memory: all of a --dry-run's
 * (a few lines), the end of a point's (its last lines say why it failed). */
#define SWEEP_KEEP ((size_t)1 << 20)

typedef struct {
    char *buf;      /* the output's last SWEEP_KEEP bytes at most */
    size_t len;
    int log_fd;     /* the point's master.log, or -1 */
    int log_errno;  /* the first write to it that failed (ENOSPC, EFBIG, EIO), or 0 */
} sweep_output;

/* n bytes of the child's output: into the log while it takes them, and
 * into memory, whatever the log does. */
static void sweep_output_add(sweep_output *o, const char *b, size_t n)
{
    for (size_t done = 0; o->log_fd >= 0 && !o->log_errno && done < n;) {
        ssize_t w = write(o->log_fd, b + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            o->log_errno = w < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)w;
    }
    if (n >= SWEEP_KEEP) {
        b += n - SWEEP_KEEP;
        n = SWEEP_KEEP;
    }
    if (o->len + n > SWEEP_KEEP) { /* keep the end: the older bytes go */
        size_t drop = o->len + n - SWEEP_KEEP;
        memmove(o->buf, o->buf + drop, o->len - drop);
        o->len -= drop;
    }
    memcpy(o->buf + o->len, b, n);
    o->len += n;
}

/* Read the child's output from fd until it ends or the child has exited
 * and nothing more is ready (a grandchild that still holds the pipe must
 * not keep the sweep waiting); the child's wait status into *st. */
static void sweep_output_drain(sweep_output *o, int fd, pid_t pid, int *st)
{
    bool exited = false;
    char chunk[16384];
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, exited ? 0 : 200);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0) {
            ssize_t r = read(fd, chunk, sizeof chunk);
            if (r > 0) {
                sweep_output_add(o, chunk, (size_t)r);
                continue;
            }
            if (r == 0 || errno != EINTR)
                break; /* the end: every writer has closed it */
            continue;
        }
        if (exited)
            break;
        pid_t w = waitpid(pid, st, WNOHANG);
        if (w == pid)
            exited = true;
        else if (w < 0 && errno != EINTR)
            break;
    }
    if (!exited)
        while (waitpid(pid, st, 0) < 0 && errno == EINTR)
            ;
}

/* Run this binary with args (NULL-ended, args[0] the program). Its stdout
 * and stderr come through a pipe: into the file log (created, or appended
 * to with append) when given, and always into memory, *text (its last
 * SWEEP_KEEP bytes, malloc'd, NUL-ended) when text is not NULL, so that
 * why a point failed is known even where its log could not be written (a
 * full disk). *log_errno (when not NULL): the errno of the log's first
 * failed write, or 0. The child's exit status (128 + signal when killed),
 * or -1 with err when it could not be started. */
int sweep_spawn(sweep *s, char **args, const char *log, bool append, char **text, int *log_errno, char *err,
                size_t errlen)
{
    int fds[2] = {-1, -1};
    sweep_output o = {.log_fd = -1};
    if (text)
        *text = NULL;
    if (log_errno)
        *log_errno = 0;
    if (log) {
        o.log_fd = open(log, O_WRONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC,
                        0644);
        struct stat st = {0};
        if (o.log_fd >= 0 && (fstat(o.log_fd, &st) < 0 || !S_ISREG(st.st_mode))) {
            snprintf(err, errlen, "%s: %s, not a regular file", log, userpath_kind(st.st_mode));
            close(o.log_fd);
            return -1;
        }
        if (o.log_fd < 0) {
            snprintf(err, errlen, "%s: %s", log, strerror(errno));
            return -1;
        }
    }
    if (pipe2(fds, O_CLOEXEC) < 0 || !(o.buf = malloc(SWEEP_KEEP + 1))) {
        snprintf(err, errlen, "pipe: %s", strerror(errno ? errno : ENOMEM));
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        if (o.log_fd >= 0)
            close(o.log_fd);
        return -1;
    }
    fflush(NULL);
    /* A signal that comes while the child is being made waits until it is
     * known (sweep_child), then goes to it too; the child starts with
     * the default actions (a handler inherited across fork would take a
     * signal meant to end it before it execs). */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    sigprocmask(SIG_BLOCK, &stop, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        snprintf(err, errlen, "fork: %s", strerror(errno));
        if (o.log_fd >= 0)
            close(o.log_fd);
        close(fds[0]);
        close(fds[1]);
        free(o.buf);
        return -1;
    }
    if (pid == 0)
        sweep_exec(s->exe, args, fds[1], &old);
    sweep_child = pid;
    if (sweep_signal)
        kill(pid, sweep_signal);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    int st = 0;
    sweep_output_drain(&o, fds[0], pid, &st);
    close(fds[0]);
    sweep_child = 0;
    if (o.log_fd >= 0 && close(o.log_fd) < 0 && !o.log_errno)
        o.log_errno = errno;
    o.buf[o.len] = '\0';
    if (text)
        *text = o.buf;
    else
        free(o.buf);
    if (log_errno)
        *log_errno = o.log_errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void sweep_trace_args(const sweep *s, const sweep_point *p, const char *args[4], char *buf, size_t len)
{
    args[0] = NULL;
    if (s->no_trace)
        return;
    const char *v;
    bool window = false;
    for (size_t i = 0; i < s->njob; i++) {
        if (sweep_flag_is(s->job[i], "--trace", &v))
            return; /* the job's own say */
        window = window || sweep_flag_is(s->job[i], "--trace-steps", &v);
    }
    if (window) { /* the job's window, traced */
        args[0] = "--trace";
        args[1] = NULL;
        return;
    }
    uint64_t last = p->plan_steps ? p->plan_steps - 1 : 0;
    uint64_t first = last + 1 > SWEEP_TRACE_STEPS ? last + 1 - SWEEP_TRACE_STEPS : 0;
    snprintf(buf, len, "%" PRIu64 ":%" PRIu64, first, last);
    args[0] = "--trace";
    args[1] = "--trace-steps";
    args[2] = buf;
    args[3] = NULL;
}

void sweep_params_args(const sweep *s, const char *args[3])
{
    args[0] = NULL;
    if (s->dim[SD_COMPRESS].n < 2)
        return;
    const char *v;
    for (size_t i = 0; i < s->njob; i++)
        if (sweep_flag_is(s->job[i], "--params-max", &v))
            return; /* the job's own say */
    static char most[24];
    snprintf(most, sizeof most, "%" PRIu64, PARAMSFILE_MAX_FLOATS);
    args[0] = "--params-max";
    args[1] = most;
    args[2] = NULL;
}

/* The child's argv: the program, the job's flags, then the point's. */
char **sweep_child_argv(const sweep *s, const sweep_point *p, const char *const *extra)
{
    char **v = NULL;
    size_t n = 0;
    sweep_push(&v, &n, s->exe);
    for (size_t i = 0; i < s->njob; i++)
        sweep_push(&v, &n, s->job[i]);
    for (size_t i = 0; i < p->argc; i++)
        sweep_push(&v, &n, p->argv[i]);
    for (; extra && *extra; extra++)
        sweep_push(&v, &n, *extra);
    return v;
}

size_t sweep_argv_len(char **v)
{
    size_t n = 0;
    while (v[n])
        n++;
    return n;
}

/* The last line of text that says what went wrong: the master's
 * "psbench-master: ..." line, else the last non-empty one. */
char *sweep_error_line(const char *text)
{
    const char *best = NULL, *last = NULL;
    size_t best_len = 0, last_len = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            last = p;
            last_len = len;
            if (strncmp(p, "psbench-master: ", 16) == 0) {
                best = p;
                best_len = len;
            }
        }
        p += len + (nl ? 1 : 0);
    }
    if (!best) {
        best = last;
        best_len = last_len;
    }
    return best ? strndup(best, best_len) : sweep_strdup("no output");
}

