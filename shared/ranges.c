/* ranges.c — first-fit ranges of [0, size) (see ranges.h). */
#include "shared/ranges.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static int ranges_grow(ranges_span **v, size_t n, size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    ranges_span *nv = realloc(*v, c * sizeof *nv);
    if (!nv)
        return -1;
    *v = nv;
    *cap = c;
    return 0;
}

int ranges_init(ranges *r, uint64_t size, uint64_t unit)
{
    assert(unit && (unit & (unit - 1)) == 0);
    memset(r, 0, sizeof *r);
    r->size = size / unit * unit;
    r->unit = unit;
    if (ranges_grow(&r->free, 0, &r->free_cap) < 0)
        return -1;
    if (r->size) {
        r->free[0] = (ranges_span){0, r->size};
        r->nfree = 1;
    }
    return 0;
}

void ranges_destroy(ranges *r)
{
    free(r->free);
    free(r->used);
    memset(r, 0, sizeof *r);
}

uint64_t ranges_alloc(ranges *r, uint64_t len)
{
    if (len == 0 || len > r->size)
        return RANGES_NONE;
    len = (len + r->unit - 1) / r->unit * r->unit;
    if (ranges_grow(&r->used, r->nused, &r->used_cap) < 0)
        return RANGES_NONE;
    for (size_t i = 0; i < r->nfree; i++) {
        ranges_span *f = &r->free[i];
        if (f->len < len)
            continue;
        uint64_t off = f->off;
        f->off += len;
        f->len -= len;
        if (f->len == 0) {
            memmove(f, f + 1, (r->nfree - i - 1) * sizeof *f);
            r->nfree--;
        }
        r->used[r->nused++] = (ranges_span){off, len};
        r->used_bytes += len;
        return off;
    }
    return RANGES_NONE;
}

uint64_t ranges_free(ranges *r, uint64_t off)
{
    size_t u = 0;
    while (u < r->nused && r->used[u].off != off)
        u++;
    if (u == r->nused)
        return 0;
    ranges_span s = r->used[u];
    r->used[u] = r->used[--r->nused];
    r->used_bytes -= s.len;
    size_t i = 0;
    while (i < r->nfree && r->free[i].off < s.off)
        i++;
    int merge_prev = i > 0 && r->free[i - 1].off + r->free[i - 1].len == s.off;
    int merge_next = i < r->nfree && s.off + s.len == r->free[i].off;
    if (merge_prev && merge_next) {
        r->free[i - 1].len += s.len + r->free[i].len;
        memmove(&r->free[i], &r->free[i + 1], (r->nfree - i - 1) * sizeof *r->free);
        r->nfree--;
    } else if (merge_prev) {
        r->free[i - 1].len += s.len;
    } else if (merge_next) {
        r->free[i].off = s.off;
        r->free[i].len += s.len;
    } else if (ranges_grow(&r->free, r->nfree, &r->free_cap) == 0) {
        memmove(&r->free[i + 1], &r->free[i], (r->nfree - i) * sizeof *r->free);
        r->free[i] = s;
        r->nfree++;
    }
    /* else: no memory for one more entry: the range is lost to the arena
     * (not to its owner, who may still release it). */
    return s.len;
}
