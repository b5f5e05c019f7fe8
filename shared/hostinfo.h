/* hostinfo.h — what a process computes with: this host's CPU (model, cores,
 * vector extensions), memory and kernel, and the compiler that built the
 * binary. Every node reports it when it registers (its `environment`,
 * extended by the role: a trainer's BLAS, a server's fold), the master puts
 * it in results.json and /api/v1/nodes, and `psbench-master diff` shows
 * where two runs' environments differ before their figures: a benchmark
 * must say what it measured on. */
#ifndef PSBENCH_HOSTINFO_H
#define PSBENCH_HOSTINFO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* {"hostname", "cpu_model", "cpus" (online), "cpus_allowed" (this
 * process's affinity), "simd": ["sse4_2", "avx", "avx2", "avx512f", ...]
 * (those of the list the CPU has), "memory_bytes", "kernel", "machine",
 * "compiler", "psbench_version"}: a new object, NULL when out of memory. */
json_t *hostinfo_json(void);

/* The CPU's model name ("Intel(R) Xeon(R) Processor"; the machine type
 * where /proc/cpuinfo names none) into buf. */
void hostinfo_cpu_model(char *buf, size_t len);

/* The compiler of this binary, e.g. "clang 14.0.6" or "gcc 12.2.0". */
const char *hostinfo_compiler(void);

/* Whether the CPU has a vector extension, by the names of "simd" above
 * ("avx2", "avx512f", "avx512_bf16", ...); false on other architectures. */
bool hostinfo_cpu_has(const char *ext);

/* This host's load now (issue 30: a busy host makes noisy figures):
 * {"loadavg": [1, 5, 15 min] (/proc/loadavg), "cpus" (online),
 * "cpu_ticks", "steal_ticks" (/proc/stat's "cpu" line: all its ticks, and
 * steal's, since boot)}; a value that could not be read is null. Read
 * from $PSBENCH_PROC_DIR instead of /proc where set (the tests' busy host).
 * A new object, NULL when out of memory. */
json_t *hostinfo_load(void);

/* The share of the CPU time between two hostinfo_load readings that a
 * hypervisor stole (0..1); NAN when not known (no /proc/stat, no tick
 * between them). */
double hostinfo_steal_share(const json_t *start, const json_t *end);

#endif
