/* test_trace_out.c — unit tests for master/trace_out (issue 42): a
 * synthetic job — trainer 0 whose clock runs 5 s ahead of the master's
 * pushes bucket 3 of batch 5 to server 1 whose clock runs 2 s behind —
 * merged into one Chrome trace: every event has the fields the format
 * requires, the push comes before the fold once each node's offset
 * (estimated from jittered round trips) is applied, and not before; the
 * flow events join the bucket's spans trainer -> server -> trainer; the
 * output is the same bytes for the same input in any order. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fixture.h"
#include "master/trace_out.h"
#include "shared/clockoff.h"
#include "shared/trace.h"

#define US 1000ull
#define S 1000000000ull
#define MASTER_T0 (1000 * S) /* the master's clock when the step starts */
#define TRAINER_SKEW ((int64_t)(5 * S))
#define SERVER_SKEW (-(int64_t)(2 * S))

/* The job's nodes: their traces and clocks. */
typedef struct job {
    trace_node *tn[3];
    trace_dump *dump[3];
    trace_out_node out[3];
} job;

/* A span at master time [a, b] us after MASTER_T0, on a node whose clock
 * reads master + skew. */
static void span_at(trace_ring *r, trace_span s, int lane, uint64_t a, uint64_t b, int64_t skew, trace_ids ids)
{
    trace_add(r, s, (unsigned)lane, (uint64_t)((int64_t)(MASTER_T0 + a * US) + skew),
              (uint64_t)((int64_t)(MASTER_T0 + b * US) + skew), ids);
}

/* Round trips to a node of that skew, jittered: 20..70 us each way (the
 * estimate is then within 25 us, less than the gaps between the job's
 * spans on different nodes). */
static clockoff estimate_skew(int64_t skew, unsigned seed)
{
    clockoff_sample s[8];
    srand(seed);
    for (size_t i = 0; i < 8; i++) {
        uint64_t t0 = MASTER_T0 - 10 * S + i * S, out = 20 * US + (uint64_t)(rand() % 50) * US;
        uint64_t back = 20 * US + (uint64_t)(rand() % 50) * US, hold = 5 * US;
        s[i].t0 = t0;
        s[i].t1 = (uint64_t)((int64_t)(t0 + out) + skew);
        s[i].t2 = s[i].t1 + hold;
        s[i].t3 = t0 + out + hold + back;
    }
    clockoff o;
    assert_int_equal(clockoff_estimate(s, 8, &o), 0);
    return o;
}

