/* reactor.c — the server's event loop: the top of the transport layer.
 *
 * One thread, one libevent event_base: the listening socket, every trainer
 * connection, SIGINT/SIGTERM, and a device's wake-ups. The loop's shape per
 * iteration is:
 *
 *     poll → for each ready socket: read what it has → parse frames →
 *     stream payloads into the futures → (futures resolve, now or when the
 *     device completes) → answers queued
 *     → the pass: write every connection with output, free closed ones
 *
 * The pass (loopend.h) runs once, after every callback of the iteration,
 * so that everything a round of input produces — from every trainer —
 * leaves in one write per connection. Connections (conn.c) put themselves
 * on the flush list and the graveyard and ask for the pass; nothing below
 * calls this file. The trainer slots and the futures' outcomes are
 * members.c's; this file wires them at init.
 *
 * Two things keep trainers from waiting on a server that cannot serve
 * them: while the kind fills its state (an embedding table of up to 8 GiB,
 * after start and after a reset) the loop does it a slice at a time and
 * holds every trainer's input meanwhile, so the master link keeps
 * reporting and no trainer is answered early; and a descriptor kept spare
 * lets a trainer that arrives when the process has none left be told so
 * (`resources`) rather than left in the backlog.
 */
#include "server/server.h"
#include "server/conn.h"
#include "shared/cli.h"
#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the end of each loop iteration -------------------------------------- */

/* Write the output of every connection that has some. A write that fails
 * closes its connection, which may queue peer_lost to others: they are on
 * the list by then and written in this same pass. */
static void server_flush(server *s)
{
    while (s->flush_head) {
        conn *c = s->flush_head;
        s->flush_head = c->flush_next;
        c->in_flush = false;
        c->flush_next = NULL;
        if (c->fd >= 0)
            conn_flush(c);
    }
}

/* Free the connections closed since the last pass: no callback holds them
 * any more (their events were deleted when they closed). Returns how many
 * of them were trainers (had said hello). */
static unsigned server_reap(server *s)
{
    unsigned trainers = 0;
    while (s->graveyard) {
        conn *c = s->graveyard;
        s->graveyard = c->next;
        trainers += c->hello_done;
        conn_free(c);
    }
    return trainers;
}

/* A trainer has left: what its futures and its unread results held is
 * back in the pool (members.c failed the futures nobody waits for), and
 * the pool keeps free buffers for the next batches — up to a GiB. Give
 * them, and the heap's free pages, back to the system: what a trainer
 * made the server hold must not stay after it (issue 27's probe kept 617
 * MB). The next batches, if any, allocate again. */
static void server_give_back(server *s)
{
    size_t kept = s->pool.free_bytes;
    bufpool_trim(&s->pool, 0);
    malloc_trim(0);
    if (kept)
        log_debug("a trainer left: %zu bytes of free buffers given back", kept);
}

static void server_on_pass(void *arg)
{
    server *s = arg;
    server_flush(s);
    if (server_reap(s))
        server_give_back(s);
}

/* device->after: completions delivered from the device's wake-up. What they
 * queued asked for the pass already; this makes sure of it. */
static void server_on_device_after(void *arg)
{
    server *s = arg;
    loopend_want(&s->pass);
}

/* ---- the trace ---------------------------------------------------------------- */

/* futures_hooks.trace: a future's resolve, from its last push in to its
 * answer ready (one that fails or is drained is not recorded). */
static void server_trace_future(void *ctx, future *f, bool begin, bool answered)
{
    strace *t = ctx;
    strace_mark m = {f->trace_t0_ns, f->trace_nvtx};
    if (begin) {
        m = strace_begin(t, TRACE_RESOLVE, f->batch, f->bucket, STRACE_NONE);
    } else if (answered) {
        strace_end(t, &m, TRACE_RESOLVE, t->lane_reactor, f->batch, f->bucket, STRACE_NONE);
    } else {
        strace_drop(&m);
    }
    f->trace_t0_ns = m.t0_ns;
    f->trace_nvtx = m.nvtx;
}

/* device.trace_job: a job on the cuda device's stream, from its
 * submission to its completion seen here, on the stream's lane. */
static void server_trace_job(void *ctx, device_job *j, bool done)
{
    strace *t = ctx;
    uint64_t batch = j->trace_batch < 0 ? UINT64_MAX : (uint64_t)j->trace_batch;
    uint64_t bucket = j->trace_bucket < 0 ? STRACE_NONE : (uint64_t)j->trace_bucket;
    strace_mark m = {j->trace_t0_ns, j->trace_nvtx};
    if (!done) {
        /* No batch (the device's own barriers): nothing the window names. */
        m = j->trace_batch < 0 ? (strace_mark){0, 0} : strace_begin(t, TRACE_DEVICE_JOB, batch, bucket, STRACE_NONE);
    } else {
        strace_end(t, &m, TRACE_DEVICE_JOB, t->lane_stream, batch, bucket, STRACE_NONE);
    }
    j->trace_t0_ns = m.t0_ns;
    j->trace_nvtx = m.nvtx;
}

