/* test_snapshot.c — unit tests for master/snapshot (the master's HTTP
 * documents rendered from a hand-made snapshot_input).
 *
 * JSON bodies are parsed back with jansson (strictly: a NaN or Inf leaking
 * into the text would fail to parse) and checked for their exact shape and
 * values: /api/v1/status with and without an error, /api/v1/nodes,
 * /api/v1/metrics with two trainer ranks, the trainers' "all" view and one
 * server rank, non-finite statistics as null, "type,name" metric keys.
 * The Prometheus text is checked line by line: one HELP and one TYPE per
 * family, every family's samples contiguous, quantiles in seconds, _sum and
 * _count, label escaping, phase gauges, node counts, counters; the
 * type,name halves, the build and run info, the headline's gauges (a null
 * figure absent, the steady ones where a row has them), the step
 * histogram, and the aggregate's counting into its buckets. The JSON
 * renderers are also run with jansson allocations failing at every point.
 *
 * When PSBENCH_PROM_OUT is set, a representative exposition is written to
 * that path so that the build can run `promtool check metrics` on it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "master/aggregate.h"
#include "master/snapshot.h"

/* ---- fixtures ------------------------------------------------------------- */

static const snap_node fixture_nodes[] = {
    {"trainer", 0, "10.0.0.1", "cpu", "running", 0.25, 1000, 2000, -1, 0, 0, NULL, NULL, NULL},
    {"trainer", 1, "10.0.0.2", "cuda:0", "running", 1.23456, 3000, 4000, -1, 0, 0, NULL, NULL, NULL},
    {"server", 0, "10.0.0.3", "cpu", "ready", 0.0004, 6000, 5000, -1, 0, 0, NULL, NULL, NULL},
    {"trainer", 2, "10.0.0.4", "cpu", "lost", 31.0, 0, 0, -1, 0, 0, NULL, NULL, NULL},
};
#define NFIXTURE_NODES (sizeof fixture_nodes / sizeof fixture_nodes[0])

static stats_summary make_summary(uint64_t count, double base)
{
    stats_summary s = {
        .count = count,
        .min = base,
        .max = base * 10,
        .mean = base * 2,
        .variance = base / 4,
        .stdev = sqrt(base / 4),
        .sum = base * 2 * (double)count,
        .p50 = base * 1.5,
        .p75 = base * 2.5,
        .p90 = base * 4,
        .p95 = base * 6,
        .p99 = base * 8,
    };
    return s;
}

#define M_BATCH "batch_level_metric,batch_all"
#define M_RPC "hook_future_metric,rpc_dense"
#define M_SBATCH "parameter_server_batch_metric,param_index_batch"
#define M_STRAG "parameter_server_straggler_metric,param_index_straggler"

static snap_stat fixture_stats[6];

static snapshot_input fixture(void)
{
    fixture_stats[0] = (snap_stat){"trainer", 0, M_BATCH, make_summary(10, 12.0)};
    fixture_stats[1] = (snap_stat){"trainer", 0, M_RPC, make_summary(40, 2.0)};
    fixture_stats[2] = (snap_stat){"trainer", 1, M_BATCH, make_summary(10, 14.0)};
    fixture_stats[3] = (snap_stat){"trainer", -1, M_BATCH, make_summary(20, 13.0)};
    fixture_stats[4] = (snap_stat){"server", 0, M_SBATCH, make_summary(20, 3.0)};
    fixture_stats[5] = (snap_stat){"server", 0, M_STRAG, make_summary(20, 0.5)};
    snapshot_input in = {
        .phase = "running",
        .pass = "timed",
        .error = NULL,
        .batches_done = 17,
        .batches_total = 40,
        .batches_completed_total = 57,
        .elapsed_s = 12.5,
        .run = 2,
        .runs = 3,
        .nodes = fixture_nodes,
        .nnodes = NFIXTURE_NODES,
        .stats = fixture_stats,
        .nstats = sizeof fixture_stats / sizeof fixture_stats[0],
    };
    return in;
}

/* ---- JSON helpers ------------------------------------------------------- */

/* Parses (strictly) and frees the rendered text. */
static json_t *parse_json_text(char *text)
{
    assert_non_null(text);
    json_error_t err;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!v)
        fail_msg("invalid JSON (%s) in: %s", err.text, text);
    free(text);
    return v;
}

static json_t *get(json_t *obj, const char *key)
{
    assert_true(json_is_object(obj));
    json_t *v = json_object_get(obj, key);
    if (!v)
        fail_msg("missing key \"%s\"", key);
    return v;
}

static void assert_keys(json_t *obj, const char *const *keys, size_t n)
{
    assert_true(json_is_object(obj));
    assert_int_equal(json_object_size(obj), n);
    for (size_t i = 0; i < n; i++)
        get(obj, keys[i]);
}

static void assert_str(json_t *obj, const char *key, const char *want)
{
    json_t *v = get(obj, key);
    assert_true(json_is_string(v));
    assert_string_equal(json_string_value(v), want);
}

static void assert_int_key(json_t *obj, const char *key, json_int_t want)
{
    json_t *v = get(obj, key);
    assert_true(json_is_integer(v));
    assert_int_equal(json_integer_value(v), want);
}

static void assert_num_key(json_t *obj, const char *key, double want)
{
    json_t *v = get(obj, key);
    assert_true(json_is_number(v));
    assert_true(fabs(json_number_value(v) - want) <= 1e-12 * fmax(1.0, fabs(want)));
}

static const char *const stats_keys[] = {"count", "min", "max", "mean", "variance", "stdev",
                                         "p50", "p75", "p90", "p95", "p99"};

static void assert_stats(json_t *st, const stats_summary *s)
{
    assert_keys(st, stats_keys, 11);
    assert_int_key(st, "count", (json_int_t)s->count);
    assert_num_key(st, "min", s->min);
    assert_num_key(st, "max", s->max);
    assert_num_key(st, "mean", s->mean);
    assert_num_key(st, "variance", s->variance);
    assert_num_key(st, "stdev", s->stdev);
    assert_num_key(st, "p50", s->p50);
    assert_num_key(st, "p75", s->p75);
    assert_num_key(st, "p90", s->p90);
    assert_num_key(st, "p95", s->p95);
    assert_num_key(st, "p99", s->p99);
}

/* ---- /api/v1/status ------------------------------------------------------------ */

static void test_status_no_error(void **state)
{
    snapshot_input in = fixture();
    json_t *doc = parse_json_text(snapshot_status_json(&in));
    static const char *const keys[] = {"phase", "error", "progress", "nodes", "elapsed_s", "run", "runs",
                                       "servers_initialising", "headline", "host_state"};
    assert_keys(doc, keys, 10);
    assert_int_equal(json_array_size(get(doc, "servers_initialising")), 0); /* nobody fills a table */
    assert_true(json_is_null(get(doc, "headline"))); /* none given: null */
    assert_true(json_is_null(get(doc, "host_state"))); /* none given: null */
    assert_int_key(doc, "run", 2); /* extension: --runs */
    assert_int_key(doc, "runs", 3);
    assert_str(doc, "phase", "running");
    assert_true(json_is_null(get(doc, "error")));
    json_t *p = get(doc, "progress");
    static const char *const pkeys[] = {"batches_done", "batches_total"};
    assert_keys(p, pkeys, 2);
    assert_int_key(p, "batches_done", 17);
    assert_int_key(p, "batches_total", 40);
    json_t *n = get(doc, "nodes");
    static const char *const nkeys[] = {"trainer", "server"};
    assert_keys(n, nkeys, 2);
    assert_int_key(n, "trainer", 3);
    assert_int_key(n, "server", 1);
    assert_true(json_is_number(get(doc, "elapsed_s")));
    assert_num_key(doc, "elapsed_s", 12.5);
    json_decref(doc);
}

