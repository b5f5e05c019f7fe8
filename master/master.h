/* master.h — the state of a psbench-master process.
 *
 * One libevent event_base runs the control plane: node connections
 * (bufferevents), the run's phases, failure detection, and twice a second a
 * snapshot that the HTTP thread serves. The HTTP thread never touches this
 * state; it only reads the latest published snapshot (http.c).
 */
#ifndef PSBENCH_MASTER_H
#define PSBENCH_MASTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "master/aggregate.h"
#include "master/hosttrack.h"
#include "master/kvstore.h"
#include "master/states.h"
#include "shared/clock.h"
#include "shared/clocksync.h"
#include "shared/trace.h"

struct event_base;
struct event;
struct admit;
struct bufferevent;
struct http_server;
struct launcher;
struct mtrace;
struct mparams;

/* What the run needs, resolved from the command line and configs/. */
typedef struct master_settings {
    uint32_t ntrainer, nserver;     /* totals (cpu + cuda) */
    uint32_t ncudatrainer, ncudaserver;
    bool shard;                     /* placement shard (else the seed's) */
    uint64_t batches_per_pass;      /* per trainer, the timed pass */
    uint64_t batches_warmup;        /* per trainer, the warm-up pass (HybridModel: --warmup-cycles epochs) */
    uint64_t epochs, batch_size, seed; /* epochs: those of data the timed pass spans */
    uint64_t steps;                 /* --steps (0: the passes are --epochs' whole epochs) */
    double rpc_timeout_s;           /* bounds every wait */
    double join_timeout_s;          /* registrations must complete within */
    const char *token;              /* NULL: none */
    const char *server_kind;        /* "average" | "average-batch" | "batch-update" */
    json_t *batch_update;           /* batch-update: the servers' "batch_update" minus part/parts
                                     * (owned by main); NULL for other kinds */
    json_t *embedding;              /* embedding: the servers' "embedding" object (owned by main) */
    const char *rpc_pattern;        /* embedding: the trainers' rpc_pattern, "seed" or "psbench"
                                     * (trainer/hybrid.h); NULL for other kinds */
    json_t *model;                  /* {"class": ..., "configurations": {...}} (borrowed) */
    json_t *data, *trainer;         /* {"id", "class", "configurations"} (borrowed) */
    json_t *config_json;            /* the whole configuration, for results.json (borrowed) */
    const char *backend;            /* trainers' collectives: gloo | nccl | multi */
    bool nccl_group;                /* the CUDA trainers allreduce with NCCL (a hook with
                                     * collectives, --backend nccl or multi) */
    const char *out_dir;            /* NULL: no files */
    double linger_s;
    double quiet_host_s;            /* --quiet-host: wait this long for a quiet host before each run (0: not) */
    uint32_t runs;                  /* --runs: the job this many times back to back; 0: until stopped */
    bool allow_divergence;          /* --allow-divergence: trainers go on past a NaN/inf loss */
    bool tables;                    /* print the per-rank tables under the headline (--tables) */
    bool trace;                     /* --trace: the run's trace, DIR/trace.json (mtrace.h) */
    trace_window trace_steps;       /* --trace-steps (default every step) */
    uint32_t trace_buffer;          /* --trace-buffer: spans per ring */
    uint64_t params_max;            /* --params-max: trainer 0's parameters recorded (mparams.h) */
    /* The job's configuration as a sweep's sweep.csv has it (master/tools/sweep.h),
     * appended to every row of the per-run CSVs (results.c) so that CSVs of
     * several jobs concatenate into one table. Strings borrowed from the
     * run_config, which outlives the master. */
    struct {
        const char *hook;           /* the trainers' ddp_hook, "" when the model has none */
        const char *trainer, *model; /* the configuration files' ids (--trainer, --model) */
        const char *device;         /* "cpu", "cuda", or "mixed" (CPU and CUDA nodes) */
        const char *transport;      /* --transport */
        double bucket_cap_mb;       /* the trainer configuration's; NAN: its class has none */
    } csv_config;
} master_settings;