/* ---- the listener ---------------------------------------------------------- */

/* Connections without a hello beyond the trainer count (reconnects, a
 * probe, a health check of the port). */
#define SERVER_WAITING_SLACK 64u

static void server_on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server *s = arg;
    event_add(s->listen_ev, NULL);
    if (s->shm_ev)
        event_add(s->shm_ev, NULL);
}

static int server_open_spare(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Why a trainer cannot be taken: errno e of accept (EMFILE, ENFILE). */
static void server_fd_reason(const server *s, int e, char *why, size_t len)
{
    struct rlimit rl;
    if (e == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
        snprintf(why, len, "server %u is out of file descriptors (limit %llu): raise `ulimit -n`", s->cfg.rank,
                 (unsigned long long)rl.rlim_cur);
    else if (e == EMFILE)
        snprintf(why, len, "server %u is out of file descriptors: raise `ulimit -n`", s->cfg.rank);
    else
        snprintf(why, len, "server %u's host is out of file descriptors (the system's limit, fs.file-max)",
                 s->cfg.rank);
}

/* Tell a connection just accepted why it cannot be taken (`resources`,
 * `why`) and close it. The error is written at once, without the
 * connection machinery (that would need more descriptors and buffers): a
 * short frame always fits an empty socket buffer. */
static void server_refuse_fd(int cfd, const char *why, const char *peer)
{
    frame_hdr h = {0};
    h.type = FT_ERROR;
    h.code = frame_str_c(frame_errcode_name(ERR_RESOURCES));
    h.message = frame_str_c(why);
    h.has = FH_CODE | FH_MESSAGE;
    uint8_t buf[512];
    size_t n = frame_encode_header(&h, buf, sizeof buf);
    assert(n > 0);
    if (send(cfd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
        log_debug("%s: could not write the refusal", peer);
    /* Our side ends after the error; what the trainer sent already (its
     * hello: a few bytes, a bounded read) is dropped, so that the close is
     * a FIN, not a reset that could reach the trainer before the error. */
    shutdown(cfd, SHUT_WR);
    for (int i = 0; i < 8 && recv(cfd, buf, sizeof buf, MSG_DONTWAIT) > 0; i++)
        ;
    close(cfd);
}

/* accept failed with EMFILE or ENFILE: give up the spare descriptor to take
 * the waiting connection, tell it why (`resources`), close it, take the
 * spare back. Returns 0 when one was refused, 1 when none was waiting
 * (accept says EMFILE before it looks), -1 when it could not (no spare).
 * The error is written at once, without the
 * connection machinery (that would need more descriptors and buffers):
 * a short frame always fits an empty socket buffer. */
static int server_refuse_one(server *s, int lfd, int e)
{
    if (s->spare_fd < 0)
        return -1;
    close(s->spare_fd);
    s->spare_fd = -1;
    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) {
        int ae = errno;
        s->spare_fd = server_open_spare();
        return ae == EAGAIN || ae == EWOULDBLOCK || ae == EINTR || ae == ECONNABORTED ? 1 : -1;
    }
    char why[256], peer[64];
    server_fd_reason(s, e, why, sizeof why);
    net_peer_name(cfd, peer, sizeof peer);
    server_refuse_fd(cfd, why, peer);
    s->spare_fd = server_open_spare();
    /* A warning the first time and then at most once a minute (with the
     * count), not once per trainer. */
    s->refused_fds++;
    double now = clock_now_s();
    if (s->refused_fds == 1 || now - s->t_refused_warn >= 60) {
        log_warn("refused a trainer from %s: %s (%u connections open; %" PRIu64 " refused so far)", peer, why,
                 s->nconns, s->refused_fds);
        s->t_refused_warn = now;
    } else {
        log_debug("refused a trainer from %s: %s", peer, why);
    }
    if (s->refused_fds == 1 && s->out_of_fds)
        s->out_of_fds(s, why);
    return 0;
}

static void server_on_accept(evutil_socket_t fd, short what, void *arg)
{
    server *s = arg;
    for (int i = 0; i < 64; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            int e = errno;
            int refused = e == EMFILE || e == ENFILE ? server_refuse_one(s, fd, e) : -1;
            if (refused == 0)
                continue; /* the next one waiting, if any */
            if (refused == 1)
                break;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* The waiting connection stays in the backlog and the
                 * listener stays readable: without a pause this would spin.
                 * Try again in a second; connections that close meanwhile
                 * give descriptors back. */
                log_warn("accept: %s: not accepting for 1 s (%u connections open)", strerror(e), s->nconns);
                struct timeval tv = {1, 0};
                event_del(s->listen_ev);
                if (s->shm_ev)
                    event_del(s->shm_ev);
                evtimer_add(s->accept_pause_ev, &tv);
            } else if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR && e != ECONNABORTED) {
                log_warn("accept: %s", strerror(e));
            }
            break;
        }
        /* Connections that have not said hello yet cost a descriptor and an
         * input buffer each and, without a token, anyone may open them:
         * more than every trainer at once (plus slack for reconnects) are
         * refused, so that a flood of idle ones cannot hold the server's
         * memory for --hello-timeout. Trainers held while the kind fills
         * its table count too: they are at most the trainer count. */
        if (s->nwaiting >= s->cfg.trainers + SERVER_WAITING_SLACK) {
            char why[160], peer[64];
            snprintf(why, sizeof why, "server %u has %u connections that have not said hello yet (at most its %u "
                     "trainers + %u): try again", s->cfg.rank, s->nwaiting, s->cfg.trainers, SERVER_WAITING_SLACK);
            net_peer_name(cfd, peer, sizeof peer);
            server_refuse_fd(cfd, why, peer);
            double now = clock_now_s();
            if (now - s->t_waiting_warn >= 1) {
                log_warn("refused a connection from %s: %s", peer, why);
                s->t_waiting_warn = now;
            }
            continue;
        }
        bool shm = fd == s->shm_fd;
        if (!shm)
            net_set_nodelay(cfd);
        if (!conn_new(s, cfd, shm))
            log_warn("out of memory: refused a connection");
    }
}

