/* trace.c — a node's trace rings, their snapshot and their JSON (see trace.h). */
#include "shared/trace.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- names -------------------------------------------------------------------- */

static const struct {
    const char *name, *category;
    unsigned flow;
} trace_spans[TRACE_NSPANS] = {
#define TRACE_X_ROW(id, name, cat, flow) [TRACE_##id] = {name, cat, flow},
    TRACE_SPANS(TRACE_X_ROW)
#undef TRACE_X_ROW
};

static const char *const trace_roles[TRACE_NROLES] = {
    [TRACE_TRAINER] = "trainer", [TRACE_SERVER] = "server", [TRACE_MASTER] = "master"};

const char *trace_span_name(trace_span s)
{
    assert((unsigned)s < TRACE_NSPANS);
    return trace_spans[s].name;
}

const char *trace_span_category(trace_span s)
{
    assert((unsigned)s < TRACE_NSPANS);
    return trace_spans[s].category;
}

unsigned trace_span_flow(trace_span s)
{
    assert((unsigned)s < TRACE_NSPANS);
    return trace_spans[s].flow;
}

int trace_span_lookup(const char *name)
{
    for (int i = 0; name && i < TRACE_NSPANS; i++)
        if (strcmp(trace_spans[i].name, name) == 0)
            return i;
    return -1;
}

const char *trace_role_name(trace_role r)
{
    assert((unsigned)r < TRACE_NROLES);
    return trace_roles[r];
}

int trace_role_lookup(const char *name)
{
    for (int i = 0; name && i < TRACE_NROLES; i++)
        if (strcmp(trace_roles[i], name) == 0)
            return i;
    return -1;
}

/* ---- the window ------------------------------------------------------------------ */

/* A step number: decimal digits only (no sign, no space), at most TRACE_STEP_MAX. */
static int trace_parse_step(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return -1;
    char buf[24];
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return -1;
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    if (errno != 0 || v > TRACE_STEP_MAX)
        return -1;
    *out = v;
    return 0;
}

int trace_window_parse(const char *s, trace_window *w, char *err, size_t errlen)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    trace_window got = TRACE_ALL_STEPS;
    size_t len = s ? strlen(s) : 0;
    size_t head = colon ? (size_t)(colon - s) : len;
    if (!s || trace_parse_step(s, head, &got.first) != 0 ||
        (colon && colon[1] != '\0' && trace_parse_step(colon + 1, len - head - 1, &got.last) != 0)) {
        errbuf_set(err, errlen, "trace steps '%.64s': expected A:B, A: or A (steps, decimal)", s ? s : "");
        return -1;
    }
    if (!colon)
        got.last = got.first;
    if (got.first > got.last) {
        errbuf_set(err, errlen, "trace steps '%.64s': the first step is after the last", s);
        return -1;
    }
    *w = got;
    return 0;
}

/* ---- the node and its rings ---------------------------------------------------------- */

struct trace_node {
    trace_conf conf;
    size_t nlanes;
    char lane[TRACE_LANES_MAX][TRACE_NAME_MAX];
    trace_ring *ring[TRACE_RINGS_MAX]; /* each owned */
    size_t nrings;
};

/* A name fits: not empty, with its NUL in TRACE_NAME_MAX bytes. */
static bool trace_name_ok(const char *name)
{
    return name && name[0] != '\0' && strnlen(name, TRACE_NAME_MAX) < TRACE_NAME_MAX;
}

trace_node *trace_node_new(const trace_conf *conf, char *err, size_t errlen)
{
    if ((unsigned)conf->role >= TRACE_NROLES) {
        errbuf_set(err, errlen, "trace: no such role (%d)", (int)conf->role);
        return NULL;
    }
    if (conf->capacity < 1 || conf->capacity > TRACE_CAPACITY_MAX) {
        errbuf_set(err, errlen, "trace: a ring of %" PRIu32 " spans: it holds 1 to %u", conf->capacity,
                   TRACE_CAPACITY_MAX);
        return NULL;
    }
    if (conf->window.first > conf->window.last || conf->window.last > TRACE_STEP_MAX) {
        errbuf_set(err, errlen, "trace: steps %" PRIu64 "..%" PRIu64 ": the first is after the last, or past %" PRIu64,
                   conf->window.first, conf->window.last, TRACE_STEP_MAX);
        return NULL;
    }
    trace_node *n = calloc(1, sizeof *n);
    if (!n) {
        errbuf_set(err, errlen, "trace: out of memory");
        return NULL;
    }
    n->conf = *conf;
    return n;
}

