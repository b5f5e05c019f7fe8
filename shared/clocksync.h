/* clocksync.h — the clock exchange over the control link (issue 42,
 * docs/protocol.md: `clock`, `clock_ack`), both of its sides, as pure
 * bookkeeping: no clock is read and nothing is sent here, so that the
 * rounds are tested on their own.
 *
 * The master sends a node CLOCKSYNC_ROUNDS `clock`s, one at a time: the
 * next once the last one's `clock_ack` is in. Each answered round is a
 * sample (shared/clockoff.h); once the rounds are done (or at the end of
 * the run, with fewer), clockoff_estimate takes the least-delay one. A node
 * that never answers (one older than the exchange) leaves its rounds
 * pending: nothing waits for it, its clock stays unaligned.
 *
 * The node answers each `clock` at once: clocksync_answer makes the body.
 */
#ifndef PSBENCH_CLOCKSYNC_H
#define PSBENCH_CLOCKSYNC_H

#include "shared/clockoff.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Round trips per node: enough that one of them likely missed every
 * queue on the way (the least-delay sample), few enough to take a few
 * milliseconds on one host. */
#define CLOCKSYNC_ROUNDS 8

/* The master's books for one node. */
typedef struct clocksync {
    clockoff_sample sample[CLOCKSYNC_ROUNDS];
    size_t n;     /* rounds answered */
    bool pending; /* a clock is out, unanswered */
    uint64_t seq; /* the clock out (pending), else the last one sent */
    uint64_t t0;  /* when it went out (the master's clock, ns) */
} clocksync;

void clocksync_init(clocksync *c);
/* Whether another clock is due: none out and fewer than
 * CLOCKSYNC_ROUNDS answered. */
bool clocksync_due(const clocksync *c);
/* The clock going out now at the master's t0: its seq. Only when due. */
uint64_t clocksync_send(clocksync *c, uint64_t t0);
/* The answer to it, read at the master's t3: 0 and the sample kept, or -1
 * with the reason in err (no clock out, a seq or t0 other than the clock's
 * out, or readings that make no round trip: clockoff_sample_eval). */
int clocksync_ack(clocksync *c, uint64_t seq, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3, char *err,
                  size_t errlen);
/* The estimate from the samples so far: 0, or -1 where there is none. */
int clocksync_estimate(const clocksync *c, clockoff *out);

/* The node's side: the `clock_ack` body for a `clock` body read at the
 * node's t1 and answered at t2 ({"seq", "t0" echoed, "t1", "t2"}); NULL
 * where the clock's seq or t0 is not a whole number >= 0 (nothing to echo),
 * or out of memory. */
json_t *clocksync_answer(const json_t *clock_body, uint64_t t1, uint64_t t2);

/* A node's clock reading t as it tells the master (its clock answers and
 * its trace's times): t itself, or, test-only, t moved by
 * $PSBENCH_TEST_CLOCK_SKEW_NS (a whole number of ns, negative allowed;
 * read once), so that tests can give nodes on one machine the clocks of
 * different hosts. A result below 0 is 0. */
uint64_t clocksync_node_time(uint64_t t);

#endif
