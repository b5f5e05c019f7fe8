/* test_trace_an.c — unit tests for master/trace_an (issue 42): a
 * synthetic job whose answer is known exactly — trainers 0 and 1 (trainer
 * 1's clock 2 s behind the master's), server 0 (its clock 1 s ahead),
 * four steps (batches 0..3) of two buckets each — read through
 * trace_out_spans and back from trace_out's document: the steps, the
 * representative step (the median rule), each bucket's parts, the
 * critical path, the step's JSON; and the clocks' clamp.
 *
 * The job, each step at master time T = batch x 1000 us, in us from T
 * (bucket 1 the same as bucket 0, 8 us earlier), trainer t:
 *   forward [0,10], backward_compute [10,30], bucket_ready [20,21],
 *   frame_out [22+t, 23+t], bucket_wait [23+t, 35+2t],
 *   server push_recv of t [24+3(1-t), 25+3(1-t)] (trainer 0's is the last in, at 28),
 *   fold of t [end of its push_recv, +2], resolve [30,31] (no trainer),
 *   answer_out to t [32+t, 33+t], frame_in [33+t, 35+2t],
 *   bucket_apply [36+2t, 37+3t], exposed_wait [35+2t, 36+2t],
 *   optimizer [S_t-5, S_t], step [0, S_t], S_1 = 100, 60, 80, 70 by batch, S_0 = S_1 - 5.
 * So per bucket: queue 2+t, wire 6 (t 0) / 2 (t 1), straggler 0 / 3,
 * fold 4+t, return 3+t, apply 1+t; the representative step is batch 3
 * (70: the median of 60, 80, 70 once batch 0 is left out); its critical
 * path runs from trainer 0's forward (the last push in) to trainer 1's
 * optimizer (the last to start). The figures are exact: every offset is
 * estimated exactly (no jitter). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fixture.h"
#include "master/trace_an.h"
#include "master/trace_out.h"
#include "shared/trace.h"

#define US 1000
#define S_NS 1000000000LL
#define MASTER_T0 (1000 * S_NS)
#define NBATCH 4

static const int64_t skew_of[3] = {0, -2 * S_NS, S_NS}; /* trainer 0, trainer 1, server 0 */
static const int64_t slowest[NBATCH] = {100, 60, 80, 70};

typedef struct job {
    trace_dump *d[3];
    trace_out_node out[3];
} job;

static void add(trace_dump *d, int node, trace_span s, unsigned lane, int64_t batch, int64_t a, int64_t b,
                trace_ids ids)
{
    int64_t t = MASTER_T0 + batch * 1000 * US + skew_of[node];
    d->ev[d->nev++] = (trace_event){.start_ns = (uint64_t)(t + a * US),
                                    .end_ns = (uint64_t)(t + b * US),
                                    .ids = ids,
                                    .span = (uint16_t)s,
                                    .lane = (uint16_t)lane};
}

static trace_dump *dump_new(trace_role role, uint32_t rank, const char *const *lanes, size_t nlanes)
{
    trace_dump *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->role = role;
    d->rank = rank;
    d->window = (trace_window){0, 100};
    d->capacity = 1024;
    d->nlanes = nlanes;
    for (size_t i = 0; i < nlanes; i++)
        snprintf(d->lane[i], TRACE_NAME_MAX, "%s", lanes[i]);
    d->ev = calloc(1024, sizeof *d->ev);
    assert_non_null(d->ev);
    return d;
}