void trace_node_free(trace_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->nrings; i++) {
        free(n->ring[i]->ev);
        free(n->ring[i]);
    }
    free(n);
}

bool trace_node_on(const trace_node *n) { return n->conf.on; }

int trace_lane(trace_node *n, const char *name)
{
    if (!trace_name_ok(name))
        return -1;
    for (size_t i = 0; i < n->nlanes; i++)
        if (strcmp(n->lane[i], name) == 0)
            return (int)i;
    if (n->nlanes == TRACE_LANES_MAX)
        return -1;
    strcpy(n->lane[n->nlanes], name); /* fits: trace_name_ok */
    return (int)n->nlanes++;
}

size_t trace_lane_count(const trace_node *n) { return n->nlanes; }

const char *trace_lane_name(const trace_node *n, size_t lane)
{
    assert(lane < n->nlanes);
    return n->lane[lane];
}

/* Writes a byte of every page of p (len bytes). Through a volatile: a
 * memset of zeros after malloc is made a calloc by the compiler, whose
 * pages stay untouched. */
static void trace_touch(void *p, size_t len)
{
    volatile char *c = p;
    for (size_t off = 0; off < len; off += 4096)
        c[off] = 0;
}

trace_ring *trace_ring_add(trace_node *n, const char *name)
{
    if (!trace_name_ok(name) || n->nrings == TRACE_RINGS_MAX)
        return NULL;
    trace_ring *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    /* Off: no buffer at all; the gate stays off and nothing reaches put.
     * On: every page touched now, so that no first-touch fault lands in a
     * traced step. */
    if (n->conf.on) {
        if (!(r->ev = malloc((size_t)n->conf.capacity * sizeof *r->ev))) {
            free(r);
            return NULL;
        }
        trace_touch(r->ev, (size_t)n->conf.capacity * sizeof *r->ev);
    }
    r->gate = n->conf.on ? TRACE_GATE_OUTSIDE : TRACE_GATE_OFF;
    r->step = 0;
    r->node = n;
    r->capacity = n->conf.capacity;
    atomic_init(&r->n, 0);
    atomic_init(&r->dropped, 0);
    strcpy(r->name, name);
    n->ring[n->nrings++] = r;
    return r;
}

/* The gate for step on this node. */
static trace_gate trace_gate_for(const trace_node *n, uint64_t step)
{
    if (!n->conf.on)
        return TRACE_GATE_OFF;
    if (step == TRACE_NO_STEP || (step >= n->conf.window.first && step <= n->conf.window.last))
        return TRACE_GATE_OPEN;
    return TRACE_GATE_OUTSIDE;
}

void trace_ring_step(trace_ring *r, uint64_t step)
{
    r->step = step;
    r->gate = trace_gate_for(r->node, step);
}

void trace_ring_put(trace_ring *r, trace_span s, unsigned lane, uint64_t start_ns, uint64_t end_ns, trace_ids ids)
{
    assert(r->gate == TRACE_GATE_OPEN && r->ev);
    assert((unsigned)s < TRACE_NSPANS && lane < r->node->nlanes);
    assert(end_ns >= start_ns);
    /* Only this thread writes n: a relaxed read of its own value. */
    uint32_t at = atomic_load_explicit(&r->n, memory_order_relaxed);
    if (at == r->capacity) {
        /* Full: the oldest spans of the window stay, this one is counted.
         * The steps go before the count that publishes them. */
        uint64_t d = atomic_load_explicit(&r->dropped, memory_order_relaxed);
        if (d == 0)
            r->drop_first = r->step;
        atomic_store_explicit(&r->drop_last, r->step, memory_order_relaxed);
        atomic_store_explicit(&r->dropped, d + 1, memory_order_release);
        return;
    }
    r->ev[at] =
        (trace_event){.start_ns = start_ns, .end_ns = end_ns, .ids = ids, .span = (uint16_t)s, .lane = (uint16_t)lane};
    atomic_store_explicit(&r->n, at + 1, memory_order_release);
}

