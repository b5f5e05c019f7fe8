/* master_link.h — a trainer run driven by psbench-master.
 *
 * register → assign (servers, model, batches, data rank) → connect to the
 * servers → ready → for each pass the master starts: run it, reporting
 * metrics and progress twice a second → pass_done; `reset` between passes;
 * `stop` ends the run. Any failure is reported to the master (`failed`)
 * with its reason before the trainer exits non-zero.
 */
#ifndef PSBENCH_TRAINER_MASTER_LINK_H
#define PSBENCH_TRAINER_MASTER_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "shared/metrics.h"

typedef struct trainer_link_opts {
    const char *master;
    int64_t want_rank; /* -1: any */
    const char *token;
    const char *device;
    double connect_timeout_s;
    const char *params_out; /* NULL, or where the final parameters go (raw LE float32) */
    int compute_nice;       /* the compute thread's nice level above the comm thread's */
} trainer_link_opts;

/* Returns the exit code; err holds the reason when it is not 0. */
int trainer_run_with_master(const trainer_link_opts *o, metrics *m, char *err, size_t errlen);

#endif
