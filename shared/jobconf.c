/* jobconf.c — model configurations and hook names (see jobconf.h). */
#include "shared/jobconf.h"
#include "shared/cli.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table of configuration keys -------------------------------------- */

typedef enum jc_type { JC_INT, JC_NUM, JC_BOOL, JC_STR, JC_LIST } jc_type;

enum {
    JC_REQUIRED = 1u << 0, /* absent: refused */
    JC_NODEF = 1u << 1,    /* absent: no default written (the class's reader decides) */
    JC_MIN_OPEN = 1u << 2, /* min < v rather than min <= v */
    JC_MAX_OPEN = 1u << 3, /* v < max rather than v <= max */
    /* The type the value is used in, where it is not the double it is
     * checked as (issue 39): a value in range as a double can still be 0
     * or infinite where it is used. */
    JC_F32 = 1u << 4,      /* stepped in float: refused where (float)v is 0, subnormal or infinite */
    JC_MIB = 1u << 5,      /* MiB made a byte count (uint64): a non-zero v must be 1 byte at least */
};

typedef struct jc_key {
    const char *key;
    jc_type type;
    unsigned flags;
    double min, max;            /* JC_INT, JC_NUM (integers up to 2^53 are exact) */
    double def;                 /* JC_INT, JC_NUM, JC_BOOL (0 or 1): the default */
    const char *const *choices; /* JC_STR: the accepted values, NULL-ended; the first is the default */
    const char *alias;          /* an older spelling of key (renamed to key) */
} jc_key;

/* Rules between a class's keys, run once every key passed. */
typedef int (*jc_rules_fn)(const char *id, json_t *conf, char *err, size_t errlen);

typedef struct jc_class {
    const char *kind, *cls;
    const jc_key *keys; /* ends with {.key = NULL} */
    jc_rules_fn rules;  /* NULL: none */
} jc_class;

#define P2(n) ((double)((uint64_t)1 << (n)))
#define REQ_INT(k, lo, hi) {.key = k, .type = JC_INT, .flags = JC_REQUIRED, .min = lo, .max = hi}
#define OPT_INT(k, lo, hi, d) {.key = k, .type = JC_INT, .min = lo, .max = hi, .def = d}
/* A learning rate: > 0, and at most `hi`. Trainers step in float: any lr
 * a float holds (FLT_MAX; a larger one would be infinity, silently), so
 * that a too-large lr is a divergence the run reports, not a refusal. The
 * servers' bound is their own --lr's (1e6). */
#define LR(fl, d, hi)                                                                                          \
    {.key = "lr", .type = JC_NUM, .flags = JC_MIN_OPEN | JC_F32 | (fl), .min = 0, .max = hi, .def = d}
#define LR_TRAINER FLT_MAX
#define LR_SERVER 1e6
#define MOMENTUM(d) {.key = "momentum", .type = JC_NUM, .flags = JC_MAX_OPEN | JC_F32, .min = 0, .max = 1, .def = d}
#define ONE_OF(k, fl, list) {.key = k, .type = JC_STR, .flags = fl, .choices = list}

/* The seed's ddp_hook names ("rpc" is an old alias of rpc_hook) and what
 * each does (hookconf_lookup), in the same order. */
static const char *const hook_names[] = {"rpc_hook", "rpc", "allreduce_hook", "sparse_rpc_hook", "hybrid_hook", NULL};
static const struct {
    bool servers, collective;
} hook_kinds[] = {{true, false}, {true, false}, {false, true}, {true, true}, {false, true}};
_Static_assert(sizeof hook_kinds / sizeof hook_kinds[0] == sizeof hook_names / sizeof hook_names[0] - 1,
               "a kind for every hook name");
static const char *const allreduce_only[] = {"allreduce_hook", NULL};
/* --compress (issue 43): the gradients' type on the wire; "none" (fp32),
 * the default, first; powersgd: PyTorch's PowerSGD (its state's keys below). */
static const char *const compress_names[] = {"none", "fp16", "bf16", "powersgd", NULL};
/* PowerSGD's two hooks (powerSGD_hook.py): layer-wise, or the whole bucket
 * as one square matrix. */
static const char *const powersgd_hooks[] = {"powerSGD_hook", "batched_powerSGD_hook", NULL};
/* A PowerSGD state key: no default written (a configuration without
 * PowerSGD stays as it was); psgd_conf_of reads PyTorch's defaults. */
#define PSGD_INT(k, lo, hi) {.key = k, .type = JC_INT, .flags = JC_NODEF, .min = lo, .max = hi}
#define PSGD_NUM(k, lo, hi) {.key = k, .type = JC_NUM, .flags = JC_NODEF, .min = lo, .max = hi}
#define PSGD_BOOL(k) {.key = k, .type = JC_BOOL, .flags = JC_NODEF}
#define PSGD_HOOK_KEY {.key = "powersgd_hook", .type = JC_STR, .flags = JC_NODEF, .choices = powersgd_hooks}
/* --compress powersgd: PowerSGDState's parameters, PyTorch's names
 * (psgd_conf_of); the hook: powersgd_hook. DdpTrainer's and
 * HybridTrainer's (its dense part's bucket). */