static void an_job_make(job *j)
{
    static const char *const tl[] = {"main", "comm"}, *const sl[] = {"reactor"};
    for (int t = 0; t < 2; t++)
        j->d[t] = dump_new(TRACE_TRAINER, (uint32_t)t, tl, 2);
    j->d[2] = dump_new(TRACE_SERVER, 0, sl, 1);
    for (int64_t b = 0; b < NBATCH; b++)
        for (int t = 0; t < 2; t++) {
            trace_dump *d = j->d[t], *sv = j->d[2];
            int64_t st = slowest[b] - (t == 0 ? 5 : 0);
            trace_ids none = trace_ids_make(b, TRACE_NONE, t, TRACE_NONE);
            add(d, t, TRACE_STEP, 0, b, 0, st, none);
            add(d, t, TRACE_FORWARD, 0, b, 0, 10, none);
            add(d, t, TRACE_BACKWARD_COMPUTE, 0, b, 10, 30, none);
            for (int64_t k = 0; k < 2; k++) {
                int64_t o = k == 1 ? -8 : 0;
                trace_ids id = trace_ids_make(b, k, t, 0);
                add(d, t, TRACE_BUCKET_READY, 0, b, 20 + o, 21 + o, id);
                add(d, t, TRACE_FRAME_OUT, 1, b, 22 + t + o, 23 + t + o, id);
                add(d, t, TRACE_BUCKET_WAIT, 0, b, 23 + t + o, 35 + 2 * t + o, id);
                add(sv, 2, TRACE_PUSH_RECV, 0, b, 24 + 3 * (1 - t) + o, 25 + 3 * (1 - t) + o, id);
                add(sv, 2, TRACE_FOLD, 0, b, 25 + 3 * (1 - t) + o, 27 + 3 * (1 - t) + o, id);
                if (t == 1)
                    add(sv, 2, TRACE_RESOLVE, 0, b, 30 + o, 31 + o, trace_ids_make(b, k, TRACE_NONE, 0));
                add(sv, 2, TRACE_ANSWER_OUT, 0, b, 32 + t + o, 33 + t + o, id);
                add(d, t, TRACE_FRAME_IN, 1, b, 33 + t + o, 35 + 2 * t + o, id);
                add(d, t, TRACE_BUCKET_APPLY, 0, b, 36 + 2 * t + o, 37 + 3 * t + o, id);
            }
            add(d, t, TRACE_EXPOSED_WAIT, 0, b, 35 + 2 * t, 36 + 2 * t, none);
            add(d, t, TRACE_OPTIMIZER, 0, b, st - 5, st, none);
        }
    for (int i = 0; i < 3; i++) {
        j->out[i] = (trace_out_node){.dump = j->d[i], .state = TRACE_OUT_ALIGNED};
        j->out[i].clock = (clockoff){.offset_ns = skew_of[i], .uncertainty_ns = 5 * US, .used = 8};
    }
    j->out[0].state = TRACE_OUT_SAME;
}

static void an_job_free(job *j)
{
    for (int i = 0; i < 3; i++)
        trace_dump_free(j->d[i]);
}

static trace_out_span *spans_of(job *j, size_t *n)
{
    trace_out_span *sp;
    char err[256];
    assert_int_equal(trace_out_spans(j->out, 3, &sp, n, err, sizeof err), 0);
    return sp;
}

static void check_steps(const trace_out_span *sp, size_t n)
{
    trace_an_step *st;
    size_t nst;
    assert_int_equal(trace_an_steps(sp, n, &st, &nst), 0);
    assert_int_equal(nst, NBATCH);
    for (size_t i = 0; i < nst; i++) {
        assert_int_equal(st[i].batch, (int64_t)i);
        assert_int_equal(st[i].ntrainers, 2);
        assert_int_equal(st[i].slowest_ns, slowest[i] * US);
        assert_int_equal(st[i].start_ns, MASTER_T0 + (int64_t)i * 1000 * US);
    }
    assert_int_equal(trace_an_trainers(sp, n), 2);
    assert_int_equal(trace_an_representative(st, nst, 0), 3);
    assert_int_equal(trace_an_representative(st, nst, 2), 3);
    assert_int_equal(trace_an_last_complete(st, nst, 2), 3);
    /* Three trainers asked for: no step is complete. */
    assert_int_equal(trace_an_representative(st, nst, 3), -1);
    assert_int_equal(trace_an_last_complete(st, nst, 3), -1);
    /* Two steps: nothing left out, the lower median (60 of 100, 60). */
    assert_int_equal(trace_an_representative(st, 2, 0), 1);
    free(st);
}

