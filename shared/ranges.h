/* ranges.h — first-fit allocation of ranges of [0, size): the bookkeeping
 * under every arena psbench hands out by offset.
 *
 * Offsets, not pointers: the memory itself is the owner's (a memfd segment,
 * shm.h; GPU memory another process opens, server/cuda/cuda_buf.c), so
 * the same list serves memory this process cannot even address. Every
 * range is a multiple of `unit` (a power of two) long and starts on one;
 * freed neighbours merge. Few ranges are live at once (a round's buckets),
 * so the lists are plain arrays.
 */
#ifndef PSBENCH_RANGES_H
#define PSBENCH_RANGES_H

#include <stddef.h>
#include <stdint.h>

#define RANGES_NONE UINT64_MAX

typedef struct ranges_span {
    uint64_t off, len;
} ranges_span;

typedef struct ranges {
    uint64_t size, unit;
    ranges_span *free; /* sorted by offset, neighbours merged */
    size_t nfree, free_cap;
    ranges_span *used; /* unsorted: looked up only on free */
    size_t nused, used_cap;
    uint64_t used_bytes;
} ranges;

/* [0, size) free, handed out in multiples of unit. 0, or -1 (memory). */
int ranges_init(ranges *r, uint64_t size, uint64_t unit);
void ranges_destroy(ranges *r);
/* The offset of a free range of at least len bytes (rounded up to the
 * unit), or RANGES_NONE when none is left (or len is 0). */
uint64_t ranges_alloc(ranges *r, uint64_t len);
/* Give back the range ranges_alloc returned at off: its length (what the
 * owner may release), or 0 when no range starts there. */
uint64_t ranges_free(ranges *r, uint64_t off);

#endif
