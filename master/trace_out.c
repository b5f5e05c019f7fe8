/* trace_out.c — the merged Chrome trace-event document (see trace_out.h).
 *
 * Every span becomes an item on the master's clock; each bucket's spans
 * (those whose name has a place in a bucket's flow, trace.h) are grouped
 * by (batch, bucket, trainer) and joined by flow events, which are items
 * too; the items are sorted by time with a total order (the input's order
 * last), so the same input writes the same bytes. The events are written
 * by hand, one a line: a trace holds millions, which a jansson tree would
 * hold at ten times the memory; the few strings that need escaping (lane
 * names, messages) and the metadata go through jansson.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream, qsort_r */
#endif
#include "master/trace_out.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* One event of the document but the metadata ("M") ones. */
typedef struct tro_item {
    int64_t ts_ns;            /* the master's clock, from the origin */
    int64_t dur_ns;           /* X only */
    const trace_out_span *sp; /* X: the span (the doc's); flows: a span they bind to */
    uint64_t flow_id;         /* s, t, f */
    uint32_t pid, tid;
    uint32_t node; /* index into the sorted nodes */
    char ph;       /* 'X', 's', 't', 'f' */
    size_t seq;    /* creation order: the last tie-break */
} tro_item;

typedef struct tro_doc {
    const trace_out_node **node; /* sorted: trainers, servers, master, each by rank (borrowed) */
    size_t nnodes;
    trace_out_span *sp; /* owned: every span on the master's clock (trace_out_spans) */
    size_t nsp;
    tro_item *item; /* owned */
    size_t nitems, nspans, cap;
    int64_t origin_ns; /* the earliest span's start on the master's clock */
    size_t nflows;
} tro_doc;

/* ---- nodes ---------------------------------------------------------------------- */

