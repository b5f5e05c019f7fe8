/* test_config.c — unit tests for master/config: the master's flags (both
 * spellings, defaults, bad values), the seed launcher's checks, loading
 * configs/ (the real files, and broken ones written to a temp dir) and the
 * configuration object for results.json. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/config.h"
#include "fixture.h"

#ifndef PSBENCH_SOURCE_CONFIG_DIR
#define PSBENCH_SOURCE_CONFIG_DIR "configs"
#endif

/* ---- helpers ------------------------------------------------------------ */

/* getopt and cli_normalize_args rewrite argv: give them writable copies. */
typedef struct args {
    int argc;
    char *argv[64];
} args;

static void args_make(args *a, const char *first, va_list ap)
{
    a->argc = 0;
    a->argv[a->argc++] = strdup("psbench-master");
    for (const char *s = first; s; s = va_arg(ap, const char *))
        a->argv[a->argc++] = strdup(s);
    a->argv[a->argc] = NULL;
}

static void args_free(args *a)
{
    for (int i = 0; i < a->argc; i++)
        free(a->argv[i]);
    a->argc = 0;
}

/* Parse a NULL-terminated list of arguments into c. */
static int parse_args(run_config *c, char *err, size_t errlen, ...)
{
    va_list ap;
    va_start(ap, errlen);
    const char *first = va_arg(ap, const char *);
    args a;
    args_make(&a, first, ap);
    va_end(ap);
    err[0] = '\0';
    int rc = config_parse_args(c, a.argc, a.argv, err, errlen);
    args_free(&a);
    return rc;
}

static void assert_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    if (n < m || strcmp(s + n - m, suffix) != 0) {
        print_error("expected \"%s\" to end with \"%s\"\n", s, suffix);
        fail();
    }
}


/* ---- parsing -------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, NULL), 0);
    assert_int_equal(c.ntrainer, 2);
    assert_int_equal(c.ncudatrainer, 0);
    assert_int_equal(c.nserver, 1);
    assert_int_equal(c.ncudaserver, 0);
    assert_int_equal(c.epochs, 10);
    assert_int_equal(c.batch_size, 10);
    assert_string_equal(c.model, "DummyModel");
    assert_string_equal(c.server, "AverageParameterServer");
    assert_string_equal(c.data, "DummyData");
    assert_string_equal(c.trainer, "DdpRpcTrainer");
    assert_string_equal(c.backend, "gloo");
    assert_string_equal(c.placement, "seed");
    assert_string_equal(c.listen, "0.0.0.0:29500");
    assert_string_equal(c.http, "0.0.0.0:8080");
    assert_false(c.local);
    assert_null(c.out_dir);
    assert_null(c.token);
    assert_null(c.ddp_hook);
    assert_true(c.rpc_timeout_s > 0);
    assert_true(c.linger_s == 0);
    assert_int_equal(c.seed, 0);
    assert_string_equal(c.model_config_path, PSBENCH_SOURCE_CONFIG_DIR "/model_configurations.json");
    assert_string_equal(c.data_config_path, PSBENCH_SOURCE_CONFIG_DIR "/data_configurations.json");
    assert_string_equal(c.trainer_config_path, PSBENCH_SOURCE_CONFIG_DIR "/trainer_configurations.json");
    assert_string_equal(c.server_config_path, PSBENCH_SOURCE_CONFIG_DIR "/server_configurations.json");
    assert_int_equal(config_check_fit(&c, err, sizeof err), 0);
    config_free(&c);
    config_free(&c); /* safe twice */
}

static void test_config_dir_env(void **state)
{
    (void)state;
    run_config c;
    char err[256], buf[512];
    setenv("PSBENCH_CONFIG_DIR", "/some/where", 1);
    assert_string_equal(config_default_dir(buf, sizeof buf), "/some/where");
    assert_int_equal(parse_args(&c, err, sizeof err, NULL), 0);
    assert_string_equal(c.model_config_path, "/some/where/model_configurations.json");
    config_free(&c);
    /* Without the variable: <exe>/../configs or the source tree's. */
    unsetenv("PSBENCH_CONFIG_DIR");
    config_default_dir(buf, sizeof buf);
    assert_ends_with(buf, "configs");
    setenv("PSBENCH_CONFIG_DIR", PSBENCH_SOURCE_CONFIG_DIR, 1);
}

static void test_token_env(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    setenv("PSBENCH_TOKEN", "s3cret", 1);
    assert_int_equal(parse_args(&c, err, sizeof err, NULL), 0);
    assert_string_equal(c.token, "s3cret");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token", "other", NULL), 0);
    assert_string_equal(c.token, "other");
    config_free(&c);
    unsetenv("PSBENCH_TOKEN");
}

/* A --local job listens on loopback unless an address is given. */
static void test_local_loopback(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, "--local", NULL), 0);
    assert_string_equal(c.listen, "127.0.0.1:29500");
    assert_string_equal(c.http, "127.0.0.1:8080");
    assert_false(c.listen_set);
    assert_false(c.http_set);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--master-port", "0", "--local", NULL), 0);
    assert_string_equal(c.listen, "127.0.0.1:0");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--local", "--master-addr", "10.1.2.3", NULL), 0);
    assert_string_equal(c.listen, "10.1.2.3:29500");
    assert_string_equal(c.http, "127.0.0.1:8080");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--local", "--listen", "0.0.0.0:1", "--http", "0.0.0.0:2", NULL),
                     0);
    assert_string_equal(c.listen, "0.0.0.0:1");
    assert_string_equal(c.http, "0.0.0.0:2");
    assert_true(c.listen_set && c.http_set);
    config_free(&c);
    /* Without --local nodes come from other hosts: the wildcard stays. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--master-port", "0", NULL), 0);
    assert_string_equal(c.listen, "0.0.0.0:0");
    assert_string_equal(c.http, "0.0.0.0:8080");
    config_free(&c);
}

/* --token-file: the first line, trailing whitespace stripped; --token
 * wins over it, it wins over PSBENCH_TOKEN; an empty or missing file is a
 * one-line error naming it. */
