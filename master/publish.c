/* publish.c — the snapshot of the master's state that the HTTP thread
 * serves (master_publish, master.h): the run's phase as the contract names
 * it, its progress, every registered node, the aggregated metrics, the
 * resolved configuration. Built on
 * the loop's thread; the HTTP thread only reads what was published last
 * (http.c). */
#include "master/hoststate.h"
#include "master/headline.h"
#include "master/master.h"
#include "master/history.h"
#include "master/http.h"
#include "master/mtrace.h"
#include "master/trace_an.h"
#include "master/snapshot.h"
#include "shared/frame.h"
#include "shared/hostinfo.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds since the epoch: the history's points carry the time the page
 * plots them at (its own samples use Date.now()). */
static double publish_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Servers then trainers, by rank: a stable order for the dashboard. Returns
 * how many were filled in (nodes holds every registered node). */
static size_t publish_nodes(const master *m, snap_node *nodes, double now)
{
    size_t i = 0;
    for (int r = AGG_SERVER; r >= AGG_TRAINER; r--) {
        node **v = r == AGG_TRAINER ? m->trainers : m->servers;
        uint32_t cap = r == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
        for (uint32_t k = 0; k < cap; k++) {
            const node *n = v[k];
            if (!n)
                continue;
            snap_node *sn = &nodes[i++];
            sn->role = agg_role_name(n->role);
            sn->rank = n->rank;
            sn->host = n->host;
            sn->device = n->device;
            sn->state = node_state_name(n->state);
            sn->last_seen_s = now - n->last_seen;
            sn->bytes_in = n->bytes_in;
            sn->rows_touched = m->set.embedding ? node_rows_touched(n) : -1;
            sn->init_done_bytes = n->init_done;
            sn->init_total_bytes = n->init_total;
            sn->bytes_out = n->bytes_out;
            sn->environment = n->environment;
            sn->gpu_timed = n->gpu_timed;
            sn->links = n->links;
        }
    }
    return i;
}

/* The job in a few words (psbench_run_info): the per-run CSVs'
 * configuration columns and the settings; every string borrowed from the
 * settings, which outlive the snapshot. */
static snap_run_info publish_run_info(const master *m)
{
    const master_settings *set = &m->set;
    return (snap_run_info){
        .hook = set->csv_config.hook,
        .model = set->csv_config.model,
        .trainer = set->csv_config.trainer,
        .trainer_class = json_string_value(json_object_get(set->trainer, "class")),
        .server_kind = set->server_kind,
        .bucket_cap_mb = set->csv_config.bucket_cap_mb,
        .device = set->csv_config.device,
        .transport = set->csv_config.transport,
        .ntrainer = set->ntrainer,
        .nserver = set->nserver,
    };
}

/* The live stats behind each charted snap_stat (the history cuts its recent
 * window from their samples), parallel to st; the others NULL. NULL: out of
 * memory (the points then have no window). */
static const stats **publish_live(const master *m, const snap_stat *st, size_t ns)
{
    const stats **live = calloc(ns ? ns : 1, sizeof *live);
    if (!live)
        return NULL;
    for (size_t i = 0; i < ns; i++) {
        if (!st[i].role || !history_charted(st[i].metric))
            continue;
        live[i] = agg_find(&m->agg, strcmp(st[i].role, "server") == 0 ? AGG_SERVER : AGG_TRAINER, st[i].rank,
                           st[i].metric);
    }
    return live;
}

/* GET /api/v1/trace/step (trace_an_live_json), made again only when what
 * the master gathered changed — a node's new part, a node, its clock's
 * estimate, the next run — as a key of each process's spans and clock:
 * the analysis reads every span, and a part comes at most with each
 * node's report. NULL keeps the last one (*code then unused). */
static char *publish_trace_step(master *m, unsigned *code)
{
    size_t n;
    const trace_out_node *g = mtrace_gathered(m, &n);
    uint64_t key = 1469598103934665603ull; /* FNV-1a over the words below */
    const uint64_t prime = 1099511628211ull;
    key = (key ^ (uint64_t)n) * prime;
    for (size_t i = 0; i < n; i++) {
        const trace_dump *d = g[i].dump;
        uint64_t words[] = {((uint64_t)d->role << 32) | d->rank, (uint64_t)d->nev, (uint64_t)g[i].state,
                            (uint64_t)(g[i].state == TRACE_OUT_ALIGNED ? g[i].clock.offset_ns : 0)};
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
            key = (key ^ words[k]) * prime;
    }
    key = key ? key : 1;
    if (key == m->trace_step_key)
        return NULL;
    char *doc = trace_an_live_json(g, n, code);
    m->trace_step_key = doc ? key : 0; /* out of memory: tried again next time */
    return doc;
}

