/* run.c — the master's control plane and the run's phases.
 *
 *   waiting  — nodes connect and register; each gets a rank and is told so
 *              at once (`registered`: a node bounds its wait for that first
 *              answer by --connect-timeout). Servers are assigned once all
 *              of them have registered and their embedding tables fit their
 *              hosts' memory (how many trainers feed them); trainers once
 *              every server is ready — its table filled, which may take
 *              seconds while it reports progress (which servers to use,
 *              model, data).
 *   warmup   — when every trainer is ready: one full pass.
 *   (reset)  — servers clear their futures, everyone clears metrics; the
 *              master waits for every reset_done.
 *   running  — the timed pass.
 *   done | failed — stop is sent to every node; tables and files written
 *              (the API shows `done` only then: whoever sees it can read
 *              results.json; `failed` at once); HTTP stays up for --linger
 *              seconds.
 *   done → waiting — with --runs, while runs remain: the trainers get stop
 *              (done), the servers a `reset` with "new_run" instead (they
 *              flush their metrics, wait until the run's trainers have left
 *              them, clear everything, answer reset_done). Once the trainers
 *              are gone (--local: exited) and every server is ready, the run
 *              is done (tables, files) and the next one waits for trainers
 *              with cleared metrics, trainer slots, store and progress.
 *   waiting → done — a signal between runs, before a trainer of the next
 *              one registered (not --local): the servers are stopped, exit 0.
 *
 * master_set_phase is the one place the phase changes. A failed run ends
 * the master, whatever runs remain.
 *
 * A node that disconnects, reports a failure or stops sending (its metrics
 * messages are its heartbeat) fails the run, named by role, rank and host.
 * Every wait is bounded: registrations by the join timeout, everything else
 * by --rpc-timeout — a registered node's silence in every phase, the one
 * named being a silent server before the trainers that wait on it. While a
 * server fills its table and reports progress, those deadlines count from
 * its last progress; after a pause of the master's own (its tick late),
 * from when it runs again.
 *
 * What comes in is gated before it gets here: admit.c takes connections
 * (bounds on those that have not registered and on descriptors), a node
 * that has not registered may send one register of bounded size
 * (node_on_read), and validate.c checks every field of every message.
 */
#include "master/master.h"
#include "shared/clock.h"
#include "shared/cli.h"
#include "master/admit.h"
#include "master/http.h"
#include "master/launcher.h"
#include "master/validate.h"
#include "shared/control.h"
#include "shared/log.h"
#include "shared/net.h"
#include "shared/text.h"

#include <arpa/inet.h>
#include <assert.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *const phase_names[] = {"waiting", "warmup", "running", "done", "failed"};
static const char *const state_names[] = {"connected", "registered", "assigned", "ready", "running",
                                          "pass_done", "resetting", "done", "failed", "lost"};

const char *node_state_name(node_state s) { return state_names[s]; }

double master_now(void) { return clock_now_s(); }

static const char *role_name(agg_role r) { return agg_role_name(r); }

static void node_describe(const node *n, char *buf, size_t len)
{
    if (n->registered)
        snprintf(buf, len, "%s %u (%s)", role_name(n->role), n->rank, n->host);
    else
        snprintf(buf, len, "an unregistered node (%s)", n->peer_ip);
}

/* ---- sending ------------------------------------------------------------ */

/* Tell the listener how many connections have not registered (its bound,
 * admit.h). */
static void master_count_pending(master *m)
{
    unsigned pending = 0;
    for (node *n = m->nodes; n; n = n->next)
        pending += !n->registered && n->bev != NULL;
    if (m->admit)
        admit_set_pending(m->admit, pending);
}

static void node_send(node *n, const char *type, json_t *body)
{
    if (!n->bev) {
        json_decref(body);
        return;
    }
    uint8_t *buf;
    size_t len;
    if (ctl_encode(type, NULL, body, &buf, &len) == 0) {
        bufferevent_write(n->bev, buf, len);
        free(buf);
    }
    json_decref(body);
}

static void master_send_all(master *m, const char *type, json_t *body)
{
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered)
            node_send(n, type, json_incref(body));
    json_decref(body);
}

/* ---- phases ------------------------------------------------------------- */

static void master_set_phase(master *m, run_phase ph)
{
    m->phase = ph;
    /* agg holds one pass's metrics (reset as the timed pass starts and
     * for each run): which one, through done or failed. */
    if (ph == PH_WAITING || ph == PH_WARMUP || ph == PH_RUNNING)
        m->metrics_pass = ph;
    m->t_phase = master_now();
    log_info("phase %s", phase_names[ph]);
    /* `done` is published once the run's files are written (master_on_tick):
     * a client that sees it may read results.json. `failed` at once: it is
     * the verdict a watcher needs now, and with --linger 0 the master may
     * be gone when its files are. */
    if (ph != PH_DONE)
        master_publish(m, ph == PH_FAILED);
}

void master_fail(master *m, const char *fmt, ...)
{
    if (m->phase == PH_DONE || m->phase == PH_FAILED || m->finishing)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof m->error, fmt, ap);
    va_end(ap);
    log_error("run failed: %s", m->error);
    master_send_all(m, "stop", json_pack("{s:s, s:s}", "status", "failed", "reason", m->error));
    m->exit_code = 1;
    m->t_finished = master_now();
    master_set_phase(m, PH_FAILED);
}

void master_child_failed(void *ctx, const char *why)
{
    master *m = ctx;
    if (m->phase == PH_DONE || m->phase == PH_FAILED) {
        log_debug("%s", why);
        return;
    }
    master_fail(m, "%s", why);
}

static bool master_all(master *m, agg_role role, node_state st)
{
    uint32_t n = role == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
    node **v = role == AGG_TRAINER ? m->trainers : m->servers;
    for (uint32_t i = 0; i < n; i++)
        if (!v[i] || v[i]->state != st)
            return false;
    return true;
}

/* Batches per trainer in the pass of phase ph. */
static uint64_t master_pass_batches(const master *m, run_phase ph)
{
    return ph == PH_WARMUP ? m->set.batches_warmup : m->set.batches_per_pass;
}

static void master_start_pass(master *m, run_phase ph)
{
    for (uint32_t i = 0; i < m->set.ntrainer; i++) {
        m->trainers[i]->state = NS_RUNNING;
        m->trainers[i]->batches_done = 0;
    }
    master_set_phase(m, ph);
    json_t *body = json_pack("{s:s, s:I}", "phase", phase_names[ph], "batches",
                             (json_int_t)master_pass_batches(m, ph));
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        node_send(m->trainers[i], "start", json_incref(body));
    json_decref(body);
}

static void master_finish_ok(master *m)
{
    bool more = master_runs_remain(m);
    json_t *stop = json_pack("{s:s}", "status", "done");
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered)
            continue;
        if (more && n->role == AGG_SERVER) {
            /* It stays for the next run: it clears this one once the
             * run's trainers have left it. */
            node_send(n, "reset", json_pack("{s:b}", "new_run", 1));
            n->state = NS_RESETTING;
        } else {
            node_send(n, "stop", json_incref(stop));
            n->state = NS_DONE;
        }
    }
    json_decref(stop);
    m->exit_code = 0;
    m->t_finished = master_now();
    /* "done" is announced once the nodes' last reports are in (tick). */
    m->finishing = true;
}

/* Every trainer finished its pass: move on. */
static void master_pass_complete(master *m)
{
    if (m->phase == PH_WARMUP) {
        /* Servers forget the warm-up's futures, everyone its metrics. */
        printf("benchmark warmup done\n"); /* the seed launcher's line */
        fflush(stdout);
        m->resetting = true;
        for (node *n = m->nodes; n; n = n->next)
            if (n->registered)
                n->state = NS_RESETTING;
        master_send_all(m, "reset", json_object());
        m->t_phase = master_now();
        return;
    }
    m->training_s = master_now() - m->t_phase;
    if (m->set.batch_update) {
        /* The seed's parameter_server_test.py reports this. */
        printf("Time spent training: %.3f s\n", m->training_s);
        fflush(stdout);
    }
    master_finish_ok(m);
}

static void master_reset_complete(master *m)
{
    m->resetting = false;
    agg_reset(&m->agg);
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered)
            n->state = NS_READY;
    master_start_pass(m, PH_RUNNING);
}

/* ---- assignments -------------------------------------------------------- */

/* The seed's placement: CPU trainers (ranks 0..ntrainer-1) feed the CPU
 * servers (ranks 0..nserver-1), CUDA trainers the CUDA servers after them,
 * each group split evenly (config_validate checks it divides). With shard
 * placement every trainer feeds every server. */