static void check_buckets(const trace_out_span *sp, size_t n)
{
    trace_an_bucket *b;
    size_t nb;
    assert_int_equal(trace_an_buckets(sp, n, &b, &nb), 0);
    assert_int_equal(nb, NBATCH * 2 * 2);
    for (size_t i = 0; i < nb; i++) {
        int64_t t = b[i].trainer;
        assert_int_equal(b[i].batch, (int64_t)(i / 4));
        assert_int_equal(b[i].bucket, (int64_t)(i / 2 % 2));
        assert_int_equal(t, (int64_t)(i % 2));
        assert_int_equal(b[i].server, 0);
        const int64_t want[TRACE_AN_NPARTS] = {2 + t, t == 0 ? 6 : 2, t == 0 ? 0 : 3, 4 + t, 3 + t, 1 + t};
        for (int p = 0; p < TRACE_AN_NPARTS; p++) {
            assert_int_equal(b[i].part[p], want[p] * US);
            assert_false(b[i].clamped[p]);
        }
    }
    free(b);
}

static void check_critical(const trace_out_span *sp, size_t n)
{
    size_t *c, nc;
    assert_int_equal(trace_an_critical(sp, n, 3, &c, &nc), 0);
    static const struct {
        trace_role role;
        uint32_t rank;
        trace_span span;
    } want[] = {
        {TRACE_TRAINER, 0, TRACE_FORWARD},      {TRACE_TRAINER, 0, TRACE_BACKWARD_COMPUTE},
        {TRACE_TRAINER, 0, TRACE_BUCKET_READY}, {TRACE_TRAINER, 0, TRACE_FRAME_OUT},
        {TRACE_SERVER, 0, TRACE_PUSH_RECV},     {TRACE_SERVER, 0, TRACE_FOLD},
        {TRACE_SERVER, 0, TRACE_RESOLVE},       {TRACE_SERVER, 0, TRACE_ANSWER_OUT},
        {TRACE_TRAINER, 1, TRACE_FRAME_IN},     {TRACE_TRAINER, 1, TRACE_BUCKET_WAIT},
        {TRACE_TRAINER, 1, TRACE_EXPOSED_WAIT}, {TRACE_TRAINER, 1, TRACE_OPTIMIZER},
    };
    assert_int_equal(nc, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < nc; i++) {
        const trace_out_span *s = &sp[c[i]];
        assert_int_equal(s->role, want[i].role);
        assert_int_equal(s->rank, want[i].rank);
        assert_int_equal(s->span, want[i].span);
        assert_int_equal(s->ids.batch, 3);
        if (s->ids.bucket >= 0) /* bucket 0's answer came in last */
            assert_int_equal(s->ids.bucket, 0);
    }
    /* The fold of the last push: trainer 0's. */
    assert_int_equal(sp[c[5]].ids.trainer, 0);
    free(c);
    /* No optimizer of that batch: no path. */
    assert_int_equal(trace_an_critical(sp, n, 9, &c, &nc), 0);
    assert_int_equal(nc, 0);
    free(c);
}

static void test_live_spans(void **state)
{
    (void)state;
    job j;
    an_job_make(&j);
    size_t n;
    trace_out_span *sp = spans_of(&j, &n);
    check_steps(sp, n);
    check_buckets(sp, n);
    check_critical(sp, n);
    free(sp);
    an_job_free(&j);
}