static void test_token_file(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    char tok[256], empty[256];
    snprintf(tok, sizeof tok, "%s", tmp_path("token"));
    snprintf(empty, sizeof empty, "%s", tmp_path("token-empty"));
    FILE *f = fopen(tok, "w");
    assert_non_null(f);
    fputs("s3cr3t-file \t\r\nsecond line\n", f);
    fclose(f);
    chmod(tok, 0600);
    f = fopen(empty, "w");
    assert_non_null(f);
    fclose(f);

    setenv("PSBENCH_TOKEN", "from-env", 1);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token-file", tok, NULL), 0);
    assert_string_equal(c.token, "s3cr3t-file");
    assert_false(c.token_file_loose);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token", "flag", "--token-file", tok, NULL), 0);
    assert_string_equal(c.token, "flag");
    config_free(&c);
    unsetenv("PSBENCH_TOKEN");
    chmod(tok, 0644);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token-file", tok, NULL), 0);
    assert_true(c.token_file_loose);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token-file", empty, NULL), -1);
    assert_contains(err, empty);
    assert_contains(err, "empty");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--token-file", "/nonexistent/psbench-token", NULL), -1);
    assert_contains(err, "/nonexistent/psbench-token");
    config_free(&c);
    unlink(tok);
    unlink(empty);
}

static void test_both_spellings(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, "--batch_size", "7", NULL), 0);
    assert_int_equal(c.batch_size, 7);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--batch-size", "7", NULL), 0);
    assert_int_equal(c.batch_size, 7);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--batch_size=8", "--rpc_timeout=2.5", "--data_config_path",
                           "/x/d.json", "--model-config-path=/x/m.json", "--trainer_config_path", "/x/t.json",
                           "--server_config_path=/x/s.json", NULL),
                     0);
    assert_int_equal(c.batch_size, 8);
    assert_true(c.rpc_timeout_s == 2.5);
    assert_string_equal(c.data_config_path, "/x/d.json");
    assert_string_equal(c.model_config_path, "/x/m.json");
    assert_string_equal(c.trainer_config_path, "/x/t.json");
    assert_string_equal(c.server_config_path, "/x/s.json");
    config_free(&c);
}

static void test_all_flags(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, "--ntrainer", "4", "--ncudatrainer", "2", "--nserver", "2",
                           "--ncudaserver", "1", "--trainer", "DdpTrainer", "--server",
                           "AverageBatchParameterServer", "--data", "DummyData2", "--model", "DummyModelSparse",
                           "--epochs", "3", "--backend", "nccl", "--seed", "42", "--placement", "shard",
                           "--listen", "127.0.0.1:0", "--http", "127.0.0.1:9090", "--local", "--linger", "1.5",
                           "--out", "/tmp/out", "--log-level", "debug", "--ddp_hook", "sparse_rpc_hook",
                           "--filestore", "/tmp/fs", NULL),
                     0);
    assert_int_equal(c.ntrainer, 4);
    assert_int_equal(c.ncudatrainer, 2);
    assert_int_equal(c.nserver, 2);
    assert_int_equal(c.ncudaserver, 1);
    assert_string_equal(c.trainer, "DdpTrainer");
    assert_string_equal(c.server, "AverageBatchParameterServer");
    assert_string_equal(c.data, "DummyData2");
    assert_string_equal(c.model, "DummyModelSparse");
    assert_int_equal(c.epochs, 3);
    assert_string_equal(c.backend, "nccl");
    assert_int_equal(c.seed, 42);
    assert_string_equal(c.placement, "shard");
    assert_string_equal(c.listen, "127.0.0.1:0");
    assert_string_equal(c.http, "127.0.0.1:9090");
    assert_true(c.local);
    assert_true(c.linger_s == 1.5);
    assert_string_equal(c.out_dir, "/tmp/out");
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_string_equal(c.ddp_hook, "sparse_rpc_hook");
    config_free(&c);

    /* --linger 0 is allowed (exit when done). */
    assert_int_equal(parse_args(&c, err, sizeof err, "--linger", "0", NULL), 0);
    assert_true(c.linger_s == 0);
    assert_int_equal(c.runs, 1); /* one run unless --runs */
    config_free(&c);

    /* --runs N (0: until stopped), in the args echo and results.json. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--runs", "3", NULL), 0);
    assert_int_equal(c.runs, 3);
    json_t *j = config_to_json(&c);
    assert_int_equal(json_integer_value(json_object_get(j, "runs")), 3);
    assert_true(json_is_false(json_object_get(j, "allow_divergence")));
    json_decref(j);
    config_free(&c);
    /* --allow-divergence, in the args echo and results.json. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--allow-divergence", NULL), 0);
    assert_true(c.allow_divergence);
    j = config_to_json(&c);
    assert_true(json_is_true(json_object_get(j, "allow_divergence")));
    json_decref(j);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--runs", "0", NULL), 0);
    assert_int_equal(c.runs, 0);
    config_free(&c);
}

static void test_seed_compat_flags(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, "--master_addr=localhost", "--master_port=29501",
                           "--torch_seed", "7", NULL),
                     0);
    assert_string_equal(c.listen, "localhost:29501");
    assert_int_equal(c.seed, 7);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--master-port", "70000", NULL), -1);
    assert_contains(err, "--master-port");
    config_free(&c);
}

static void test_bad_numbers(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    struct {
        const char *opt, *val, *named;
    } cases[] = {
        {"--ntrainer", "abc", "--ntrainer"},   {"--ntrainer", "-1", "--ntrainer"},
        {"--nserver", "2x", "--nserver"},      {"--ncudatrainer", "", "--ncudatrainer"},
        {"--ncudaserver", "99999", "--ncudaserver"},
        {"--batch_size", "0", "--batch-size"}, {"--batch-size", "ten", "--batch-size"},
        {"--epochs", "0", "--epochs"},         {"--epochs", "1.5", "--epochs"},
        {"--rpc-timeout", "0", "--rpc-timeout"}, {"--rpc_timeout", "soon", "--rpc-timeout"},
        {"--seed", "-5", "--seed"},            {"--linger", "-1", "--linger"},
        {"--runs", "-1", "--runs"},            {"--runs", "two", "--runs"},
        {"--placement", "random", "--placement"}, {"--log-level", "loud", "--log-level"},
        {"--model", "", "--model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse_args(&c, err, sizeof err, cases[i].opt, cases[i].val, NULL);
        if (rc != -1) {
            print_error("%s %s: rc %d\n", cases[i].opt, cases[i].val, rc);
            fail();
        }
        assert_contains(err, cases[i].named);
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
}

static void test_bad_usage(void **state)
{
    (void)state;
    run_config c;
    char err[256];
    assert_int_equal(parse_args(&c, err, sizeof err, "--bogus", NULL), -1);
    assert_contains(err, "unknown option '--bogus'");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--epochs", NULL), -1);
    assert_contains(err, "--epochs");
    assert_contains(err, "needs a value");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "stray", NULL), -1);
    assert_contains(err, "unexpected argument 'stray'");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--local=yes", NULL), -1);
    assert_contains(err, "takes no value");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--help", NULL), 1);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "-h", NULL), 1);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--version", NULL), 2);
    config_free(&c);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_usage(f);
    fclose(f);
    assert_contains(buf, "--batch-size");
    assert_contains(buf, "--ncudatrainer");
    assert_contains(buf, "--server-config-path");
    assert_contains(buf, "diff");
    free(buf);
}

/* The seed launcher's flags that set a trainer configuration key (issue
 * 26): --preprocess-data, --create-criterion, --create-ddp-model,
 * --hook-state, --iteration-step, and its scripts' --create-optimizer and
 * --lr. Each, in both spellings, reaches the trainers' configuration (what
 * the assignment and results.json carry) and the echo; a value psbench
 * does not have is refused, naming the allowed ones. */
