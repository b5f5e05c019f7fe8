/* bare_floor.c — the floor every parameter server pays.
 *
 * A bare epoll server that waits for each client's K messages of S bytes,
 * then answers each client with K messages of S bytes: no framing, no
 * arithmetic, no copies beyond the kernel's. It is what a parameter server
 * costs when the server does nothing but move the bytes, so that
 * bench/server_throughput.sh can put psbench-server's rounds/s next to it.
 *
 *   bare-floor --clients N --buckets K --bytes S --seconds T [--warmup-rounds W]
 *
 * The parent listens on 127.0.0.1 (ephemeral port), forks N client
 * processes and runs the server: one thread, epoll, nonblocking sockets,
 * TCP_NODELAY. A round: every client writes K*S bytes as one stream; the
 * server recv()s every byte into a per-connection buffer; once ALL N clients
 * have delivered their round it answers each client with K*S bytes taken from
 * one preallocated reply buffer (one writev of K iovecs per client, continued
 * on EPOLLOUT when partial). A client reads its K*S reply bytes and starts
 * the next round; clients use poll() on nonblocking sockets, so they can read
 * while they write.
 *
 * Only the server measures. A round completes when the last of the N pushes
 * has been read; a round's latency is the time between consecutive
 * completions. After W warm-up rounds (default 3) the timed window runs
 * until the first completion at or after T seconds, then the server prints
 * one line on stdout:
 *
 *   bare-floor rounds=R seconds=T rounds_per_s=X bytes_in_per_s=Y p50_ms=A p99_ms=B
 *
 * (seconds is the measured window; bytes_in_per_s counts client->server
 * bytes, N*K*S per round), shuts down the sockets, kills and reaps the
 * clients and exits 0. Clients die with the parent (PR_SET_PDEATHSIG). On
 * any error: a one-line reason on stderr, clients reaped, exit 1 (2 for a
 * usage error).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PSBENCH_VERSION
#define PSBENCH_VERSION "dev"
#endif

#define BF_RECV_BUF (256u * 1024u)           /* per-connection receive buffer */
#define BF_IOV_MAX 1024                      /* iovecs per writev (Linux UIO_MAXIOV) */
#define BF_MAX_CLIENTS 1024
#define BF_MAX_ROUND_BYTES (1ull << 30)      /* K*S per client per round */
#define BF_CONNECT_TIMEOUT_S 10.0            /* all clients connected within */
#define BF_STALL_TIMEOUT_S 10.0              /* no socket event for this long: fail */
#define BF_MAX_EVENTS 64
#define BF_TAG_LISTEN UINT64_MAX             /* epoll tags besides connection indices */
#define BF_TAG_SIGNAL (UINT64_MAX - 1)

typedef struct {
    long clients;    /* N */
    long buckets;    /* K */
    size_t bytes;    /* S */
    double seconds;  /* T */
    long warmup;     /* W */
} bf_opts;

/* ---- process bookkeeping (parent only) ------------------------------- */

static pid_t *bf_pids;     /* forked clients; 0 once reaped */
static long bf_npids;

static double bf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Kill every client still alive and reap them all. */
static void bf_reap_children(void)
{
    for (long i = 0; i < bf_npids; i++)
        if (bf_pids[i] > 0)
            kill(bf_pids[i], SIGKILL);
    for (long i = 0; i < bf_npids; i++) {
        if (bf_pids[i] <= 0)
            continue;
        while (waitpid(bf_pids[i], NULL, 0) < 0 && errno == EINTR)
            ;
        bf_pids[i] = 0;
    }
}