static int tro_cmp_node(const void *a, const void *b)
{
    const trace_dump *x = (*(const trace_out_node *const *)a)->dump, *y = (*(const trace_out_node *const *)b)->dump;
    if (x->role != y->role)
        return x->role < y->role ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* "trainer 0", "server 1", "master" (its rank is not a number people use). */
static void tro_node_name(const trace_dump *d, char *buf, size_t len)
{
    if (d->role == TRACE_MASTER)
        snprintf(buf, len, "master");
    else
        snprintf(buf, len, "%s %" PRIu32, trace_role_name(d->role), d->rank);
}

/* The node's offset: node clock - master clock. */
static int64_t tro_offset(const trace_out_node *n) { return n->state == TRACE_OUT_ALIGNED ? n->clock.offset_ns : 0; }

/* ---- spans on the master's clock --------------------------------------------------- */

/* A node's reading moved to the master's clock; false where it leaves 64 bits. */
static bool tro_to_master(uint64_t ns, int64_t offset, int64_t *out)
{
    return ns <= INT64_MAX && !__builtin_sub_overflow((int64_t)ns, offset, out);
}

/* A label written as it is: printable ASCII but quote and backslash. */
static bool tro_plain(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
            return false;
    return true;
}

/* The spans of the sorted nodes on the master's clock (see trace_out_spans). */
static int tro_spans(const trace_out_node *const *node, size_t nnodes, trace_out_span **out, size_t *count, char *err,
                     size_t errlen)
{
    size_t total = 0;
    for (size_t k = 0; k < nnodes; k++)
        total += node[k]->dump->nev;
    *out = NULL;
    *count = 0;
    if (total == 0)
        return 0;
    trace_out_span *sp = malloc(total * sizeof *sp);
    if (!sp) {
        errbuf_set(err, errlen, "trace: out of memory for %zu spans", total);
        return -1;
    }
    size_t n = 0;
    for (size_t k = 0; k < nnodes; k++) {
        const trace_out_node *nd = node[k];
        const trace_dump *d = nd->dump;
        int64_t off = tro_offset(nd);
        int64_t unc = nd->state == TRACE_OUT_SAME      ? 0
                      : nd->state == TRACE_OUT_ALIGNED ? (int64_t)nd->clock.uncertainty_ns
                                                       : INT64_MAX;
        for (size_t i = 0; i < d->nev; i++) {
            const trace_event *e = &d->ev[i];
            int64_t start, end;
            char name[64];
            const char *label = nd->label ? nd->label[i] : NULL;
            bool shape = e->lane < d->nlanes && e->span < TRACE_NSPANS && e->end_ns >= e->start_ns;
            bool plain = !label || tro_plain(label);
            bool range = tro_to_master(e->start_ns, off, &start) && tro_to_master(e->end_ns, off, &end);
            if (!shape || !plain || !range) {
                tro_node_name(d, name, sizeof name); /* here only: a span's cost is this loop's */
                if (!shape)
                    errbuf_set(err, errlen, "trace of %s: span %zu is not one of its lanes' spans", name, i);
                else if (!plain)
                    errbuf_set(err, errlen, "trace of %s: span %zu's label is not plain text", name, i);
                else
                    errbuf_set(err, errlen, "trace of %s: span %zu leaves the clock's range at offset %" PRId64 " ns",
                               name, i, off);
                free(sp);
                return -1;
            }
            sp[n++] = (trace_out_span){.role = d->role,
                                       .rank = d->rank,
                                       .node = (uint32_t)k,
                                       .lane = e->lane,
                                       .span = e->span,
                                       .lane_name = d->lane[e->lane],
                                       .start_ns = start,
                                       .end_ns = end,
                                       .uncertainty_ns = unc,
                                       .ids = e->ids,
                                       .label = label,
                                       .ev = e};
        }
    }
    assert(n == total);
    *out = sp;
    *count = n;
    return 0;
}

static int tro_add_spans(tro_doc *doc, char *err, size_t errlen)
{
    if (tro_spans(doc->node, doc->nnodes, &doc->sp, &doc->nsp, err, errlen) != 0)
        return -1;
    /* Each span, and about one flow event per span (grown where more). */
    doc->cap = doc->nsp * 2;
    if (doc->cap > 0 && !(doc->item = malloc(doc->cap * sizeof *doc->item))) {
        errbuf_set(err, errlen, "trace: out of memory for %zu spans", doc->nsp);
        return -1;
    }
    int64_t origin = 0;
    for (size_t i = 0; i < doc->nsp; i++) {
        const trace_out_span *sp = &doc->sp[i];
        doc->item[doc->nitems] = (tro_item){.ts_ns = sp->start_ns,
                                            .dur_ns = sp->end_ns - sp->start_ns,
                                            .sp = sp,
                                            .pid = sp->node + 1,
                                            .tid = (uint32_t)sp->lane + 1,
                                            .node = sp->node,
                                            .ph = 'X',
                                            .seq = doc->nitems};
        doc->nitems++;
        origin = i == 0 || sp->start_ns < origin ? sp->start_ns : origin;
    }
    doc->nspans = doc->nitems;
    for (size_t i = 0; i < doc->nitems; i++)
        if (__builtin_sub_overflow(doc->item[i].ts_ns, origin, &doc->item[i].ts_ns)) {
            errbuf_set(err, errlen, "trace: the nodes' spans are further apart than 64 bits of ns");
            return -1;
        }
    doc->origin_ns = origin;
    return 0;
}

/* ---- flows ---------------------------------------------------------------------------- */

/* splitmix64's finaliser: a stable, well-spread hash step. */
static uint64_t tro_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The flow's id from (batch, bucket, trainer): the same in every run of
 * the same job, below 2^53 (a JSON reader's doubles hold it exactly),
 * never 0. */
static uint64_t tro_flow_id(const trace_ids *ids)
{
    uint64_t h = tro_mix(tro_mix(tro_mix((uint64_t)ids->batch) ^ (uint64_t)ids->bucket) ^ (uint64_t)ids->trainer);
    h &= (1ull << 53) - 1;
    return h ? h : 1;
}

/* Whether a span takes part in a bucket's flow, and how: a span of one
 * trainer's push (its trainer set), or a server's span for the bucket as a
 * whole (no trainer: a resolve, a device job), shared by every trainer's
 * flow through that server. */
typedef enum tro_flow_kind { TRO_NO_FLOW, TRO_OWN, TRO_SHARED } tro_flow_kind;

static tro_flow_kind tro_flow_kind_of(const tro_doc *doc, const tro_item *it)
{
    const trace_out_span *e = it->sp;
    if (trace_span_flow((trace_span)e->span) == 0 || e->ids.batch < 0 || e->ids.bucket < 0)
        return TRO_NO_FLOW;
    if (e->ids.trainer >= 0)
        return TRO_OWN;
    return e->role == TRACE_SERVER ? TRO_SHARED : TRO_NO_FLOW;
}

/* Orders flow members: by (batch, bucket[, trainer]), then time, then the
 * span's place in the flow, then the item. qsort_r's context: the doc. */
static int tro_cmp_member(const void *a, const void *b, void *ctx)
{
    const tro_doc *doc = ctx;
    const tro_item *x = &doc->item[*(const size_t *)a], *y = &doc->item[*(const size_t *)b];
    const trace_ids *p = &x->sp->ids, *q = &y->sp->ids;
    if (p->batch != q->batch)
        return p->batch < q->batch ? -1 : 1;
    if (p->bucket != q->bucket)
        return p->bucket < q->bucket ? -1 : 1;
    if (p->trainer != q->trainer)
        return p->trainer < q->trainer ? -1 : 1;
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    unsigned fx = trace_span_flow((trace_span)x->sp->span), fy = trace_span_flow((trace_span)y->sp->span);
    if (fx != fy)
        return fx < fy ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The server rank a member's span is at or for (-1: none said). */
static int32_t tro_member_server(const tro_doc *doc, const tro_item *it)
{
    (void)doc;
    return it->sp->role == TRACE_SERVER ? (int32_t)it->sp->rank : it->sp->ids.server;
}

static bool tro_same_bucket(const trace_ids *a, const trace_ids *b)
{
    return a->batch == b->batch && a->bucket == b->bucket;
}

/* A flow event at the start of span item `at`. doc->item may move: at is
 * an index. -1: out of memory. */
static int tro_add_flow_event(tro_doc *doc, size_t at, char ph, uint64_t id)
{
    if (doc->nitems == doc->cap) {
        /* A shared span is in a flow per trainer: more than one event a span. */
        size_t cap = doc->cap ? doc->cap * 2 : 64;
        tro_item *p = realloc(doc->item, cap * sizeof *p);
        if (!p)
            return -1;
        doc->item = p;
        doc->cap = cap;
    }
    const tro_item *span = &doc->item[at];
    doc->item[doc->nitems] = (tro_item){.ts_ns = span->ts_ns,
                                        .sp = span->sp,
                                        .flow_id = id,
                                        .pid = span->pid,
                                        .tid = span->tid,
                                        .node = span->node,
                                        .ph = ph,
                                        .seq = doc->nitems};
    doc->nitems++;
    return 0;
}

/* One flow: its members (indices into doc->item, in order) as s, t..., f.
 * -1: out of memory. */
static int tro_emit_flow(tro_doc *doc, const size_t *m, size_t n, uint64_t id)
{
    if (n < 2)
        return 0; /* one span alone: nothing to join */
    for (size_t i = 0; i < n; i++)
        if (tro_add_flow_event(doc, m[i], i == 0 ? 's' : i + 1 == n ? 'f' : 't', id) != 0)
            return -1;
    doc->nflows++;
    return 0;
}

static int tro_add_flows(tro_doc *doc, char *err, size_t errlen)
{
    size_t nown = 0, nshared = 0;
    for (size_t i = 0; i < doc->nspans; i++) {
        tro_flow_kind k = tro_flow_kind_of(doc, &doc->item[i]);
        nown += k == TRO_OWN;
        nshared += k == TRO_SHARED;
    }
    if (nown == 0)
        return 0;
    /* own, then shared, then room for one flow's members */
    size_t *idx = malloc((nown + nshared + nown + nshared) * sizeof *idx);
    if (!idx) {
        errbuf_set(err, errlen, "trace: out of memory for the flows");
        return -1;
    }
    size_t *own = idx, *shared = idx + nown, *flow = idx + nown + nshared;
    size_t a = 0, b = 0;
    for (size_t i = 0; i < doc->nspans; i++) {
        tro_flow_kind k = tro_flow_kind_of(doc, &doc->item[i]);
        if (k == TRO_OWN)
            own[a++] = i;
        else if (k == TRO_SHARED)
            shared[b++] = i; /* trainer -1 each: sorted by (batch, bucket), time */
    }
    qsort_r(own, nown, sizeof *own, tro_cmp_member, doc);
    qsort_r(shared, nshared, sizeof *shared, tro_cmp_member, doc);
    size_t s0 = 0; /* the first shared member of the current (batch, bucket) or later */
    for (size_t i = 0; i < nown;) {
        const trace_ids *key = &doc->item[own[i]].sp->ids;
        size_t j = i;
        while (j < nown && tro_same_bucket(&doc->item[own[j]].sp->ids, key) &&
               doc->item[own[j]].sp->ids.trainer == key->trainer)
            j++;
        /* The shared spans of this (batch, bucket) at a server this
         * trainer's push went through join its flow. */
        while (s0 < nshared && tro_cmp_member(&shared[s0], &own[i], doc) < 0 &&
               !tro_same_bucket(&doc->item[shared[s0]].sp->ids, key))
            s0++;
        size_t n = 0;
        for (size_t k = i; k < j; k++)
            flow[n++] = own[k];
        for (size_t s = s0; s < nshared && tro_same_bucket(&doc->item[shared[s]].sp->ids, key); s++) {
            int32_t at = tro_member_server(doc, &doc->item[shared[s]]);
            bool joins = false;
            for (size_t k = i; k < j && !joins; k++)
                joins = tro_member_server(doc, &doc->item[own[k]]) == at;
            if (joins)
                flow[n++] = shared[s];
        }
        /* In time order; a shared span sorts as its own trainer (-1) would,
         * so compare them as members of one flow: time, place, item. */
        for (size_t x = 1; x < n; x++) {
            size_t v = flow[x], y = x;
            while (y > 0) {
                const tro_item *p = &doc->item[flow[y - 1]], *q = &doc->item[v];
                unsigned fp = trace_span_flow((trace_span)p->sp->span), fq = trace_span_flow((trace_span)q->sp->span);
                bool after =
                    p->ts_ns > q->ts_ns || (p->ts_ns == q->ts_ns && (fp > fq || (fp == fq && p->seq > q->seq)));
                if (!after)
                    break;
                flow[y] = flow[y - 1];
                y--;
            }
            flow[y] = v;
        }
        /* key is the doc's span array's (sp points there): the flow's events moving
         * doc->item leave it in place. */
        if (tro_emit_flow(doc, flow, n, tro_flow_id(key)) != 0) {
            free(idx);
            errbuf_set(err, errlen, "trace: out of memory for the flows");
            return -1;
        }
        i = j;
    }
    free(idx);
    return 0;
}

/* ---- the order of the events ------------------------------------------------------------ */

static int tro_ph_rank(char ph) { return ph == 'X' ? 0 : ph == 's' ? 1 : ph == 't' ? 2 : 3; }

static int tro_cmp_item(const void *a, const void *b)
{
    const tro_item *x = a, *y = b;
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    if (x->ph != y->ph)
        return tro_ph_rank(x->ph) < tro_ph_rank(y->ph) ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* ns as microseconds with three decimals, exactly (no double on the way). */
static void tro_put_us(FILE *out, int64_t ns)
{
    assert(ns >= 0);
    fprintf(out, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

/* One JSON value on its own, compact (the reference is dropped). -1: out of memory. */
static int tro_put_json(FILE *out, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    if (!s)
        return -1;
    fputs(s, out);
    free(s);
    return 0;
}

/* The processes' and threads' names and places: "M" events. */
static int tro_put_names(FILE *out, const tro_doc *doc, bool *first)
{
    for (size_t k = 0; k < doc->nnodes; k++) {
        const trace_dump *d = doc->node[k]->dump;
        char name[64];
        tro_node_name(d, name, sizeof name);
        int pid = (int)k + 1;
        json_t *ev[2 + 2 * TRACE_LANES_MAX];
        size_t n = 0;
        ev[n++] = json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", pid, "tid", 0,
                            "args", "name", name);
        ev[n++] = json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "process_sort_index", "ph", "M", "pid", pid, "tid",
                            0, "args", "sort_index", (int)k);
        for (size_t l = 0; l < d->nlanes; l++) {
            ev[n++] = json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", pid, "tid",
                                (int)l + 1, "args", "name", d->lane[l]);
            ev[n++] = json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "thread_sort_index", "ph", "M", "pid", pid,
                                "tid", (int)l + 1, "args", "sort_index", (int)l);
        }
        bool bad = false;
        for (size_t i = 0; i < n; i++) {
            if (bad) { /* the rest are only dropped */
                json_decref(ev[i]);
                continue;
            }
            fputs(*first ? "\n" : ",\n", out);
            *first = false;
            bad = tro_put_json(out, ev[i]) != 0;
        }
        if (bad)
            return -1;
    }
    return 0;
}

/* A span's ids, those that apply, and its label (NULL: none; plain text,
 * tro_plain). */
static void tro_put_args(FILE *out, const trace_ids *ids, const char *label)
{
    const struct {
        const char *key;
        int64_t v;
    } f[] = {{"batch", ids->batch}, {"bucket", ids->bucket}, {"trainer", ids->trainer}, {"server", ids->server}};
    bool first = true;
    fputs("{", out);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].v < 0)
            continue;
        fprintf(out, "%s\"%s\":%" PRId64, first ? "" : ",", f[i].key, f[i].v);
        first = false;
    }
    if (label)
        fprintf(out, "%s\"label\":\"%s\"", first ? "" : ",", label);
    fputs("}", out);
}