static const struct {
    const char *dash, *underscore, *key, *good, *bad, *allowed;
} seed_trainer_flags[] = {
    {"--preprocess-data", "--preprocess_data", "preprocess_data", "preprocess_dummy_data", "preprocess_real_data",
     "\"preprocess_dummy_data\""},
    {"--create-criterion", "--create_criterion", "create_criterion", "cel", "mse", "\"cel\""},
    {"--create-ddp-model", "--create_ddp_model", "create_ddp_model", "basic_ddp_model", "fancy_ddp_model",
     "\"basic_ddp_model\""},
    {"--hook-state", "--hook_state", "hook_state", "BasicHookState", "FancyHookState", "\"BasicHookState\""},
    {"--iteration-step", "--iteration_step", "iteration_step", "basic_iteration_step", "fancy_step",
     "\"basic_iteration_step\""},
    {"--create-optimizer", "--create_optimizer", "create_optimizer", "sgd_optimizer", "adam_optimizer",
     "\"sgd_optimizer\""},
    {"--lr", "--lr", "lr", "0.25", "0", "a number in (0, 3.40282346638529e+38]"},
};

/* The value the flag gives, as the configuration holds it. */
static void assert_flag_value(json_t *v, const char *key, const char *good)
{
    if (strcmp(key, "lr") == 0) {
        assert_true(json_is_number(v));
        assert_true(json_number_value(v) == 0.25);
    } else {
        assert_string_equal(json_string_value(v), good);
    }
}

