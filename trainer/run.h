/* run.h — the trainer's run driver under psbench-master: register, turn
 * the assignment into a job (a workload and, for real training, its hook),
 * then run the passes the master starts until it says stop.
 *
 *   register → assign (servers, model, data, hook, batches) → set up: the
 *   workload, and the hook's connections and groups → ready → for each pass
 *   the master starts: run it, reporting twice a second → pass_done;
 *   reset between passes; stop ends the run. Any failure is reported to the
 *   master (`failed`) with its reason before the trainer exits non-zero.
 *
 * Workloads: the Synthetic model (a communication benchmark that checks
 * every result), real training (train.c: DummyModel, buckets through a
 * hook) and the batch-update trainer (batch_update.c).
 */
#ifndef PSBENCH_TRAINER_RUN_H
#define PSBENCH_TRAINER_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/devspec.h"
#include "shared/metrics.h"
#include "shared/shm.h"
#include "shared/tracejob.h"

typedef struct trainer_run_opts {
    const char *master;
    int64_t want_rank; /* -1: any */
    const char *token;
    device_spec device;       /* --device (shared/devspec.h), as given: plain cuda placed by rank */
    double connect_timeout_s;
    double reach_s;           /* how long to keep trying to reach the master: --connect-timeout, or
                               * less under --follow */
    bool follow;              /* --follow: no job here (see mlink's retry) is PSB_EXIT_RETRY, a
                               * refusal for good exit status 2 */
    const char *params_out;   /* NULL, or where the final parameters go (raw LE float32) */
    int compute_nice;         /* the compute thread's nice level above the comm threads' */
    const char *coll_host;    /* NULL, or where this trainer's Gloo transport listens */
    const char *setup_err;    /* NULL, or why this trainer cannot run here (found before it joined:
                               * no GPU answers): it joins only to tell the master, as `failed` */
    psb_transport transport;  /* to the servers (--transport) */
    trace_flags trace;        /* --trace, --trace-steps, --trace-buffer (ttrace.h) */
} trainer_run_opts;

/* Returns the exit code; err holds the reason when it is not 0. With
 * o->follow: PSB_EXIT_RETRY (shared/follow.h) when this try got no job,
 * 2 when the master refused this trainer for good. */
int trainer_run_with_master(const trainer_run_opts *o, metrics *m, char *err, size_t errlen);

#endif
