/* tracejob.c — a node's trace in a job under a master (see tracejob.h). */
#include "shared/tracejob.h"
#include "shared/clocksync.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

json_t *tracejob_assign_json(trace_window window, uint32_t capacity)
{
    assert(window.first <= window.last && window.last <= TRACE_STEP_MAX);
    return json_pack("{s:[I,I], s:I}", "steps", (json_int_t)window.first, (json_int_t)window.last, "buffer",
                     (json_int_t)capacity);
}

/* The master's `trace` into conf (on, its window and ring size). */
static int tracejob_master_conf(const json_t *t, trace_conf *conf, char *err, size_t errlen)
{
    const json_t *steps = json_object_get(t, "steps"), *buf = json_object_get(t, "buffer");
    const json_t *a = json_array_get(steps, 0), *b = json_array_get(steps, 1);
    if (!json_is_object(t) || !json_is_array(steps) || json_array_size(steps) != 2 || !json_is_integer(a) ||
        !json_is_integer(b) || json_integer_value(a) < 0 || json_integer_value(a) > json_integer_value(b)) {
        errbuf_set(err, errlen, "the master sent a bad trace: \"steps\" is not [first, last], 0 <= first <= last");
        return -1;
    }
    if (!json_is_integer(buf) || json_integer_value(buf) < 1 || json_integer_value(buf) > TRACE_CAPACITY_MAX) {
        errbuf_set(err, errlen, "the master sent a bad trace: \"buffer\" is not a whole number in 1..%u",
                   TRACE_CAPACITY_MAX);
        return -1;
    }
    conf->on = true;
    conf->window = (trace_window){(uint64_t)json_integer_value(a), (uint64_t)json_integer_value(b)};
    conf->capacity = (uint32_t)json_integer_value(buf);
    return 0;
}

int tracejob_conf(const json_t *assign, const trace_flags *own, trace_role role, uint32_t rank, trace_conf *conf,
                  char *err, size_t errlen)
{
    *conf = (trace_conf){
        .role = role, .rank = rank, .on = false, .capacity = TRACEJOB_DEFAULT_BUFFER, .window = TRACE_ALL_STEPS};
    const json_t *t = assign ? json_object_get(assign, "trace") : NULL;
    if (t && !json_is_null(t) && tracejob_master_conf(t, conf, err, errlen) < 0)
        return -1;
    if (own) {
        conf->on = conf->on || own->on;
        if (own->window_set)
            conf->window = own->window;
        if (own->capacity)
            conf->capacity = own->capacity;
    }
    return 0;
}

/* One part: count spans of d from first. */
static int tracejob_send_part(const trace_dump *d, size_t first, size_t count, bool final, tracejob_send_fn send,
                              void *ctx, char *err, size_t errlen)
{
    json_t *dump = trace_dump_json(d, first, count);
    json_t *body = dump ? json_pack("{s:b, s:o}", "final", final, "dump", dump) : NULL;
    if (!body) {
        errbuf_set(err, errlen, "trace: out of memory for a part of %zu spans", count);
        return -1;
    }
    return send(ctx, body, err, errlen);
}

int tracejob_ship(const trace_node *n, trace_cursor *cur, bool final, tracejob_send_fn send, void *ctx, char *err,
                  size_t errlen)
{
    if (!n || !trace_node_on(n))
        return 0;
    trace_dump *d = trace_node_snapshot_since(n, cur);
    if (!d) {
        errbuf_set(err, errlen, "trace: out of memory for a snapshot");
        return -1;
    }
    /* The times as the node tells them (a test's skew: clocksync.h). */
    for (size_t i = 0; i < d->nev; i++) {
        d->ev[i].start_ns = clocksync_node_time(d->ev[i].start_ns);
        d->ev[i].end_ns = clocksync_node_time(d->ev[i].end_ns);
    }
    int rc = 0;
    if (d->nev == 0 && final)
        rc = tracejob_send_part(d, 0, 0, true, send, ctx, err, errlen);
    for (size_t first = 0; rc == 0 && first < d->nev; first += TRACEJOB_PART_EVENTS) {
        size_t count = d->nev - first < TRACEJOB_PART_EVENTS ? d->nev - first : TRACEJOB_PART_EVENTS;
        rc = tracejob_send_part(d, first, count, final && first + count == d->nev, send, ctx, err, errlen);
    }
    trace_dump_free(d);
    return rc;
}

int tracejob_take(const json_t *body, trace_dump **dump, bool *final, char *err, size_t errlen)
{
    *dump = NULL;
    const json_t *f = json_object_get(body, "final"), *d = json_object_get(body, "dump");
    if (!json_is_boolean(f)) {
        errbuf_set(err, errlen, "\"final\" is %s", f ? "not true or false" : "missing");
        return -1;
    }
    if (!json_is_object(d)) {
        errbuf_set(err, errlen, "\"dump\" is %s", d ? "not an object" : "missing");
        return -1;
    }
    if (!(*dump = trace_dump_from_json(d, err, errlen)))
        return -1;
    *final = json_is_true(f);
    return 0;
}
