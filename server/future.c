/* future.c — the life of a server's futures (see future.h and the state
 * diagram in pending.h). */
#include "server/future.h"
#include "shared/clock.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void futures_on_resolved(void *ctx, future *f, psbuf *result, frame_errcode code, const char *why);

static bool futures_is_lost(const futures *t, uint32_t slot)
{
    return (t->lost[slot / 64] >> (slot % 64)) & 1;
}

int futures_init(futures *t, kind *k, uint32_t nslots, const futures_hooks *h, const futures_metrics *m)
{
    assert(m->batch && m->straggler && m->batch_from_header && m->straggler_from_header);
    memset(t, 0, sizeof *t);
    t->k = k;
    t->nslots = nslots;
    t->hooks = *h;
    t->m = *m;
    t->lost = calloc((nslots + 63) / 64 + 1, sizeof *t->lost);
    t->lost_rank = calloc(nslots, sizeof *t->lost_rank);
    t->m_lag = calloc(nslots, sizeof *t->m_lag);
    if (!t->lost || !t->lost_rank || !t->m_lag || pending_init(&t->table, nslots) < 0)
        return -1;
    k->resolved = futures_on_resolved;
    k->resolved_ctx = t;
    return 0;
}

/* ---- pushes bound to a future --------------------------------------------- */

static void futures_bind(future *f, push_ctx *p)
{
    p->f = f;
    p->next_in_future = f->pushes;
    f->pushes = p;
}

static void futures_unbind(push_ctx *p)
{
    future *f = p->f;
    push_ctx **pp = &f->pushes;
    while (*pp != p)
        pp = &(*pp)->next_in_future;
    *pp = p->next_in_future;
    p->next_in_future = NULL;
    p->f = NULL;
}

/* ---- retirement ------------------------------------------------------------- */

/* The one way out of the table for a future that is not a tombstone:
 * release the kind's buffers, unlink (recording the key as resolved when
 * it was answered), recycle. */
static void futures_retire(futures *t, future *f, bool resolved)
{
    assert(!f->pushes);
    t->k->ops->release(t->k, f);
    pending_remove(&t->table, f, resolved);
    pending_recycle(&t->table, f);
}

static void futures_fail(futures *t, future *f, frame_errcode code, const char *why)
{
    assert(f->state == FUTURE_OPEN || f->state == FUTURE_RESOLVING);
    f->state = FUTURE_FAILED;
    log_warn("batch %" PRIu64 " bucket %" PRIu64 " failed: %s", f->batch, f->bucket, why);
    /* Stop the pushes still streaming into it before its buffers go. */
    while (f->pushes) {
        push_ctx *p = f->pushes;
        t->k->ops->push_abort(t->k, p);
        futures_unbind(p);
    }
    t->k->ops->release(t->k, f);
    char msg[256];
    snprintf(msg, sizeof msg, "batch %" PRIu64 " bucket %" PRIu64 " cannot complete: %s", f->batch, f->bucket,
             why);
    t->hooks.fail(t->hooks.ctx, f, code, msg);
    /* It stays as a tombstone so that late pushes to it are told peer_lost
     * too; it goes with the session. */
}

static void futures_resolve(futures *t, future *f, uint64_t now_ns)
{
    assert(f->state == FUTURE_OPEN && f->completed == t->k->expected && f->started == t->k->expected);
    assert(f->t_first_whole_ns && f->t_first_ns <= f->t_first_whole_ns && f->t_first_whole_ns <= now_ns);
    f->t_last_ns = now_ns;
    metrics_add(t->m.straggler, clock_ms(f->t_first_whole_ns, f->t_last_ns));
    metrics_add(t->m.straggler_from_header, clock_ms(f->t_first_ns, f->t_last_ns));
    f->state = FUTURE_RESOLVING;
    f->t_resolve_ns = f->t_last_ns;
    t->resolving++;
    t->k->ops->resolve(t->k, f); /* may call futures_on_resolved before it returns */
}

/* The kind's report: the answer (or why there is none). */
static void futures_on_resolved(void *ctx, future *f, psbuf *result, frame_errcode code, const char *why)
{
    futures *t = ctx;
    assert(f->state == FUTURE_RESOLVING && t->resolving > 0);
    t->resolving--;
    if (f->cancelled) {
        /* Drained: nobody waits for this answer any more. */
        if (result)
            psbuf_unref(result);
        f->state = FUTURE_DONE;
        futures_retire(t, f, false);
        return;
    }
    if (!result) {
        futures_fail(t, f, code ? code : ERR_PEER_LOST, why ? why : "the answer could not be computed");
        return;
    }
    f->state = FUTURE_DONE;
    t->hooks.answer(t->hooks.ctx, f, result);
    uint64_t now = clock_now_ns();
    metrics_add(t->m.batch, clock_ms(f->t_first_whole_ns, now));
    metrics_add(t->m.batch_from_header, clock_ms(f->t_first_ns, now));
    psbuf_unref(result);
    futures_retire(t, f, true);
}