/* The same answers from the document trace_out writes, read back. */
static void test_from_document(void **state)
{
    (void)state;
    job j;
    an_job_make(&j);
    char err[256];
    char *text = trace_out_json(j.out, 3, NULL, err, sizeof err);
    assert_non_null(text);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    assert_non_null(doc);
    trace_an_trace t;
    if (trace_an_load(doc, &t, err, sizeof err) != 0)
        fail_msg("trace_an_load: %s", err);
    assert_int_equal(t.ntrainers, 2);
    assert_int_equal(t.nservers, 1);
    check_steps(t.sp, t.n);
    check_buckets(t.sp, t.n);
    check_critical(t.sp, t.n);

    /* The representative step as JSON: its lanes, spans, flows, path. */
    json_t *step = trace_an_representative_json(&t);
    assert_non_null(step);
    assert_int_equal(json_integer_value(json_object_get(step, "batch")), 3);
    assert_true(json_real_value(json_object_get(step, "step_ms")) == 0.07);
    json_t *lanes = json_object_get(step, "lanes");
    assert_int_equal(json_array_size(lanes), 5); /* trainer 0 main, comm; trainer 1 main, comm; server 0 reactor */
    assert_string_equal(json_string_value(json_object_get(json_array_get(lanes, 4), "process")), "server 0");
    assert_string_equal(json_string_value(json_object_get(json_array_get(lanes, 1), "lane")), "comm");
    json_t *spans = json_object_get(step, "spans");
    /* per trainer 5 + 5 x 2 buckets; the server 2 x (2 x 3 + 1) */
    assert_int_equal(json_array_size(spans), 2 * 15 + 14);
    json_t *crit = json_object_get(step, "critical");
    assert_int_equal(json_array_size(crit), 12);
    json_t *first = json_array_get(spans, (size_t)json_integer_value(json_array_get(crit, 0)));
    assert_string_equal(json_string_value(json_object_get(first, "name")), "forward");
    assert_int_equal(json_integer_value(json_object_get(first, "lane")), 0);
    assert_true(json_real_value(json_object_get(first, "ts")) == 0.0);
    json_t *last = json_array_get(spans, (size_t)json_integer_value(json_array_get(crit, 11)));
    assert_string_equal(json_string_value(json_object_get(last, "name")), "optimizer");
    assert_int_equal(json_integer_value(json_object_get(last, "lane")), 2);
    assert_true(json_real_value(json_object_get(last, "ts")) == 65.0);
    /* Each (bucket, trainer): frame_out -> push_recv, and answer_out -> frame_in. */
    json_t *flows = json_object_get(step, "flows");
    assert_int_equal(json_array_size(flows), 2 * 2 * 2);
    size_t i;
    json_t *f;
    json_array_foreach (flows, i, f) {
        json_t *a = json_array_get(spans, (size_t)json_integer_value(json_object_get(f, "from")));
        json_t *b = json_array_get(spans, (size_t)json_integer_value(json_object_get(f, "to")));
        const char *an = json_string_value(json_object_get(a, "name")),
                   *bn = json_string_value(json_object_get(b, "name"));
        assert_true((strcmp(an, "frame_out") == 0 && strcmp(bn, "push_recv") == 0) ||
                    (strcmp(an, "answer_out") == 0 && strcmp(bn, "frame_in") == 0));
    }
    json_t *bk = json_array_get(json_object_get(step, "buckets"), 1); /* bucket 0, trainer 1 */
    assert_int_equal(json_integer_value(json_object_get(bk, "trainer")), 1);
    assert_true(json_real_value(json_object_get(bk, "wire_ms")) == 0.002);
    assert_true(json_real_value(json_object_get(bk, "straggler_ms")) == 0.003);
    json_decref(step);
    trace_an_trace_free(&t);

    /* Not a trace.json: refused with a reason. */
    json_t *bad = json_pack("{s:[]}", "traceEvents");
    assert_int_equal(trace_an_load(bad, &t, err, sizeof err), -1);
    assert_contains(err, "psbench_trace");
    json_decref(bad);

    /* The fixture of `psbench-master trace summarize`'s test is this
     * job's document (PSBENCH_TRACE_FIXTURE=PATH writes it again). */
    const char *regen = getenv("PSBENCH_TRACE_FIXTURE");
    if (regen) {
        FILE *fp = fopen(regen, "w");
        assert_non_null(fp);
        fputs(text, fp);
        assert_int_equal(fclose(fp), 0);
    }
    char *fixture = slurp(PSBENCH_TRACE_FIXTURE_PATH, NULL);
    assert_non_null(fixture);
    assert_string_equal(fixture, text);
    free(fixture);
    json_decref(doc);
    free(text);
    an_job_free(&j);
}

/* Across clocks: a push that reads as in before it went out, by less than
 * the two offsets' uncertainty together (5 + 5 us), is wire 0, said
 * clamped; by more, unknown; on one clock never clamped. */
