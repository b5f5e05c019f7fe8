/* sweep_child.c — a sweep's child processes: this binary run again with a
 * point's flags (its --dry-run, then the point), its output to a file or
 * read back, a signal passed on to it; and the argument lists they take
 * (master/sweep_int.h). */
#include "master/sweep_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

volatile sig_atomic_t sweep_signal; /* the signal that stops the sweep, or 0 */
static volatile pid_t sweep_child;


/* ---- argument lists -------------------------------------------------------------- */

/* ---- small helpers -------------------------------------------------------------- */

char *sweep_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort(); /* a few bytes of a command line: nothing sensible is left to do */
    return d;
}

void sweep_push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 2) * sizeof **v);
    if (!nv)
        abort();
    nv[(*n)++] = sweep_strdup(s);
    nv[*n] = NULL;
    *v = nv;
}

void sweep_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

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

char *sweep_read_all(int fd)
{
    size_t cap = 4096, used = 0;
    char *buf = malloc(cap);
    if (!buf)
        abort();
    for (;;) {
        if (used + 1024 > cap && !(buf = realloc(buf, cap *= 2)))
            abort();
        ssize_t r = read(fd, buf + used, cap - used - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        used += (size_t)r;
    }
    buf[used] = '\0';
    return buf;
}

/* Run this binary with args (NULL-ended, args[0] the program); its stdout
 * and stderr go to the file log (created, or appended to with append), or,
 * with log NULL, into *text (malloc'd, NUL-ended). The child's exit status
 * (128 + signal when killed), or -1 with err when it could not be started. */
int sweep_spawn(sweep *s, char **args, const char *log, bool append, char **text, char *err, size_t errlen)
{
    int fds[2] = {-1, -1};
    int fd = -1;
    if (log) {
        fd = open(log, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(err, errlen, "%s: %s", log, strerror(errno));
            return -1;
        }
    } else if (pipe2(fds, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
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
        if (fd >= 0)
            close(fd);
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (pid == 0)
        sweep_exec(s->exe, args, log ? fd : fds[1], &old);
    sweep_child = pid;
    if (sweep_signal)
        kill(pid, sweep_signal);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (log) {
        close(fd);
    } else {
        close(fds[1]);
        *text = sweep_read_all(fds[0]);
        close(fds[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    sweep_child = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
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