static uint32_t master_cpu_trainers(const master *m) { return m->set.ntrainer - m->set.ncudatrainer; }
static uint32_t master_cpu_servers(const master *m) { return m->set.nserver - m->set.ncudaserver; }

/* Trainers feeding server `rank`. */
static uint32_t master_trainers_per_server(const master *m, uint32_t rank)
{
    if (m->set.shard)
        return m->set.ntrainer;
    if (rank < master_cpu_servers(m))
        return master_cpu_trainers(m) / master_cpu_servers(m);
    return m->set.ncudatrainer / m->set.ncudaserver;
}

/* The server of trainer `rank` under seed placement, its group's size and
 * the trainer's index in it. */
static uint32_t master_seed_server(const master *m, uint32_t rank, uint32_t *group, uint32_t *index)
{
    uint32_t first = 0, t = rank;
    if (rank >= master_cpu_trainers(m)) { /* a CUDA trainer */
        first = master_cpu_servers(m);
        t = rank - master_cpu_trainers(m);
    }
    *group = master_trainers_per_server(m, first);
    assert(*group > 0);
    *index = t % *group;
    uint32_t s = first + t / *group;
    assert(s < m->set.nserver);
    return s;
}

static void master_assign_server(master *m, node *n)
{
    json_t *body = json_pack("{s:I, s:I, s:s, s:s, s:f}", "rank", (json_int_t)n->rank, "trainers",
                             (json_int_t)master_trainers_per_server(m, n->rank), "kind", m->set.server_kind,
                             "placement", m->set.shard ? "shard" : "seed", "rpc_timeout", m->set.rpc_timeout_s);
    if (body && m->set.batch_update) {
        /* Server `rank` owns part `rank` of the parameters. */
        json_t *bu = json_deep_copy(m->set.batch_update);
        json_object_set_new(bu, "part", json_integer(n->rank));
        json_object_set_new(bu, "parts", json_integer(m->set.nserver));
        json_object_set_new(body, "batch_update", bu);
    }
    if (body && m->set.embedding)
        json_object_set(body, "embedding", m->set.embedding);
    /* The job's model: the server bounds what one trainer may hold by it
     * (server/bounds.h). */
    if (body && m->set.model)
        json_object_set(body, "model", m->set.model);
    node_send(n, "assign", body);
    n->state = NS_ASSIGNED; /* ready once its kind is (its table filled) */
}

/* The tables a server holds: the seed's pattern adds the table's dense
 * gradient, a second table-sized buffer (trainer/hybrid.h). */
static unsigned master_tables_per_server(const master *m)
{
    return m->set.rpc_pattern && strcmp(m->set.rpc_pattern, "seed") == 0 ? 2 : 1;
}

/* The bytes of one server's embedding table (0: no embedding kind). */
static uint64_t master_table_bytes(const master *m)
{
    if (!m->set.embedding)
        return 0;
    json_int_t rows = json_integer_value(json_object_get(m->set.embedding, "num_embeddings"));
    json_int_t cols = json_integer_value(json_object_get(m->set.embedding, "embedding_dim"));
    if (rows <= 0 || cols <= 0 || rows > (1ll << 31) || cols > (1ll << 31))
        return 0;
    return (uint64_t)rows * (uint64_t)cols * sizeof(float);
}

/* The embedding tables of the servers on each host (same `host`) must fit
 * that host's memory together, as the servers reported it at register (the
 * largest report when several did): refused here, before any server
 * allocates, rather than by the kernel's OOM killer mid-run. Returns 0, or
 * -1 having failed the run with the sizes. */
static int master_check_memory(master *m)
{
    uint64_t table = master_table_bytes(m);
    if (table == 0)
        return 0;
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        node *n = m->servers[i];
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = strcmp(m->servers[j]->host, n->host) == 0;
        if (seen)
            continue; /* that host was checked with its first server */
        uint32_t count = 0;
        uint64_t avail = 0, total = 0;
        char ranks[256] = "";
        size_t rl = 0;
        for (uint32_t j = i; j < m->set.nserver; j++) {
            node *o = m->servers[j];
            if (strcmp(o->host, n->host) != 0)
                continue;
            count++;
            avail = o->mem_available > avail ? o->mem_available : avail;
            total = o->mem_total > total ? o->mem_total : total;
            if (rl < sizeof ranks - 16)
                rl += (size_t)snprintf(ranks + rl, sizeof ranks - rl, "%s%u", rl ? ", " : "", o->rank);
        }
        unsigned per = master_tables_per_server(m);
        if (avail == 0 || (uint64_t)count * per * table <= avail)
            continue; /* not reported (no check), or it fits */
        char t[32], a[32], all[32];
        cli_format_bytes(table, t, sizeof t);
        cli_format_bytes(avail, a, sizeof a);
        cli_format_bytes(total, all, sizeof all);
        master_fail(m,
                    "embedding tables too big for host %s: %u table%s of %s%s on a host with %s of memory available "
                    "(%s in all; server%s %s): run fewer servers there or smaller tables (--number-embeddings, "
                    "--embedding-dim)%s",
                    n->host, count, count == 1 ? "" : "s", t,
                    per == 2 ? ", each with its dense gradient of the same size (rpc_pattern seed)" : "", a, all,
                    count == 1 ? "" : "s", ranks, per == 2 ? ", or --rpc-pattern psbench" : "");
        return -1;
    }
    return 0;
}

/* Once every server has registered: check their tables against their
 * hosts, then assign them all. */
static void master_maybe_assign_servers(master *m)
{
    if (m->servers_assigned)
        return;
    for (uint32_t s = 0; s < m->set.nserver; s++)
        if (!m->servers[s])
            return;
    if (master_check_memory(m) < 0)
        return;
    m->servers_assigned = true;
    for (uint32_t s = 0; s < m->set.nserver; s++)
        master_assign_server(m, m->servers[s]);
}

static void master_assign_trainer(master *m, node *n)
{
    json_t *servers = json_array();
    uint32_t group = m->set.ntrainer;
    uint32_t data_rank = n->rank;
    if (m->set.nserver == 0) {
        /* Pure DDP: no server; the data is dealt over every trainer. */
    } else if (m->set.shard) {
        for (uint32_t s = 0; s < m->set.nserver; s++)
            json_array_append_new(servers, json_string(m->servers[s]->addr));
    } else {
        uint32_t s = master_seed_server(m, n->rank, &group, &data_rank);
        json_array_append_new(servers, json_string(m->servers[s]->addr));
    }
    json_t *body = json_pack("{s:I, s:o, s:I, s:I, s:O, s:I, s:I, s:I, s:I, s:f, s:s}", "rank",
                             (json_int_t)n->rank, "servers", servers, "data_rank",
                             (json_int_t)data_rank, "group_size", (json_int_t)group, "model",
                             m->set.model, "batches", (json_int_t)m->set.batches_per_pass, "epochs",
                             (json_int_t)m->set.epochs, "batch_size", (json_int_t)m->set.batch_size,
                             "seed", (json_int_t)m->set.seed, "rpc_timeout", m->set.rpc_timeout_s,
                             "placement", m->set.shard ? "shard" : "seed");
    json_object_set(body, "data", m->set.data ? m->set.data : json_null());
    json_object_set(body, "trainer", m->set.trainer ? m->set.trainer : json_null());
    json_object_set_new(body, "ntrainer", json_integer(m->set.ntrainer));
    json_object_set_new(body, "backend", json_string(m->set.backend ? m->set.backend : "gloo"));
    json_object_set_new(body, "allow_divergence", json_boolean(m->set.allow_divergence));
    node_send(n, "assign", body);
    n->state = NS_ASSIGNED;
}

/* Trainers learn their servers' addresses once every server is ready: no
 * trainer is answered by a server whose table is still being filled. */
static void master_maybe_assign_trainers(master *m)
{
    if (m->phase != PH_WAITING)
        return;
    for (uint32_t s = 0; s < m->set.nserver; s++)
        if (!m->servers[s] || m->servers[s]->state != NS_READY)
            return;
    for (uint32_t t = 0; t < m->set.ntrainer; t++)
        if (m->trainers[t] && m->trainers[t]->state == NS_REGISTERED)
            master_assign_trainer(m, m->trainers[t]);
}

/* ---- messages ----------------------------------------------------------- */

