/* hoststate.c — the state of every host that took part in a run (see
 * hoststate.h). */
#include "master/hoststate.h"
#include "master/master.h"
#include "shared/log.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static json_t *hs_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* ---- the hosts of a run ----------------------------------------------------------- */

static void hs_hostname(char *buf, size_t len)
{
    buf[0] = '\0';
    if (gethostname(buf, len - 1) != 0)
        buf[0] = '\0';
    buf[len - 1] = '\0';
}

/* The host a node ran on: its register's environment.hostname, else the
 * host it named. */
static const char *hs_node_host(const node *n)
{
    const char *h = json_string_value(json_object_get(n->environment, "hostname"));
    return h && h[0] ? h : n->host;
}

/* Its cores for the job: the environment's cpus_allowed (its affinity),
 * else cpus; 0: not said. */
static int64_t hs_node_cores(const node *n)
{
    json_int_t a = json_integer_value(json_object_get(n->environment, "cpus_allowed"));
    json_int_t c = json_integer_value(json_object_get(n->environment, "cpus"));
    return a > 0 ? a : c > 0 ? c : 0;
}

/* One host: its nodes, trainers then servers by rank. */
typedef struct hs_group {
    const char *name;
    const node **nodes;
    size_t nnodes;
    uint32_t ntrainer, nserver;
    int64_t cores;
    bool master;
} hs_group;

/* The registered nodes by host, in order of their first node (trainers
 * by rank, then servers by rank). *ngroups; NULL when none (or out of
 * memory). Free each group's nodes, then the array. */
static hs_group *hs_groups(const master *m, const char *myhost, size_t *ngroups)
{
    size_t cap = (size_t)m->set.ntrainer + m->set.nserver;
    *ngroups = 0;
    hs_group *g = cap ? calloc(cap, sizeof *g) : NULL;
    if (!g)
        return NULL;
    for (int role = AGG_TRAINER; role <= AGG_SERVER; role++) {
        node **v = role == AGG_TRAINER ? m->trainers : m->servers;
        uint32_t nv = role == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
        for (uint32_t r = 0; r < nv; r++) {
            const node *n = v[r];
            if (!n || !n->registered)
                continue;
            const char *h = hs_node_host(n);
            size_t k = 0;
            while (k < *ngroups && strcmp(g[k].name, h) != 0)
                k++;
            if (k == *ngroups) {
                g[k].name = h;
                g[k].nodes = calloc(cap, sizeof *g[k].nodes);
                g[k].master = strcmp(h, myhost) == 0;
                if (!g[k].nodes)
                    continue;
                (*ngroups)++;
            }
            g[k].nodes[g[k].nnodes++] = n;
            if (role == AGG_TRAINER)
                g[k].ntrainer++;
            else
                g[k].nserver++;
            int64_t c = hs_node_cores(n);
            g[k].cores = c > g[k].cores ? c : g[k].cores;
        }
    }
    return g;
}

static void hs_groups_free(hs_group *g, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(g[k].nodes);
    free(g);
}

/* "4 trainers, 1 server" */
static void hs_counts(const hs_group *g, char *buf, size_t len)
{
    snprintf(buf, len, "%u trainer%s, %u server%s", g->ntrainer, g->ntrainer == 1 ? "" : "s", g->nserver,
             g->nserver == 1 ? "" : "s");
}

static void hs_oversub_warning(const hs_group *g, json_t *warnings)
{
    char counts[96], line[600];
    hs_counts(g, counts, sizeof counts);
    snprintf(line, sizeof line, "host %s is oversubscribed: the job started %u busy processes (%s) on %lld cores: "
             "its figures measure the scheduler too", g->name, g->ntrainer + g->nserver, counts,
             (long long)g->cores);
    json_array_append_new(warnings, json_string(line));
}

/* One host's timed pass ({"seconds", ..., "busy", "why"}); *busy its
 * verdict (-1 not known). */