static void test_status_with_error(void **state)
{
    snapshot_input in = {.phase = "failed", .error = "server 0 lost: \"connection reset\"", .elapsed_s = 3};
    json_t *doc = parse_json_text(snapshot_status_json(&in));
    assert_str(doc, "phase", "failed");
    assert_str(doc, "error", "server 0 lost: \"connection reset\"");
    json_t *n = get(doc, "nodes");
    static const char *const nkeys[] = {"trainer", "server"};
    assert_keys(n, nkeys, 2);
    assert_int_key(n, "trainer", 0);
    assert_int_key(n, "server", 0);
    assert_int_key(get(doc, "progress"), "batches_done", 0);
    assert_num_key(doc, "elapsed_s", 3.0);
    json_decref(doc);
}

/* Extension: the servers filling their embedding tables, with progress. */
static void test_status_servers_initialising(void **state)
{
    (void)state;
    snap_node nodes[] = {
        {"server", 0, "h0", "cpu", "assigned", 0.1, 0, 0, 0, 3ull << 30, 8ull << 30, NULL, NULL, NULL},
        {"server", 1, "h1", "cpu", "ready", 0.1, 0, 0, 0, 0, 0, NULL, NULL, NULL},
        {"trainer", 0, "h2", "cpu", "registered", 0.1, 0, 0, -1, 0, 0, NULL, NULL, NULL},
    };
    snapshot_input in = {.phase = "waiting", .nodes = nodes, .nnodes = 3};
    json_t *doc = parse_json_text(snapshot_status_json(&in));
    json_t *a = get(doc, "servers_initialising");
    assert_true(json_is_array(a));
    assert_int_equal(json_array_size(a), 1);
    json_t *s = json_array_get(a, 0);
    static const char *const keys[] = {"rank", "done_bytes", "total_bytes"};
    assert_keys(s, keys, 3);
    assert_int_key(s, "rank", 0);
    assert_int_key(s, "done_bytes", 3ll << 30);
    assert_int_key(s, "total_bytes", 8ll << 30);
    json_decref(doc);
}

/* The headline the master computed (master/headline.c) is served as given. */
static void test_status_headline(void **state)
{
    (void)state;
    json_t *h = json_pack("{s:s, s:s, s:[{s:s, s:f}]}", "pass", "timed", "unit", "ms", "trainers", "trainer", "all",
                          "step_p50_ms", 12.5);
    assert_non_null(h);
    snapshot_input in = {.phase = "done", .headline = h};
    json_t *doc = parse_json_text(snapshot_status_json(&in));
    assert_true(json_equal(get(doc, "headline"), h));
    json_decref(doc);
    json_decref(h);
}

static void test_status_nonfinite_elapsed_is_null(void **state)
{
    snapshot_input in = {.phase = "waiting", .elapsed_s = NAN};
    json_t *doc = parse_json_text(snapshot_status_json(&in));
    assert_true(json_is_null(get(doc, "elapsed_s")));
    json_decref(doc);
}

/* ---- /api/v1/nodes ------------------------------------------------------------- */

static void test_nodes(void **state)
{
    snapshot_input in = fixture();
    json_t *arr = parse_json_text(snapshot_nodes_json(&in));
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), NFIXTURE_NODES);
    static const char *const keys[] = {"role", "rank", "host", "device", "state", "last_seen_s"};
    for (size_t i = 0; i < NFIXTURE_NODES; i++) {
        json_t *o = json_array_get(arr, i);
        const snap_node *n = &fixture_nodes[i];
        assert_keys(o, keys, 6);
        assert_str(o, "role", n->role);
        assert_int_key(o, "rank", n->rank);
        assert_str(o, "host", n->host);
        assert_str(o, "device", n->device);
        assert_str(o, "state", n->state);
        assert_true(json_is_number(get(o, "last_seen_s")));
    }
    /* rounded to the millisecond */
    assert_num_key(json_array_get(arr, 0), "last_seen_s", 0.25);
    assert_num_key(json_array_get(arr, 1), "last_seen_s", 1.235);
    assert_num_key(json_array_get(arr, 2), "last_seen_s", 0.0);
    assert_num_key(json_array_get(arr, 3), "last_seen_s", 31.0);
    json_decref(arr);
}

/* A trainer's transport in a word: its links' transports by name, the
 * distinct ones joined by + in order (a test build's loop among them). */