static bool master_token_ok(const master *m, const char *got)
{
    if (!m->set.token)
        return true;
    size_t n = strlen(m->set.token), g = strlen(got);
    unsigned diff = (unsigned)(n ^ g);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)m->set.token[i] ^ (unsigned char)(i < g ? got[i] : 0);
    return diff == 0;
}

/* Refuse a node that has not registered: `stop` (refused) with the reason,
 * then nothing more from it is parsed (node_on_read); once the reason is
 * out our side ends (node_on_write), and the node closes — or is dropped
 * after MASTER_REFUSED_LINGER_S (master_drop_silent). */
static void node_refuse(node *n, const char *reason)
{
    assert(!n->registered);
    log_warn("refused %s: %s", n->peer_ip, reason);
    node_send(n, "stop", json_pack("{s:s, s:s}", "status", "refused", "reason", reason));
    n->refused = true;
    n->t_refused = master_now();
}

/* The GPU a CUDA trainer computes on, as its registration described it
 * (environment "gpus": each GPU of its host, index order, with its UUID;
 * "cuda_index": the one asked for, -1: by rank, as the trainer places
 * plain --device cuda); NULL for a CPU trainer or one that said nothing. */
static const char *master_trainer_gpu(const node *n)
{
    json_t *gpus = json_object_get(n->environment, "gpus");
    size_t k = json_array_size(gpus);
    if (strcmp(n->device, "cpu") == 0 || k == 0)
        return NULL;
    json_t *ji = json_object_get(n->environment, "cuda_index");
    json_int_t idx = json_is_integer(ji) ? json_integer_value(ji) : -1;
    size_t i = idx >= 0 ? (size_t)idx : n->rank % k;
    return json_string_value(json_object_get(json_array_get(gpus, i), "uuid"));
}

/* NCCL holds one rank per GPU ("Duplicate GPU detected"): with NCCL among
 * the CUDA trainers, two of them on one GPU would fail only when the group
 * forms, after everyone has joined and loaded its data. The run ends at the
 * second one's registration instead, naming both and what to do. */
static bool master_nccl_gpu_shared(master *m, const node *n)
{
    const char *id = m->set.nccl_group ? master_trainer_gpu(n) : NULL;
    for (uint32_t t = 0; id && t < m->set.ntrainer; t++) {
        const node *o = m->trainers[t];
        const char *oid = o && o != n ? master_trainer_gpu(o) : NULL;
        if (oid && strcmp(oid, id) == 0 && strcmp(o->host, n->host) == 0) {
            char gpu[200]; /* the trainer's words (its environment): escaped */
            text_escape(id, gpu, sizeof gpu);
            master_fail(m, "--backend %s: trainers %u and %u would share GPU %s on %s, and NCCL cannot hold two "
                        "ranks on one GPU: use --backend gloo (staged through host memory), or one GPU per CUDA "
                        "trainer on each host", m->set.backend, o->rank, n->rank, gpu, n->host);
            return true;
        }
    }
    return false;
}

/* A register the run can no longer take: it started, is finishing before
 * the next run, or is over (the master only serves its results while it
 * lingers). The node is told which, in words. */
static bool master_refuse_late(master *m, node *n)
{
    if (m->phase == PH_WAITING)
        return false;
    char why[sizeof m->error + 100];
    if (m->finishing && master_runs_remain(m))
        snprintf(why, sizeof why, "the last run is finishing: join once the next one waits for trainers");
    else if (m->phase == PH_FAILED) /* the verdict: a node started late learns the cause */
        snprintf(why, sizeof why, "the run is over (failed: %s)", m->error);
    else if (m->finishing || m->phase == PH_DONE)
        snprintf(why, sizeof why, "the run is over (done): this master only serves its results now (--linger)");
    else
        snprintf(why, sizeof why, "the run has already started");
    node_refuse(n, why);
    return true;
}

static void master_on_register(master *m, node *n, ctl_msg *msg)
{
    if (n->registered) {
        master_fail(m, "%s %u sent register twice", role_name(n->role), n->rank);
        return;
    }
    char why[512];
    if (msg->token_too_long) {
        snprintf(why, sizeof why, "its token is longer than %d bytes (the most psbench takes), so it cannot be "
                 "this job's", CLI_TOKEN_MAX);
        node_refuse(n, why);
        return;
    }
    if (!master_token_ok(m, msg->token)) {
        node_refuse(n, msg->token[0] ? "wrong token" : "this master needs a token (--token-file FILE or PSBENCH_TOKEN)");
        return;
    }
    if (master_refuse_late(m, n))
        return;
    char bad[400];
    if (validate_register(msg->body, bad, sizeof bad) < 0) {
        snprintf(why, sizeof why, "bad register: %s", bad);
        node_refuse(n, why);
        return;
    }
    const char *role = ctl_str(msg->body, "role", "");
    agg_role r = strcmp(role, "trainer") == 0 ? AGG_TRAINER : AGG_SERVER;
    uint32_t cap = r == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
    node **v = r == AGG_TRAINER ? m->trainers : m->servers;
    /* A rank asked for (--rank) is that rank or a refusal, never another
     * one: the node's operator meant it (its data shard, its servers), and
     * taking another would turn the node that owns it away later. */
    json_t *jw = json_object_get(msg->body, "want_rank");
    int64_t rank = -1;
    if (jw && !json_is_null(jw)) {
        json_int_t want = json_integer_value(jw); /* a whole number >= 0 (validate_register) */
        if (want < 0 || (uint64_t)want >= cap) {
            if (cap == 0)
                snprintf(why, sizeof why, "--rank %lld: this job has no %ss", (long long)want, role);
            else
                snprintf(why, sizeof why, "--rank %lld is outside 0..%u (this job has %u %s%s)", (long long)want,
                         cap - 1, cap, role, cap == 1 ? "" : "s");
            node_refuse(n, why);
            return;
        }
        const node *owner = v[want];
        if (owner) {
            if (owner->pid > 0)
                snprintf(why, sizeof why, "%s rank %lld is taken (by the %s on %s, pid %lld)", role, (long long)want,
                         role, owner->host, (long long)owner->pid);
            else
                snprintf(why, sizeof why, "%s rank %lld is taken (by the %s on %s)", role, (long long)want, role,
                         owner->host);
            node_refuse(n, why);
            return;
        }
        rank = want;
    }
    for (uint32_t i = 0; rank < 0 && i < cap; i++)
        if (!v[i])
            rank = i;
    if (rank < 0) {
        snprintf(why, sizeof why, "all %u %ss are already registered", cap, role);
        node_refuse(n, why);
        return;
    }
    n->role = r;
    n->rank = (uint32_t)rank;
    n->registered = true;
    n->state = NS_REGISTERED;
    /* Authenticated: its messages may now be as large as the control plane
     * allows (no read mark), and it no longer counts against the bound on
     * connections that have not registered. */
    bufferevent_setwatermark(n->bev, EV_READ, 0, 0);
    master_count_pending(m);
    /* The first answer, at once: the node bounds its wait for it. */
    node_send(n, "registered", json_pack("{s:I}", "rank", (json_int_t)rank));
    /* Kept as it will be shown: every log line, verdict and table prints
     * the host, so it is escaped once here (shared/text.h). */
    text_escape(ctl_str(msg->body, "host", n->peer_ip), n->host, sizeof n->host);
    snprintf(n->device, sizeof n->device, "%s", ctl_str(msg->body, "device", "cpu"));
    n->pid = ctl_int(msg->body, "pid", 0);
    /* What it computes with (shared/hostinfo.h): kept as sent, for
     * results.json and /api/v1/nodes; only an object is taken. */
    json_t *env = json_object_get(msg->body, "environment");
    json_decref(n->environment);
    n->environment = json_is_object(env) ? json_incref(env) : NULL;
    v[rank] = n;
    if (r == AGG_SERVER) {
        /* Trainers must reach it: the address it asked to be advertised,
         * else where it listens, unless that is a wildcard — then the
         * address this master saw it connect from. */
        const char *adv = ctl_str(msg->body, "advertise", NULL);
        const char *lh = ctl_str(msg->body, "listen_host", "0.0.0.0");
        int64_t port = ctl_int(msg->body, "port", 0); /* 1..65535 (validate_register) */
        assert(port > 0 && port <= 65535);
        const char *h = adv && *adv ? adv
                        : (strcmp(lh, "0.0.0.0") == 0 || strcmp(lh, "::") == 0 || !*lh) ? n->peer_ip
                                                                                      : lh;
        if (strchr(h, ':'))
            snprintf(n->addr, sizeof n->addr, "[%s]:%" PRId64, h, port);
        else
            snprintf(n->addr, sizeof n->addr, "%s:%" PRId64, h, port);
        int64_t mt = ctl_int(msg->body, "mem_total_bytes", 0), ma = ctl_int(msg->body, "mem_available_bytes", 0);
        n->mem_total = mt > 0 ? (uint64_t)mt : 0;
        n->mem_available = ma > 0 ? (uint64_t)ma : 0;
        log_info("server %u registered from %s, data plane %s", n->rank, n->host, n->addr);
        master_maybe_assign_servers(m);
    } else {
        log_info("trainer %u registered from %s", n->rank, n->host);
        if (master_nccl_gpu_shared(m, n))
            return;
        /* Said on the trainer's host too, but that may be far away. */
        const char *warn = json_string_value(json_object_get(json_object_get(n->environment, "blas"), "warning"));
        if (warn) {
            char shown[512];
            text_escape(warn, shown, sizeof shown);
            log_warn("trainer %u (%s): %s", n->rank, n->host, shown);
        }
    }
    master_maybe_assign_trainers(m);
}