/* Parent's error exit: one line on stderr, clients reaped, exit 1. */
__attribute__((noreturn, format(printf, 1, 2)))
static void bf_die(const char *fmt, ...)
{
    va_list ap;
    fputs("bare-floor: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    bf_reap_children();
    exit(1);
}

/* ---- command line ---------------------------------------------------- */

static void bf_usage(FILE *f)
{
    fputs("usage: bare-floor --clients N --buckets K --bytes S --seconds T"
          " [--warmup-rounds W]\n"
          "  The floor every parameter server pays: N forked clients each push"
          " K messages\n"
          "  of S bytes per round to a bare epoll server, which answers each"
          " with K*S bytes\n"
          "  once all N have pushed. Prints one line:\n"
          "  bare-floor rounds=R seconds=T rounds_per_s=X bytes_in_per_s=Y"
          " p50_ms=A p99_ms=B\n",
          f);
}

__attribute__((noreturn, format(printf, 1, 2)))
static void bf_usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("bare-floor: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    exit(2);
}

static long bf_parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        bf_usage_error("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    return (long)v;
}

static double bf_parse_seconds(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 1e6)
        bf_usage_error("%s: expected a positive number of seconds, got '%s'", flag, s);
    return v;
}

static bf_opts bf_parse_args(int argc, char **argv)
{
    bf_opts o = {.clients = -1, .buckets = -1, .bytes = 0, .seconds = -1, .warmup = 3};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            bf_usage(stdout);
            exit(0);
        }
        if (!strcmp(arg, "--version")) {
            printf("bare-floor %s\n", PSBENCH_VERSION);
            exit(0);
        }
        /* --flag VALUE or --flag=VALUE */
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
#define BF_IS(name) (nlen == strlen(name) && !strncmp(arg, name, nlen))
        if (!BF_IS("--clients") && !BF_IS("--buckets") && !BF_IS("--bytes") &&
            !BF_IS("--seconds") && !BF_IS("--warmup-rounds"))
            bf_usage_error("unknown argument '%s'", arg);
        if (!val)
            bf_usage_error("%s needs a value", arg);
        if (!eq)
            i++;
        if (BF_IS("--clients"))
            o.clients = bf_parse_long("--clients", val, 1, BF_MAX_CLIENTS);
        else if (BF_IS("--buckets"))
            o.buckets = bf_parse_long("--buckets", val, 1, 1L << 20);
        else if (BF_IS("--bytes"))
            o.bytes = (size_t)bf_parse_long("--bytes", val, 1, 1L << 30);
        else if (BF_IS("--seconds"))
            o.seconds = bf_parse_seconds("--seconds", val);
        else
            o.warmup = bf_parse_long("--warmup-rounds", val, 0, 1L << 30);
#undef BF_IS
    }
    if (o.clients < 0 || o.buckets < 0 || o.bytes == 0 || o.seconds < 0)
        bf_usage_error("--clients, --buckets, --bytes and --seconds are required");
    if ((unsigned long long)o.buckets * o.bytes > BF_MAX_ROUND_BYTES)
        bf_usage_error("--buckets x --bytes is %llu bytes; at most %llu per round",
                       (unsigned long long)o.buckets * o.bytes, BF_MAX_ROUND_BYTES);
    return o;
}

/* ---- sockets --------------------------------------------------------- */