static void test_nodes_transport(void **state)
{
    (void)state;
    static const struct {
        const char *links, *want;
    } cases[] = {
        {"[{\"transport\": \"tcp\"}, {\"transport\": \"tcp\"}]", "tcp"},
        {"[{\"transport\": \"tcp\"}, {\"transport\": \"shm\"}]", "shm+tcp"},
        {"[{\"transport\": \"tcp\"}, {\"transport\": \"loop\"}, {\"transport\": \"shm\"}]", "loop+shm+tcp"},
        {"[{\"transport\": \"loop\"}]", "loop"},
        {"[]", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *links = json_loads(cases[i].links, 0, NULL);
        assert_non_null(links);
        snap_node nodes[1] = {fixture_nodes[0]};
        nodes[0].links = links;
        snapshot_input in = fixture();
        in.nodes = nodes;
        in.nnodes = 1;
        json_t *arr = parse_json_text(snapshot_nodes_json(&in));
        json_t *t = json_object_get(json_array_get(arr, 0), "transport");
        if (cases[i].want)
            assert_string_equal(json_string_value(t), cases[i].want);
        else
            assert_null(t);
        json_decref(arr);
        json_decref(links);
    }
}

/* A node that reported its environment has it, as sent (a copy). */
static void test_nodes_environment(void **state)
{
    json_t *env = json_pack("{s:s, s:{s:s, s:i}}", "cpu_model", "Test CPU", "blas", "core", "Haswell", "threads", 1);
    snap_node nodes[2] = {fixture_nodes[0], fixture_nodes[2]};
    nodes[0].environment = env;
    snapshot_input in = fixture();
    in.nodes = nodes;
    in.nnodes = 2;
    json_t *arr = parse_json_text(snapshot_nodes_json(&in));
    assert_true(json_equal(get(json_array_get(arr, 0), "environment"), env));
    assert_null(json_object_get(json_array_get(arr, 1), "environment"));
    json_decref(arr);
    assert_int_equal(env->refcount, 1); /* not taken over by the document */
    json_decref(env);
}

/* A trainer that reported GPU-timed metrics lists them (a copy); a node
 * without has no key. */
static void test_nodes_gpu_timed(void **state)
{
    json_t *gpu = json_pack("[s, s]", "forward_metric,forward_pass", "batch_level_metric,batch_all");
    snap_node nodes[2] = {fixture_nodes[1], fixture_nodes[0]};
    nodes[0].gpu_timed = gpu;
    snapshot_input in = fixture();
    in.nodes = nodes;
    in.nnodes = 2;
    json_t *arr = parse_json_text(snapshot_nodes_json(&in));
    assert_true(json_equal(get(json_array_get(arr, 0), "gpu_timed"), gpu));
    assert_null(json_object_get(json_array_get(arr, 1), "gpu_timed"));
    json_decref(arr);
    assert_int_equal(gpu->refcount, 1);
    json_decref(gpu);
}

/* Reals are short in the text: rounded to the ms, no 17-digit noise. */
static void test_nodes_text(void **state)
{
    snapshot_input in = fixture();
    char *s = snapshot_nodes_json(&in);
    assert_non_null(s);
    assert_non_null(strstr(s, "{\"role\":\"trainer\",\"rank\":1,\"host\":\"10.0.0.2\",\"device\":\"cuda:0\","
                              "\"state\":\"running\",\"last_seen_s\":1.235}"));
    free(s);
}

static void test_nodes_empty(void **state)
{
    snapshot_input in = {.phase = "waiting"};
    char *s = snapshot_nodes_json(&in);
    assert_non_null(s);
    assert_string_equal(s, "[]");
    free(s);
}

/* ---- /api/v1/metrics ----------------------------------------------------------- */

static void test_metrics_shape(void **state)
{
    snapshot_input in = fixture();
    json_t *doc = parse_json_text(snapshot_metrics_json(&in));
    static const char *const keys[] = {"unit", "phase", "groups"};
    assert_keys(doc, keys, 3);
    assert_str(doc, "unit", "ms");
    assert_str(doc, "phase", "running");
    json_t *groups = get(doc, "groups");
    static const char *const gkeys[] = {"trainer", "server"};
    assert_keys(groups, gkeys, 2);
    static const char *const akeys[] = {"all", "ranks"};

    json_t *tr = get(groups, "trainer");
    assert_keys(tr, akeys, 2);
    static const char *const mb[] = {M_BATCH};
    assert_keys(get(tr, "all"), mb, 1);
    assert_stats(get(get(tr, "all"), M_BATCH), &fixture_stats[3].s);
    json_t *ranks = get(tr, "ranks");
    static const char *const r01[] = {"0", "1"};
    assert_keys(ranks, r01, 2);
    static const char *const mbr[] = {M_BATCH, M_RPC};
    assert_keys(get(ranks, "0"), mbr, 2);
    assert_stats(get(get(ranks, "0"), M_BATCH), &fixture_stats[0].s);
    assert_stats(get(get(ranks, "0"), M_RPC), &fixture_stats[1].s);
    assert_keys(get(ranks, "1"), mb, 1);
    assert_stats(get(get(ranks, "1"), M_BATCH), &fixture_stats[2].s);

    json_t *sv = get(groups, "server");
    assert_keys(sv, akeys, 2);
    assert_int_equal(json_object_size(get(sv, "all")), 0);
    static const char *const r0[] = {"0"};
    assert_keys(get(sv, "ranks"), r0, 1);
    static const char *const ms[] = {M_SBATCH, M_STRAG};
    assert_keys(get(get(sv, "ranks"), "0"), ms, 2);
    assert_stats(get(get(get(sv, "ranks"), "0"), M_STRAG), &fixture_stats[5].s);
    json_decref(doc);
}

static void test_metrics_empty_groups(void **state)
{
    snapshot_input in = {.phase = "waiting"};
    json_t *doc = parse_json_text(snapshot_metrics_json(&in));
    json_t *want = json_loads("{\"unit\":\"ms\",\"phase\":\"waiting\",\"groups\":{"
                              "\"trainer\":{\"all\":{},\"ranks\":{}},"
                              "\"server\":{\"all\":{},\"ranks\":{}}}}",
                              0, NULL);
    assert_non_null(want);
    assert_true(json_equal(doc, want));
    json_decref(want);
    json_decref(doc);
}

static void test_metrics_nonfinite_is_null(void **state)
{
    snap_stat st = {"trainer", 3, M_BATCH, make_summary(5, 1.0)};
    st.s.p99 = NAN;
    st.s.max = INFINITY;
    st.s.min = -INFINITY;
    snapshot_input in = {.phase = "running", .stats = &st, .nstats = 1};
    char *text = snapshot_metrics_json(&in);
    assert_non_null(text);
    assert_null(strstr(text, "nan"));
    assert_null(strstr(text, "inf"));
    json_t *doc = parse_json_text(text);
    json_t *s = get(get(get(get(get(doc, "groups"), "trainer"), "ranks"), "3"), M_BATCH);
    assert_keys(s, stats_keys, 11);
    assert_true(json_is_null(get(s, "p99")));
    assert_true(json_is_null(get(s, "max")));
    assert_true(json_is_null(get(s, "min")));
    assert_num_key(s, "p50", 1.5);
    assert_int_key(s, "count", 5);
    json_decref(doc);
}

static void test_groups_json_matches_metrics(void **state)
{
    snapshot_input in = fixture();
    json_t *groups = snapshot_groups_json(&in);
    assert_non_null(groups);
    /* the same value once both go through the same 15-digit serialisation */
    json_t *reparsed = parse_json_text(json_dumps(groups, JSON_COMPACT | JSON_REAL_PRECISION(15)));
    json_decref(groups);
    json_t *doc = parse_json_text(snapshot_metrics_json(&in));
    assert_true(json_equal(reparsed, get(doc, "groups")));
    /* and the unserialised value holds the stats exactly */
    groups = snapshot_groups_json(&in);
    assert_non_null(groups);
    json_t *sd = get(get(get(get(groups, "trainer"), "ranks"), "0"), M_BATCH);
    assert_true(json_real_value(get(sd, "stdev")) == fixture_stats[0].s.stdev);
    json_decref(groups);
    json_decref(reparsed);
    json_decref(doc);
}

/* Every JSON renderer survives an allocation failure at any point: it
 * returns NULL (or a complete document) and leaks nothing (ASan checks). */
static long alloc_budget = -1; /* < 0: unlimited */

static void *failing_malloc(size_t n)
{
    if (alloc_budget == 0)
        return NULL;
    if (alloc_budget > 0)
        alloc_budget--;
    return malloc(n);
}

static void test_json_alloc_failures(void **state)
{
    snapshot_input in = fixture();
    in.error = "boom";
    char *(*const render[])(const snapshot_input *) = {snapshot_status_json, snapshot_nodes_json,
                                                        snapshot_metrics_json};
    json_set_alloc_funcs(failing_malloc, free);
    for (size_t r = 0; r < 3; r++) {
        char *full = NULL;
        for (long budget = 0; !full; budget++) {
            assert_true(budget < 100000);
            alloc_budget = budget;
            full = render[r](&in);
        }
        alloc_budget = -1;
        json_decref(parse_json_text(full));
    }
    for (long budget = 0;; budget++) {
        alloc_budget = budget;
        json_t *g = snapshot_groups_json(&in);
        alloc_budget = -1;
        if (g) {
            json_decref(g);
            break;
        }
    }
    json_set_alloc_funcs(malloc, free);
}

/* ---- Prometheus helpers ---------------------------------------------------------- */

/* The value of the one sample line that starts with `series` + ' '. */
static double prom_value(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *found = NULL;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        assert_non_null(eol); /* every line ends with \n */
        if ((size_t)(eol - line) > n && strncmp(line, series, n) == 0 && line[n] == ' ') {
            if (found)
                fail_msg("series appears twice: %s", series);
            found = line + n + 1;
        }
        line = eol + 1;
    }
    if (!found)
        fail_msg("series not found: %s\n%s", series, text);
    if (strncmp(found, "NaN\n", 4) == 0)
        return NAN;
    if (strncmp(found, "+Inf\n", 5) == 0)
        return INFINITY;
    char *end;
    double v = strtod(found, &end);
    assert_true(end != found && *end == '\n');
    return v;
}

