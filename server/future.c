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

/* Failed futures kept as tombstones, at most (see futures_fail). */
#define FUTURES_TOMB_MAX 65536u

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
    t->held_n = calloc(nslots ? nslots : 1, sizeof *t->held_n);
    t->held_bytes = calloc(nslots ? nslots : 1, sizeof *t->held_bytes);
    if (!t->lost || !t->lost_rank || !t->m_lag || !t->held_n || !t->held_bytes ||
        pending_init(&t->table, nslots) < 0)
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

/* ---- what each trainer holds --------------------------------------------------- */

void futures_set_limits(futures *t, const futures_limits *lim)
{
    t->lim = *lim;
}

/* f's pushes stop counting against their slots: it was answered, failed
 * or forgotten. Once per future. */
static void futures_unhold(futures *t, future *f)
{
    if (!f->holds)
        return;
    f->holds = false;
    for (uint32_t s = 0; s < t->nslots; s++) {
        if (!pending_has_slot(f, s))
            continue;
        assert(t->held_n[s] > 0 && t->held_bytes[s] >= f->slot_bytes[s]);
        t->held_n[s]--;
        t->held_bytes[s] -= f->slot_bytes[s];
        f->slot_bytes[s] = 0;
    }
}

/* Whether a push of `bytes` from slot fits what one trainer may hold;
 * ERR_NONE, or too_large with the reason. */
static frame_errcode futures_check_hold(const futures *t, uint32_t slot, uint64_t rank, uint64_t bytes, char *msg,
                                        size_t len)
{
    const futures_limits *l = &t->lim;
    bool over_bytes = l->bytes && (t->held_bytes[slot] > l->bytes || bytes > l->bytes - t->held_bytes[slot]);
    if (over_bytes && l->first_free && t->held_n[slot] == 0)
        over_bytes = false;
    if ((l->pushes && t->held_n[slot] >= l->pushes) || over_bytes) {
        snprintf(msg, len,
                 "trainer rank %" PRIu64 " has %u pushes (%" PRIu64 " bytes) waiting for their answer and this one "
                 "has %" PRIu64 " more: one trainer may have at most %u pushes and %" PRIu64 " bytes waiting (%s)",
                 rank, t->held_n[slot], t->held_bytes[slot], bytes, l->pushes, l->bytes, l->source);
        return ERR_TOO_LARGE;
    }
    return ERR_NONE;
}

/* ---- retirement ------------------------------------------------------------- */

/* The one way out of the table for a future that is not a tombstone:
 * release the kind's buffers, unlink (recording the key as resolved when
 * it was answered), recycle. */
static void futures_retire(futures *t, future *f, bool resolved)
{
    assert(!f->pushes);
    futures_unhold(t, f);
    t->k->ops->release(t->k, f);
    pending_remove(&t->table, f, resolved);
    pending_recycle(&t->table, f);
}

/* f fails: its pushers are told `code` with why. `quiet`: a debug line
 * rather than a warning (the caller sums many up in one). */
static void futures_fail_ex(futures *t, future *f, frame_errcode code, const char *why, bool quiet)
{
    assert(f->state == FUTURE_OPEN || f->state == FUTURE_RESOLVING);
    f->state = FUTURE_FAILED;
    if (quiet)
        log_debug("batch %" PRIu64 " bucket %" PRIu64 " failed: %s", f->batch, f->bucket, why);
    else
        log_warn("batch %" PRIu64 " bucket %" PRIu64 " failed: %s", f->batch, f->bucket, why);
    /* Stop the pushes still streaming into it before its buffers go. */
    while (f->pushes) {
        push_ctx *p = f->pushes;
        t->k->ops->push_abort(t->k, p);
        futures_unbind(p);
    }
    futures_unhold(t, f);
    t->k->ops->release(t->k, f);
    char msg[256];
    snprintf(msg, sizeof msg, "batch %" PRIu64 " bucket %" PRIu64 " cannot complete: %s", f->batch, f->bucket,
             why);
    t->hooks.fail(t->hooks.ctx, f, code, msg);
    /* It stays as a tombstone so that late pushes to it are told peer_lost
     * too; it goes with the session. Tombstones are small, but a trainer
     * that comes and goes could pile them up: past FUTURES_TOMB_MAX a
     * failed future is forgotten instead (a push to it then opens a new
     * one, which fails as its trainers are told why). */
    if (t->ntomb >= FUTURES_TOMB_MAX) {
        f->state = FUTURE_DONE;
        pending_remove(&t->table, f, false);
        pending_recycle(&t->table, f);
        return;
    }
    t->ntomb++;
}

static void futures_fail(futures *t, future *f, frame_errcode code, const char *why)
{
    futures_fail_ex(t, f, code, why, false);
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
    if (t->hooks.trace)
        t->hooks.trace(t->hooks.trace_ctx, f, true, false);
    t->k->ops->resolve(t->k, f); /* may call futures_on_resolved before it returns */
}

