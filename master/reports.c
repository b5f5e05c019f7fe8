/* reports.c — nodes' reports into the master's books (reports.h). */
#include "master/reports.h"
#include "master/hoststate.h"
#include "master/validate.h"
#include "shared/control.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A counter from a node's report (checked by validate_report): absent
 * keeps `cur`. */
static uint64_t reports_counter(json_t *body, const char *key, uint64_t cur)
{
    json_t *v = json_object_get(body, key);
    return v ? (uint64_t)json_integer_value(v) : cur;
}

/* A server filling its table says how far it has got; the wait for it
 * (join, reset) counts from its last progress. An embedding server's
 * rows and traffic (validate_report). */
static void reports_server(master *m, node *n, json_t *body)
{
    json_t *rt = json_object_get(body, "rows_touched");
    if (rt)
        n->rows_touched = json_integer_value(rt);
    json_t *calls = json_object_get(body, "calls");
    if (calls) {
        json_decref(n->calls);
        n->calls = json_incref(calls);
    }
    json_t *init = json_object_get(body, "initialising");
    uint64_t idone = (uint64_t)json_integer_value(json_object_get(init, "done_bytes"));
    uint64_t total = (uint64_t)json_integer_value(json_object_get(init, "total_bytes"));
    if (init && (idone != n->init_done || total != n->init_total))
        m->t_init_progress = master_now();
    n->init_done = init ? idone : 0;
    n->init_total = init ? total : 0;
}

/* A trainer's progress in the pass, and its GPU-timed metrics (extension):
 * the list replaces the last one; absent, it stands. */
static void reports_trainer(master *m, node *n, json_t *body, uint64_t done)
{
    assert(n->role == AGG_TRAINER && done <= master_pass_batches(m));
    if (done > n->batches_done)
        m->batches_completed_total += done - n->batches_done;
    n->batches_done = done;
    json_t *gpu = json_object_get(body, "gpu_timed");
    if (gpu) {
        json_decref(n->gpu_timed);
        n->gpu_timed = json_incref(gpu);
    }
}

int reports_metrics(master *m, node *n, json_t *body, char *verdict, size_t len)
{
    assert(n->registered);
    char err[400];
    if (validate_report(body, n->role == AGG_TRAINER, err, sizeof err) < 0) {
        snprintf(verdict, len, "%s %u (%s) sent bad metrics: %s", agg_role_name(n->role), n->rank, n->host, err);
        return -1;
    }
    uint64_t done = n->batches_done;
    if (n->role == AGG_TRAINER) {
        done = reports_counter(body, "batches_done", n->batches_done);
        if (done > master_pass_batches(m)) {
            snprintf(verdict, len, "trainer %u (%s) reports %" PRIu64 " batches done of a %" PRIu64 "-batch pass",
                     n->rank, n->host, done, master_pass_batches(m));
            return -1;
        }
    }
    json_t *samples = json_object_get(body, "samples");
    if (samples && m->state != RUN_RESETTING &&
        agg_add_report(&m->agg, n->role, n->rank, samples, err, sizeof err) < 0) {
        snprintf(verdict, len, "%s %u (%s) sent bad metrics: %s", agg_role_name(n->role), n->rank, n->host, err);
        return -1;
    }
    n->bytes_in = reports_counter(body, "bytes_in", n->bytes_in);
    n->bytes_out = reports_counter(body, "bytes_out", n->bytes_out);
    if (n->role == AGG_SERVER)
        reports_server(m, n, body);
    else
        reports_trainer(m, n, body, done);
    hoststate_report(m, n, body);
    return 0;
}

/* A trainer's report of where its loss diverged (`diverged` in pass_done or
 * failed: {pass, epoch, batch, loss}), checked and copied: it goes into
 * results.json. NULL if absent; *bad when present but malformed. */