static void test_clamp(void **state)
{
    (void)state;
    static const int64_t late[] = {3, 20};
    for (int c = 0; c < 2; c++) {
        job j;
        an_job_make(&j);
        /* trainer 1's frame_out of batch 0 bucket 0 moved late */
        trace_dump *d = j.d[1];
        for (size_t i = 0; i < d->nev; i++) {
            trace_event *e = &d->ev[i];
            if (e->span == TRACE_FRAME_OUT && e->ids.batch == 0 && e->ids.bucket == 0) {
                /* its push_recv ends at 25 (master time): out at 25 + late */
                int64_t at = MASTER_T0 + skew_of[1] + (25 + late[c]) * US;
                e->end_ns = (uint64_t)at + (e->end_ns - e->start_ns);
                e->start_ns = (uint64_t)at;
            }
            if (e->span == TRACE_BUCKET_READY && e->ids.batch == 0 && e->ids.bucket == 0)
                e->start_ns = e->end_ns = (uint64_t)(MASTER_T0 + skew_of[1] + 50 * US);
        }
        size_t n;
        trace_out_span *sp = spans_of(&j, &n);
        trace_an_bucket *b;
        size_t nb;
        assert_int_equal(trace_an_buckets(sp, n, &b, &nb), 0);
        assert_int_equal(b[1].trainer, 1);
        assert_int_equal(b[1].part[TRACE_AN_WIRE], c == 0 ? 0 : TRACE_AN_UNKNOWN);
        assert_int_equal(b[1].clamped[TRACE_AN_WIRE], c == 0);
        /* ready after frame_out, one clock: unknown, never clamped */
        assert_int_equal(b[1].part[TRACE_AN_QUEUE], TRACE_AN_UNKNOWN);
        assert_false(b[1].clamped[TRACE_AN_QUEUE]);
        free(b);
        free(sp);
        an_job_free(&j);
    }
}

/* A server that answers every trainer with one answer (answer_out with no
 * trainer): each trainer's flow still goes through it (a line to each
 * trainer's frame_in), and its fold and return are from it. */
static void test_shared_answer(void **state)
{
    (void)state;
    job j;
    an_job_make(&j);
    trace_dump *sv = j.d[2];
    for (size_t i = 0; i < sv->nev; i++)
        if (sv->ev[i].span == TRACE_ANSWER_OUT)
            sv->ev[i].ids.trainer = TRACE_NONE; /* trainer 0's at 32 us and trainer 1's at 33: the first is taken */
    size_t n;
    trace_out_span *sp = spans_of(&j, &n);
    json_t *step = trace_an_step_json(sp, n, 3, 2, "test");
    assert_non_null(step);
    json_t *spans = json_object_get(step, "spans"), *flows = json_object_get(step, "flows");
    assert_int_equal(json_array_size(flows), 8);
    size_t i, answers = 0;
    json_t *f;
    json_array_foreach (flows, i, f) {
        json_t *a = json_array_get(spans, (size_t)json_integer_value(json_object_get(f, "from")));
        if (strcmp(json_string_value(json_object_get(a, "name")), "answer_out") == 0) {
            answers++;
            assert_null(json_object_get(a, "trainer"));
        }
    }
    assert_int_equal(answers, 4);
    json_decref(step);
    trace_an_bucket *b;
    size_t nb;
    assert_int_equal(trace_an_buckets(sp, n, &b, &nb), 0);
    assert_int_equal(nb, NBATCH * 2 * 2);
    for (size_t k = 0; k < nb; k++) {
        int64_t t = b[k].trainer;
        assert_int_equal(b[k].part[TRACE_AN_FOLD], 4 * US); /* 32 - 28 */
        assert_int_equal(b[k].part[TRACE_AN_RETURN], (35 + 2 * t - 32) * US);
    }
    free(b);
    free(sp);
    an_job_free(&j);
}

/* The critical path of batch 0 of trainer dump d and server dump sv
 * (server 0's clock 1 s ahead, 5 us uncertain) against want (span, start
 * in us on the master's clock, forward first); frees both dumps. */
typedef struct want_span {
    trace_span span;
    int64_t start_us;
} want_span;

