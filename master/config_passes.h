/* config_passes.h — what a resolved run configuration asks of a pass
 * (config_passes.c; the whole: config.h). */
#ifndef PSBENCH_CONFIG_PASSES_H
#define PSBENCH_CONFIG_PASSES_H

#include "master/run_config.h"

#include <stdint.h>

/* Batches each trainer runs per pass (warm-up or timed): epochs times the
 * batches of one epoch that every trainer gets, as the seed splits the
 * DataLoader's batches round-robin (trainers with an extra batch would
 * wait forever on a server, so every trainer runs the smallest share).
 * 0 when the data is too small for the trainers or the data is unknown.
 * batch-update: epochs times the trainer configuration's "batches". With
 * --steps: that many (the HybridModel: rounded up to whole epochs). */
uint64_t config_batches_per_pass(const run_config *c);
/* The epochs of data the timed pass spans: --epochs, or with --steps its
 * batches over an epoch's, rounded up (the last one may be partial). */
uint64_t config_pass_epochs(const run_config *c);
/* The warm-up pass's batches: --warmup-steps; else the HybridModel's
 * --warmup-cycles epochs; otherwise the timed pass's. */
uint64_t config_batches_warmup(const run_config *c);

#endif
