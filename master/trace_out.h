/* trace_out.h — every node's trace merged into one timeline: a Chrome
 * trace-event JSON document (issue 42), which Perfetto and
 * chrome://tracing open.
 *
 *   {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}
 *
 * One process per node ("trainer 0", "server 1", "master"; trainers first,
 * then servers, then the master, each by rank), a thread per lane, a
 * complete event ("ph": "X") per span with its ids in args, and flow
 * events ("s", "t", "f") through each bucket's spans from its trainer to
 * its server and back, one flow per (batch, bucket, trainer). Times are
 * microseconds on the master's CLOCK_MONOTONIC, from the earliest span:
 * each node's spans are moved by its clock offset (shared/clockoff.h).
 * The metadata holds each node's offset and its uncertainty, and what
 * each dropped. The events are sorted by time; the same input gives the
 * same bytes.
 */
#ifndef PSBENCH_TRACE_OUT_H
#define PSBENCH_TRACE_OUT_H

#include <stddef.h>
#include <stdio.h>

#include "shared/clockoff.h"
#include "shared/trace.h"

/* How a node's clock stands to the master's. */
typedef enum trace_out_clock {
    TRACE_OUT_SAME,      /* the master's own clock (the master, or a node on its host): offset 0, exact */
    TRACE_OUT_ALIGNED,   /* offset estimated from round trips: clock.offset_ns, within clock.uncertainty_ns */
    TRACE_OUT_UNALIGNED, /* no round trip answered: taken as is, said so in the metadata */
} trace_out_clock;

typedef struct trace_out_node {
    const trace_dump *dump; /* borrowed */
    trace_out_clock state;
    clockoff clock; /* TRACE_OUT_ALIGNED only */
    /* NULL, or one per span of dump (NULL: none): a word that says which
     * of its kind a span is, in its args as "label" (the master's phase
     * spans: "waiting", "warmup", ...). Printable ASCII, no quote or
     * backslash, borrowed. */
    const char *const *label;
} trace_out_node;

/* One span of the merged trace, in master time: what trace_out_spans
 * gives the analysis (master/trace_an.h) and what the document is written
 * from. */
typedef struct trace_out_span {
    trace_role role;
    uint32_t rank;
    uint32_t node;            /* the node's place: trainers, servers, the master, each by rank (the pid - 1) */
    uint16_t lane;            /* its lane (the tid - 1), named by lane_name */
    uint16_t span;            /* trace_span */
    const char *lane_name;    /* the node's (borrowed from its dump) */
    int64_t start_ns, end_ns; /* the master's CLOCK_MONOTONIC (the node's reading moved by its offset) */
    int64_t uncertainty_ns;   /* how far the node's offset may be off: 0 on the master's clock, INT64_MAX
                               * where it is unaligned (not known at all) */
    trace_ids ids;
    const char *label;     /* NULL, or the node's label of it (borrowed) */
    const trace_event *ev; /* the span in its dump (borrowed) */
} trace_out_span;

/* Every span of n nodes on the master's clock, in *out (malloc'd, *count
 * of them; NULL and 0 where there are none): the nodes in the document's
 * order (trainers, servers, the master, each by rank), each node's spans
 * in its dump's order. 0, or -1 with the reason in err: the refusals of
 * trace_out_write but the write's. */
int trace_out_spans(const trace_out_node *nodes, size_t n, trace_out_span **out, size_t *count, char *err,
                    size_t errlen);

/* Writes the document for n nodes to out. 0, or -1 with the reason in
 * err: two nodes of the same role and rank, a lane out of range, a time
 * that leaves 64 bits once moved by its offset, a label that is not plain
 * text, or a write error. A node with no span is still a process, with
 * its clock in the metadata. */
int trace_out_write(FILE *out, const trace_out_node *nodes, size_t n, char *err, size_t errlen);

/* The same document as a malloc'd string (its length in *len where len is
 * not NULL); NULL with the reason in err. */
char *trace_out_json(const trace_out_node *nodes, size_t n, size_t *len, char *err, size_t errlen);

#endif