/* The job of the file's comment, its clocks estimated (aligned) or not. */
static void job_make(job *j, trace_out_clock state)
{
    memset(j, 0, sizeof *j);
    char err[256];
    trace_conf c = {.role = TRACE_TRAINER, .rank = 0, .on = true, .capacity = 64, .window = {0, 100}};
    trace_node *t = j->tn[0] = trace_node_new(&c, err, sizeof err);
    c.role = TRACE_SERVER;
    c.rank = 1;
    trace_node *sv = j->tn[1] = trace_node_new(&c, err, sizeof err);
    c.role = TRACE_MASTER;
    c.rank = 0;
    trace_node *m = j->tn[2] = trace_node_new(&c, err, sizeof err);
    assert_true(t && sv && m);

    int main_lane = trace_lane(t, "main"), comm = trace_lane(t, "comm");
    trace_ring *tm = trace_ring_add(t, "main"), *tc = trace_ring_add(t, "comm");
    trace_ring_step(tm, 5);
    trace_ring_step(tc, 5);
    trace_ids b3 = trace_ids_make(5, 3, 0, 1), b4 = trace_ids_make(5, 4, 0, 1);
    span_at(tm, TRACE_FORWARD, main_lane, 0, 50, TRAINER_SKEW, trace_ids_make(5, TRACE_NONE, 0, TRACE_NONE));
    span_at(tm, TRACE_BUCKET_READY, main_lane, 60, 100, TRAINER_SKEW, b3);
    span_at(tm, TRACE_BUCKET_READY, main_lane, 100, 130, TRAINER_SKEW, b4); /* alone: no flow */
    span_at(tm, TRACE_BUCKET_WAIT, main_lane, 100, 700, TRAINER_SKEW, b3);
    span_at(tc, TRACE_FRAME_OUT, comm, 100, 120, TRAINER_SKEW, b3);
    span_at(tc, TRACE_FRAME_IN, comm, 600, 620, TRAINER_SKEW, b3);
    span_at(tm, TRACE_BUCKET_APPLY, main_lane, 700, 750, TRAINER_SKEW, b3);

    int reactor = trace_lane(sv, "reactor"), stream = trace_lane(sv, "stream 0");
    trace_ring *sr = trace_ring_add(sv, "reactor");
    trace_ring_step(sr, 5);
    trace_ids whole = trace_ids_make(5, 3, TRACE_NONE, 1); /* the bucket as a whole: no one trainer */
    span_at(sr, TRACE_PUSH_RECV, reactor, 200, 230, SERVER_SKEW, b3);
    span_at(sr, TRACE_FOLD, reactor, 240, 300, SERVER_SKEW, b3);
    span_at(sr, TRACE_DEVICE_JOB, stream, 300, 400, SERVER_SKEW, whole);
    span_at(sr, TRACE_RESOLVE, reactor, 410, 420, SERVER_SKEW, whole);
    span_at(sr, TRACE_ANSWER_OUT, reactor, 430, 450, SERVER_SKEW, b3);
    span_at(sr, TRACE_RESOLVE, reactor, 460, 470, SERVER_SKEW, trace_ids_make(6, 3, TRACE_NONE, 1)); /* another batch */

    int phases = trace_lane(m, "phases");
    trace_ring *mr = trace_ring_add(m, "phases");
    trace_ring_step(mr, TRACE_NO_STEP);
    span_at(mr, TRACE_PHASE, phases, 0, 800, 0, trace_ids_none());

    for (int i = 0; i < 3; i++) {
        j->dump[i] = trace_node_snapshot(j->tn[i]);
        assert_non_null(j->dump[i]);
        j->out[i] = (trace_out_node){.dump = j->dump[i], .state = state};
    }
    if (state == TRACE_OUT_ALIGNED) {
        j->out[0].clock = estimate_skew(TRAINER_SKEW, 7);
        j->out[1].clock = estimate_skew(SERVER_SKEW, 11);
    }
    j->out[2].state = TRACE_OUT_SAME;
}

static void job_free(job *j)
{
    for (int i = 0; i < 3; i++) {
        trace_dump_free(j->dump[i]);
        trace_node_free(j->tn[i]);
    }
}

/* The merged document, parsed, every event checked for the fields Chrome's
 * format requires, the non-metadata ones in time order after the
 * metadata ones. The text in *text where text is not NULL (freed by the
 * caller). */
