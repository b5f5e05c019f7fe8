/* pending.c — the (batch, bucket) futures table (see pending.h). */
#include "server/pending.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static size_t pending_hash(uint64_t batch, uint64_t bucket)
{
    uint64_t k = batch * 0x9e3779b97f4a7c15ULL ^ (bucket + 0x632be59bd9b4e019ULL);
    k ^= k >> 31;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 29;
    return (size_t)k;
}

int pending_init(pending_table *t, uint32_t nslots)
{
    memset(t, 0, sizeof *t);
    t->nheads = 256;
    t->heads = calloc(t->nheads, sizeof *t->heads);
    t->nslots = nslots;
    return t->heads ? 0 : -1;
}

void pending_free_entry(future *e)
{
    free(e->pushed); /* slot_bytes lives in the same block */
    free(e);
}

/* The words of an entry's per-slot block: the pushed bitmap, one byte
 * count per slot, then the bitmap of pushes from GPU memory. */
static size_t pending_bitmap_words(const pending_table *t)
{
    return (t->nslots + 63) / 64 + 1;
}

static size_t pending_block_words(const pending_table *t)
{
    return 2 * pending_bitmap_words(t) + t->nslots;
}

void pending_clear(pending_table *t, void (*free_fn)(future *, void *), void *arg)
{
    for (size_t i = 0; i < t->nheads; i++) {
        future *e = t->heads[i];
        while (e) {
            future *next = e->next;
            if (free_fn)
                free_fn(e, arg);
            pending_free_entry(e);
            e = next;
        }
        t->heads[i] = NULL;
    }
    t->count = 0;
    t->nmarks = 0;
    if (t->mark_idx)
        memset(t->mark_idx, 0, t->mark_slots * sizeof *t->mark_idx);
}

void pending_destroy(pending_table *t, void (*free_fn)(future *, void *), void *arg)
{
    pending_clear(t, free_fn, arg);
    while (t->spare) {
        future *e = t->spare;
        t->spare = e->next;
        pending_free_entry(e);
    }
    free(t->heads);
    free(t->marks);
    free(t->mark_idx);
    memset(t, 0, sizeof *t);
}

#define PENDING_SPARE_MAX 4096

void pending_recycle(pending_table *t, future *e)
{
    if (t->nspare >= PENDING_SPARE_MAX) {
        pending_free_entry(e);
        return;
    }
    e->next = t->spare;
    t->spare = e;
    t->nspare++;
}

future *pending_find(pending_table *t, uint64_t batch, uint64_t bucket)
{
    future *e = t->heads[pending_hash(batch, bucket) & (t->nheads - 1)];
    while (e && (e->batch != batch || e->bucket != bucket))
        e = e->next;
    return e;
}

static size_t pending_mark_hash(uint64_t bucket, size_t nslots)
{
    return pending_hash(bucket, 0x5bd1e995u) & (nslots - 1);
}

/* The mark of `bucket`, or NULL. */
static struct pending_mark *pending_mark_find(const pending_table *t, uint64_t bucket)
{
    if (!t->mark_idx)
        return NULL;
    for (size_t i = pending_mark_hash(bucket, t->mark_slots);; i = (i + 1) & (t->mark_slots - 1)) {
        uint32_t m = t->mark_idx[i];
        if (m == 0)
            return NULL;
        if (t->marks[m - 1].bucket == bucket)
            return &t->marks[m - 1];
    }
}

bool pending_is_stale(const pending_table *t, uint64_t batch, uint64_t bucket)
{
    const struct pending_mark *m = pending_mark_find(t, bucket);
    return m && batch <= m->newest;
}

bool pending_has_mark(const pending_table *t, uint64_t bucket)
{
    return pending_mark_find(t, bucket) != NULL;
}

