/* publish.c — the snapshot of the master's state that the HTTP thread
 * serves (master_publish, master.h): the run's phase as the contract names
 * it, its progress, every registered node, the aggregated metrics. Built on
 * the loop's thread; the HTTP thread only reads what was published last
 * (http.c). */
#include "master/headline.h"
#include "master/master.h"
#include "master/http.h"
#include "master/snapshot.h"

#include <assert.h>
#include <stdlib.h>

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
    json_t *headline = st ? headline_json(m, st, ns) : NULL;
    in.headline = headline;
    http_publish(m->http, snapshot_status_json(&in), snapshot_nodes_json(&in), snapshot_metrics_json(&in),
                 snapshot_prometheus(&in));
    json_decref(headline);
    free(st);
    free(nodes);
}