/* A counter from a node's report (checked by validate_report): absent
 * keeps `cur`. */
static uint64_t master_counter(json_t *body, const char *key, uint64_t cur)
{
    json_t *v = json_object_get(body, key);
    return v ? (uint64_t)json_integer_value(v) : cur;
}

/* A metrics report (or the metrics part of pass_done): every field checked
 * first (validate.h), then applied whole; a bad one fails the run naming
 * the node and the field. */
static void master_on_metrics(master *m, node *n, ctl_msg *msg)
{
    char err[400];
    if (validate_report(msg->body, n->role == AGG_TRAINER, err, sizeof err) < 0) {
        master_fail(m, "%s %u (%s) sent bad metrics: %s", role_name(n->role), n->rank, n->host, err);
        return;
    }
    uint64_t done = n->batches_done;
    if (n->role == AGG_TRAINER) {
        done = master_counter(msg->body, "batches_done", n->batches_done);
        if (done > master_pass_batches(m, m->phase)) {
            master_fail(m, "trainer %u (%s) reports %" PRIu64 " batches done of a %" PRIu64 "-batch pass", n->rank,
                        n->host, done, master_pass_batches(m, m->phase));
            return;
        }
    }
    json_t *samples = json_object_get(msg->body, "samples");
    if (samples && !m->resetting && agg_add_report(&m->agg, n->role, n->rank, samples, err, sizeof err) < 0) {
        master_fail(m, "%s %u (%s) sent bad metrics: %s", role_name(n->role), n->rank, n->host, err);
        return;
    }
    n->bytes_in = master_counter(msg->body, "bytes_in", n->bytes_in);
    n->bytes_out = master_counter(msg->body, "bytes_out", n->bytes_out);
    json_t *rt = json_object_get(msg->body, "rows_touched");
    if (rt && n->role == AGG_SERVER)
        n->rows_touched = json_integer_value(rt);
    json_t *calls = json_object_get(msg->body, "calls");
    if (calls && n->role == AGG_SERVER) { /* an embedding server's traffic (validate_report) */
        json_decref(n->calls);
        n->calls = json_incref(calls);
    }
    if (n->role == AGG_SERVER) {
        /* A server filling its table says how far it has got; the wait for
         * it (join, reset) counts from its last progress. */
        json_t *init = json_object_get(msg->body, "initialising");
        uint64_t idone = (uint64_t)json_integer_value(json_object_get(init, "done_bytes"));
        uint64_t total = (uint64_t)json_integer_value(json_object_get(init, "total_bytes"));
        if (init && (idone != n->init_done || total != n->init_total))
            m->t_init_progress = master_now();
        n->init_done = init ? idone : 0;
        n->init_total = init ? total : 0;
    }
    if (n->role == AGG_TRAINER) {
        if (done > n->batches_done)
            m->batches_completed_total += done - n->batches_done;
        n->batches_done = done;
        /* A trainer's GPU-timed metrics (extension): the list replaces the
         * last one; absent, it stands. */
        json_t *gpu = json_object_get(msg->body, "gpu_timed");
        if (gpu) {
            json_decref(n->gpu_timed);
            n->gpu_timed = json_incref(gpu);
        }
    }
}

/* ---- the rendezvous store ------------------------------------------------ */

static void master_kv_answer(void *who, const char *key, const char *value, void *ctx)
{
    (void)ctx;
    node_send(who, "kv_value", json_pack("{s:s, s:s}", "key", key, "value", value));
}

static void master_on_kv(master *m, node *n, ctl_msg *msg)
{
    const char *key = ctl_str(msg->body, "key", NULL);
    const char *value = ctl_str(msg->body, "value", NULL);
    char err[160];
    int rc;
    if (n->role != AGG_TRAINER) {
        snprintf(err, sizeof err, "only trainers form groups");
        rc = -1;
    } else if (!key || (strcmp(msg->type, "kv_set") == 0 && !value)) {
        snprintf(err, sizeof err, "%s needs a string key%s", msg->type,
                 strcmp(msg->type, "kv_set") == 0 ? " and a string value" : "");
        rc = -1;
    } else if (strcmp(msg->type, "kv_set") == 0) {
        rc = kv_set(&m->kv, key, value, master_kv_answer, m, err, sizeof err);
    } else {
        rc = kv_get(&m->kv, key, n, master_kv_answer, m, err, sizeof err);
    }
    if (rc < 0)
        master_fail(m, "%s %u (%s) sent a bad %s: %s", role_name(n->role), n->rank, n->host, msg->type, err);
}

/* A trainer's report of where its loss diverged (`diverged` in pass_done or
 * failed: {pass, epoch, batch, loss}), checked and copied: it goes into
 * results.json. NULL if absent; *bad when present but malformed. */
static json_t *master_divergence(json_t *body, bool *bad)
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

/* A trainer reported a failure. While the run is still going and others are
 * connected, hold it for MASTER_HOLD_FAILURE_S: if a node disconnects in the
 * meantime, that one is the cause (a killed trainer breaks the others'
 * collectives) and the run fails in its name. */
#define MASTER_HOLD_FAILURE_S 1.0

static void master_on_failed(master *m, node *n, ctl_msg *msg)
{
    n->state = NS_FAILED;
    bool bad;
    json_t *d = master_divergence(msg->body, &bad);
    if (d && !n->diverged)
        n->diverged = d;
    else
        json_decref(d);
    /* The node's own words, escaped: they end up in every process's last
     * line, the API and results.json. */
    char reason[400], why[512];
    if (validate_failed(msg->body, reason, sizeof reason) < 0) {
        snprintf(why, sizeof why, "%s %u (%s) failed (its report is malformed: %s)", role_name(n->role), n->rank,
                 n->host, reason);
    } else {
        text_escape(ctl_str(msg->body, "reason", "no reason given"), reason, sizeof reason);
        snprintf(why, sizeof why, "%s %u (%s) failed: %s", role_name(n->role), n->rank, n->host, reason);
    }
    if (m->phase == PH_DONE || m->phase == PH_FAILED || m->finishing)
        return;
    if (n->role == AGG_SERVER) {
        /* A server reports what it cannot do itself (a trainer refused for
         * want of descriptors): it is the cause. */
        master_fail(m, "%s", why);
        return;
    }
    if (m->held_until > 0)
        return; /* the first failure is the one held */
    snprintf(m->held_failure, sizeof m->held_failure, "%s", why);
    m->held_until = master_now() + MASTER_HOLD_FAILURE_S;
    log_info("%s (waiting %.0f s for its cause)", why, MASTER_HOLD_FAILURE_S);
}

/* ---- silence: which node to name ------------------------------------------ */

/* A node is silent when nothing came from it for this long: its heartbeat
 * (metrics) comes twice a second, so 5 missed ones. */
#define MASTER_SILENT_S 2.5

/* Where a deadline counts from: t, or later — a server's table fill's last
 * progress (a fill of several GiB may take longer than --rpc-timeout, and
 * keeps moving), or the moment this master ran again after a pause of its
 * own (master_check_paused). */
static double master_since(const master *m, double t)
{
    double s = m->t_init_progress > t ? m->t_init_progress : t;
    return m->t_resumed > s ? m->t_resumed : s;
}

/* How long node n has said nothing, as far as this master can tell: not
 * across a pause of the master's own, when it heard no one. */
static double node_silence(const master *m, const node *n, double now)
{
    return now - (m->t_resumed > n->last_seen ? m->t_resumed : n->last_seen);
}