static void test_seed_trainer_flags(void **state)
{
    (void)state;
    char err[512];
    const size_t n = sizeof seed_trainer_flags / sizeof seed_trainer_flags[0];
    /* Not given: the trainer configuration's values, and null in the echo. */
    run_config c;
    assert_int_equal(parse_args(&c, err, sizeof err, NULL), 0);
    json_t *j = config_to_json(&c);
    for (size_t i = 0; i < n; i++)
        assert_true(json_is_null(json_object_get(j, seed_trainer_flags[i].key)));
    json_decref(j);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_true(json_number_value(json_object_get(c.resolved.trainer.conf, "lr")) == 50.0);
    config_free(&c);

    for (size_t i = 0; i < n; i++) {
        for (int sp = 0; sp < 3; sp++) {
            const char *name = seed_trainer_flags[i].key, *good = seed_trainer_flags[i].good;
            const char *flag = sp == 1 ? seed_trainer_flags[i].underscore : seed_trainer_flags[i].dash;
            char eq[128];
            snprintf(eq, sizeof eq, "%s=%s", seed_trainer_flags[i].underscore, good);
            int rc = sp == 2 ? parse_args(&c, err, sizeof err, "--trainer", "DdpTrainer", eq, NULL)
                             : parse_args(&c, err, sizeof err, "--trainer", "DdpTrainer", flag, good, NULL);
            if (rc != 0)
                print_error("%s %s: %s\n", flag, good, err);
            assert_int_equal(rc, 0);
            j = config_to_json(&c);
            assert_flag_value(json_object_get(j, name), name, good);
            json_decref(j);
            assert_int_equal(config_load(&c, err, sizeof err), 0);
            /* What the trainers are assigned, and results.json records. */
            assert_flag_value(json_object_get(c.resolved.trainer.conf, name), name, good);
            j = config_to_json(&c);
            json_t *tc = json_object_get(json_object_get(json_object_get(json_object_get(j, "resolved"), "trainer"),
                                                         "configurations"),
                                         name);
            assert_flag_value(tc, name, good);
            json_decref(j);
            config_free(&c);
        }
        /* A bad value: refused at once with the flag's name and what is allowed. */
        for (int sp = 0; sp < 2; sp++) {
            const char *flag = sp ? seed_trainer_flags[i].underscore : seed_trainer_flags[i].dash;
            assert_int_equal(parse_args(&c, err, sizeof err, flag, seed_trainer_flags[i].bad, NULL), -1);
            char want[160];
            snprintf(want, sizeof want, "%s: must be %s", seed_trainer_flags[i].dash, seed_trainer_flags[i].allowed);
            assert_contains(err, want);
            assert_contains(err, seed_trainer_flags[i].bad);
            assert_null(strchr(err, '\n'));
            config_free(&c);
        }
    }
    /* --lr: a number in the trainer configuration's range, text refused as such. */
    const char *bad_lr[] = {"fast", "", "nan", "inf", "1e999", "-1", "1e39", "0.5x"};
    for (size_t i = 0; i < sizeof bad_lr / sizeof bad_lr[0]; i++) {
        assert_int_equal(parse_args(&c, err, sizeof err, "--lr", bad_lr[i], NULL), -1);
        assert_contains(err, "--lr: must be a number in (0, 3.40282346638529e+38], got ");
        config_free(&c);
    }
    /* The flag wins over the file's value, as --ddp-hook does. */
    write_file("trainers.json", "{\"T\": {\"trainer_class\": \"DdpTrainer\", \"configurations\": {\"ddp_hook\": "
                                "\"rpc_hook\", \"lr\": 3, \"hook_state\": \"Fancy\"}}}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--trainer", "T", "--trainer-config-path", tmp_path("trainers.json"),
                           "--lr", "0.25", "--hook_state", "BasicHookState", NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_true(json_number_value(json_object_get(c.resolved.trainer.conf, "lr")) == 0.25);
    assert_string_equal(json_string_value(json_object_get(c.resolved.trainer.conf, "hook_state")), "BasicHookState");
    config_free(&c);
    /* Without the flag the file's bad value is refused, naming the file. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--trainer", "T", "--trainer-config-path", tmp_path("trainers.json"),
                           NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "\"hook_state\" must be \"BasicHookState\" (the only one psbench has), got \"Fancy\"");
    config_free(&c);
    unlink(tmp_path("trainers.json"));
    /* HybridTrainer takes lr (its own range), not the DdpTrainer's parts. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--number-ps", "2", "--lr", "0.25", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_true(json_number_value(json_object_get(c.resolved.trainer.conf, "lr")) == 0.25);
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--number-ps", "2", "--hook-state", "BasicHookState", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "--hook-state BasicHookState: trainer 'HybridTrainer' (HybridTrainer) has no \"hook_state\" "
                         "(it takes ddp_hook, lr, batches, rpc_pattern, compress, matrix_approximation_rank, "
                         "start_powerSGD_iter, min_compression_rate, use_error_feedback, warm_start, "
                         "orthogonalization_epsilon, random_seed, compression_stats_logging_frequency, powersgd_hook)");
    config_free(&c);
    /* A BatchUpdateTrainer has no lr: its servers step. */
    assert_int_equal(parse_args(&c, err, sizeof err, "--server", "BatchUpdateParameterServer", "--model",
                           "BatchUpdateLinear", "--trainer", "BatchUpdateTrainer", "--lr", "0.25", NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "--lr 0.25: trainer 'BatchUpdateTrainer' (BatchUpdateTrainer) has no \"lr\"");
    config_free(&c);

    /* --help names every one and where psbench's defaults differ. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_usage(f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        assert_contains(buf, seed_trainer_flags[i].dash);
    assert_contains(buf, "Where psbench's defaults differ from PyTorch's launcher");
    assert_contains(buf, "allreduce_hook");
    free(buf);
}

/* Every flag of the seed's launcher (launcher.py), and its experiment
 * scripts' --create_optimizer and --lr, in both spellings: each is
 * accepted and the two spellings resolve to the same configuration, every
 * value in it the flag's (the echo: config_to_json). */
static void test_seed_launcher_flags_both_spellings(void **state)
{
    (void)state;
    static const char *const flags[][2] = {
        {"--master-addr", "127.0.0.2"}, {"--master-port", "29511"}, {"--trainer", "DdpTrainer"},
        {"--ntrainer", "4"}, {"--ncudatrainer", "0"}, {"--filestore", "/tmp/psbench-fs"},
        {"--server", "AverageBatchParameterServer"}, {"--nserver", "2"}, {"--ncudaserver", "0"},
        {"--rpc-timeout", "12"}, {"--backend", "gloo"}, {"--epochs", "3"}, {"--batch-size", "5"},
        {"--data", "DummyData2"}, {"--model", "DummyModelSparse"}, {"--data-config-path", "/x/d.json"},
        {"--model-config-path", "/x/m.json"}, {"--server-config-path", "/x/s.json"},
        {"--trainer-config-path", "/x/t.json"}, {"--torch-seed", "11"}, {"--cuda-seed", "11"},
        {"--preprocess-data", "preprocess_dummy_data"}, {"--create-criterion", "cel"},
        {"--create-ddp-model", "basic_ddp_model"}, {"--hook-state", "BasicHookState"},
        {"--ddp-hook", "hybrid_hook"}, {"--iteration-step", "basic_iteration_step"},
        {"--create-optimizer", "sgd_optimizer"}, {"--lr", "0.125"},
    };
    const size_t n = sizeof flags / sizeof flags[0];
    json_t *conf[2];
    for (int sp = 0; sp < 2; sp++) {
        args a;
        a.argc = 0;
        a.argv[a.argc++] = strdup("psbench-master");
        for (size_t i = 0; i < n; i++) {
            char *f = strdup(flags[i][0]);
            for (char *p = f + 2; sp && *p; p++)
                if (*p == '-')
                    *p = '_';
            a.argv[a.argc++] = f;
            a.argv[a.argc++] = strdup(flags[i][1]);
        }
        a.argv[a.argc] = NULL;
        run_config c;
        char err[256] = "";
        int rc = config_parse_args(&c, a.argc, a.argv, err, sizeof err);
        args_free(&a);
        if (rc != 0)
            print_error("%s spelling: %s\n", sp ? "underscore" : "dash", err);
        assert_int_equal(rc, 0);
        conf[sp] = config_to_json(&c);
        assert_non_null(conf[sp]);
        config_free(&c);
    }
    assert_true(json_equal(conf[0], conf[1]));
    json_t *j = conf[0];
    assert_string_equal(json_string_value(json_object_get(j, "listen")), "127.0.0.2:29511");
    assert_string_equal(json_string_value(json_object_get(j, "trainer")), "DdpTrainer");
    assert_int_equal(json_integer_value(json_object_get(j, "ntrainer")), 4);
    assert_string_equal(json_string_value(json_object_get(j, "server")), "AverageBatchParameterServer");
    assert_int_equal(json_integer_value(json_object_get(j, "nserver")), 2);
    assert_true(json_real_value(json_object_get(j, "rpc_timeout")) == 12.0);
    assert_int_equal(json_integer_value(json_object_get(j, "epochs")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "batch_size")), 5);
    assert_string_equal(json_string_value(json_object_get(j, "data")), "DummyData2");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "DummyModelSparse");
    assert_string_equal(json_string_value(json_object_get(j, "data_config_path")), "/x/d.json");
    assert_string_equal(json_string_value(json_object_get(j, "model_config_path")), "/x/m.json");
    assert_string_equal(json_string_value(json_object_get(j, "server_config_path")), "/x/s.json");
    assert_string_equal(json_string_value(json_object_get(j, "trainer_config_path")), "/x/t.json");
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), 11);
    assert_string_equal(json_string_value(json_object_get(j, "ddp_hook")), "hybrid_hook");
    assert_string_equal(json_string_value(json_object_get(j, "preprocess_data")), "preprocess_dummy_data");
    assert_string_equal(json_string_value(json_object_get(j, "create_criterion")), "cel");
    assert_string_equal(json_string_value(json_object_get(j, "create_ddp_model")), "basic_ddp_model");
    assert_string_equal(json_string_value(json_object_get(j, "hook_state")), "BasicHookState");
    assert_string_equal(json_string_value(json_object_get(j, "iteration_step")), "basic_iteration_step");
    assert_string_equal(json_string_value(json_object_get(j, "create_optimizer")), "sgd_optimizer");
    assert_true(json_real_value(json_object_get(j, "lr")) == 0.125);
    json_decref(conf[0]);
    json_decref(conf[1]);
}