static void tro_put_item(FILE *out, const tro_doc *doc, const tro_item *it)
{
    if (it->ph == 'X') {
        const char *label = it->sp->label;
        trace_span s = (trace_span)it->sp->span;
        /* Span names and categories are this build's constants: plain
         * ASCII words, nothing to escape. */
        fprintf(out, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", trace_span_name(s),
                trace_span_category(s));
        tro_put_us(out, it->ts_ns);
        fputs(",\"dur\":", out);
        tro_put_us(out, it->dur_ns);
        fprintf(out, ",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"args\":", it->pid, it->tid);
        tro_put_args(out, &it->sp->ids, label);
        fputs("}", out);
        return;
    }
    /* A flow's end binds to the span it is in ("bp":"e"), not to the next
     * one to start on that thread (the format's default for "f"). */
    fprintf(out, "{\"name\":\"bucket\",\"cat\":\"flow\",\"ph\":\"%c\",\"id\":%" PRIu64 ",\"ts\":", it->ph, it->flow_id);
    tro_put_us(out, it->ts_ns);
    fprintf(out, ",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 "%s}", it->pid, it->tid, it->ph == 'f' ? ",\"bp\":\"e\"" : "");
}

static const char *tro_clock_name(trace_out_clock c)
{
    return c == TRACE_OUT_SAME ? "master" : c == TRACE_OUT_ALIGNED ? "aligned" : "unaligned";
}