/* Whether server s gets trainer t's buckets (seed placement: t's group's
 * server; shard: every server). */
static bool master_feeds(const master *m, uint32_t s, uint32_t t)
{
    if (m->set.shard)
        return true;
    uint32_t group, index;
    return master_seed_server(m, t, &group, &index) == s;
}

/* The node to name when nodes fall silent (NULL: none is). Candidates are
 * the registered, connected nodes silent for min_s or more that fell
 * silent within MASTER_SILENT_S of the first one to: those that stopped
 * together. A server before any trainer among them: a server's loop waits
 * on no one and reports twice a second whatever its trainers do, while a
 * trainer reports between batches — so every trainer waiting on a stopped
 * server falls silent with it, and one whose last report came just before
 * the server's looks silent longer. Among the servers (or the trainers,
 * when no server is a candidate), the one silent longest. A node that
 * reported its failure is not silent: it waits for the verdict. */
static node *master_blame_silent(master *m, double now, double min_s)
{
    double longest = 0;
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered && n->bev && n->state != NS_FAILED && node_silence(m, n, now) > longest)
            longest = node_silence(m, n, now);
    double floor = longest - MASTER_SILENT_S > min_s ? longest - MASTER_SILENT_S : min_s;
    node *worst = NULL;
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered || !n->bev || n->state == NS_FAILED || node_silence(m, n, now) < floor)
            continue;
        if (!worst || (n->role == AGG_SERVER && worst->role != AGG_SERVER) ||
            (n->role == worst->role && n->last_seen < worst->last_seen))
            worst = n;
    }
    return worst;
}

/* For a silent server: "; trainers 0, 1, which wait on it, went silent
 * too" — the trainers it feeds that are silent as well (empty if none). */
static void master_waiting_on(master *m, const node *s, double now, double min_s, char *buf, size_t len)
{
    buf[0] = '\0';
    if (s->role != AGG_SERVER)
        return;
    char ranks[200] = "";
    size_t k = 0, count = 0;
    for (uint32_t t = 0; t < m->set.ntrainer; t++) {
        const node *n = m->trainers[t];
        if (!n || !n->bev || node_silence(m, n, now) < min_s || !master_feeds(m, s->rank, t))
            continue;
        if (k + 16 < sizeof ranks)
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%u", count ? ", " : "", t);
        else if (k + 4 < sizeof ranks)
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, " ...");
        count++;
    }
    if (count)
        snprintf(buf, len, "; trainer%s %s, which wait%s on it, went silent too", count == 1 ? "" : "s", ranks,
                 count == 1 ? "s" : "");
}

/* The held failure, once its time is up. A node that went silent (a host
 * cut off, its link down, a process stopped) is the likelier cause of a
 * peer's timeout than the peer that reported it: the run fails in the
 * silent node's name, with the report after it. */
static void master_release_failure(master *m, double now)
{
    if (m->held_until > 0 && now >= m->held_until) {
        m->held_until = 0;
        node *silent = master_blame_silent(m, now, MASTER_SILENT_S);
        if (silent) {
            char who[300];
            node_describe(silent, who, sizeof who);
            silent->state = NS_LOST;
            master_fail(m, "%s went silent %.1f s ago (its host or link is down, or it is stopped) (then %s)", who,
                        node_silence(m, silent, now), m->held_failure);
            return;
        }
        master_fail(m, "%s", m->held_failure);
    }
}

static void master_on_message(master *m, node *n, ctl_msg *msg)
{
    n->last_seen = master_now();
    if (strcmp(msg->type, "register") == 0) {
        master_on_register(m, n, msg);
        return;
    }
    if (!n->registered) {
        node_refuse(n, "the first message must be register");
        return;
    }
    if (strcmp(msg->type, "metrics") == 0) {
        master_on_metrics(m, n, msg);
    } else if (strcmp(msg->type, "ready") == 0) {
        char why[300];
        if (validate_ready(msg->body, why, sizeof why) < 0) {
            master_fail(m, "%s %u (%s) sent a bad ready: %s", role_name(n->role), n->rank, n->host, why);
            return;
        }
        json_t *links = json_object_get(msg->body, "links");
        if (n->role == AGG_TRAINER && json_is_array(links) && json_array_size(links)) {
            json_decref(n->links);
            n->links = json_incref(links);
        }
        if (n->state == NS_ASSIGNED)
            n->state = NS_READY;
        if (n->role == AGG_SERVER) {
            /* Its table is filled: trainers may now be told where it is. */
            n->init_total = n->init_done = 0;
            m->t_init_progress = master_now();
            master_maybe_assign_trainers(m);
        }
        if (m->phase == PH_WAITING && master_all(m, AGG_TRAINER, NS_READY) &&
            master_all(m, AGG_SERVER, NS_READY))
            master_start_pass(m, PH_WARMUP);
    } else if (strcmp(msg->type, "pass_done") == 0) {
        /* Only a trainer running a pass may end it. */
        if (n->role != AGG_TRAINER || n->state != NS_RUNNING || m->resetting ||
            (m->phase != PH_WARMUP && m->phase != PH_RUNNING)) {
            master_fail(m, "%s %u (%s) sent pass_done out of turn (phase %s)", role_name(n->role), n->rank,
                        n->host, phase_names[m->phase]);
            return;
        }
        master_on_metrics(m, n, msg);
        if (m->phase == PH_FAILED)
            return;
        char perr[400];
        if (validate_pass_results(msg->body, perr, sizeof perr) < 0) {
            master_fail(m, "trainer %u (%s) sent a bad pass_done: %s", n->rank, n->host, perr);
            return;
        }
        bool bad;
        json_t *d = master_divergence(msg->body, &bad);
        if (bad || (d && !m->set.allow_divergence)) {
            json_decref(d);
            master_fail(m, "trainer %u (%s) sent pass_done with a %s", n->rank, n->host,
                        bad ? "malformed diverged (epoch, batch: whole numbers >= 0; loss: a number, nan, inf, -inf)"
                            : "diverged loss, which this job does not allow (--allow-divergence)");
            return;
        }
        if (d && !n->diverged) {
            n->diverged = d;
            char why[300];
            results_divergence_line(n, why, sizeof why);
            log_warn("%s", why);
        } else {
            json_decref(d);
        }
        if (m->phase == PH_RUNNING) {
            /* Later issues' per-trainer results: kept for results.json. */
            json_decref(n->timed_result);
            n->timed_result = json_object();
            const char *keys[] = {"loss_per_epoch", "final_params_sha256", "bags", "indices", "epochs", "buckets"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                json_t *v = json_object_get(msg->body, keys[k]);
                if (v)
                    json_object_set(n->timed_result, keys[k], v);
            }
        } else {
            /* The warm-up's: each pass starts from the same fresh model, so
             * a reader can see both passes begin alike. */
            json_decref(n->warmup_result);
            n->warmup_result = json_object();
            const char *keys[] = {"loss_per_epoch", "final_params_sha256"};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                json_t *v = json_object_get(msg->body, keys[k]);
                if (v)
                    json_object_set(n->warmup_result, keys[k], v);
            }
        }
        n->state = NS_PASS_DONE;
        if (master_all(m, AGG_TRAINER, NS_PASS_DONE))
            master_pass_complete(m);
    } else if (strcmp(msg->type, "reset_done") == 0) {
        if (n->state == NS_RESETTING)
            n->state = NS_READY;
        if (n->role == AGG_SERVER) {
            n->init_total = n->init_done = 0;
            m->t_init_progress = master_now();
        }
        if (m->resetting && master_all(m, AGG_TRAINER, NS_READY) && master_all(m, AGG_SERVER, NS_READY))
            master_reset_complete(m);
    } else if (strcmp(msg->type, "failed") == 0) {
        master_on_failed(m, n, msg);
    } else if (strcmp(msg->type, "kv_set") == 0 || strcmp(msg->type, "kv_get") == 0) {
        master_on_kv(m, n, msg);
    } else {
        char type[sizeof msg->type * 4];
        text_escape(msg->type, type, sizeof type);
        log_warn("%s %u sent unknown control message '%s'", role_name(n->role), n->rank, type);
    }
}

/* ---- connections -------------------------------------------------------- */

/* Before a node has registered, the master takes no more than a register
 * needs: a header of MASTER_PREAUTH_HEADER bytes (type, token, payload) and
 * a body of MASTER_PREAUTH_BODY (a register with its environment is under
 * 2 KiB; a host with 16 GPUs, 6). A frame that declares more is refused at
 * its header, before any of it is buffered, and the connection goes: a peer
 * without the token cannot make the master hold more than this (times
 * ADMIT_MAX_PENDING connections) however much it declares. Once registered,
 * a node's messages may have up to CTL_MAX_BODY. */