typedef struct node {
    struct master *m;
    struct bufferevent *bev; /* NULL once disconnected */
    agg_role role;
    bool registered;
    uint32_t rank;
    char host[256];       /* as the node reports it (hostname) */
    char peer_ip[64];     /* as the master sees it */
    char device[32];
    int64_t pid;          /* as the node reports it (0: unknown) */
    char addr[300];       /* server: HOST:PORT trainers connect to */
    node_state state;     /* changed by node_set_state only (states.h) */
    double last_seen;     /* master clock, seconds */
    uint64_t bytes_in, bytes_out;
    int64_t rows_touched;  /* an embedding server's report, -1 before any */
    int64_t rows_base;     /* rows_touched when the current run began (--runs) */
    json_t *calls;         /* an embedding server's last `calls` (frames and bytes by message type since
                            * its last reset), or NULL (owned) */
    uint64_t batches_done; /* in the current pass */
    uint64_t mem_total, mem_available; /* server: its host's memory at register (0: not said) */
    uint64_t init_done, init_total;    /* server: its table's fill while it fills (total 0: not filling) */
    json_t *timed_result;  /* trainer: what its timed pass reported (loss, digest) */
    json_t *warmup_result; /* trainer: what its warm-up pass reported (loss, digest): results.json "warmup" */
    json_t *environment;   /* what it computes with, from its register (owned), NULL: not reported */
    json_t *diverged;      /* trainer: where its loss first diverged ({pass, epoch, batch, loss}), or NULL */
    json_t *links;         /* trainer: its links to servers, from `ready` (validate_ready), or NULL */
    hs_track hs;           /* its host's and its own CPU, from its reports' `host` (hosttrack.h) */
    json_t *gpu_timed;     /* trainer: the metric keys its reports say a GPU timed (array of strings), or
                            * NULL: none said (a CPU trainer) */
    bool clock_answers;    /* its register said it answers `clock` (issue 42): the master sends it the
                            * clock rounds under --trace */
    clocksync clk;         /* those rounds (shared/clocksync.h) */
    bool refused;          /* not registered: told `stop` (refused); what it sends is dropped unread
                            * until it closes, or MASTER_REFUSED_LINGER_S pass */
    double t_refused;
    struct node *next;
} node;

#define MASTER_NSIGNALS 3

/* wire.h's view of the layer above: the handler of each message type and
 * what to do when a registered node's connection ends (run.c fills it). */
struct wire_ops;

typedef struct master {
    master_settings set;        /* as parsed: never written after master_init */
    struct event_base *base;
    struct admit *admit;        /* the control listener and its bounds (admit.h) */
    const struct wire_ops *wire;
    uint16_t ctl_port;
    double t_last_tick;         /* when the tick last ran: a much later one means the master itself was
                                 * paused (SIGSTOP, a suspended VM), not its nodes */
    double t_resumed;           /* when it ran again after such a pause (0: never paused): silence and
                                 * deadlines count from then at the earliest */
    struct event *tick_ev, *sig_ev[MASTER_NSIGNALS]; /* SIGINT, SIGTERM, SIGHUP */
    struct event *sig_act_ev;   /* activated by a signal: the loop acts on it (loop_on_signals) */
    node *nodes;
    node **trainers, **servers; /* by rank, NULL while free */
    /* The run: one state (states.h), changed by master_set_state only,
     * which stamps these times. */
    run_state state;
    double t_state;             /* when the current state was entered */
    double t_start;             /* when this run began waiting for its nodes */
    double t_ended;             /* when the run ended (its verdict: done or failed) */
    double leave_at;            /* DONE, FAILED: when the master may leave (--linger after t_ended, or at
                                 * once when a signal ended the runs) */
    metrics_pass metrics_pass;  /* the pass agg's metrics are from */
    uint32_t run;               /* 1-based: which of set.runs this is */
    /* Signals, as they came (run_on_signal records them, the loop acts
     * on each: loop_on_signals). Any signal ends the series of runs. */
    unsigned signals, signals_acted;
    int last_signal;
    double t_init_progress; /* when a server's table fill last moved (0: never): deadlines wait while it does */
    char error[1024];
    double t_last_progress;
    uint64_t batches_completed_total;
    aggregate agg;
    struct http_server *http;
    struct history *history;   /* the charts' points (history.h), taken as snapshots are published */
    struct launcher *launcher; /* --local: the children */
    struct mparams *params;    /* --out: trainer 0's final parameters as they come (mparams.h), owned; NULL
                                * before any */
    struct mtrace *trace;      /* --trace: the master's own trace and the nodes' clocks (mtrace.h), owned;
                                * NULL without */
    double training_s;         /* the timed pass's duration, once it completed */
    bool config_published;     /* /api/v1/config made (publish.c): the configuration never changes */
    uint64_t trace_step_key;   /* what /api/v1/trace/step was last made from (publish.c; 0: nothing yet) */
    struct summary_runs *run_headlines; /* --runs other than 1: each done run's figures (summary.h), owned */
    json_t *host_load;         /* this run's host load by pass: {"warm-up"|"timed": {"start", "end",
                                * "steal_share", "busy"}} (results_load_mark), owned; NULL before any */
    hoststate hs;              /* every host's state over the timed pass (hosttrack.h, hoststate.h) */
    int exit_code;
    kvstore kv;                /* the trainers' rendezvous (collective groups) */
    /* A trainer's failure, held back briefly: when a trainer dies, the
     * others' collectives fail at about the moment its connection drops
     * here, and the run should be failed in the dead one's name. Beside
     * the state, not a state of its own: the run goes on while it is held
     * (its pass, its deadlines, other nodes' joins) and the held verdict
     * is given in whatever state the run is then. */
    char held_failure[512];
    double held_until;         /* 0: nothing held */
    /* Refusals a node may retry (wire_refuse): a follower (--follow) comes
     * back every half second while it waits for a job, so each reason is
     * logged at warn level once a minute, its repeats at debug level. */
    struct {
        char reason[128];
        double t;
    } retry_said[4];
} master;

