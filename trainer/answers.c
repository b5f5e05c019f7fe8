/* answers.c — one answer from every server (see answers.h). */
#include "trainer/answers.h"
#include "shared/clock.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int answers_init(answers *a, size_t n)
{
    a->rx = calloc(n ? n : 1, sizeof *a->rx);
    a->n = a->rx ? n : 0;
    a->remaining = 0;
    a->t_last_ns = 0;
    return a->rx ? 0 : -1;
}

void answers_free(answers *a)
{
    free(a->rx);
    a->rx = NULL;
    a->n = a->remaining = 0;
}

void answers_expect(answers *a)
{
    a->remaining = a->n;
    for (size_t p = 0; p < a->n; p++)
        a->rx[p].done = a->rx[p].receiving = false;
}

void answers_expect_one(answers *a, size_t server)
{
    assert(server < a->n);
    for (size_t p = 0; p < a->n; p++) {
        a->rx[p].done = p != server;
        a->rx[p].receiving = false;
    }
    a->remaining = 1;
}

bool answers_owns(const answers *a, const void *frame)
{
    uintptr_t f = (uintptr_t)frame, lo = (uintptr_t)a->rx;
    return a->rx && f >= lo && f < lo + a->n * sizeof *a->rx;
}

bool answers_begin(answers *a, size_t server, void **frame)
{
    if (server >= a->n || a->rx[server].done || a->rx[server].receiving)
        return false;
    a->rx[server].receiving = true;
    *frame = &a->rx[server];
    return true;
}

size_t answers_server(const answers *a, const void *frame)
{
    size_t p = (size_t)((const answer_rx *)frame - a->rx);
    assert(p < a->n);
    return p;
}

void answers_end(answers *a, void *frame, uint64_t rx_ns)
{
    answer_rx *rx = frame;
    assert(rx->receiving && a->remaining > 0);
    rx->receiving = false;
    rx->done = true;
    a->remaining--;
    a->t_last_ns = rx_ns;
}

int answers_wait(answers *a, client *cl, uint64_t t0, double timeout_s, const char *what, answers_tick_fn tick,
                 void *ctx, uint64_t batches_done, char *err, size_t errlen)
{
    uint64_t timeout_ns = (uint64_t)(timeout_s * 1e9);
    while (a->remaining > 0) {
        uint64_t now = clock_now_ns();
        if (now - t0 > timeout_ns) {
            size_t p = 0;
            while (p < a->n && a->rx[p].done)
                p++;
            snprintf(err, errlen, "timed out after %.1f s waiting for %s from server %s (--rpc-timeout)", timeout_s,
                     what, p < a->n ? cl->conns[p].addr : "?");
            return -1;
        }
        uint64_t left_ms = (timeout_ns - (now - t0)) / 1000000 + 1;
        uint64_t cap_ms = tick ? 250 : 1000;
        if (client_poll(cl, (int)(left_ms < cap_ms ? left_ms : cap_ms), err, errlen) < 0)
            return -1;
        if (tick && a->remaining > 0 && tick(ctx, batches_done, err, errlen) < 0)
            return -1;
    }
    return 0;
}
