/* clocksync.c — the clock exchange's bookkeeping (see clocksync.h). */
#include "shared/clocksync.h"

#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void clocksync_init(clocksync *c) { memset(c, 0, sizeof *c); }

bool clocksync_due(const clocksync *c) { return !c->pending && c->n < CLOCKSYNC_ROUNDS; }

uint64_t clocksync_send(clocksync *c, uint64_t t0)
{
    assert(clocksync_due(c));
    /* seq counts from 1: a stray ack of 0 (a default) never matches. */
    c->seq++;
    c->t0 = t0;
    c->pending = true;
    return c->seq;
}

int clocksync_ack(clocksync *c, uint64_t seq, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3, char *err,
                  size_t errlen)
{
    if (!c->pending) {
        snprintf(err, errlen, "clock_ack seq %" PRIu64 " answers no clock sent (none is out)", seq);
        return -1;
    }
    if (seq != c->seq || t0 != c->t0) {
        snprintf(err, errlen,
                 "clock_ack seq %" PRIu64 " t0 %" PRIu64 " answers no clock sent (the one out is seq %" PRIu64
                 " t0 %" PRIu64 ")",
                 seq, t0, c->seq, c->t0);
        return -1;
    }
    clockoff_sample s = {.t0 = t0, .t1 = t1, .t2 = t2, .t3 = t3};
    int64_t off;
    uint64_t delay;
    if (!clockoff_sample_eval(&s, &off, &delay)) {
        snprintf(err, errlen,
                 "clock_ack seq %" PRIu64 " is no round trip (t1 %" PRIu64 ", t2 %" PRIu64
                 ": t2 before t1, or held longer than the round trip of %" PRIu64 " ns)",
                 seq, t1, t2, t3 >= t0 ? t3 - t0 : 0);
        /* The round is spent: the next may do better. */
        c->pending = false;
        return -1;
    }
    assert(c->n < CLOCKSYNC_ROUNDS);
    c->sample[c->n++] = s;
    c->pending = false;
    return 0;
}

int clocksync_estimate(const clocksync *c, clockoff *out)
{
    return c->n ? clockoff_estimate(c->sample, c->n, out) : -1;
}

json_t *clocksync_answer(const json_t *clock_body, uint64_t t1, uint64_t t2)
{
    json_t *seq = json_object_get(clock_body, "seq"), *t0 = json_object_get(clock_body, "t0");
    if (!json_is_integer(seq) || !json_is_integer(t0) || json_integer_value(seq) < 0 || json_integer_value(t0) < 0)
        return NULL;
    /* The node's clock as JSON's integers carry it: CLOCK_MONOTONIC stays
     * below 2^63 ns (292 years of uptime). */
    return json_pack("{s:I, s:I, s:I, s:I}", "seq", json_integer_value(seq), "t0", json_integer_value(t0), "t1",
                     (json_int_t)clocksync_node_time(t1), "t2", (json_int_t)clocksync_node_time(t2));
}

static int64_t clocksync_skew;
static pthread_once_t clocksync_skew_once = PTHREAD_ONCE_INIT;

static void clocksync_read_skew(void)
{
    const char *s = getenv("PSBENCH_TEST_CLOCK_SKEW_NS");
    if (!s || !*s)
        return;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) {
        log_warn("PSBENCH_TEST_CLOCK_SKEW_NS=%s is not a whole number of ns: ignored", s);
        return;
    }
    clocksync_skew = (int64_t)v;
}

uint64_t clocksync_node_time(uint64_t t)
{
    pthread_once(&clocksync_skew_once, clocksync_read_skew);
    if (clocksync_skew < 0) {
        uint64_t back = (uint64_t)0 - (uint64_t)clocksync_skew; /* |skew|, INT64_MIN included */
        return back > t ? 0 : t - back;
    }
    return t + (uint64_t)clocksync_skew;
}