#define PSGD_KEYS                                                                                                      \
    PSGD_INT("matrix_approximation_rank", 1, PSGD_MAX_RANK),                                                           \
    PSGD_INT("start_powerSGD_iter", 0, P2(53)),                                                                        \
    PSGD_NUM("min_compression_rate", 0, 1e9),                                                                          \
    PSGD_BOOL("use_error_feedback"),                                                                                   \
    PSGD_BOOL("warm_start"),                                                                                           \
    PSGD_NUM("orthogonalization_epsilon", 0, 1),                                                                       \
    PSGD_INT("random_seed", 0, UINT32_MAX),                                                                            \
    PSGD_INT("compression_stats_logging_frequency", 1, P2(53)),                                                        \
    PSGD_HOOK_KEY
/* HybridTrainer's rpc_pattern (trainer/hybrid.h): the seed's first, the default. */
static const char *const rpc_patterns[] = {"seed", "psbench", NULL};
/* The seed's DdpTrainer names the functions it is built from; psbench has
 * exactly these, so any other value is refused, not ignored. */
static const char *const hook_states[] = {"BasicHookState", NULL};
static const char *const iteration_steps[] = {"basic_iteration_step", NULL};
static const char *const preprocessors[] = {"preprocess_dummy_data", NULL};
static const char *const criteria[] = {"cel", NULL};
static const char *const ddp_models[] = {"basic_ddp_model", NULL};
static const char *const optimizers[] = {"sgd_optimizer", NULL};

/* Limits: the trainer's (trainer/data.c, trainer/model.c) and the
 * protocol's (docs/protocol.md: a table of at most 2^31 floats a server). */
static const jc_key dummy_data_keys[] = {
    REQ_INT("max_val", 1, P2(40)),
    {.key = "sample_count", .alias = "input_samples", .type = JC_INT, .flags = JC_REQUIRED, .min = 1,
     .max = UINT32_MAX},
    {.key = "sample_length", .alias = "input_dim", .type = JC_INT, .flags = JC_REQUIRED, .min = 1, .max = P2(24)},
    REQ_INT("sparsity_percentage", 0, 99),
    {.key = NULL},
};
static const jc_key dummy_model_keys[] = {
    REQ_INT("num_embeddings", 1, P2(31)),
    REQ_INT("embedding_dim", 1, P2(24)),
    REQ_INT("dense_input_size", 1, P2(24)),
    REQ_INT("dense_output_size", 1, P2(24)),
    REQ_INT("dense_layers_count", 1, 10000),
    {.key = "sparse", .type = JC_BOOL, .flags = JC_REQUIRED},
    {.key = NULL},
};
static const jc_key synthetic_keys[] = {
    {.key = "buckets", .type = JC_INT, .flags = JC_NODEF, .min = 1, .max = 65536},
    {.key = "bucket_floats", .type = JC_INT, .flags = JC_NODEF, .min = 1, .max = P2(32)},
    {.key = "bucket_sizes", .type = JC_LIST, .flags = JC_NODEF},
    {.key = "sparse", .type = JC_BOOL, .def = 0},
    OPT_INT("sparse_cols", 1, P2(20), 16),
    {.key = NULL},
};
static const jc_key linear_keys[] = {
    REQ_INT("in_features", 1, P2(24)),
    REQ_INT("out_features", 1, P2(24)),
    {.key = NULL},
};
static const jc_key hybrid_model_keys[] = {
    REQ_INT("num_embeddings", 1, P2(31)),
    REQ_INT("embedding_dim", 1, P2(20)),
    {.key = NULL},
};
static const jc_key ddp_trainer_keys[] = {
    ONE_OF("ddp_hook", JC_REQUIRED, hook_names),
    LR(JC_REQUIRED, 0, LR_TRAINER),
    MOMENTUM(0), /* PyTorch's SGD default */
    {.key = "bucket_cap_mb", .type = JC_NUM, .flags = JC_MIN_OPEN | JC_MIB, .min = 0, .max = 1048576,
     .def = 25}, /* DDP's */
    /* DDP's first bucket (its _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB) */
    {.key = "first_bucket_mb", .type = JC_NUM, .flags = JC_MIB, .min = 0, .max = 1048576, .def = 1},
    ONE_OF("compress", 0, compress_names), /* allreduce_hook's buckets as PyTorch's fp16/bf16_compress_hook */
    PSGD_KEYS,
    ONE_OF("hook_state", 0, hook_states),
    ONE_OF("iteration_step", 0, iteration_steps),
    ONE_OF("preprocess_data", 0, preprocessors),
    ONE_OF("create_criterion", 0, criteria),
    ONE_OF("create_ddp_model", 0, ddp_models),
    ONE_OF("create_optimizer", 0, optimizers),
    {.key = NULL},
};
static const jc_key bu_trainer_keys[] = {
    OPT_INT("batch_size", 1, P2(24), 20), /* the seed's parameter_server_test.py */
    OPT_INT("batches", 1, P2(30), 4),
    {.key = NULL},
};
static const jc_key hybrid_trainer_keys[] = {
    ONE_OF("ddp_hook", 0, allreduce_only), /* the dense part; the tables are on the servers */
    LR(0, 0.05, LR_TRAINER),               /* the seed's benchmark_ddp_rpc.py */
    OPT_INT("batches", 1, P2(20), 10),
    ONE_OF("rpc_pattern", 0, rpc_patterns),
    /* the dense bucket's allreduce_hook; absent: none (a configuration
     * without it stays as it was) */
    ONE_OF("compress", JC_NODEF, compress_names),
    PSGD_KEYS,
    {.key = NULL},
};
static const jc_key no_keys[] = {{.key = NULL}};
static const jc_key bu_server_keys[] = {
    LR(0, 0.001, LR_SERVER), /* the seed's SGD(lr=0.001, momentum=0.9) */
    MOMENTUM(0.9),
    OPT_INT("batch_update_size", 0, 4096, 0), /* 0: the trainer count; 4096: the master's node limit */
    {.key = NULL},
};
static const jc_key emb_server_keys[] = {
    LR(0, 0.05, LR_SERVER),
    {.key = NULL},
};

