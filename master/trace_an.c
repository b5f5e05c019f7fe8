/* trace_an.c — what a merged trace says (see trace_an.h).
 *
 * Spans are matched by their ids: a trainer's spans carry trainer = its
 * rank and batch = the step, a bucket's spans the bucket too; a server's
 * spans for one trainer's push carry that trainer, those for the bucket
 * as a whole (a resolve, a device job) none. Lookups are linear scans of
 * a group of spans: a bucket's group (one batch's one bucket) holds a few
 * spans per trainer, and one step's critical path a dozen scans of the
 * trace.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "master/trace_an.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An id that matches anything (TRACE_NONE matches only none). */
#define TA_ANY (-2)

static const char *const ta_part_names[TRACE_AN_NPARTS] = {"queue", "wire", "straggler", "fold", "return", "apply"};

const char *trace_an_part_name(trace_an_part p)
{
    assert(p < TRACE_AN_NPARTS);
    return ta_part_names[p];
}

/* ---- matching spans --------------------------------------------------------------- */

typedef enum { TA_EARLIEST_START, TA_LATEST_START, TA_LATEST_END } ta_pick_by;

typedef struct ta_want {
    int role;        /* trace_role */
    int64_t rank;    /* TA_ANY */
    int span;        /* trace_span */
    int64_t batch;   /* TA_ANY */
    int64_t bucket;  /* TA_ANY */
    int64_t trainer; /* TA_ANY, TRACE_NONE */
    ta_pick_by by;
    /* A call of no bucket (a trainer's lookups and updates: several per
     * batch and server under the same ids): the span starts within this
     * one's time (the call's wait; across two nodes, give or take their
     * clocks' uncertainty), or ends by the start of `before` (the same
     * node's). NULL: any time. Only its start: a server's `answer_out`
     * ends with its last byte in the socket, and the trainer may read it
     * (its wait over) before the server's clock is read again. One
     * trainer's calls to one server follow each other: a start tells
     * them apart. */
    const trace_out_span *within, *before;
    /* A call's wait: on the same node, for the same server, ending at or
     * after this span's start (its answer's frame_in): with TA_EARLIEST_START
     * the wait that took that answer (one trainer's waits on one server
     * follow each other; the answer may have come before its wait began,
     * where the calls go out ahead). NULL: any. */
    const trace_out_span *took;
} ta_want;

static bool ta_id_is(int64_t have, int64_t want) { return want == TA_ANY || have == want; }

static bool ta_same_node(const trace_out_span *a, const trace_out_span *b)
{
    return a->role == b->role && a->rank == b->rank;
}

static int64_t ta_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

static bool ta_in_time(const trace_out_span *s, const ta_want *w)
{
    if (w->before && s->end_ns > w->before->start_ns)
        return false;
    if (w->took && (s->ids.server != w->took->ids.server || s->end_ns < w->took->start_ns))
        return false;
    if (!w->within)
        return true;
    int64_t tol = ta_same_node(s, w->within) ? 0 : ta_sat_add(s->uncertainty_ns, w->within->uncertainty_ns);
    return s->start_ns >= ta_sat_add(w->within->start_ns, -tol) && s->start_ns <= ta_sat_add(w->within->end_ns, tol);
}

static bool ta_matches(const trace_out_span *s, const ta_want *w)
{
    return (int)s->role == w->role && s->span == w->span && ta_id_is(s->rank, w->rank) &&
           ta_id_is(s->ids.batch, w->batch) && ta_id_is(s->ids.bucket, w->bucket) &&
           ta_id_is(s->ids.trainer, w->trainer) && ta_in_time(s, w);
}

/* The span of idx[0..n) (NULL: every one of sp[0..n)) that matches w, the
 * first in idx's order among equals; -1: none. */
static ptrdiff_t ta_pick(const trace_out_span *sp, const size_t *idx, size_t n, const ta_want *w)
{
    ptrdiff_t best = -1;
    for (size_t k = 0; k < n; k++) {
        size_t i = idx ? idx[k] : k;
        const trace_out_span *s = &sp[i];
        if (!ta_matches(s, w))
            continue;
        if (best < 0) {
            best = (ptrdiff_t)i;
            continue;
        }
        const trace_out_span *b = &sp[best];
        bool better = w->by == TA_EARLIEST_START ? s->start_ns < b->start_ns
                      : w->by == TA_LATEST_START ? s->start_ns > b->start_ns
                                                 : s->end_ns > b->end_ns;
        if (better)
            best = (ptrdiff_t)i;
    }
    return best;
}

/* ---- steps ------------------------------------------------------------------------- */

static int ta_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The trainer-role `step` spans (batch known), as (batch, rank) pairs
 * sorted: [2k] batch, [2k+1] the span's index. */
static size_t ta_step_spans(const trace_out_span *sp, size_t n, size_t **out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += sp[i].role == TRACE_TRAINER && sp[i].span == TRACE_STEP && sp[i].ids.batch >= 0;
    *out = NULL;
    if (m == 0)
        return 0;
    size_t *v = malloc(m * sizeof *v);
    if (!v)
        return SIZE_MAX;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sp[i].role == TRACE_TRAINER && sp[i].span == TRACE_STEP && sp[i].ids.batch >= 0)
            v[k++] = i;
    *out = v;
    return m;
}