static void assert_close_rel(double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want))))
        fail_msg("got %.17g, want %.17g", got, want);
}

static int count_substr(const char *text, const char *needle)
{
    int c = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        c++;
    return c;
}

/* The family a sample name belongs to (summary and histogram suffixes
 * folded). */
static void sample_family(const char *line, char *out, size_t cap)
{
    size_t n = strcspn(line, "{ ");
    assert_true(n < cap);
    memcpy(out, line, n);
    out[n] = '\0';
    static const char *const suffixes[] = {"_sum", "_count", "_bucket"};
    static const char *const folded[] = {"psbench_metric_duration_seconds", "psbench_role_metric_duration_seconds",
                                         "psbench_step_duration_seconds"};
    for (size_t i = 0; i < 3; i++) {
        size_t sl = strlen(suffixes[i]);
        for (size_t f = 0; f < 3; f++)
            if (n > sl && strcmp(out + n - sl, suffixes[i]) == 0 && n - sl == strlen(folded[f]) &&
                strncmp(out, folded[f], n - sl) == 0)
                out[n - sl] = '\0';
    }
}

/* Every family: HELP then TYPE once, samples right after and contiguous;
 * the six that are always there, and `extra` more (those of the build, the
 * run, the headline, the steps that the input has). */
static void assert_families_well_formed_n(const char *text, int extra)
{
    static const char *const fam[] = {"psbench_metric_duration_seconds", "psbench_role_metric_duration_seconds",
                                      "psbench_phase", "psbench_nodes", "psbench_batches_completed_total",
                                      "psbench_payload_bytes_total"};
    static const char *const type[] = {"summary", "summary", "gauge", "gauge", "counter", "counter"};
    for (size_t i = 0; i < 6; i++) {
        char help[128], typ[128];
        snprintf(help, sizeof help, "# HELP %s ", fam[i]);
        snprintf(typ, sizeof typ, "# TYPE %s %s\n", fam[i], type[i]);
        assert_int_equal(count_substr(text, help), 1);
        assert_int_equal(count_substr(text, typ), 1);
    }
    assert_int_equal(count_substr(text, "# HELP "), 6 + extra);
    assert_int_equal(count_substr(text, "# TYPE "), 6 + extra);

    char current[128] = "", seen[32][128];
    size_t nseen = 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        assert_non_null(eol);
        if (strncmp(line, "# HELP ", 7) == 0) {
            size_t n = strcspn(line + 7, " ");
            assert_true(n < sizeof current);
            memcpy(current, line + 7, n);
            current[n] = '\0';
            for (size_t i = 0; i < nseen; i++)
                assert_string_not_equal(seen[i], current);
            assert_true(nseen < 32);
            strcpy(seen[nseen++], current);
            /* TYPE follows immediately */
            char typ[160];
            snprintf(typ, sizeof typ, "# TYPE %s ", current);
            assert_int_equal(strncmp(eol + 1, typ, strlen(typ)), 0);
        } else if (line[0] != '#') {
            char f[128];
            sample_family(line, f, sizeof f);
            assert_string_equal(f, current);
        }
        line = eol + 1;
    }
}

static void assert_families_well_formed(const char *text)
{
    assert_families_well_formed_n(text, 0);
}

/* ---- /metrics ----------------------------------------------------------------- */

static void test_prom_families(void **state)
{
    snapshot_input in = fixture();
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_families_well_formed(text);
    free(text);

    snapshot_input empty = {.phase = "waiting"};
    text = snapshot_prometheus(&empty);
    assert_non_null(text);
    assert_families_well_formed(text);
    free(text);
}

static void test_prom_summary_in_seconds(void **state)
{
    snapshot_input in = fixture();
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
#define HALVES ",metric_type=\"batch_level_metric\",metric_name=\"batch_all\""
#define T0 "{role=\"trainer\",rank=\"0\",metric=\"" M_BATCH "\",run=\"2\",pass=\"timed\"" HALVES
#define TA "{role=\"trainer\",metric=\"" M_BATCH "\",run=\"2\",pass=\"timed\"" HALVES
    /* trainer 0: p50 18 ms, p90 48 ms, p99 96 ms, mean 24 ms over 10 */
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds" T0 ",quantile=\"0.5\"}"), 0.018);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds" T0 ",quantile=\"0.9\"}"), 0.048);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds" T0 ",quantile=\"0.99\"}"), 0.096);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_sum" T0 "}"), 0.24);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_count" T0 "}"), 10);
    /* the role-wide view is a family of its own, without a rank label
     * (issue 30: a sum() over the per-rank family counted it twice) */
    assert_close_rel(prom_value(text, "psbench_role_metric_duration_seconds" TA ",quantile=\"0.5\"}"), 0.0195);
    assert_close_rel(prom_value(text, "psbench_role_metric_duration_seconds_sum" TA "}"), 26.0 * 20 / 1000);
    assert_close_rel(prom_value(text, "psbench_role_metric_duration_seconds_count" TA "}"), 20);
    assert_null(strstr(text, "rank=\"all\""));
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds{role=\"server\",rank=\"0\",metric=\"" M_STRAG
                                  "\",run=\"2\",pass=\"timed\",metric_type=\"parameter_server_straggler_metric\","
                                  "metric_name=\"param_index_straggler\",quantile=\"0.99\"}"),
                 0.004);
    /* no p75 / p95 in the exposition */
    assert_null(strstr(text, "quantile=\"0.75\""));
    assert_null(strstr(text, "quantile=\"0.95\""));
    /* 5 per-rank stats * 5 samples, 1 role-wide * 5 */
    assert_int_equal(count_substr(text, "\npsbench_metric_duration_seconds"), 25);
    assert_int_equal(count_substr(text, "\npsbench_role_metric_duration_seconds"), 5);
    /* every sample of both families carries the run and the pass */
    assert_int_equal(count_substr(text, "pass=\"timed\""), 30);
    in.pass = "warmup";
    in.run = 1;
    free(text);
    text = snapshot_prometheus(&in);
    assert_int_equal(count_substr(text, "run=\"1\",pass=\"warmup\""), 30);
    /* before any pass: no pass label */
    in.pass = NULL;
    free(text);
    text = snapshot_prometheus(&in);
    assert_null(strstr(text, "pass="));
    assert_families_well_formed(text);
