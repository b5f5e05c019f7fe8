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
#include "master/kvstore.h"

struct event_base;
struct event;
struct admit;
struct bufferevent;
struct http_server;
struct launcher;

/* What the run needs, resolved from the command line and configs/. */
typedef struct master_settings {
    uint32_t ntrainer, nserver;     /* totals (cpu + cuda) */
    uint32_t ncudatrainer, ncudaserver;
    bool shard;                     /* placement shard (else the seed's) */
    uint64_t batches_per_pass;      /* per trainer, the timed pass */
    uint64_t batches_warmup;        /* per trainer, the warm-up pass (HybridModel: --warmup-cycles epochs) */
    uint64_t epochs, batch_size, seed;
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
    uint32_t runs;                  /* --runs: the job this many times back to back; 0: until stopped */
    bool allow_divergence;          /* --allow-divergence: trainers go on past a NaN/inf loss */
} master_settings;

typedef enum node_state {
    NS_CONNECTED = 0, /* no register yet */
    NS_REGISTERED,    /* has a rank, waiting for its assignment */
    NS_ASSIGNED,      /* assignment sent, waiting for ready */
    NS_READY,
    NS_RUNNING,
    NS_PASS_DONE,
    NS_RESETTING,
    NS_DONE,
    NS_FAILED,
    NS_LOST,
} node_state;

const char *node_state_name(node_state s);

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
    node_state state;
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
    json_t *gpu_timed;     /* trainer: the metric keys its reports say a GPU timed (array of strings), or
                            * NULL: none said (a CPU trainer) */
    bool refused;          /* not registered: told `stop` (refused); what it sends is dropped unread
                            * until it closes, or MASTER_REFUSED_LINGER_S pass */
    double t_refused;
    struct node *next;
} node;

#define MASTER_NSIGNALS 3

typedef enum run_phase { PH_WAITING = 0, PH_WARMUP, PH_RUNNING, PH_DONE, PH_FAILED } run_phase;

typedef struct master {
    master_settings set;
    struct event_base *base;
    struct admit *admit;        /* the control listener and its bounds (admit.h) */
    uint16_t ctl_port;
    double t_last_tick;         /* when the tick last ran: a much later one means the master itself was
                                 * paused (SIGSTOP, a suspended VM), not its nodes */
    double t_resumed;           /* when it ran again after such a pause (0: never paused): silence and
                                 * deadlines count from then at the earliest */
    struct event *tick_ev, *sig_ev[MASTER_NSIGNALS]; /* SIGINT, SIGTERM, SIGHUP */
    node *nodes;
    node **trainers, **servers; /* by rank, NULL while free */
    run_phase phase;
    run_phase metrics_pass; /* the pass agg's metrics are from: PH_WARMUP or PH_RUNNING (the
                             * timed one), PH_WAITING before any; kept when the run ends, so
                             * that a failed run's figures say which pass they are */
    uint32_t run;        /* 1-based: which of set.runs this is */
    bool runs_ended;     /* a signal between runs: no further run */
    bool resetting;      /* between the warm-up and the timed pass */
    bool servers_assigned; /* every server registered, fit its host and got its assignment */
    double t_init_progress; /* when a server's table fill last moved (0: never): deadlines wait while it does */
    char error[1024];
    double t_start, t_phase, t_last_progress;
    uint64_t batches_completed_total;
    aggregate agg;
    struct http_server *http;
    struct launcher *launcher; /* --local: the children */
    double t_finished;         /* when done/failed was reached */
    double training_s;         /* the timed pass's duration, once it completed */
    bool finishing;            /* stop sent after the timed pass; waiting for last reports */
    bool hurry;                /* a signal came while finishing: stop waiting for last reports */
    bool finished_output;      /* tables and files written */
    int exit_code;
    kvstore kv;                /* the trainers' rendezvous (collective groups) */
    /* A trainer's failure, held back briefly: when a trainer dies, the
     * others' collectives fail at about the moment its connection drops
     * here, and the run should be failed in the dead one's name. */
    char held_failure[512];
    double held_until;         /* 0: nothing held */
} master;

double master_now(void);

/* run.c */
int master_init(master *m, const master_settings *set, const char *listen_host, uint16_t listen_port,
                char *err, size_t errlen);
void master_free(master *m);
/* Run until the job ends (and the linger time passes). Returns the exit code. */
int master_run(master *m);
/* Fail the run with a one-line reason (first failure wins). */
void master_fail(master *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --local: a child ended badly (launcher_job's child_failed; ctx is the
 * master). It fails the run unless the run is over already. */
void master_child_failed(void *ctx, const char *why);
/* Build and publish the snapshot the HTTP thread serves. */
void master_publish(master *m, bool exact);

/* More runs to go after the current one (--runs). */
bool master_runs_remain(const master *m);
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
/* A trainer's diverged loss as the run's warning: "trainer R (HOST): loss
 * diverged at epoch E, batch B of the P pass (loss = nan); the run went on
 * (--allow-divergence)". */
void results_divergence_line(const node *n, char *buf, size_t len);

#endif
