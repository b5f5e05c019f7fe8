/* run_config.h — what the master's run is configured with: the settings
 * its option table (master/opts.c) fills and config.c resolves, and their
 * defaults and bounds. Data only: the table and the parsing both include
 * it, neither includes the other's file for it (config.h: how a
 * run_config is parsed, loaded, checked and freed). */
#ifndef PSBENCH_RUN_CONFIG_H
#define PSBENCH_RUN_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/shm.h"

/* Defaults (psbench's; the seed's launcher has none for these). */
#define CONFIG_DEFAULT_NTRAINER 2
#define CONFIG_DEFAULT_NSERVER 1
#define CONFIG_DEFAULT_EPOCHS 10
#define CONFIG_DEFAULT_TRACE_BUFFER 65536 /* --trace-buffer: spans per ring */
#define CONFIG_DEFAULT_PARAMS_MAX 1048576  /* --params-max: floats params.bin records (4 MiB) */
#define CONFIG_DEFAULT_BATCH_SIZE 10
#define CONFIG_DEFAULT_RPC_TIMEOUT_S 30 /* seconds: the seed's experiment scripts */
#define CONFIG_DEFAULT_TRAINER "DdpRpcTrainer"
#define CONFIG_DEFAULT_SERVER "AverageParameterServer"
#define CONFIG_DEFAULT_DATA "DummyData"
#define CONFIG_DEFAULT_MODEL "DummyModel"
#define CONFIG_DEFAULT_BACKEND "gloo"
#define CONFIG_DEFAULT_LISTEN "0.0.0.0:29500"
#define CONFIG_DEFAULT_LISTEN_PORT 29500 /* CONFIG_DEFAULT_LISTEN's */
#define CONFIG_DEFAULT_HTTP "0.0.0.0:8080"
/* --local without --listen / --http: this host only. */
#define CONFIG_LOCAL_HTTP "127.0.0.1:8080"

/* Upper bounds the parser enforces. */
#define CONFIG_MAX_NODES 4096u /* per count flag */
#define CONFIG_MAX_EPOCHS 1000000u
#define CONFIG_MAX_STEPS 1000000000u /* --steps, --warmup-steps */
#define CONFIG_MAX_BATCH_SIZE (1u << 24)
#define CONFIG_MAX_RUNS 1000000u

/* One resolved entry of a configuration file. */
typedef struct config_entry {
    json_t *json;      /* {"id", "class", "configurations"}: owned */
    const char *id;    /* borrowed from json */
    const char *cls;   /* the entry's "<x>_class", borrowed from json */
    json_t *conf;      /* json["configurations"], borrowed (an object) */
} config_entry;

/* The Synthetic model's parameters (model_class "Synthetic"). */
typedef struct config_synthetic {
    uint32_t buckets;
    uint64_t bucket_floats;
    bool sparse;
    uint32_t sparse_cols; /* floats per sparse row; 16 when not given */
} config_synthetic;

/* The batch-update benchmark (server class BatchUpdateParameterServer, model
 * class Linear, trainer class BatchUpdateTrainer: the seed's
 * parameter_server_test.py). */
typedef struct config_batch_update {
    uint64_t in_features, out_features; /* the model's configurations (100, 30) */
    double lr, momentum;                /* the server's configurations (0.001, 0.9) */
    uint64_t batch_update_size;         /* resolved: 0 in the file means the trainer count */
    uint64_t batches;                   /* the trainer's "batches" per epoch (4) */
} config_batch_update;

