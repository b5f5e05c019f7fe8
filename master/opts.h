/* opts.h — psbench-master's command line: its option table (shared/opts.h)
 * over run_config (config.h). config_init, config_parse_args and
 * config_usage (config.h) are made from it in opts.c; config_to_json
 * echoes the options through it. */
#ifndef PSBENCH_MASTER_OPTS_H
#define PSBENCH_MASTER_OPTS_H

#include "master/run_config.h"
#include "shared/opts.h"

#include <stdbool.h>
#include <stddef.h>

/* The table (for config.c and the tests). */
const opts_table *master_opts(void);

/* The options that set a key of the trainer configuration (the seed
 * launcher's --preprocess-data, --create-criterion, --create-ddp-model,
 * --hook-state, --iteration-step, its scripts' --create-optimizer and
 * --lr, --compress and the --powersgd-* ones), in the table's order,
 * then --compress's second key (matrix_approximation_rank, set with
 * powersgd): the i-th one's name ("hook-state") and key ("hook_state");
 * false past the last. Their values are in run_config's
 * trainer_flags, and config_load applies them. */
bool master_trainer_key_flag(size_t i, const char **name, const char **key);
/* After the options are parsed: what follows from them together (--local's
 * loopback addresses, the token's precedence, the DDP + RPC flags'
 * configurations). 0, or -1 with err. */
int master_opts_finish(run_config *c, char *err, size_t errlen);
/* The directory the default config paths live in: $PSBENCH_CONFIG_DIR,
 * else <dir of the executable>/../configs when it exists, else the source
 * tree's configs/ (PSBENCH_SOURCE_CONFIG_DIR at compile time), else
 * "configs". Writes it to buf and returns buf. */
const char *config_default_dir(char *buf, size_t len);


#endif
