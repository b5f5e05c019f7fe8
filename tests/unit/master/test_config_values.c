/* test_config_values.c — every key of every class of the four configuration
 * kinds (data, model, trainer, server), table-driven: a temporary file with
 * the key of the wrong type, below its range, above it and missing goes
 * through the master's checks (config_resolve: flags, files, fit), which
 * must refuse it with one line naming the file, the configuration id and
 * the key, or (missing, where a default is documented) write the default
 * into what the run records. Also: the shipped configs/ all load, a bad
 * file value is named before the placement it would upset, the rules
 * between keys, --ddp-hook, and the trainer's check of its assignment. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master/config.h"
#include "shared/jobconf.h"
#include "fixture.h"

#ifndef PSBENCH_SOURCE_CONFIG_DIR
#define PSBENCH_SOURCE_CONFIG_DIR "configs"
#endif

/* ---- helpers ------------------------------------------------------------ */


static void assert_not_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle)) {
        print_error("did not expect \"%s\" in \"%s\"\n", needle, hay);
        fail();
    }
}

static void write_json(const char *path, json_t *j)
{
    assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
}

/* parse (argv copies: getopt rewrites them) and config_resolve, as the
 * master's main does. Returns the first failing step's rc; c is left for
 * the caller to inspect and config_free. */
static int resolve(run_config *c, char *err, size_t errlen, const char *const *argv_in)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = strdup("psbench-master");
    for (size_t i = 0; argv_in[i]; i++) {
        assert_true(argc < 63);
        argv[argc++] = strdup(argv_in[i]);
    }
    argv[argc] = NULL;
    err[0] = '\0';
    int rc = config_parse_args(c, argc, argv, err, errlen);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    if (rc == 0)
        rc = config_resolve(c, err, errlen);
    if (rc != 0)
        assert_null(strchr(err, '\n')); /* one line */
    return rc;
}

/* A NULL-terminated argument list from several NULL-terminated parts. */
static void args_join(const char **out, size_t cap, ...)
{
    va_list ap;
    va_start(ap, cap);
    size_t n = 0;
    for (const char *const *part = va_arg(ap, const char *const *); part; part = va_arg(ap, const char *const *))
        for (size_t i = 0; part[i]; i++) {
            assert_true(n + 1 < cap);
            out[n++] = part[i];
        }
    va_end(ap);
    out[n] = NULL;
}

/* ---- the classes and their keys ------------------------------------------ */

/* A valid configurations object of each class and the flags that make a
 * job around it (the other kinds from configs/). */
typedef struct klass {
    const char *kind, *cls;
    const char *base;
    const char *flags[10];
} klass;

static const klass classes[] = {
    {"data", "DummyData", "{\"max_val\": 100, \"sample_count\": 100, \"sample_length\": 10, \"sparsity_percentage\": 20}",
     {NULL}},
    {"model", "DummyModel",
     "{\"num_embeddings\": 128, \"embedding_dim\": 64, \"dense_input_size\": 64, \"dense_output_size\": 128, "
     "\"dense_layers_count\": 1, \"sparse\": false}",
     {NULL}},
    {"model", "Synthetic", "{\"buckets\": 4, \"bucket_floats\": 1000, \"sparse\": false, \"sparse_cols\": 16}", {NULL}},
    {"model", "Linear", "{\"in_features\": 100, \"out_features\": 30}",
     {"--server", "BatchUpdateParameterServer", "--trainer", "BatchUpdateTrainer", NULL}},
    {"model", "HybridModel", "{\"num_embeddings\": 300, \"embedding_dim\": 64}",
     {"--server", "EmbeddingParameterServer", "--trainer", "HybridTrainer", "--nserver", "8", NULL}},
    {"trainer", "DdpTrainer",
     "{\"ddp_hook\": \"rpc_hook\", \"lr\": 50, \"momentum\": 0.5, \"bucket_cap_mb\": 10, \"first_bucket_mb\": 0, \"compress\": \"none\", \"hook_state\": "
     "\"BasicHookState\", \"iteration_step\": \"basic_iteration_step\", \"preprocess_data\": "
     "\"preprocess_dummy_data\", \"create_criterion\": \"cel\", \"create_ddp_model\": \"basic_ddp_model\", "
     "\"create_optimizer\": \"sgd_optimizer\"}",
     {"--model", "DummyModel", NULL}},
    {"trainer", "BatchUpdateTrainer", "{\"batch_size\": 10, \"batches\": 2}",
     {"--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear", NULL}},
    {"trainer", "HybridTrainer", "{\"ddp_hook\": \"allreduce_hook\", \"lr\": 0.5, \"batches\": 3}",
     {"--server", "EmbeddingParameterServer", "--model", "HybridModel", "--nserver", "8", NULL}},
    {"server", "AverageParameterServer", "{}", {NULL}},
    {"server", "AverageBatchParameterServer", "{}", {NULL}},
    {"server", "BatchUpdateParameterServer", "{\"lr\": 0.01, \"momentum\": 0.5, \"batch_update_size\": 2}",
     {"--model", "BatchUpdateLinear", "--trainer", "BatchUpdateTrainer", NULL}},
    {"server", "EmbeddingParameterServer", "{\"lr\": 0.5}",
     {"--model", "HybridModel", "--trainer", "HybridTrainer", "--nserver", "8", NULL}},
};
#define NCLASSES (sizeof classes / sizeof classes[0])