#define MASTER_PREAUTH_HEADER 1024u
#define MASTER_PREAUTH_BODY (16u << 10)
#define MASTER_PREAUTH_FRAME (FRAME_PREFIX_LEN + MASTER_PREAUTH_HEADER + MASTER_PREAUTH_BODY)
/* A refused node has this long to read its reason and close. */
#define MASTER_REFUSED_LINGER_S 5.0

static void node_detach(node *n)
{
    if (n->bev) {
        bufferevent_free(n->bev);
        n->bev = NULL;
    }
}

/* The one place a node and what it owns are freed. */
static void node_free(node *n)
{
    node_detach(n);
    json_decref(n->timed_result);
    json_decref(n->warmup_result);
    json_decref(n->diverged);
    json_decref(n->environment);
    json_decref(n->gpu_timed);
    json_decref(n->links);
    json_decref(n->calls);
    free(n);
}

/* A connection that never registered is gone (closed, malformed, refused,
 * silent): free it now, so that nothing of it stays however many come and
 * go. Only from the end of its own callbacks, or the tick. */
static void node_forget(master *m, node *n)
{
    assert(!n->registered);
    for (node **pp = &m->nodes; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    node_free(n);
    master_count_pending(m);
}

/* ctl_read_stream's view of an input evbuffer. */
static const uint8_t *node_pullup(void *in, size_t n)
{
    return evbuffer_pullup(in, (ev_ssize_t)n);
}

static void node_on_read(struct bufferevent *bev, void *arg)
{
    node *n = arg;
    master *m = n->m;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (n->refused) {
        /* Told why already: whatever follows stays unread. The read mark
         * (at most one register) stops libevent reading it, so that a peer
         * that goes on sending costs no memory and no work; one that
         * closes is seen (its EOF fits under the mark) and freed. */
        return;
    }
    frame_decoder dec;
    frame_decoder_init(&dec, CTL_MAX_BODY);
    while (n->bev && !n->refused) {
        /* The bounds before registration: a register's size at most (a
         * register earlier in this loop lifts them). */
        dec.max_payload = n->registered ? CTL_MAX_BODY : MASTER_PREAUTH_BODY;
        dec.max_header = n->registered ? FRAME_HDR_MAX : MASTER_PREAUTH_HEADER;
        ctl_msg msg;
        size_t used;
        frame_status st = ctl_read_stream(&dec, evbuffer_get_length(in), node_pullup, in, &msg, &used);
        if (st == FRAME_NEED_MORE)
            break;
        if (st == FRAME_OK) {
            evbuffer_drain(in, used);
            master_on_message(m, n, &msg);
            ctl_msg_clear(&msg);
            continue;
        }
        char who[300], what[sizeof dec.err * 2];
        node_describe(n, who, sizeof who);
        text_escape(dec.err, what, sizeof what); /* it may quote the peer's bytes */
        if (!n->registered && st == FRAME_TOO_LARGE) {
            /* Refused at the header: none of the rest is read. */
            char why[300];
            snprintf(why, sizeof why, "a node's first message must be a register of at most %u bytes (%s)",
                     MASTER_PREAUTH_FRAME, dec.err);
            node_refuse(n, why);
            break;
        }
        if (n->registered && m->phase != PH_DONE && m->phase != PH_FAILED)
            master_fail(m, "%s sent a malformed control message: %s", who, what);
        else
            log_warn("%s sent a malformed control message: %s", who, what);
        n->state = n->registered ? NS_FAILED : n->state;
        node_detach(n);
        break;
    }
    frame_decoder_free(&dec);
    if (!n->bev && !n->registered)
        node_forget(m, n);
}

/* Output written: a refused node's reason is out, so our side ends (a FIN
 * after the reason; the node closes once it has read it). */
static void node_on_write(struct bufferevent *bev, void *arg)
{
    node *n = arg;
    if (n->refused && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        shutdown(bufferevent_getfd(bev), SHUT_WR);
}

static void node_on_event(struct bufferevent *bev, short what, void *arg)
{
    node *n = arg;
    master *m = n->m;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    node_detach(n);
    kv_forget(&m->kv, n);
    if (!n->registered) {
        node_forget(m, n);
        return;
    }
    char who[300];
    node_describe(n, who, sizeof who);
    if (m->phase == PH_DONE || m->finishing || n->state == NS_DONE) {
        log_debug("%s disconnected after the run", who);
        return;
    }
    if (n->state == NS_FAILED) {
        /* It said why before it left: its failure (held) names it. */
        if (m->held_until > 0 && strncmp(m->held_failure, who, strlen(who)) == 0) {
            m->held_until = 0;
            master_fail(m, "%s", m->held_failure);
        }
        return;
    }
    n->state = NS_LOST;
    if (m->held_until > 0) {
        /* Another node's failure is held: this loss is its likely cause. */
        m->held_until = 0;
        master_fail(m, "%s disconnected (then %s)", who, m->held_failure);
        return;
    }
    master_fail(m, "%s disconnected", who);
}

/* admit.h's callback: a connection within the bounds. */
static void master_on_accept(void *arg, int fd, const struct sockaddr *sa, int salen)
{
    (void)salen;
    master *m = arg;
    node *n = calloc(1, sizeof *n);
    if (!n) {
        evutil_closesocket(fd);
        return;
    }
    n->m = m;
    n->last_seen = master_now();
    n->rows_touched = -1;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, n->peer_ip,
                  sizeof n->peer_ip);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, n->peer_ip,
                  sizeof n->peer_ip);
    n->bev = bufferevent_socket_new(m->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!n->bev) {
        evutil_closesocket(fd);
        free(n);
        return;
    }
    bufferevent_setcb(n->bev, node_on_read, node_on_write, node_on_event, n);
    /* Until it registers, the input buffer holds one register at most:
     * libevent stops reading at the mark (node_on_read has refused any
     * frame that would not fit by then). */
    bufferevent_setwatermark(n->bev, EV_READ, 0, MASTER_PREAUTH_FRAME);
    bufferevent_enable(n->bev, EV_READ | EV_WRITE);
    n->next = m->nodes;
    m->nodes = n;
    master_count_pending(m);
}

/* ---- runs (--runs): from one run to the next ---------------------------- */

bool master_runs_remain(const master *m)
{
    return !m->runs_ended && (m->set.runs == 0 || m->run < m->set.runs);
}

/* Whether the next run may start: 1 yes; 0 not yet (why: what it waits
 * for); -1 never (why: the reason). The last run's trainers must have left
 * (--local: exited) and every server must have answered its reset. */
static int master_between_runs(master *m, char *why, size_t len)
{
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        node *n = m->servers[i];
        if (!n->bev) {
            snprintf(why, len, "server %u (%s) disconnected between runs %u and %u", n->rank, n->host, m->run,
                     m->run + 1);
            return -1;
        }
    }
    for (uint32_t i = 0; i < m->set.ntrainer; i++) {
        node *n = m->trainers[i];
        if (n && n->bev) {
            snprintf(why, len, "trainer %u (%s) of run %u had not left", n->rank, n->host, m->run);
            return 0;
        }
    }
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        node *n = m->servers[i];
        if (n->state != NS_READY) {
            snprintf(why, len, "server %u (%s) had not answered the reset after run %u", n->rank, n->host,
                     m->run);
            return 0;
        }
    }
    if (m->launcher && !launcher_trainers_exited(m->launcher)) {
        snprintf(why, len, "the trainers of run %u had not exited", m->run);
        return 0;
    }
    return 1;
}

/* Free the last run's trainer nodes, and closed connections that never
 * registered: a long series of runs must not grow the master. */
static void master_forget_trainers(master *m)
{
    for (node **pp = &m->nodes; *pp;) {
        node *n = *pp;
        if (n->registered ? n->role == AGG_SERVER : n->bev != NULL) {
            pp = &n->next;
            continue;
        }
        *pp = n->next;
        node_free(n);
    }
    memset(m->trainers, 0, m->set.ntrainer * sizeof *m->trainers);
}

