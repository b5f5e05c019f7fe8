/* admit.c — the master's control listener and its bounds (see admit.h). */
#include "master/admit.h"

#include "shared/clock.h"
#include "shared/control.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Descriptors kept free of control connections: a quarter of the limit,
 * at least 8 and at most 64 (enough for HTTP to take a health check and
 * answer it, the --local children's pipes, a results file). */
#define ADMIT_RESERVE_MIN 8
#define ADMIT_RESERVE_MAX 64
/* Refusals in one wake-up, at most: the loop's other events get their turn. */
#define ADMIT_REFUSE_BURST 64

struct admit {
    struct event_base *base;
    struct evconnlistener *l;
    struct event *resume_ev; /* the pause after accept() could not be helped */
    admit_conn_fn on_conn;
    void *ctx;
    int spare_fd;            /* open on /dev/null, given up to refuse one; -1: none */
    bool held;               /* paused: ADMIT_MAX_PENDING connections have not registered */
    bool paused;             /* paused for a second: out of descriptors with no spare */
    uint64_t refused;        /* connections refused for want of descriptors */
    uint64_t refused_logged; /* ... of which the warnings said */
    double t_warned;         /* when the last warning went out */
    double t_held_warned;    /* when the last "have not registered" warning went out */
    char why[256];           /* the last refusal's reason */
};

static int admit_open_spare(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static unsigned long long admit_fd_limit(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (unsigned long long)rl.rlim_cur
                                                                             : 0;
}

static unsigned long long admit_reserve(unsigned long long limit)
{
    unsigned long long r = limit / 4;
    return r < ADMIT_RESERVE_MIN ? ADMIT_RESERVE_MIN : r > ADMIT_RESERVE_MAX ? ADMIT_RESERVE_MAX : r;
}

/* Why a node cannot be taken: errno e (EMFILE, ENFILE; 0: the reserve). */
static void admit_reason(int e, char *why, size_t len)
{
    unsigned long long limit = admit_fd_limit();
    if (e == ENFILE)
        snprintf(why, len, "the master's host is out of file descriptors (the system's limit, fs.file-max)");
    else if (limit)
        snprintf(why, len, "the master is out of file descriptors (limit %llu): raise `ulimit -n` where it runs",
                 limit);
    else
        snprintf(why, len, "the master is out of file descriptors: raise `ulimit -n` where it runs");
}

/* A warning the first time, then at most once a second with the count:
 * a flood must not become a flood of log lines. */
static void admit_warn(admit *a, const char *peer)
{
    double now = clock_now_s();
    if (a->refused_logged > 0 && now - a->t_warned < 1.0)
        return;
    uint64_t since = a->refused - a->refused_logged;
    if (since <= 1)
        log_warn("refused a connection from %s: %s", peer, a->why);
    else
        log_warn("refused %" PRIu64 " connections (the last from %s): %s", since, peer, a->why);
    a->refused_logged = a->refused;
    a->t_warned = now;
}

/* Tell the connection fd why it is refused, and close it. The `stop` is
 * written at once, without a bufferevent (that would take memory for a
 * node we cannot keep): a short frame fits an empty socket buffer. What
 * the node sent already (its register) is read and dropped, so that the
 * close is a FIN, not a reset that could overtake the reason. */
static void admit_refuse_fd(admit *a, int fd, int e)
{
    char peer[64];
    net_peer_name(fd, peer, sizeof peer);
    admit_reason(e, a->why, sizeof a->why);
    /* For want of descriptors, for now: a follower (--follow) tries again. */
    json_t *body = json_pack("{s:s, s:s, s:b}", "status", "refused", "reason", a->why, "retry", 1);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (body && ctl_encode("stop", NULL, body, &buf, &len) == 0) {
        if (send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len)
            log_debug("%s: could not write the refusal", peer);
        free(buf);
    }
    json_decref(body);
    shutdown(fd, SHUT_WR);
    uint8_t sink[512];
    for (int i = 0; i < 8 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    close(fd);
    a->refused++;
    admit_warn(a, peer);
}

/* accept() ran out (EMFILE, ENFILE): give the spare up to take the waiting
 * connection, refuse it, take the spare back. 0: one refused; 1: none was
 * waiting; -1: no spare, or accept failed anyway. */
static int admit_refuse_waiting(admit *a, int e)
{
    if (a->spare_fd < 0)
        return -1;
    close(a->spare_fd);
    a->spare_fd = -1;
    int fd = accept4(evconnlistener_get_fd(a->l), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int ae = errno;
    if (fd >= 0)
        admit_refuse_fd(a, fd, e);
    a->spare_fd = admit_open_spare();
    if (fd >= 0)
        return 0;
    return ae == EAGAIN || ae == EWOULDBLOCK || ae == EINTR || ae == ECONNABORTED ? 1 : -1;
}

static void admit_update(admit *a)
{
    if (a->held || a->paused)
        evconnlistener_disable(a->l);
    else
        evconnlistener_enable(a->l);
}

static void admit_on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    admit *a = arg;
    a->paused = false;
    if (a->spare_fd < 0)
        a->spare_fd = admit_open_spare();
    admit_update(a);
}

/* libevent's accept loop stopped on an error other than "try again". */
static void admit_on_error(struct evconnlistener *l, void *arg)
{
    (void)l;
    admit *a = arg;
    int e = EVUTIL_SOCKET_ERROR();
    if (e == EMFILE || e == ENFILE) {
        for (int i = 0; i < ADMIT_REFUSE_BURST; i++) {
            int rc = admit_refuse_waiting(a, e);
            if (rc == 1)
                return; /* every waiting connection was told */
            if (rc < 0)
                break;
        }
    } else if (e != ENOBUFS && e != ENOMEM) {
        log_warn("control port: accept: %s", strerror(e));
        return;
    }
    /* Out of descriptors with no spare, out of memory, or more waiting than
     * one wake-up refuses: the listener stays readable, so pause it (the
     * loop would spin otherwise); closing connections give descriptors
     * back meanwhile. */
    if (!a->paused) {
        double now = clock_now_s();
        if (now - a->t_warned >= 1.0) {
            log_warn("control port: accept: %s: not accepting for 1 s", strerror(e));
            a->t_warned = now;
        }
        a->paused = true;
        admit_update(a);
        struct timeval tv = {1, 0};
        evtimer_add(a->resume_ev, &tv);
    }
}

static void admit_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    admit *a = arg;
    /* Descriptors are handed out lowest first: one at or above the limit
     * less the reserve means fewer than the reserve are left. */
    unsigned long long limit = admit_fd_limit();
    if (limit && (unsigned long long)fd + admit_reserve(limit) >= limit) {
        admit_refuse_fd(a, fd, 0);
        return;
    }
    a->on_conn(a->ctx, fd, sa, salen);
}

admit *admit_new(struct event_base *base, int fd, admit_conn_fn on_conn, void *ctx, char *err, size_t errlen)
{
    admit *a = calloc(1, sizeof *a);
    if (!a) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->base = base;
    a->on_conn = on_conn;
    a->ctx = ctx;
    a->spare_fd = admit_open_spare();
    if (a->spare_fd < 0)
        log_warn("no spare descriptor (%s): a node that arrives when none is left waits in the backlog",
                 strerror(errno));
    a->l = evconnlistener_new(base, admit_on_accept, a, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    a->resume_ev = evtimer_new(base, admit_on_resume, a);
    if (!a->l || !a->resume_ev) {
        if (!a->l)
            close(fd);
        admit_free(a);
        snprintf(err, errlen, "cannot set up the control listener");
        return NULL;
    }
    evconnlistener_set_error_cb(a->l, admit_on_error);
    return a;
}

void admit_free(admit *a)
{
    if (!a)
        return;
    if (a->l)
        evconnlistener_free(a->l);
    if (a->resume_ev)
        event_free(a->resume_ev);
    if (a->spare_fd >= 0)
        close(a->spare_fd);
    free(a);
}

void admit_set_pending(admit *a, unsigned pending)
{
    bool held = pending >= ADMIT_MAX_PENDING;
    if (held == a->held)
        return;
    a->held = held;
    double now = clock_now_s();
    if (held && now - a->t_held_warned >= 1.0) { /* at most once a second: the bound may be met often */
        log_warn("%u connections have not registered yet: not accepting more until one does or goes", pending);
        a->t_held_warned = now;
    }
    admit_update(a);
}

uint64_t admit_refused(const admit *a, char *buf, size_t len)
{
    if (a->refused && buf && len)
        snprintf(buf, len, "%s", a->why);
    return a->refused;
}
