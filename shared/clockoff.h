/* clockoff.h — how far a node's clock is from the master's, from round
 * trips over the control link (NTP's estimate, RFC 5905 section 8), so
 * that one timeline can hold the spans of every host (issue 42).
 *
 * One round trip is a sample of four readings: t0 the master sends, t1 the
 * node receives, t2 the node answers, t3 the master receives; t0 and t3
 * on the master's CLOCK_MONOTONIC, t1 and t2 on the node's. Then
 *     offset = ((t1 - t0) + (t2 - t3)) / 2     (node clock - master clock)
 *     delay  = (t3 - t0) - (t2 - t1)           (time on the wire, both ways)
 * and the true offset is within delay / 2 of the estimate whatever the
 * wire's asymmetry. Of several samples the one of least delay is the
 * tightest: it is the estimate, half its delay the uncertainty.
 *
 * Pure functions, no clock read here: the master records the samples.
 */
#ifndef PSBENCH_CLOCKOFF_H
#define PSBENCH_CLOCKOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct clockoff_sample {
    uint64_t t0, t3; /* the master's clock: sent, answer received */
    uint64_t t1, t2; /* the node's clock: received, answered */
} clockoff_sample;

typedef struct clockoff {
    int64_t offset_ns;       /* node clock - master clock */
    uint64_t uncertainty_ns; /* the true offset is within this of offset_ns: half the delay */
    uint64_t delay_ns;       /* the chosen sample's round trip, less the node's time holding it */
    size_t sample;           /* the chosen sample's index */
    size_t used;             /* samples that were valid */
} clockoff;

/* A sample's delay and offset; false where it is not a round trip (t3
 * before t0, t2 before t1, the node holding it longer than the round
 * trip took, or an offset past 64 bits). */
bool clockoff_sample_eval(const clockoff_sample *s, int64_t *offset_ns, uint64_t *delay_ns);

/* The estimate from the least-delay valid sample of n (the first of equal
 * delays). 0, or -1 where none is valid (out untouched). */
int clockoff_estimate(const clockoff_sample *s, size_t n, clockoff *out);

/* A node's clock reading on the master's clock. */
static inline int64_t clockoff_to_master(const clockoff *o, uint64_t node_ns)
{
    return (int64_t)node_ns - o->offset_ns;
}

#endif