/* done → waiting: the run's state cleared, the servers kept. */
static void master_next_run(master *m, double now)
{
    char why[400];
    int ok = master_between_runs(m, why, sizeof why);
    master_forget_trainers(m);
    aggregate fresh; /* no metric of the last run, not even its name */
    if (agg_init(&fresh) == 0) {
        agg_free(&m->agg);
        m->agg = fresh;
    } else {
        agg_free(&fresh);
        agg_reset(&m->agg);
    }
    kv_free(&m->kv);
    kv_init(&m->kv);
    for (uint32_t i = 0; i < m->set.nserver; i++)
        m->servers[i]->rows_base = m->servers[i]->rows_touched;
    for (uint32_t i = 0; i < m->set.nserver; i++) { /* the next report's are the next run's */
        json_decref(m->servers[i]->calls);
        m->servers[i]->calls = NULL;
    }
    m->held_until = 0;
    m->training_s = 0;
    m->finished_output = false;
    m->run++;
    m->t_start = now;
    master_set_phase(m, PH_WAITING);
    if (ok != 1) {
        master_fail(m, "%s%s", why, ok == 0 ? " within --rpc-timeout" : "");
        return;
    }
    if (m->launcher && launcher_restart_trainers(m->launcher, why, sizeof why) < 0) {
        master_fail(m, "%s", why);
        return;
    }
    if (m->set.runs)
        log_info("run %u of %u: waiting for %u trainer(s)", m->run, m->set.runs, m->set.ntrainer);
    else
        log_info("run %u: waiting for %u trainer(s)", m->run, m->set.ntrainer);
}

/* A signal after a run, before the next one's trainers: no more runs. */
static void master_end_runs(master *m)
{
    m->runs_ended = true;
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered && n->role == AGG_SERVER && n->state != NS_DONE) {
            node_send(n, "stop", json_pack("{s:s}", "status", "done"));
            n->state = NS_DONE;
        }
}

static bool master_any_trainer(const master *m)
{
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        if (m->trainers[i])
            return true;
    return false;
}

/* ---- the tick: failure detection, progress, snapshots ------------------- */

static void master_progress_line(master *m, double now)
{
    if (m->phase != PH_WARMUP && m->phase != PH_RUNNING)
        return;
    if (now - m->t_last_progress < 2.0)
        return;
    m->t_last_progress = now;
    uint64_t done = 0, total = master_pass_batches(m, m->phase) * m->set.ntrainer;
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        done += m->trainers[i]->batches_done;
    log_info("%s: %" PRIu64 "/%" PRIu64 " batches (%.0f%%), %.1f s", phase_names[m->phase], done, total,
             total ? 100.0 * (double)done / (double)total : 0.0, now - m->t_phase);
}

/* What a node was doing when it fell silent, for the verdict (empty in a
 * pass, where the phase says it). */
static const char *node_doing(const node *n)
{
    switch (n->state) {
    case NS_REGISTERED: return " (it had registered and was waiting for its assignment)";
    case NS_ASSIGNED: return " (it was setting up after its assignment)";
    case NS_READY: return " (it was ready, waiting for the pass to start)";
    case NS_RESETTING: return " (it was resetting)";
    default: return "";
    }
}

/* Every registered node must be heard from within --rpc-timeout, in every
 * phase (from its register on): the one to blame is named
 * (master_blame_silent) — the first to time out may be a trainer that
 * only waits on it. */
static void master_check_silence(master *m, double now)
{
    double limit = m->set.rpc_timeout_s;
    node *late = NULL;
    for (node *n = m->nodes; n; n = n->next)
        if (n->registered && n->bev && n->state != NS_FAILED && node_silence(m, n, now) > limit &&
            (!late || n->last_seen < late->last_seen))
            late = n;
    if (!late)
        return;
    /* Silent, for naming: half the timeout (a short --rpc-timeout) or five
     * missed heartbeats, whichever is less. */
    double min_s = limit / 2 < MASTER_SILENT_S ? limit / 2 : MASTER_SILENT_S;
    node *blame = master_blame_silent(m, now, min_s);
    assert(blame);
    char who[300], waiting[300];
    node_describe(blame, who, sizeof who);
    master_waiting_on(m, blame, now, min_s, waiting, sizeof waiting);
    blame->state = NS_LOST;
    if (node_silence(m, blame, now) > limit) {
        master_fail(m, "%s sent nothing for %.1f s (--rpc-timeout)%s%s", who, node_silence(m, blame, now),
                    node_doing(blame), waiting);
    } else {
        /* A silent server, not at the timeout yet, and its trainers, which
         * are: the server is the cause. */
        char then[300];
        node_describe(late, then, sizeof then);
        master_fail(m, "%s went silent %.1f s ago (its host or link is down, or it is stopped)%s (then %s sent "
                    "nothing for %.1f s (--rpc-timeout))", who, node_silence(m, blame, now), waiting, then,
                    node_silence(m, late, now));
    }
}

/* The join's verdict: who is missing, and who is there but not ready. */
static void master_join_failed(master *m)
{
    uint32_t tr = 0, sv = 0;
    for (uint32_t i = 0; i < m->set.ntrainer; i++)
        tr += m->trainers[i] && m->trainers[i]->state == NS_READY;
    for (uint32_t i = 0; i < m->set.nserver; i++)
        sv += m->servers[i] != NULL;
    char detail[600] = "";
    size_t k = 0;
    for (node *n = m->nodes; n; n = n->next) {
        if (!n->registered || n->state == NS_READY || k + 100 >= sizeof detail)
            continue;
        char who[300];
        node_describe(n, who, sizeof who);
        k += (size_t)snprintf(detail + k, sizeof detail - k, "%s%s is %s", k ? "; " : " (", who,
                              node_state_name(n->state));
    }
    char fds[300];
    uint64_t refused = m->admit ? admit_refused(m->admit, fds, sizeof fds) : 0;
    if (refused)
        k += (size_t)snprintf(detail + k, sizeof detail - k, "%s%" PRIu64 " connection%s refused: %s", k ? "; " : " (",
                              refused, refused == 1 ? "" : "s", fds);
    if (k && k < sizeof detail - 1)
        snprintf(detail + k, sizeof detail - k, ")");
    master_fail(m, "only %u of %u trainers and %u of %u servers joined within %.0f s%s", tr, m->set.ntrainer, sv,
                m->set.nserver, m->set.join_timeout_s, detail);
}

static void master_check_timeouts(master *m, double now)
{
    if (m->phase == PH_DONE || m->phase == PH_FAILED)
        return;
    master_check_silence(m, now);
    if (m->phase == PH_FAILED)
        return;
    if (m->phase == PH_WAITING) {
        if (now - master_since(m, m->t_start) > m->set.join_timeout_s)
            master_join_failed(m);
        return;
    }
    if (m->resetting && now - master_since(m, m->t_phase) > m->set.rpc_timeout_s)
        master_fail(m, "reset after the warm-up did not complete within %.0f s", m->set.rpc_timeout_s);
}

/* The tick is due every MASTER_TICK_S. One MASTER_PAUSE_S or more late
 * means this master did not run meanwhile — stopped (SIGSTOP), its host or
 * VM suspended, its host starved — and heard no one: that is no node's
 * silence. Every silence and deadline counts again from now
 * (master_since, node_silence); a held failure waits its second again. A
 * tick late for a slow callback restarts them too, which only postpones a
 * verdict by that much. */
#define MASTER_TICK_S 0.5
#define MASTER_PAUSE_S 2.0

static void master_check_paused(master *m, double now)
{
    double gap = now - m->t_last_tick;
    m->t_last_tick = now;
    if (gap < MASTER_TICK_S + MASTER_PAUSE_S)
        return;
    m->t_resumed = now;
    if (m->held_until > 0)
        m->held_until = now + MASTER_HOLD_FAILURE_S;
    log_warn("this master did not run for %.1f s (stopped, or its host suspended): the nodes' silence counts "
             "from now", gap);
}

/* A connection that has not registered within this long is dropped: idle
 * ones would otherwise pile up (each holds a descriptor). */
#define MASTER_REGISTER_TIMEOUT_S 30.0

/* Connections that never registered and are done with: silent for the
 * register timeout, or refused and given their time to read why. Freed. */
static void master_drop_silent(master *m, double now)
{
    for (node *n = m->nodes, *next; n; n = next) {
        next = n->next;
        if (n->registered)
            continue;
        if (n->refused && now - n->t_refused > MASTER_REFUSED_LINGER_S) {
            node_forget(m, n);
        } else if (!n->refused && now - n->last_seen > MASTER_REGISTER_TIMEOUT_S) {
            log_warn("dropping a connection from %s: no register within %.0f s", n->peer_ip,
                     MASTER_REGISTER_TIMEOUT_S);
            node_forget(m, n);
        }
    }
}

