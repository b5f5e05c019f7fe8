/* jobconf.h — the parts of a job's configuration that both the master and
 * the trainer read, parsed here once: the model configuration (an entry of
 * configs/model_configurations.json, handed to trainers in the assignment)
 * and the communication hooks a trainer configuration may name.
 *
 * The master parses a model entry to validate it and size the job; the
 * trainer parses the same JSON from its assignment to build the model. The
 * two cannot disagree about defaults or limits.
 */
#ifndef PSBENCH_JOBCONF_H
#define PSBENCH_JOBCONF_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- checking configurations objects ---------------------------------- */

/* Every key each class of each configuration kind ("data", "model",
 * "trainer", "server") takes lives in one table in jobconf.c, with its type,
 * range, and whether it is required or has a default (docs/operations.md,
 * "Configuration values", lists them).
 *
 * jobconf_check checks the configurations object `conf` of an entry `id` of
 * class `cls`: the class is one psbench has, every key is one the class
 * takes, each value has its type and range, required keys are there, and the
 * class's rules between keys hold. Absent keys that have a default get it
 * written into conf, and a key's older spelling (the seed's "input_samples")
 * is renamed to the current one, so what is recorded and sent on is what
 * runs. conf must be an object. 0, or -1 with a one-line reason:
 *     trainer "DdpTrainer": "lr" must be a number in (0, 1000000], got "fast" (a string)
 * (the master puts the file's path in front). */
int jobconf_check(const char *kind, const char *cls, const char *id, json_t *conf, char *err, size_t errlen);
/* The same for an entry {"id", "class", "configurations"} (an assignment's;
 * an entry without "configurations" gets an empty one). */
int jobconf_check_entry(const char *kind, json_t *entry, char *err, size_t errlen);

/* Values of a configurations object jobconf_check passed: the key is there
 * (required, or its default written) and has its type. */
uint64_t jobconf_u64(json_t *conf, const char *key);
double jobconf_f64(json_t *conf, const char *key);
bool jobconf_flag(json_t *conf, const char *key);
const char *jobconf_str(json_t *conf, const char *key);

/* Whether class `cls` of `kind` takes `key` (false for a class psbench
 * does not have). */
bool jobconf_class_takes(const char *kind, const char *cls, const char *key);
/* One value v for `key` as class `cls` of `kind` checks it in a file (the
 * key must be one the class takes): 0, or -1 with what it must be and what
 * it is, for a flag's message to follow its name:
 *     must be "BasicHookState" (the only one psbench has), got "Fancy" */
int jobconf_check_value(const char *kind, const char *cls, const char *key, json_t *v, char *err, size_t errlen);
/* What `key` of class `cls` must be, as jobconf_check_value says it ("a
 * number in (0, 1]", "one of \"a\", \"b\""); the key must be one the class takes. */
void jobconf_key_expect(const char *kind, const char *cls, const char *key, char *buf, size_t len);

/* The table, for tests and messages: the i-th class of a kind, the i-th key
 * of a class (NULL past the end). */
const char *jobconf_class_name(const char *kind, size_t i);
const char *jobconf_key_name(const char *kind, const char *cls, size_t i);

/* ---- models ------------------------------------------------------------ */

typedef enum model_class {
    MODEL_DUMMY = 0, /* the seed's DummyModel: real training (trainer/model.h) */
    MODEL_SYNTHETIC, /* pushes of generated buckets: a communication benchmark */
    MODEL_LINEAR,    /* the batch-update benchmark's Linear(in, out) */
    MODEL_HYBRID,    /* the DDP + RPC benchmark's HybridModel: embedding servers, dense part by allreduce */
} model_class;

