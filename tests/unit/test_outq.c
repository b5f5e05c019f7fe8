/* test_outq.c — the server's per-connection output queue: frames leave in
 * order and whole, partial writes resume where they stopped, and every
 * payload reference is released exactly once (written or dropped). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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
static void read_all(int fd, uint8_t *buf, size_t n)
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
    assert_int_equal(outq_push(&q, h1, sizeof h1, p), 0);
    assert_int_equal(outq_push(&q, big_hdr, sizeof big_hdr, NULL), 0);
    assert_int_equal(outq_push(&q, h1, sizeof h1, p), 0);
    assert_int_equal(p->refs, 3); /* ours + one per queued frame */
    assert_int_equal(q.bytes, 3 + 1000 + 500 + 3 + 1000);
    int sv[2];
    assert_int_equal(nonblocking_pair(sv, 0), 0);
    while (q.len)
        assert_true(outq_write(&q, sv[0]) > 0);
    assert_int_equal(q.bytes, 0);
    assert_int_equal(p->refs, 1); /* written: the queue let go */
    uint8_t got[2506], want[2506];
    read_all(sv[1], got, sizeof got);
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
        assert_int_equal(outq_push(&q, h, sizeof h, p), 0);
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
        assert_int_equal(outq_push(&q, h, sizeof h, p), 0);
    assert_int_equal(p->refs, 101);
    outq_free(&q);
    assert_int_equal(p->refs, 1);
    psbuf_unref(p);
    assert_int_equal(pool.live, 0);
    bufpool_destroy(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_refs),
        cmocka_unit_test(test_partial_writes),
        cmocka_unit_test(test_free_releases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