/* ---- the kind's fill ----------------------------------------------------- */

/* Bytes of the kind's state filled per slice: a few milliseconds of work
 * (about 12 ms of normals on a small VM), so the link's reports, accepts
 * and signals wait no longer than that. */
#define SERVER_FILL_SLICE (4u << 20)

static void server_hold_input(server *s, bool hold)
{
    for (conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        conn_hold(c, hold);
    }
}

static void server_on_fill(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server *s = arg;
    assert(s->filling);
    if (kind_fill(s->kind, SERVER_FILL_SLICE) > 0) {
        /* The next slice after the loop's next poll: a zero timeout runs
         * once pending I/O has been seen, where an active event would run
         * again before it. */
        struct timeval now = {0, 0};
        evtimer_add(s->fill_ev, &now);
        return;
    }
    s->filling = false;
    char size[32];
    cli_format_bytes(s->kind->fill_total, size, sizeof size);
    log_info("%s table ready (%s in %.1f s)", s->kind->ops->name, size, clock_now_s() - s->t_fill);
    server_hold_input(s, false);
    if (s->kind_ready)
        s->kind_ready(s);
}

/* After the kind's start or reset: fill what it left to fill, a slice per
 * loop iteration, holding trainers' input until it is done. A reset during
 * a fill restarts it (the kind begins again). */
static void server_fill_begin(server *s)
{
    if (kind_ready(s->kind) || s->filling || s->stopping)
        return;
    s->filling = true;
    s->t_fill = clock_now_s();
    char size[32];
    cli_format_bytes(s->kind->fill_total, size, sizeof size);
    log_info("initialising the %s table (%s)", s->kind->ops->name, size);
    server_hold_input(s, true);
    struct timeval now = {0, 0};
    evtimer_add(s->fill_ev, &now);
}

/* ---- reset, and the end of a session --------------------------------------- */

const char *const server_calls_names[CALLS_TYPES] = {"lookup", "rows", "update", "updated"};

void server_reset(server *s)
{
    /* Drains the device first: nothing is freed under work in flight. */
    futures_reset(&s->fut);
    for (conn *c = s->conns; c; c = c->next) {
        conn_push_forget(c);
        /* A pass ends when every trainer has read all its results (a CUDA
         * trainer's reads of GPU memory: done by its last record, or by
         * the stream synchronisation that ends its pass). */
        if (c->ipc.peer)
            device_peer_wait(s->dev, c->ipc.peer);
        outq_return_all(&c->out);
    }
    metrics_reset(s->metrics);
    memset(s->calls, 0, sizeof s->calls); /* the calls of the pass to come */
    log_info("reset: futures and metrics cleared");
    server_fill_begin(s);
}

