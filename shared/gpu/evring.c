/* evring.c — numbered marks on a GPU stream, one event each (evring.h).
 *
 * The held marks form a FIFO over the slots: the oldest at `first`, the
 * latest at (first + count - 1) % cap, their numbers consecutive. The ring
 * owns every event in its slots; evring_free is the one place they are
 * freed.
 */
#include "shared/gpu/evring.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The oldest mark still held (meaningful when count > 0). */
static evmark evring_oldest(const evring *r) { return r->marks - r->count + 1; }

static size_t evring_slot(const evring *r, evmark m)
{
    assert(r->count > 0 && m >= evring_oldest(r) && m <= r->marks);
    return (r->first + (size_t)(m - evring_oldest(r))) % r->cap;
}

int evring_init(evring *r, cugpu *g, cugpu_stream *s, size_t cap, bool grow)
{
    assert(cap > 0);
    memset(r, 0, sizeof *r);
    r->g = g;
    r->s = s;
    r->grow = grow;
    r->ev = calloc(cap, sizeof *r->ev);
    r->mark = calloc(cap, sizeof *r->mark);
    if (!r->ev || !r->mark) {
        snprintf(g->err, sizeof g->err, "out of host memory");
        return -1;
    }
    r->cap = cap;
    for (size_t i = 0; !grow && i < cap; i++)
        if (!(r->ev[i] = g->ops->event_new(g)))
            return -1;
    return 0;
}

/* Grow mode, every slot held and unreleased: twice the slots, the held
 * marks moved to the front in order (their events with them). */
static int evring_double(evring *r)
{
    size_t cap = r->cap * 2;
    cugpu_event **ev = calloc(cap, sizeof *ev);
    evmark *mark = calloc(cap, sizeof *mark);
    if (!ev || !mark) {
        free(ev);
        free(mark);
        snprintf(r->g->err, sizeof r->g->err, "out of host memory");
        return -1;
    }
    for (size_t i = 0; i < r->count; i++) {
        ev[i] = r->ev[(r->first + i) % r->cap];
        mark[i] = r->mark[(r->first + i) % r->cap];
    }
    free(r->ev);
    free(r->mark);
    r->ev = ev;
    r->mark = mark;
    r->cap = cap;
    r->first = 0;
    return 0;
}

/* A slot for the next mark: the oldest one's when the ring is full and it
 * may be recorded again (overwrite mode always; grow mode once released),
 * else a free one (grow mode doubles when none is). */
static int evring_take_slot(evring *r, size_t *slot)
{
    if (r->count == r->cap) {
        if (r->grow && evring_oldest(r) > r->released && evring_double(r) < 0)
            return -1;
        if (r->count == r->cap) { /* drop the oldest: its slot is the next */
            r->first = (r->first + 1) % r->cap;
            r->count--;
        }
    }
    *slot = (r->first + r->count) % r->cap;
    if (!r->ev[*slot] && !(r->ev[*slot] = r->g->ops->event_new(r->g)))
        return -1;
    return 0;
}

int evring_mark(evring *r, evmark *m)
{
    if (r->failed) {
        *m = ++r->marks;
        r->count = 0; /* nothing is held: nothing can be timed */
        return 0;
    }
    size_t slot;
    if (evring_take_slot(r, &slot) < 0) {
        *m = 0;
        return -1;
    }
    *m = ++r->marks;
    r->mark[slot] = *m;
    r->count++;
    if (r->g->ops->event_record(r->g, r->s, r->ev[slot]) < 0) {
        evring_fail(r);
        return -1;
    }
    return 0;
}

int evring_done(evring *r, evmark m)
{
    assert(m <= r->marks);
    if (m <= r->done_upto || r->failed)
        return 0;
    assert(r->count > 0); /* m > done_upto >= 0 was recorded, and is held or later ones are */
    /* A mark no longer held is answered by the oldest one that is: a later
     * point on the same stream. */
    evmark ask = m < evring_oldest(r) ? evring_oldest(r) : m;
    size_t slot = evring_slot(r, ask);
    int rc = r->g->ops->event_query(r->g, r->ev[slot]);
    if (rc != 0)
        return rc < 0 ? -1 : 1;
    if (r->mark[slot] > r->done_upto)
        r->done_upto = r->mark[slot];
    return 0;
}

/* A poll's pause: 1 us, doubling up to 64 us (a GPU's short kernels end
 * within microseconds; a spin would take a core from the other threads). */
static void evring_backoff(long *ns)
{
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 50 * 1000)
        *ns *= 2;
}

int evring_wait_event(cugpu *g, cugpu_stream *s, cugpu_event *e)
{
    for (long ns = 1000;; evring_backoff(&ns)) {
        int rc = g->ops->event_query(g, e);
        if (rc <= 0)
            return rc;
        if (g->ops->query(g, s) < 0) /* failed: the event will never complete */
            return -1;
    }
}

int evring_wait(evring *r, evmark m)
{
    for (long ns = 1000;; evring_backoff(&ns)) {
        int rc = evring_done(r, m);
        if (rc <= 0)
            return rc;
        if (r->g->ops->query(r->g, r->s) < 0)
            return -1;
    }
}

bool evring_held(const evring *r, evmark m)
{
    if (m == 0 || r->failed || r->count == 0 || m < evring_oldest(r) || m > r->marks)
        return false;
    return !r->grow || m > r->released;
}

int evring_elapsed(evring *r, evmark a, evmark b, float *ms)
{
    assert(a <= b);
    if (!evring_held(r, a) || !evring_held(r, b))
        return -1;
    return r->g->ops->elapsed_ms(r->g, r->ev[evring_slot(r, a)], r->ev[evring_slot(r, b)], ms);
}

void evring_release(evring *r, evmark m)
{
    assert(r->grow && m <= r->marks);
    if (m > r->released)
        r->released = m;
}

void evring_reset(evring *r) { r->done_upto = r->marks; }

void evring_fail(evring *r) { r->failed = true; }

void evring_free(evring *r)
{
    for (size_t i = 0; r->ev && i < r->cap; i++)
        if (r->ev[i])
            r->g->ops->event_free(r->g, r->ev[i]);
    free(r->ev);
    free(r->mark);
    memset(r, 0, sizeof *r);
}