static int ta_cmp_step_span(const void *a, const void *b, void *ctx)
{
    const trace_out_span *sp = ctx, *x = &sp[*(const size_t *)a], *y = &sp[*(const size_t *)b];
    if (x->ids.batch != y->ids.batch)
        return x->ids.batch < y->ids.batch ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

int trace_an_steps(const trace_out_span *sp, size_t n, trace_an_step **out, size_t *nout)
{
    size_t *v;
    size_t m = ta_step_spans(sp, n, &v);
    *out = NULL;
    *nout = 0;
    if (m == SIZE_MAX)
        return -1;
    if (m == 0)
        return 0;
    qsort_r(v, m, sizeof *v, ta_cmp_step_span, (void *)sp);
    trace_an_step *st = malloc(m * sizeof *st);
    if (!st) {
        free(v);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        const trace_out_span *s = &sp[v[i]];
        int64_t dur = s->end_ns - s->start_ns;
        if (k == 0 || st[k - 1].batch != s->ids.batch) {
            st[k++] = (trace_an_step){
                .batch = s->ids.batch, .ntrainers = 1, .slowest_ns = dur, .start_ns = s->start_ns, .end_ns = s->end_ns};
            continue;
        }
        trace_an_step *t = &st[k - 1];
        /* A trainer counts once, whatever it recorded twice. */
        if (sp[v[i - 1]].rank != s->rank)
            t->ntrainers++;
        t->slowest_ns = dur > t->slowest_ns ? dur : t->slowest_ns;
        t->start_ns = s->start_ns < t->start_ns ? s->start_ns : t->start_ns;
        t->end_ns = s->end_ns > t->end_ns ? s->end_ns : t->end_ns;
    }
    free(v);
    *out = st;
    *nout = k;
    return 0;
}

uint32_t trace_an_trainers(const trace_out_span *sp, size_t n)
{
    /* Ranks are few (a trace's trainers): a sorted list of those seen. */
    int64_t seen[64];
    size_t nseen = 0;
    uint32_t more = 0; /* past the list: counted by a second pass below */
    for (size_t i = 0; i < n; i++) {
        if (sp[i].role != TRACE_TRAINER || sp[i].span != TRACE_STEP)
            continue;
        bool have = false;
        for (size_t k = 0; k < nseen && !have; k++)
            have = seen[k] == sp[i].rank;
        if (have)
            continue;
        if (nseen < sizeof seen / sizeof seen[0])
            seen[nseen++] = sp[i].rank;
        else
            more = 1;
    }
    if (!more)
        return (uint32_t)nseen;
    /* Many trainers: sort every rank once. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += sp[i].role == TRACE_TRAINER && sp[i].span == TRACE_STEP;
    int64_t *r = malloc(m * sizeof *r);
    if (!r)
        return (uint32_t)nseen; /* out of memory: the lower bound */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sp[i].role == TRACE_TRAINER && sp[i].span == TRACE_STEP)
            r[k++] = sp[i].rank;
    qsort(r, m, sizeof *r, ta_cmp_i64);
    uint32_t d = 0;
    for (size_t i = 0; i < m; i++)
        d += i == 0 || r[i] != r[i - 1];
    free(r);
    return d;
}

static bool ta_complete(const trace_an_step *s, uint32_t ntrainers) { return s->ntrainers >= ntrainers; }

static uint32_t ta_want_trainers(const trace_an_step *st, size_t n, uint32_t ntrainers)
{
    if (ntrainers)
        return ntrainers;
    for (size_t i = 0; i < n; i++) /* every trainer seen: the most any step has */
        ntrainers = st[i].ntrainers > ntrainers ? st[i].ntrainers : ntrainers;
    return ntrainers;
}

ptrdiff_t trace_an_representative(const trace_an_step *st, size_t n, uint32_t ntrainers)
{
    ntrainers = ta_want_trainers(st, n, ntrainers);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += ta_complete(&st[i], ntrainers);
    if (m == 0)
        return -1;
    size_t *c = malloc(m * sizeof *c);
    if (!c)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ta_complete(&st[i], ntrainers))
            c[k++] = i;
    /* The first traced step is often not steady (a window that starts the
     * pass, a cache still cold): left out where more than 2 remain. */
    size_t first = m > 2 ? 1 : 0;
    /* Insertion sort by the slowest trainer's step, then batch (st is by
     * batch already, so a stable sort keeps ties in batch order). */
    for (size_t i = first + 1; i < m; i++) {
        size_t v = c[i], j = i;
        while (j > first && st[c[j - 1]].slowest_ns > st[v].slowest_ns) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
    size_t pick = c[first + (m - first - 1) / 2];
    free(c);
    return (ptrdiff_t)pick;
}

ptrdiff_t trace_an_last_complete(const trace_an_step *st, size_t n, uint32_t ntrainers)
{
    ntrainers = ta_want_trainers(st, n, ntrainers);
    for (size_t i = n; i-- > 0;)
        if (ta_complete(&st[i], ntrainers))
            return (ptrdiff_t)i;
    return -1;
}

/* ---- buckets ------------------------------------------------------------------------- */

/* b - a, both readings on one node: unknown where negative (on one clock
 * the spans are not in the order the figure assumes). */
static int64_t ta_gap_same(int64_t a, int64_t b) { return b >= a ? b - a : TRACE_AN_UNKNOWN; }

/* y's reading minus x's, taken on two nodes' clocks: below 0 by no more
 * than the two offsets' uncertainty together is 0 (clamped), below by
 * more is unknown (the clocks are off by more than they said). */
