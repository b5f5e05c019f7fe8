/* jobconf.c — model configurations and hook names (see jobconf.h). */
#include "shared/jobconf.h"
#include "shared/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jobconf_uint(json_t *conf, const char *what, const char *id, const char *key, int64_t def, uint64_t min,
                 uint64_t max, uint64_t *out, char *err, size_t errlen)
{
    json_t *v = conf ? json_object_get(conf, key) : NULL;
    if (!v) {
        if (def < 0) {
            errbuf_set(err, errlen, "%s '%s': configurations has no \"%s\"", what, id, key);
            return -1;
        }
        *out = (uint64_t)def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) < min ||
        (uint64_t)json_integer_value(v) > max) {
        errbuf_set(err, errlen, "%s '%s': \"%s\" must be a whole number in %llu..%llu", what, id, key,
                    (unsigned long long)min, (unsigned long long)max);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int jobconf_num(json_t *conf, const char *what, const char *id, const char *key, double def, double min,
                bool min_open, double max, double *out, char *err, size_t errlen)
{
    json_t *v = conf ? json_object_get(conf, key) : NULL;
    if (!v) {
        *out = def;
        return 0;
    }
    double x = json_number_value(v);
    if (!json_is_number(v) || !(min_open ? x > min : x >= min) || !(x <= max)) {
        errbuf_set(err, errlen, "%s '%s': \"%s\" must be a number %s %g and at most %g", what, id, key,
                    min_open ? "above" : "from", min, max);
        return -1;
    }
    *out = x;
    return 0;
}

int jobconf_bool(json_t *conf, const char *what, const char *id, const char *key, bool *out, char *err,
                 size_t errlen)
{
    json_t *v = conf ? json_object_get(conf, key) : NULL;
    if (!v) {
        *out = false;
        return 0;
    }
    if (!json_is_boolean(v)) {
        errbuf_set(err, errlen, "%s '%s': \"%s\" must be true or false", what, id, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* ---- models ------------------------------------------------------------ */

/* The Synthetic model's "bucket_sizes": a non-empty list of whole numbers
 * of floats, one per dense bucket; "buckets", if given too, must count
 * them, and "bucket_floats" must not be given. */
static int modelconf_sizes(const char *id, json_t *conf, json_t *sizes, modelconf *m, char *err, size_t errlen)
{
    size_t n = json_is_array(sizes) ? json_array_size(sizes) : 0;
    if (n == 0 || n > 65536) {
        errbuf_set(err, errlen, "model '%s': \"bucket_sizes\" must be a list of 1..65536 bucket sizes (floats)",
                    id);
        return -1;
    }
    if (m->syn.sparse) {
        errbuf_set(err, errlen, "model '%s': \"bucket_sizes\" is for dense buckets (drop it or \"sparse\")", id);
        return -1;
    }
    if (json_object_get(conf, "bucket_floats")) {
        errbuf_set(err, errlen, "model '%s': give \"bucket_sizes\" or \"bucket_floats\", not both", id);
        return -1;
    }
    json_t *count = json_object_get(conf, "buckets");
    if (count && (!json_is_integer(count) || json_integer_value(count) != (json_int_t)n)) {
        errbuf_set(err, errlen, "model '%s': \"buckets\" says %s but \"bucket_sizes\" lists %zu", id,
                    json_is_integer(count) ? "otherwise" : "no number", n);
        return -1;
    }
    if (!(m->syn.sizes = malloc(n * sizeof *m->syn.sizes))) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    m->syn.bucket_floats = 0;
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(sizes, k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > ((json_int_t)1 << 32)) {
            errbuf_set(err, errlen, "model '%s': bucket_sizes[%zu] must be a whole number in 1..%llu", id, k,
                        (unsigned long long)1 << 32);
            return -1;
        }
        m->syn.sizes[k] = (uint64_t)json_integer_value(v);
        if (m->syn.sizes[k] > m->syn.bucket_floats)
            m->syn.bucket_floats = m->syn.sizes[k];
    }
    m->syn.buckets = (uint32_t)n;
    return 0;
}

static int modelconf_synthetic(const char *id, json_t *conf, modelconf *m, char *err, size_t errlen)
{
    uint64_t buckets, floats, cols;
    if (jobconf_bool(conf, "model", id, "sparse", &m->syn.sparse, err, errlen) < 0 ||
        jobconf_uint(conf, "model", id, "sparse_cols", 16, 1, 1u << 20, &cols, err, errlen) < 0)
        return -1;
    m->syn.sparse_cols = (uint32_t)cols;
    json_t *sizes = conf ? json_object_get(conf, "bucket_sizes") : NULL;
    if (sizes)
        return modelconf_sizes(id, conf, sizes, m, err, errlen);
    if (jobconf_uint(conf, "model", id, "buckets", -1, 1, 65536, &buckets, err, errlen) < 0 ||
        jobconf_uint(conf, "model", id, "bucket_floats", -1, 1, (uint64_t)1 << 32, &floats, err, errlen) < 0)
        return -1;
    m->syn.buckets = (uint32_t)buckets;
    m->syn.bucket_floats = floats;
    return 0;
}

/* DummyModel's fields; the structural rules (sizes that fit, layers that
 * chain) are model_new's, where the model is built. */
static int modelconf_dummy(const char *id, json_t *conf, modelconf *m, char *err, size_t errlen)
{
    const uint64_t big = (uint64_t)1 << 40;
    uint64_t layers;
    if (jobconf_uint(conf, "model", id, "num_embeddings", -1, 1, big, &m->dummy.num_embeddings, err, errlen) < 0 ||
        jobconf_uint(conf, "model", id, "embedding_dim", -1, 1, big, &m->dummy.embedding_dim, err, errlen) < 0 ||
        jobconf_uint(conf, "model", id, "dense_input_size", -1, 1, big, &m->dummy.dense_input_size, err, errlen) <
            0 ||
        jobconf_uint(conf, "model", id, "dense_output_size", -1, 1, big, &m->dummy.dense_output_size, err,
                     errlen) < 0 ||
        jobconf_uint(conf, "model", id, "dense_layers_count", 1, 1, 1u << 16, &layers, err, errlen) < 0 ||
        jobconf_bool(conf, "model", id, "sparse", &m->dummy.sparse, err, errlen) < 0)
        return -1;
    m->dummy.dense_layers_count = (uint32_t)layers;
    return 0;
}

static int modelconf_linear(const char *id, json_t *conf, modelconf *m, char *err, size_t errlen)
{
    if (jobconf_uint(conf, "model", id, "in_features", 100, 1, 1u << 24, &m->linear.in_features, err, errlen) <
            0 ||
        jobconf_uint(conf, "model", id, "out_features", 30, 1, 1u << 24, &m->linear.out_features, err, errlen) < 0)
        return -1;
    uint64_t total = m->linear.out_features * m->linear.in_features + m->linear.out_features;
    if (total > (1ull << 31)) {
        errbuf_set(err, errlen, "model '%s': Linear(%llu, %llu) is too large (at most 2^31 parameters)", id,
                    (unsigned long long)m->linear.in_features, (unsigned long long)m->linear.out_features);
        return -1;
    }
    return 0;
}

static int modelconf_hybrid(const char *id, json_t *conf, modelconf *m, char *err, size_t errlen)
{
    const uint64_t big = (uint64_t)1 << 31;
    if (jobconf_uint(conf, "model", id, "num_embeddings", 300, 1, big, &m->hybrid.num_embeddings, err, errlen) < 0 ||
        jobconf_uint(conf, "model", id, "embedding_dim", 64, 1, 1u << 20, &m->hybrid.embedding_dim, err, errlen) < 0)
        return -1;
    if (m->hybrid.num_embeddings * m->hybrid.embedding_dim > big) {
        errbuf_set(err, errlen, "model '%s': a %llu x %llu table is too large (at most 2^31 floats per server)", id,
                   (unsigned long long)m->hybrid.num_embeddings, (unsigned long long)m->hybrid.embedding_dim);
        return -1;
    }
    return 0;
}

int hybrid_shape_check(uint64_t number_ps, uint64_t embedding_dim, char *err, size_t errlen)
{
    uint64_t w = number_ps * embedding_dim;
    if (number_ps < 1 || w < 512 || w % 512 != 0) {
        errbuf_set(err, errlen,
                   "HybridModel: number_ps x embedding_dim (%llu x %llu = %llu) must be at least 512 and a multiple "
                   "of it: the servers' looked-up rows are reshaped to rows of 512 for the dense part",
                   (unsigned long long)number_ps, (unsigned long long)embedding_dim, (unsigned long long)w);
        return -1;
    }
    return 0;
}

int modelconf_parse(const char *id, const char *cls, json_t *conf, modelconf *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (conf && !json_is_object(conf)) {
        errbuf_set(err, errlen, "model '%s': \"configurations\" must be an object", id);
        return -1;
    }
    int rc;
    if (strcmp(cls, "DummyModel") == 0) {
        out->cls = MODEL_DUMMY;
        rc = modelconf_dummy(id, conf, out, err, errlen);
    } else if (strcmp(cls, "Synthetic") == 0) {
        out->cls = MODEL_SYNTHETIC;
        rc = modelconf_synthetic(id, conf, out, err, errlen);
    } else if (strcmp(cls, "Linear") == 0) {
        out->cls = MODEL_LINEAR;
        rc = modelconf_linear(id, conf, out, err, errlen);
    } else if (strcmp(cls, "HybridModel") == 0) {
        out->cls = MODEL_HYBRID;
        rc = modelconf_hybrid(id, conf, out, err, errlen);
    } else {
        errbuf_set(err, errlen, "model '%s': class '%s' is not in psbench (DummyModel, Synthetic, Linear, "
                   "HybridModel)", id, cls);
        return -1;
    }
    if (rc < 0)
        modelconf_free(out);
    return rc;
}

int modelconf_from_entry(json_t *entry, modelconf *out, char *err, size_t errlen)
{
    const char *id = json_string_value(json_object_get(entry, "id"));
    const char *cls = json_string_value(json_object_get(entry, "class"));
    if (!json_is_object(entry) || !cls) {
        memset(out, 0, sizeof *out);
        errbuf_set(err, errlen, "the model has no class");
        return -1;
    }
    return modelconf_parse(id ? id : cls, cls, json_object_get(entry, "configurations"), out, err, errlen);
}

void modelconf_free(modelconf *m)
{
    free(m->syn.sizes);
    m->syn.sizes = NULL;
}

/* ---- hooks ------------------------------------------------------------- */

bool hookconf_lookup(const char *name, bool *needs_servers, bool *collective)
{
    static const struct {
        const char *name;
        bool servers, collective;
    } hooks[] = {
        {"rpc_hook", true, false},
        {"rpc", true, false},
        {"allreduce_hook", false, true},
        {"sparse_rpc_hook", true, true},
        {"hybrid_hook", false, true},
    };
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (name && strcmp(name, hooks[i].name) == 0) {
            *needs_servers = hooks[i].servers;
            *collective = hooks[i].collective;
            return true;
        }
    }
    return false;
}