static json_t *reports_divergence(json_t *body, bool *bad)
{
    json_t *d = json_object_get(body, "diverged");
    *bad = false;
    if (!d)
        return NULL;
    json_t *e = json_object_get(d, "epoch"), *b = json_object_get(d, "batch"), *l = json_object_get(d, "loss");
    json_t *p = json_object_get(d, "pass");
    const char *ls = json_string_value(l);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || !json_is_integer(b) || json_integer_value(b) < 0 ||
        !(json_is_number(l) || (ls && (strcmp(ls, "nan") == 0 || strcmp(ls, "inf") == 0 || strcmp(ls, "-inf") == 0))) ||
        (p && !(json_is_string(p) && (strcmp(json_string_value(p), "warm-up") == 0 ||
                                      strcmp(json_string_value(p), "timed") == 0)))) {
        *bad = true;
        return NULL;
    }
    json_t *o = json_pack("{s:O, s:O, s:O}", "epoch", e, "batch", b, "loss", l);
    if (o && p)
        json_object_set(o, "pass", p);
    return o;
}

/* The keys of body that results.json keeps, copied into a fresh *into. */
static void reports_keep(json_t **into, json_t *body, const char *const *keys, size_t nkeys)
{
    json_decref(*into);
    *into = json_object();
    for (size_t k = 0; k < nkeys; k++) {
        json_t *v = json_object_get(body, keys[k]);
        if (v)
            json_object_set(*into, keys[k], v);
    }
}

int reports_pass_results(master *m, node *n, json_t *body, char *verdict, size_t len)
{
    assert(n->role == AGG_TRAINER && (m->state == RUN_WARMUP || m->state == RUN_TIMED));
    char perr[400];
    if (validate_pass_results(body, perr, sizeof perr) < 0) {
        snprintf(verdict, len, "trainer %u (%s) sent a bad pass_done: %s", n->rank, n->host, perr);
        return -1;
    }
    bool bad;
    json_t *d = reports_divergence(body, &bad);
    if (bad || (d && !m->set.allow_divergence)) {
        json_decref(d);
        snprintf(verdict, len, "trainer %u (%s) sent pass_done with a %s", n->rank, n->host,
                 bad ? "malformed diverged (epoch, batch: whole numbers >= 0; loss: a number, nan, inf, -inf)"
                     : "diverged loss, which this job does not allow (--allow-divergence)");
        return -1;
    }
    if (d && !n->diverged) {
        n->diverged = d;
        char why[300];
        results_divergence_line(n, why, sizeof why);
        log_warn("%s", why);
    } else {
        json_decref(d);
    }
    if (m->state == RUN_TIMED) {
        /* Later issues' per-trainer results: kept for results.json. */
        static const char *const keys[] = {"loss_per_epoch", "final_params_sha256", "bags", "indices", "epochs",
                                           "buckets", "compress", "comm_hook", "powersgd"};
        reports_keep(&n->timed_result, body, keys, sizeof keys / sizeof keys[0]);
    } else {
        /* The warm-up's: each pass starts from the same fresh model, so a
         * reader can see both passes begin alike. */
        static const char *const keys[] = {"loss_per_epoch", "final_params_sha256"};
        reports_keep(&n->warmup_result, body, keys, sizeof keys / sizeof keys[0]);
    }
    return 0;
}

void reports_failure(node *n, json_t *body, char *why, size_t len)
{
    bool bad;
    json_t *d = reports_divergence(body, &bad);
    if (d && !n->diverged)
        n->diverged = d;
    else
        json_decref(d);
    /* The node's own words, escaped: they end up in every process's last
     * line, the API and results.json. */
    char reason[400];
    if (validate_failed(body, reason, sizeof reason) < 0) {
        snprintf(why, len, "%s %u (%s) failed (its report is malformed: %s)", agg_role_name(n->role), n->rank,
                 n->host, reason);
    } else {
        text_escape(ctl_str(body, "reason", "no reason given"), reason, sizeof reason);
        snprintf(why, len, "%s %u (%s) failed: %s", agg_role_name(n->role), n->rank, n->host, reason);
    }
}