uint32_t trace_ring_count(const trace_ring *r) { return atomic_load_explicit(&r->n, memory_order_acquire); }

uint64_t trace_ring_dropped(const trace_ring *r) { return atomic_load_explicit(&r->dropped, memory_order_acquire); }

trace_drops trace_ring_drops(const trace_ring *r)
{
    trace_drops d = {.count = trace_ring_dropped(r)};
    if (d.count > 0) {
        d.first_step = r->drop_first;
        d.last_step = atomic_load_explicit(&r->drop_last, memory_order_relaxed);
    }
    return d;
}

void trace_node_reset(trace_node *n)
{
    for (size_t i = 0; i < n->nrings; i++) {
        trace_ring *r = n->ring[i];
        atomic_store_explicit(&r->n, 0, memory_order_relaxed);
        atomic_store_explicit(&r->dropped, 0, memory_order_relaxed);
        r->drop_first = 0;
        atomic_store_explicit(&r->drop_last, 0, memory_order_relaxed);
        r->step = 0;
        r->gate = n->conf.on ? TRACE_GATE_OUTSIDE : TRACE_GATE_OFF;
    }
}

/* ---- the dump ---------------------------------------------------------------------- */

/* d's drops with another ring's (or node's) added. */
static void trace_drops_add(trace_drops *d, const trace_drops *more)
{
    if (more->count == 0)
        return;
    if (d->count == 0) {
        *d = *more;
        return;
    }
    d->count += more->count;
    d->first_step = more->first_step < d->first_step ? more->first_step : d->first_step;
    d->last_step = more->last_step > d->last_step ? more->last_step : d->last_step;
}

/* An empty dump with room for cap events (NULL: out of memory). */
static trace_dump *trace_dump_alloc(size_t cap)
{
    trace_dump *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    if (cap > 0 && !(d->ev = malloc(cap * sizeof *d->ev))) {
        free(d);
        return NULL;
    }
    return d;
}

void trace_dump_free(trace_dump *d)
{
    if (!d)
        return;
    free(d->ev);
    free(d);
}

trace_dump *trace_node_snapshot_since(const trace_node *n, trace_cursor *cur)
{
    /* Each ring's count read once: what it published by then is whole. */
    uint32_t count[TRACE_RINGS_MAX], from[TRACE_RINGS_MAX];
    size_t total = 0;
    for (size_t i = 0; i < n->nrings; i++) {
        count[i] = trace_ring_count(n->ring[i]);
        /* A cursor past the count: the node was reset since (a new run). */
        from[i] = cur && cur->taken[i] <= count[i] ? cur->taken[i] : 0;
        total += count[i] - from[i];
    }
    trace_dump *d = trace_dump_alloc(total);
    if (!d)
        return NULL;
    d->role = n->conf.role;
    d->rank = n->conf.rank;
    d->window = n->conf.window;
    d->capacity = n->conf.capacity;
    d->nlanes = n->nlanes;
    memcpy(d->lane, n->lane, sizeof d->lane);
    for (size_t i = 0; i < n->nrings; i++) {
        if (count[i] > from[i]) /* an off ring has no buffer: no memcpy from NULL */
            memcpy(d->ev + d->nev, n->ring[i]->ev + from[i], (count[i] - from[i]) * sizeof *d->ev);
        d->nev += count[i] - from[i];
        trace_drops rd = trace_ring_drops(n->ring[i]);
        trace_drops_add(&d->drops, &rd);
        if (cur)
            cur->taken[i] = count[i];
    }
    return d;
}

trace_dump *trace_node_snapshot(const trace_node *n) { return trace_node_snapshot_since(n, NULL); }

