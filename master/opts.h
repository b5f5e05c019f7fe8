/* opts.h — psbench-master's command line: its option table (shared/opts.h)
 * over run_config (config.h). config_init, config_parse_args and
 * config_usage (config.h) are made from it in opts.c; config_to_json
 * echoes the options through it. */
#ifndef PSBENCH_MASTER_OPTS_H
#define PSBENCH_MASTER_OPTS_H

#include "master/config.h"
#include "shared/opts.h"

#include <stdbool.h>
#include <stddef.h>

/* The table (for config.c and the tests). */
const opts_table *master_opts(void);

/* The options that set a key of the trainer configuration (the seed
 * launcher's --preprocess-data, --create-criterion, --create-ddp-model,
 * --hook-state, --iteration-step, its scripts' --create-optimizer and
 * --lr), in the table's order: the i-th one's name ("hook-state") and
 * key ("hook_state"); false past the last. Their values are in run_config's
 * trainer_flags, and config_load applies them. */
bool master_trainer_key_flag(size_t i, const char **name, const char **key);

#endif
