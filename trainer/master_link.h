/* master_link.h — a trainer's control connection to psbench-master: what
 * the run driver (run.c) says to the master and hears from it.
 *
 *   register → registered (at once, within --connect-timeout) → assign;
 *   ready; metrics (twice a second: also the heartbeat);
 *   pass_done; reset_done; failed — and from the master start, reset, stop.
 *   The rendezvous of collective groups: kv_set / kv_get → kv_value, the
 *   master being the store (docs/protocol.md, "Control plane").
 *
 * One thread (the training thread) uses a link.
 */
#ifndef PSBENCH_TRAINER_MASTER_LINK_H
#define PSBENCH_TRAINER_MASTER_LINK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/control.h"
#include "shared/metrics.h"
#include "trainer/coll.h"

/* Adds the payload bytes moved so far (the hook's transports). */
typedef void (*mlink_bytes_fn)(void *ctx, uint64_t *in, uint64_t *out);

typedef struct mlink {
    ctl_conn c;
    metrics *m;
    mlink_bytes_fn bytes;
    void *bytes_ctx;
    uint64_t batches_done;
    double last_report, last_check;
    double store_timeout_s; /* a kv_get's longest wait (--rpc-timeout) */
    double connect_timeout_s; /* the longest wait for the master's first answer */
    bool joined;            /* the master answered the register: a master, to tell of a failure */
    bool stopped;           /* the master said stop (or refused us) */
    bool refused;           /* ... refused our register */
    bool retry;             /* no job here now, perhaps later (shared/follow.h): no master answered (none
                             * could be reached, or the peer closed, stayed silent or answered in
                             * another protocol), or the master refused with "retry" */
    int stop_code;
    char stop_reason[1024];
    json_t *fail_detail;    /* owned: fields the `failed` report carries beside the reason (or NULL) */
    /* The trainer's trace (NULL: none; ttrace.h): shipped after each
     * report, the last of it when the master's stop comes. */
    struct ttrace *trace;
} mlink;

/* Connect (retrying for reach_s while refused: --connect-timeout, or less
 * under --follow). 0 or -1 with err (l->retry set). The first answer to
 * the register is then awaited for timeout_s (--connect-timeout); with
 * bounded (--follow), the connect and that wait together take no longer
 * than reach_s (ctl_conn.answer_by). */
int mlink_open(mlink *l, const char *master, double reach_s, bool bounded, double timeout_s, metrics *m, char *err,
               size_t errlen);
/* Close. With failed (err holds this trainer's reason, the master has not
 * stopped it): tell the master why, wait up to 3 s for its verdict, and
 * rewrite err to the line to end on: the master's reason, which names the
 * node at fault, then ours; or that the master is lost. */
void mlink_close(mlink *l, bool failed, char *err, size_t errlen);
/* Fields for the `failed` report beside its reason (stolen; replaces any
 * earlier ones), e.g. where the loss diverged. */
void mlink_set_fail_detail(mlink *l, json_t *detail);

/* Register (body: role, host, device, ...; stolen) and wait for the
 * assignment: *assign is its body (the caller decrefs). 0 or -1 with err
 * (a refusal included). The master answers a register at once (registered,
 * or the assignment, or a refusal): a peer that does not within
 * --connect-timeout, or answers in another protocol, is named
 * (ctl_recv_first). The assignment itself may take as long as the master's
 * join takes: heartbeats meanwhile. With assign NULL, it returns once
 * registered (a trainer that joins only to report its failure). */
int mlink_register(mlink *l, const char *token, json_t *body, json_t **assign, char *err, size_t errlen);
/* A report: `type` with the samples and counters, `extra` fields (stolen,
 * may be NULL) merged in; then the trace's new spans (l->trace). */
int mlink_report(mlink *l, const char *type, json_t *extra, char *err, size_t errlen);
/* Wait for the next control message, reporting (heartbeat) meanwhile. A
 * `stop` is recorded in the link (and returned), and the trace's last
 * part shipped (wherever a stop is read). 0 or -1 with err. */
int mlink_wait(mlink *l, ctl_msg *msg, char *err, size_t errlen);
/* During a pass, after each batch (a train_tick_fn): report every 0.5 s,
 * look for a stop every 0.1 s. 0, or -1 with err when stopped. */
int mlink_tick(void *ctx, uint64_t batches_done, char *err, size_t errlen);

/* The master as a coll.h rendezvous store. */
coll_store mlink_store(mlink *l);

#endif