static void check_path(trace_dump *d, trace_dump *sv, const want_span *want, size_t nwant)
{
    trace_out_node out[2] = {{.dump = d, .state = TRACE_OUT_SAME}, {.dump = sv, .state = TRACE_OUT_ALIGNED}};
    out[1].clock = (clockoff){.offset_ns = skew_of[2], .uncertainty_ns = 5 * US, .used = 8};
    trace_out_span *sp;
    size_t n;
    char err[256];
    assert_int_equal(trace_out_spans(out, 2, &sp, &n, err, sizeof err), 0);
    size_t *path, np;
    assert_int_equal(trace_an_critical(sp, n, 0, &path, &np), 0);
    assert_int_equal(np, nwant);
    for (size_t i = 0; i < np; i++) {
        assert_int_equal(sp[path[i]].span, want[i].span);
        assert_int_equal(sp[path[i]].start_ns, MASTER_T0 + want[i].start_us * US);
    }
    free(path);
    free(sp);
    trace_dump_free(d);
    trace_dump_free(sv);
}

/* Calls of no bucket (the HybridModel's: a lookup, then an update, to
 * the same server in one batch, under the same ids): the critical path
 * goes through the update's own spans (those within its wait), not the
 * lookup's answer, and back through the compute before it. Trainer 0 on
 * the master's clock, server 0 on its own (1 s ahead), in us:
 *   lookup: bucket_wait [2,10], frame_out [2,3], push_recv [4,5], fold
 *     [5,6], answer_out [7,8], frame_in [8,10];
 *   forward [10,20], backward_compute [20,30], exposed_wait [30,50];
 *   update: bucket_wait [31,48], frame_out [31,32], push_recv [33,34],
 *     fold [34,40], answer_out [41,42], frame_in [43,48];
 *   optimizer [50,55], step [0,55]; and a frame_in [60,62] after it (the
 *   psbench pattern's last confirmation, awaited after the step).
 * Late: the update's wait ends at 51, after the optimizer starts (the
 * communication thread reads its clock after waking the compute thread:
 * seen in integration_trace_trainer), and is still the path's. */
static void calls_of_no_bucket(bool late)
{
    static const char *const tl[] = {"compute", "rpc server 0", "to server 0", "from server 0"};
    static const char *const sl[] = {"reactor"};
    trace_dump *d = dump_new(TRACE_TRAINER, 0, tl, 4), *sv = dump_new(TRACE_SERVER, 0, sl, 1);
    trace_ids none = trace_ids_make(0, TRACE_NONE, 0, TRACE_NONE), call = trace_ids_make(0, TRACE_NONE, 0, 0);
    add(d, 0, TRACE_STEP, 0, 0, 0, 55, none);
    for (int u = 0; u < 2; u++) {
        int64_t o = u ? 29 : 0, w = u ? 48 : 10; /* the update: 29 us on, its wait longer */
        add(d, 0, TRACE_BUCKET_WAIT, 1, 0, 2 + o, u && late ? 51 : w, call);
        add(d, 0, TRACE_FRAME_OUT, 2, 0, 2 + o, 3 + o, call);
        add(sv, 2, TRACE_PUSH_RECV, 0, 0, 4 + o, 5 + o, call);
        add(sv, 2, TRACE_FOLD, 0, 0, 5 + o, u ? 40 : 6, call);
        /* The update's answer ends (its last byte in the socket) after the
         * trainer read it, beyond the clocks' 5 us: still its call's. */
        add(sv, 2, TRACE_ANSWER_OUT, 0, 0, u ? 41 : 7, u ? 58 : 8, call);
        add(d, 0, TRACE_FRAME_IN, 3, 0, u ? 43 : 8, w, call);
    }
    add(d, 0, TRACE_FORWARD, 0, 0, 10, 20, none);
    add(d, 0, TRACE_BACKWARD_COMPUTE, 0, 0, 20, 30, none);
    add(d, 0, TRACE_EXPOSED_WAIT, 0, 0, 30, 50, none);
    add(d, 0, TRACE_OPTIMIZER, 0, 0, 50, 55, none);
    add(d, 0, TRACE_FRAME_IN, 3, 0, 60, 62, call); /* a confirmation awaited after the step: not on the path */
    static const want_span want[] = {
        {TRACE_FORWARD, 10},      {TRACE_BACKWARD_COMPUTE, 20}, {TRACE_FRAME_OUT, 31}, {TRACE_PUSH_RECV, 33},
        {TRACE_FOLD, 34},         {TRACE_ANSWER_OUT, 41},       {TRACE_FRAME_IN, 43},  {TRACE_BUCKET_WAIT, 31},
        {TRACE_EXPOSED_WAIT, 30}, {TRACE_OPTIMIZER, 50}};
    check_path(d, sv, want, sizeof want / sizeof want[0]);
}