/* One key: a value of another type, one below its range, one above it
 * (for a string: not one of its values), all as the file's JSON would
 * print; and what missing means: refused (required), or the default that
 * is written (JSON), or nothing (a key that is an alternative to others). */
typedef struct vcase {
    const char *cls, *key;
    const char *wrong, *below, *above;
    bool required;
    const char *def;  /* not required: the default written, NULL: none written */
    const char *base; /* NULL: the class's */
} vcase;

#define REQ true
#define OPT false
/* PowerSGDState's keys, as every trainer class that has them takes them
 * (shared/jobconf.c's PSGD_KEYS). */
#define PSGD_CASES(cls)                                                                                                \
    {cls, "matrix_approximation_rank", "\"4\"", "0", "1025", OPT, NULL, NULL},                                         \
        {cls, "start_powerSGD_iter", "true", "-1", "18014398509481984", OPT, NULL, NULL},                              \
        {cls, "min_compression_rate", "\"2\"", "-1", "1e10", OPT, NULL, NULL},                                         \
        {cls, "use_error_feedback", "1", NULL, NULL, OPT, NULL, NULL},                                                 \
        {cls, "warm_start", "\"yes\"", NULL, NULL, OPT, NULL, NULL},                                                   \
        {cls, "orthogonalization_epsilon", "[]", "-1e-9", "2", OPT, NULL, NULL},                                       \
        {cls, "random_seed", "1.5", "-1", "4294967296", OPT, NULL, NULL},                                              \
        {cls, "compression_stats_logging_frequency", "\"10\"", "0", "18014398509481984", OPT, NULL, NULL},             \
        {cls, "powersgd_hook", "3", NULL, "\"ring_powerSGD_hook\"", OPT, NULL, NULL}