/* ---- validation ------------------------------------------------------------ */

static int parse_validate(char *err, size_t errlen, ...)
{
    va_list ap;
    va_start(ap, errlen);
    const char *first = va_arg(ap, const char *);
    args a;
    args_make(&a, first, ap);
    va_end(ap);
    run_config c;
    int rc = config_parse_args(&c, a.argc, a.argv, err, errlen);
    args_free(&a);
    if (rc == 0)
        rc = config_check_fit(&c, err, errlen);
    config_free(&c);
    return rc;
}

static void test_validate(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(parse_validate(err, sizeof err, "--ntrainer", "3", "--nserver", "2", NULL), -1);
    assert_contains(err, "--ntrainer 3 is not divisible by --nserver 2");
    /* The shard placement has no such constraint. */
    assert_int_equal(
        parse_validate(err, sizeof err, "--ntrainer", "3", "--nserver", "2", "--placement", "shard", NULL), 0);
    assert_int_equal(parse_validate(err, sizeof err, "--ntrainer", "0", NULL), -1);
    assert_contains(err, "no trainers");
    assert_int_equal(parse_validate(err, sizeof err, "--nserver", "0", NULL), -1);
    assert_contains(err, "no servers");
    assert_int_equal(parse_validate(err, sizeof err, "--ntrainer", "4", "--nserver", "2", NULL), 0);
    /* CPU and CUDA trainers need both kinds of servers (the seed's check). */
    assert_int_equal(parse_validate(err, sizeof err, "--ncudatrainer", "2", NULL), -1);
    assert_contains(err, "CUDA servers");
    assert_int_equal(
        parse_validate(err, sizeof err, "--ncudatrainer", "3", "--ncudaserver", "2", NULL), -1);
    assert_contains(err, "--ncudatrainer 3 is not divisible by --ncudaserver 2");
    assert_int_equal(parse_validate(err, sizeof err, "--ntrainer", "0", "--nserver", "0", "--ncudatrainer", "2",
                                    "--ncudaserver", "1", "--backend", "nccl", NULL),
                     0);
    assert_int_equal(parse_validate(err, sizeof err, "--ntrainer", "0", "--ncudatrainer", "2", "--ncudaserver",
                                    "1", NULL),
                     -1);
    assert_contains(err, "--nserver 1 needs CPU trainers");
    assert_int_equal(parse_validate(err, sizeof err, "--backend", "mpi", NULL), -1);
    assert_contains(err, "--backend 'mpi'");
    assert_int_equal(parse_validate(err, sizeof err, "--listen", "nohost", NULL), -1);
    assert_contains(err, "--listen 'nohost' is not HOST:PORT");
    assert_int_equal(parse_validate(err, sizeof err, "--http", "h:99999", NULL), -1);
    assert_contains(err, "--http");

    /* Fields set directly (not through the parser) are checked too. */
    run_config c;
    assert_int_equal(config_init(&c), 0);
    c.batch_size = 0;
    assert_int_equal(config_check_fit(&c, err, sizeof err), -1);
    assert_contains(err, "--batch-size");
    c.batch_size = 1;
    c.epochs = 0;
    assert_int_equal(config_check_fit(&c, err, sizeof err), -1);
    assert_contains(err, "--epochs");
    config_free(&c);
}

/* ---- configs/ ---------------------------------------------------------------- */