int trace_dump_append(trace_dump *into, const trace_dump *more, char *err, size_t errlen)
{
    if (into->role != more->role || into->rank != more->rank) {
        errbuf_set(err, errlen, "trace: a part of %s %" PRIu32 "'s trace added to %s %" PRIu32 "'s",
                   trace_role_name(more->role), more->rank, trace_role_name(into->role), into->rank);
        return -1;
    }
    if (into->window.first != more->window.first || into->window.last != more->window.last ||
        into->capacity != more->capacity) {
        errbuf_set(err, errlen, "trace: a part whose window or ring size differs from the earlier parts'");
        return -1;
    }
    /* A node's lanes only grow, in the order they were registered. */
    if (more->nlanes < into->nlanes) {
        errbuf_set(err, errlen, "trace: a part with %zu lanes after one with %zu", more->nlanes, into->nlanes);
        return -1;
    }
    for (size_t i = 0; i < into->nlanes; i++)
        if (strcmp(into->lane[i], more->lane[i]) != 0) {
            errbuf_set(err, errlen, "trace: a part whose lane %zu is not the earlier parts' (%s)", i, into->lane[i]);
            return -1;
        }
    if (more->nev > TRACE_EVENTS_MAX - into->nev) {
        errbuf_set(err, errlen, "trace: more than %u spans from one node", TRACE_EVENTS_MAX);
        return -1;
    }
    if (more->nev > 0) {
        trace_event *ev = realloc(into->ev, (into->nev + more->nev) * sizeof *ev);
        if (!ev) {
            errbuf_set(err, errlen, "trace: out of memory for %zu spans", into->nev + more->nev);
            return -1;
        }
        memcpy(ev + into->nev, more->ev, more->nev * sizeof *ev);
        into->ev = ev;
        into->nev += more->nev;
    }
    memcpy(into->lane, more->lane, sizeof into->lane);
    into->nlanes = more->nlanes;
    into->drops = more->drops; /* counted from the start of the run */
    return 0;
}

trace_dump *trace_dump_empty(trace_role role, uint32_t rank, trace_window window, uint32_t capacity)
{
    trace_dump *d = trace_dump_alloc(0);
    if (d)
        *d = (trace_dump){.role = role, .rank = rank, .window = window, .capacity = capacity};
    return d;
}

/* ---- the drops' sentence ----------------------------------------------------------- */

/* v with a comma every three digits ("12,345"), into buf (27 bytes suffice). */
static const char *trace_commas(uint64_t v, char *buf, size_t len)
{
    char digits[24];
    int nd = snprintf(digits, sizeof digits, "%" PRIu64, v);
    size_t at = 0;
    for (int i = 0; i < nd && at + 2 < len; i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at] = '\0';
    return buf;
}

const char *trace_drop_message(const trace_drops *d, uint32_t capacity, const char *who, char *buf, size_t len)
{
    if (d->count == 0)
        return NULL;
    char n[32], cap[32], steps[64];
    if (d->first_step == TRACE_NO_STEP && d->last_step == TRACE_NO_STEP)
        snprintf(steps, sizeof steps, "between steps");
    else if (d->last_step == TRACE_NO_STEP) /* spans of steps and between them */
        snprintf(steps, sizeof steps, "of steps %" PRIu64 ".. and between steps", d->first_step);
    else if (d->first_step == d->last_step)
        snprintf(steps, sizeof steps, "of step %" PRIu64, d->first_step);
    else
        snprintf(steps, sizeof steps, "of steps %" PRIu64 "..%" PRIu64, d->first_step, d->last_step);
    snprintf(buf, len, "trace%s%s: %s span%s %s dropped: the ring holds %s; raise --trace-buffer", who ? " of " : "",
             who ? who : "", trace_commas(d->count, n, sizeof n), d->count == 1 ? "" : "s", steps,
             trace_commas(capacity, cap, sizeof cap));
    return buf;
}

/* ---- JSON out ------------------------------------------------------------------------ */

#define TRACE_JSON_VERSION 1

/* The step as JSON: TRACE_NO_STEP is -1 (JSON integers stop at INT64_MAX). */
static json_int_t trace_step_int(uint64_t step)
{
    return step == TRACE_NO_STEP ? -1 : step > INT64_MAX ? INT64_MAX : (json_int_t)step;
}

