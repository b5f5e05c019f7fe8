/* tracejob.h — a node's trace in a job under a master (issue 42): what the
 * assignment's `trace` object and the node's own flags make of it, and its
 * spans shipped to the master as `trace` messages, in parts, as they come.
 *
 * The master's --trace is carried in every assignment (docs/protocol.md,
 * "Extension: the trace"):
 *
 *   "trace": {"steps": [A, B], "buffer": N}
 *
 * absent when the master does not trace. A node's own --trace turns its
 * trace on where the master's is off (a node traced by hand); its own
 * --trace-steps and --trace-buffer, where given, win over the master's for
 * that node.
 *
 * Shipping: tracejob_ship sends what the node's rings published since the
 * last call (trace_node_snapshot_since), each part one `trace` message
 * {"final": bool, "dump": {trace_dump_json}} of at most
 * TRACEJOB_PART_EVENTS spans (under CTL_MAX_BODY whatever the numbers:
 * 8 integers of 20 digits at most per span). The last part of the last
 * call says "final": the master then has the node's whole trace.
 */
#ifndef PSBENCH_TRACEJOB_H
#define PSBENCH_TRACEJOB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/trace.h"

#define TRACEJOB_PART_EVENTS 65536u
#define TRACEJOB_DEFAULT_BUFFER 65536u /* spans per ring where neither the master nor the node says */

/* A node's own flags (--trace, --trace-steps, --trace-buffer). */
typedef struct trace_flags {
    bool on;             /* --trace */
    bool window_set;     /* --trace-steps given */
    trace_window window; /* its value */
    uint32_t capacity;   /* --trace-buffer, 0: not given */
} trace_flags;

/* The assignment's `trace` object for the master's window and ring size
 * (NULL: out of memory). */
json_t *tracejob_assign_json(trace_window window, uint32_t capacity);

/* The node's trace_conf from its assignment (the whole `assign` body; its
 * `trace`, absent: the master does not trace) and its own flags (NULL:
 * none). conf->on false: no trace. 0, or -1 with the reason: a `trace`
 * that is not {"steps": [A, B] (A <= B, whole numbers), "buffer": 1..
 * TRACE_CAPACITY_MAX}. */
int tracejob_conf(const json_t *assign, const trace_flags *own, trace_role role, uint32_t rank, trace_conf *conf,
                  char *err, size_t errlen);

/* Sends one `trace` body; 0, or -1 with the reason (the node's control
 * link: ctl_send). Takes the body's reference. */
typedef int (*tracejob_send_fn)(void *ctx, json_t *body, char *err, size_t errlen);

/* Ships the spans of n published since *cur (moved past them), in parts;
 * with final, the last part says so (one is sent even with no span).
 * Nothing new and not final: nothing is sent. n NULL or off: nothing. 0,
 * or -1 with the reason (out of memory, or send's). */
int tracejob_ship(const trace_node *n, trace_cursor *cur, bool final, tracejob_send_fn send, void *ctx, char *err,
                  size_t errlen);

/* A `trace` body as the master takes it: its dump (owned by the caller)
 * and whether it is the last part. 0, or -1 with the reason. */
int tracejob_take(const json_t *body, trace_dump **dump, bool *final, char *err, size_t errlen);

#endif
