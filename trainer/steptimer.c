/* steptimer.c — step metrics timed between marks (see steptimer.h). */
#include "trainer/steptimer.h"
#include "shared/log.h"

#include <assert.h>
#include <string.h>

void steptimer_init(steptimer *t, compute *dev)
{
    memset(t, 0, sizeof *t);
    t->dev = dev;
    t->on = dev && strcmp(compute_name(dev), "cpu") != 0;
}

stats *steptimer_span(steptimer *t, metrics *m, const char *key, unsigned from, unsigned to)
{
    assert(from < to && to < STEPT_MARKS && t->nspans < STEPT_SPANS);
    stats *st = metrics_get(m, key);
    if (!st)
        return NULL;
    if (t->on) {
        if (metrics_set_gpu_timed(m, key) < 0)
            return NULL;
        t->span[t->nspans++] = (stept_span){st, (uint8_t)from, (uint8_t)to};
        if (to + 1 > t->nmarks)
            t->nmarks = to + 1;
    }
    return st;
}

void steptimer_mark(steptimer *t, unsigned i)
{
    if (!t->on)
        return;
    assert(i < t->nmarks);
    t->cur[i] = compute_mark(t->dev);
}

/* The oldest kept step's samples, its marks done. */
static void stept_record_oldest(steptimer *t)
{
    const cmark *mk = t->pend[t->head];
    double ms[STEPT_SPANS];
    bool ok = true;
    for (uint32_t k = 0; k < t->nspans && ok; k++) {
        int rc = compute_elapsed(t->dev, mk[t->span[k].from], mk[t->span[k].to], &ms[k]);
        assert(rc <= 0); /* done: its last mark is */
        ok = rc == 0;
    }
    if (ok) {
        for (uint32_t k = 0; k < t->nspans; k++)
            metrics_add(t->span[k].st, ms[k]);
    } else {
        t->lost++;
        if (!t->warned) {
            t->warned = true;
            log_warn("a step's GPU times were lost (more than %d marks in one step: many buckets?); its "
                     "forward, backward, optimizer and batch samples are left out",
                     COMPUTE_TIMED_MARKS);
        }
    }
    t->head = (t->head + 1) % STEPT_PENDING;
    t->npend--;
}

/* The last mark of the oldest kept step (every other one is before it). */
static cmark stept_last(const steptimer *t) { return t->pend[t->head][t->nmarks - 1]; }

void steptimer_end(steptimer *t)
{
    if (!t->on || t->nspans == 0)
        return;
    if (t->npend == STEPT_PENDING) {
        compute_wait(t->dev, stept_last(t));
        stept_record_oldest(t);
    }
    memcpy(t->pend[(t->head + t->npend) % STEPT_PENDING], t->cur, sizeof t->cur);
    t->npend++;
    while (t->npend > 0 && compute_done(t->dev, stept_last(t)))
        stept_record_oldest(t);
}

void steptimer_flush(steptimer *t)
{
    while (t->npend > 0) {
        compute_wait(t->dev, stept_last(t));
        stept_record_oldest(t);
    }
}

void steptimer_drop(steptimer *t)
{
    t->head = t->npend = 0;
}