static int bf_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int bf_set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Listen on 127.0.0.1 with an ephemeral port; returns the fd, sets *port. */
static int bf_listen(long backlog, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        bf_die("socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        bf_die("bind 127.0.0.1:0: %s", strerror(errno));
    if (listen(fd, (int)backlog) < 0)
        bf_die("listen: %s", strerror(errno));
    if (getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
        bf_die("getsockname: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}

/* ---- client (child process) ------------------------------------------ */

__attribute__((noreturn, format(printf, 2, 3)))
static void bf_client_fail(long id, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "bare-floor: client %ld: ", id);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

/* A peer that went away: the server shut down, so the client just leaves. */
static bool bf_client_peer_gone(int err)
{
    return err == ECONNRESET || err == EPIPE || err == ENOTCONN;
}

static int bf_client_connect(long id, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        bf_client_fail(id, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        if (errno != EINTR)
            bf_client_fail(id, "connect 127.0.0.1:%u: %s", port, strerror(errno));
    if (bf_set_nodelay(fd) < 0 || bf_set_nonblocking(fd) < 0)
        bf_client_fail(id, "socket options: %s", strerror(errno));
    return fd;
}

/* Write as much of the round's push as the socket takes. */
static void bf_client_send(long id, int fd, const unsigned char *buf, size_t need, size_t *sent)
{
    while (*sent < need) {
        ssize_t n = send(fd, buf + *sent, need - *sent, MSG_NOSIGNAL);
        if (n > 0) {
            *sent += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else if (n < 0 && bf_client_peer_gone(errno)) {
            _exit(0);
        } else {
            bf_client_fail(id, "send: %s", n < 0 ? strerror(errno) : "wrote 0 bytes");
        }
    }
}

/* Read reply bytes until the socket is empty or the round's reply is in. */
static void bf_client_recv(long id, int fd, unsigned char *buf, size_t need, size_t *got)
{
    for (;;) {
        /* Nothing more is due this round: a readable socket means EOF (the
         * server stopped) or a protocol error. */
        size_t want = *got < need ? need - *got : 1;
        if (want > BF_RECV_BUF)
            want = BF_RECV_BUF;
        ssize_t n = recv(fd, buf, want, 0);
        if (n == 0 || (n < 0 && bf_client_peer_gone(errno)))
            _exit(0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0)
            bf_client_fail(id, "recv: %s", strerror(errno));
        if (*got >= need)
            bf_client_fail(id, "server sent more than a round's reply");
        *got += (size_t)n;
        if (*got == need)
            return;
    }
}

__attribute__((noreturn))
static void bf_client_run(const bf_opts *o, uint16_t port, long id)
{
    size_t need = (size_t)o->buckets * o->bytes;
    unsigned char *out = malloc(need);
    unsigned char *in = malloc(BF_RECV_BUF);
    if (!out || !in)
        bf_client_fail(id, "out of memory (%zu bytes)", need + BF_RECV_BUF);
    memset(out, 0x5a, need);  /* fault the pages in before the first round */
    memset(in, 0, BF_RECV_BUF);

    int fd = bf_client_connect(id, port);
    size_t sent = 0, got = 0;
    for (;;) {
        bf_client_send(id, fd, out, need, &sent);
        if (sent == need && got == need) {  /* round over: next one */
            sent = got = 0;
            continue;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN | (sent < need ? POLLOUT : 0)};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            bf_client_fail(id, "poll: %s", strerror(errno));
        }
        if (p.revents & (POLLIN | POLLERR | POLLHUP))
            bf_client_recv(id, fd, in, need, &got);
    }
}

/* Fork the N clients; each dies with the parent. */
static void bf_spawn_clients(const bf_opts *o, uint16_t port, int listen_fd,
                             const sigset_t *child_mask)
{
    pid_t parent = getpid();
    bf_pids = calloc((size_t)o->clients, sizeof *bf_pids);
    if (!bf_pids)
        bf_die("out of memory");
    fflush(NULL);
    for (long i = 0; i < o->clients; i++) {
        pid_t pid = fork();
        if (pid < 0)
            bf_die("fork client %ld: %s", i, strerror(errno));
        if (pid == 0) {
            bf_npids = 0;  /* a client must never kill its siblings */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                bf_client_fail(i, "prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
            if (getppid() != parent)  /* parent already gone */
                _exit(1);
            sigprocmask(SIG_SETMASK, child_mask, NULL);
            close(listen_fd);
            bf_client_run(o, port, i);
        }
        bf_pids[bf_npids++] = pid;
    }
}

/* ---- server (parent) ------------------------------------------------- */

typedef struct {
    int fd;
    size_t received;     /* bytes of this round's push read so far */
    size_t sent;         /* bytes of this round's reply written so far */
    bool replying;       /* reply queued and not fully written */
    bool want_out;       /* EPOLLOUT registered */
    unsigned char *buf;  /* receive buffer, BF_RECV_BUF bytes */
} bf_conn;

typedef struct {
    const bf_opts *o;
    size_t round_bytes;       /* K*S, each way, per client */
    int epfd, listen_fd, sig_fd;
    bf_conn *conns;
    long nconns;              /* accepted so far */
    long arrived;             /* connections whose push of this round is in */
    unsigned char *reply;     /* K*S bytes, sent to every client */
    long rounds;              /* completed rounds, warm-up included */
    long timed;               /* completed rounds in the timed window */
    double t_start;           /* when the server started (connect deadline) */
    double t_window;          /* start of the timed window */
    double t_prev;            /* previous round completion */
    double t_end;             /* end of the timed window */
    double t_activity;        /* last socket or signal event */
    double *lat;              /* per-round latencies of the timed window, s */
    size_t nlat, caplat;
    bool done;
} bf_server;

static void bf_epoll_set(bf_server *s, int op, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};
    if (epoll_ctl(s->epfd, op, fd, &ev) < 0)
        bf_die("epoll_ctl: %s", strerror(errno));
}

static void bf_server_init(bf_server *s, const bf_opts *o, int listen_fd)
{
    memset(s, 0, sizeof *s);
    s->o = o;
    s->round_bytes = (size_t)o->buckets * o->bytes;
    s->listen_fd = listen_fd;
    s->conns = calloc((size_t)o->clients, sizeof *s->conns);
    s->reply = malloc(s->round_bytes);
    s->caplat = 1024;
    s->lat = malloc(s->caplat * sizeof *s->lat);
    if (!s->conns || !s->reply || !s->lat)
        bf_die("out of memory (%zu bytes of reply)", s->round_bytes);
    memset(s->reply, 0xa5, s->round_bytes);
    for (long i = 0; i < o->clients; i++) {
        s->conns[i].fd = -1;
        if (!(s->conns[i].buf = malloc(BF_RECV_BUF)))
            bf_die("out of memory");
        memset(s->conns[i].buf, 0, BF_RECV_BUF);
    }

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    if ((s->sig_fd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
        bf_die("signalfd: %s", strerror(errno));
    if ((s->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        bf_die("epoll_create1: %s", strerror(errno));
    bf_epoll_set(s, EPOLL_CTL_ADD, listen_fd, EPOLLIN, BF_TAG_LISTEN);
    bf_epoll_set(s, EPOLL_CTL_ADD, s->sig_fd, EPOLLIN, BF_TAG_SIGNAL);
    s->t_start = s->t_activity = bf_now();
}

static void bf_server_accept(bf_server *s)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            bf_die("accept: %s", strerror(errno));
        }
        if (s->nconns == s->o->clients)
            bf_die("more connections than --clients %ld", s->o->clients);
        if (bf_set_nodelay(fd) < 0)
            bf_die("TCP_NODELAY: %s", strerror(errno));
        long i = s->nconns++;
        s->conns[i].fd = fd;
        bf_epoll_set(s, EPOLL_CTL_ADD, fd, EPOLLIN, (uint64_t)i);
        if (s->nconns == s->o->clients) {  /* everyone is in: stop listening */
            bf_epoll_set(s, EPOLL_CTL_DEL, s->listen_fd, 0, 0);
            close(s->listen_fd);
            s->listen_fd = -1;
            s->t_prev = s->t_window = bf_now();  /* used when --warmup-rounds 0 */
            return;
        }
    }
}

/* iovecs for the rest of a reply, starting `sent` bytes in: K buckets of S. */
static int bf_reply_iov(const bf_server *s, size_t sent, struct iovec *v)
{
    size_t S = s->o->bytes;
    size_t first = sent / S, off = sent % S;
    int n = 0;
    for (size_t k = first; k < (size_t)s->o->buckets && n < BF_IOV_MAX; k++, off = 0) {
        v[n].iov_base = s->reply + k * S + off;
        v[n].iov_len = S - off;
        n++;
    }
    return n;
}

/* Write as much of c's reply as the socket takes; EPOLLOUT covers the rest. */
static void bf_conn_write(bf_server *s, long i)
{
    bf_conn *c = &s->conns[i];
    struct iovec v[BF_IOV_MAX];
    while (c->sent < s->round_bytes) {
        ssize_t n = writev(c->fd, v, bf_reply_iov(s, c->sent, v));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!c->want_out) {
                    c->want_out = true;
                    bf_epoll_set(s, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLOUT, (uint64_t)i);
                }
                return;
            }
            bf_die("writev to connection %ld: %s", i, strerror(errno));
        }
        c->sent += (size_t)n;
    }
    c->replying = false;
    c->sent = 0;
    if (c->want_out) {
        c->want_out = false;
        bf_epoll_set(s, EPOLL_CTL_MOD, c->fd, EPOLLIN, (uint64_t)i);
    }
}

static void bf_server_record(bf_server *s, double latency)
{
    if (s->nlat == s->caplat) {
        double *p = realloc(s->lat, 2 * s->caplat * sizeof *p);
        if (!p)
            bf_die("out of memory");
        s->lat = p;
        s->caplat *= 2;
    }
    s->lat[s->nlat++] = latency;
}

/* All N pushes of the round are in: time it, then answer everyone. */
static void bf_server_round_complete(bf_server *s)
{
    double t = bf_now();
    s->rounds++;
    if (s->rounds == s->o->warmup) {
        s->t_window = t;
    } else if (s->rounds > s->o->warmup) {
        bf_server_record(s, t - s->t_prev);
        s->timed++;
        if (t - s->t_window >= s->o->seconds) {
            s->t_end = t;
            s->done = true;
            return;
        }
    }
    s->t_prev = t;
    s->arrived = 0;
    for (long i = 0; i < s->nconns; i++) {
        s->conns[i].received = 0;
        s->conns[i].replying = true;
        bf_conn_write(s, i);
    }
}

/* Read what c has sent; every byte is read, none is looked at. */
static void bf_conn_read(bf_server *s, long i)
{
    bf_conn *c = &s->conns[i];
    for (;;) {
        /* A client sends its next round only after its whole reply, so data
         * while replying or after a complete push is a protocol error. */
        bool expecting = !c->replying && c->received < s->round_bytes;
        size_t want = expecting ? s->round_bytes - c->received : 1;
        if (want > BF_RECV_BUF)
            want = BF_RECV_BUF;
        ssize_t n = recv(c->fd, c->buf, want, 0);
        if (n == 0)
            bf_die("connection %ld closed by its client (round %ld)", i, s->rounds);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            bf_die("recv from connection %ld: %s", i, strerror(errno));
        }
        if (!expecting)
            bf_die("connection %ld: client sent more than a round before its reply", i);
        c->received += (size_t)n;
        if (c->received == s->round_bytes) {
            if (++s->arrived == s->nconns && s->nconns == s->o->clients)
                bf_server_round_complete(s);
            return;
        }
    }
}

/* SIGCHLD: a client exited mid-run. SIGINT/SIGTERM: stop. Both are errors. */
static void bf_server_signal(bf_server *s)
{
    struct signalfd_siginfo si;
    while (read(s->sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGCHLD)
            bf_die("interrupted by signal %u", si.ssi_signo);
        for (long i = 0; i < bf_npids; i++) {
            int st;
            if (bf_pids[i] <= 0 || waitpid(bf_pids[i], &st, WNOHANG) <= 0)
                continue;
            bf_pids[i] = 0;
            if (WIFEXITED(st))
                bf_die("client process %ld exited early with status %d", i, WEXITSTATUS(st));
            bf_die("client process %ld killed by signal %d", i, WTERMSIG(st));
        }
    }
}

/* epoll timeout: until the connect deadline, else until the stall deadline. */
static int bf_server_timeout_ms(const bf_server *s, double now)
{
    double left = s->nconns < s->o->clients
                      ? s->t_start + BF_CONNECT_TIMEOUT_S - now
                      : s->t_activity + BF_STALL_TIMEOUT_S - now;
    return left <= 0 ? 0 : (int)(left * 1e3) + 1;
}

static void bf_server_check_deadlines(const bf_server *s, double now)
{
    if (s->nconns < s->o->clients && now - s->t_start >= BF_CONNECT_TIMEOUT_S)
        bf_die("only %ld of %ld clients connected within %.0f s", s->nconns,
               s->o->clients, BF_CONNECT_TIMEOUT_S);
    if (now - s->t_activity >= BF_STALL_TIMEOUT_S)
        bf_die("no progress for %.0f s (round %ld)", BF_STALL_TIMEOUT_S, s->rounds);
}

static void bf_server_run(bf_server *s)
{
    struct epoll_event evs[BF_MAX_EVENTS];
    while (!s->done) {
        int n = epoll_wait(s->epfd, evs, BF_MAX_EVENTS, bf_server_timeout_ms(s, bf_now()));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            bf_die("epoll_wait: %s", strerror(errno));
        }
        double now = bf_now();
        if (n == 0) {
            bf_server_check_deadlines(s, now);
            continue;
        }
        s->t_activity = now;
        for (int e = 0; e < n && !s->done; e++) {
            uint64_t tag = evs[e].data.u64;
            uint32_t ev = evs[e].events;
            if (tag == BF_TAG_LISTEN) {
                bf_server_accept(s);
            } else if (tag == BF_TAG_SIGNAL) {
                bf_server_signal(s);
            } else {
                if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
                    bf_conn_read(s, (long)tag);
                if ((ev & EPOLLOUT) && s->conns[tag].replying && !s->done)
                    bf_conn_write(s, (long)tag);
            }
        }
    }
}

/* Stop: shut every socket down, then kill and reap the clients. */
static void bf_server_stop(bf_server *s)
{
    for (long i = 0; i < s->nconns; i++) {
        shutdown(s->conns[i].fd, SHUT_RDWR);
        close(s->conns[i].fd);
        s->conns[i].fd = -1;
    }
    bf_reap_children();
    close(s->epfd);
    close(s->sig_fd);
}

static void bf_server_free(bf_server *s)
{
    for (long i = 0; i < s->o->clients; i++)
        free(s->conns[i].buf);
    free(s->conns);
    free(s->reply);
    free(s->lat);
    free(bf_pids);
    bf_pids = NULL;
    bf_npids = 0;
}

static int bf_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double bf_percentile(const double *v, size_t n, double p)
{
    double x = p * (double)n;
    size_t rank = (size_t)x;
    if ((double)rank < x)
        rank++;
    if (n == 0)
        return 0;
    return v[rank == 0 ? 0 : rank - 1];
}

static void bf_server_report(bf_server *s)
{
    double secs = s->t_end - s->t_window;
    double rps = secs > 0 ? (double)s->timed / secs : 0;
    double bytes_in = rps * (double)s->o->clients * (double)s->round_bytes;
    qsort(s->lat, s->nlat, sizeof *s->lat, bf_cmp_double);
    printf("bare-floor rounds=%ld seconds=%.3f rounds_per_s=%.2f bytes_in_per_s=%.0f"
           " p50_ms=%.3f p99_ms=%.3f\n",
           s->timed, secs, rps, bytes_in, 1e3 * bf_percentile(s->lat, s->nlat, 0.50),
           1e3 * bf_percentile(s->lat, s->nlat, 0.99));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bf_opts o = bf_parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);

    /* Block the signals the server takes through signalfd before forking,
     * so none is lost; clients get the old mask back. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &block, &old) < 0)
        bf_die("sigprocmask: %s", strerror(errno));

    uint16_t port;
    int listen_fd = bf_listen(o.clients, &port);
    bf_spawn_clients(&o, port, listen_fd, &old);

    bf_server s;
    bf_server_init(&s, &o, listen_fd);
    bf_server_run(&s);
    bf_server_stop(&s);
    bf_server_report(&s);
    bf_server_free(&s);
    return 0;
}