static int64_t ta_gap_cross(const trace_out_span *x, int64_t a, const trace_out_span *y, int64_t b, bool *clamped)
{
    *clamped = false;
    if (b >= a)
        return b - a;
    if (ta_same_node(x, y))
        return TRACE_AN_UNKNOWN;
    int64_t tol;
    if (__builtin_add_overflow(x->uncertainty_ns, y->uncertainty_ns, &tol))
        tol = INT64_MAX;
    if (a - b <= tol) {
        *clamped = true;
        return 0;
    }
    return TRACE_AN_UNKNOWN;
}

static int ta_cmp_group(const void *a, const void *b, void *ctx)
{
    const trace_out_span *sp = ctx, *x = &sp[*(const size_t *)a], *y = &sp[*(const size_t *)b];
    if (x->ids.batch != y->ids.batch)
        return x->ids.batch < y->ids.batch ? -1 : 1;
    if (x->ids.bucket != y->ids.bucket)
        return x->ids.bucket < y->ids.bucket ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* One trainer's bucket from its group's spans g[0..m). */
static trace_an_bucket ta_bucket(const trace_out_span *sp, const size_t *g, size_t m, int64_t batch, int64_t bucket,
                                 int32_t t)
{
    trace_an_bucket b = {.batch = batch, .bucket = bucket, .trainer = t, .server = -1};
    for (size_t p = 0; p < TRACE_AN_NPARTS; p++)
        b.part[p] = TRACE_AN_UNKNOWN;
    ta_want w = {.role = TRACE_TRAINER, .rank = t, .batch = batch, .bucket = bucket, .trainer = t};
    w.span = TRACE_BUCKET_READY, w.by = TA_EARLIEST_START;
    ptrdiff_t ready = ta_pick(sp, g, m, &w);
    w.span = TRACE_FRAME_OUT;
    ptrdiff_t fout = ta_pick(sp, g, m, &w);
    w.span = TRACE_FRAME_IN, w.by = TA_LATEST_END;
    ptrdiff_t fin = ta_pick(sp, g, m, &w);
    w.span = TRACE_BUCKET_APPLY;
    ptrdiff_t apply = ta_pick(sp, g, m, &w);
    ta_want sv = {.role = TRACE_SERVER,
                  .rank = TA_ANY,
                  .span = TRACE_PUSH_RECV,
                  .batch = batch,
                  .bucket = bucket,
                  .trainer = t,
                  .by = TA_LATEST_END};
    ptrdiff_t precv = ta_pick(sp, g, m, &sv);
    if (precv >= 0)
        b.server = (int32_t)sp[precv].rank;
    else if (fout >= 0 && sp[fout].ids.server >= 0)
        b.server = sp[fout].ids.server;
    sv.rank = b.server >= 0 ? b.server : TA_ANY;
    sv.trainer = TA_ANY; /* the last push in at that server, any trainer's */
    ptrdiff_t last = ta_pick(sp, g, m, &sv);
    sv.span = TRACE_ANSWER_OUT, sv.by = TA_EARLIEST_START, sv.trainer = t;
    ptrdiff_t aout = ta_pick(sp, g, m, &sv);
    if (aout < 0) { /* one answer for every trainer */
        sv.trainer = TRACE_NONE;
        aout = ta_pick(sp, g, m, &sv);
    }
    if (ready >= 0 && fout >= 0)
        b.part[TRACE_AN_QUEUE] = ta_gap_same(sp[ready].start_ns, sp[fout].start_ns);
    if (fout >= 0 && precv >= 0)
        b.part[TRACE_AN_WIRE] =
            ta_gap_cross(&sp[fout], sp[fout].start_ns, &sp[precv], sp[precv].end_ns, &b.clamped[TRACE_AN_WIRE]);
    if (precv >= 0 && last >= 0)
        b.part[TRACE_AN_STRAGGLER] = ta_gap_same(sp[precv].end_ns, sp[last].end_ns);
    if (last >= 0 && aout >= 0)
        b.part[TRACE_AN_FOLD] = ta_gap_same(sp[last].end_ns, sp[aout].start_ns);
    if (aout >= 0 && fin >= 0)
        b.part[TRACE_AN_RETURN] =
            ta_gap_cross(&sp[aout], sp[aout].start_ns, &sp[fin], sp[fin].end_ns, &b.clamped[TRACE_AN_RETURN]);
    if (apply >= 0)
        b.part[TRACE_AN_APPLY] = sp[apply].end_ns - sp[apply].start_ns;
    return b;
}

int trace_an_buckets(const trace_out_span *sp, size_t n, trace_an_bucket **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += sp[i].ids.batch >= 0 && sp[i].ids.bucket >= 0 && sp[i].role != TRACE_MASTER;
    if (m == 0)
        return 0;
    size_t *g = malloc(m * sizeof *g);
    /* at most one record per span with a trainer id */
    trace_an_bucket *b = malloc(m * sizeof *b);
    int32_t *tr = malloc(m * sizeof *tr);
    if (!g || !b || !tr) {
        free(g);
        free(b);
        free(tr);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sp[i].ids.batch >= 0 && sp[i].ids.bucket >= 0 && sp[i].role != TRACE_MASTER)
            g[k++] = i;
    qsort_r(g, m, sizeof *g, ta_cmp_group, (void *)sp);
    size_t nb = 0;
    for (size_t i = 0; i < m;) {
        int64_t batch = sp[g[i]].ids.batch, bucket = sp[g[i]].ids.bucket;
        size_t j = i;
        while (j < m && sp[g[j]].ids.batch == batch && sp[g[j]].ids.bucket == bucket)
            j++;
        /* the group's trainers, sorted */
        size_t nt = 0;
        for (size_t x = i; x < j; x++) {
            int32_t t = sp[g[x]].ids.trainer;
            if (t < 0)
                continue;
            size_t y = 0;
            while (y < nt && tr[y] < t)
                y++;
            if (y < nt && tr[y] == t)
                continue;
            memmove(&tr[y + 1], &tr[y], (nt - y) * sizeof *tr);
            tr[y] = t;
            nt++;
        }
        for (size_t y = 0; y < nt; y++)
            b[nb++] = ta_bucket(sp, g + i, j - i, batch, bucket, tr[y]);
        i = j;
    }
    free(g);
    free(tr);
    if (nb == 0) {
        free(b);
        return 0;
    }
    *out = b;
    *nout = nb;
    return 0;
}

/* ---- the critical path ------------------------------------------------------------------ */

/* Whether a trainer waited for answer s (its frame_in): a bucket's always
 * does (its bucket_wait); a call of no bucket's only where a wait on that
 * server took it (ta_want.took) — the HybridModel's psbench pattern sends
 * its updates without waiting, and their confirmations may come in before
 * the step's optimizer on a loaded host: they decided nothing. */
static bool ta_awaited(const trace_out_span *sp, size_t n, const trace_out_span *s)
{
    if (s->ids.bucket != TRACE_NONE)
        return true;
    ta_want w = {.role = TRACE_TRAINER,
                 .rank = s->rank,
                 .span = TRACE_BUCKET_WAIT,
                 .batch = s->ids.batch,
                 .bucket = TRACE_NONE,
                 .trainer = TA_ANY,
                 .by = TA_EARLIEST_START,
                 .took = s};
    return ta_pick(sp, NULL, n, &w) >= 0;
}

/* As ta_pick with TA_LATEST_END over every span, among the answers a
 * trainer waited for (ta_awaited). */
static ptrdiff_t ta_pick_awaited(const trace_out_span *sp, size_t n, const ta_want *w)
{
    assert(w->span == TRACE_FRAME_IN && w->by == TA_LATEST_END);
    ptrdiff_t best = -1;
    for (size_t i = 0; i < n; i++)
        if (ta_matches(&sp[i], w) && (best < 0 || sp[i].end_ns > sp[best].end_ns) && ta_awaited(sp, n, &sp[i]))
            best = (ptrdiff_t)i;
    return best;
}

int trace_an_critical(const trace_out_span *sp, size_t n, int64_t batch, size_t **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    /* The walk, backwards from the optimizer: at most 13 links. */
    ptrdiff_t link[16];
    size_t nl = 0;
    ta_want w = {.role = TRACE_TRAINER,
                 .rank = TA_ANY,
                 .span = TRACE_OPTIMIZER,
                 .batch = batch,
                 .bucket = TA_ANY,
                 .trainer = TA_ANY,
                 .by = TA_LATEST_START};
    ptrdiff_t opt = ta_pick(sp, NULL, n, &w);
    if (opt < 0)
        return 0;
    link[nl++] = opt;
    w.rank = sp[opt].rank;
    w.by = TA_LATEST_END;
    w.span = TRACE_EXPOSED_WAIT;
    link[nl++] = ta_pick(sp, NULL, n, &w);
    /* The bucket whose answer came in last on that trainer, before its
     * optimizer, among those it waited for (an answer nothing awaited, as
     * the HybridModel's confirmations in its psbench pattern, or one that
     * came after the step, decided nothing). */
    w.span = TRACE_FRAME_IN;
    w.before = &sp[opt];
    ptrdiff_t fin = ta_pick_awaited(sp, n, &w);
    if (fin >= 0) {
        int64_t bucket = sp[fin].ids.bucket;
        w.span = TRACE_BUCKET_WAIT, w.bucket = bucket;
        if (bucket == TRACE_NONE) {
            /* A call's wait is the one that took its answer. It may end
             * after the optimizer starts: the communication thread reads
             * its clock after waking the compute thread. */
            w.before = NULL;
            w.took = &sp[fin];
            w.by = TA_EARLIEST_START;
        }
        ptrdiff_t wait = ta_pick(sp, NULL, n, &w);
        link[nl++] = wait;
        link[nl++] = fin;
        /* A call of no bucket (docs/results.md, the HybridModel's): the
         * other calls of the batch carry the same ids; its own spans are
         * those within its wait, and it waits for no other trainer's. */
        const trace_out_span *call = bucket == TRACE_NONE && wait >= 0 ? &sp[wait] : NULL;
        ta_want s = {.role = TRACE_SERVER,
                     .rank = sp[fin].ids.server >= 0 ? sp[fin].ids.server : TA_ANY,
                     .span = TRACE_PUSH_RECV,
                     .batch = batch,
                     .bucket = bucket,
                     .trainer = sp[fin].rank,
                     .by = TA_LATEST_END,
                     .within = call};
        if (s.rank == TA_ANY) { /* the server its push reached */
            ptrdiff_t own = ta_pick(sp, NULL, n, &s);
            s.rank = own >= 0 ? sp[own].rank : TA_ANY;
        }
        s.span = TRACE_ANSWER_OUT, s.by = TA_EARLIEST_START;
        ptrdiff_t aout = ta_pick(sp, NULL, n, &s);
        if (aout < 0) {
            s.trainer = TRACE_NONE;
            aout = ta_pick(sp, NULL, n, &s);
        }
        link[nl++] = aout;
        s.trainer = call ? (int64_t)sp[fin].rank : TA_ANY, s.by = TA_LATEST_END;
        s.span = TRACE_RESOLVE;
        link[nl++] = ta_pick(sp, NULL, n, &s);
        s.span = TRACE_DEVICE_JOB;
        link[nl++] = ta_pick(sp, NULL, n, &s);
        /* The last push in, its fold, and back to its trainer. */
        s.span = TRACE_PUSH_RECV;
        ptrdiff_t last = ta_pick(sp, NULL, n, &s);
        if (last >= 0) {
            int64_t t2 = sp[last].ids.trainer;
            s.span = TRACE_FOLD, s.trainer = t2;
            ptrdiff_t fold = ta_pick(sp, NULL, n, &s);
            if (fold < 0) {
                s.trainer = TA_ANY;
                fold = ta_pick(sp, NULL, n, &s);
            }
            link[nl++] = fold;
            link[nl++] = last;
            ta_want t = {.role = TRACE_TRAINER,
                         .rank = t2,
                         .span = TRACE_FRAME_OUT,
                         .batch = batch,
                         .bucket = bucket,
                         .trainer = t2,
                         .by = TA_LATEST_START,
                         .within = call};
            link[nl++] = ta_pick(sp, NULL, n, &t);
            t.span = TRACE_BUCKET_READY;
            link[nl++] = ta_pick(sp, NULL, n, &t);
            t.bucket = TA_ANY, t.by = TA_LATEST_END;
            t.within = NULL, t.before = call; /* the compute before the call: none before a lookup */
            t.span = TRACE_BACKWARD_COMPUTE;
            link[nl++] = ta_pick(sp, NULL, n, &t);
            t.span = TRACE_FORWARD;
            link[nl++] = ta_pick(sp, NULL, n, &t);
        }
    }
    assert(nl <= sizeof link / sizeof link[0]);
    size_t *v = malloc(nl * sizeof *v);
    if (!v)
        return -1;
    size_t k = 0;
    for (size_t i = nl; i-- > 0;) /* forward first */
        if (link[i] >= 0)
            v[k++] = (size_t)link[i];
    *out = v;
    *nout = k;
    return 0;
}

/* ---- one step as data ------------------------------------------------------------------ */

static int ta_cmp_lane_time(const void *a, const void *b)
{
    const trace_out_span *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    if (x->lane != y->lane)
        return x->lane < y->lane ? -1 : 1;
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    if (x->end_ns != y->end_ns)
        return x->end_ns < y->end_ns ? -1 : 1;
    return x->span < y->span ? -1 : x->span > y->span;
}

/* ns as ms, or null where unknown. */
static json_t *ta_ms(int64_t ns) { return ns < 0 ? json_null() : json_real((double)ns / 1e6); }
/* ns as us from origin. */
static json_t *ta_us(int64_t ns) { return json_real((double)ns / 1e3); }

static void ta_process_name(const trace_out_span *s, char *buf, size_t len)
{
    if (s->role == TRACE_MASTER)
        snprintf(buf, len, "master");
    else
        snprintf(buf, len, "%s %" PRIu32, trace_role_name(s->role), s->rank);
}

/* A step span's place in a bucket's flow (0: none). */
static unsigned ta_flow(const trace_out_span *s) { return trace_span_flow((trace_span)s->span); }

/* Orders a step's flow spans (qsort_r's context: the step's spans): by
 * bucket, then trainer (none first: a server's spans for the bucket as a
 * whole, those by server rank), then place in the flow, then start. */
static int ta_cmp_flow(const void *a, const void *b, void *ctx)
{
    const trace_out_span *c = ctx, *x = &c[*(const size_t *)a], *y = &c[*(const size_t *)b];
    int64_t kx[5] = {x->ids.bucket, x->ids.trainer, x->ids.trainer < 0 ? (int64_t)x->rank : 0, ta_flow(x), x->start_ns};
    int64_t ky[5] = {y->ids.bucket, y->ids.trainer, y->ids.trainer < 0 ? (int64_t)y->rank : 0, ta_flow(y), y->start_ns};
    for (int k = 0; k < 5; k++)
        if (kx[k] != ky[k])
            return kx[k] < ky[k] ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : *(const size_t *)a > *(const size_t *)b;
}

/* Is c[i] a flow span of some bucket (own: of one trainer's push)? */
static bool ta_in_flow(const trace_out_span *c, size_t i, bool own)
{
    return ta_flow(&c[i]) && c[i].ids.bucket >= 0 &&
           (own ? c[i].ids.trainer >= 0 : c[i].ids.trainer < 0 && c[i].role == TRACE_SERVER);
}

/* The lines between lanes: per (bucket, trainer) its own flow spans and
 * the server's spans for the bucket as a whole where its push went, in
 * the flow's order (trace.h), a line wherever the next one is on another
 * node. Sorted once: a step holds thousands of buckets' spans. */
static int ta_flows(const trace_out_span *c, size_t m, json_t *flows)
{
    size_t *v = malloc((2 * m + 1) * sizeof *v);
    if (!v)
        return -1;
    size_t nv = 0;
    for (size_t i = 0; i < m; i++)
        if (ta_in_flow(c, i, true) || ta_in_flow(c, i, false))
            v[nv++] = i;
    qsort_r(v, nv, sizeof *v, ta_cmp_flow, (void *)c);
    size_t *mem = v + nv; /* one group's members, room for nv */
    int rc = 0;
    size_t shared = 0, shared_end = 0; /* the group's bucket's whole-bucket spans: v[shared..shared_end) */
    for (size_t i = 0; i < nv && rc == 0;) {
        const trace_out_span *s = &c[v[i]];
        size_t j = i;
        while (j < nv && c[v[j]].ids.bucket == s->ids.bucket && c[v[j]].ids.trainer == s->ids.trainer)
            j++;
        if (s->ids.trainer < 0) { /* the bucket's whole-bucket spans (sorted first): joined to its trainers' groups */
            shared = i;
            shared_end = j;
            i = j;
            continue;
        }
        if (shared_end == 0 || c[v[shared]].ids.bucket != s->ids.bucket)
            shared = shared_end = 0; /* none for this bucket */
        int64_t server = -1;
        size_t nm = 0;
        for (size_t k = i; k < j; k++) {
            mem[nm++] = v[k];
            if (c[v[k]].role == TRACE_SERVER)
                server = c[v[k]].rank;
        }
        size_t own_end = nm;
        for (size_t k = shared; k < shared_end && server >= 0; k++)
            if (c[v[k]].rank == server)
                mem[nm++] = v[k];
        /* Both runs are by (place, start): merged in place by insertion
         * of the few whole-bucket ones. */
        for (size_t x = own_end; x < nm; x++) {
            size_t val = mem[x], y = x;
            while (y > 0 &&
                   (ta_flow(&c[mem[y - 1]]) > ta_flow(&c[val]) ||
                    (ta_flow(&c[mem[y - 1]]) == ta_flow(&c[val]) && c[mem[y - 1]].start_ns > c[val].start_ns))) {
                mem[y] = mem[y - 1];
                y--;
            }
            mem[y] = val;
        }
        for (size_t x = 1; x < nm && rc == 0; x++) {
            const trace_out_span *p = &c[mem[x - 1]], *q = &c[mem[x]];
            if (ta_same_node(p, q))
                continue;
            if (json_array_append_new(flows, json_pack("{s:I, s:I, s:I, s:I}", "from", (json_int_t)mem[x - 1], "to",
                                                       (json_int_t)mem[x], "bucket", (json_int_t)s->ids.bucket,
                                                       "trainer", (json_int_t)s->ids.trainer)) != 0)
                rc = -1;
        }
        i = j;
    }
    free(v);
    return rc;
}

static json_t *ta_bucket_json(const trace_an_bucket *b)
{
    json_t *o = json_pack("{s:I, s:I, s:I}", "bucket", (json_int_t)b->bucket, "trainer", (json_int_t)b->trainer,
                          "server", (json_int_t)b->server);
    json_t *clamped = json_array();
    if (!o || !clamped) {
        json_decref(o);
        json_decref(clamped);
        return NULL;
    }
    for (size_t p = 0; p < TRACE_AN_NPARTS; p++) {
        char key[32];
        snprintf(key, sizeof key, "%s_ms", ta_part_names[p]);
        json_object_set_new(o, key, ta_ms(b->part[p]));
        if (b->clamped[p])
            json_array_append_new(clamped, json_string(ta_part_names[p]));
    }
    json_object_set_new(o, "clamped", clamped);
    return o;
}

json_t *trace_an_step_json(const trace_out_span *sp, size_t n, int64_t batch, uint32_t ntrainers, const char *why)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += sp[i].ids.batch == batch && sp[i].role != TRACE_MASTER;
    trace_out_span *c = malloc((m ? m : 1) * sizeof *c);
    if (!c)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sp[i].ids.batch == batch && sp[i].role != TRACE_MASTER)
            c[k++] = sp[i];
    qsort(c, m, sizeof *c, ta_cmp_lane_time);
    trace_an_step *st = NULL;
    size_t nst = 0;
    size_t *crit = NULL, ncrit = 0;
    trace_an_bucket *b = NULL;
    size_t nb = 0;
    json_t *doc = NULL;
    if (trace_an_steps(c, m, &st, &nst) != 0 || trace_an_critical(c, m, batch, &crit, &ncrit) != 0 ||
        trace_an_buckets(c, m, &b, &nb) != 0)
        goto out;
    int64_t origin = 0;
    for (size_t i = 0; i < m; i++)
        origin = i == 0 || c[i].start_ns < origin ? c[i].start_ns : origin;
    json_t *lanes = json_array(), *spans = json_array(), *flows = json_array(), *critical = json_array(),
           *buckets = json_array();
    doc = json_pack("{s:I, s:I, s:I, s:o, s:s, s:o, s:o, s:o, s:o, s:o}", "batch", (json_int_t)batch, "trainers",
                    (json_int_t)(nst ? st[0].ntrainers : 0), "of_trainers", (json_int_t)ntrainers, "step_ms",
                    ta_ms(nst ? st[0].slowest_ns : -1), "why", why ? why : "", "lanes", lanes, "spans", spans, "flows",
                    flows, "critical", critical, "buckets", buckets);
    if (!doc)
        goto out;
    json_object_set_new(doc, "start_ns", json_integer((json_int_t)origin));
    json_object_set_new(doc, "dur_us", ta_us(nst ? st[0].end_ns - origin : 0));
    int64_t lane = -1;
    for (size_t i = 0; i < m; i++) {
        const trace_out_span *s = &c[i];
        if (i == 0 || s->node != c[i - 1].node || s->lane != c[i - 1].lane) {
            char proc[64];
            ta_process_name(s, proc, sizeof proc);
            json_array_append_new(lanes,
                                  json_pack("{s:s, s:s, s:I, s:s}", "process", proc, "role", trace_role_name(s->role),
                                            "rank", (json_int_t)s->rank, "lane", s->lane_name));
            lane++;
        }
        json_t *o = json_pack("{s:I, s:s, s:s, s:o, s:o}", "lane", (json_int_t)lane, "name",
                              trace_span_name((trace_span)s->span), "cat", trace_span_category((trace_span)s->span),
                              "ts", ta_us(s->start_ns - origin), "dur", ta_us(s->end_ns - s->start_ns));
        if (o && s->ids.bucket >= 0)
            json_object_set_new(o, "bucket", json_integer((json_int_t)s->ids.bucket));
        if (o && s->ids.trainer >= 0)
            json_object_set_new(o, "trainer", json_integer((json_int_t)s->ids.trainer));
        if (o && s->ids.server >= 0)
            json_object_set_new(o, "server", json_integer((json_int_t)s->ids.server));
        if (json_array_append_new(spans, o) != 0)
            goto fail;
    }
    for (size_t i = 0; i < ncrit; i++)
        if (json_array_append_new(critical, json_integer((json_int_t)crit[i])) != 0)
            goto fail;
    if (ta_flows(c, m, flows) != 0)
        goto fail;
    for (size_t i = 0; i < nb; i++)
        if (json_array_append_new(buckets, ta_bucket_json(&b[i])) != 0)
            goto fail;
    goto out;
