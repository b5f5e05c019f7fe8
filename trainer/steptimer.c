/* steptimer.c — step metrics timed between marks (see steptimer.h). */
#include "trainer/steptimer.h"
#include "shared/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void steptimer_init(steptimer *t, compute *dev)
{
    memset(t, 0, sizeof *t);
    t->dev = dev;
    t->on = dev && strcmp(compute_name(dev), "cpu") != 0;
}

void steptimer_release(steptimer *t)
{
    free(t->cur.sample);
    for (uint32_t i = 0; i < STEPT_PENDING; i++)
        free(t->pend[i].sample);
    t->cur.sample = NULL;
    memset(t->pend, 0, sizeof t->pend);
}

stats *steptimer_span(steptimer *t, metrics *m, const char *key, unsigned from, unsigned to)
{
    assert(from < to && to < STEPT_MARKS && t->nspans < STEPT_SPANS);
    stats *st = metrics_get(m, key);
    if (!st)
        return NULL;
    if (t->on) {
        metrics_mark_gpu_timed(st);
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
    t->cur.mark[i] = compute_mark(t->dev);
}

/* A sample lost: counted, said once. */
static void stept_lost(steptimer *t, const char *why)
{
    t->lost++;
    if (!t->warned) {
        t->warned = true;
        log_warn("a step's GPU times were lost (%s); that step's GPU-timed samples are left out", why);
    }
}

void steptimer_sample(steptimer *t, stats *st, cmark from, cmark to)
{
    if (!t->on || !st)
        return;
    assert(from <= to);
    stept_step *c = &t->cur;
    if (c->nsample == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 8;
        stept_sample *p = realloc(c->sample, cap * sizeof *p);
        if (!p) {
            stept_lost(t, "out of memory for a bucket's sample");
            return;
        }
        c->sample = p;
        c->cap = cap;
    }
    metrics_mark_gpu_timed(st);
    c->sample[c->nsample++] = (stept_sample){st, from, to, 0};
}

/* The oldest kept step's samples, its marks done. */
static void stept_record_oldest(steptimer *t)
{
    stept_step *s = &t->pend[t->head];
    const cmark *mk = s->mark;
    double ms[STEPT_SPANS];
    bool ok = true;
    for (uint32_t k = 0; k < t->nspans && ok; k++) {
        int rc = compute_elapsed(t->dev, mk[t->span[k].from], mk[t->span[k].to], &ms[k]);
        assert(rc <= 0); /* done: its last mark is */
        ok = rc == 0;
    }
    /* Every own sample's time read first: a step is recorded whole or not
     * at all. */
    for (uint32_t k = 0; k < s->nsample && ok; k++) {
        int rc = compute_elapsed(t->dev, s->sample[k].from, s->sample[k].to, &s->sample[k].ms);
        assert(rc <= 0);
        ok = rc == 0;
    }
    if (ok) {
        for (uint32_t k = 0; k < t->nspans; k++)
            metrics_add(t->span[k].st, ms[k]);
        for (uint32_t k = 0; k < s->nsample; k++)
            metrics_add(s->sample[k].st, s->sample[k].ms);
    } else {
        char why[96];
        snprintf(why, sizeof why, "more than %d marks in one step: many buckets?", COMPUTE_TIMED_MARKS);
        stept_lost(t, why);
    }
    s->nsample = 0;
    t->head = (t->head + 1) % STEPT_PENDING;
    t->npend--;
}

/* The last mark of the oldest kept step (every other one is before it). */
static cmark stept_last(const steptimer *t) { return t->pend[t->head].mark[t->nmarks - 1]; }

void steptimer_end(steptimer *t)
{
    if (!t->on || t->nspans == 0)
        return;
    if (t->npend == STEPT_PENDING) {
        compute_wait(t->dev, stept_last(t));
        stept_record_oldest(t);
    }
#ifndef NDEBUG
    for (uint32_t k = 0; k < t->cur.nsample; k++)
        assert(t->cur.sample[k].to <= t->cur.mark[t->nmarks - 1]);
#endif
    /* The step into the free slot; the slot's old sample array (empty)
     * becomes the next step's, so that arrays are grown once. */
    stept_step *slot = &t->pend[(t->head + t->npend) % STEPT_PENDING];
    stept_step spare = *slot;
    *slot = t->cur;
    t->cur = spare;
    t->cur.nsample = 0;
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
    for (uint32_t i = 0; i < STEPT_PENDING; i++)
        t->pend[i].nsample = 0;
    t->cur.nsample = 0;
    t->head = t->npend = 0;
}
