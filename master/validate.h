/* validate.h — what the master accepts from a node.
 *
 * Every field of every control message a node sends is checked here for
 * its type and range before the master uses any of it (docs/protocol.md,
 * "Control plane"): a message is taken whole or not at all, so a bad field
 * never leaves half a report counted. Each check returns 0, or -1 with a
 * one-line reason that names the field and what it must be (the caller
 * adds the node: a register is refused, a report from a registered node
 * fails the run in its name). Strings that will be printed are checked to
 * be printable where they are names (metric names), and escaped when shown
 * where they are free text (shared/text.h).
 *
 * Pure functions of a JSON body: no master state, so that they are tested
 * on their own (tests/unit/master/test_validate.c).
 */
#ifndef PSBENCH_MASTER_VALIDATE_H
#define PSBENCH_MASTER_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A metric name: "TYPE,NAME" (the seed's form), 3..VALIDATE_MAX_NAME
 * bytes, printable (no control character, no backslash, no quote: it goes
 * into tables, CSV and Prometheus labels as it is). */
#define VALIDATE_MAX_NAME 200
/* A sample: a duration in ms, finite, in [0, VALIDATE_MAX_SAMPLE_MS]
 * (10^9 ms: 11.6 days, the longest any psbench timeout can be). A negative
 * duration or 1e308 ms is a broken clock or a hostile peer, and would make
 * every statistic of its metric meaningless (1e308 squared is infinite). */
#define VALIDATE_MAX_SAMPLE_MS 1e9
/* Names in one `gpu_timed` list, at most. */
#define VALIDATE_MAX_GPU_TIMED 64
/* A node's display strings (host, device, an address), at most, in bytes. */
#define VALIDATE_MAX_HOST 255
#define VALIDATE_MAX_DEVICE 31

/* register: role, host, device, pid, want_rank, listen_host, port,
 * advertise, mem_total_bytes, mem_available_bytes, environment, clock
 * (true or false: the node answers `clock`, issue 42). Absent
 * optional fields are fine (the master's defaults apply); a server needs
 * its port. */
int validate_register(json_t *body, char *err, size_t errlen);
/* The fields a metrics or pass_done report shares: bytes_in, bytes_out,
 * batches_done (a trainer's), rows_touched and initialising (a server's),
 * gpu_timed (a trainer's list of metric names), samples (metric name →
 * list of samples), host (the node's host and process CPU: see
 * docs/protocol.md; absent from nodes before it). */
int validate_report(json_t *body, bool trainer, char *err, size_t errlen);
/* What a trainer's pass_done adds: loss_per_epoch, final_params_sha256,
 * bags, epochs, buckets (diverged has its own check in run.c). */
int validate_pass_results(json_t *body, char *err, size_t errlen);
/* A trainer's `ready`: its optional `links` to servers ([{"server": rank,
 * "address": printable, "transport": "shm" or "tcp", "note": printable or
 * null}], at most 65536). */
int validate_ready(json_t *body, char *err, size_t errlen);
/* failed: reason (a string, when present). */
int validate_failed(json_t *body, char *err, size_t errlen);
/* clock_ack (issue 42): seq, t0, t1, t2, each a whole number in
 * 0..2^63-1, all present. Whether it answers a clock sent is the clock
 * rounds' (shared/clocksync.h). */
int validate_clock_ack(json_t *body, char *err, size_t errlen);
/* One metric name (see VALIDATE_MAX_NAME). */
int validate_metric_name(const char *name, char *err, size_t errlen);

#endif