typedef struct run_config {
    /* --- the seed launcher's flags --- */
    uint32_t ntrainer, ncudatrainer;  /* --ntrainer, --ncudatrainer */
    uint32_t nserver, ncudaserver;    /* --nserver, --ncudaserver */
    char *trainer;                    /* --trainer: id in the trainer config file */
    char *server;                     /* --server: id in the server config file */
    char *data;                       /* --data: id in the data config file */
    char *model;                      /* --model: id in the model config file */
    uint64_t epochs;                  /* --epochs */
    uint64_t steps;                   /* --steps: the timed pass's batches per trainer (0: --epochs') */
    uint64_t warmup_steps;            /* --warmup-steps: the warm-up pass's (0: as the timed pass) */
    bool steps_set, warmup_steps_set; /* given on the command line */
    uint64_t batch_size;              /* --batch-size (batch-update: the trainer config's
                                       * batch_size unless given; config_load sets it) */
    bool batch_size_set;              /* --batch-size was given */
    /* --- the seed's DDP + RPC benchmark (benchmark_ddp_rpc.py) --- */
    uint64_t number_embeddings;       /* --number-embeddings: 0, or the table's rows */
    uint64_t embedding_dim;           /* --embedding-dim: 0, or its columns */
    uint64_t warmup_cycles;           /* --warmup-cycles: the warm-up pass's epochs (5) */
    char *rpc_pattern;                /* --rpc-pattern seed|psbench: NULL, or overrides the
                                       * HybridTrainer configuration's rpc_pattern (psbench's) */
    bool ddp_rpc_flags;               /* any of the above or --number-ps was given */
    bool model_set, trainer_set, server_set, epochs_set; /* given on the command line */
    bool nserver_set;                 /* --nserver was given (a hook without servers
                                       * defaults it to 0: the seed's pure DDP) */
    char *backend;                    /* --backend: gloo | nccl | multi */
    double rpc_timeout_s;             /* --rpc-timeout SECONDS */
    double join_timeout_s;            /* --join-timeout SECONDS (given: join_timeout_set) */
    bool join_timeout_set;
    char *data_config_path;           /* --data-config-path */
    char *model_config_path;          /* --model-config-path */
    char *trainer_config_path;        /* --trainer-config-path */
    char *server_config_path;         /* --server-config-path */
    uint64_t seed;                    /* --seed (also --torch-seed / --cuda-seed) */
    char *ddp_hook;                   /* --ddp-hook: NULL, or overrides the trainer config's */
    json_t *trainer_flags;            /* --preprocess-data, --create-criterion, --create-ddp-model,
                                       * --hook-state, --iteration-step, and the seed's scripts'
                                       * --create-optimizer and --lr: NULL, or {KEY: value} of those
                                       * given, each checked against the DdpTrainer's KEY (shared/
                                       * jobconf.c) and replacing the trainer configuration's KEY
                                       * (config_load), as --ddp-hook does ddp_hook; psbench's
                                       * --bucket-cap-mb the same for bucket_cap_mb */
    json_t *set_flags;                /* --set KIND.KEY=VALUE (repeatable): NULL, or {KIND: {KEY:
                                       * value}} (KIND trainer, model, data or server; the last
                                       * value given for a key wins), each replacing the KIND
                                       * configuration's KEY once its class is known, checked by
                                       * the files' schema (config_load); the flags above win
                                       * over --set for their keys */
    bool dry_run;                     /* --dry-run: print the resolved plan, start nothing */

    /* --- psbench's own --- */
    char *placement;                  /* --placement seed|shard */
    char *listen;                     /* --listen HOST:PORT (control plane); --local
                                       * without it: 127.0.0.1 */
    char *http;                       /* --http HOST:PORT; --local without it: 127.0.0.1 */
    bool listen_set, http_set;        /* --listen (or --master-addr) / --http given */
    bool local;                       /* --local: spawn servers and trainers here */
    double linger_s;                  /* --linger SECONDS (0: exit when done) */
    double quiet_host_s;              /* --quiet-host SECONDS (0: no wait) */
    psb_transport transport;          /* --transport: what --local's children use */
    uint32_t runs;                    /* --runs N: the job N times back to back (0: until stopped) */
    bool allow_divergence;            /* --allow-divergence: a NaN/inf loss warns, not fails */
    char *out_dir;                    /* --out DIR, NULL: no files */
    bool trace;                       /* --trace: the run's trace into --out's trace.json */
    char *trace_steps;                /* --trace-steps A:B as given (trace_window_parse), NULL: the
                                       * timed pass's every step */
    uint64_t trace_buffer;            /* --trace-buffer N: spans per ring */
    uint64_t params_max;              /* --params-max N: final parameters params.bin records */
    char *tables;                     /* --tables all|none: NULL when not given (all, but none
                                       * under --log-level warn or error) */
    char *token;                      /* --token, else --token-file's, else $PSBENCH_TOKEN,
                                       * else NULL. Never printed */
    char *token_file;                 /* --token-file FILE, NULL if not given */
    bool token_file_loose;            /* FILE is readable by group or others (warn) */
    log_level log_level;              /* --log-level */

    /* --- filled by config_load --- */
    struct {
        bool loaded;
        config_entry model, data, trainer, server;
        modelconf mc;                 /* the model entry, parsed (shared/jobconf.h) */
        const char *hook;             /* DummyModel: the trainers' ddp_hook (borrowed), else NULL */
        bool hook_servers;            /* the hook sends buckets to servers (or there is no hook) */
        bool hook_collective;         /* the hook allreduces among trainers */
        bool hybrid;                  /* model class HybridModel (server kind "embedding") */
        struct {
            uint64_t batches;         /* the trainer configuration's batches per epoch (10) */
            double server_lr;         /* the servers' SGD on the table rows (0.05) */
            const char *rpc_pattern;  /* "seed" or "psbench" (the trainer configuration's, borrowed) */
        } hy;
        const char *server_kind;      /* "average" | "average-batch" | "batch-update" (static) */
        bool batch_update;            /* server kind "batch-update" */
        config_batch_update bu;       /* valid when batch_update */
        bool synthetic;               /* model class is "Synthetic" */
        config_synthetic syn;         /* valid when synthetic */
        uint64_t samples;             /* the data configuration's sample_count */
    } resolved;
} run_config;

#endif