static json_t *merge_checked(const trace_out_node *nodes, size_t n, char **text)
{
    char err[256] = "";
    size_t len = 0;
    char *s = trace_out_json(nodes, n, &len, err, sizeof err);
    if (!s)
        fail_msg("trace_out_json: %s", err);
    assert_int_equal(strlen(s), len);
    json_error_t jerr;
    json_t *doc = json_loads(s, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        fail_msg("not JSON: line %d: %s", jerr.line, jerr.text);
    if (text)
        *text = s;
    else
        free(s);
    assert_string_equal(json_string_value(json_object_get(doc, "displayTimeUnit")), "ms");
    assert_true(json_is_object(json_object_get(doc, "metadata")));
    json_t *events = json_object_get(doc, "traceEvents");
    assert_true(json_is_array(events));
    size_t i;
    json_t *e;
    double last_ts = -1;
    bool past_metadata = false;
    json_array_foreach (events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        assert_non_null(ph);
        assert_non_null(json_string_value(json_object_get(e, "name")));
        assert_true(json_is_integer(json_object_get(e, "pid")) && json_is_integer(json_object_get(e, "tid")));
        if (strcmp(ph, "M") == 0) {
            assert_false(past_metadata);
            assert_true(json_is_object(json_object_get(e, "args")));
            continue;
        }
        past_metadata = true;
        json_t *ts = json_object_get(e, "ts");
        assert_true(json_is_number(ts));
        assert_true(json_number_value(ts) >= last_ts);
        last_ts = json_number_value(ts);
        assert_non_null(json_string_value(json_object_get(e, "cat")));
        if (strcmp(ph, "X") == 0) {
            assert_true(json_is_number(json_object_get(e, "dur")) && json_number_value(json_object_get(e, "dur")) >= 0);
            assert_true(json_is_object(json_object_get(e, "args")));
        } else {
            assert_true(strcmp(ph, "s") == 0 || strcmp(ph, "t") == 0 || strcmp(ph, "f") == 0);
            assert_true(json_is_integer(json_object_get(e, "id")));
            if (strcmp(ph, "f") == 0)
                assert_string_equal(json_string_value(json_object_get(e, "bp")), "e");
        }
    }
    return doc;
}

/* The pid of the process called name (its process_name event). */
static json_int_t pid_of(json_t *doc, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), "process_name") == 0 &&
            strcmp(json_string_value(json_object_get(json_object_get(e, "args"), "name")), name) == 0)
            return json_integer_value(json_object_get(e, "pid"));
    }
    fail_msg("no process %s", name);
    return -1;
}

/* The complete event of span name in process pid (of batch 5, bucket 3
 * where it has them); fails where there is none. */
static json_t *span_in(json_t *doc, const char *name, json_int_t pid)
{
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        json_t *bucket = json_object_get(json_object_get(e, "args"), "bucket");
        json_t *batch = json_object_get(json_object_get(e, "args"), "batch");
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0 &&
            strcmp(json_string_value(json_object_get(e, "name")), name) == 0 &&
            json_integer_value(json_object_get(e, "pid")) == pid && (!bucket || json_integer_value(bucket) == 3) &&
            (!batch || json_integer_value(batch) == 5))
            return e;
    }
    fail_msg("no span %s in process %lld", name, (long long)pid);
    return NULL;
}

static double ts_of(json_t *e) { return json_number_value(json_object_get(e, "ts")); }

