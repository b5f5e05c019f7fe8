/* staging.c — chunks of pinned host memory with device twins, used one
 * after the other on one stream (staging.h).
 */
#include "shared/gpu/staging.h"

#include "shared/gpu/evring.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void staging_init(staging *r, cugpu *g, cugpu_stream *s, size_t chunk, size_t limit)
{
    assert(chunk > 0);
    memset(r, 0, sizeof *r);
    r->g = g;
    r->s = s;
    r->chunk = chunk;
    r->limit = limit;
}

static void staging_chunk_free(staging *r, staging_chunk *k)
{
    if (k->host)
        r->g->ops->host_free(r->g, k->host);
    r->g->ops->dev_free(r->g, k->dev);
    if (k->ev)
        r->g->ops->event_free(r->g, k->ev);
    assert(r->held >= k->cap);
    r->held -= k->cap;
    free(k);
}

/* A chunk of cap bytes with its twin and event, or NULL (g->err says why,
 * unless the host is out of memory). Counted as an allocation even when it
 * fails, as the server always counted it. */
static staging_chunk *staging_chunk_new(staging *r, size_t cap)
{
    cugpu *g = r->g;
    staging_chunk *k = calloc(1, sizeof *k);
    r->allocs++;
    if (!k)
        return NULL;
    k->cap = cap;
    k->host = g->ops->host_alloc(g, cap);
    k->dev = k->host ? g->ops->dev_alloc(g, cap) : devmem_none();
    k->ev = !devmem_is_none(k->dev) ? g->ops->event_new(g) : NULL;
    r->held += cap;
    if (!k->ev) {
        staging_chunk_free(r, k);
        return NULL;
    }
    return k;
}

/* The current chunk closed: an event after everything queued so far. */
static int staging_close(staging *r)
{
    staging_chunk *k = r->cur;
    if (r->g->ops->event_record(r->g, r->s, k->ev) < 0) {
        snprintf(r->err, sizeof r->err, "%s", r->g->err);
        return -1;
    }
    k->next = NULL;
    if (r->closed_tail)
        r->closed_tail->next = k;
    else
        r->closed_head = k;
    r->closed_tail = k;
    r->cur = NULL;
    return 0;
}

/* The oldest closed chunk becomes idle (the GPU is past it). */
static void staging_retire_oldest(staging *r)
{
    staging_chunk *k = r->closed_head;
    r->closed_head = k->next;
    if (!r->closed_head)
        r->closed_tail = NULL;
    k->used = 0;
    k->next = r->idle;
    r->idle = k;
}

/* An idle chunk that holds `need` becomes the current one: 1, or 0 (none). */
static int staging_pick_idle(staging *r, size_t need)
{
    for (staging_chunk **pp = &r->idle; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= need) {
            r->cur = *pp;
            *pp = r->cur->next;
            r->cur->next = NULL;
            return 1;
        }
    return 0;
}

int staging_room(staging *r, size_t need)
{
    if (r->cur && r->cur->cap - r->cur->used >= need)
        return 0;
    if (r->cur && staging_close(r) < 0)
        return -1;
    /* Closed chunks the GPU has finished with become idle. */
    while (r->closed_head && r->g->ops->event_query(r->g, r->closed_head->ev) == 0)
        staging_retire_oldest(r);
    size_t cap = need > r->chunk ? (need + 4095) & ~(size_t)4095 : r->chunk;
    while (!staging_pick_idle(r, need)) {
        /* Over the limit: the oldest closed chunk, once the GPU is past
         * it, rather than another. */
        if (!r->limit || r->held + cap <= r->limit || !r->closed_head) {
            if (!(r->cur = staging_chunk_new(r, cap))) {
                snprintf(r->err, sizeof r->err, "no staging memory (%zu bytes): %s", cap, r->g->err);
                return -1;
            }
            break;
        }
        if (evring_wait_event(r->g, r->s, r->closed_head->ev) < 0) {
            snprintf(r->err, sizeof r->err, "%s", r->g->err);
            return -1;
        }
        staging_retire_oldest(r);
    }
    assert(r->cur->used == 0 && r->cur->cap >= need);
    return 0;
}

void staging_take(staging *r, size_t n)
{
    assert(r->cur && n <= r->cur->cap - r->cur->used);
    size_t step = (n + STAGING_ALIGN - 1) & ~(size_t)(STAGING_ALIGN - 1);
    r->cur->used = step < r->cur->cap - r->cur->used ? r->cur->used + step : r->cur->cap;
}

void staging_reset(staging *r)
{
    while (r->closed_head)
        staging_retire_oldest(r);
    if (r->cur)
        r->cur->used = 0;
}

void staging_free(staging *r)
{
    staging_chunk *lists[] = {r->cur, r->closed_head, r->idle};
    for (size_t i = 0; i < 3; i++)
        while (lists[i]) {
            staging_chunk *k = lists[i];
            lists[i] = k->next;
            staging_chunk_free(r, k);
        }
    assert(r->held == 0);
    memset(r, 0, sizeof *r);
}
