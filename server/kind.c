/* kind.c — what the kinds share: a push's scratch buffers, the buffers of
 * kinds that keep every push whole, and the fill's driver. */
#include "server/kind.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int kind_stored_begin(kind *k, kind_slot *stored, const push_ctx *p, bool sparse)
{
    kind_slot *st = &stored[p->slot];
    assert(!st->dev && !st->host);
    if (sparse)
        return (st->host = bufpool_get(k->pool, p->len)) ? 0 : -1;
    /* A narrow push is kept widened: f32, twice its payload. */
    size_t bytes = p->f->dtype == HALF_FP32 ? p->len : p->f->count * 4;
    return (st->dev = device_buf_new(k->dev, bytes)) ? 0 : -1;
}

uint8_t *kind_stored_direct(kind *k, kind_slot *stored, const push_ctx *p, uint64_t skip, uint64_t off, size_t *max)
{
    if (p->f->dtype != HALF_FP32) {
        *max = 0; /* widened on the way in: push_data */
        return NULL;
    }
    if (off < skip) {
        *max = (size_t)(skip - off);
        return NULL;
    }
    kind_slot *st = &stored[p->slot];
    if (st->host) {
        *max = p->len - off;
        return st->host->data + off;
    }
    return device_recv_area(k->dev, st->dev, off, max);
}

void kind_stored_direct_done(kind *k, kind_slot *stored, const push_ctx *p, uint64_t off, size_t n)
{
    kind_slot *st = &stored[p->slot];
    if (st->dev)
        device_recv_done(k->dev, st->dev, off, n);
}

void kind_stored_data(kind *k, kind_slot *stored, const push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    kind_slot *st = &stored[p->slot];
    if (st->host)
        memcpy(st->host->data + off, src, n);
    else if (p->f->dtype != HALF_FP32)
        kind_fold_narrow(k, FOLD_COPY, st->dev, off / 2, src, n / 2, 0, p->f->dtype);
    else
        device_write(k->dev, st->dev, off, src, n);
}

void kind_stored_peer(kind *k, kind_slot *stored, const push_ctx *p, devpeer *peer, uint64_t at)
{
    kind_slot *st = &stored[p->slot];
    assert(st->dev && !st->host);
    devsrc src = {.peer = peer, .at = at};
    if (p->f->dtype != HALF_FP32)
        kind_fold_narrow_from(k, FOLD_COPY, st->dev, 0, src, 0, p->f->count, 0, p->f->dtype);
    else
        device_fold_from(k->dev, FOLD_COPY, st->dev, 0, src, 0, p->len / 4, 0);
}

void kind_stored_abort(kind *k, kind_slot *stored, const push_ctx *p)
{
    kind_slot *st = &stored[p->slot];
    if (st->host)
        psbuf_unref(st->host);
    device_buf_free(k->dev, st->dev);
    st->host = NULL;
    st->dev = NULL;
}

void kind_stored_release(kind *k, kind_slot *stored, uint32_t nslots)
{
    for (uint32_t i = 0; i < nslots; i++) {
        if (stored[i].host)
            psbuf_unref(stored[i].host);
        device_buf_free(k->dev, stored[i].dev);
    }
}

/* Elements widened at a time for a fold other than a copy: 8 KiB of
 * scratch, which stays in L1 between the widening and the fold. */
#define KIND_NARROW_SLICE 2048u

void kind_fold_narrow(kind *k, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n, float s,
                      half_type t)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    if (device_has_fold_narrow(k->dev)) { /* widened where it folds */
        device_fold_narrow(k->dev, op, acc, elem_off, src, n, s, t);
        return;
    }
    if (op == FOLD_COPY) {
        while (n > 0) {
            size_t max;
            uint8_t *area = device_recv_area(k->dev, acc, elem_off * 4, &max);
            size_t m = max / 4 < n ? max / 4 : n;
            assert(m > 0); /* an area holds DEVICE_AREA_MIN bytes, or reaches acc's end */
            half_widen(t, (float *)(void *)area, src, m);
            device_recv_done(k->dev, acc, elem_off * 4, m * 4);
            elem_off += m;
            src += m * 2;
            n -= m;
        }
        return;
    }
    float tmp[KIND_NARROW_SLICE];
    while (n > 0) {
        size_t m = n < KIND_NARROW_SLICE ? n : KIND_NARROW_SLICE;
        half_widen(t, tmp, src, m);
        device_fold(k->dev, op, acc, elem_off, (const uint8_t *)tmp, m, s);
        elem_off += m;
        src += m * 2;
        n -= m;
    }
}

void kind_fold_narrow_from(kind *k, device_fold_op op, devbuf *acc, uint64_t elem_off, devsrc src, uint64_t skip,
                           size_t n, float s, half_type t)
{
    if (src.peer)
        k->dev->ops->peers->fold_narrow(k->dev, op, acc, elem_off, src.peer, src.at + skip, n, s, t);
    else
        kind_fold_narrow(k, op, acc, elem_off, src.host + skip, n, s, t);
}

psbuf *kind_result_narrow(kind *k, psbuf *wide, half_type t)
{
    assert(t == HALF_FP16 || t == HALF_BF16);
    if (!wide)
        return NULL;
    size_t n = wide->len / 4;
    psbuf *out = bufpool_get(k->pool, n * 2);
    if (out) {
        half_narrow(t, out->data, (const float *)(const void *)wide->data, n);
    }
    psbuf_unref(wide);
    return out;
}

int kind_push_grow_idx(push_ctx *p, uint64_t nnz)
{
    if (nnz <= p->idx_cap)
        return 0;
    uint8_t *idx = realloc(p->idx, nnz * 8);
    if (!idx)
        return -1;
    p->idx = idx;
    uint32_t *rs = realloc(p->rowslot, nnz * sizeof *rs);
    if (!rs)
        return -1;
    p->rowslot = rs;
    p->idx_cap = nnz;
    return 0;
}

void push_ctx_free(push_ctx *p)
{
    free(p->idx);
    free(p->rowslot);
    p->idx = NULL;
    p->rowslot = NULL;
    p->idx_cap = 0;
}

uint64_t kind_fill(kind *k, uint64_t budget)
{
    if (k->fill_left == 0)
        return 0;
    assert(k->ops->fill);
    uint64_t left = k->ops->fill(k, budget);
    assert(left == k->fill_left && left <= k->fill_total);
    return left;
}