static void test_merged_two_nodes(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_ALIGNED);
    json_t *doc = merge_checked(j.out, 3, NULL);
    json_int_t trainer = pid_of(doc, "trainer 0"), server = pid_of(doc, "server 1"), master = pid_of(doc, "master");
    /* trainers, then servers, then the master */
    assert_true(trainer < server && server < master);

    /* The push before the fold, on the master's clock. */
    json_t *push = span_in(doc, "frame_out", trainer), *ready = span_in(doc, "bucket_ready", trainer);
    json_t *fold = span_in(doc, "fold", server), *recv = span_in(doc, "push_recv", server);
    json_t *in = span_in(doc, "frame_in", trainer), *answer = span_in(doc, "answer_out", server);
    assert_true(ts_of(push) + json_number_value(json_object_get(push, "dur")) <= ts_of(recv));
    assert_true(ts_of(ready) < ts_of(fold) && ts_of(push) < ts_of(fold));
    assert_true(ts_of(answer) < ts_of(in));
    /* About 240 - 100 us apart: within the two offsets' uncertainties. */
    json_t *meta_nodes = json_object_get(json_object_get(doc, "metadata"), "nodes");
    double unc = 0;
    size_t i;
    json_t *e;
    json_array_foreach (meta_nodes, i, e)
        unc += (double)json_integer_value(json_object_get(e, "uncertainty_ns")) / 1e3;
    double gap = ts_of(fold) - ts_of(push);
    assert_true(gap >= 140 - unc && gap <= 140 + unc);
    json_t *args = json_object_get(fold, "args");
    assert_int_equal(json_integer_value(json_object_get(args, "batch")), 5);
    assert_int_equal(json_integer_value(json_object_get(args, "bucket")), 3);
    assert_int_equal(json_integer_value(json_object_get(args, "trainer")), 0);
    assert_int_equal(json_integer_value(json_object_get(args, "server")), 1);
    /* A phase has no ids: its args are empty. */
    assert_int_equal(json_object_size(json_object_get(span_in(doc, "phase", master), "args")), 0);

    /* One flow: bucket_ready -> frame_out -> push_recv -> fold -> device_job
     * -> resolve -> answer_out -> frame_in -> bucket_apply. */
    const char *chain[] = {"bucket_ready", "frame_out",  "push_recv", "fold",        "device_job",
                           "resolve",      "answer_out", "frame_in",  "bucket_apply"};
    json_t *flow[16];
    size_t nflow = 0;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (strchr("stf", ph[0]) && nflow < 16)
            flow[nflow++] = e;
    }
    assert_int_equal(nflow, sizeof chain / sizeof chain[0]);
    json_int_t id = json_integer_value(json_object_get(flow[0], "id"));
    for (size_t k = 0; k < nflow; k++) {
        const char *ph = json_string_value(json_object_get(flow[k], "ph"));
        assert_string_equal(ph, k == 0 ? "s" : k + 1 == nflow ? "f" : "t");
        assert_int_equal(json_integer_value(json_object_get(flow[k], "id")), id);
        /* Each at the start of its span, in that span's process and thread. */
        json_int_t pid = json_integer_value(json_object_get(flow[k], "pid"));
        json_t *sp = span_in(doc, chain[k], pid);
        assert_true(ts_of(sp) == ts_of(flow[k]));
        assert_int_equal(json_integer_value(json_object_get(sp, "tid")),
                         json_integer_value(json_object_get(flow[k], "tid")));
        assert_int_equal(pid, k >= 2 && k <= 6 ? server : trainer);
    }

    /* The metadata: each node's offset and uncertainty, nothing dropped. */
    json_t *meta = json_object_get(doc, "metadata");
    assert_int_equal(json_integer_value(json_object_get(meta, "flows")), 1);
    assert_int_equal(json_integer_value(json_object_get(meta, "dropped")), 0);
    json_array_foreach (meta_nodes, i, e) {
        const char *process = json_string_value(json_object_get(e, "process"));
        json_int_t off = json_integer_value(json_object_get(e, "offset_ns"));
        json_int_t u = json_integer_value(json_object_get(e, "uncertainty_ns"));
        if (strcmp(process, "trainer 0") == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "clock")), "aligned");
            assert_true(off >= TRAINER_SKEW - u && off <= TRAINER_SKEW + u && u > 0);
            assert_int_equal(json_integer_value(json_object_get(e, "samples")), 8);
        } else if (strcmp(process, "server 1") == 0) {
            assert_true(off >= SERVER_SKEW - u && off <= SERVER_SKEW + u);
        } else {
            assert_string_equal(process, "master");
            assert_string_equal(json_string_value(json_object_get(e, "clock")), "master");
            assert_true(off == 0 && u == 0);
        }
        assert_true(json_is_null(json_object_get(e, "dropped_message")));
    }
    json_decref(doc);
    job_free(&j);
}

/* Without the offsets, the server's fold (its clock 7 s behind the
 * trainer's) would come before the push it folds. */
static void test_unaligned_misorders(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_UNALIGNED);
    json_t *doc = merge_checked(j.out, 3, NULL);
    json_int_t trainer = pid_of(doc, "trainer 0"), server = pid_of(doc, "server 1");
    assert_true(ts_of(span_in(doc, "fold", server)) < ts_of(span_in(doc, "frame_out", trainer)));
    json_t *e;
    size_t i;
    json_array_foreach (json_object_get(json_object_get(doc, "metadata"), "nodes"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "process")), "master") != 0)
            assert_string_equal(json_string_value(json_object_get(e, "clock")), "unaligned");
    }
    json_decref(doc);
    job_free(&j);
}