#undef T0
#undef TA
#undef HALVES
    free(text);
}

static void test_prom_label_escaping(void **state)
{
    snap_stat st = {"trainer", 0, "method_metric,we\"ird\\name\nx", make_summary(1, 1.0)};
    snapshot_input in = {.phase = "running", .stats = &st, .nstats = 1};
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_count{role=\"trainer\",rank=\"0\","
                                  "metric=\"method_metric,we\\\"ird\\\\name\\nx\",run=\"0\","
                                  "metric_type=\"method_metric\",metric_name=\"we\\\"ird\\\\name\\nx\"}"),
                 1);
    assert_int_equal(count_substr(text, "metric=\"method_metric,we\\\"ird\\\\name\\nx\""), 5);
    assert_int_equal(count_substr(text, "metric_name=\"we\\\"ird\\\\name\\nx\""), 5);
    assert_families_well_formed(text);
    free(text);
}

static void test_prom_nonfinite_values(void **state)
{
    snap_stat st = {"server", 1, M_SBATCH, make_summary(3, 2.0)};
    st.s.p50 = NAN;
    st.s.p99 = INFINITY;
    snapshot_input in = {.phase = "running", .stats = &st, .nstats = 1};
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    const char *l = "{role=\"server\",rank=\"1\",metric=\"" M_SBATCH "\",run=\"0\","
                    "metric_type=\"parameter_server_batch_metric\",metric_name=\"param_index_batch\"";
    char series[256];
    snprintf(series, sizeof series, "psbench_metric_duration_seconds%s,quantile=\"0.5\"} NaN\n", l);
    assert_non_null(strstr(text, series));
    snprintf(series, sizeof series, "psbench_metric_duration_seconds%s,quantile=\"0.99\"} +Inf\n", l);
    assert_non_null(strstr(text, series));
    free(text);
}

static void test_prom_phase(void **state)
{
    static const char *const phases[] = {"waiting", "warmup", "running", "done", "failed"};
    for (size_t cur = 0; cur < 5; cur++) {
        snapshot_input in = {.phase = phases[cur]};
        char *text = snapshot_prometheus(&in);
        assert_non_null(text);
        for (size_t i = 0; i < 5; i++) {
            char series[64];
            snprintf(series, sizeof series, "psbench_phase{phase=\"%s\"}", phases[i]);
            assert_close_rel(prom_value(text, series), i == cur ? 1 : 0);
        }
        assert_int_equal(count_substr(text, "\npsbench_phase{"), 5);
        free(text);
    }
    snapshot_input odd = {.phase = "unknown"};
    char *text = snapshot_prometheus(&odd);
    assert_non_null(text);
    assert_int_equal(count_substr(text, "\"} 1\n"), 0);
    free(text);
}

static void test_prom_nodes(void **state)
{
    snapshot_input in = fixture();
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_close_rel(prom_value(text, "psbench_nodes{role=\"trainer\",state=\"running\"}"), 2);
    assert_close_rel(prom_value(text, "psbench_nodes{role=\"trainer\",state=\"lost\"}"), 1);
    assert_close_rel(prom_value(text, "psbench_nodes{role=\"server\",state=\"ready\"}"), 1);
    assert_int_equal(count_substr(text, "\npsbench_nodes{"), 3);
    free(text);
}

static void test_prom_counters(void **state)
{
    snapshot_input in = fixture();
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_close_rel(prom_value(text, "psbench_batches_completed_total"), 57);
    assert_close_rel(prom_value(text, "psbench_payload_bytes_total{role=\"trainer\",rank=\"1\",direction=\"in\"}"), 3000);
    assert_close_rel(prom_value(text, "psbench_payload_bytes_total{role=\"trainer\",rank=\"1\",direction=\"out\"}"), 4000);
    assert_close_rel(prom_value(text, "psbench_payload_bytes_total{role=\"server\",rank=\"0\",direction=\"in\"}"), 6000);
    assert_close_rel(prom_value(text, "psbench_payload_bytes_total{role=\"server\",rank=\"0\",direction=\"out\"}"), 5000);
    assert_int_equal(count_substr(text, "\npsbench_payload_bytes_total{"), 2 * NFIXTURE_NODES);
    /* large counters print as exact integers */
    in.batches_completed_total = UINT64_C(18446744073709551615);
    free(text);
    text = snapshot_prometheus(&in);
    assert_non_null(strstr(text, "\npsbench_batches_completed_total 18446744073709551615\n"));
    free(text);
}

/* Floats use '.' whatever LC_NUMERIC says (skipped when no such locale). */
static void test_prom_locale_independent(void **state)
{
    static const char *const locs[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    const char *set = NULL;
    for (size_t i = 0; i < 4 && !set; i++)
        set = setlocale(LC_NUMERIC, locs[i]);
    if (!set)
        skip();
    snap_stat st = {"trainer", 0, M_BATCH, make_summary(2, 1.0)};
    snapshot_input in = {.phase = "running", .stats = &st, .nstats = 1};
    char *text = snapshot_prometheus(&in);
    char *json = snapshot_metrics_json(&in);
    setlocale(LC_NUMERIC, "C");
    assert_non_null(text);
    assert_non_null(strstr(text, ",quantile=\"0.5\"} 0.0015\n"));
    json_t *doc = parse_json_text(json);
    json_decref(doc);
    free(text);
}

/* An embedding server's rows touched: in its node and as a counter; no
 * such family where no node has them. */
static void test_rows_touched(void **state)
{
    static const snap_node nodes[] = {
        {"trainer", 0, "h0", "cpu", "running", 0.1, 10, 20, -1, 0, 0, NULL, NULL, NULL},
        {"server", 0, "h1", "cpu", "ready", 0.1, 30, 40, 4242, 0, 0, NULL, NULL, NULL},
        {"server", 1, "h2", "cpu", "ready", 0.1, 30, 40, 0, 0, 0, NULL, NULL, NULL},
    };
    snapshot_input in = fixture();
    char *plain = snapshot_prometheus(&in);
    assert_non_null(plain);
    assert_null(strstr(plain, "psbench_embedding_rows_touched_total"));
    free(plain);
    in.nodes = nodes;
    in.nnodes = 3;
    json_t *arr = parse_json_text(snapshot_nodes_json(&in));
    assert_null(json_object_get(json_array_get(arr, 0), "rows_touched"));
    assert_int_key(json_array_get(arr, 1), "rows_touched", 4242);
    assert_int_key(json_array_get(arr, 2), "rows_touched", 0);
    json_decref(arr);
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_close_rel(prom_value(text, "psbench_embedding_rows_touched_total{rank=\"0\"}"), 4242);
    assert_close_rel(prom_value(text, "psbench_embedding_rows_touched_total{rank=\"1\"}"), 0);
    assert_int_equal(count_substr(text, "\npsbench_embedding_rows_touched_total{"), 2);
    free(text);
    json_t *met = parse_json_text(snapshot_metrics_json(&in));
    json_t *sv = json_object_get(json_object_get(met, "counters"), "server");
    assert_int_key(json_object_get(sv, "all"), "rows_touched", 4242);
    assert_int_key(json_object_get(json_object_get(sv, "ranks"), "0"), "rows_touched", 4242);
    assert_int_key(json_object_get(json_object_get(sv, "ranks"), "1"), "rows_touched", 0);
    json_decref(met);
    in = fixture();
    met = parse_json_text(snapshot_metrics_json(&in));
    assert_null(json_object_get(met, "counters"));
    json_decref(met);
}

/* metric_type and metric_name: "type,name" split at its first comma; no
 * comma: the type "" and the name the whole. */
static void test_prom_metric_halves(void **state)
{
    snap_stat st[] = {{"trainer", 0, "nocomma", make_summary(1, 1.0)},
                      {"trainer", 0, "a,b,c", make_summary(1, 1.0)},
                      {"trainer", 0, ",lead", make_summary(1, 1.0)}};
    snapshot_input in = {.phase = "running", .stats = st, .nstats = 3, .run = 1};
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_count{role=\"trainer\",rank=\"0\","
                                  "metric=\"nocomma\",run=\"1\",metric_type=\"\",metric_name=\"nocomma\"}"),
                 1);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_count{role=\"trainer\",rank=\"0\",metric=\"a,b,c\","
                                  "run=\"1\",metric_type=\"a\",metric_name=\"b,c\"}"),
                 1);
    assert_close_rel(prom_value(text, "psbench_metric_duration_seconds_count{role=\"trainer\",rank=\"0\",metric=\",lead\","
                                  "run=\"1\",metric_type=\"\",metric_name=\"lead\"}"),
                 1);
    free(text);
}

