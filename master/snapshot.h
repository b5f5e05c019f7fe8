/* snapshot.h — what the master knows at one instant, in plain data.
 *
 * The master's reactor fills a snapshot_input from its live state (nodes,
 * run phase, per-rank running statistics) and renders it, once, into the
 * immutable documents the HTTP thread serves: the JSON bodies of the
 * /api/v1 endpoints and the Prometheus exposition. Rendering is pure: no
 * I/O, no global state, so it is unit-tested on hand-made inputs.
 */
#ifndef PSBENCH_SNAPSHOT_H
#define PSBENCH_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "shared/stats.h"

/* One node as the master sees it. */
typedef struct snap_node {
    const char *role;   /* "trainer" | "server" */
    uint32_t rank;
    const char *host;
    const char *device; /* "cpu", "cuda:0", ... */
    const char *state;  /* "registered" | "ready" | "running" | "done" | "failed" | "lost" */
    double last_seen_s; /* seconds since its last message */
    uint64_t bytes_in, bytes_out; /* payload bytes it reported (data plane) */
    int64_t rows_touched;         /* an embedding server: table rows its updates changed; -1: none */
    uint64_t init_done_bytes, init_total_bytes; /* a server filling its table (total 0: not filling) */
    const void *environment;      /* json_t *: what it computes with, as it registered (borrowed);
                                   * NULL: not reported. void * keeps jansson out of this header */
    const void *gpu_timed;        /* json_t * (borrowed): a trainer's metric names timed on its GPU,
                                   * as it reported them; NULL: none */
    const void *links;            /* json_t * (borrowed): a trainer's links to servers (`ready`); NULL: none */
} snap_node;

/* One metric of one rank (rank >= 0) or of a whole role (rank == -1, the
 * combined "all trainers" / "all servers" view). */
typedef struct snap_stat {
    const char *role;
    int64_t rank;
    const char *metric; /* the seed's "type,name" */
    stats_summary s;    /* milliseconds */
} snap_stat;

/* The step time's histogram buckets (psbench_step_duration_seconds): upper
 * bounds in ms, a 1-2-5 series from 0.5 ms to 20 s, then 60 s; +Inf is
 * implicit. Every bound is an exact double in ms, so a sample's test
 * against it has no rounding. A list, not an array, so that the
 * aggregate, which counts into the buckets, and the renderer, which names
 * them, share it without linking one another. */
#define SNAP_STEP_BOUNDS_MS 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 60000
#define SNAP_STEP_NBOUNDS 16

/* One trainer rank's step times (batch_level_metric,batch_all) as the
 * histogram of /metrics: counted as the samples arrive, so exact whatever
 * their number. */
typedef struct snap_step_hist {
    uint32_t rank;
    uint64_t le[SNAP_STEP_NBOUNDS]; /* samples <= each bound (cumulative) */
    uint64_t count;                 /* every sample: the +Inf bucket */
    double sum_ms;
} snap_step_hist;

/* What built the master (psbench_build_info). */
typedef struct snap_build {
    const char *version;  /* PSBENCH_VERSION, as --version says it */
    const char *compiler; /* hostinfo_compiler() */
    unsigned protocol;    /* the wire protocol (FRAME_PROTOCOL_VERSION) */
} snap_build;

/* The job's configuration in a few words (psbench_run_info): the values a
 * sweep's sweep.csv and the per-run CSVs give the same names. */
typedef struct snap_run_info {
    const char *hook;          /* the trainers' ddp_hook, "" when none */
    const char *model, *trainer; /* the configuration files' ids */
    const char *trainer_class;
    const char *server_kind;   /* "average" | "average-batch" | "batch-update" | ... */
    double bucket_cap_mb;      /* NAN: the trainer class has none */
    const char *device;        /* "cpu" | "cuda" | "mixed" */
    const char *transport;
    uint32_t ntrainer, nserver;
} snap_run_info;

typedef struct snapshot_input {
    const char *phase;  /* "waiting" | "warmup" | "running" | "done" | "failed" */
    const char *pass;   /* the pass the stats are from: "warmup" | "timed"; NULL: none yet */
    const char *error;  /* NULL or a one-line reason */
    uint64_t batches_done, batches_total; /* of the current pass, summed over trainers */
    uint64_t batches_completed_total;     /* every batch any trainer finished, all passes */
    double elapsed_s;                     /* since the current run began */
    uint32_t run, runs;                   /* the run (1-based) of how many (--runs; 0: until stopped) */
    const snap_node *nodes;
    size_t nnodes;
    const snap_stat *stats;
    size_t nstats;
    const void *headline; /* json_t * (borrowed): the run's headline (headline.h); NULL: none */
    const snap_step_hist *steps; /* per trainer rank, by rank (/metrics only) */
    size_t nsteps;
    const snap_build *build;     /* NULL: no psbench_build_info */
    const snap_run_info *info;   /* NULL: no psbench_run_info */
    const void *host_state; /* json_t * (borrowed): status's host_state (hoststate.h); NULL: null */
} snapshot_input;

/* GET /api/v1/status:
 * {"phase", "error", "progress": {"batches_done", "batches_total"},
 *  "nodes": {"trainer": n, "server": n}, "elapsed_s", "run", "runs",
 *  "servers_initialising": [{"rank", "done_bytes", "total_bytes"}, ...]}
 * ("run" and "runs" are an extension: --runs; "servers_initialising" too:
 * the servers filling their embedding tables now, empty otherwise;
 * "headline" too: the run's headline (master/headline.h), null when none) */
char *snapshot_status_json(const snapshot_input *in);
/* GET /api/v1/nodes: [{"role", "rank", "host", "device", "state", "last_seen_s"}, ...];
 * an embedding server also has "rows_touched", a node that reported it
 * "environment", a trainer whose metrics are timed on its GPU "gpu_timed"
 * (their "type,name" keys) (extensions). */
char *snapshot_nodes_json(const snapshot_input *in);
/* GET /api/v1/metrics:
 * {"unit": "ms", "phase", "groups": {"trainer": {"all": {METRIC: STATS},
 *  "ranks": {"0": {METRIC: STATS}, ...}}, "server": {...}}}
 * STATS = {"count","min","max","mean","variance","stdev","p50","p75","p90","p95","p99"};
 * with embedding servers also "counters": {"server": {"all": {"rows_touched"},
 * "ranks": {"0": {"rows_touched"}, ...}}} (extension: counts, not ms) */
char *snapshot_metrics_json(const snapshot_input *in);
/* The same "groups" object as a jansson value (for results.json). The
 * return type is json_t *, declared void * here to keep jansson out of
 * this header. */
void *snapshot_groups_json(const snapshot_input *in);
/* GET /metrics: Prometheus text format 0.0.4. Durations per rank are
 * psbench_metric_duration_seconds{role,rank,metric,run,pass,metric_type,
 * metric_name}; the whole role's (the "all" view) is a family of its own,
 * psbench_role_metric_duration_seconds{role,metric,run,pass,metric_type,
 * metric_name}, so that a sum() over the first counts each sample once.
 * Then the build and the job (psbench_build_info, psbench_run_info), the
 * headline's figures as gauges by trainer (null ones left out), the step
 * time as a histogram per trainer rank (psbench_step_duration_seconds),
 * and the phase, node and traffic gauges and counters (docs/http-api.md). */
char *snapshot_prometheus(const snapshot_input *in);
/* GET /api/v1/config: the resolved configuration (config, a json_t *, as
 * config_to_json made it; borrowed), compact. NULL: none, or no memory. */
char *snapshot_config_json(const void *config);

#endif