static int jc_rules_dummy_data(const char *id, json_t *conf, char *err, size_t errlen);
static int jc_rules_dummy_model(const char *id, json_t *conf, char *err, size_t errlen);
static int jc_rules_linear(const char *id, json_t *conf, char *err, size_t errlen);
static int jc_rules_hybrid_model(const char *id, json_t *conf, char *err, size_t errlen);
static int jc_rules_powersgd(const char *id, json_t *conf, char *err, size_t errlen);

static const jc_class jc_classes[] = {
    {"data", "DummyData", dummy_data_keys, jc_rules_dummy_data},
    {"model", "DummyModel", dummy_model_keys, jc_rules_dummy_model},
    {"model", "Synthetic", synthetic_keys, NULL}, /* its rules: modelconf_synthetic */
    {"model", "Linear", linear_keys, jc_rules_linear},
    {"model", "HybridModel", hybrid_model_keys, jc_rules_hybrid_model},
    {"trainer", "DdpTrainer", ddp_trainer_keys, jc_rules_powersgd},
    {"trainer", "BatchUpdateTrainer", bu_trainer_keys, NULL},
    {"trainer", "HybridTrainer", hybrid_trainer_keys, jc_rules_powersgd},
    {"server", "AverageParameterServer", no_keys, NULL},
    {"server", "AverageBatchParameterServer", no_keys, NULL},
    {"server", "BatchUpdateParameterServer", bu_server_keys, NULL},
    {"server", "EmbeddingParameterServer", emb_server_keys, NULL},
};
#define JC_NCLASSES (sizeof jc_classes / sizeof jc_classes[0])

/* ---- checking -------------------------------------------------------------- */

static const jc_class *jc_class_find(const char *kind, const char *cls)
{
    for (size_t i = 0; i < JC_NCLASSES; i++)
        if (strcmp(jc_classes[i].kind, kind) == 0 && cls && strcmp(jc_classes[i].cls, cls) == 0)
            return &jc_classes[i];
    return NULL;
}