static const snap_build fixture_build = {"1.2.3", "clang \"14\"\\x", 1};

/* psbench_build_info and psbench_run_info: one series each, value 1, every
 * label (escaped); bucket_cap_mb as the CSVs write it, "" where none. */
static void test_prom_build_and_run_info(void **state)
{
    snap_run_info info = {.hook = "allreduce_hook", .model = "Tiny", .trainer = "DdpTrainer",
                          .trainer_class = "DdpTrainer", .server_kind = "average", .bucket_cap_mb = 0.03,
                          .device = "mixed", .transport = "shm", .ntrainer = 4, .nserver = 2};
    snapshot_input in = fixture();
    in.build = &fixture_build;
    in.info = &info;
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_families_well_formed_n(text, 2);
    assert_non_null(strstr(text, "# TYPE psbench_build_info gauge\n"));
    assert_non_null(strstr(text, "# TYPE psbench_run_info gauge\n"));
    assert_close_rel(prom_value(text, "psbench_build_info{version=\"1.2.3\",compiler=\"clang \\\"14\\\"\\\\x\","
                                  "protocol=\"1\"}"),
                 1);
    assert_close_rel(prom_value(text, "psbench_run_info{hook=\"allreduce_hook\",model=\"Tiny\",trainer=\"DdpTrainer\","
                                  "trainer_class=\"DdpTrainer\",server_kind=\"average\",bucket_cap_mb=\"0.03\","
                                  "device=\"mixed\",transport=\"shm\",ntrainer=\"4\",nserver=\"2\",run=\"2\"}"),
                 1);
    free(text);
    /* A trainer class without buckets, no hook, a NULL string: "". */
    info = (snap_run_info){.hook = "", .model = "Hybrid", .trainer = "HybridTrainer", .trainer_class = NULL,
                           .server_kind = "embedding", .bucket_cap_mb = NAN, .device = "cpu", .transport = "tcp",
                           .ntrainer = 1, .nserver = 0};
    text = snapshot_prometheus(&in);
    assert_close_rel(prom_value(text, "psbench_run_info{hook=\"\",model=\"Hybrid\",trainer=\"HybridTrainer\","
                                  "trainer_class=\"\",server_kind=\"embedding\",bucket_cap_mb=\"\","
                                  "device=\"cpu\",transport=\"tcp\",ntrainer=\"1\",nserver=\"0\",run=\"2\"}"),
                 1);
    free(text);
    /* Neither family without its input. */
    in.build = NULL;
    in.info = NULL;
    text = snapshot_prometheus(&in);
    assert_null(strstr(text, "psbench_build_info"));
    assert_null(strstr(text, "psbench_run_info"));
    free(text);
}

/* A headline as headline.c makes it: rank 0 with every figure, rank 1
 * with nulls, "all"; `steady` on rank 0 and "all" when asked. */
static json_t *fixture_headline(bool steady)
{
    json_t *h = json_loads(
        "{\"pass\": \"timed\", \"unit\": \"ms\", \"trainers\": ["
        " {\"trainer\": \"0\", \"step_p50_ms\": 41.3, \"step_p90_ms\": 42.25, \"samples_per_s\": 244.3,"
        "  \"shares\": {\"forward\": 0.207, \"backward_compute\": 0.378, \"exposed_comm\": 0.325,"
        "              \"optimizer\": 0.09, \"other\": 0.0},"
        "  \"bytes_per_step\": 37781504.0, \"bytes_source\": \"gradient buckets\", \"comm_span_ms\": 24.24,"
        "  \"effective_gb_per_s\": 1.559},"
        " {\"trainer\": \"1\", \"step_p50_ms\": 40.0, \"step_p90_ms\": null, \"samples_per_s\": null,"
        "  \"shares\": {\"forward\": null, \"backward_compute\": 0.5, \"exposed_comm\": null,"
        "              \"optimizer\": null, \"other\": 0.5},"
        "  \"bytes_per_step\": null, \"bytes_source\": null, \"comm_span_ms\": null, \"effective_gb_per_s\": null},"
        " {\"trainer\": \"all\", \"step_p50_ms\": 40.5, \"step_p90_ms\": 42.0, \"samples_per_s\": 490.0,"
        "  \"shares\": {\"forward\": 0.2, \"backward_compute\": 0.4, \"exposed_comm\": 0.3,"
        "              \"optimizer\": 0.1, \"other\": 0.0},"
        "  \"bytes_per_step\": 37781504.0, \"bytes_source\": \"gradient buckets\", \"comm_span_ms\": 24.0,"
        "  \"effective_gb_per_s\": null}]}",
        0, NULL);
    assert_non_null(h);
    if (steady) {
        json_t *rows = json_object_get(h, "trainers");
        json_object_set_new(json_array_get(rows, 0), "steady",
                            json_pack("{s:i, s:f, s:f, s:f, s:b}", "n", 90, "step_p50_ms", 39.5, "step_p90_ms",
                                      41.0, "samples_per_s", 250.0, "few_steps", 0));
        json_object_set_new(json_array_get(rows, 2), "steady",
                            json_pack("{s:i, s:f, s:n, s:f, s:b}", "n", 3, "step_p50_ms", 40.0, "step_p90_ms",
                                      "samples_per_s", 500.0, "few_steps", 1));
    }
    return h;
}

#define HL_L(who) "{trainer=\"" who "\",run=\"2\",pass=\"timed\"}"

/* The headline's figures as gauges, in base units; a null figure has no
 * series (never 0); the steady figures only where a row has them. */
