/* part.h — the protocol's rule for splitting a flat parameter vector among
 * servers (batch-update, docs/protocol.md): part p of n holds the elements
 * [part_begin(total, p, n), part_begin(total, p + 1, n)), contiguous and as
 * even as integers allow. Server and trainer both use this one definition. */
#ifndef PSBENCH_PART_H
#define PSBENCH_PART_H

#include <stdint.h>

/* floor(p * total / n), without overflow for any p <= n. */
static inline uint64_t part_begin(uint64_t total, uint64_t p, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)p * total) / n);
}

#endif
