/* kind.c — what the kinds share: a push's scratch buffers, the split of a
 * flat vector into parts. */
#include "server/kind.h"

#include <stdlib.h>
#include <string.h>

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

void kind_part_range(uint64_t total, uint32_t part, uint32_t parts, uint64_t *begin, uint64_t *end)
{
    /* total is far below 2^32 elements per model here, so the products
     * cannot overflow 64 bits. */
    *begin = total * part / parts;
    *end = total * (part + 1) / parts;
}