static void test_prom_headline(void **state)
{
    json_t *h = fixture_headline(false);
    snapshot_input in = fixture();
    in.headline = h;
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    /* 7 families: p50, p90, samples/s, shares, bytes, span, effective rate */
    assert_families_well_formed_n(text, 7);
    static const char *const gauges[] = {"psbench_step_p50_seconds", "psbench_step_p90_seconds",
                                         "psbench_samples_per_second", "psbench_step_share",
                                         "psbench_bytes_per_step", "psbench_comm_span_seconds",
                                         "psbench_effective_bytes_per_second"};
    for (size_t i = 0; i < 7; i++) {
        char typ[128];
        snprintf(typ, sizeof typ, "# TYPE %s gauge\n", gauges[i]);
        assert_int_equal(count_substr(text, typ), 1);
    }
    assert_close_rel(prom_value(text, "psbench_step_p50_seconds" HL_L("0")), 41.3 / 1000);
    assert_close_rel(prom_value(text, "psbench_step_p50_seconds" HL_L("1")), 40.0 / 1000);
    assert_close_rel(prom_value(text, "psbench_step_p50_seconds" HL_L("all")), 40.5 / 1000);
    assert_close_rel(prom_value(text, "psbench_step_p90_seconds" HL_L("0")), 42.25 / 1000);
    assert_close_rel(prom_value(text, "psbench_samples_per_second" HL_L("all")), 490.0);
    assert_close_rel(prom_value(text, "psbench_bytes_per_step" HL_L("0")), 37781504.0);
    assert_close_rel(prom_value(text, "psbench_comm_span_seconds" HL_L("all")), 0.024);
    assert_close_rel(prom_value(text, "psbench_effective_bytes_per_second" HL_L("0")), 1.559e9);
    assert_close_rel(prom_value(text, "psbench_step_share{trainer=\"0\",part=\"exposed_comm\",run=\"2\",pass=\"timed\"}"),
                 0.325);
    assert_close_rel(prom_value(text, "psbench_step_share{trainer=\"0\",part=\"other\",run=\"2\",pass=\"timed\"}"), 0.0);
    assert_close_rel(prom_value(text, "psbench_step_share{trainer=\"1\",part=\"other\",run=\"2\",pass=\"timed\"}"), 0.5);
    /* rank 1's nulls: no series */
    assert_null(strstr(text, "psbench_step_p90_seconds{trainer=\"1\""));
    assert_null(strstr(text, "psbench_samples_per_second{trainer=\"1\""));
    assert_null(strstr(text, "psbench_step_share{trainer=\"1\",part=\"forward\""));
    assert_null(strstr(text, "psbench_effective_bytes_per_second{trainer=\"all\""));
    assert_int_equal(count_substr(text, "\npsbench_step_p50_seconds{"), 3);
    assert_int_equal(count_substr(text, "\npsbench_step_share{"), 5 + 2 + 5);
    assert_int_equal(count_substr(text, "\npsbench_effective_bytes_per_second{"), 1);
    assert_null(strstr(text, "psbench_steady"));
    free(text);
    json_decref(h);

    /* With the steady figures (another session's headline rows). */
    h = fixture_headline(true);
    in.headline = h;
    text = snapshot_prometheus(&in);
    assert_families_well_formed_n(text, 11);
    assert_close_rel(prom_value(text, "psbench_steady_step_p50_seconds" HL_L("0")), 39.5 / 1000);
    assert_close_rel(prom_value(text, "psbench_steady_step_p90_seconds" HL_L("0")), 41.0 / 1000);
    assert_close_rel(prom_value(text, "psbench_steady_samples_per_second" HL_L("0")), 250.0);
    assert_close_rel(prom_value(text, "psbench_steady_steps" HL_L("0")), 90);
    assert_close_rel(prom_value(text, "psbench_steady_step_p50_seconds" HL_L("all")), 40.0 / 1000);
    assert_close_rel(prom_value(text, "psbench_steady_steps" HL_L("all")), 3);
    assert_null(strstr(text, "psbench_steady_step_p90_seconds{trainer=\"all\""));
    assert_null(strstr(text, "psbench_steady_step_p50_seconds{trainer=\"1\""));
    assert_int_equal(count_substr(text, "\npsbench_steady_steps{"), 2);
    /* Before any pass: no pass label. */
    in.pass = NULL;
    free(text);
    text = snapshot_prometheus(&in);
    assert_close_rel(prom_value(text, "psbench_step_p50_seconds{trainer=\"0\",run=\"2\"}"), 41.3 / 1000);
    free(text);
    json_decref(h);

    /* A headline whose figures are all null: no family at all. */
    h = json_loads("{\"pass\": null, \"unit\": \"ms\", \"trainers\": [{\"trainer\": \"all\", \"step_p50_ms\": null,"
                   " \"shares\": {\"forward\": null}}]}",
                   0, NULL);
    in.headline = h;
    text = snapshot_prometheus(&in);
    assert_families_well_formed(text);
    free(text);
    json_decref(h);
}
#undef HL_L

/* A hand-made step histogram: le in seconds, cumulative, +Inf = _count,
 * _sum in seconds; labels rank, run, pass. */
static void test_prom_step_histogram(void **state)
{
    snap_step_hist h[2] = {{.rank = 0, .count = 7, .sum_ms = 1234.5}, {.rank = 3, .count = 0, .sum_ms = 0}};
    for (size_t k = 0; k < SNAP_STEP_NBOUNDS; k++)
        h[0].le[k] = k < 4 ? k : 5; /* 2 above the last bound */
    snapshot_input in = fixture();
    in.steps = h;
    in.nsteps = 2;
    char *text = snapshot_prometheus(&in);
    assert_non_null(text);
    assert_families_well_formed_n(text, 1);
    assert_int_equal(count_substr(text, "# TYPE psbench_step_duration_seconds histogram\n"), 1);
    static const char *const le[SNAP_STEP_NBOUNDS] = {"0.0005", "0.001", "0.002", "0.005", "0.01", "0.02",
                                                      "0.05",   "0.1",   "0.2",   "0.5",   "1",    "2",
                                                      "5",      "10",    "20",    "60"};
    for (size_t k = 0; k < SNAP_STEP_NBOUNDS; k++) {
        char series[160];
        snprintf(series, sizeof series,
                 "psbench_step_duration_seconds_bucket{rank=\"0\",run=\"2\",pass=\"timed\",le=\"%s\"}", le[k]);
        assert_close_rel(prom_value(text, series), (double)h[0].le[k]);
        snprintf(series, sizeof series,
                 "psbench_step_duration_seconds_bucket{rank=\"3\",run=\"2\",pass=\"timed\",le=\"%s\"}", le[k]);
        assert_close_rel(prom_value(text, series), 0);
    }
    assert_close_rel(prom_value(text, "psbench_step_duration_seconds_bucket{rank=\"0\",run=\"2\",pass=\"timed\","
                                  "le=\"+Inf\"}"),
                 7);
    assert_close_rel(prom_value(text, "psbench_step_duration_seconds_sum{rank=\"0\",run=\"2\",pass=\"timed\"}"), 1.2345);
    assert_close_rel(prom_value(text, "psbench_step_duration_seconds_count{rank=\"0\",run=\"2\",pass=\"timed\"}"), 7);
    assert_close_rel(prom_value(text, "psbench_step_duration_seconds_count{rank=\"3\",run=\"2\",pass=\"timed\"}"), 0);
    assert_int_equal(count_substr(text, "\npsbench_step_duration_seconds_bucket{"), 2 * (SNAP_STEP_NBOUNDS + 1));
    free(text);
    in.nsteps = 0;
    text = snapshot_prometheus(&in);
    assert_null(strstr(text, "psbench_step_duration_seconds"));
    free(text);
}

