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
#include <stdint.h>

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

/* One reading of this host's CPU and this process's own (issue 38: the
 * host's state is part of the result). Every node takes one with each
 * report (its `host` object, docs/protocol.md) and the master with each of
 * its own; two readings make a window (hostinfo_window). */
typedef struct hostinfo_sample {
    double t;          /* this process's monotonic clock (seconds) when taken */
    double cpu_s;      /* this process's own CPU (user + system) seconds so far */
    bool ticks_ok;     /* the ticks below were read (/proc/stat) */
    uint64_t total, idle, iowait, steal, irq; /* "cpu" ticks since boot; irq: irq + softirq */
    int64_t procs_running; /* runnable tasks now (/proc/stat), -1: not known */
    double load1;      /* load average (1 min), NAN: not known */
    int64_t cpus;      /* online CPUs */
} hostinfo_sample;

/* A reading now (from $PSBENCH_PROC_DIR as hostinfo_load). */
void hostinfo_sample_take(hostinfo_sample *s);
/* As a report's `host` object: {"t", "cpu_s", "cpus", and where known
 * "cpu_ticks", "idle_ticks", "iowait_ticks", "steal_ticks", "irq_ticks",
 * "procs_running", "load1"}. NULL when out of memory. */
json_t *hostinfo_sample_json(const hostinfo_sample *s);
/* Back from such an object, checked already (validate_host): a key that
 * is absent is not known. */
void hostinfo_sample_from_json(const json_t *o, hostinfo_sample *s);

/* What a window between two readings of one process says, as shares of
 * the host's CPU capacity over it (0..1); NAN where not known. */
typedef struct hostinfo_window {
    double seconds;    /* b.t - a.t */
    double steal;      /* steal ticks / all ticks */
    double busy;       /* ticks but idle, iowait and steal / all ticks (user, nice, system, irq, softirq) */
    double own;        /* this process's CPU seconds / (seconds x cpus) */
} hostinfo_window;

/* The window from a to b (b later). */
hostinfo_window hostinfo_window_of(const hostinfo_sample *a, const hostinfo_sample *b);

#endif