static void test_load_real_configs(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", NULL), 0);
    if (config_load(&c, err, sizeof err) != 0) {
        print_error("%s\n", err);
        fail();
    }
    assert_true(c.resolved.loaded);
    assert_string_equal(c.resolved.server_kind, "average");
    assert_string_equal(c.resolved.model.id, "Synthetic");
    assert_string_equal(c.resolved.model.cls, "Synthetic");
    assert_true(c.resolved.synthetic);
    assert_int_equal(c.resolved.syn.buckets, 4);
    assert_int_equal(c.resolved.syn.bucket_floats, 262144);
    assert_false(c.resolved.syn.sparse);
    assert_string_equal(c.resolved.data.cls, "DummyData");
    assert_int_equal(c.resolved.samples, 100);
    assert_string_equal(c.resolved.trainer.cls, "DdpTrainer");
    assert_string_equal(json_string_value(json_object_get(c.resolved.trainer.conf, "ddp_hook")), "rpc_hook");
    /* 100 samples / batch 10 = 10 batches over 2 trainers = 5 a trainer, x 10 epochs. */
    assert_int_equal(config_batches_per_pass(&c), 50);
    json_t *m = config_model_json(&c);
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "class")), "Synthetic");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "configurations"), "buckets")), 4);
    /* Loading again releases the previous resolution (ASan checks). */
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    config_free(&c);

    assert_int_equal(parse_args(&c, err, sizeof err, "--server", "AverageBatchParameterServer", "--model",
                           "DummyModelSparse", "--data", "DummyData2", "--ddp-hook", "hybrid_hook", "--ntrainer",
                           "3", "--batch-size", "7", "--epochs", "2", NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_string_equal(c.resolved.server_kind, "average-batch");
    assert_string_equal(c.resolved.model.cls, "DummyModel");
    assert_false(c.resolved.synthetic);
    assert_true(json_is_true(json_object_get(c.resolved.model.conf, "sparse")));
    assert_int_equal(json_integer_value(json_object_get(c.resolved.data.conf, "sparsity_percentage")), 80);
    assert_string_equal(json_string_value(json_object_get(c.resolved.trainer.conf, "ddp_hook")), "hybrid_hook");
    /* ceil(100 / 7) = 15 batches over 3 trainers = 5 each, x 2 epochs. */
    assert_int_equal(config_batches_per_pass(&c), 10);
    config_free(&c);

    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "SyntheticSparse", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_true(c.resolved.synthetic);
    assert_true(c.resolved.syn.sparse);
    assert_int_equal(c.resolved.syn.sparse_cols, 16);
    config_free(&c);
}

/* The Synthetic model's bucket_sizes: one dense bucket per entry. */
static void load_sizes(const char *conf, int want_rc, const char *want_err)
{
    run_config c;
    char err[512] = "";
    char text[512];
    snprintf(text, sizeof text, "{\"Replay\": {\"model_class\": \"Synthetic\", \"configurations\": %s}}\n", conf);
    write_file("sizes.json", text);
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Replay", "--model-config-path", tmp_path("sizes.json"),
                           NULL),
                     0);
    int rc = config_load(&c, err, sizeof err);
    if (rc != want_rc)
        print_error("%s: %s\n", conf, err);
    assert_int_equal(rc, want_rc);
    if (want_err)
        assert_contains(err, want_err);
    if (rc == 0) {
        assert_true(c.resolved.synthetic);
        assert_int_equal(c.resolved.syn.buckets, 3);
        assert_int_equal(c.resolved.syn.bucket_floats, 1049600); /* the largest */
    }
    config_free(&c);
}

static void test_synthetic_bucket_sizes(void **state)
{
    (void)state;
    load_sizes("{\"bucket_sizes\": [1024, 1049600, 7]}", 0, NULL);
    load_sizes("{\"bucket_sizes\": [1024, 1049600, 7], \"buckets\": 3}", 0, NULL);
    load_sizes("{\"bucket_sizes\": [1024, 1049600, 7], \"buckets\": 2}", -1, "\"bucket_sizes\" lists 3");
    load_sizes("{\"bucket_sizes\": [1024, 7], \"bucket_floats\": 7}", -1, "not both");
    load_sizes("{\"bucket_sizes\": []}", -1, "\"bucket_sizes\" must be a list of 1..65536 whole numbers in "
                                              "1..4294967296 (floats a bucket), got []");
    load_sizes("{\"bucket_sizes\": 5}", -1, "\"bucket_sizes\" must be a list, got 5 (a number)");
    load_sizes("{\"bucket_sizes\": [4, 0]}", -1, "got [4,0] (entry 1)");
    load_sizes("{\"bucket_sizes\": [4, \"x\"]}", -1, "got [4,\"x\"] (entry 1)");
    load_sizes("{\"bucket_sizes\": [4, 8], \"sparse\": true}", -1, "is for dense buckets");
}

