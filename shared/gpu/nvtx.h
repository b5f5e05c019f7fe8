/* nvtx.h — the trace's spans as NVTX ranges (issue 42), so that Nsight
 * Systems shows them beside the kernels: the same names (trace.h's
 * TRACE_SPANS) in a domain "psbench", each range's payload its batch.
 *
 * Built on the header-only NVTX 3 of the CUDA toolkit where psbench is
 * built with CUDA; elsewhere trace_nvtx_available() is false and the
 * calls do nothing. A range costs a call into the tool that collects it:
 * without one (no Nsight attached: NVTX_INJECTION64_PATH unset) NVTX's
 * own calls return at once. Off until a node turns it on
 * (trace_nvtx_enable: a node that traces and computes on a CUDA device),
 * and then trace_nvtx_start is one test when off.
 *
 * Ranges are started and ended by id (nvtxDomainRangeStartEx / End), not
 * pushed: a span may end on another thread than the one it began on (a
 * device job starts on the reactor and is seen done later), and NVTX's
 * push/pop ranges must nest per thread.
 */
#ifndef PSBENCH_GPU_NVTX_H
#define PSBENCH_GPU_NVTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shared/trace.h"

/* A started range; 0: none (off, or not built with NVTX). */
typedef uint64_t trace_nvtx_id;

/* Whether this build has NVTX (the CUDA toolkit's nvtx3 headers). */
bool trace_nvtx_available(void);
/* Ranges from now on (on) or none (off). Any thread. */
void trace_nvtx_enable(bool on);

extern atomic_bool trace_nvtx_enabled; /* nvtx.c's: read by the inline gate */

trace_nvtx_id trace_nvtx_start_slow(trace_span s, trace_ids ids);
void trace_nvtx_end_slow(trace_nvtx_id id);

/* Starts the range of span s (its name, its batch as the payload). */
static inline trace_nvtx_id trace_nvtx_start(trace_span s, trace_ids ids)
{
    if (__builtin_expect(!atomic_load_explicit(&trace_nvtx_enabled, memory_order_relaxed), 1))
        return 0;
    return trace_nvtx_start_slow(s, ids);
}

/* Ends the range id started (0: nothing). Any thread. */
static inline void trace_nvtx_end(trace_nvtx_id id)
{
    if (id)
        trace_nvtx_end_slow(id);
}

#endif