static const vcase cases[] = {
    {"DummyData", "max_val", "\"100\"", "0", "1099511627777", REQ, NULL, NULL},
    {"DummyData", "sample_count", "2.5", "0", "4294967296", REQ, NULL, NULL},
    {"DummyData", "sample_length", "[10]", "0", "16777217", REQ, NULL, NULL},
    {"DummyData", "sparsity_percentage", "true", "-1", "100", REQ, NULL, NULL},
    /* the seed's older spellings of sample_count and sample_length */
    {"DummyData", "input_samples", "\"many\"", "0", "4294967296", OPT, NULL,
     "{\"max_val\": 100, \"input_samples\": 100, \"sample_length\": 10, \"sparsity_percentage\": 20}"},
    {"DummyData", "input_dim", "null", "-5", "16777217", OPT, NULL,
     "{\"max_val\": 100, \"sample_count\": 100, \"input_dim\": 10, \"sparsity_percentage\": 20}"},

    {"DummyModel", "num_embeddings", "\"1024\"", "0", "2147483649", REQ, NULL, NULL},
    {"DummyModel", "embedding_dim", "{}", "-64", "16777217", REQ, NULL, NULL},
    {"DummyModel", "dense_input_size", "64.5", "0", "16777217", REQ, NULL, NULL},
    {"DummyModel", "dense_output_size", "false", "0", "16777217", REQ, NULL, NULL},
    {"DummyModel", "dense_layers_count", "\"8\"", "0", "10001", REQ, NULL, NULL},
    {"DummyModel", "sparse", "1", NULL, NULL, REQ, NULL, NULL},

    {"Synthetic", "buckets", "\"4\"", "0", "65537", REQ, NULL, NULL},
    {"Synthetic", "bucket_floats", "1.5", "0", "4294967297", REQ, NULL, NULL},
    {"Synthetic", "bucket_sizes", "5", "[]", "[4294967297]", OPT, NULL, "{\"bucket_sizes\": [10, 20]}"},
    {"Synthetic", "sparse", "\"yes\"", NULL, NULL, OPT, "false", NULL},
    {"Synthetic", "sparse_cols", "[]", "0", "1048577", OPT, "16", NULL},

    {"Linear", "in_features", "\"100\"", "0", "16777217", REQ, NULL, NULL},
    {"Linear", "out_features", "30.5", "-30", "16777217", REQ, NULL, NULL},

    {"HybridModel", "num_embeddings", "\"300\"", "0", "1000000000000", REQ, NULL, NULL},
    {"HybridModel", "embedding_dim", "true", "-64", "1048577", REQ, NULL, NULL},

    {"DdpTrainer", "ddp_hook", "7", NULL, "\"ring_hook\"", REQ, NULL, NULL},
    {"DdpTrainer", "lr", "\"fast\"", "0", "1e39", REQ, NULL, NULL},
    {"DdpTrainer", "momentum", "\"high\"", "-0.5", "1", OPT, "0.0", NULL},
    {"DdpTrainer", "bucket_cap_mb", "\"25\"", "-1", "1048577", OPT, "25.0", NULL},
    {"DdpTrainer", "first_bucket_mb", "\"1\"", "-0.5", "1048577", OPT, "1.0", NULL},
    {"DdpTrainer", "compress", "16", NULL, "\"fp8\"", OPT, "\"none\"", NULL},
    /* PowerSGDState's (--compress powersgd): no default written */
    PSGD_CASES("DdpTrainer"),
    {"DdpTrainer", "hook_state", "1", NULL, "\"FancyHookState\"", OPT, "\"BasicHookState\"", NULL},
    {"DdpTrainer", "iteration_step", "[]", NULL, "\"fancy_step\"", OPT, "\"basic_iteration_step\"", NULL},
    {"DdpTrainer", "preprocess_data", "null", NULL, "\"preprocess_real_data\"", OPT, "\"preprocess_dummy_data\"",
     NULL},
    {"DdpTrainer", "create_criterion", "0", NULL, "\"mse\"", OPT, "\"cel\"", NULL},
    {"DdpTrainer", "create_ddp_model", "{}", NULL, "\"fancy_ddp_model\"", OPT, "\"basic_ddp_model\"", NULL},
    {"DdpTrainer", "create_optimizer", "true", NULL, "\"adam_optimizer\"", OPT, "\"sgd_optimizer\"", NULL},

    {"BatchUpdateTrainer", "batch_size", "\"20\"", "0", "16777217", OPT, "20", NULL},
    {"BatchUpdateTrainer", "batches", "4.5", "0", "1073741825", OPT, "4", NULL},

    {"HybridTrainer", "ddp_hook", "1", NULL, "\"rpc_hook\"", OPT, "\"allreduce_hook\"", NULL},
    {"HybridTrainer", "lr", "\"0.05\"", "0", "1e308", OPT, "0.05", NULL},
    {"HybridTrainer", "batches", "[10]", "0", "1048577", OPT, "10", NULL},
    {"HybridTrainer", "rpc_pattern", "2", NULL, "\"pytorch\"", OPT, "\"seed\"", NULL},
    /* its dense part's compress: no default written */
    {"HybridTrainer", "compress", "16", NULL, "\"fp8\"", OPT, NULL, NULL},
    /* its dense part's PowerSGD: DdpTrainer's keys */
    PSGD_CASES("HybridTrainer"),

    {"BatchUpdateParameterServer", "lr", "\"fast\"", "-0.001", "1e7", OPT, "0.001", NULL},
    {"BatchUpdateParameterServer", "momentum", "null", "-1", "1.5", OPT, "0.9", NULL},
    {"BatchUpdateParameterServer", "batch_update_size", "\"2\"", "-1", "4097", OPT, "0", NULL},

    {"EmbeddingParameterServer", "lr", "\"slow\"", "0", "2000000", OPT, "0.05", NULL},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const klass *klass_of(const char *cls)
{
    for (size_t i = 0; i < NCLASSES; i++)
        if (strcmp(classes[i].cls, cls) == 0)
            return &classes[i];
    return NULL;
}

static config_entry *entry_of(run_config *c, const char *kind)
{
    return strcmp(kind, "data") == 0    ? &c->resolved.data
           : strcmp(kind, "model") == 0 ? &c->resolved.model
           : strcmp(kind, "trainer") == 0 ? &c->resolved.trainer
                                          : &c->resolved.server;
}

/* Write {"T": {"<kind>_class": cls, "configurations": conf}} to <kind>.json
 * and resolve a job that uses it. */
static int try_conf(const klass *k, json_t *conf, run_config *c, char *err, size_t errlen, const char **path_out)
{
    char fname[64], opt_id[32], opt_path[48], class_key[32];
    snprintf(fname, sizeof fname, "%s.json", k->kind);
    snprintf(opt_id, sizeof opt_id, "--%s", k->kind);
    snprintf(opt_path, sizeof opt_path, "--%s-config-path", k->kind);
    snprintf(class_key, sizeof class_key, "%s_class", k->kind);
    const char *path = tmp_path(fname);
    json_t *file = json_pack("{s:{s:s, s:O}}", "T", class_key, k->cls, "configurations", conf);
    assert_non_null(file);
    write_json(path, file);
    json_decref(file);
    if (path_out)
        *path_out = path;
    const char *own[] = {opt_id, "T", opt_path, path, NULL};
    const char *argv[32];
    args_join(argv, 32, own, k->flags, (const char *const *)NULL);
    return resolve(c, err, errlen, argv);
}

/* The case's configurations with key set to value (JSON), or removed. */
static json_t *conf_with(const vcase *v, const char *value)
{
    const klass *k = klass_of(v->cls);
    json_error_t je;
    json_t *conf = json_loads(v->base ? v->base : k->base, 0, &je);
    assert_non_null(conf);
    if (value) {
        json_t *x = json_loads(value, JSON_DECODE_ANY, &je);
        assert_non_null(x);
        assert_int_equal(json_object_set_new(conf, v->key, x), 0);
    } else {
        json_object_del(conf, v->key);
    }
    return conf;
}

/* A refused value: the file, the id, the key, "got" what the file has. */
static void expect_refused(const vcase *v, const char *value, const char *what)
{
    const klass *k = klass_of(v->cls);
    run_config c;
    char err[1024], want[256];
    const char *path;
    json_t *conf = conf_with(v, value);
    int rc = try_conf(k, conf, &c, err, sizeof err, &path);
    json_decref(conf);
    if (rc == 0) {
        print_error("%s %s \"%s\" %s (%s) was accepted\n", k->kind, v->cls, v->key, what, value ? value : "missing");
        fail();
    }
    snprintf(want, sizeof want, "%s: %s \"T\": ", path, k->kind);
    assert_contains(err, want);
    snprintf(want, sizeof want, "\"%s\"", v->key);
    assert_contains(err, want);
    if (value) {
        /* what the file has, as the file has it (never a cast of it) */
        json_error_t je;
        json_t *x = json_loads(value, JSON_DECODE_ANY, &je);
        char *s = json_dumps(x, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
        snprintf(want, sizeof want, "got %s", s);
        assert_contains(err, want);
        free(s);
        json_decref(x);
    } else {
        assert_contains(err, "got nothing");
    }
    assert_not_contains(err, "18446744073709551615");
    assert_not_contains(err, "divisible");
    assert_false(c.resolved.loaded);
    config_free(&c);
}

/* ---- fixtures ------------------------------------------------------------- */

/* ---- tests ---------------------------------------------------------------- */

/* The test's tables cover psbench's: every class of every kind, every key. */
static void test_tables_cover_every_key(void **state)
{
    (void)state;
    const char *kinds[] = {"data", "model", "trainer", "server"};
    size_t nclasses = 0;
    for (size_t k = 0; k < 4; k++) {
        const char *cls;
        for (size_t i = 0; (cls = jobconf_class_name(kinds[k], i)); i++, nclasses++) {
            const klass *kl = klass_of(cls);
            if (!kl || strcmp(kl->kind, kinds[k]) != 0) {
                print_error("class %s (%s) has no base here\n", cls, kinds[k]);
                fail();
            }
            const char *key;
            for (size_t n = 0; (key = jobconf_key_name(kinds[k], cls, n)); n++) {
                bool found = false;
                for (size_t v = 0; v < NCASES && !found; v++)
                    found = strcmp(cases[v].cls, cls) == 0 && strcmp(cases[v].key, key) == 0;
                if (!found) {
                    print_error("%s %s: key \"%s\" has no case\n", kinds[k], cls, key);
                    fail();
                }
            }
        }
    }
    assert_int_equal(nclasses, NCLASSES);
}

/* Every base is valid (so each refusal below is the case's doing). */
static void test_bases_load(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCLASSES; i++) {
        run_config c;
        char err[1024];
        json_t *conf = json_loads(classes[i].base, 0, NULL);
        assert_non_null(conf);
        if (try_conf(&classes[i], conf, &c, err, sizeof err, NULL) != 0) {
            print_error("%s %s: %s\n", classes[i].kind, classes[i].cls, err);
            fail();
        }
        json_decref(conf);
        config_free(&c);
    }
    for (size_t v = 0; v < NCASES; v++) {
        if (!cases[v].base)
            continue;
        run_config c;
        char err[1024];
        json_t *conf = json_loads(cases[v].base, 0, NULL);
        if (try_conf(klass_of(cases[v].cls), conf, &c, err, sizeof err, NULL) != 0) {
            print_error("%s: %s\n", cases[v].base, err);
            fail();
        }
        json_decref(conf);
        config_free(&c);
    }
}

/* (a) wrong type, (b) below the range, (c) above it, (d) missing. */
static void test_every_key(void **state)
{
    (void)state;
    for (size_t v = 0; v < NCASES; v++) {
        const vcase *vc = &cases[v];
        expect_refused(vc, vc->wrong, "of the wrong type");
        if (vc->below)
            expect_refused(vc, vc->below, "below its range");
        if (vc->above)
            expect_refused(vc, vc->above, "above its range");
        if (vc->required) {
            expect_refused(vc, NULL, "missing");
            continue;
        }
        if (vc->base)
            continue; /* an alternative spelling or form: missing is the other one */
        /* Missing with a default: the default is what runs and is recorded. */
        const klass *k = klass_of(vc->cls);
        run_config c;
        char err[1024];
        json_t *conf = conf_with(vc, NULL);
        if (try_conf(k, conf, &c, err, sizeof err, NULL) != 0) {
            print_error("%s %s without \"%s\": %s\n", k->kind, vc->cls, vc->key, err);
            fail();
        }
        json_decref(conf);
        json_t *got = json_object_get(entry_of(&c, k->kind)->conf, vc->key);
        if (!vc->def) { /* none written: the class's reader decides */
            if (got) {
                print_error("%s \"%s\": no default should be written, got one\n", vc->cls, vc->key);
                fail();
            }
            config_free(&c);
            continue;
        }
        json_t *want = json_loads(vc->def, JSON_DECODE_ANY, NULL);
        assert_non_null(want);
        if (!json_equal(got, want)) {
            char *g = got ? json_dumps(got, JSON_ENCODE_ANY) : NULL;
            print_error("%s \"%s\": default %s, got %s\n", vc->cls, vc->key, vc->def, g ? g : "nothing");
            free(g);
            fail();
        }
        json_decref(want);
        /* and results.json's configuration holds it */
        json_t *j = config_to_json(&c);
        json_t *rec = json_object_get(json_object_get(json_object_get(json_object_get(j, "resolved"), k->kind),
                                                      "configurations"),
                                      vc->key);
        assert_true(json_equal(rec, got));
        json_decref(j);
        config_free(&c);
    }
}

/* Each number is checked in the type it is used in (issue 39): an lr or
 * a momentum that is 0 (or a subnormal, 0 on a GPU) as the float the
 * trainers and servers step in, a bucket size below one byte, is refused,
 * though a double holds it and it is inside the range. */
static void test_values_in_their_type(void **state)
{
    (void)state;
    static const struct {
        const char *cls, *key, *value, *why;
    } bad[] = {
        {"DdpTrainer", "lr", "1e-46", "it is 0 as a float"},
        {"DdpTrainer", "lr", "1e-40", "it is 0 as a float"}, /* a subnormal float */
        {"DdpTrainer", "momentum", "1e-46", "it is 0 as a float"},
        {"DdpTrainer", "bucket_cap_mb", "1e-9", "less than 1 byte"},
        {"DdpTrainer", "first_bucket_mb", "1e-7", "less than 1 byte"},
        {"HybridTrainer", "lr", "1e-45", "it is 0 as a float"},
        {"BatchUpdateParameterServer", "lr", "1e-300", "it is 0 as a float"},
        {"BatchUpdateParameterServer", "momentum", "1e-39", "it is 0 as a float"},
        {"EmbeddingParameterServer", "lr", "2e-45", "it is 0 as a float"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const vcase *vc = NULL;
        for (size_t v = 0; v < NCASES && !vc; v++)
            if (strcmp(cases[v].cls, bad[i].cls) == 0 && strcmp(cases[v].key, bad[i].key) == 0)
                vc = &cases[v];
        assert_non_null(vc);
        expect_refused(vc, bad[i].value, "0 where it is used");
        const klass *k = klass_of(vc->cls);
        run_config c;
        char err[1024];
        json_t *conf = conf_with(vc, bad[i].value);
        assert_int_not_equal(try_conf(k, conf, &c, err, sizeof err, NULL), 0);
        json_decref(conf);
        assert_contains(err, bad[i].why);
        config_free(&c);
    }
    /* The smallest values that are what they say pass: the float's
     * smallest normal number, one byte. */
    static const struct {
        const char *cls, *key, *value;
    } good[] = {
        {"DdpTrainer", "lr", "1.2e-38"},
        {"DdpTrainer", "momentum", "0"},
        {"DdpTrainer", "bucket_cap_mb", "1e-6"},
        {"DdpTrainer", "first_bucket_mb", "0"},
        {"BatchUpdateParameterServer", "momentum", "0"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        const vcase *vc = NULL;
        for (size_t v = 0; v < NCASES && !vc; v++)
            if (strcmp(cases[v].cls, good[i].cls) == 0 && strcmp(cases[v].key, good[i].key) == 0)
                vc = &cases[v];
        assert_non_null(vc);
        run_config c;
        char err[1024];
        json_t *conf = conf_with(vc, good[i].value);
        if (try_conf(klass_of(vc->cls), conf, &c, err, sizeof err, NULL) != 0) {
            print_error("%s \"%s\" %s: %s\n", good[i].cls, good[i].key, good[i].value, err);
            fail();
        }
        json_decref(conf);
        config_free(&c);
    }
}

/* A number the file writes that a double cannot hold (1e-400: jansson
 * reads it as 0 without a word) is refused where the file is read, with
 * its line and column, in every configuration file. */
static void test_file_number_underflow(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{\"T\": {\"trainer_class\": \"DdpTrainer\",\n \"configurations\": {\"ddp_hook\": \"rpc_hook\", \"lr\": 0.1, "
        "\"momentum\": 1e-400}}}",
        "{\"T\": {\"trainer_class\": \"DdpTrainer\",\n \"configurations\": {\"ddp_hook\": \"rpc_hook\", \"lr\": 0.1, "
        "\"first_bucket_mb\": -2.5e-330}}}",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const char *path = tmp_path("under.json");
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(texts[i], f);
        fclose(f);
        const char *argv[] = {"--trainer", "T", "--trainer-config-path", path, "--model", "DummyModel", NULL};
        run_config c;
        char err[1024];
        assert_int_not_equal(resolve(&c, err, sizeof err, argv), 0);
        assert_contains(err, path);
        assert_contains(err, ":2:");
        assert_contains(err, "is too small for a number (it would be read as 0)");
        config_free(&c);
    }
    /* A string holding such a number is a string, not a number. */
    const char *path = tmp_path("str.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"T\": {\"trainer_class\": \"DdpTrainer\", \"configurations\": {\"ddp_hook\": \"rpc_hook\", "
          "\"lr\": 0.1, \"hook_state\": \"1e-400\\\" 1e-400\"}}}",
          f);
    fclose(f);
    const char *argv[] = {"--trainer", "T", "--trainer-config-path", path, "--model", "DummyModel", NULL};
    run_config c;
    char err[1024];
    assert_int_not_equal(resolve(&c, err, sizeof err, argv), 0);
    assert_contains(err, "\"hook_state\" must be");
    config_free(&c);
}

/* A key no class takes is refused, naming the ones it takes. */
static void test_unknown_keys(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCLASSES; i++) {
        run_config c;
        char err[1024], want[160];
        const char *path;
        json_t *conf = json_loads(classes[i].base, 0, NULL);
        json_object_set_new(conf, "learning_rate", json_real(0.1));
        assert_int_equal(try_conf(&classes[i], conf, &c, err, sizeof err, &path), -1);
        json_decref(conf);
        snprintf(want, sizeof want, "%s: %s \"T\": unknown key \"learning_rate\" (%s takes ", path, classes[i].kind,
                 classes[i].cls);
        assert_contains(err, want);
        const char *first = jobconf_key_name(classes[i].kind, classes[i].cls, 0);
        assert_contains(err, first ? first : "no keys");
        config_free(&c);
    }
}

/* An unknown class of each kind, refused naming the known ones. */
static void test_unknown_classes(void **state)
{
    (void)state;
    const struct {
        const char *kind, *known;
    } k[] = {
        {"data", "DummyData"},
        {"model", "DummyModel, Synthetic, Linear, HybridModel"},
        {"trainer", "DdpTrainer, BatchUpdateTrainer, HybridTrainer"},
        {"server", "AverageParameterServer, AverageBatchParameterServer, BatchUpdateParameterServer, "
                   "EmbeddingParameterServer"},
    };
    for (size_t i = 0; i < 4; i++) {
        klass fake = {k[i].kind, "Fancy", "{}", {NULL}};
        run_config c;
        char err[1024], want[300];
        const char *path;
        json_t *conf = json_object();
        assert_int_equal(try_conf(&fake, conf, &c, err, sizeof err, &path), -1);
        json_decref(conf);
        snprintf(want, sizeof want, "%s: %s \"T\": \"%s_class\" must be one of %s, got \"Fancy\"", path, k[i].kind,
                 k[i].kind, k[i].known);
        assert_contains(err, want);
        config_free(&c);
    }
}

/* Every entry of every shipped file loads, in a job of its class. */
static void test_shipped_configs_load(void **state)
{
    (void)state;
    const char *kinds[] = {"data", "model", "trainer", "server"};
    size_t loaded = 0;
    for (size_t k = 0; k < 4; k++) {
        char path[512], class_key[32], opt[32];
        snprintf(path, sizeof path, "%s/%s_configurations.json", PSBENCH_SOURCE_CONFIG_DIR, kinds[k]);
        snprintf(class_key, sizeof class_key, "%s_class", kinds[k]);
        snprintf(opt, sizeof opt, "--%s", kinds[k]);
        json_t *root = json_load_file(path, 0, NULL);
        assert_non_null(root);
        const char *id;
        json_t *ent;
        json_object_foreach(root, id, ent) {
            const klass *kl = klass_of(json_string_value(json_object_get(ent, class_key)));
            assert_non_null(kl);
            const char *own[] = {opt, id, NULL};
            const char *argv[32];
            args_join(argv, 32, own, kl->flags, (const char *const *)NULL);
            run_config c;
            char err[1024];
            if (resolve(&c, err, sizeof err, argv) != 0) {
                print_error("%s %s: %s\n", kinds[k], id, err);
                fail();
            }
            config_free(&c);
            loaded++;
        }
        json_decref(root);
    }
    assert_true(loaded >= 20);
}

/* The example: the seed's DDP + RPC benchmark with 2 trainers and
 * 8 servers (counts the seed placement would refuse, and which this
 * benchmark does not use) and a bad value in its files: the value's key
 * is what the error names. */
static void test_file_value_named_first(void **state)
{
    (void)state;
    const char *flags[] = {"--ntrainer", "2", "--nserver", "8", NULL};
    const struct {
        const char *cls, *key, *value, *want;
    } c[] = {
        {"HybridModel", "embedding_dim", "-64", "\"embedding_dim\" must be a whole number in 1..1048576, got -64"},
        {"HybridModel", "num_embeddings", "1000000000000",
         "\"num_embeddings\" must be a whole number in 1..2147483648, got 1000000000000"},
        {"EmbeddingParameterServer", "lr", "\"fast\"", "\"lr\" must be a number in (0, 1000000], got \"fast\""},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const klass *k = klass_of(c[i].cls);
        klass kf = *k;
        /* the class's flags without its --nserver 8, given here */
        const char *argv[32];
        size_t n = 0;
        for (size_t a = 0; kf.flags[a]; a++) {
            if (strcmp(kf.flags[a], "--nserver") == 0) {
                a++;
                continue;
            }
            argv[n++] = kf.flags[a];
        }
        for (size_t a = 0; flags[a]; a++)
            argv[n++] = flags[a];
        argv[n] = NULL;
        memcpy(kf.flags, argv, (n + 1) * sizeof argv[0]);
        vcase v = {c[i].cls, c[i].key, NULL, NULL, NULL, false, NULL, NULL};
        json_t *conf = conf_with(&v, c[i].value);
        run_config rc;
        char err[1024];
        assert_int_equal(try_conf(&kf, conf, &rc, err, sizeof err, NULL), -1);
        json_decref(conf);
        assert_contains(err, c[i].want);
        assert_not_contains(err, "divisible");
        config_free(&rc);
    }
    /* A flag's own bad value still comes first (no file is read for it). */
    run_config rc;
    char err[1024];
    const char *argv[] = {"--backend", "mpi", "--model-config-path", "/nonexistent/models.json", NULL};
    assert_int_equal(resolve(&rc, err, sizeof err, argv), -1);
    assert_contains(err, "--backend 'mpi'");
    config_free(&rc);
    /* And the placement is still checked once the files are fine. */
    const char *argv2[] = {"--ntrainer", "3", "--nserver", "2", NULL};
    assert_int_equal(resolve(&rc, err, sizeof err, argv2), -1);
    assert_contains(err, "--ntrainer 3 is not divisible by --nserver 2");
    config_free(&rc);
}

/* Rules between keys of a class, and between the data and the model. */
static void test_rules(void **state)
{
    (void)state;
    const struct {
        const char *cls, *conf, *want;
    } c[] = {
        {"DummyData", "{\"max_val\": 100, \"sample_count\": 4294967295, \"sample_length\": 16777216, "
                      "\"sparsity_percentage\": 0}", "\"sample_count\" x \"sample_length\" (4294967295 x 16777216)"},
        {"DummyData", "{\"max_val\": 1, \"sample_count\": 100, \"sample_length\": 10, \"sparsity_percentage\": 50}",
         "\"sparsity_percentage\" 50 of \"max_val\" 1 leaves no index value"},
        {"DummyData", "{\"max_val\": 100, \"sample_count\": 100, \"input_samples\": 100, \"sample_length\": 10, "
                      "\"sparsity_percentage\": 0}", "give \"sample_count\" or its older spelling \"input_samples\""},
        {"DummyModel", "{\"num_embeddings\": 128, \"embedding_dim\": 32, \"dense_input_size\": 64, "
                       "\"dense_output_size\": 128, \"dense_layers_count\": 1, \"sparse\": false}",
         "\"embedding_dim\" (32) must equal \"dense_input_size\" (64)"},
        {"DummyModel", "{\"num_embeddings\": 128, \"embedding_dim\": 64, \"dense_input_size\": 64, "
                       "\"dense_output_size\": 128, \"dense_layers_count\": 2, \"sparse\": false}",
         "with 2 dense layers in sequence, \"dense_output_size\" (128) must equal \"dense_input_size\" (64)"},
        {"DummyModel", "{\"num_embeddings\": 2147483648, \"embedding_dim\": 64, \"dense_input_size\": 64, "
                       "\"dense_output_size\": 64, \"dense_layers_count\": 1, \"sparse\": false}",
         "are more than 68719476736 parameters"},
        /* the data's max_val 100 against the model's rows and classes */
        {"DummyModel", "{\"num_embeddings\": 50, \"embedding_dim\": 64, \"dense_input_size\": 64, "
                       "\"dense_output_size\": 128, \"dense_layers_count\": 1, \"sparse\": false}",
         "data 'DummyData' has max_val 100, more than model 'T''s num_embeddings 50"},
        {"DummyModel", "{\"num_embeddings\": 128, \"embedding_dim\": 64, \"dense_input_size\": 64, "
                       "\"dense_output_size\": 10, \"dense_layers_count\": 1, \"sparse\": false}",
         "more than model 'T''s dense_output_size 10"},
        {"Linear", "{\"in_features\": 16777216, \"out_features\": 1024}", "Linear(16777216, 1024) is too large"},
        {"HybridModel", "{\"num_embeddings\": 2147483648, \"embedding_dim\": 2}", "a 2147483648 x 2 table"},
        {"Synthetic", "{\"bucket_sizes\": [4, 8], \"bucket_floats\": 8}", "not both"},
        {"Synthetic", "{\"buckets\": 4}", "\"bucket_floats\" must be a whole number in 1..4294967296, got nothing"},
        /* the Synthetic model pushes to the servers: no other hook */
        {"DdpTrainer", "{\"ddp_hook\": \"allreduce_hook\", \"lr\": 1}", NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        klass k = *klass_of(c[i].cls);
        const char *want = c[i].want;
        if (!want) {
            k.flags[0] = "--model";
            k.flags[1] = "Synthetic";
            k.flags[2] = NULL;
            want = "model 'Synthetic' (Synthetic) pushes its buckets to the servers, as rpc_hook does; trainer 'T' "
                   "has ddp_hook allreduce_hook";
        }
        run_config rc;
        char err[1024];
        json_t *conf = json_loads(c[i].conf, 0, NULL);
        assert_non_null(conf);
        if (try_conf(&k, conf, &rc, err, sizeof err, NULL) == 0) {
            print_error("%s %s accepted\n", c[i].cls, c[i].conf);
            fail();
        }
        json_decref(conf);
        assert_contains(err, want);
        config_free(&rc);
    }
    /* The older spelling is taken, and recorded under the current name. */
    run_config rc;
    char err[1024];
    json_t *conf = json_loads("{\"max_val\": 100, \"input_samples\": 60, \"input_dim\": 10, \"sparsity_percentage\": 0}",
                              0, NULL);
    assert_int_equal(try_conf(klass_of("DummyData"), conf, &rc, err, sizeof err, NULL), 0);
    json_decref(conf);
    assert_int_equal(rc.resolved.samples, 60);
    assert_int_equal(json_integer_value(json_object_get(rc.resolved.data.conf, "sample_count")), 60);
    assert_int_equal(json_integer_value(json_object_get(rc.resolved.data.conf, "sample_length")), 10);
    assert_null(json_object_get(rc.resolved.data.conf, "input_samples"));
    config_free(&rc);
}

/* --ddp-hook: a known name, and a class that runs it. */
static void test_ddp_hook_flag(void **state)
{
    (void)state;
    run_config c;
    char err[1024];
    const char *bad[] = {"--ddp-hook", "ring_hook", NULL};
    assert_int_equal(resolve(&c, err, sizeof err, bad), -1);
    assert_contains(err, "--ddp-hook: 'ring_hook' is not rpc_hook");
    config_free(&c);
    const char *hy[] = {"--model", "HybridModel", "--trainer", "HybridTrainer", "--server",
                        "EmbeddingParameterServer", "--nserver", "8", "--ddp-hook", "rpc_hook", NULL};
    assert_int_equal(resolve(&c, err, sizeof err, hy), -1);
    assert_contains(err, "--ddp-hook rpc_hook: trainer 'HybridTrainer' (HybridTrainer) averages");
    config_free(&c);
    const char *bu[] = {"--model", "BatchUpdateLinear", "--trainer", "BatchUpdateTrainer", "--server",
                        "BatchUpdateParameterServer", "--ddp-hook", "rpc_hook", NULL};
    assert_int_equal(resolve(&c, err, sizeof err, bu), -1);
    assert_contains(err, "--ddp-hook rpc_hook: trainer 'BatchUpdateTrainer' (BatchUpdateTrainer) has no communication "
                         "hook");
    config_free(&c);
    /* A DdpTrainer without a ddp_hook of its own runs the flag's. */
    klass k = *klass_of("DdpTrainer");
    k.flags[2] = "--ddp-hook";
    k.flags[3] = "allreduce_hook";
    k.flags[4] = NULL;
    json_t *conf = json_loads("{\"lr\": 1}", 0, NULL);
    assert_int_equal(try_conf(&k, conf, &c, err, sizeof err, NULL), 0);
    json_decref(conf);
    assert_string_equal(c.resolved.hook, "allreduce_hook");
    assert_string_equal(json_string_value(json_object_get(c.resolved.trainer.conf, "ddp_hook")), "allreduce_hook");
    config_free(&c);
    /* Without the flag it is required. */
    k.flags[2] = NULL;
    conf = json_loads("{\"lr\": 1}", 0, NULL);
    assert_int_equal(try_conf(&k, conf, &c, err, sizeof err, NULL), -1);
    json_decref(conf);
    assert_contains(err, "\"ddp_hook\" must be one of \"rpc_hook\", \"rpc\", \"allreduce_hook\", \"sparse_rpc_hook\", "
                         "\"hybrid_hook\", got nothing");
    config_free(&c);
}

/* The trainer checks its assignment's entries with the same table: what
 * the master refuses, it refuses; what the master writes, it reads. */
static void test_assignment_entries(void **state)
{
    (void)state;
    char err[512];
    json_t *e = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "DdpRpcTrainer", "class", "DdpTrainer", "configurations",
                          "ddp_hook", "rpc_hook", "lr", "fast");
    assert_int_equal(jobconf_check_entry("trainer", e, err, sizeof err), -1);
    assert_contains(err, "trainer \"DdpRpcTrainer\": \"lr\" must be a number in (0, 3.40282346638529e+38], got \"fast\" "
                         "(a string)");
    json_decref(e);
    e = json_pack("{s:s, s:s}", "id", "D", "class", "DummyData");
    assert_int_equal(jobconf_check_entry("data", e, err, sizeof err), -1);
    assert_contains(err, "data \"D\": \"max_val\" must be a whole number in 1..1099511627776, got nothing");
    json_decref(e);
    e = json_pack("{s:s, s:s, s:{s:f}}", "id", "H", "class", "HybridTrainer", "configurations", "lr", 0.5);
    assert_int_equal(jobconf_check_entry("trainer", e, err, sizeof err), 0);
    json_t *tc = json_object_get(e, "configurations");
    assert_int_equal(jobconf_u64(tc, "batches"), 10);
    assert_string_equal(jobconf_str(tc, "ddp_hook"), "allreduce_hook");
    assert_true(jobconf_f64(tc, "lr") == 0.5);
    json_decref(e);
    e = json_pack("{s:s, s:s}", "id", "X", "class", "FancyTrainer");
    assert_int_equal(jobconf_check_entry("trainer", e, err, sizeof err), -1);
    assert_contains(err, "\"trainer_class\" must be one of DdpTrainer, BatchUpdateTrainer, HybridTrainer");
    json_decref(e);
    /* A model entry is parsed (and checked) the same way. */
    modelconf mc;
    e = json_pack("{s:s, s:s, s:{s:i, s:i, s:i, s:i, s:b}}", "id", "M", "class", "DummyModel", "configurations",
                  "num_embeddings", 10, "embedding_dim", 4, "dense_input_size", 4, "dense_output_size", 10, "sparse",
                  0);
    assert_int_equal(modelconf_from_entry(e, &mc, err, sizeof err), -1);
    assert_contains(err, "model \"M\": \"dense_layers_count\" must be a whole number in 1..10000, got nothing");
    json_decref(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_cover_every_key),
        cmocka_unit_test(test_bases_load),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_unknown_classes),
        cmocka_unit_test(test_shipped_configs_load),
        cmocka_unit_test(test_file_value_named_first),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_ddp_hook_flag),
        cmocka_unit_test(test_assignment_entries),
        cmocka_unit_test(test_values_in_their_type),
        cmocka_unit_test(test_file_number_underflow),
    };
    return cmocka_run_group_tests(tests, config_setup, tmpdir_teardown);
}
