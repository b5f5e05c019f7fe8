/* test_outq.c — the server's per-connection output queue: frames leave in
 * order and whole, partial writes resume where they stopped, and every
 * payload reference is released exactly once (written or dropped).
 * Spliced payloads (zero-copy) arrive intact, stay lent until the peer
 * pushes a later batch, are never recycled when the connection goes first,
 * and fall back to copies when splicing is impossible. A traced frame's
 * `written` runs once its last byte is in the socket. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/bufpool.h"
#include "server/outq.h"

static int nonblocking_pair(int sv[2], int sndbuf)
{
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return -1;
    if (sndbuf)
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* Read exactly n bytes (the peer has written them or will). */
static void read_exact(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

static void test_order_and_refs(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, 1 << 20);
    psbuf *p = bufpool_get(&pool, 1000);
    for (size_t i = 0; i < 1000; i++)
        p->data[i] = (uint8_t)(i * 7);
    outq q;
    outq_init(&q);
    const uint8_t h1[] = {1, 2, 3};
    uint8_t big_hdr[500];
    memset(big_hdr, 9, sizeof big_hdr); /* longer than the inline header space */
    assert_int_equal(outq_push(&q, h1, sizeof h1, p, 0), 0);
    assert_int_equal(outq_push(&q, big_hdr, sizeof big_hdr, NULL, 0), 0);
    assert_int_equal(outq_push(&q, h1, sizeof h1, p, 0), 0);
    assert_int_equal(p->refs, 3); /* ours + one per queued frame */
    assert_int_equal(q.bytes, 3 + 1000 + 500 + 3 + 1000);
    int sv[2];
    assert_int_equal(nonblocking_pair(sv, 0), 0);
    while (q.len)
        assert_true(outq_write(&q, sv[0]) > 0);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(p->refs, 1); /* written: the queue let go */
    uint8_t got[2506], want[2506];
    read_exact(sv[1], got, sizeof got);
    size_t o = 0;
    memcpy(want + o, h1, 3), o += 3;
    memcpy(want + o, p->data, 1000), o += 1000;
    memcpy(want + o, big_hdr, 500), o += 500;
    memcpy(want + o, h1, 3), o += 3;
    memcpy(want + o, p->data, 1000), o += 1000;
    assert_memory_equal(got, want, sizeof want);
    outq_free(&q);
    psbuf_unref(p);
    assert_int_equal(pool.live, 0);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* A peer that reads slowly: writes stop at EAGAIN and resume exactly. */
static void test_partial_writes(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, 16 << 20);
    psbuf *p = bufpool_get(&pool, 3 << 20);
    for (size_t i = 0; i < p->len; i++)
        p->data[i] = (uint8_t)(i * 131 + (i >> 8));
    outq q;
    outq_init(&q);
    const uint8_t h[] = {0xaa, 0xbb};
    for (int k = 0; k < 3; k++)
        assert_int_equal(outq_push(&q, h, sizeof h, p, 0), 0);
    psbuf_unref(p); /* the queue's references keep it alive */
    int sv[2];
    assert_int_equal(nonblocking_pair(sv, 64 << 10), 0);
    size_t total = 3 * (2 + (3u << 20)), got = 0;
    uint8_t *buf = malloc(total);
    int saw_eagain = 0;
    while (got < total) {
        if (q.len) {
            ssize_t w = outq_write(&q, sv[0]);
            if (w < 0) {
                assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
                saw_eagain = 1;
            }
        }
        ssize_t r = read(sv[1], buf + got, total - got < 8192 ? total - got : 8192);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_true(saw_eagain);
    assert_int_equal(q.len, 0);
    assert_int_equal(pool.live, 0); /* the last reference went with the last byte */
    for (int k = 0; k < 3; k++) {
        const uint8_t *f = buf + (size_t)k * (2 + (3u << 20));
        assert_memory_equal(f, h, 2);
        for (size_t i = 0; i < (3u << 20); i += 4093)
            assert_int_equal(f[2 + i], (uint8_t)(i * 131 + (i >> 8)));
    }
    free(buf);
    outq_free(&q);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* The trace (outq_trace_last): `written` runs for each traced frame once
 * its last byte is in the socket, in order, with what it was tagged with;
 * never for an untraced frame, nor for one dropped unwritten. */
typedef struct written_log {
    uint64_t batch[8], bucket[8], t0[8];
    int n;
} written_log;

static void on_written(void *ctx, outq_item *it)
{
    written_log *w = ctx;
    assert_true(w->n < 8);
    assert_int_equal(it->done, it->hlen + (it->payload ? it->payload->len : 0)); /* whole */
    w->batch[w->n] = it->trace_batch;
    w->bucket[w->n] = it->trace_bucket;
    w->t0[w->n++] = it->trace_t0_ns;
}

static void test_trace_written(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, 16 << 20);
    psbuf *p = bufpool_get(&pool, 1 << 20);
    memset(p->data, 5, p->len);
    outq q;
    outq_init(&q);
    written_log w = {0};
    q.written = on_written;
    q.written_ctx = &w;
    const uint8_t h[] = {1, 2};
    assert_int_equal(outq_push(&q, h, sizeof h, p, 0), 0);
    outq_trace_last(&q, 100, 0, 7, 3);
    assert_int_equal(outq_push(&q, h, sizeof h, p, 0), 0); /* not traced */
    assert_int_equal(outq_push(&q, h, sizeof h, NULL, 0), 0);
    outq_trace_last(&q, 200, 0, 8, 4);
    for (int k = 0; k < 40; k++) /* the ring grows: tags move with their frames */
        assert_int_equal(outq_push(&q, h, sizeof h, NULL, 0), 0);
    outq_trace_last(&q, 300, 0, 9, 5);
    int sv[2];
    assert_int_equal(nonblocking_pair(sv, 64 << 10), 0);
    size_t total = 2 * (2 + p->len) + 41 * 2, got = 0;
    uint8_t buf[8192];
    while (got < total) {
        if (q.len)
            outq_write(&q, sv[0]);
        ssize_t r = read(sv[1], buf, sizeof buf);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_int_equal(q.len, 0);
    assert_int_equal(w.n, 3);
    assert_int_equal(w.batch[0], 7);
    assert_int_equal(w.bucket[0], 3);
    assert_int_equal(w.t0[0], 100);
    assert_int_equal(w.batch[1], 8);
    assert_int_equal(w.t0[1], 200);
    assert_int_equal(w.batch[2], 9);
    assert_int_equal(w.bucket[2], 5);
    /* Dropped unwritten: no hook. */
    assert_int_equal(outq_push(&q, h, sizeof h, p, 0), 0);
    outq_trace_last(&q, 400, 0, 10, 6);
    outq_free(&q);
    assert_int_equal(w.n, 3);
    psbuf_unref(p);
    assert_int_equal(pool.live, 0);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* Dropping a connection with frames queued releases their payloads. */
static void test_free_releases(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, 1 << 20);
    psbuf *p = bufpool_get(&pool, 64);
    outq q;
    outq_init(&q);
    const uint8_t h[] = {7};
    for (int k = 0; k < 100; k++) /* grows the ring past its first size */
        assert_int_equal(outq_push(&q, h, sizeof h, p, 0), 0);
    assert_int_equal(p->refs, 101);
    outq_free(&q);
    assert_int_equal(p->refs, 1);
    psbuf_unref(p);
    assert_int_equal(pool.live, 0);
    bufpool_destroy(&pool);
}

/* A pool that keeps every free buffer (the cuda device's pinned pool during
 * a session) gives them back down to a bound when trimmed (its drains), and
 * what it kept is reused without a new allocation. */
static void test_pool_trim(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, SIZE_MAX);
    psbuf *b[4];
    for (int k = 0; k < 4; k++)
        assert_non_null(b[k] = bufpool_get(&pool, 1 << 20));
    for (int k = 0; k < 4; k++)
        psbuf_unref(b[k]);
    assert_int_equal(pool.free_bytes, 4u << 20); /* kept, all of them */
    bufpool_trim(&pool, (3u << 20) / 2);
    assert_true(pool.free_bytes <= (3u << 20) / 2);
    assert_int_equal(pool.free_bytes, 1u << 20);
    uint64_t allocs = pool.allocs;
    psbuf *again = bufpool_get(&pool, 1 << 20);
    assert_int_equal(pool.allocs, allocs); /* the one kept */
    assert_int_equal(pool.free_bytes, 0);
    bufpool_trim(&pool, 0); /* nothing free: nothing to do */
    psbuf_unref(again);
    bufpool_trim(&pool, 0);
    assert_int_equal(pool.free_bytes, 0);
    assert_null(pool.free);
    bufpool_destroy(&pool);
}


/* ---- zero-copy (spliced) payloads ---------------------------------------- */

/* A connected TCP pair on loopback (splice needs a real socket): sv[0] is
 * the nonblocking sender. */
static void tcp_pair(int sv[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(sv[0], (struct sockaddr *)&a, sizeof a), 0);
    sv[1] = accept(l, NULL, NULL);
    assert_true(sv[1] >= 0);
    close(l);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
}

/* Whether this kernel (or sandbox) splices user pages into a TCP socket;
 * the splice tests skip where it does not (the server copies there). */
static bool splice_works(void)
{
    static int works = -1;
    if (works >= 0)
        return works;
    int sv[2], p[2];
    tcp_pair(sv);
    works = 0;
    static char page[4096] __attribute__((aligned(4096)));
    if (pipe(p) == 0) {
        struct iovec v = {page, sizeof page};
        if (vmsplice(p[1], &v, 1, 0) == (ssize_t)sizeof page &&
            splice(p[0], NULL, sv[0], NULL, sizeof page, 0) == (ssize_t)sizeof page)
            works = 1;
        close(p[0]);
        close(p[1]);
    }
    close(sv[0]);
    close(sv[1]);
    if (!works)
        print_message("vmsplice/splice to a TCP socket does not work here: splice tests skipped\n");
    return works;
}

#define REQUIRE_SPLICE()                                                                           \
    do {                                                                                           \
        if (!splice_works())                                                                       \
            skip();                                                                                \
    } while (0)

static void fill_bytes(psbuf *p, unsigned seed)
{
    for (size_t i = 0; i < p->len; i++)
        p->data[i] = (uint8_t)(i * 131 + (i >> 9) + seed);
}

/* Write everything queued while reading it on the other end. */
static uint8_t *drain_to_peer(outq *q, int sv[2], size_t total)
{
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    size_t got = 0;
    while (got < total) {
        while (q->len) {
            ssize_t w = outq_write(q, sv[0]);
            if (w < 0) {
                assert_true(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
                break;
            }
        }
        ssize_t r = read(sv[1], buf + got, total - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    return buf;
}

/* Big payloads leave by splice, small ones and headers by writev, all in
 * order; a spliced payload is lent, tagged with its batch, until a push of
 * a later batch (or a pass boundary) returns it. */
static void test_splice_lends(void **state)
{
    (void)state;
    REQUIRE_SPLICE();
    bufpool pool;
    bufpool_init(&pool, 64 << 20);
    psbuf *big = bufpool_get(&pool, (3u << 20) + 10); /* not a whole number of pages */
    psbuf *big2 = bufpool_get(&pool, 1u << 20);
    psbuf *small = bufpool_get(&pool, 1000);
    assert_true(big->mapped && big2->mapped && !small->mapped);
    fill_bytes(big, 1);
    fill_bytes(big2, 2);
    fill_bytes(small, 3);
    outq q;
    outq_init(&q);
    outq_splice_on(&q, 1ull << 30);
    const uint8_t h1[] = {1, 2, 3}, h2[] = {4, 5};
    assert_int_equal(outq_push(&q, h1, sizeof h1, small, 6), 0);
    assert_int_equal(outq_push(&q, h2, sizeof h2, big, 7), 0);
    assert_int_equal(outq_push(&q, h1, sizeof h1, small, 7), 0);
    assert_int_equal(outq_push(&q, h2, sizeof h2, big2, 8), 0);
    int sv[2];
    tcp_pair(sv);
    size_t total = 3 + 1000 + 2 + big->len + 3 + 1000 + 2 + big2->len;
    uint8_t *got = drain_to_peer(&q, sv, total);
    size_t o = 0;
    assert_memory_equal(got + o, h1, 3), o += 3;
    assert_memory_equal(got + o, small->data, 1000), o += 1000;
    assert_memory_equal(got + o, h2, 2), o += 2;
    assert_memory_equal(got + o, big->data, big->len), o += big->len;
    assert_memory_equal(got + o, h1, 3), o += 3;
    assert_memory_equal(got + o, small->data, 1000), o += 1000;
    assert_memory_equal(got + o, h2, 2), o += 2;
    assert_memory_equal(got + o, big2->data, big2->len);
    free(got);
    assert_int_equal(q.spliced, big->len + big2->len);
    assert_int_equal(q.copied, 2000);
    assert_int_equal(q.bytes, 0);
    /* written, yet the big ones are still held: lent */
    assert_int_equal(small->refs, 1);
    assert_int_equal(big->refs, 2);
    assert_int_equal(big2->refs, 2);
    assert_int_equal(q.nloans, 2);
    assert_int_equal(q.lent_bytes, big->len + big2->len);
    outq_return(&q, 7); /* batch 7 itself: its results may still be unread */
    assert_int_equal(big->refs, 2);
    outq_return(&q, 8);
    assert_int_equal(big->refs, 1);
    assert_int_equal(big2->refs, 2);
    outq_return_all(&q);
    assert_int_equal(big2->refs, 1);
    assert_int_equal(q.lent_bytes, 0);
    psbuf_unref(big);
    psbuf_unref(big2);
    psbuf_unref(small);
    assert_int_equal(pool.live, 0);
    assert_int_equal(pool.free_bytes, big->cap + big2->cap + small->cap); /* all recycled */
    outq_free(&q);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* Loans are bounded: past lend_cap, payloads are copied instead. */
static void test_splice_lend_cap(void **state)
{
    (void)state;
    REQUIRE_SPLICE();
    bufpool pool;
    bufpool_init(&pool, 64 << 20);
    psbuf *a = bufpool_get(&pool, 1u << 20), *b = bufpool_get(&pool, 1u << 20);
    fill_bytes(a, 4);
    fill_bytes(b, 5);
    outq q;
    outq_init(&q);
    outq_splice_on(&q, (1u << 20) + (1u << 19)); /* room for one */
    const uint8_t h[] = {9};
    assert_int_equal(outq_push(&q, h, 1, a, 0), 0);
    assert_int_equal(outq_push(&q, h, 1, b, 0), 0);
    int sv[2];
    tcp_pair(sv);
    uint8_t *got = drain_to_peer(&q, sv, 2 + (2u << 20));
    assert_memory_equal(got + 1, a->data, a->len);
    assert_memory_equal(got + 2 + a->len, b->data, b->len);
    free(got);
    assert_int_equal(q.spliced, a->len);
    assert_int_equal(q.copied, b->len);
    assert_int_equal(a->refs, 2); /* lent */
    assert_int_equal(b->refs, 1); /* copied: released when written */
    outq_free(&q);
    psbuf_unref(a);
    psbuf_unref(b);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* A connection that goes while a buffer is on loan, or in the middle of
 * splicing one: whether the peer read those pages is unknown, so the
 * buffers are released, never reused for another bucket. */
static void test_splice_free_no_recycle(void **state)
{
    (void)state;
    REQUIRE_SPLICE();
    bufpool pool;
    bufpool_init(&pool, 256 << 20);
    /* 128 KiB fits any loopback socket's buffers; 32 MiB fits none */
    psbuf *lent = bufpool_get(&pool, 128u << 10), *partial = bufpool_get(&pool, 32u << 20);
    fill_bytes(lent, 6);
    fill_bytes(partial, 7);
    outq q;
    outq_init(&q);
    outq_splice_on(&q, 1ull << 30);
    const uint8_t h[] = {1};
    assert_int_equal(outq_push(&q, h, 1, lent, 3), 0);
    assert_int_equal(outq_push(&q, h, 1, partial, 3), 0);
    int sv[2];
    tcp_pair(sv);
    /* The peer reads nothing: the first fits the socket, the second stops
     * part way. */
    while (outq_write(&q, sv[0]) > 0)
        ;
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(q.nloans, 1);
    assert_int_equal(q.len, 1);
    assert_true(q.spliced > lent->len);
    uint64_t allocs = pool.allocs;
    outq_free(&q);
    assert_true(lent->no_recycle);
    assert_true(partial->no_recycle);
    psbuf_unref(lent);
    psbuf_unref(partial);
    assert_int_equal(pool.live, 0);
    assert_int_equal(pool.free_bytes, 0); /* released, not kept */
    psbuf *again = bufpool_get(&pool, 128u << 10);
    assert_int_equal(pool.allocs, allocs + 1); /* fresh pages */
    assert_false(again->no_recycle);
    psbuf_unref(again);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* No pipe to be had (descriptors exhausted): the queue says why once and
 * copies from then on; nothing is lost or reordered. */
static void test_splice_fallback(void **state)
{
    (void)state;
    bufpool pool;
    bufpool_init(&pool, 64 << 20);
    psbuf *a = bufpool_get(&pool, 1u << 20);
    fill_bytes(a, 8);
    outq q;
    outq_init(&q);
    outq_splice_on(&q, 1ull << 30);
    const uint8_t h[] = {5, 6};
    assert_int_equal(outq_push(&q, h, 2, a, 0), 0);
    assert_int_equal(outq_push(&q, h, 2, a, 1), 0);
    int sv[2];
    tcp_pair(sv);
    /* No descriptor to be had: a low limit, and every slot under it taken. */
    struct rlimit old, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)(sv[1] > sv[0] ? sv[1] : sv[0]) + 8;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fillers[256], nfill = 0, fd;
    while (nfill < 256 && (fd = open("/dev/null", O_RDONLY)) >= 0)
        fillers[nfill++] = fd;
    assert_true(nfill < 256 && errno == EMFILE); /* every slot is taken */
    ssize_t w = outq_write(&q, sv[0]); /* the first header */
    assert_true(w > 0);
    w = outq_write(&q, sv[0]); /* needs a pipe: falls back to writev */
    while (nfill > 0)
        close(fillers[--nfill]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_true(w > 0);
    assert_false(q.splice);
    assert_int_equal(q.splice_errno, EMFILE);
    uint8_t *got = drain_to_peer(&q, sv, 2 * (2 + a->len));
    assert_memory_equal(got, h, 2);
    assert_memory_equal(got + 2, a->data, a->len);
    assert_memory_equal(got + 2 + a->len, h, 2);
    assert_memory_equal(got + 4 + a->len, a->data, a->len);
    free(got);
    assert_int_equal(q.spliced, 0);
    assert_int_equal(q.copied, 2 * a->len);
    assert_int_equal(q.nloans, 0);
    assert_int_equal(a->refs, 1);
    outq_free(&q);
    psbuf_unref(a);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

/* Splicing that fails part way through a payload (the pipe replaced by
 * something vmsplice refuses): the rest is copied from where the socket
 * stopped, and the buffer is still lent, since its first pages went by
 * reference. */
static void test_splice_fails_midway(void **state)
{
    (void)state;
    REQUIRE_SPLICE();
    bufpool pool;
    bufpool_init(&pool, 64 << 20);
    psbuf *a = bufpool_get(&pool, 8u << 20);
    fill_bytes(a, 9);
    outq q;
    outq_init(&q);
    outq_splice_on(&q, 1ull << 30);
    const uint8_t h[] = {3};
    assert_int_equal(outq_push(&q, h, 1, a, 4), 0);
    int sv[2];
    tcp_pair(sv);
    size_t total = 1 + a->len, got = 0;
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    while (q.spliced == 0 || q.zc.in_pipe > 0) { /* some bytes sent by reference, none pending */
        ssize_t w = outq_write(&q, sv[0]);
        assert_true(w > 0 || errno == EAGAIN);
        ssize_t r = recv(sv[1], buf + got, total - got, MSG_DONTWAIT);
        if (r > 0)
            got += (size_t)r;
    }
    assert_int_equal(q.len, 1);
    close(q.zc.pipe[0]);
    close(q.zc.pipe[1]);
    q.zc.pipe[0] = open("/dev/null", O_RDONLY);
    q.zc.pipe[1] = open("/dev/null", O_WRONLY);
    assert_true(q.zc.pipe[0] >= 0 && q.zc.pipe[1] >= 0);
    while (got < total) {
        if (q.len) {
            ssize_t w = outq_write(&q, sv[0]);
            assert_true(w > 0 || errno == EAGAIN);
        }
        ssize_t r = recv(sv[1], buf + got, total - got, q.len ? MSG_DONTWAIT : 0);
        if (r > 0)
            got += (size_t)r;
    }
    assert_false(q.splice);
    assert_int_not_equal(q.splice_errno, 0);
    assert_true(q.copied > 0);
    assert_int_equal(q.spliced + q.copied, a->len);
    assert_memory_equal(buf, h, 1);
    assert_memory_equal(buf + 1, a->data, a->len);
    free(buf);
    assert_int_equal(q.len, 0);
    assert_int_equal(q.nloans, 1); /* lent, though it was finished by copies */
    assert_int_equal(a->refs, 2);
    outq_return(&q, 5);
    assert_int_equal(a->refs, 1);
    outq_free(&q);
    psbuf_unref(a);
    bufpool_destroy(&pool);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_refs),
        cmocka_unit_test(test_partial_writes),
        cmocka_unit_test(test_free_releases),
        cmocka_unit_test(test_trace_written),
        cmocka_unit_test(test_pool_trim),
        cmocka_unit_test(test_splice_lends),
        cmocka_unit_test(test_splice_lend_cap),
        cmocka_unit_test(test_splice_free_no_recycle),
        cmocka_unit_test(test_splice_fallback),
        cmocka_unit_test(test_splice_fails_midway),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