static void test_load_missing_id(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Foo", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "model 'Foo' not in ");
    assert_contains(err, "model_configurations.json");
    assert_contains(err, "(have: DummyModel, DummyModelSparse, Synthetic, SyntheticSparse, BatchUpdateLinear");
    assert_false(c.resolved.loaded);
    config_free(&c);

    assert_int_equal(parse_args(&c, err, sizeof err, "--server", "NoSuchServer", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "server 'NoSuchServer' not in ");
    assert_contains(err, "AverageParameterServer");
    config_free(&c);

    assert_int_equal(parse_args(&c, err, sizeof err, "--data", "Nope", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "data 'Nope' not in ");
    config_free(&c);

    assert_int_equal(parse_args(&c, err, sizeof err, "--trainer", "Nope", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "trainer 'Nope' not in ");
    config_free(&c);
}

static void test_load_missing_file(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    assert_int_equal(parse_args(&c, err, sizeof err, "--model-config-path", tmp_path("nope.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "cannot read model configurations");
    assert_contains(err, tmp_path("nope.json"));
    assert_contains(err, "No such file");
    config_free(&c);
}

static void test_load_malformed(void **state)
{
    (void)state;
    run_config c;
    char err[512], want[300];

    write_file("bad.json", "{\n  \"Synthetic\": {\n    \"model_class\": \"Synthetic\",,\n  }\n}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("bad.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    snprintf(want, sizeof want, "model configurations %s:3:", tmp_path("bad.json"));
    assert_contains(err, want);
    config_free(&c);

    write_file("empty.json", "");
    assert_int_equal(parse_args(&c, err, sizeof err, "--data-config-path", tmp_path("empty.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "data configurations");
    assert_contains(err, tmp_path("empty.json"));
    config_free(&c);

    write_file("array.json", "[1, 2]\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--server-config-path", tmp_path("array.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "expected an object");
    config_free(&c);

    write_file("dup.json", "{\"Synthetic\": {}, \"Synthetic\": {}}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("dup.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "duplicate");
    config_free(&c);

    /* An entry without its class, and one with a class psbench lacks. */
    write_file("model.json", "{\"Synthetic\": {\"configurations\": {\"buckets\": 1}}}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("model.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "model 'Synthetic'");
    assert_contains(err, "\"model_class\"");
    config_free(&c);

    write_file("server.json", "{\"AverageParameterServer\": {\"ps_class\": \"RemoteParameterServer\", "
                              "\"configurations\": {}},"
                              " \"Old\": {\"ps_class\": \"AverageBatchParameterServer\"}}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--server-config-path", tmp_path("server.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "server \"AverageParameterServer\": \"server_class\" must be one of AverageParameterServer, "
                         "AverageBatchParameterServer, BatchUpdateParameterServer, EmbeddingParameterServer, got "
                         "\"RemoteParameterServer\"");
    config_free(&c);
    /* The seed's older "ps_class" key is accepted. */
    assert_int_equal(
        parse_args(&c, err, sizeof err, "--server-config-path", tmp_path("server.json"), "--server", "Old", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_string_equal(c.resolved.server_kind, "average-batch");
    config_free(&c);

    /* Synthetic parameters are checked. */
    write_file("syn.json", "{\"Synthetic\": {\"model_class\": \"Synthetic\", \"configurations\": "
                           "{\"buckets\": 0, \"bucket_floats\": 10}},"
                           " \"NoFloats\": {\"model_class\": \"Synthetic\", \"configurations\": {\"buckets\": 2}},"
                           " \"BadConf\": {\"model_class\": \"Synthetic\", \"configurations\": [1]}}\n");
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("syn.json"), NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "model \"Synthetic\": \"buckets\" must be a whole number in 1..65536, got 0");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("syn.json"), "--model",
                           "NoFloats", NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "model \"NoFloats\": \"bucket_floats\" must be a whole number in 1..4294967296, got nothing");
    config_free(&c);
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "Synthetic", "--model-config-path", tmp_path("syn.json"), "--model",
                           "BadConf", NULL),
                     0);
    assert_int_equal(config_load(&c, err, sizeof err), -1);
    assert_contains(err, "\"configurations\" must be an object");
    config_free(&c);
}

static void test_load_data_too_small(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    /* 100 samples in batches of 100: one batch cannot feed two trainers
     * (a fit of flags and file: config_check_fit's). */
    assert_int_equal(parse_args(&c, err, sizeof err, "--batch-size", "100", NULL), 0);
    assert_int_equal(config_load(&c, err, sizeof err), 0);
    assert_int_equal(config_check_fit(&c, err, sizeof err), -1);
    assert_contains(err, "data 'DummyData' has 100 samples");
    assert_contains(err, "2 trainers");
    config_free(&c);
}

static void test_to_json(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    assert_int_equal(parse_args(&c, err, sizeof err, "--model", "DummyModel", "--server",
                           "AverageBatchParameterServer", "--batch_size", "5", "--token", "hidden", "--out",
                           "/tmp/r", NULL),
                     0);
    json_t *j = config_to_json(&c);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "DummyModel");
    assert_string_equal(json_string_value(json_object_get(j, "server")), "AverageBatchParameterServer");
    assert_string_equal(json_string_value(json_object_get(j, "data")), "DummyData");
    assert_string_equal(json_string_value(json_object_get(j, "trainer")), "DdpRpcTrainer");
    assert_int_equal(json_integer_value(json_object_get(j, "batch_size")), 5);
    assert_int_equal(json_integer_value(json_object_get(j, "ntrainer")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "epochs")), 10);
    assert_string_equal(json_string_value(json_object_get(j, "placement")), "seed");
    assert_string_equal(json_string_value(json_object_get(j, "out")), "/tmp/r");
    assert_true(json_is_true(json_object_get(j, "auth")));
    assert_null(json_object_get(j, "resolved"));
    char *text = json_dumps(j, 0);
    assert_null(strstr(text, "hidden")); /* the token never leaves */
    free(text);
    json_decref(j);

    assert_int_equal(config_load(&c, err, sizeof err), 0);
    j = config_to_json(&c);
    json_t *r = json_object_get(j, "resolved");
    assert_non_null(r);
    assert_string_equal(json_string_value(json_object_get(r, "server_kind")), "average-batch");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "model"), "class")), "DummyModel");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "server"), "kind")),
                        "average-batch");
    assert_int_equal(json_integer_value(json_object_get(r, "batches_per_pass")), 100);
    json_decref(j);
    config_free(&c);
}

/* parse + load + validate; returns the first failing step's rc. */
static int bu_load(run_config *c, char *err, size_t errlen, ...)
{
    va_list ap;
    va_start(ap, errlen);
    const char *first = va_arg(ap, const char *);
    args a;
    args_make(&a, first, ap);
    va_end(ap);
    err[0] = '\0';
    int rc = config_parse_args(c, a.argc, a.argv, err, errlen);
    args_free(&a);
    if (rc == 0)
        rc = config_load(c, err, errlen);
    if (rc == 0)
        rc = config_check_fit(c, err, errlen);
    return rc;
}

#define BU_FLAGS "--server", "BatchUpdateParameterServer", "--model", "BatchUpdateLinear", "--trainer", \
                 "BatchUpdateTrainer"

/* The batch-update benchmark: classes that go together, the seed's
 * defaults, batch size and batches per pass, counts that fill rounds. */
static void test_batch_update(void **state)
{
    (void)state;
    run_config c;
    char err[512];
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, NULL), 0);
    assert_true(c.resolved.batch_update);
    assert_string_equal(c.resolved.server_kind, "batch-update");
    assert_int_equal(c.resolved.bu.in_features, 100);
    assert_int_equal(c.resolved.bu.out_features, 30);
    assert_true(c.resolved.bu.lr == 0.001);
    assert_true(c.resolved.bu.momentum == 0.9);
    assert_int_equal(c.resolved.bu.batch_update_size, 2); /* 0: the trainer count */
    assert_int_equal(c.batch_size, 20);                   /* the trainer configuration's */
    assert_int_equal(config_batches_per_pass(&c), 4 * 10); /* batches x epochs */
    json_t *j = config_batch_update_json(&c);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "batch_update_size")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "in_features")), 100);
    assert_null(json_object_get(j, "part"));
    json_decref(j);
    j = config_to_json(&c);
    assert_int_equal(json_integer_value(json_object_get(j, "batch_size")), 20);
    assert_non_null(json_object_get(json_object_get(j, "resolved"), "batch_update"));
    json_decref(j);
    config_free(&c);

    /* --batch-size wins; every trainer feeds every server, so 3 trainers
     * and 2 servers are fine with the seed placement. */
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--batch-size", "7", "--epochs", "1", "--ntrainer", "3",
                             "--nserver", "2", NULL),
                     0);
    assert_int_equal(c.batch_size, 7);
    assert_int_equal(config_batches_per_pass(&c), 4);
    assert_int_equal(c.resolved.bu.batch_update_size, 3);
    config_free(&c);

    /* Classes that do not go together. */
    assert_int_equal(bu_load(&c, err, sizeof err, "--server", "BatchUpdateParameterServer", NULL), -1);
    assert_contains(err, "needs a model of class Linear");
    config_free(&c);
    assert_int_equal(bu_load(&c, err, sizeof err, "--server", "BatchUpdateParameterServer", "--model",
                             "BatchUpdateLinear", NULL),
                     -1);
    assert_contains(err, "needs a trainer of class BatchUpdateTrainer");
    config_free(&c);
    assert_int_equal(bu_load(&c, err, sizeof err, "--model", "BatchUpdateLinear", NULL), -1);
    assert_contains(err, "trains only through a BatchUpdateParameterServer");
    config_free(&c);
    assert_int_equal(bu_load(&c, err, sizeof err, "--trainer", "BatchUpdateTrainer", NULL), -1);
    assert_contains(err, "trains only through a BatchUpdateParameterServer");
    config_free(&c);

    /* No server owns the model. */
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--nserver", "0", NULL), -1);
    assert_contains(err, "--nserver 0");
    config_free(&c);

    /* Rounds that never fill: 3 trainers x 4 batches x 1 epoch = 12 pushes,
     * not a multiple of 5 (and 5 > 3 trainers); of 8. */
    write_file("bu_server.json", "{\"BU5\": {\"server_class\": \"BatchUpdateParameterServer\", "
                                 "\"configurations\": {\"batch_update_size\": 5}},"
                                 " \"BU2\": {\"server_class\": \"BatchUpdateParameterServer\", "
                                 "\"configurations\": {\"batch_update_size\": 2, \"lr\": 0.5}},"
                                 " \"Bad\": {\"server_class\": \"BatchUpdateParameterServer\", "
                                 "\"configurations\": {\"lr\": -1}}}\n");
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--server", "BU5", "--server-config-path",
                             tmp_path("bu_server.json"), "--ntrainer", "3", "--nserver", "1", "--epochs", "1", NULL),
                     -1);
    assert_contains(err, "batch_update_size 5 is more than the 3 trainers");
    config_free(&c);
    write_file("bu_trainer.json", "{\"BatchUpdateTrainer\": {\"trainer_class\": \"BatchUpdateTrainer\", "
                                  "\"configurations\": {\"batch_size\": 20, \"batches\": 3}}}\n");
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--server", "BU2", "--server-config-path",
                             tmp_path("bu_server.json"), "--ntrainer", "3", "--nserver", "1", "--epochs", "1",
                             "--trainer-config-path", tmp_path("bu_trainer.json"), NULL),
                     -1);
    assert_contains(err, "batch_update_size 2 does not divide the 9 pushes per pass");
    config_free(&c);
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--server", "BU2", "--server-config-path",
                             tmp_path("bu_server.json"), "--ntrainer", "2", "--nserver", "1", "--epochs", "1",
                             "--trainer-config-path", tmp_path("bu_trainer.json"), NULL),
                     0);
    assert_true(c.resolved.bu.lr == 0.5);
    assert_int_equal(config_batches_per_pass(&c), 3);
    config_free(&c);
    assert_int_equal(bu_load(&c, err, sizeof err, BU_FLAGS, "--server", "Bad", "--server-config-path",
                             tmp_path("bu_server.json"), NULL),
                     -1);
    assert_contains(err, "server \"Bad\": \"lr\" must be a number in (0, 1000000], got -1");
    config_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_config_dir_env),
        cmocka_unit_test(test_token_env),
        cmocka_unit_test(test_local_loopback),
        cmocka_unit_test(test_token_file),
        cmocka_unit_test(test_both_spellings),
        cmocka_unit_test(test_all_flags),
        cmocka_unit_test(test_seed_compat_flags),
        cmocka_unit_test(test_seed_trainer_flags),
        cmocka_unit_test(test_seed_launcher_flags_both_spellings),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_bad_usage),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_load_real_configs),
        cmocka_unit_test(test_synthetic_bucket_sizes),
        cmocka_unit_test(test_load_missing_id),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_load_malformed),
        cmocka_unit_test(test_load_data_too_small),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_batch_update),
    };
    return cmocka_run_group_tests(tests, config_setup, tmpdir_teardown);
}