/* ---- admission ------------------------------------------------------------------ */

static bool futures_shape_matches(const future *f, const frame_hdr *h)
{
    if (f->layout != h->layout)
        return false;
    if (f->layout == LAYOUT_DENSE)
        return f->count == h->count;
    return f->rows == h->rows && f->cols == h->cols;
}

frame_errcode futures_admit(futures *t, const frame_hdr *h, uint32_t slot, uint64_t rank, push_ctx *p,
                            char *msg, size_t len)
{
    assert(!p->f && slot < t->nslots);
    uint64_t batch = h->batch;
    frame_errcode code = t->k->ops->admit(t->k, h, &batch, msg, len);
    if (code != ERR_NONE)
        return code;
    future *f = pending_find(&t->table, batch, h->bucket);
    if (f && f->state == FUTURE_FAILED) {
        snprintf(msg, len, "batch %" PRIu64 " bucket %" PRIu64 " failed: a trainer was lost", batch, h->bucket);
        return ERR_PEER_LOST;
    }
    if (!f && pending_is_stale(&t->table, batch, h->bucket)) {
        snprintf(msg, len, "batch %" PRIu64 " bucket %" PRIu64 " is already resolved", batch, h->bucket);
        return ERR_STALE_BATCH;
    }
    if (!f && t->nlost) {
        snprintf(msg, len, "trainer rank %" PRIu64 " disconnected; no bucket can complete",
                 t->lost_rank[t->first_lost]);
        return ERR_PEER_LOST;
    }
    if (f && (pending_has_slot(f, slot) || f->state != FUTURE_OPEN)) {
        /* A RESOLVING future has every push it needs: this slot is in it. */
        snprintf(msg, len, "rank %" PRIu64 " already pushed batch %" PRIu64 " bucket %" PRIu64, rank, batch,
                 h->bucket);
        return ERR_DUPLICATE_PUSH;
    }
    if (f && !futures_shape_matches(f, h)) {
        if (f->layout == LAYOUT_DENSE && h->layout == LAYOUT_DENSE)
            snprintf(msg, len, "count %" PRIu64 " differs from %" PRIu64 " of the other pushes", h->count,
                     f->count);
        else if (f->layout == h->layout)
            snprintf(msg, len,
                     "rows x cols %" PRIu64 "x%" PRIu64 " differs from %" PRIu64 "x%" PRIu64
                     " of the other pushes",
                     h->rows, h->cols, f->rows, f->cols);
        else
            snprintf(msg, len, "layout differs from the other pushes of this bucket");
        return ERR_SHAPE_MISMATCH;
    }

    bool first = false;
    if (!f) {
        f = pending_create(&t->table, batch, h->bucket);
        if (!f) {
            snprintf(msg, len, "server out of memory");
            return ERR_TOO_LARGE;
        }
        f->state = FUTURE_OPEN;
        f->layout = h->layout;
        f->count = h->count;
        f->rows = h->rows;
        f->cols = h->cols;
        f->t_first_ns = clock_now_ns();
        first = true;
    }
    pending_set_slot(f, slot);
    f->started++;
    futures_bind(f, p);
    p->slot = slot;
    p->first = first;
    p->len = h->payload;
    p->nnz = h->layout == LAYOUT_SPARSE ? h->nnz : 0;
    if (t->k->ops->push_begin(t->k, p) < 0) {
        futures_push_abort(t, p);
        snprintf(msg, len, "server out of memory for this push");
        return ERR_TOO_LARGE;
    }
    return ERR_NONE;
}

void futures_push_done(futures *t, push_ctx *p)
{
    future *f = p->f;
    assert(f && f->state == FUTURE_OPEN);
    futures_unbind(p);
    uint64_t now = clock_now_ns();
    if (f->completed++ == 0)
        f->t_first_whole_ns = now; /* where the seed's clock starts */
    if (t->m_lag[p->slot] && t->k->expected > 1)
        metrics_add(t->m_lag[p->slot], clock_ms(f->t_first_whole_ns, now));
    if (f->completed == t->k->expected)
        futures_resolve(t, f, now);
}

void futures_push_abort(futures *t, push_ctx *p)
{
    future *f = p->f;
    assert(f && f->state == FUTURE_OPEN && f->started > 0);
    t->k->ops->push_abort(t->k, p);
    futures_unbind(p);
    pending_clear_slot(f, p->slot);
    f->started--;
    if (f->started == 0)
        futures_retire(t, f, false); /* nobody else in it: as if never opened */
}