/* Append to buf (never past len). */
static void jc_cat(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jc_cat(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

/* A bound as the file would write it: 1048576, 0.05, 1000000. */
static void jc_cat_num(char *buf, size_t len, double x)
{
    jc_cat(buf, len, "%.15g", x);
}

/* What the key must be: "a whole number in 1..65536", "a number in (0, 1]",
 * "true or false", "one of \"a\", \"b\"". */
static void jc_expect(const jc_key *k, char *buf, size_t len)
{
    buf[0] = '\0';
    switch (k->type) {
    case JC_INT:
        jc_cat(buf, len, "a whole number in ");
        jc_cat_num(buf, len, k->min);
        jc_cat(buf, len, "..");
        jc_cat_num(buf, len, k->max);
        break;
    case JC_NUM:
        jc_cat(buf, len, "a number in %c", k->flags & JC_MIN_OPEN ? '(' : '[');
        jc_cat_num(buf, len, k->min);
        jc_cat(buf, len, ", ");
        jc_cat_num(buf, len, k->max);
        jc_cat(buf, len, "%c", k->flags & JC_MAX_OPEN ? ')' : ']');
        break;
    case JC_BOOL: jc_cat(buf, len, "true or false"); break;
    case JC_LIST: jc_cat(buf, len, "a list"); break;
    case JC_STR:
        if (k->choices[1])
            jc_cat(buf, len, "one of ");
        for (size_t i = 0; k->choices[i]; i++)
            jc_cat(buf, len, "%s\"%s\"", i ? ", " : "", k->choices[i]);
        if (!k->choices[1])
            jc_cat(buf, len, " (the only one psbench has)");
        break;
    }
}

/* What the file has, as JSON (cut short by text_show, its length said),
 * and its type where that is what is wrong: "\"fast\" (a string)", "-1",
 * "2.5 (not a whole number)"; or `why` (jc_value_problem) where the type
 * is right and the value is not. */
static void jc_found(const jc_key *k, json_t *v, const char *why, char *buf, size_t len)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    text_shown shown;
    buf[0] = '\0';
    if (json_is_string(v)) /* the string itself, quoted: its length is its own */
        jc_cat(buf, len, "%s", text_show_n(json_string_value(v), json_string_length(v), '"', &shown));
    else
        jc_cat(buf, len, "%s", s ? text_show(s, 0, &shown) : "(a value)");
    free(s);
    const char *note = NULL;
    switch (json_typeof(v)) {
    case JSON_OBJECT: note = "an object"; break;
    case JSON_ARRAY: note = k->type == JC_LIST ? NULL : "a list"; break;
    case JSON_STRING: note = k->type == JC_STR ? NULL : "a string"; break;
    case JSON_TRUE:
    case JSON_FALSE: note = k->type == JC_BOOL ? NULL : "a boolean"; break;
    case JSON_REAL: note = k->type == JC_INT ? "not a whole number" : k->type == JC_NUM ? NULL : "a number"; break;
    case JSON_INTEGER: note = k->type == JC_INT || k->type == JC_NUM ? NULL : "a number"; break;
    case JSON_NULL: break;
    }
    if (why)
        note = why; /* the type is right, the value is not */
    if (note)
        jc_cat(buf, len, " (%s)", note);
}

/* Why v, of k's type and in its range, is still not the value it is used
 * as (JC_F32, JC_MIB), or NULL. */
static const char *jc_value_problem(const jc_key *k, json_t *v)
{
    if (k->type != JC_NUM || !json_is_number(v))
        return NULL;
    double x = json_number_value(v);
    if (k->flags & JC_F32)
        return cli_float_problem(x);
    if ((k->flags & JC_MIB) && x > 0 && x * 1048576.0 < 1)
        return "less than 1 byte, it would be 0";
    return NULL;
}

/* Whether v is a value of k: its type, its range, one of its choices. */
static bool jc_value_ok(const jc_key *k, json_t *v)
{
    switch (k->type) {
    case JC_INT: {
        if (!json_is_integer(v))
            return false;
        double x = (double)json_integer_value(v); /* rounding cannot cross a bound below 2^53 */
        return x >= k->min && x <= k->max;
    }
    case JC_NUM: {
        if (!json_is_number(v))
            return false;
        double x = json_number_value(v);
        bool lo = k->flags & JC_MIN_OPEN ? x > k->min : x >= k->min;
        bool hi = k->flags & JC_MAX_OPEN ? x < k->max : x <= k->max;
        return lo && hi && !jc_value_problem(k, v); /* false for NaN */
    }
    case JC_BOOL: return json_is_boolean(v);
    case JC_LIST: return json_is_array(v);
    case JC_STR:
        for (size_t i = 0; json_is_string(v) && k->choices[i]; i++)
            if (strcmp(json_string_value(v), k->choices[i]) == 0)
                return true;
        return false;
    }
    return false;
}

static json_t *jc_default(const jc_key *k)
{
    switch (k->type) {
    case JC_INT: return json_integer((json_int_t)k->def);
    case JC_NUM: return json_real(k->def);
    case JC_BOOL: return json_boolean(k->def != 0);
    case JC_STR: return json_string(k->choices[0]);
    case JC_LIST: break;
    }
    return NULL;
}

static const jc_key *jc_key_find(const jc_class *c, const char *name)
{
    for (const jc_key *k = c->keys; k->key; k++)
        if (strcmp(k->key, name) == 0 || (k->alias && strcmp(k->alias, name) == 0))
            return k;
    return NULL;
}

/* One key of conf: its value checked, its older spelling renamed, its
 * default written. */
static int jc_check_key(const char *kind, const char *id, const jc_key *k, json_t *conf, char *err, size_t errlen)
{
    json_t *v = json_object_get(conf, k->key);
    json_t *old = k->alias ? json_object_get(conf, k->alias) : NULL;
    if (v && old) {
        errbuf_set(err, errlen, "%s \"%s\": give \"%s\" or its older spelling \"%s\", not both", kind, id, k->key,
                   k->alias);
        return -1;
    }
    const char *name = old ? k->alias : k->key;
    if (old)
        v = old;
    char want[160], got[TEXT_SHOW_LEN + 96];
    if (!v) {
        if (k->flags & JC_REQUIRED) {
            jc_expect(k, want, sizeof want);
            errbuf_set(err, errlen, "%s \"%s\": \"%s\" must be %s, got nothing (the key is missing)", kind, id,
                       k->key, want);
            return -1;
        }
        if (k->flags & JC_NODEF)
            return 0;
        if (json_object_set_new(conf, k->key, jc_default(k)) < 0) {
            errbuf_set(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    if (!jc_value_ok(k, v)) {
        jc_expect(k, want, sizeof want);
        jc_found(k, v, jc_value_problem(k, v), got, sizeof got);
        errbuf_set(err, errlen, "%s \"%s\": \"%s\" must be %s, got %s", kind, id, name, want, got);
        return -1;
    }
    if (old && (json_object_set(conf, k->key, old) < 0 || json_object_del(conf, k->alias) < 0)) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int jobconf_check(const char *kind, const char *cls, const char *id, json_t *conf, char *err, size_t errlen)
{
    char list[512] = "";
    /* The id, the class and a key come from a file: every message below
     * shows them escaped and cut short (text_show). */
    text_shown id_shown, cls_shown, key_shown;
    id = text_show(id, 0, &id_shown);
    const jc_class *c = jc_class_find(kind, cls);
    if (!c) {
        for (size_t i = 0; i < JC_NCLASSES; i++)
            if (strcmp(jc_classes[i].kind, kind) == 0)
                jc_cat(list, sizeof list, "%s%s", list[0] ? ", " : "", jc_classes[i].cls);
        errbuf_set(err, errlen, "%s \"%s\": \"%s_class\" must be one of %s, got \"%s\"", kind, id, kind, list,
                   text_show(cls, 0, &cls_shown));
        return -1;
    }
    if (!json_is_object(conf)) {
        errbuf_set(err, errlen, "%s \"%s\": \"configurations\" must be an object", kind, id);
        return -1;
    }
    /* Unknown keys first: a misspelt key is the cause of the missing one. */
    const char *name;
    json_t *v;
    json_object_foreach(conf, name, v) {
        if (jc_key_find(c, name))
            continue;
        for (const jc_key *k = c->keys; k->key; k++)
            jc_cat(list, sizeof list, "%s%s", list[0] ? ", " : "", k->key);
        errbuf_set(err, errlen, "%s \"%s\": unknown key \"%s\" (%s takes %s)", kind, id, text_show(name, 0, &key_shown), cls,
                   list[0] ? list : "no keys");
        return -1;
    }
    for (const jc_key *k = c->keys; k->key; k++)
        if (jc_check_key(kind, id, k, conf, err, errlen) < 0)
            return -1;
    return c->rules ? c->rules(id, conf, err, errlen) : 0;
}

int jobconf_check_entry(const char *kind, json_t *entry, char *err, size_t errlen)
{
    const char *cls = json_string_value(json_object_get(entry, "class"));
    const char *id = json_string_value(json_object_get(entry, "id"));
    if (!json_is_object(entry) || !cls) {
        errbuf_set(err, errlen, "the %s has no class", kind);
        return -1;
    }
    json_t *conf = json_object_get(entry, "configurations");
    if (!conf && json_object_set_new(entry, "configurations", conf = json_object()) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    return jobconf_check(kind, cls, id ? id : cls, conf, err, errlen);
}

uint64_t jobconf_u64(json_t *conf, const char *key)
{
    json_t *v = json_object_get(conf, key);
    assert(json_is_integer(v) && json_integer_value(v) >= 0);
    return (uint64_t)json_integer_value(v);
}

double jobconf_f64(json_t *conf, const char *key)
{
    json_t *v = json_object_get(conf, key);
    assert(json_is_number(v));
    return json_number_value(v);
}

bool jobconf_flag(json_t *conf, const char *key)
{
    json_t *v = json_object_get(conf, key);
    assert(json_is_boolean(v));
    return json_is_true(v);
}

const char *jobconf_str(json_t *conf, const char *key)
{
    const char *s = json_string_value(json_object_get(conf, key));
    assert(s);
    return s;
}

bool jobconf_class_takes(const char *kind, const char *cls, const char *key)
{
    const jc_class *c = jc_class_find(kind, cls);
    return c && jc_key_find(c, key);
}

void jobconf_key_expect(const char *kind, const char *cls, const char *key, char *buf, size_t len)
{
    const jc_class *c = jc_class_find(kind, cls);
    const jc_key *k = c ? jc_key_find(c, key) : NULL;
    assert(k && len > 0);
    jc_expect(k, buf, len);
}

int jobconf_check_value(const char *kind, const char *cls, const char *key, json_t *v, char *err, size_t errlen)
{
    const jc_class *c = jc_class_find(kind, cls);
    const jc_key *k = c ? jc_key_find(c, key) : NULL;
    assert(k && v); /* the caller's own flag: a key of its class */
    if (jc_value_ok(k, v))
        return 0;
    char want[160], got[TEXT_SHOW_LEN + 96];
    jc_expect(k, want, sizeof want);
    jc_found(k, v, jc_value_problem(k, v), got, sizeof got);
    errbuf_set(err, errlen, "must be %s, got %s", want, got);
    return -1;
}

const char *jobconf_class_name(const char *kind, size_t i)
{
    for (size_t n = 0; n < JC_NCLASSES; n++)
        if (strcmp(jc_classes[n].kind, kind) == 0 && i-- == 0)
            return jc_classes[n].cls;
    return NULL;
}

const char *jobconf_key_name(const char *kind, const char *cls, size_t i)
{
    const jc_class *c = jc_class_find(kind, cls);
    for (const jc_key *k = c ? c->keys : NULL; k && k->key; k++)
        if (i-- == 0)
            return k->key;
    return NULL;
}

/* ---- rules between keys ------------------------------------------------------ */

/* PowerSGDState's own check: error feedback and warm start keep state per
 * bucket index, and DDP rebuilds its buckets after the first iteration
 * (psbench too: ddp_buckets.h), so PowerSGD may start only from the
 * third. Only where compress is powersgd: the keys are unused otherwise. */
static int jc_rules_powersgd(const char *id, json_t *conf, char *err, size_t errlen)
{
    json_t *cz = json_object_get(conf, "compress");
    if (!json_is_string(cz) || strcmp(json_string_value(cz), "powersgd") != 0)
        return 0;
    psgd_conf p;
    psgd_conf_of(conf, &p);
    if ((p.error_feedback || p.warm_start) && p.start_iter <= 1) {
        errbuf_set(err, errlen, "trainer \"%s\": \"start_powerSGD_iter\" must be > 1 with %s on, got %llu "
                   "(PyTorch's PowerSGDState: DDP rebuilds its buckets after the first iteration, and that state "
                   "is kept per bucket)", id, p.error_feedback ? "use_error_feedback" : "warm_start",
                   (unsigned long long)p.start_iter);
        return -1;
    }
    return 0;
}

/* trainer/data.c's limits: sample_count x sample_length values at most,
 * and some index values left after the sparsity. */
#define JC_DATA_MAX_ELEMS ((uint64_t)1 << 34)

static int jc_rules_dummy_data(const char *id, json_t *conf, char *err, size_t errlen)
{
    uint64_t n = jobconf_u64(conf, "sample_count"), len = jobconf_u64(conf, "sample_length");
    uint64_t max_val = jobconf_u64(conf, "max_val"), sp = jobconf_u64(conf, "sparsity_percentage");
    if (n * len > JC_DATA_MAX_ELEMS) { /* < 2^56: no overflow */
        errbuf_set(err, errlen, "data \"%s\": \"sample_count\" x \"sample_length\" (%llu x %llu) must be at most "
                   "%llu values", id, (unsigned long long)n, (unsigned long long)len,
                   (unsigned long long)JC_DATA_MAX_ELEMS);
        return -1;
    }
    if (max_val * (100 - sp) / 100 == 0) {
        errbuf_set(err, errlen, "data \"%s\": \"sparsity_percentage\" %llu of \"max_val\" %llu leaves no index value "
                   "to draw from", id, (unsigned long long)sp, (unsigned long long)max_val);
        return -1;
    }
    return 0;
}

/* trainer/model.c's: the embedding feeds the first layer, the layers chain,
 * and the parameters fit in 2^36 floats. */
#define JC_MODEL_MAX_FLOATS ((uint64_t)1 << 36)

static int jc_rules_dummy_model(const char *id, json_t *conf, char *err, size_t errlen)
{
    uint64_t rows = jobconf_u64(conf, "num_embeddings"), dim = jobconf_u64(conf, "embedding_dim");
    uint64_t in = jobconf_u64(conf, "dense_input_size"), out = jobconf_u64(conf, "dense_output_size");
    uint64_t layers = jobconf_u64(conf, "dense_layers_count");
    if (dim != in) {
        errbuf_set(err, errlen, "model \"%s\": \"embedding_dim\" (%llu) must equal \"dense_input_size\" (%llu): the "
                   "embedding feeds the first dense layer", id, (unsigned long long)dim, (unsigned long long)in);
        return -1;
    }
    if (layers > 1 && out != in) {
        errbuf_set(err, errlen, "model \"%s\": with %llu dense layers in sequence, \"dense_output_size\" (%llu) must "
                   "equal \"dense_input_size\" (%llu)", id, (unsigned long long)layers, (unsigned long long)out,
                   (unsigned long long)in);
        return -1;
    }
    uint64_t emb = rows * dim, layer = out * in + out; /* < 2^55 and < 2^49: no overflow */
    if (emb > JC_MODEL_MAX_FLOATS || (JC_MODEL_MAX_FLOATS - emb) / layer < layers) {
        errbuf_set(err, errlen, "model \"%s\": %llu x %llu embedding and %llu layers of %llu x %llu are more than "
                   "%llu parameters", id, (unsigned long long)rows, (unsigned long long)dim,
                   (unsigned long long)layers, (unsigned long long)out, (unsigned long long)in,
                   (unsigned long long)JC_MODEL_MAX_FLOATS);
        return -1;
    }
    return 0;
}

static int jc_rules_linear(const char *id, json_t *conf, char *err, size_t errlen)
{
    uint64_t in = jobconf_u64(conf, "in_features"), out = jobconf_u64(conf, "out_features");
    if (out * in + out > (1ull << 31)) {
        errbuf_set(err, errlen, "model \"%s\": Linear(%llu, %llu) is too large (at most 2^31 parameters)", id,
                   (unsigned long long)in, (unsigned long long)out);
        return -1;
    }
    return 0;
}

static int jc_rules_hybrid_model(const char *id, json_t *conf, char *err, size_t errlen)
{
    uint64_t rows = jobconf_u64(conf, "num_embeddings"), dim = jobconf_u64(conf, "embedding_dim");
    if (rows * dim > (1ull << 31)) {
        errbuf_set(err, errlen, "model \"%s\": a %llu x %llu table (\"num_embeddings\" x \"embedding_dim\") is too "
                   "large: at most 2^31 floats per server", id, (unsigned long long)rows, (unsigned long long)dim);
        return -1;
    }
    return 0;
}

/* ---- models ------------------------------------------------------------ */

/* The Synthetic model's "bucket_sizes": a non-empty list of whole numbers
 * of floats, one per dense bucket; "buckets", if given too, must count
 * them, and "bucket_floats" must not be given. */
static int modelconf_sizes(const char *id, json_t *conf, json_t *sizes, modelconf *m, char *err, size_t errlen)
{
    size_t n = json_array_size(sizes), bad = n;
    for (size_t k = 0; k < n && bad == n; k++) {
        json_t *v = json_array_get(sizes, k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > ((json_int_t)1 << 32))
            bad = k;
    }
    if (n == 0 || n > 65536 || bad < n) {
        char *s = json_dumps(sizes, JSON_COMPACT);
        char where[48] = "";
        if (bad < n)
            snprintf(where, sizeof where, " (entry %zu)", bad);
        errbuf_set(err, errlen, "model \"%s\": \"bucket_sizes\" must be a list of 1..65536 whole numbers in "
                   "1..4294967296 (floats a bucket), got %.48s%s%s", id, s ? s : "(a list)",
                   s && strlen(s) > 48 ? "..." : "", where);
        free(s);
        return -1;
    }
    if (m->syn.sparse) {
        errbuf_set(err, errlen, "model \"%s\": \"bucket_sizes\" is for dense buckets (drop it or \"sparse\")", id);
        return -1;
    }
    if (json_object_get(conf, "bucket_floats")) {
        errbuf_set(err, errlen, "model \"%s\": give \"bucket_sizes\" or \"bucket_floats\", not both", id);
        return -1;
    }
    json_t *count = json_object_get(conf, "buckets");
    if (count && json_integer_value(count) != (json_int_t)n) {
        errbuf_set(err, errlen, "model \"%s\": \"buckets\" says %lld but \"bucket_sizes\" lists %zu", id,
                   (long long)json_integer_value(count), n);
        return -1;
    }
    if (!(m->syn.sizes = malloc(n * sizeof *m->syn.sizes))) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    m->syn.bucket_floats = 0;
    for (size_t k = 0; k < n; k++) {
        m->syn.sizes[k] = (uint64_t)json_integer_value(json_array_get(sizes, k));
        if (m->syn.sizes[k] > m->syn.bucket_floats)
            m->syn.bucket_floats = m->syn.sizes[k];
    }
    m->syn.buckets = (uint32_t)n;
    return 0;
}

static int modelconf_synthetic(const char *id, json_t *conf, modelconf *m, char *err, size_t errlen)
{
    m->syn.sparse = jobconf_flag(conf, "sparse");
    m->syn.sparse_cols = (uint32_t)jobconf_u64(conf, "sparse_cols");
    json_t *sizes = json_object_get(conf, "bucket_sizes");
    if (sizes)
        return modelconf_sizes(id, conf, sizes, m, err, errlen);
    const char *missing = !json_object_get(conf, "buckets") ? "buckets"
                          : !json_object_get(conf, "bucket_floats") ? "bucket_floats" : NULL;
    if (missing) {
        errbuf_set(err, errlen, "model \"%s\": \"%s\" must be a whole number in 1..%s, got nothing (the key is "
                   "missing; a Synthetic model takes \"buckets\" and \"bucket_floats\", or \"bucket_sizes\")", id,
                   missing, strcmp(missing, "buckets") == 0 ? "65536" : "4294967296");
        return -1;
    }
    m->syn.buckets = (uint32_t)jobconf_u64(conf, "buckets");
    m->syn.bucket_floats = jobconf_u64(conf, "bucket_floats");
    return 0;
}

/* The values only: jobconf_check ran the rules (sizes that fit, layers
 * that chain), which model_new checks again where the model is built. */
static void modelconf_dummy(json_t *conf, modelconf *m)
{
    m->dummy.num_embeddings = jobconf_u64(conf, "num_embeddings");
    m->dummy.embedding_dim = jobconf_u64(conf, "embedding_dim");
    m->dummy.dense_input_size = jobconf_u64(conf, "dense_input_size");
    m->dummy.dense_output_size = jobconf_u64(conf, "dense_output_size");
    m->dummy.dense_layers_count = (uint32_t)jobconf_u64(conf, "dense_layers_count");
    m->dummy.sparse = jobconf_flag(conf, "sparse");
}

/* ---- PowerSGD ------------------------------------------------------------------ */

void psgd_conf_default(psgd_conf *p)
{
    *p = (psgd_conf){.rank = 1, .start_iter = 1000, .min_compression_rate = 2, .error_feedback = true,
                     .warm_start = true, .epsilon = 0, .random_seed = 0, .stats_every = 10000, .batched = false};
}

void psgd_conf_of(json_t *conf, psgd_conf *p)
{
    psgd_conf_default(p);
    json_t *v;
    if ((v = json_object_get(conf, "matrix_approximation_rank")))
        p->rank = (uint32_t)json_integer_value(v);
    if ((v = json_object_get(conf, "start_powerSGD_iter")))
        p->start_iter = (uint64_t)json_integer_value(v);
    if ((v = json_object_get(conf, "min_compression_rate")))
        p->min_compression_rate = json_number_value(v);
    if ((v = json_object_get(conf, "use_error_feedback")))
        p->error_feedback = json_is_true(v);
    if ((v = json_object_get(conf, "warm_start")))
        p->warm_start = json_is_true(v);
    if ((v = json_object_get(conf, "orthogonalization_epsilon")))
        p->epsilon = json_number_value(v);
    if ((v = json_object_get(conf, "random_seed")))
        p->random_seed = (uint64_t)json_integer_value(v);
    if ((v = json_object_get(conf, "compression_stats_logging_frequency")))
        p->stats_every = (uint64_t)json_integer_value(v);
    if ((v = json_object_get(conf, "powersgd_hook")))
        p->batched = strcmp(json_string_value(v), "batched_powerSGD_hook") == 0;
}

const char *psgd_hook_name(const psgd_conf *p) { return p->batched ? "batched_powerSGD_hook" : "powerSGD_hook"; }

json_t *psgd_conf_json(const psgd_conf *p)
{
    return json_pack("{s:I, s:I, s:f, s:b, s:b, s:f, s:I, s:I, s:b, s:s}", "matrix_approximation_rank",
                     (json_int_t)p->rank, "start_powerSGD_iter", (json_int_t)p->start_iter, "min_compression_rate",
                     p->min_compression_rate, "use_error_feedback", p->error_feedback, "warm_start", p->warm_start,
                     "orthogonalization_epsilon", p->epsilon, "random_seed", (json_int_t)p->random_seed,
                     "compression_stats_logging_frequency", (json_int_t)p->stats_every,
                     "batch_tensors_with_same_shape", 0, "hook", psgd_hook_name(p));
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
    if (jobconf_check("model", cls, id, conf, err, errlen) < 0)
        return -1;
    if (strcmp(cls, "DummyModel") == 0) {
        out->cls = MODEL_DUMMY;
        modelconf_dummy(conf, out);
    } else if (strcmp(cls, "Synthetic") == 0) {
        out->cls = MODEL_SYNTHETIC;
        if (modelconf_synthetic(id, conf, out, err, errlen) < 0) {
            modelconf_free(out);
            return -1;
        }
    } else if (strcmp(cls, "Linear") == 0) {
        out->cls = MODEL_LINEAR;
        out->linear.in_features = jobconf_u64(conf, "in_features");
        out->linear.out_features = jobconf_u64(conf, "out_features");
    } else {
        assert(strcmp(cls, "HybridModel") == 0); /* jobconf_check knows no other */
        out->cls = MODEL_HYBRID;
        out->hybrid.num_embeddings = jobconf_u64(conf, "num_embeddings");
        out->hybrid.embedding_dim = jobconf_u64(conf, "embedding_dim");
    }
    return 0;
}

int modelconf_from_entry(json_t *entry, modelconf *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *id = json_string_value(json_object_get(entry, "id"));
    const char *cls = json_string_value(json_object_get(entry, "class"));
    if (!json_is_object(entry) || !cls) {
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
    for (size_t i = 0; name && hook_names[i]; i++) {
        if (strcmp(name, hook_names[i]) == 0) {
            *needs_servers = hook_kinds[i].servers;
            *collective = hook_kinds[i].collective;
            return true;
        }
    }
    return false;
}