static void test_calls_of_no_bucket(void **state)
{
    (void)state;
    calls_of_no_bucket(false);
    calls_of_no_bucket(true);
}

/* The psbench pattern on a loaded host: the update goes out unawaited and
 * its confirmation comes in before the optimizer starts (trainer 0's
 * exposed wait is long: it waits for its dense bucket). No wait took that
 * answer: it decided nothing, and the path runs through the lookup's, the
 * last answer the trainer waited for (seen in integration_trace_trainer's
 * test_hybrid, CI14 and CI16). Same clocks as above, in us:
 *   lookup: bucket_wait [2,10], frame_out [2,3], push_recv [4,5], fold
 *     [5,6], answer_out [7,8], frame_in [8,10];
 *   forward [10,20], backward_compute [20,30], exposed_wait [30,50];
 *   update, no wait: frame_out [31,32], push_recv [33,34], fold [34,40],
 *     answer_out [41,42], frame_in [43,44];
 *   optimizer [50,55], step [0,55]. */
static void test_unawaited_confirmation(void **state)
{
    (void)state;
    static const char *const tl[] = {"compute", "rpc server 0", "to server 0", "from server 0"};
    static const char *const sl[] = {"reactor"};
    trace_dump *d = dump_new(TRACE_TRAINER, 0, tl, 4), *sv = dump_new(TRACE_SERVER, 0, sl, 1);
    trace_ids none = trace_ids_make(0, TRACE_NONE, 0, TRACE_NONE), call = trace_ids_make(0, TRACE_NONE, 0, 0);
    add(d, 0, TRACE_STEP, 0, 0, 0, 55, none);
    for (int u = 0; u < 2; u++) {
        int64_t o = u ? 29 : 0;
        if (!u)
            add(d, 0, TRACE_BUCKET_WAIT, 1, 0, 2, 10, call);
        add(d, 0, TRACE_FRAME_OUT, 2, 0, 2 + o, 3 + o, call);
        add(sv, 2, TRACE_PUSH_RECV, 0, 0, 4 + o, 5 + o, call);
        add(sv, 2, TRACE_FOLD, 0, 0, 5 + o, u ? 40 : 6, call);
        add(sv, 2, TRACE_ANSWER_OUT, 0, 0, u ? 41 : 7, u ? 42 : 8, call);
        add(d, 0, TRACE_FRAME_IN, 3, 0, u ? 43 : 8, u ? 44 : 10, call);
    }
    add(d, 0, TRACE_FORWARD, 0, 0, 10, 20, none);
    add(d, 0, TRACE_BACKWARD_COMPUTE, 0, 0, 20, 30, none);
    add(d, 0, TRACE_EXPOSED_WAIT, 0, 0, 30, 50, none);
    add(d, 0, TRACE_OPTIMIZER, 0, 0, 50, 55, none);
    static const want_span want[] = {{TRACE_FRAME_OUT, 2},     {TRACE_PUSH_RECV, 4}, {TRACE_FOLD, 5},
                                     {TRACE_ANSWER_OUT, 7},    {TRACE_FRAME_IN, 8},  {TRACE_BUCKET_WAIT, 2},
                                     {TRACE_EXPOSED_WAIT, 30}, {TRACE_OPTIMIZER, 50}};
    check_path(d, sv, want, sizeof want / sizeof want[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_spans),    cmocka_unit_test(test_from_document),      cmocka_unit_test(test_clamp),
        cmocka_unit_test(test_shared_answer), cmocka_unit_test(test_calls_of_no_bucket),
        cmocka_unit_test(test_unawaited_confirmation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
