/* hooks.h — making a hook by its name (the trainer configuration's
 * ddp_hook), from the setup the run driver builds from the master's
 * assignment (hook_setup, hook.h). The implementations, whose
 * constructors hooks.c calls (hook_impl.h):
 *
 *   hook_rpc.c        rpc_hook: buckets to the servers (client + comm thread)
 *   hook_allreduce.c  buckets allreduced on one collective group (coll.h),
 *                     on a thread of its own
 *   hook_split.c      sparse buckets to one hook, dense ones to another:
 *                     sparse_rpc_hook and hybrid_hook are splits
 */
#ifndef PSBENCH_HOOKS_H
#define PSBENCH_HOOKS_H

#include <stddef.h>

#include "trainer/hook.h"

/* The hook s->hook names, connected (servers) and rendezvoused (groups).
 * NULL with a one-line reason in err. */
hook *hooks_new(const hook_setup *s, char *err, size_t errlen);

#endif