static void master_on_tick(evutil_socket_t fd, short what, void *arg)
{
    master *m = arg;
    double now = master_now();
    master_check_paused(m, now);
    master_drop_silent(m, now);
    if (!m->finishing) {
        master_release_failure(m, now);
        master_check_timeouts(m, now);
    }
    master_progress_line(m, now);
    if (m->phase != PH_DONE && m->phase != PH_FAILED)
        master_publish(m, false);
    if (m->finishing || m->phase == PH_DONE || m->phase == PH_FAILED) {
        /* Nodes send a last metrics report when they stop, then close:
         * wait (briefly) for every one of them so the tables are whole.
         * Before another run: for the trainers to leave and the servers
         * to reset (their reset_done follows their last report). */
        bool next = m->finishing && master_runs_remain(m);
        bool settled = true;
        char why[400];
        if (next)
            settled = master_between_runs(m, why, sizeof why) != 0;
        else
            for (node *n = m->nodes; n; n = n->next)
                settled &= !n->registered || !n->bev;
        double wait_s = next ? m->set.rpc_timeout_s : 5.0;
        if (!m->finished_output && !settled && !m->hurry && now - master_since(m, m->t_finished) < wait_s)
            return;
        if (m->finishing) {
            m->finishing = false;
            master_set_phase(m, PH_DONE);
        }
        if (!m->finished_output) {
            m->finished_output = true;
            results_print(m);
            char err[256];
            if (results_write(m, err, sizeof err) < 0) {
                log_error("%s", err);
                if (m->exit_code == 0)
                    m->exit_code = 1;
            }
            master_publish(m, true); /* the end, now that its files are there */
            if (m->set.linger_s > 0 && !master_runs_remain(m))
                log_info("HTTP stays up for %.0f s (--linger)", m->set.linger_s);
        }
        if (m->phase == PH_DONE && master_runs_remain(m)) {
            master_next_run(m, now);
            return;
        }
        bool children_gone = !m->launcher || launcher_all_exited(m->launcher);
        if (m->launcher && !children_gone && now - m->t_finished > m->set.rpc_timeout_s)
            launcher_kill_all(m->launcher);
        if (children_gone && now - m->t_finished >= m->set.linger_s)
            event_base_loopbreak(m->base);
    }
}

/* The signals that stop the master (master_init), by name. */
static const int master_signals[MASTER_NSIGNALS] = {SIGINT, SIGTERM, SIGHUP};

static const char *master_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session) alike. */
static void master_on_signal(evutil_socket_t sig, short what, void *arg)
{
    master *m = arg;
    if (m->finishing) {
        /* The run is done; only the nodes' last reports are awaited. Write
         * the results with what is in, keep the run's exit code, no linger,
         * no further run. */
        m->hurry = true;
        m->set.linger_s = 0;
        master_end_runs(m);
        return;
    }
    if (m->phase == PH_WAITING && m->run > 1 && !m->launcher && !master_any_trainer(m)) {
        /* Between runs, nobody of the next one in yet: end after the last
         * complete run (its output is written); stop the servers. */
        log_info("stopped after run %u", m->run - 1);
        m->run--;
        m->runs_ended = true;
        m->finished_output = true;
        m->set.linger_s = 0;
        master_finish_ok(m);
        return;
    }
    if (m->phase == PH_DONE || m->phase == PH_FAILED) {
        /* Second signal, or during --linger: leave now. */
        if (m->launcher)
            launcher_kill_all(m->launcher);
        m->set.linger_s = 0;
        event_base_loopbreak(m->base);
        return;
    }
    master_fail(m, "interrupted (%s)", master_signal_name((int)sig));
    /* As shells report a process that a signal ended: 128 + its number. */
    m->exit_code = 128 + (int)sig;
}

/* ---- snapshot ----------------------------------------------------------- */

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
    size_t i = 0;
    /* Servers then trainers, by rank: a stable order for the dashboard. */
    for (int r = AGG_SERVER; r >= AGG_TRAINER; r--) {
        node **v = r == AGG_TRAINER ? m->trainers : m->servers;
        uint32_t cap = r == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
        for (uint32_t k = 0; k < cap; k++) {
            node *n = v[k];
            if (!n)
                continue;
            snap_node *sn = &nodes[i++];
            sn->role = role_name(n->role);
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
    size_t ns = 0;
    snap_stat *st = agg_snapshot(&m->agg, exact, &ns);
    snapshot_input in = {0};
    in.phase = phase_names[m->phase];
    in.run = m->run;
    in.runs = m->set.runs;
    in.error = m->error[0] ? m->error : NULL;
    in.batches_total = master_pass_batches(m, m->phase) * m->set.ntrainer;
    for (uint32_t k = 0; k < m->set.ntrainer; k++)
        if (m->trainers[k])
            in.batches_done += m->trainers[k]->batches_done;
    if (m->phase == PH_WAITING)
        in.batches_done = 0;
    in.batches_completed_total = m->batches_completed_total;
    in.elapsed_s = now - m->t_start;
    in.nodes = nodes;
    in.nnodes = i;
    in.stats = st;
    in.nstats = st ? ns : 0;
    http_publish(m->http, snapshot_status_json(&in), snapshot_nodes_json(&in), snapshot_metrics_json(&in),
                 snapshot_prometheus(&in));
    free(st);
    free(nodes);
}

/* ---- lifecycle ---------------------------------------------------------- */

int master_init(master *m, const master_settings *set, const char *listen_host, uint16_t listen_port,
                char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->set = *set;
    m->run = 1;
    m->t_start = m->t_phase = master_now();
    m->trainers = calloc(set->ntrainer ? set->ntrainer : 1, sizeof *m->trainers);
    m->servers = calloc(set->nserver ? set->nserver : 1, sizeof *m->servers); /* 0: pure DDP */
    kv_init(&m->kv);
    m->base = event_base_new();
    if (!m->trainers || !m->servers || !m->base || agg_init(&m->agg) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* A connection per node, the HTTP API's, the --local children's pipes:
     * as many descriptors as the hard limit allows, as servers do. */
    unsigned long long was, now;
    if (net_raise_fd_limit(&was, &now) == 0 && now != was)
        log_debug("descriptor limit raised from %llu to %llu", was, now);
    /* net_listen: the same socket set-up as the servers' data plane. */
    int fd = net_listen(listen_host, listen_port, 128, &m->ctl_port, err, errlen);
    if (fd < 0)
        return -1;
    m->admit = admit_new(m->base, fd, master_on_accept, m, err, errlen);
    if (!m->admit)
        return -1;
    m->tick_ev = event_new(m->base, -1, EV_PERSIST, master_on_tick, m);
    struct timeval half = {0, (int)(MASTER_TICK_S * 1e6)};
    bool ok = m->tick_ev && event_add(m->tick_ev, &half) == 0;
    for (int i = 0; ok && i < MASTER_NSIGNALS; i++) {
        m->sig_ev[i] = evsignal_new(m->base, master_signals[i], master_on_signal, m);
        ok = m->sig_ev[i] && event_add(m->sig_ev[i], NULL) == 0;
    }
    if (!ok) {
        snprintf(err, errlen, "cannot set up the event loop");
        return -1;
    }
    return 0;
}

int master_run(master *m)
{
    signal(SIGPIPE, SIG_IGN);
    master_publish(m, false);
    m->t_last_tick = master_now();
    event_base_dispatch(m->base);
    if (!m->finished_output) {
        /* Left the loop early (a second signal): still report. */
        m->finished_output = true;
        results_print(m);
        char err[256];
        if (results_write(m, err, sizeof err) < 0)
            log_error("%s", err);
    }
    return m->exit_code;
}

void master_free(master *m)
{
    /* Nothing may call back into the master from here on: its events and
     * the listener go first. */
    if (m->tick_ev)
        event_free(m->tick_ev);
    for (int i = 0; i < MASTER_NSIGNALS; i++)
        if (m->sig_ev[i])
            event_free(m->sig_ev[i]);
    admit_free(m->admit);
    while (m->nodes) {
        node *n = m->nodes;
        m->nodes = n->next;
        node_free(n);
    }
    /* libevent frees a bufferevent from its loop (finalizers), and
     * event_base_free does not run them all (one whose reading stopped at
     * its read mark stays): run the loop once more, with nothing of the
     * master's left on it, so that none freed just now outlives the base. */
    if (m->base) {
        event_base_loop(m->base, EVLOOP_NONBLOCK);
        event_base_free(m->base);
    }
    agg_free(&m->agg);
    kv_free(&m->kv);
    free(m->trainers);
    free(m->servers);
}