static json_t *tro_metadata(const tro_doc *doc)
{
    json_t *nodes = json_array();
    uint64_t dropped = 0;
    for (size_t k = 0; nodes && k < doc->nnodes; k++) {
        const trace_out_node *n = doc->node[k];
        const trace_dump *d = n->dump;
        char name[64], msg[256];
        tro_node_name(d, name, sizeof name);
        const char *drop = trace_drop_message(&d->drops, d->capacity, name, msg, sizeof msg);
        dropped += d->drops.count;
        json_t *o =
            json_pack("{s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:[I,I], s:i, s:I, s:s?}", "process", name, "pid",
                      (int)k + 1, "clock", tro_clock_name(n->state), "offset_ns", (json_int_t)tro_offset(n),
                      "uncertainty_ns", (json_int_t)(n->state == TRACE_OUT_ALIGNED ? n->clock.uncertainty_ns : 0),
                      "samples", (json_int_t)(n->state == TRACE_OUT_ALIGNED ? n->clock.used : 0), "spans",
                      (json_int_t)d->nev, "window", (json_int_t)d->window.first, (json_int_t)d->window.last, "capacity",
                      (int)d->capacity, "dropped", (json_int_t)d->drops.count, "dropped_message", drop);
        if (json_array_append_new(nodes, o) != 0) {
            json_decref(nodes);
            return NULL;
        }
    }
    if (!nodes)
        return NULL;
    return json_pack("{s:i, s:s, s:I, s:o, s:I, s:I}", "psbench_trace", 1, "clock",
                     "the master's CLOCK_MONOTONIC, each node's moved by its offset (node - master); "
                     "ts in microseconds from origin_ns",
                     "origin_ns", (json_int_t)doc->origin_ns, "nodes", nodes, "dropped", (json_int_t)dropped, "flows",
                     (json_int_t)doc->nflows);
}

