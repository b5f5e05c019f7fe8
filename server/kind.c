/* kind.c — what the kinds share: a push's scratch buffers, and the buffers
 * of kinds that keep every push whole. */
#include "server/kind.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int kind_stored_begin(kind *k, psbuf **stored, const push_ctx *p)
{
    assert(!stored[p->slot]);
    stored[p->slot] = bufpool_get(k->pool, p->len);
    return stored[p->slot] ? 0 : -1;
}

uint8_t *kind_stored_direct(psbuf **stored, const push_ctx *p, uint64_t skip, uint64_t off, size_t *max)
{
    if (off < skip) {
        *max = (size_t)(skip - off);
        return NULL;
    }
    *max = p->len - off;
    return stored[p->slot]->data + off;
}

void kind_stored_abort(psbuf **stored, const push_ctx *p)
{
    if (stored[p->slot]) {
        psbuf_unref(stored[p->slot]);
        stored[p->slot] = NULL;
    }
}

void kind_stored_release(psbuf **stored, uint32_t nslots)
{
    for (uint32_t i = 0; i < nslots; i++)
        if (stored[i])
            psbuf_unref(stored[i]);
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