/* The kind's report: the answer (or why there is none). */
static void futures_on_resolved(void *ctx, future *f, psbuf *result, frame_errcode code, const char *why)
{
    futures *t = ctx;
    assert(f->state == FUTURE_RESOLVING && t->resolving > 0);
    t->resolving--;
    if (t->hooks.trace)
        t->hooks.trace(t->hooks.trace_ctx, f, false, result && !f->cancelled);
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
    /* conn_push.c let only a name of the three through. */
    int dt = frame_dtype_type(h->dtype);
    assert(dt >= 0);
    if (dt != HALF_FP32 && (!t->k->ops->narrow || !device_takes_narrow(t->k->dev) || h->layout != LAYOUT_DENSE)) {
        snprintf(msg, len,
                 "a %s push in %s to a server of kind %s: only dense pushes to kinds average and "
                 "average-batch may be narrow",
                 h->layout == LAYOUT_DENSE ? "dense" : "sparse", frame_dtype_name(dt), t->k->ops->name);
        return ERR_UNSUPPORTED;
    }
    if (f && (half_type)dt != f->dtype) {
        snprintf(msg, len, "dtype %s differs from %s of the other pushes of batch %" PRIu64 " bucket %" PRIu64,
                 frame_dtype_name(dt), frame_dtype_name(f->dtype), batch, h->bucket);
        return ERR_SHAPE_MISMATCH;
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

    code = futures_check_hold(t, slot, rank, h->payload, msg, len);
    if (code != ERR_NONE)
        return code;
    if (!f && t->lim.buckets && t->table.nmarks >= t->lim.buckets && !pending_has_mark(&t->table, h->bucket)) {
        snprintf(msg, len, "bucket %" PRIu64 " would be the %zu-th bucket of this session: it has at most %u (%s)",
                 h->bucket, t->table.nmarks + 1, t->lim.buckets, t->lim.source);
        return ERR_TOO_LARGE;
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
        f->dtype = (half_type)dt;
        f->count = h->count;
        f->rows = h->rows;
        f->cols = h->cols;
        f->t_first_ns = clock_now_ns();
        f->holds = true;
        first = true;
    }
    pending_set_slot(f, slot);
    f->slot_bytes[slot] = h->payload;
    t->held_n[slot]++;
    t->held_bytes[slot] += h->payload;
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
    assert(f->holds && t->held_n[p->slot] > 0);
    t->held_n[p->slot]--;
    t->held_bytes[p->slot] -= f->slot_bytes[p->slot];
    f->slot_bytes[p->slot] = 0;
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
    const futures *t;
    uint32_t slot;
    future **victims;
    size_t n, cap;
    bool oom;
} lost_ctx;

/* Whether every trainer that pushed into f is gone: nobody waits for it. */
static bool futures_pushers_all_lost(const futures *t, const future *f)
{
    for (uint32_t w = 0; w < (t->nslots + 63) / 64; w++)
        if (f->pushed[w] & ~t->lost[w])
            return false;
    return true;
}

static void futures_collect_lost(future *f, void *arg)
{
    lost_ctx *lc = arg;
    if (f->state != FUTURE_OPEN || (pending_has_slot(f, lc->slot) && !futures_pushers_all_lost(lc->t, f)))
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
    lost_ctx lc = {.t = t, .slot = slot};
    pending_foreach(&t->table, futures_collect_lost, &lc);
    char why[96], alone[96];
    snprintf(why, sizeof why, "trainer rank %" PRIu64 " disconnected before pushing", rank);
    snprintf(alone, sizeof alone, "trainer rank %" PRIu64 " disconnected, and nobody else pushed it", rank);
    size_t nalone = 0;
    for (size_t i = 0; i < lc.n; i++) {
        /* Those only lost trainers pushed: nobody waits for them, and they
         * may be many (a trainer that pushed far ahead): one line for all. */
        bool mine = pending_has_slot(lc.victims[i], slot);
        nalone += mine;
        futures_fail_ex(t, lc.victims[i], ERR_PEER_LOST, mine ? alone : why, mine);
    }
    if (nalone)
        log_warn("trainer rank %" PRIu64 " left %zu batch/bucket(s) that no connected trainer pushed: failed, "
                 "their memory given back", rank, nalone);
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
    futures_unhold(t, f);
}

void futures_reset(futures *t)
{
    futures_drain(t);
    pending_clear(&t->table, futures_free_one, t);
    t->ntomb = 0;
#ifndef NDEBUG
    for (uint32_t s = 0; s < t->nslots; s++)
        assert(t->held_n[s] == 0 && t->held_bytes[s] == 0); /* every future is gone */
#endif
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
    free(t->held_n);
    t->held_n = NULL;
    free(t->held_bytes);
    t->held_bytes = NULL;
}

void futures_set_lag_metric(futures *t, uint32_t slot, stats *m)
{
    assert(slot < t->nslots);
    t->m_lag[slot] = m;
}