/* The aggregate counts a trainer's steps into the buckets as they come: a
 * sample equal to a bound is in that bound's bucket (le), one above every
 * bound only in +Inf; servers' samples and other metrics are not counted;
 * a refused report counts nothing; agg_reset zeroes, keeping the rank. */
static void test_agg_step_buckets(void **state)
{
    aggregate a;
    assert_int_equal(agg_init(&a), 0);
    char err[256];
    json_t *r = json_loads("{\"" AGG_STEP_METRIC "\": [0.5, 0.5000001, 1, 0.1, 60000, 60000.5, 999999],"
                           " \"forward_metric,forward_pass\": [0.1, 0.2]}",
                           0, NULL);
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 2, r, err, sizeof err), 0);
    json_decref(r);
    r = json_loads("{\"" AGG_STEP_METRIC "\": [3]}", 0, NULL);
    assert_int_equal(agg_add_report(&a, AGG_SERVER, 0, r, err, sizeof err), 0);
    json_decref(r);
    r = json_loads("{\"" AGG_STEP_METRIC "\": [3], \"x,y\": [-1]}", 0, NULL);
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 2, r, err, sizeof err), -1);
    json_decref(r);
    size_t n;
    snap_step_hist *h = agg_step_hists(&a, &n);
    assert_int_equal(n, 1);
    assert_int_equal(h[0].rank, 2);
    assert_int_equal(h[0].count, 7);
    assert_close_rel(h[0].sum_ms, 0.5 + 0.5000001 + 1 + 0.1 + 60000 + 60000.5 + 999999);
    /* bounds 0.5, 1, 2, ... ms: 0.1 and 0.5 <= 0.5; 0.5000001 and 1 <= 1 */
    assert_int_equal(h[0].le[0], 2);
    assert_int_equal(h[0].le[1], 4);
    assert_int_equal(h[0].le[SNAP_STEP_NBOUNDS - 2], 4);
    assert_int_equal(h[0].le[SNAP_STEP_NBOUNDS - 1], 5);
    for (size_t k = 1; k < SNAP_STEP_NBOUNDS; k++)
        assert_true(h[0].le[k] >= h[0].le[k - 1]);
    /* the same count as the stats of the metric */
    size_t ns;
    snap_stat *st = agg_snapshot(&a, true, &ns);
    bool found = false;
    for (size_t i = 0; i < ns; i++)
        if (st[i].rank == 2 && strcmp(st[i].role, "trainer") == 0 && strcmp(st[i].metric, AGG_STEP_METRIC) == 0) {
            assert_int_equal(st[i].s.count, h[0].count);
            found = true;
        }
    assert_true(found);
    free(st);
    free(h);
    agg_reset(&a);
    h = agg_step_hists(&a, &n);
    assert_int_equal(n, 1);
    assert_int_equal(h[0].count, 0);
    assert_int_equal(h[0].le[SNAP_STEP_NBOUNDS - 1], 0);
    assert_close_rel(h[0].sum_ms, 0);
    free(h);
    agg_free(&a);
    assert_int_equal(agg_init(&a), 0);
    h = agg_step_hists(&a, &n);
    assert_null(h);
    assert_int_equal(n, 0);
    agg_free(&a);
}

/* Writes a representative exposition for promtool when PSBENCH_PROM_OUT is set. */
static void test_prom_write_out(void **state)
{
    const char *path = getenv("PSBENCH_PROM_OUT");
    if (!path || !*path)
        skip();
    snapshot_input in = fixture();
    /* With an embedding server, so that its counter family is checked too. */
    snap_node nodes[NFIXTURE_NODES];
    memcpy(nodes, fixture_nodes, sizeof nodes);
    nodes[2].rows_touched = 123;
    in.nodes = nodes;
    snap_stat all_stats[8];
    memcpy(all_stats, fixture_stats, sizeof fixture_stats);
    all_stats[6] = (snap_stat){"trainer", 1, "method_metric,we\"ird\\name\nx", make_summary(3, 0.75)};
    all_stats[7] = (snap_stat){"server", -1, M_STRAG, make_summary(0, 0.0)};
    all_stats[7].s.p99 = NAN;
    in.stats = all_stats;
    in.nstats = 8;
    /* Every family that only some inputs have: the build, the run, the
     * headline (with steady figures), the step histogram. */
    snap_run_info info = {.hook = "allreduce_hook", .model = "Tiny", .trainer = "DdpTrainer",
                          .trainer_class = "DdpTrainer", .server_kind = "average", .bucket_cap_mb = 25,
                          .device = "cpu", .transport = "shm", .ntrainer = 2, .nserver = 1};
    in.build = &fixture_build;
    in.info = &info;
    json_t *h = fixture_headline(true);
    in.headline = h;
    snap_step_hist steps[1] = {{.rank = 0, .count = 3, .sum_ms = 42}};
    for (size_t k = 0; k < SNAP_STEP_NBOUNDS; k++)
        steps[0].le[k] = k < 5 ? 0 : k < 8 ? 1 : 2;
    in.steps = steps;
    in.nsteps = 1;
    char *text = snapshot_prometheus(&in);
    json_decref(h);
    assert_non_null(text);
    FILE *f = fopen(path, "w");
    if (!f)
        fail_msg("cannot write %s", path);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_no_error),
        cmocka_unit_test(test_status_with_error),
        cmocka_unit_test(test_status_nonfinite_elapsed_is_null),
        cmocka_unit_test(test_status_servers_initialising),
        cmocka_unit_test(test_status_headline),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_nodes_text),
        cmocka_unit_test(test_nodes_environment),
        cmocka_unit_test(test_nodes_transport),
        cmocka_unit_test(test_nodes_gpu_timed),
        cmocka_unit_test(test_nodes_empty),
        cmocka_unit_test(test_rows_touched),
        cmocka_unit_test(test_metrics_shape),
        cmocka_unit_test(test_metrics_empty_groups),
        cmocka_unit_test(test_metrics_nonfinite_is_null),
        cmocka_unit_test(test_groups_json_matches_metrics),
        cmocka_unit_test(test_json_alloc_failures),
        cmocka_unit_test(test_prom_families),
        cmocka_unit_test(test_prom_summary_in_seconds),
        cmocka_unit_test(test_prom_label_escaping),
        cmocka_unit_test(test_prom_nonfinite_values),
        cmocka_unit_test(test_prom_phase),
        cmocka_unit_test(test_prom_nodes),
        cmocka_unit_test(test_prom_counters),
        cmocka_unit_test(test_prom_locale_independent),
        cmocka_unit_test(test_prom_metric_halves),
        cmocka_unit_test(test_prom_build_and_run_info),
        cmocka_unit_test(test_prom_headline),
        cmocka_unit_test(test_prom_step_histogram),
        cmocka_unit_test(test_agg_step_buckets),
        cmocka_unit_test(test_prom_write_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