/* Exact offsets: exact times, in microseconds from the earliest span. */
static void test_exact_times(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_ALIGNED);
    j.out[0].clock = (clockoff){.offset_ns = TRAINER_SKEW, .uncertainty_ns = 0};
    j.out[1].clock = (clockoff){.offset_ns = SERVER_SKEW, .uncertainty_ns = 0};
    char *text;
    json_t *doc = merge_checked(j.out, 3, &text);
    json_int_t server = pid_of(doc, "server 1");
    assert_true(ts_of(span_in(doc, "fold", server)) == 240.0);
    assert_true(json_number_value(json_object_get(span_in(doc, "device_job", server), "dur")) == 100.0);
    assert_contains(text, "\"name\":\"fold\",\"cat\":\"server\",\"ph\":\"X\",\"ts\":240.000,\"dur\":60.000");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "metadata"), "origin_ns")),
                     (json_int_t)MASTER_T0);
    free(text);
    json_decref(doc);
    job_free(&j);
}

/* The same bytes for the same input, whatever the nodes' order. */
static void test_deterministic(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_ALIGNED);
    char err[256];
    char *a = trace_out_json(j.out, 3, NULL, err, sizeof err);
    char *b = trace_out_json(j.out, 3, NULL, err, sizeof err);
    trace_out_node rev[3] = {j.out[2], j.out[1], j.out[0]};
    char *c = trace_out_json(rev, 3, NULL, err, sizeof err);
    assert_true(a && b && c);
    assert_string_equal(a, b);
    assert_string_equal(a, c);
    free(a);
    free(b);
    free(c);
    job_free(&j);
}

static void test_refused_and_dropped(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_SAME);
    char err[256] = "";
    trace_out_node two[2] = {j.out[0], j.out[0]};
    assert_null(trace_out_json(two, 2, NULL, err, sizeof err));
    assert_contains(err, "two traces of trainer 0");

    /* A lane out of range (a dump made by hand). */
    j.dump[1]->ev[0].lane = 9;
    assert_null(trace_out_json(j.out, 3, NULL, err, sizeof err));
    assert_contains(err, "trace of server 1: span 0");
    j.dump[1]->ev[0].lane = 0;

    /* What was dropped, said in the metadata. */
    j.dump[0]->drops = (trace_drops){.count = 12345, .first_step = 5, .last_step = 9};
    json_t *doc = merge_checked(j.out, 3, NULL);
    json_t *meta = json_object_get(doc, "metadata");
    assert_int_equal(json_integer_value(json_object_get(meta, "dropped")), 12345);
    json_t *first = json_array_get(json_object_get(meta, "nodes"), 0);
    assert_string_equal(
        json_string_value(json_object_get(first, "dropped_message")),
        "trace of trainer 0: 12,345 spans of steps 5..9 dropped: the ring holds 64; raise --trace-buffer");
    json_decref(doc);

    /* No node at all: an empty trace, still a document. */
    doc = merge_checked(NULL, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(doc, "traceEvents")), 0);
    json_decref(doc);
    job_free(&j);
}

/* Decoded dumps merge as the snapshots do: the master's path. */
static void test_from_decoded(void **state)
{
    (void)state;
    job j;
    job_make(&j, TRACE_OUT_ALIGNED);
    char err[256];
    char *direct = trace_out_json(j.out, 3, NULL, err, sizeof err);
    trace_dump *dec[3];
    trace_out_node out[3];
    for (int i = 0; i < 3; i++) {
        char *json = trace_dump_encode(j.dump[i]);
        assert_non_null(json);
        dec[i] = trace_dump_decode(json, strlen(json), err, sizeof err);
        assert_non_null(dec[i]);
        free(json);
        out[i] = j.out[i];
        out[i].dump = dec[i];
    }
    char *via = trace_out_json(out, 3, NULL, err, sizeof err);
    assert_string_equal(direct, via);
    free(direct);
    free(via);
    for (int i = 0; i < 3; i++)
        trace_dump_free(dec[i]);
    job_free(&j);
}