static json_t *hs_group_timed(const master *m, const hs_group *g, int *busy, char *why, size_t len)
{
    hostinfo_sample a, b, na, nb;
    bool have = g->master && hs_track_timed(&m->hs.own, &a, &b) && a.ticks_ok && b.ticks_ok;
    double job = 0;
    for (size_t k = 0; k < g->nnodes; k++) {
        if (!hs_track_timed(&g->nodes[k]->hs, &na, &nb)) {
            job = NAN; /* a node that sent no readings (one from before them) */
            continue;
        }
        job += hostinfo_window_of(&na, &nb).own;
        if (!have || (!g->master && na.ticks_ok && nb.ticks_ok && nb.t - na.t > b.t - a.t)) {
            if (na.ticks_ok && nb.ticks_ok) {
                a = na;
                b = nb;
                have = true;
            }
        }
    }
    hostinfo_sample oa, ob;
    if (g->master)
        job += hs_track_timed(&m->hs.own, &oa, &ob) ? hostinfo_window_of(&oa, &ob).own : NAN;
    hostinfo_window w = {NAN, NAN, NAN, NAN};
    if (have)
        w = hostinfo_window_of(&a, &b);
    double other = isfinite(w.busy) && isfinite(job) ? fmax(0, w.busy - job) : NAN;
    int64_t cpus = have ? b.cpus : 0;
    *busy = hoststate_verdict(w.steal, w.busy, job, other, cpus, why, len);
    double run_a = have && a.procs_running >= 0 ? (double)a.procs_running : NAN;
    double run_b = have && b.procs_running >= 0 ? (double)b.procs_running : NAN;
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "seconds",
                     m->training_s > 0 ? json_real(m->training_s) : json_null(), "load1_start",
                     hs_num(have ? a.load1 : NAN), "load1_end", hs_num(have ? b.load1 : NAN), "runnable_start",
                     isfinite(run_a) ? json_integer((json_int_t)run_a) : json_null(), "runnable_end",
                     isfinite(run_b) ? json_integer((json_int_t)run_b) : json_null(), "runnable_per_core",
                     hs_num(cpus > 0 ? (run_a + run_b) / 2 / (double)cpus : NAN), "steal_share", hs_num(w.steal),
                     "cpu_busy_share", hs_num(w.busy), "job_cpu_share", hs_num(job), "other_cpu_share",
                     hs_num(other), "busy", *busy < 0 ? json_null() : json_boolean(*busy), "why",
                     *busy == 1 ? json_string(why) : json_null());
}

json_t *hoststate_json(const master *m)
{
    char myhost[256];
    hs_hostname(myhost, sizeof myhost);
    size_t ng = 0;
    hs_group *g = hs_groups(m, myhost, &ng);
    json_t *hosts = json_array(), *warnings = json_array();
    bool any_busy = m->hs.quiet_failed, all_known = ng > 0, over = false;
    if (m->hs.quiet_failed)
        json_array_append_new(warnings, json_string(m->hs.quiet_why));
    for (size_t k = 0; k < ng; k++) {
        json_t *tr = json_array(), *sv = json_array();
        for (size_t i = 0; i < g[k].nnodes; i++)
            json_array_append_new(g[k].nodes[i]->role == AGG_TRAINER ? tr : sv, json_integer(g[k].nodes[i]->rank));
        bool o = hoststate_oversubscribed(g[k].ntrainer, g[k].nserver, g[k].cores);
        over = over || o;
        json_t *timed = json_null();
        int busy = -1;
        char why[600] = "";
        if (m->hs.timed_done)
            timed = hs_group_timed(m, &g[k], &busy, why, sizeof why);
        any_busy = any_busy || busy == 1;
        all_known = all_known && busy >= 0;
        json_array_append_new(hosts, json_pack("{s:s, s:I, s:o, s:o, s:b, s:I, s:b, s:o}", "host", g[k].name, "cpus",
                                               (json_int_t)g[k].cores, "trainers", tr, "servers", sv, "master",
                                               g[k].master, "job_processes",
                                               (json_int_t)(g[k].ntrainer + g[k].nserver), "oversubscribed", o,
                                               "timed", timed ? timed : json_null()));
        if (busy == 1) {
            char line[800];
            snprintf(line, sizeof line, "host %s was busy during the timed pass: %s: its figures may be noise",
                     g[k].name, why);
            json_array_append_new(warnings, json_string(line));
        }
        if (o)
            hs_oversub_warning(&g[k], warnings);
    }
    hs_groups_free(g, ng);
    return json_pack("{s:o, s:b, s:o, s:o}", "busy", any_busy ? json_true() : all_known ? json_false() : json_null(),
                     "oversubscribed", over, "hosts", hosts, "warnings", warnings);
}

/* The master's live view of its own host: 1 busy, 0 not, -1 not known. */
static int hs_live(const master *m, const char *myhost, char *why, size_t len)
{
    hostinfo_sample a, b, na, nb;
    why[0] = '\0';
    if (!hs_track_live(&m->hs.own, &a, &b))
        return -1;
    hostinfo_window w = hostinfo_window_of(&a, &b);
    double job = w.own;
    for (const node *n = m->nodes; n; n = n->next)
        if (n->registered && strcmp(hs_node_host(n), myhost) == 0)
            job += hs_track_live(&n->hs, &na, &nb) ? hostinfo_window_of(&na, &nb).own : NAN;
    double other = isfinite(w.busy) && isfinite(job) ? fmax(0, w.busy - job) : NAN;
    return hoststate_verdict(w.steal, w.busy, job, other, b.cpus, why, len);
}