/* members_ops.session_end: every trainer has left (members.c has begun a
 * new session): the kind's state is filled again for the next job, and
 * the master link hears of it. */
static void server_on_session_end(void *arg)
{
    server *s = arg;
    server_fill_begin(s);
    if (s->trainers_left)
        s->trainers_left(s);
}

/* ---- shared memory ------------------------------------------------------- */

/* The pool's memory with shared memory on: buffers of a KiB or more
 * (accumulators, results: a bucket of 256 floats is one) from the arena,
 * whole pages each, so that a trainer on this host reads a result where
 * the server wrote it; smaller ones from the heap (a page each would cost
 * more than reading them from the socket). */
#define SERVER_SHARED_MIN 1024u
static void *server_pool_alloc(void *ctx, size_t bytes)
{
    server *s = ctx;
    if (bytes >= SERVER_SHARED_MIN) {
        void *p = shm_arena_alloc(&s->arena, bytes);
        if (p)
            return p;
    }
    void *p;
    return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
}

static void server_pool_free(void *ctx, void *p)
{
    server *s = ctx;
    uint64_t off;
    if (shm_arena_owns(&s->arena, p, 0, &off))
        shm_arena_free(&s->arena, p);
    else
        free(p);
}

static int server_pool_init(server *s, char *err, size_t errlen)
{
    const size_t keep = (size_t)1 << 30;
    char why[256];
    if (s->cfg.transport == PSB_TRANSPORT_TCP) {
        bufpool_init(&s->pool, keep);
        return 0;
    }
    /* Not sealed against trainers' writable mappings (they map it
     * read-only by choice): a pool that gives buffers back punches holes
     * in the segment, which that seal forbids — and a trainer could only
     * spoil results it has a share in anyway, as it can by pushing
     * garbage (docs/protocol.md). */
    if (shm_arena_init(&s->arena, "psbench-server", shm_default_size(), false, why, sizeof why) < 0) {
        if (s->cfg.transport == PSB_TRANSPORT_SHM) {
            snprintf(err, errlen, "--transport shm: %s", why);
            return -1;
        }
        log_warn("shared memory off (TCP only): %s", why);
        s->cfg.transport = PSB_TRANSPORT_TCP;
        bufpool_init(&s->pool, keep);
        return 0;
    }
    bufpool_mem mem = {.alloc = server_pool_alloc, .free = server_pool_free, .ctx = s};
    bufpool_init_mem(&s->pool, keep, &mem);
    return 0;
}

/* The Unix socket trainers on this host connect to (abstract: no file; a
 * TCP hello that asks for shared memory is redirected to it). */