static inline double master_now(void) { return clock_now_s(); }

/* Batches per trainer in the current pass (the warm-up's through its
 * reset; the timed pass's otherwise). */
static inline uint64_t master_pass_batches(const master *m)
{
    return m->state == RUN_WARMUP || m->state == RUN_RESETTING ? m->set.batches_warmup : m->set.batches_per_pass;
}

/* More runs to go after the current one (--runs): a signal ends the
 * series, whichever state it came in. */
static inline bool master_runs_remain(const master *m)
{
    return m->signals == 0 && (m->set.runs == 0 || m->run < m->set.runs);
}


/* node.c: a node's one setter (asserts the change against the table,
 * logs it at debug level), and how logs and verdicts name a node:
 * "trainer 1 (HOST)", "an unregistered node (IP)". */
void node_set_state(node *n, node_state to);
void node_describe(const node *n, char *buf, size_t len);

/* run.c */
/* What master_init returns when --listen's address cannot be listened on
 * (in use, not this host's): a bad value, exit 2; -1 is anything else. */
#define MASTER_INIT_ADDRESS (-2)
/* 0, MASTER_INIT_ADDRESS or -1, with err. */
int master_init(master *m, const master_settings *set, const char *listen_host, uint16_t listen_port,
                char *err, size_t errlen);
void master_free(master *m);
/* Run until the job ends (and the linger time passes). Returns the exit code. */
int master_run(master *m);
/* phases.c: fail the run with a one-line reason (first failure wins;
 * once the run is over, only a debug line says it came). */
void master_fail(master *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --local: a child ended badly (launcher_job's child_failed; ctx is the
 * master). It fails the run unless the run is over already. */
void master_child_failed(void *ctx, const char *why);
/* publish.c: build and publish the snapshot the HTTP thread serves. */
void master_publish(master *m, bool exact);
/* Rows an embedding server's updates touched in the current run, -1 before its first report. */
static inline int64_t node_rows_touched(const node *n)
{
    return n->rows_touched < 0 ? -1 : n->rows_touched - n->rows_base;
}

/* results.c: tables on stdout, results.json and CSVs under out_dir
 * (out_dir/run-NNN with --runs other than 1). */
int results_write(master *m, char *err, size_t errlen);
/* Create --out (and missing parents) and check every file the first run
 * writes there (results.json, trainer.csv, server.csv; in run-001/ with
 * --runs other than 1) can be written: done at start, so that a bad path
 * (a file where the folder should be, a folder where a file should be, a
 * read-only place) fails before the run rather than after it. 0, or -1
 * with "--out DIR: ..." in err. */
int results_check_out(const char *out_dir, uint32_t runs, char *err, size_t errlen);
void results_print(master *m);
/* After the last of a series of runs (--runs other than 1): the runs'
 * summary (summary.h) on stdout and in out_dir/summary.json. */
void results_summary(master *m);
/* The master host's load (hostinfo_load) as pass (RUN_WARMUP, RUN_TIMED)
 * starts or ends, into m->host_load; at the end, the steal over the pass
 * and whether the host was busy (results.json's host_load, a warning). */
void results_load_mark(master *m, run_state pass, bool start);
/* A trainer's diverged loss as the run's warning: "trainer R (HOST): loss
 * diverged at epoch E, batch B of the P pass (loss = nan); the run went on
 * (--allow-divergence)". */
void results_divergence_line(const node *n, char *buf, size_t len);

#endif
