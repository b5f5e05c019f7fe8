/* config_check.h — the checks of a run configuration (config_check.c;
 * the whole: config.h). Not master/validate.h, which checks what nodes send. */
#ifndef PSBENCH_CONFIG_CHECK_H
#define PSBENCH_CONFIG_CHECK_H

#include "master/run_config.h"

#include <stddef.h>

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

#endif