typedef struct modelconf {
    model_class cls;
    struct {
        uint64_t num_embeddings, embedding_dim, dense_input_size, dense_output_size;
        uint32_t dense_layers_count;
        bool sparse;
    } dummy;
    struct {
        uint32_t buckets;
        uint64_t bucket_floats; /* the largest bucket when sizes are listed */
        uint64_t *sizes;        /* NULL, or `buckets` sizes (owned) */
        bool sparse;
        uint32_t sparse_cols;
    } syn;
    struct {
        uint64_t in_features, out_features;
    } linear;
    struct {
        uint64_t num_embeddings, embedding_dim; /* every server's table (seed: 300 x 64) */
    } hybrid;
} modelconf;

/* Parse a model entry: its class ("DummyModel", "Synthetic", "Linear",
 * "HybridModel") and its configurations object, checked by jobconf_check
 * (defaults written into it). `id` names it in messages. 0, or -1 with err
 * (*out then needs no modelconf_free). */
int modelconf_parse(const char *id, const char *cls, json_t *conf, modelconf *out, char *err, size_t errlen);
/* The same from {"id", "class", "configurations"} (the assignment's "model"). */
int modelconf_from_entry(json_t *entry, modelconf *out, char *err, size_t errlen);
void modelconf_free(modelconf *m);

/* HybridModel's shape rule: the P servers' D-wide rows, concatenated, are
 * reshaped to rows of 512, so P x D must be at least 512 and a multiple of
 * it. 0, or -1 with the reason. */
int hybrid_shape_check(uint64_t number_ps, uint64_t embedding_dim, char *err, size_t errlen);

/* ---- PowerSGD (--compress powersgd, issue 43) ---------------------------- */

/* The largest matrix_approximation_rank taken (PyTorch has no bound; a
 * rank above a matrix's smaller side is that side, as PyTorch's min). */
#define PSGD_MAX_RANK 1024

/* PowerSGDState's parameters (torch/distributed/algorithms/ddp_comm_hooks/
 * powerSGD_hook.py), each under PyTorch's name as the DdpTrainer key, and
 * which of its hooks runs. batch_tensors_with_same_shape is not one:
 * psbench multiplies every matrix on its own, the same arithmetic as
 * PyTorch's batched bmm (its default, false, is what results name). */
typedef struct psgd_conf {
    uint32_t rank;               /* matrix_approximation_rank (1) */
    uint64_t start_iter;         /* start_powerSGD_iter (1000) */
    double min_compression_rate; /* (2) */
    bool error_feedback;         /* use_error_feedback (true) */
    bool warm_start;             /* (true) */
    double epsilon;              /* orthogonalization_epsilon (0) */
    uint64_t random_seed;        /* (0) */
    uint64_t stats_every;        /* compression_stats_logging_frequency (10000) */
    bool batched;                /* powersgd_hook: batched_powerSGD_hook (else powerSGD_hook) */
} psgd_conf;

/* PyTorch's defaults. */
void psgd_conf_default(psgd_conf *p);
/* A trainer configuration's (jobconf_check passed), PyTorch's default
 * where a key is absent. */
void psgd_conf_of(json_t *trainer_conf, psgd_conf *p);
/* {"matrix_approximation_rank", "start_powerSGD_iter",
 * "min_compression_rate", "use_error_feedback", "warm_start",
 * "orthogonalization_epsilon", "random_seed",
 * "compression_stats_logging_frequency", "batch_tensors_with_same_shape"
 * (false), "hook": "powerSGD_hook" | "batched_powerSGD_hook"}. New
 * reference, NULL: memory. */
json_t *psgd_conf_json(const psgd_conf *p);
/* The hook's name PyTorch gives it. */
const char *psgd_hook_name(const psgd_conf *p);

/* ---- hooks ------------------------------------------------------------- */

/* The trainer configuration's "ddp_hook" values (the seed's names; "rpc"
 * is an old alias of rpc_hook). Returns false for unknown names; otherwise
 * says whether the hook sends buckets to parameter servers and whether it
 * allreduces among trainers. */
bool hookconf_lookup(const char *name, bool *needs_servers, bool *collective);

#endif
