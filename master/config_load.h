/* config_load.h — the configs/ files read into a run configuration
 * (config_load.c; the whole: config.h). */
#ifndef PSBENCH_CONFIG_LOAD_H
#define PSBENCH_CONFIG_LOAD_H

#include "master/run_config.h"

#include <stddef.h>

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

#endif