void master_publish(master *m, bool exact)
{
    if (!m->http)
        return;
    size_t nn = 0;
    for (node *n = m->nodes; n; n = n->next)
        nn += n->registered;
    snap_node *nodes = calloc(nn ? nn : 1, sizeof *nodes);
    if (!nodes)
        return;
    double now = master_now();
    size_t ns = 0;
    snap_stat *st = agg_snapshot(&m->agg, exact, &ns);
    snapshot_input in = {0};
    in.phase = run_state_phase(m->state);
    in.pass = m->metrics_pass == PASS_WARMUP ? "warmup" : m->metrics_pass == PASS_TIMED ? "timed" : NULL;
    in.run = m->run;
    in.runs = m->set.runs;
    in.error = m->error[0] ? m->error : NULL;
    in.batches_total = master_pass_batches(m) * m->set.ntrainer;
    for (uint32_t k = 0; k < m->set.ntrainer; k++)
        if (m->trainers[k] && m->state != RUN_WAITING)
            in.batches_done += m->trainers[k]->batches_done;
    in.batches_completed_total = m->batches_completed_total;
    in.elapsed_s = now - m->t_start;
    in.nodes = nodes;
    in.nnodes = publish_nodes(m, nodes, now);
    assert(in.nnodes <= nn);
    in.stats = st;
    in.nstats = st ? ns : 0;
    json_t *headline = st ? headline_json(m, st, ns, exact) : NULL;
    in.headline = headline;
    /* The step histogram: the aggregate's counts, copied here as the
     * stats are, so that the HTTP thread reads only what is published. */
    snap_step_hist *steps = agg_step_hists(&m->agg, &in.nsteps);
    in.steps = steps;
    const snap_build build = {.version = PSBENCH_VERSION, .compiler = hostinfo_compiler(),
                              .protocol = FRAME_PROTOCOL_VERSION};
    const snap_run_info info = publish_run_info(m);
    in.build = &build;
    in.info = &info;
    json_t *host_state = hoststate_status(m); /* busy, oversubscribed (issue 38) */
    in.host_state = json_is_null(host_state) ? NULL : host_state;
    /* The history is made with the first snapshot: a master without HTTP
     * keeps none. One that cannot be made (out of memory) is tried again
     * next time; meanwhile /api/v1/history is not served (503). */
    if (!m->history)
        m->history = history_new(HISTORY_MAX_POINTS, HISTORY_MAX_BYTES);
    const stats **live = m->history && st ? publish_live(m, st, ns) : NULL;
    bool taken = m->history && history_offer(m->history, publish_wall_s(), &in, live, exact) == 1;
    free(live);
    char *docs[HTTP_NDOCS] = {
        [HTTP_DOC_STATUS] = snapshot_status_json(&in),
        [HTTP_DOC_NODES] = snapshot_nodes_json(&in),
        [HTTP_DOC_METRICS] = snapshot_metrics_json(&in),
        [HTTP_DOC_PROM] = snapshot_prometheus(&in),
        /* The configuration does not change during a job: rendered once
         * (NULL keeps it; tried again while it could not be made). The
         * HTTP thread, as for every other document, reads only the
         * published copy, never the loop's own JSON. */
        [HTTP_DOC_CONFIG] = m->config_published ? NULL : snapshot_config_json(m->set.config_json),
        /* Rendered again only when it gained a point (NULL keeps the last
         * one), or while it is empty (a few bytes): served from the start. */
        [HTTP_DOC_HISTORY] = m->history && (taken || history_points(m->history) == 0) ? history_json(m->history)
                                                                                     : NULL,
        [HTTP_DOC_HISTORY_LAST] = m->history && (taken || history_points(m->history) == 0)
                                      ? history_last_json(m->history)
                                      : NULL,
    };
    unsigned codes[HTTP_NDOCS] = {0};
    docs[HTTP_DOC_TRACE_STEP] = publish_trace_step(m, &codes[HTTP_DOC_TRACE_STEP]);
    m->config_published = docs[HTTP_DOC_CONFIG] != NULL || m->config_published;
    http_publish(m->http, docs, codes);
    json_decref(headline);
    free(steps);
    json_decref(host_state);
    free(st);
    free(nodes);
}