static json_t *trace_event_json(const trace_event *e, uint64_t t0)
{
    assert(e->start_ns >= t0 && e->end_ns >= e->start_ns);
    return json_pack("[i,i,I,I,I,I,i,i]", (int)e->span, (int)e->lane, (json_int_t)(e->start_ns - t0),
                     (json_int_t)(e->end_ns - e->start_ns), (json_int_t)e->ids.batch, (json_int_t)e->ids.bucket,
                     (int)e->ids.trainer, (int)e->ids.server);
}

json_t *trace_dump_json(const trace_dump *d, size_t first, size_t count)
{
    assert(first <= d->nev && count <= d->nev - first);
    /* Times go as offsets from the earliest start: shorter numbers. */
    uint64_t t0 = count ? d->ev[first].start_ns : 0;
    for (size_t i = first + 1; i < first + count; i++)
        t0 = d->ev[i].start_ns < t0 ? d->ev[i].start_ns : t0;
    assert(t0 <= INT64_MAX);
    /* The arrays are made empty inside doc, then filled through borrowed
     * references: doc is their one owner from the start. */
    json_t *doc = json_pack("{s:i, s:s, s:I, s:[I,I], s:i, s:[], s:[], s:{s:I, s:I, s:I}, s:I, s:[]}", "v",
                            TRACE_JSON_VERSION, "role", trace_role_name(d->role), "rank", (json_int_t)d->rank, "window",
                            trace_step_int(d->window.first), trace_step_int(d->window.last), "capacity",
                            (int)d->capacity, "lanes", "names", "dropped", "count",
                            (json_int_t)(d->drops.count > INT64_MAX ? INT64_MAX : d->drops.count), "first_step",
                            trace_step_int(d->drops.first_step), "last_step", trace_step_int(d->drops.last_step), "t0",
                            (json_int_t)t0, "events");
    if (!doc)
        return NULL;
    json_t *lanes = json_object_get(doc, "lanes"), *names = json_object_get(doc, "names");
    json_t *events = json_object_get(doc, "events");
    int bad = 0;
    for (size_t i = 0; !bad && i < d->nlanes; i++)
        bad = json_array_append_new(lanes, json_string(d->lane[i])) != 0;
    for (int s = 0; !bad && s < TRACE_NSPANS; s++)
        bad = json_array_append_new(names, json_string(trace_span_name((trace_span)s))) != 0;
    for (size_t i = first; !bad && i < first + count; i++)
        bad = json_array_append_new(events, trace_event_json(&d->ev[i], t0)) != 0;
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

char *trace_dump_encode(const trace_dump *d)
{
    json_t *doc = trace_dump_json(d, 0, d->nev);
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return s;
}

/* ---- JSON in -------------------------------------------------------------------------- */

/* obj[key] as an integer in [min, max], or -1 with the reason in err. */
static int trace_get_int(const json_t *obj, const char *key, json_int_t min, json_int_t max, json_int_t *out, char *err,
                         size_t errlen)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) {
        errbuf_set(err, errlen, "trace JSON: no \"%s\"", key);
        return -1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        errbuf_set(err, errlen, "trace JSON: \"%s\" is not an integer in %lld..%lld", key, (long long)min,
                   (long long)max);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

/* obj[key] as an array of at most max elements, or NULL with the reason. */
static const json_t *trace_get_array(const json_t *obj, const char *key, size_t max, char *err, size_t errlen)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_array(v)) {
        errbuf_set(err, errlen, "trace JSON: \"%s\" is %s", key, v ? "not an array" : "missing");
        return NULL;
    }
    if (json_array_size(v) > max) {
        errbuf_set(err, errlen, "trace JSON: \"%s\" has %zu elements, more than %zu", key, json_array_size(v), max);
        return NULL;
    }
    return v;
}

/* A step from JSON: -1 is TRACE_NO_STEP. */
static uint64_t trace_step_of(json_int_t v) { return v < 0 ? TRACE_NO_STEP : (uint64_t)v; }