fail:
    json_decref(doc);
    doc = NULL;
out:
    free(c);
    free(st);
    free(crit);
    free(b);
    return doc;
}

/* ---- a trace.json read back ------------------------------------------------------------ */

struct trace_an_proc {
    int pid;
    trace_role role;
    uint32_t rank;
    int64_t uncertainty_ns;
    char lane[TRACE_LANES_MAX][TRACE_NAME_MAX];
};

static trace_an_proc *ta_proc(trace_an_trace *t, json_int_t pid)
{
    for (size_t i = 0; i < t->nprocs; i++)
        if (t->proc[i].pid == pid)
            return &t->proc[i];
    return NULL;
}

/* "trainer 0", "server 1", "master". */
static bool ta_parse_process(const char *name, trace_role *role, uint32_t *rank)
{
    if (strcmp(name, "master") == 0) {
        *role = TRACE_MASTER;
        *rank = 0;
        return true;
    }
    char word[16];
    unsigned r;
    int used = 0;
    if (sscanf(name, "%15s %u%n", word, &r, &used) != 2 || name[used] != '\0')
        return false;
    int ro = trace_role_lookup(word);
    if (ro < 0 || ro == TRACE_MASTER)
        return false;
    *role = (trace_role)ro;
    *rank = r;
    return true;
}

