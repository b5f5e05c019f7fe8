/* config_json.h — a run configuration as JSON (config_json.c; the
 * whole: config.h). */
#ifndef PSBENCH_CONFIG_JSON_H
#define PSBENCH_CONFIG_JSON_H

#include "master/run_config.h"

#include <jansson.h>

/* HybridModel: the servers' "embedding" object of their assignment
 * (new reference), else NULL. */
json_t *config_embedding_json(const run_config *c);

/* The configuration object for results.json and assignments (new
 * reference). The token is never included, only whether there is one. */
json_t *config_to_json(const run_config *c);

/* {"class", "configurations"} of the resolved model, borrowed (NULL before
 * config_load). */
json_t *config_model_json(const run_config *c);

/* batch-update: {"in_features", "out_features", "lr", "momentum",
 * "batch_update_size" (resolved), "seed"} for the servers' assignments (new
 * reference; each server's "part" and "parts" are added by the master).
 * NULL for other kinds. */
json_t *config_batch_update_json(const run_config *c);

#endif