/* The header: everything but the events. */
static int trace_decode_head(const json_t *doc, trace_dump *d, char *err, size_t errlen)
{
    json_int_t v, rank, cap;
    if (trace_get_int(doc, "v", 0, INT32_MAX, &v, err, errlen) != 0)
        return -1;
    if (v != TRACE_JSON_VERSION) {
        errbuf_set(err, errlen, "trace JSON: version %lld, this build reads %d", (long long)v, TRACE_JSON_VERSION);
        return -1;
    }
    int role = trace_role_lookup(json_string_value(json_object_get(doc, "role")));
    if (role < 0) {
        errbuf_set(err, errlen, "trace JSON: \"role\" is not trainer, server or master");
        return -1;
    }
    d->role = (trace_role)role;
    if (trace_get_int(doc, "rank", 0, INT32_MAX, &rank, err, errlen) != 0 ||
        trace_get_int(doc, "capacity", 1, TRACE_CAPACITY_MAX, &cap, err, errlen) != 0)
        return -1;
    d->rank = (uint32_t)rank;
    d->capacity = (uint32_t)cap;
    const json_t *w = json_object_get(doc, "window");
    if (!json_is_array(w) || json_array_size(w) != 2 || !json_is_integer(json_array_get(w, 0)) ||
        !json_is_integer(json_array_get(w, 1)) || json_integer_value(json_array_get(w, 0)) < 0 ||
        json_integer_value(json_array_get(w, 0)) > json_integer_value(json_array_get(w, 1))) {
        errbuf_set(err, errlen, "trace JSON: \"window\" is not [first, last] steps, first <= last");
        return -1;
    }
    d->window.first = (uint64_t)json_integer_value(json_array_get(w, 0));
    d->window.last = (uint64_t)json_integer_value(json_array_get(w, 1));
    const json_t *lanes = trace_get_array(doc, "lanes", TRACE_LANES_MAX, err, errlen);
    if (!lanes)
        return -1;
    for (size_t i = 0; i < json_array_size(lanes); i++) {
        const char *name = json_string_value(json_array_get(lanes, i));
        if (!trace_name_ok(name)) {
            errbuf_set(err, errlen, "trace JSON: lane %zu's name is not a string of 1 to %d bytes", i,
                       TRACE_NAME_MAX - 1);
            return -1;
        }
        strcpy(d->lane[i], name);
    }
    d->nlanes = json_array_size(lanes);
    const json_t *dr = json_object_get(doc, "dropped");
    json_int_t count, first, last;
    if (!json_is_object(dr)) {
        errbuf_set(err, errlen, "trace JSON: \"dropped\" is not an object");
        return -1;
    }
    if (trace_get_int(dr, "count", 0, INT64_MAX, &count, err, errlen) != 0 ||
        trace_get_int(dr, "first_step", -1, INT64_MAX, &first, err, errlen) != 0 ||
        trace_get_int(dr, "last_step", -1, INT64_MAX, &last, err, errlen) != 0)
        return -1;
    d->drops = (trace_drops){(uint64_t)count, trace_step_of(first), trace_step_of(last)};
    return 0;
}

/* "names": each a span this build knows; map[i] is the span of name i. */
static int trace_decode_names(const json_t *doc, int *map, size_t *nmap, char *err, size_t errlen)
{
    const json_t *names = trace_get_array(doc, "names", TRACE_NSPANS * 4, err, errlen);
    if (!names)
        return -1;
    for (size_t i = 0; i < json_array_size(names); i++) {
        const char *name = json_string_value(json_array_get(names, i));
        if ((map[i] = trace_span_lookup(name)) < 0) {
            text_shown b;
            errbuf_set(err, errlen, "trace JSON: unknown span name %s",
                       name ? text_show(name, '\'', &b) : "(not a string)");
            return -1;
        }
    }
    *nmap = json_array_size(names);
    return 0;
}