static int tro_write(FILE *out, const tro_doc *doc)
{
    bool first = true;
    fputs("{\"traceEvents\":[", out);
    if (tro_put_names(out, doc, &first) != 0)
        return -1;
    for (size_t i = 0; i < doc->nitems; i++) {
        fputs(first ? "\n" : ",\n", out);
        first = false;
        tro_put_item(out, doc, &doc->item[i]);
    }
    fputs("\n],\n\"displayTimeUnit\":\"ms\",\n\"metadata\":", out);
    if (tro_put_json(out, tro_metadata(doc)) != 0)
        return -1;
    fputs("}\n", out);
    return 0;
}

/* The nodes sorted into the document's order (a malloc'd array of
 * pointers into nodes), refusing two of the same role and rank. NULL with
 * err (*sorted NULL for n 0 too: then 0 is returned). */
static int tro_sort_nodes(const trace_out_node *nodes, size_t n, const trace_out_node ***sorted, char *err,
                          size_t errlen)
{
    *sorted = NULL;
    if (n == 0)
        return 0;
    const trace_out_node **v = malloc(n * sizeof *v);
    if (!v) {
        errbuf_set(err, errlen, "trace: out of memory");
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        assert(nodes[k].dump);
        v[k] = &nodes[k];
    }
    if (n > 1)
        qsort(v, n, sizeof *v, tro_cmp_node);
    for (size_t k = 1; k < n; k++)
        if (tro_cmp_node(&v[k - 1], &v[k]) == 0) {
            char name[64];
            tro_node_name(v[k]->dump, name, sizeof name);
            errbuf_set(err, errlen, "trace: two traces of %s", name);
            free(v);
            return -1;
        }
    *sorted = v;
    return 0;
}

