/* mparams.h — a run's final parameters (extension, issue 43: what
 * compression costs, shown by `psbench-master diff` and a sweep).
 *
 * With --out, the master asks trainer 0 for its parameters at the end of
 * the run (its assignment's `final_params`; in DDP every trainer ends with
 * the same parameters, as do trainers that share their servers, so one is
 * enough): on `stop` it sends them in `params` parts (docs/protocol.md),
 * kept here until the run's files are written. results.json's
 * `final_params` then names DIR/params.bin (shared/paramsfile.h: the
 * layout), their count, digest and L2 norm, or says why there is no file:
 * a model of more than PARAMSFILE_MAX_FLOATS parameters (only its norm and
 * digest), one without parameters, parts that never came or were refused.
 * A bad part costs the file, never the run (a warning says why).
 *
 * Every function here runs on the master's loop.
 */
#ifndef PSBENCH_MASTER_MPARAMS_H
#define PSBENCH_MASTER_MPARAMS_H

#include "master/master.h"
#include "shared/control.h"

/* The file's name in a run's folder. */
#define MPARAMS_FILE "params.bin"

/* The `final_params` object of trainer `rank`'s assignment, or NULL (not
 * asked: no --out, or not trainer 0). */
json_t *mparams_assign_json(const master *m, uint32_t rank);
/* The handler of `params`. */
void mparams_on_params(master *m, node *n, ctl_msg *msg);
/* Whether trainer 0's parameters are still to come: asked for, not all
 * in, trainer 0 still connected; *since: when its last part came (0: none
 * yet). A big model's parts take seconds on a loaded host: the run's files
 * wait for them as long as they keep coming (loop.c). */
bool mparams_coming(const master *m, double *since);
/* DIR/params.bin where the parameters came whole (written whole:
 * shared/atomicfile.h; a stale one of an earlier job removed otherwise),
 * and results.json's `final_params` into doc. 0, or -1 with err (the file
 * could not be written). */
int mparams_write(master *m, const char *dir, json_t *doc, char *err, size_t errlen);
/* The next run (--runs) begins: this run's parameters go. */
void mparams_next_run(master *m);
void mparams_free(master *m);

#endif