/* Event i: [name, lane, start - t0, end - start, batch, bucket, trainer, server]. */
static int trace_decode_event(const json_t *a, size_t i, uint64_t t0, const int *map, size_t nmap, size_t nlanes,
                              trace_event *e, char *err, size_t errlen)
{
    json_int_t f[8];
    if (!json_is_array(a) || json_array_size(a) != 8) {
        errbuf_set(err, errlen, "trace JSON: event %zu is not an array of 8 integers", i);
        return -1;
    }
    for (size_t k = 0; k < 8; k++) {
        const json_t *v = json_array_get(a, k);
        if (!json_is_integer(v)) {
            errbuf_set(err, errlen, "trace JSON: event %zu is not an array of 8 integers", i);
            return -1;
        }
        f[k] = json_integer_value(v);
    }
    if (f[0] < 0 || (size_t)f[0] >= nmap) {
        errbuf_set(err, errlen, "trace JSON: event %zu: name %lld out of range (%zu names)", i, (long long)f[0], nmap);
        return -1;
    }
    if (f[1] < 0 || (size_t)f[1] >= nlanes) {
        errbuf_set(err, errlen, "trace JSON: event %zu: lane %lld out of range (%zu lanes)", i, (long long)f[1],
                   nlanes);
        return -1;
    }
    if (f[2] < 0 || f[3] < 0) {
        errbuf_set(err, errlen, "trace JSON: event %zu %s", i, f[2] < 0 ? "starts before t0" : "ends before it starts");
        return -1;
    }
    /* t0 + start + duration within INT64_MAX: every time stays a clock reading. */
    if ((uint64_t)f[2] > INT64_MAX - t0 || (uint64_t)f[3] > INT64_MAX - t0 - (uint64_t)f[2]) {
        errbuf_set(err, errlen, "trace JSON: event %zu ends past the clock's range", i);
        return -1;
    }
    if (f[4] < -1 || f[5] < -1 || f[6] < -1 || f[6] > INT32_MAX || f[7] < -1 || f[7] > INT32_MAX) {
        errbuf_set(err, errlen, "trace JSON: event %zu: an id out of range (-1 is none)", i);
        return -1;
    }
    e->start_ns = t0 + (uint64_t)f[2];
    e->end_ns = e->start_ns + (uint64_t)f[3];
    e->ids = (trace_ids){f[4], f[5], (int32_t)f[6], (int32_t)f[7]};
    e->span = (uint16_t)map[f[0]];
    e->lane = (uint16_t)f[1];
    return 0;
}

trace_dump *trace_dump_from_json(const json_t *doc, char *err, size_t errlen)
{
    trace_dump *d = NULL;
    int map[TRACE_NSPANS * 4];
    size_t nmap = 0;
    json_int_t t0 = 0;
    const json_t *events = NULL;
    if (!json_is_object(doc)) {
        errbuf_set(err, errlen, "trace JSON: not an object");
        return NULL;
    }
    if (trace_get_int(doc, "t0", 0, INT64_MAX, &t0, err, errlen) != 0 ||
        !(events = trace_get_array(doc, "events", TRACE_EVENTS_MAX, err, errlen)))
        return NULL;
    if (!(d = trace_dump_alloc(json_array_size(events)))) {
        errbuf_set(err, errlen, "trace JSON: out of memory for %zu events", json_array_size(events));
        return NULL;
    }
    if (trace_decode_head(doc, d, err, errlen) != 0 || trace_decode_names(doc, map, &nmap, err, errlen) != 0)
        goto fail;
    for (size_t i = 0; i < json_array_size(events); i++)
        if (trace_decode_event(json_array_get(events, i), i, (uint64_t)t0, map, nmap, d->nlanes, &d->ev[i], err,
                               errlen) != 0)
            goto fail;
    d->nev = json_array_size(events);
    return d;
fail:
    trace_dump_free(d);
    return NULL;
}

trace_dump *trace_dump_decode(const char *json, size_t len, char *err, size_t errlen)
{
    if (len > TRACE_JSON_MAX) {
        errbuf_set(err, errlen, "trace JSON: %zu bytes, more than %zu", len, TRACE_JSON_MAX);
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        errbuf_set(err, errlen, "trace JSON: not JSON (line %d: %s)", jerr.line, jerr.text);
        return NULL;
    }
    trace_dump *d = trace_dump_from_json(doc, err, errlen);
    json_decref(doc);
    return d;
}