void futures_push_lost(futures *t, push_ctx *p)
{
    future *f = p->f;
    assert(f && f->state == FUTURE_OPEN);
    futures_fail(t, f, ERR_PEER_LOST, "a trainer disconnected in the middle of its push");
    assert(!p->f); /* futures_fail detached every push */
}

/* ---- members ----------------------------------------------------------------------- */

typedef struct lost_ctx {
    uint32_t slot;
    future **victims;
    size_t n, cap;
    bool oom;
} lost_ctx;

static void futures_collect_lost(future *f, void *arg)
{
    lost_ctx *lc = arg;
    if (f->state != FUTURE_OPEN || pending_has_slot(f, lc->slot))
        return;
    if (lc->n == lc->cap) {
        size_t cap = lc->cap ? lc->cap * 2 : 16;
        future **v = realloc(lc->victims, cap * sizeof *v);
        if (!v) {
            lc->oom = true;
            return;
        }
        lc->victims = v;
        lc->cap = cap;
    }
    lc->victims[lc->n++] = f;
}

void futures_member_lost(futures *t, uint32_t slot, uint64_t rank)
{
    assert(slot < t->nslots);
    if (!futures_is_lost(t, slot)) {
        t->lost[slot / 64] |= (uint64_t)1 << (slot % 64);
        if (t->nlost++ == 0)
            t->first_lost = slot;
    }
    t->lost_rank[slot] = rank;
    /* Futures this trainer never pushed to can never complete: tell the
     * trainers waiting on them now, rather than let them time out. */
    lost_ctx lc = {.slot = slot};
    pending_foreach(&t->table, futures_collect_lost, &lc);
    char why[96];
    snprintf(why, sizeof why, "trainer rank %" PRIu64 " disconnected before pushing", rank);
    for (size_t i = 0; i < lc.n; i++)
        futures_fail(t, lc.victims[i], ERR_PEER_LOST, why);
    free(lc.victims);
    if (lc.oom)
        log_warn("out of memory failing the futures of a lost trainer; its peers will time out");
}

void futures_member_back(futures *t, uint32_t slot)
{
    if (futures_is_lost(t, slot)) {
        t->lost[slot / 64] &= ~((uint64_t)1 << (slot % 64));
        t->nlost--;
        /* The one named is back: name another still lost (the lowest). */
        for (uint32_t i = 0; t->nlost && t->first_lost == slot && i < t->nslots; i++)
            if (futures_is_lost(t, i))
                t->first_lost = i;
    }
}

/* ---- drain, reset, shutdown ------------------------------------------------------------- */

static void futures_cancel(future *f, void *arg)
{
    (void)arg;
    if (f->state == FUTURE_RESOLVING)
        f->cancelled = true;
}

void futures_drain(futures *t)
{
    if (t->resolving)
        pending_foreach(&t->table, futures_cancel, NULL);
    /* Even with no future resolving: a kind's work outside futures (the
     * embedding kind's lookups and updates) may be in flight, and reset,
     * shutdown and a new session must not change what it uses. */
    device_drain(t->k->dev);
    assert(t->resolving == 0);
}

/* pending_destroy's callback: what is left are open futures and
 * tombstones (drained first, so nothing is resolving). */
static void futures_free_one(future *f, void *arg)
{
    futures *t = arg;
    assert(f->state != FUTURE_RESOLVING);
    while (f->pushes) {
        push_ctx *p = f->pushes;
        t->k->ops->push_abort(t->k, p);
        futures_unbind(p);
    }
    if (f->state == FUTURE_OPEN)
        t->k->ops->release(t->k, f); /* a tombstone released when it failed */
}

void futures_reset(futures *t)
{
    futures_drain(t);
    pending_clear(&t->table, futures_free_one, t);
    if (t->k->ops->reset)
        t->k->ops->reset(t->k);
}

void futures_new_session(futures *t)
{
    futures_reset(t);
    memset(t->lost, 0, ((t->nslots + 63) / 64 + 1) * sizeof *t->lost);
    t->nlost = 0;
}

void futures_destroy(futures *t)
{
    if (t->k) {
        futures_drain(t);
        pending_destroy(&t->table, futures_free_one, t);
    }
    free(t->lost);
    t->lost = NULL;
    free(t->lost_rank);
    t->lost_rank = NULL;
    free(t->m_lag);
    t->m_lag = NULL;
}

void futures_set_lag_metric(futures *t, uint32_t slot, stats *m)
{
    assert(slot < t->nslots);
    t->m_lag[slot] = m;
}
