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
 * config.c (the whole: lifetime, command line, order of the checks), and
 * its parts, each with its header, none of which knows config.c:
 * config_check (the checks), config_load (configs/), config_json (the
 * JSON), config_passes (what a pass runs).
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

#include "master/config_check.h"
#include "master/config_json.h"
#include "master/config_load.h"
#include "master/config_passes.h"
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

/* config_check_flags, config_load, config_check_fit: the first error, or 0. */
int config_resolve(run_config *c, char *err, size_t errlen);

void config_free(run_config *c);

#endif
