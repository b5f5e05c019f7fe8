/* ddp_buckets.c — DDP's bucket assignment (see ddp_buckets.h). */
#include "trainer/ddp_buckets.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* One pass of compute_bucket_assignment_by_size for one dtype and device:
 * the parameters in `order`, limits[0], limits[1], ... then the last limit
 * again; buckets in the order they close (the open one last). */
static int ddpb_assign(const uint64_t *bytes, const bool *sparse, const uint32_t *order, uint32_t n,
                       const uint64_t *limits, uint32_t nlimits, ddpb_layout *out)
{
    assert(nlimits > 0);
    memset(out, 0, sizeof *out);
    out->start = calloc((size_t)n + 1, sizeof *out->start);
    out->param = calloc(n ? n : 1, sizeof *out->param);
    uint32_t *open = calloc(n ? n : 1, sizeof *open);
    if (!out->start || !out->param || !open) {
        free(open);
        ddpb_free(out);
        return -1;
    }
    uint32_t nopen = 0, limit = 0;
    uint64_t fill = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = order[k];
        if (sparse[i]) { /* alone, at once: no limit */
            out->param[out->nparams++] = i;
            out->start[++out->nbuckets] = out->nparams;
            continue;
        }
        open[nopen++] = i;
        fill += bytes[i];
        if (fill >= limits[limit]) {
            memcpy(out->param + out->nparams, open, nopen * sizeof *open);
            out->nparams += nopen;
            out->start[++out->nbuckets] = out->nparams;
            nopen = 0;
            fill = 0;
            if (limit + 1 < nlimits)
                limit++;
        }
    }
    if (nopen > 0) {
        memcpy(out->param + out->nparams, open, nopen * sizeof *open);
        out->nparams += nopen;
        out->start[++out->nbuckets] = out->nparams;
    }
    free(open);
    assert(out->nparams == n);
    return 0;
}

int ddpb_rebuilt(const uint64_t *bytes, const bool *sparse, const uint32_t *ready, uint32_t n, uint64_t first_cap,
                 uint64_t cap, ddpb_layout *out)
{
    const uint64_t limits[2] = {first_cap, cap};
    return ddpb_assign(bytes, sparse, ready, n, limits, 2, out);
}

/* The smallest parameter index of bucket k. */
static uint32_t ddpb_min_param(const ddpb_layout *l, uint32_t k)
{
    uint32_t m = UINT32_MAX;
    for (uint32_t j = l->start[k]; j < l->start[k + 1]; j++)
        if (l->param[j] < m)
            m = l->param[j];
    return m;
}

int ddpb_initial(const uint64_t *bytes, const bool *sparse, uint32_t n, ddpb_layout *out)
{
    uint32_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    /* sys.maxsize: one dense bucket, never closed early */
    const uint64_t unlimited = (uint64_t)INT64_MAX;
    int rc = ddpb_assign(bytes, sparse, order, n, &unlimited, 1, out);
    free(order);
    if (rc < 0)
        return -1;
    /* Sorted by their smallest index (distinct: a parameter is in one
     * bucket), then reversed: by that index, largest first. */
    ddpb_layout s = {0};
    s.start = calloc((size_t)out->nbuckets + 1, sizeof *s.start);
    s.param = calloc(n ? n : 1, sizeof *s.param);
    bool *taken = calloc(out->nbuckets ? out->nbuckets : 1, sizeof *taken);
    if (!s.start || !s.param || !taken) {
        free(taken);
        ddpb_free(&s);
        ddpb_free(out);
        return -1;
    }
    for (uint32_t b = 0; b < out->nbuckets; b++) { /* a few buckets: a selection is enough */
        uint32_t best = UINT32_MAX, best_min = 0;
        for (uint32_t k = 0; k < out->nbuckets; k++) {
            uint32_t m = ddpb_min_param(out, k);
            if (!taken[k] && (best == UINT32_MAX || m > best_min)) {
                best = k;
                best_min = m;
            }
        }
        taken[best] = true;
        uint32_t c = ddpb_count(out, best);
        memcpy(s.param + s.nparams, out->param + out->start[best], c * sizeof *s.param);
        s.nparams += c;
        s.start[++s.nbuckets] = s.nparams;
    }
    free(taken);
    ddpb_free(out);
    *out = s;
    return 0;
}

uint64_t ddpb_cap_bytes(double mb)
{
    double b = mb * 1024.0 * 1024.0;
    return b <= 0 ? 0 : b >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)b;
}

uint64_t ddpb_bytes(const ddpb_layout *l, uint32_t k, const uint64_t *bytes)
{
    uint64_t s = 0;
    for (uint32_t j = l->start[k]; j < l->start[k + 1]; j++)
        s += bytes[l->param[j]];
    return s;
}

void ddpb_free(ddpb_layout *l)
{
    free(l->start);
    free(l->param);
    memset(l, 0, sizeof *l);
}
