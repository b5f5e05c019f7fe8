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

/* ---- reading configurations objects ----------------------------------- */

/* An integer field of `conf` in [min, max]; absent: def (absent with def < 0
 * is an error). Messages name it "<what> '<id>': ...". 0 or -1 with err. */
int jobconf_uint(json_t *conf, const char *what, const char *id, const char *key, int64_t def, uint64_t min,
                 uint64_t max, uint64_t *out, char *err, size_t errlen);
/* A number field in [min, max] (min < v when min_open); absent: def. */
int jobconf_num(json_t *conf, const char *what, const char *id, const char *key, double def, double min,
                bool min_open, double max, double *out, char *err, size_t errlen);
/* A boolean field; absent: false. */
int jobconf_bool(json_t *conf, const char *what, const char *id, const char *key, bool *out, char *err,
                 size_t errlen);

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
 * "HybridModel") and
 * its configurations object (may be NULL: every default). `id` names it in
 * messages. 0, or -1 with err (*out then needs no modelconf_free). */
int modelconf_parse(const char *id, const char *cls, json_t *conf, modelconf *out, char *err, size_t errlen);
/* The same from {"id", "class", "configurations"} (the assignment's "model"). */
int modelconf_from_entry(json_t *entry, modelconf *out, char *err, size_t errlen);
void modelconf_free(modelconf *m);

/* HybridModel's shape rule: the P servers' D-wide rows, concatenated, are
 * reshaped to rows of 512, so P x D must be at least 512 and a multiple of
 * it. 0, or -1 with the reason. */
int hybrid_shape_check(uint64_t number_ps, uint64_t embedding_dim, char *err, size_t errlen);

/* ---- hooks ------------------------------------------------------------- */

/* The trainer configuration's "ddp_hook" values (the seed's names; "rpc"
 * is an old alias of rpc_hook). Returns false for unknown names; otherwise
 * says whether the hook sends buckets to parameter servers and whether it
 * allreduces among trainers. */
bool hookconf_lookup(const char *name, bool *needs_servers, bool *collective);

#endif
