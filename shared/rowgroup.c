/* rowgroup.c — indices grouped by row (rowgroup.h). */
#include "shared/rowgroup.h"

#include <assert.h>
#include <stdlib.h>

static int rowgroup_cmp(const void *a, const void *b)
{
    const rowgroup_occ *x = a, *y = b;
    if (x->row != y->row)
        return (x->row > y->row) - (x->row < y->row);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

int rowgroup_sort(rowgroup *g, const int64_t *keys, size_t n)
{
    assert(n <= UINT32_MAX); /* positions are 32-bit */
    if (n > g->cap) {
        size_t cap = g->cap ? g->cap : 256;
        while (cap < n)
            cap *= 2;
        rowgroup_occ *o = realloc(g->occ, cap * sizeof *o);
        if (!o)
            return -1;
        g->occ = o;
        g->cap = cap;
    }
    for (size_t k = 0; k < n; k++) {
        assert(keys[k] >= 0);
        g->occ[k].row = keys[k];
        g->occ[k].pos = (uint32_t)k;
    }
    /* (row, position): a total order, so qsort's instability cannot show */
    if (n > 1)
        qsort(g->occ, n, sizeof *g->occ, rowgroup_cmp);
    size_t nu = 0;
    for (size_t k = 0; k < n; k++)
        nu += k == 0 || g->occ[k].row != g->occ[k - 1].row;
    g->n = n;
    g->nu = nu;
    return 0;
}

void rowgroup_csr(const rowgroup *g, const uint32_t *of, uint64_t div, int64_t *urows, uint32_t *off, uint32_t *occ)
{
    assert(of || div >= 1);
    size_t u = 0;
    for (size_t k = 0; k < g->n; k++) {
        if (k == 0 || g->occ[k].row != g->occ[k - 1].row) {
            urows[u] = g->occ[k].row;
            off[u++] = (uint32_t)k;
        }
        occ[k] = of ? of[g->occ[k].pos] : (uint32_t)(g->occ[k].pos / div);
    }
    assert(u == g->nu);
    off[g->nu] = (uint32_t)g->n;
}

void rowgroup_free(rowgroup *g)
{
    free(g->occ);
    g->occ = NULL;
    g->cap = g->n = g->nu = 0;
}
