/* clockoff.c — a node's clock offset from round trips (see clockoff.h). */
#include "shared/clockoff.h"

#include <assert.h>

/* b - a as a signed count of ns; false where it does not fit 64 bits. */
static bool clockoff_diff(uint64_t b, uint64_t a, int64_t *out)
{
    if (b >= a) {
        if (b - a > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)(b - a);
    } else {
        if (a - b > (uint64_t)INT64_MAX)
            return false;
        *out = -(int64_t)(a - b);
    }
    return true;
}

bool clockoff_sample_eval(const clockoff_sample *s, int64_t *offset_ns, uint64_t *delay_ns)
{
    if (s->t3 < s->t0 || s->t2 < s->t1)
        return false;
    uint64_t rtt = s->t3 - s->t0, held = s->t2 - s->t1;
    /* A node that held the message longer than the round trip took: one
     * of the clocks jumped, or the readings are not of one round trip. */
    if (held > rtt)
        return false;
    int64_t out, back, sum;
    if (!clockoff_diff(s->t1, s->t0, &out) || !clockoff_diff(s->t2, s->t3, &back) ||
        __builtin_add_overflow(out, back, &sum))
        return false;
    /* Halved toward minus infinity (an arithmetic shift): the same rounding
     * for a clock ahead as for one behind. */
    *offset_ns = sum >> 1;
    *delay_ns = rtt - held;
    return true;
}

int clockoff_estimate(const clockoff_sample *s, size_t n, clockoff *out)
{
    clockoff best = {0};
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        int64_t off;
        uint64_t delay;
        if (!clockoff_sample_eval(&s[i], &off, &delay))
            continue;
        best.used++;
        if (!any || delay < best.delay_ns) {
            best.offset_ns = off;
            best.delay_ns = delay;
            best.sample = i;
            any = true;
        }
    }
    if (!any)
        return -1;
    /* Rounded up: the bound must hold for an odd delay too. */
    best.uncertainty_ns = best.delay_ns / 2 + best.delay_ns % 2;
    assert(best.sample < n);
    *out = best;
    return 0;
}