static int64_t ta_arg(const json_t *args, const char *key)
{
    json_t *v = json_object_get(args, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : TRACE_NONE;
}

/* The metadata's processes: names, then lanes, then clocks. */
static int ta_load_procs(const json_t *events, const json_t *meta, trace_an_trace *t, char *err, size_t errlen)
{
    size_t i;
    json_t *e;
    for (int pass = 0; pass < 2; pass++)
        json_array_foreach (events, i, e) {
            const char *ph = json_string_value(json_object_get(e, "ph"));
            const char *what = json_string_value(json_object_get(e, "name"));
            json_t *pidv = json_object_get(e, "pid"), *tidv = json_object_get(e, "tid");
            const char *name = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            if (!ph || strcmp(ph, "M") != 0 || !what || !json_is_integer(pidv))
                continue;
            if (pass == 0 && strcmp(what, "process_name") == 0) {
                trace_an_proc p = {.pid = (int)json_integer_value(pidv)};
                if (!name || !ta_parse_process(name, &p.role, &p.rank)) {
                    errbuf_set(err, errlen, "event %zu: a process named %s%s%s, not trainer N, server N or master", i,
                               name ? "'" : "", name ? name : "nothing", name ? "'" : "");
                    return -1;
                }
                if (ta_proc(t, p.pid)) {
                    errbuf_set(err, errlen, "event %zu: process %d named twice", i, p.pid);
                    return -1;
                }
                trace_an_proc *v = realloc(t->proc, (t->nprocs + 1) * sizeof *v);
                if (!v) {
                    errbuf_set(err, errlen, "out of memory");
                    return -1;
                }
                t->proc = v;
                t->proc[t->nprocs++] = p;
                t->ntrainers += p.role == TRACE_TRAINER;
                t->nservers += p.role == TRACE_SERVER;
            } else if (pass == 1 && strcmp(what, "thread_name") == 0) {
                trace_an_proc *p = ta_proc(t, json_integer_value(pidv));
                json_int_t tid = json_is_integer(tidv) ? json_integer_value(tidv) : 0;
                if (!p || tid < 1 || tid > TRACE_LANES_MAX || !name || !name[0] || strlen(name) >= TRACE_NAME_MAX) {
                    errbuf_set(err, errlen, "event %zu: a lane name of no known process, or out of range", i);
                    return -1;
                }
                snprintf(p->lane[tid - 1], TRACE_NAME_MAX, "%s", name);
            }
        }
    json_t *nodes = json_object_get(meta, "nodes"), *nd;
    json_array_foreach (nodes, i, nd) {
        trace_an_proc *p = ta_proc(t, json_integer_value(json_object_get(nd, "pid")));
        const char *clock = json_string_value(json_object_get(nd, "clock"));
        json_t *u = json_object_get(nd, "uncertainty_ns");
        if (!p)
            continue;
        if (clock && strcmp(clock, "unaligned") == 0)
            p->uncertainty_ns = INT64_MAX;
        else if (json_is_integer(u) && json_integer_value(u) >= 0)
            p->uncertainty_ns = (int64_t)json_integer_value(u);
    }
    return 0;
}

int trace_an_load(const json_t *doc, trace_an_trace *t, char *err, size_t errlen)
{
    *t = (trace_an_trace){0};
    const json_t *events = json_object_get(doc, "traceEvents"), *meta = json_object_get(doc, "metadata");
    if (!json_is_array(events)) {
        errbuf_set(err, errlen, "no traceEvents array (not a trace.json)");
        return -1;
    }
    if (!json_is_object(meta) || !json_is_integer(json_object_get(meta, "psbench_trace"))) {
        errbuf_set(err, errlen, "no metadata.psbench_trace (not a trace psbench-master wrote)");
        return -1;
    }
    if (ta_load_procs(events, meta, t, err, errlen) != 0)
        goto fail;
    json_t *o = json_object_get(meta, "origin_ns");
    int64_t origin = json_is_integer(o) ? (int64_t)json_integer_value(o) : 0;
    size_t i, nx = 0;
    json_t *e;
    json_array_foreach (events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        nx += ph && strcmp(ph, "X") == 0;
    }
    if (nx && !(t->sp = malloc(nx * sizeof *t->sp))) {
        errbuf_set(err, errlen, "out of memory for %zu spans", nx);
        goto fail;
    }
    json_array_foreach (events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X") != 0)
            continue;
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur"), *args = json_object_get(e, "args");
        trace_an_proc *p = ta_proc(t, json_integer_value(json_object_get(e, "pid")));
        json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        int span = name ? trace_span_lookup(name) : -1;
        if (span < 0 || !p || tid < 1 || tid > TRACE_LANES_MAX || !p->lane[tid - 1][0] || !json_is_number(ts) ||
            !json_is_number(dur) || json_number_value(ts) < 0 || json_number_value(dur) < 0) {
            errbuf_set(err, errlen, "event %zu: %s%s%s is not a span of a known process and lane", i, name ? "'" : "",
                       name ? name : "(no name)", name ? "'" : "");
            goto fail;
        }
        /* ts and dur are us with three decimals: whole ns, read back. */
        int64_t start = origin + (int64_t)llround(json_number_value(ts) * 1e3);
        int64_t len = (int64_t)llround(json_number_value(dur) * 1e3);
        t->sp[t->n++] =
            (trace_out_span){.role = p->role,
                             .rank = p->rank,
                             .node = (uint32_t)(p - t->proc),
                             .lane = (uint16_t)(tid - 1),
                             .span = (uint16_t)span,
                             .lane_name = p->lane[tid - 1],
                             .start_ns = start,
                             .end_ns = start + len,
                             .uncertainty_ns = p->uncertainty_ns,
                             .ids = trace_ids_make(ta_arg(args, "batch"), ta_arg(args, "bucket"),
                                                   (int32_t)ta_arg(args, "trainer"), (int32_t)ta_arg(args, "server"))};
    }
    return 0;
fail:
    trace_an_trace_free(t);
    return -1;
}

void trace_an_trace_free(trace_an_trace *t)
{
    free(t->sp);
    free(t->proc);
    *t = (trace_an_trace){0};
}

json_t *trace_an_representative_json(const trace_an_trace *t)
{
    trace_an_step *st;
    size_t nst;
    if (trace_an_steps(t->sp, t->n, &st, &nst) != 0)
        return NULL;
    /* Complete: on every trainer that traced a step (a trainer process
     * with no step at all, one that recorded nothing, does not hold every
     * step back). */
    ptrdiff_t r = trace_an_representative(st, nst, 0);
    json_t *j = r < 0 ? json_null()
                      : trace_an_step_json(t->sp, t->n, st[r].batch, trace_an_trainers(t->sp, t->n), TRACE_AN_RULE);
    free(st);
    return j;
}

/* ---- the live view ---------------------------------------------------------------------- */

static char *ta_none(const char *reason)
{
    json_t *o = json_pack("{s:n, s:s}", "batch", "reason", reason);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *trace_an_live_json(const trace_out_node *nodes, size_t n, unsigned *code)
{
    *code = 200;
    if (!nodes || n == 0) {
        *code = 404;
        return ta_none("the master does not trace: run it with --trace (and --out)");
    }
    uint32_t ntrainers = 0;
    for (size_t i = 0; i < n; i++)
        ntrainers += nodes[i].dump && nodes[i].dump->role == TRACE_TRAINER;
    if (ntrainers == 0)
        return ta_none("no trainer has sent its trace yet");
    trace_out_span *sp;
    size_t nsp;
    char err[256];
    if (trace_out_spans(nodes, n, &sp, &nsp, err, sizeof err) != 0) {
        char reason[320];
        snprintf(reason, sizeof reason, "the gathered traces cannot be merged: %s", err);
        return ta_none(reason);
    }
    trace_an_step *st = NULL;
    size_t nst = 0;
    char *out = NULL;
    if (trace_an_steps(sp, nsp, &st, &nst) == 0) {
        ptrdiff_t last = trace_an_last_complete(st, nst, ntrainers);
        if (last < 0) {
            out = ta_none("no step traced whole on every trainer yet");
        } else {
            json_t *j =
                trace_an_step_json(sp, nsp, st[last].batch, ntrainers, "the latest step every trainer traced whole");
            out = j ? json_dumps(j, JSON_COMPACT) : NULL;
            json_decref(j);
        }
    }
    free(st);
    free(sp);
    return out;
}
