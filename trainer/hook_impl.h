/* hook_impl.h — the constructors of the hooks behind hook.h, which
 * hooks_new (hooks.c) puts together by name. Callers use hooks.h; only the
 * hook sources include this (as compute_impl.h and coll_impl.h for their
 * layers). */
#ifndef PSBENCH_HOOK_IMPL_H
#define PSBENCH_HOOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/metrics.h"
#include "trainer/coll.h"
#include "trainer/hook.h"

/* Buckets to the servers; `dense` / `sparse`: which buckets it will get
 * (their metrics exist only then). */
hook *hook_rpc_new(const hook_setup *s, const char *name, bool dense, bool sparse, char *err, size_t errlen);

/* A hook that allreduces every bucket it gets on `group` (taken over: freed
 * with the hook). Metric names: "<dense_metric>" and "<sparse_metric>" (NULL:
 * the hook gets no bucket of that kind). compress: HALF_FP32 (none), or
 * HALF_FP16 / HALF_BF16: dense buckets as PyTorch's fp16_compress_hook /
 * bf16_compress_hook: on a group's host buffers (gloo) or its device
 * buckets (nccl: coll_allreduce_compress_device), refused on a group with
 * neither.
 * powersgd (compress HALF_FP32; NULL: none): dense buckets as PyTorch's
 * powerSGD_hook / batched_powerSGD_hook (powersgd.h; refused on a group on
 * a device). */
hook *hook_allreduce_new(const char *name, coll *group, half_type compress, const psgd_conf *powersgd,
                         double timeout_s, metrics *m, const char *dense_metric, const char *sparse_metric, char *err,
                         size_t errlen);

/* Sparse buckets to `sparse`, dense ones to `dense` (both taken over). */
hook *hook_split_new(const char *name, hook *sparse, hook *dense, char *err, size_t errlen);

#endif