json_t *hoststate_status(const master *m)
{
    bool any = m->hs.quiet_failed;
    for (const node *n = m->nodes; n && !any; n = n->next)
        any = n->registered;
    if (!any)
        return json_null();
    json_t *full = hoststate_json(m);
    if (!full)
        return json_null();
    json_t *o = json_pack("{s:O, s:O, s:O}", "busy", json_object_get(full, "busy"), "oversubscribed",
                          json_object_get(full, "oversubscribed"), "warnings", json_object_get(full, "warnings"));
    if (o && run_state_live(m->state) && !m->hs.timed_done) {
        char myhost[256], why[600];
        hs_hostname(myhost, sizeof myhost);
        int busy = hs_live(m, myhost, why, sizeof why);
        busy = m->hs.quiet_failed ? 1 : busy;
        json_object_set_new(o, "busy", busy < 0 ? json_null() : json_boolean(busy));
        if (busy == 1 && why[0]) {
            char line[800];
            snprintf(line, sizeof line, "host %s is busy now (the last 5 to 10 s): %s", myhost, why);
            json_array_append_new(json_object_get(o, "warnings"), json_string(line));
        }
    }
    json_decref(full);
    return o ? o : json_null();
}

/* ---- readings ----------------------------------------------------------------------- */

void hoststate_report(master *m, node *n, const json_t *body)
{
    const json_t *h = json_object_get(body, "host");
    if (!h)
        return;
    hostinfo_sample s;
    hostinfo_sample_from_json(h, &s);
    hs_track_push(&n->hs, &s, m->state == RUN_TIMED && !m->hs.timed_done);
}

void hoststate_mark(master *m, bool start)
{
    hostinfo_sample s;
    hostinfo_sample_take(&s);
    if (start) {
        m->hs.timed_done = false;
        hs_track_timed_start(&m->hs.own);
        for (node *n = m->nodes; n; n = n->next)
            hs_track_timed_start(&n->hs);
        hs_track_push(&m->hs.own, &s, true);
        return;
    }
    hs_track_push(&m->hs.own, &s, true);
    m->hs.timed_done = true;
    /* The verdict, said as the pass ends (results.json and the tables'
     * warnings carry it too). */
    json_t *hs = hoststate_json(m);
    size_t i;
    json_t *w;
    /* A busy host is news (warn); an oversubscribed job is the job's own
     * choice, known from its start (the default job on a 2-core host is
     * one): said at info level here, and as a warning with the results. */
    json_array_foreach(json_object_get(hs, "warnings"), i, w) {
        if (strstr(json_string_value(w), " is oversubscribed: "))
            log_info("%s", json_string_value(w));
        else
            log_warn("%s", json_string_value(w));
    }
    json_decref(hs);
}

void hoststate_tick(master *m)
{
    hostinfo_sample s;
    hostinfo_sample_take(&s);
    hs_track_push(&m->hs.own, &s, false);
}

void hoststate_next_run(master *m)
{
    /* The next run's readings before its timed pass are its own. */
    for (node *n = m->nodes; n; n = n->next)
        hs_track_timed_start(&n->hs);
    hs_track_timed_start(&m->hs.own);
    m->hs.timed_done = false;
    m->hs.quiet_failed = false;
    m->hs.quiet_why[0] = '\0';
}

/* ---- --quiet-host -------------------------------------------------------------------- */

static void hs_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

void hoststate_quiet_wait(master *m, double seconds)
{
    if (!(seconds > 0))
        return;
    char myhost[256], why[600];
    hs_hostname(myhost, sizeof myhost);
    double deadline = master_now() + seconds;
    bool said = false;
    hostinfo_sample a, b, na, nb;
    hostinfo_sample_take(&a);
    for (;;) {
        hs_sleep(1.0);
        hostinfo_sample_take(&b);
        hostinfo_window w = hostinfo_window_of(&a, &b);
        /* The job's processes here: the master and its nodes connected
         * already (a server that stays between runs). */
        double job = w.own;
        for (const node *n = m->nodes; n; n = n->next)
            if (n->registered && strcmp(hs_node_host(n), myhost) == 0 && hs_track_live(&n->hs, &na, &nb))
                job += hostinfo_window_of(&na, &nb).own;
        double other = isfinite(w.busy) ? fmax(0, w.busy - job) : NAN;
        int busy = hoststate_verdict(w.steal, w.busy, job, other, b.cpus, why, sizeof why);
        if (busy < 0) {
            log_warn("--quiet-host: cannot tell whether host %s is quiet (no CPU ticks in /proc/stat): not waiting",
                     myhost);
            return;
        }
        if (busy == 0) {
            if (said)
                log_info("host %s is quiet: the run starts", myhost);
            return;
        }
        if (master_now() >= deadline) {
            snprintf(m->hs.quiet_why, sizeof m->hs.quiet_why, "host %s was not quiet after waiting %g s: %s", myhost,
                     seconds, why);
            m->hs.quiet_failed = true;
            log_warn("%s: the run starts, marked busy", m->hs.quiet_why);
            return;
        }
        if (!said) {
            log_info("--quiet-host: waiting up to %g s for host %s to be quiet (CPU steal <= %.0f %%, other "
                     "processes below %.0f %% of its CPUs); now %s", seconds, myhost, 100 * HOSTSTATE_STEAL_BUSY,
                     100 * HOSTSTATE_OTHERS_BUSY, why);
            said = true;
        }
        a = b;
    }
}
