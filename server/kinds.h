/* kinds.h — the registry of kinds (kinds.c): a kind by name, and the
 * constructors of the kind files. */
#ifndef PSBENCH_KINDS_H
#define PSBENCH_KINDS_H

#include "server/kind.h"

/* "average", "average-batch", "batch-update", "embedding". Returns 0, or -1. */
int kind_parse(const char *name, kind_id *out);
const char *kind_name(kind_id id);

/* Create the kind of cfg on dev (not owned), taking buffers from pool and
 * its method metric from m. NULL with a reason in err. */
kind *kind_new(const kind_config *cfg, device *dev, bufpool *pool, metrics *m, char *err, size_t errlen);
void kind_free(kind *k);

#endif