/* The master's phases labelled, and nodes with no span (their clocks
 * only, as the master has them before the nodes record): each still a
 * process, its clock in the metadata; a label that is not plain text is
 * refused. */
static void test_labels_and_empty_nodes(void **state)
{
    (void)state;
    char err[256];
    trace_conf c = {.role = TRACE_MASTER, .on = true, .capacity = 8, .window = TRACE_ALL_STEPS};
    trace_node *m = trace_node_new(&c, err, sizeof err);
    assert_non_null(m);
    int phases = trace_lane(m, "phases");
    trace_ring *mr = trace_ring_add(m, "phases");
    trace_ring_step(mr, TRACE_NO_STEP);
    span_at(mr, TRACE_PHASE, phases, 0, 100, 0, trace_ids_none());
    span_at(mr, TRACE_PHASE, phases, 100, 300, 0, trace_ids_none());
    trace_dump *md = trace_node_snapshot(m);
    trace_dump empty[2] = {{.role = TRACE_TRAINER, .rank = 0, .window = TRACE_ALL_STEPS, .capacity = 8},
                           {.role = TRACE_SERVER, .rank = 0, .window = TRACE_ALL_STEPS, .capacity = 8}};
    const char *labels[] = {"waiting", "warmup"};
    trace_out_node nodes[3] = {
        {.dump = md, .state = TRACE_OUT_SAME, .label = labels},
        {.dump = &empty[0], .state = TRACE_OUT_ALIGNED, .clock = {.offset_ns = -1234, .uncertainty_ns = 56, .used = 8}},
        {.dump = &empty[1], .state = TRACE_OUT_UNALIGNED},
    };
    json_t *doc = merge_checked(nodes, 3, NULL);
    json_int_t mp = pid_of(doc, "master");
    pid_of(doc, "trainer 0");
    pid_of(doc, "server 0");
    size_t i, k = 0;
    json_t *e;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0)
            continue;
        assert_int_equal(json_integer_value(json_object_get(e, "pid")), mp);
        assert_true(k < 2);
        assert_string_equal(json_string_value(json_object_get(json_object_get(e, "args"), "label")), labels[k++]);
    }
    assert_int_equal(k, 2);
    json_t *meta = json_object_get(json_object_get(doc, "metadata"), "nodes");
    assert_int_equal(json_array_size(meta), 3);
    json_t *t0 = json_array_get(meta, 0), *s0 = json_array_get(meta, 1);
    assert_string_equal(json_string_value(json_object_get(t0, "process")), "trainer 0");
    assert_string_equal(json_string_value(json_object_get(t0, "clock")), "aligned");
    assert_int_equal(json_integer_value(json_object_get(t0, "offset_ns")), -1234);
    assert_int_equal(json_integer_value(json_object_get(t0, "uncertainty_ns")), 56);
    assert_string_equal(json_string_value(json_object_get(s0, "clock")), "unaligned");
    json_decref(doc);

    const char *bad[] = {"wait\"ing", NULL};
    nodes[0].label = bad;
    assert_null(trace_out_json(nodes, 1, NULL, err, sizeof err));
    assert_non_null(strstr(err, "label is not plain text"));
    trace_dump_free(md);
    trace_node_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merged_two_nodes),    cmocka_unit_test(test_unaligned_misorders),
        cmocka_unit_test(test_exact_times),         cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_refused_and_dropped), cmocka_unit_test(test_from_decoded),
        cmocka_unit_test(test_labels_and_empty_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