int trace_out_write(FILE *out, const trace_out_node *nodes, size_t n, char *err, size_t errlen)
{
    tro_doc doc = {0};
    int rc = -1;
    if (tro_sort_nodes(nodes, n, &doc.node, err, errlen) != 0)
        return -1;
    doc.nnodes = n;
    if (tro_add_spans(&doc, err, errlen) != 0 || tro_add_flows(&doc, err, errlen) != 0)
        goto out;
    if (doc.nitems > 1)
        qsort(doc.item, doc.nitems, sizeof *doc.item, tro_cmp_item);
    if (tro_write(out, &doc) != 0) {
        errbuf_set(err, errlen, "trace: out of memory writing the document");
        goto out;
    }
    if (fflush(out) != 0 || ferror(out)) {
        errbuf_set(err, errlen, "trace: could not write the document");
        goto out;
    }
    rc = 0;
out:
    free(doc.item);
    free(doc.sp);
    free(doc.node);
    return rc;
}

int trace_out_spans(const trace_out_node *nodes, size_t n, trace_out_span **out, size_t *count, char *err,
                    size_t errlen)
{
    const trace_out_node **sorted;
    *out = NULL;
    *count = 0;
    if (tro_sort_nodes(nodes, n, &sorted, err, errlen) != 0)
        return -1;
    int rc = tro_spans(sorted, n, out, count, err, errlen);
    free(sorted);
    return rc;
}

char *trace_out_json(const trace_out_node *nodes, size_t n, size_t *len, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) {
        errbuf_set(err, errlen, "trace: out of memory");
        return NULL;
    }
    int rc = trace_out_write(f, nodes, n, err, errlen);
    if (fclose(f) != 0 && rc == 0) {
        errbuf_set(err, errlen, "trace: out of memory");
        rc = -1;
    }
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    if (len)
        *len = size;
    return buf;
}