static int server_shm_listen(server *s, char *err, size_t errlen)
{
    if (s->cfg.transport == PSB_TRANSPORT_TCP)
        return 0;
    char role[32];
    snprintf(role, sizeof role, "server%u", s->cfg.rank);
    shm_socket_name(s->shm_name, sizeof s->shm_name, role);
    s->shm_fd = shm_listen(s->shm_name, 1024, err, errlen);
    if (s->shm_fd < 0)
        return -1;
    s->shm_ev = event_new(s->base, s->shm_fd, EV_READ | EV_PERSIST, server_on_accept, s);
    if (!s->shm_ev || event_add(s->shm_ev, NULL) < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return -1;
    }
    log_debug("shared memory: Unix socket @%s, results in a segment of %" PRIu64 " MiB (virtual)", s->shm_name,
              s->arena.seg.size >> 20);
    return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static void server_on_signal(evutil_socket_t sig, short what, void *arg)
{
    server *s = arg;
    log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopbreak(s->base);
}

int server_init(server *s, const server_config *cfg, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (!(s->cfg.hello_timeout_s > 0))
        s->cfg.hello_timeout_s = 30; /* a config that left it out */
    s->listen_fd = -1;
    s->spare_fd = -1;
    s->shm_fd = -1;
    s->arena.seg = SHM_SEG_NONE;
    if (server_pool_init(s, err, errlen) < 0)
        return -1;
    s->cfg.kind.trainers = cfg->trainers;
    s->cfg.kind.emb.rank = cfg->rank; /* each server's table has a stream of its own */
    s->metrics = metrics_new();
    s->base = event_base_new();
    members_ops mops = {.answer = conn_deliver_answer,
                        .fail = conn_deliver_fail,
                        .session_end = server_on_session_end,
                        .ctx = s};
    if (!s->metrics || !s->base || members_init(&s->members, cfg->trainers, &s->fut, s->metrics, &mops) < 0 ||
        loopend_init(&s->pass, s->base, server_on_pass, s) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* The seed's metrics, created in its order so the table reads the
     * same whatever happens first: batch, straggler, then the same two
     * from the first push's header (psbench's), then the kind's. */
    futures_metrics fm = {
        .batch = metrics_get(s->metrics, "parameter_server_batch_metric,param_index_batch"),
        .straggler = metrics_get(s->metrics, "parameter_server_straggler_metric,param_index_straggler"),
        .batch_from_header = metrics_get(s->metrics, "parameter_server_batch_metric,param_index_batch_from_header"),
        .straggler_from_header =
            metrics_get(s->metrics, "parameter_server_straggler_metric,param_index_straggler_from_header"),
    };
    if (!fm.batch || !fm.straggler || !fm.batch_from_header || !fm.straggler_from_header) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (strace_init(&s->trace, &s->cfg.trace, s->cfg.device, err, errlen) < 0)
        return -1;
    s->dev = device_new(s->cfg.device, s->base, &s->pool, err, errlen);
    if (!s->dev)
        return -1;
    s->dev->after = server_on_device_after;
    s->dev->after_ctx = s;
    if (s->trace.has_stream) {
        s->dev->trace_job = server_trace_job;
        s->dev->trace_ctx = &s->trace;
    }
    s->kind = kind_new(&s->cfg.kind, s->dev, &s->pool, s->metrics, err, errlen);
    if (!s->kind)
        return -1;
    futures_hooks hooks = {.answer = members_on_answer, .fail = members_on_fail, .ctx = &s->members};
    if (s->trace.ring) {
        hooks.trace = server_trace_future;
        hooks.trace_ctx = &s->trace;
    }
    if (futures_init(&s->fut, s->kind, cfg->trainers, &hooks, &fm) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    futures_set_limits(&s->fut, &s->cfg.open);
    if (cfg->listen_fd >= 0) {
        s->listen_fd = cfg->listen_fd;
        s->bound_port = cfg->port;
    } else {
        s->listen_fd = net_listen_flag("--listen", cfg->host, cfg->port, 1024, &s->bound_port, err, errlen);
        if (s->listen_fd < 0)
            return -1;
    }
    if (server_shm_listen(s, err, errlen) < 0)
        return -1;
    s->listen_ev = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST, server_on_accept, s);
    s->accept_pause_ev = evtimer_new(s->base, server_on_accept_resume, s);
    s->fill_ev = evtimer_new(s->base, server_on_fill, s);
    s->spare_fd = server_open_spare();
    if (s->spare_fd < 0)
        log_warn("no spare descriptor (%s): a trainer that arrives when none is left waits in the backlog",
                 strerror(errno));
    s->sig_ev[0] = evsignal_new(s->base, SIGINT, server_on_signal, s);
    s->sig_ev[1] = evsignal_new(s->base, SIGTERM, server_on_signal, s);
    if (!s->listen_ev || !s->accept_pause_ev || !s->fill_ev || !s->sig_ev[0] || !s->sig_ev[1] || event_add(s->listen_ev, NULL) < 0 ||
        event_add(s->sig_ev[0], NULL) < 0 || event_add(s->sig_ev[1], NULL) < 0) {
        snprintf(err, errlen, "cannot set up the event loop");
        return -1;
    }
    server_fill_begin(s);
    return 0;
}

int server_run(server *s)
{
    signal(SIGPIPE, SIG_IGN);
    int rc = event_base_dispatch(s->base);
    return rc < 0 ? -1 : 0;
}

void server_free(server *s)
{
    s->stopping = true; /* closing the connections ends the session: no table for a next one */
    /* Device work in flight finishes first (its answers are dropped). */
    if (s->kind)
        futures_drain(&s->fut);
    while (s->conns)
        conn_close(s->conns, "server shutting down");
    server_reap(s);
    futures_destroy(&s->fut);
    kind_free(s->kind);
    device_destroy(s->dev);
    strace_free(&s->trace); /* after the device: its drain records the last jobs */
    for (int i = 0; i < 2; i++)
        if (s->sig_ev[i])
            event_free(s->sig_ev[i]);
    if (s->listen_ev)
        event_free(s->listen_ev);
    if (s->accept_pause_ev)
        event_free(s->accept_pause_ev);
    if (s->fill_ev)
        event_free(s->fill_ev);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->shm_ev)
        event_free(s->shm_ev);
    if (s->shm_fd >= 0)
        close(s->shm_fd);
    loopend_free(&s->pass);
    if (s->base)
        event_base_free(s->base);
    bufpool_destroy(&s->pool);
    shm_arena_destroy(&s->arena); /* after the pool: its buffers lived here */
    metrics_free(s->metrics);
    members_free(&s->members);
}