/* Index mark number i (from 0) by its bucket; the index has room. */
static void pending_mark_index(pending_table *t, size_t i)
{
    size_t k = pending_mark_hash(t->marks[i].bucket, t->mark_slots);
    while (t->mark_idx[k])
        k = (k + 1) & (t->mark_slots - 1);
    t->mark_idx[k] = (uint32_t)(i + 1);
}

/* Room for one more mark: the array and its index (at most half full). */
static int pending_marks_reserve(pending_table *t)
{
    if (t->nmarks < t->marks_cap)
        return 0;
    size_t n = t->marks_cap ? t->marks_cap * 2 : 64;
    if (n > UINT32_MAX / 2)
        return -1;
    struct pending_mark *nm = realloc(t->marks, n * sizeof *nm);
    if (!nm)
        return -1;
    t->marks = nm;
    uint32_t *idx = calloc(2 * n, sizeof *idx);
    if (!idx)
        return -1; /* the array grew; the old index still serves its marks */
    free(t->mark_idx);
    t->mark_idx = idx;
    t->mark_slots = 2 * n;
    t->marks_cap = n;
    for (size_t i = 0; i < t->nmarks; i++)
        pending_mark_index(t, i);
    return 0;
}

static int pending_grow(pending_table *t)
{
    size_t n = t->nheads * 2;
    future **h = calloc(n, sizeof *h);
    if (!h)
        return -1;
    for (size_t i = 0; i < t->nheads; i++) {
        future *e = t->heads[i];
        while (e) {
            future *next = e->next;
            size_t b = pending_hash(e->batch, e->bucket) & (n - 1);
            e->next = h[b];
            h[b] = e;
            e = next;
        }
    }
    free(t->heads);
    t->heads = h;
    t->nheads = n;
    return 0;
}

future *pending_create(pending_table *t, uint64_t batch, uint64_t bucket)
{
    assert(!pending_find(t, batch, bucket));
    if (t->count + 1 > t->nheads && pending_grow(t) < 0)
        return NULL;
    size_t words = pending_block_words(t);
    future *e = t->spare;
    if (e) {
        t->spare = e->next;
        t->nspare--;
        uint64_t *pushed = e->pushed;
        memset(e, 0, sizeof *e);
        memset(pushed, 0, words * sizeof *pushed);
        e->pushed = pushed;
    } else {
        e = calloc(1, sizeof *e);
        if (!e)
            return NULL;
        e->pushed = calloc(words, sizeof *e->pushed);
        if (!e->pushed) {
            free(e);
            return NULL;
        }
    }
    e->slot_bytes = e->pushed + pending_bitmap_words(t);
    e->gpu_pushed = e->slot_bytes + t->nslots;
    e->batch = batch;
    e->bucket = bucket;
    size_t b = pending_hash(batch, bucket) & (t->nheads - 1);
    e->next = t->heads[b];
    t->heads[b] = e;
    t->count++;
    return e;
}

static void pending_mark_resolved(pending_table *t, uint64_t batch, uint64_t bucket)
{
    struct pending_mark *m = pending_mark_find(t, bucket);
    if (m) {
        if (batch > m->newest)
            m->newest = batch;
        return;
    }
    if (pending_marks_reserve(t) < 0)
        return; /* stale detection degrades; nothing breaks */
    m = &t->marks[t->nmarks];
    m->bucket = bucket;
    m->newest = batch;
    pending_mark_index(t, t->nmarks++);
}

void pending_remove(pending_table *t, future *e, bool resolved)
{
    future **pp = &t->heads[pending_hash(e->batch, e->bucket) & (t->nheads - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    assert(*pp == e);
    *pp = e->next;
    e->next = NULL;
    t->count--;
    if (resolved)
        pending_mark_resolved(t, e->batch, e->bucket);
}

void pending_foreach(pending_table *t, void (*fn)(future *, void *), void *arg)
{
    for (size_t i = 0; i < t->nheads; i++)
        for (future *e = t->heads[i]; e; e = e->next)
            fn(e, arg);
}
