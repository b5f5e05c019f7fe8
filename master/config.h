/* config.h — the master's run configuration: the seed launcher's flags
 * (both spellings, --batch-size / --batch_size), psbench's own flags, the
 * seed's checks on them, and the four JSON configuration files of configs/
 * (data, model, trainer, server) resolved for the chosen ids.
 *
 * Ownership: everything a run_config points to belongs to it and is
 * released by config_free. Usage:
 *
 *     run_config c;
 *     int rc = config_parse_args(&c, argc, argv, err, sizeof err); // inits c
 *     if (rc == 0)
 *         rc = config_resolve(&c, err, sizeof err);
 *     ...
 *     config_free(&c);
 *
 * The flags are master/opts.c's option table (shared/opts.h): config_init,
 * config_parse_args and config_usage are made from it there. The files:
 * config.c (the whole: lifetime, command line, order of the checks),
 * config_check.c (the checks), config_load.c (configs/), config_json.c.
 *
 * config_resolve runs config_check_flags (the flags' own values),
 * config_load (the files and every value in them), config_check_fit (how
 * flags and files fit), in that order, so the first error reported is the
 * cause: a bad value in a file is named before what it would break in the
 * flags' counts.
 */
#ifndef PSBENCH_CONFIG_H
#define PSBENCH_CONFIG_H

#include "shared/shm.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shared/jobconf.h"
#include "shared/log.h"

#include "master/opts.h"
#include "master/run_config.h"



/* Set every field to its default (allocating the default strings). c is
 * overwritten, not freed: call on fresh or config_free'd storage. */
int config_init(run_config *c);

/* Initialize c (config_init) and parse the master's flags. argv strings are
 * rewritten in place ("--batch_size" becomes "--batch-size").
 * Returns 0 ok, 1 --help (the caller prints config_usage), 2 --version,
 * -1 with a one-line reason in err. Call config_free in every case. */
int config_parse_args(run_config *c, int argc, char **argv, char *err, size_t errlen);
void config_usage(FILE *f);
/* The configuration IDs --help lists after config_usage: each file's ids,
 * read from c's paths at run time (so the list is the files', never a
 * stale copy). */
void config_usage_ids(const run_config *c, FILE *f);

/* The flags' values on their own (placement, counts, epochs, batch size,
 * timeouts, backend, addresses): nothing that depends on a file. Returns 0
 * or -1 with err. */
int config_check_flags(const run_config *c, char *err, size_t errlen);

/* config_check_flags, then the seed launcher's checks and psbench's that
 * join flags and files: servers for the hook, the seed placement's
 * divisibility, the HybridModel's shape over the servers, batch-update
 * rounds that fill, data that feeds every trainer. Returns 0 or -1 with
 * err. After config_load, a batch-update or HybridModel job skips the seed
 * placement's checks (every trainer feeds every server); without it they
 * all apply. */
int config_check_fit(const run_config *c, char *err, size_t errlen);

/* What config_load resolved, released (c->resolved zeroed): config_load
 * does it first, config_free too. */
void config_unload(run_config *c);

/* Read the four configuration files and resolve the chosen ids into
 * c->resolved: every value checked for type and range (shared/jobconf.h's
 * table; absent keys with a default get it written, so config_to_json
 * records what runs), the classes that go together (batch-update: the
 * server, model and trainer; the HybridModel's), --ddp-hook and the
 * model's hook, the data against a DummyModel. Returns 0 or -1 with err
 * naming the file and the id (a value: "PATH: trainer \"ID\": \"KEY\" must
 * be ..., got ..."). May be called again (the previous resolution is
 * released first). Call it before config_check_fit: the placement checks
 * depend on the server kind. */
int config_load(run_config *c, char *err, size_t errlen);

/* config_check_flags, config_load, config_check_fit: the first error, or 0. */
int config_resolve(run_config *c, char *err, size_t errlen);

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

void config_free(run_config *c);

#endif
