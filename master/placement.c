/* placement.c — registrations, ranks, the seed's placement, the memory
 * check and the assignments (placement.h). */
#include "master/placement.h"
#include "master/mparams.h"
#include "master/mtrace.h"
#include "master/validate.h"
#include "master/wire.h"
#include "shared/cli.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- the seed's placement ------------------------------------------------ */

/* CPU trainers (ranks 0..ntrainer-1) feed the CPU servers (ranks
 * 0..nserver-1), CUDA trainers the CUDA servers after them, each group
 * split evenly (config_check_fit checks it divides). With shard placement
 * every trainer feeds every server. */
static uint32_t placement_cpu_trainers(const master *m) { return m->set.ntrainer - m->set.ncudatrainer; }
static uint32_t placement_cpu_servers(const master *m) { return m->set.nserver - m->set.ncudaserver; }

/* Trainers feeding server `rank`. */
static uint32_t placement_trainers_per_server(const master *m, uint32_t rank)
{
    assert(rank < m->set.nserver);
    if (m->set.shard)
        return m->set.ntrainer;
    if (rank < placement_cpu_servers(m))
        return placement_cpu_trainers(m) / placement_cpu_servers(m);
    return m->set.ncudatrainer / m->set.ncudaserver;
}

/* The server of trainer `rank` under seed placement, its group's size and
 * the trainer's index in it. */
static uint32_t placement_seed_server(const master *m, uint32_t rank, uint32_t *group, uint32_t *index)
{
    assert(rank < m->set.ntrainer && m->set.nserver > 0);
    uint32_t first = 0, t = rank;
    if (rank >= placement_cpu_trainers(m)) { /* a CUDA trainer */
        first = placement_cpu_servers(m);
        t = rank - placement_cpu_trainers(m);
    }
    *group = placement_trainers_per_server(m, first);
    assert(*group > 0);
    *index = t % *group;
    uint32_t s = first + t / *group;
    assert(s < m->set.nserver);
    return s;
}

bool placement_feeds(const master *m, uint32_t s, uint32_t t)
{
    if (m->set.shard)
        return true;
    uint32_t group, index;
    return placement_seed_server(m, t, &group, &index) == s;
}

/* ---- the servers' tables in their hosts' memory --------------------------- */

/* The tables a server holds: the seed's pattern adds the table's dense
 * gradient, a second table-sized buffer (trainer/hybrid.h). */
static unsigned placement_tables_per_server(const master *m)
{
    return m->set.rpc_pattern && strcmp(m->set.rpc_pattern, "seed") == 0 ? 2 : 1;
}

/* The bytes of one server's embedding table (0: no embedding kind). */
static uint64_t placement_table_bytes(const master *m)
{
    if (!m->set.embedding)
        return 0;
    json_int_t rows = json_integer_value(json_object_get(m->set.embedding, "num_embeddings"));
    json_int_t cols = json_integer_value(json_object_get(m->set.embedding, "embedding_dim"));
    if (rows <= 0 || cols <= 0 || rows > (1ll << 31) || cols > (1ll << 31))
        return 0;
    return (uint64_t)rows * (uint64_t)cols * sizeof(float);
}

/* The servers on host i's host (the first server there is i): how many,
 * the largest memory any reported, their ranks. */
static uint32_t placement_host_servers(const master *m, uint32_t i, uint64_t *avail, uint64_t *total, char *ranks,
                                       size_t len)
{
    const node *n = m->servers[i];
    uint32_t count = 0;
    size_t rl = 0;
    *avail = *total = 0;
    ranks[0] = '\0';
    for (uint32_t j = i; j < m->set.nserver; j++) {
        const node *o = m->servers[j];
        if (strcmp(o->host, n->host) != 0)
            continue;
        count++;
        *avail = o->mem_available > *avail ? o->mem_available : *avail;
        *total = o->mem_total > *total ? o->mem_total : *total;
        if (rl < len - 16)
            rl += (size_t)snprintf(ranks + rl, len - rl, "%s%u", rl ? ", " : "", o->rank);
    }
    return count;
}

/* The embedding tables of the servers on each host (same `host`) must fit
 * that host's memory together, as the servers reported it at register (the
 * largest report when several did): refused here, before any server
 * allocates, rather than by the kernel's OOM killer mid-run. 0, or -1 with
 * the verdict (the sizes). */
static int placement_check_memory(const master *m, char *verdict, size_t len)
{
    uint64_t table = placement_table_bytes(m);
    if (table == 0)
        return 0;
    for (uint32_t i = 0; i < m->set.nserver; i++) {
        const node *n = m->servers[i];
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = strcmp(m->servers[j]->host, n->host) == 0;
        if (seen)
            continue; /* that host was checked with its first server */
        uint64_t avail, total;
        char ranks[256];
        uint32_t count = placement_host_servers(m, i, &avail, &total, ranks, sizeof ranks);
        unsigned per = placement_tables_per_server(m);
        if (avail == 0 || (uint64_t)count * per * table <= avail)
            continue; /* not reported (no check), or it fits */
        char t[32], a[32], all[32];
        cli_format_bytes(table, t, sizeof t);
        cli_format_bytes(avail, a, sizeof a);
        cli_format_bytes(total, all, sizeof all);
        snprintf(verdict, len,
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

/* ---- assignments ---------------------------------------------------------- */

/* --trace (extension, issue 42): the steps and the rings' size every node
 * traces with (shared/tracejob.h). */
static void placement_add_trace(const master *m, json_t *body)
{
    json_t *t = body ? mtrace_assign_json(m) : NULL;
    if (t)
        json_object_set_new(body, "trace", t);
}

static void placement_assign_server(master *m, node *n)
{
    assert(n->role == AGG_SERVER && n->state == NS_REGISTERED && m->servers[n->rank] == n);
    json_t *body = json_pack("{s:I, s:I, s:s, s:s, s:f}", "rank", (json_int_t)n->rank, "trainers",
                             (json_int_t)placement_trainers_per_server(m, n->rank), "kind", m->set.server_kind,
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
    placement_add_trace(m, body);
    wire_send(n, "assign", body);
    node_set_state(n, NS_ASSIGNED); /* ready once its kind is (its table filled) */
}

/* Once every server has registered (each has a slot and is still waiting
 * for its assignment: this happens once, at the last one's register): check
 * their tables against their hosts, then assign them all. 0, or -1 with the
 * verdict. */
static int placement_assign_servers(master *m, char *verdict, size_t len)
{
    for (uint32_t s = 0; s < m->set.nserver; s++)
        if (!m->servers[s] || m->servers[s]->state != NS_REGISTERED)
            return 0;
    if (placement_check_memory(m, verdict, len) < 0)
        return -1;
    for (uint32_t s = 0; s < m->set.nserver; s++)
        placement_assign_server(m, m->servers[s]);
    return 0;
}

static void placement_assign_trainer(master *m, node *n)
{
    assert(n->role == AGG_TRAINER && n->state == NS_REGISTERED && m->trainers[n->rank] == n);
    json_t *servers = json_array();
    uint32_t group = m->set.ntrainer;
    uint32_t data_rank = n->rank;
    if (m->set.nserver == 0) {
        /* Pure DDP: no server; the data is dealt over every trainer. */
    } else if (m->set.shard) {
        for (uint32_t s = 0; s < m->set.nserver; s++)
            json_array_append_new(servers, json_string(m->servers[s]->addr));
    } else {
        uint32_t s = placement_seed_server(m, n->rank, &group, &data_rank);
        json_array_append_new(servers, json_string(m->servers[s]->addr));
    }
    json_t *body =
        json_pack("{s:I, s:o, s:I, s:I, s:O, s:I, s:I, s:I, s:I, s:f, s:s}", "rank", (json_int_t)n->rank, "servers",
                  servers, "data_rank", (json_int_t)data_rank, "group_size", (json_int_t)group, "model", m->set.model,
                  "batches", (json_int_t)m->set.batches_per_pass, "epochs", (json_int_t)m->set.epochs, "batch_size",
                  (json_int_t)m->set.batch_size, "seed", (json_int_t)m->set.seed, "rpc_timeout", m->set.rpc_timeout_s,
                  "placement", m->set.shard ? "shard" : "seed");
    json_object_set(body, "data", m->set.data ? m->set.data : json_null());
    json_object_set(body, "trainer", m->set.trainer ? m->set.trainer : json_null());
    json_object_set_new(body, "ntrainer", json_integer(m->set.ntrainer));
    json_object_set_new(body, "backend", json_string(m->set.backend ? m->set.backend : "gloo"));
    json_object_set_new(body, "allow_divergence", json_boolean(m->set.allow_divergence));
    if (m->set.steps) /* --steps: the passes' batches need not be whole epochs (the data cycles) */
        json_object_set_new(body, "steps", json_integer((json_int_t)m->set.steps));
    placement_add_trace(m, body);
    /* --out (extension, issue 43): trainer 0's final parameters at the
     * end, for results.json's final_params (mparams.h) */
    json_t *fp = mparams_assign_json(m, n->rank);
    if (fp)
        json_object_set_new(body, "final_params", fp);
    wire_send(n, "assign", body);
    node_set_state(n, NS_ASSIGNED);
}

/* No trainer is answered by a server whose table is still being filled. */
void placement_assign_trainers(master *m)
{
    if (m->state != RUN_WAITING)
        return;
    for (uint32_t s = 0; s < m->set.nserver; s++)
        if (!m->servers[s] || m->servers[s]->state != NS_READY)
            return;
    for (uint32_t t = 0; t < m->set.ntrainer; t++)
        if (m->trainers[t] && m->trainers[t]->state == NS_REGISTERED)
            placement_assign_trainer(m, m->trainers[t]);
}

/* ---- NCCL's GPUs ------------------------------------------------------------ */

/* The GPU a CUDA trainer computes on, as its registration described it
 * (environment "gpus": each GPU of its host, index order, with its UUID;
 * "cuda_index": the one asked for, -1: by rank, as the trainer places
 * plain --device cuda); NULL for a CPU trainer or one that said nothing. */
static const char *placement_trainer_gpu(const node *n)
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
 * second one's registration instead, naming both and what to do: -1 with
 * the verdict. */
static int placement_check_nccl_gpu(const master *m, const node *n, char *verdict, size_t len)
{
    const char *id = m->set.nccl_group ? placement_trainer_gpu(n) : NULL;
    for (uint32_t t = 0; id && t < m->set.ntrainer; t++) {
        const node *o = m->trainers[t];
        const char *oid = o && o != n ? placement_trainer_gpu(o) : NULL;
        if (oid && strcmp(oid, id) == 0 && strcmp(o->host, n->host) == 0) {
            char gpu[200]; /* the trainer's words (its environment): escaped */
            text_escape(id, gpu, sizeof gpu);
            snprintf(verdict, len,
                     "--backend %s: trainers %u and %u would share GPU %s on %s, and NCCL cannot "
                     "hold two ranks on one GPU: use --backend gloo (staged through host memory), or one GPU per "
                     "CUDA trainer on each host",
                     m->set.backend, o->rank, n->rank, gpu, n->host);
            return -1;
        }
    }
    return 0;
}

/* ---- a register -------------------------------------------------------------- */

static bool placement_token_ok(const master *m, const char *got)
{
    if (!m->set.token)
        return true;
    size_t n = strlen(m->set.token), g = strlen(got);
    unsigned diff = (unsigned)(n ^ g);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)m->set.token[i] ^ (unsigned char)(i < g ? got[i] : 0);
    return diff == 0;
}

/* Why the run can no longer take a register (NULL: it can): it started, is
 * finishing before the next run, or is over (the master only serves its
 * results while it lingers). */
static const char *placement_late(const master *m, char *why, size_t len)
{
    switch (m->state) {
    case RUN_WAITING:
        return NULL;
    case RUN_BETWEEN_RUNS:
    case RUN_FINISHING:
    case RUN_DONE:
        if (m->state == RUN_BETWEEN_RUNS && master_runs_remain(m)) /* else a signal ended the runs */
            snprintf(why, len, "the last run is finishing: join once the next one waits for trainers");
        else
            snprintf(why, len, "the run is over (done): this master only serves its results now (--linger)");
        break;
    case RUN_FAILING:
    case RUN_FAILED: /* the verdict: a node started late learns the cause */
        snprintf(why, len, "the run is over (failed: %s)", m->error);
        break;
    default:
        snprintf(why, len, "the run has already started");
    }
    return why;
}

/* Why this register is refused before its rank is looked at (NULL: it is
 * not): its token, the run's state, its fields. *retry: only the run's
 * state may be otherwise later (a node that follows, --follow, tries
 * again); a token or a register that is wrong stays wrong. */
static const char *placement_gate(const master *m, const ctl_msg *msg, char *why, size_t len, bool *retry)
{
    *retry = false;
    if (msg->token_too_long) {
        snprintf(why, len,
                 "its token is longer than %d bytes (the most psbench takes), so it cannot be "
                 "this job's",
                 CLI_TOKEN_MAX);
        return why;
    }
    if (!placement_token_ok(m, msg->token))
        return msg->token[0] ? "wrong token" : "this master needs a token (--token-file FILE or PSBENCH_TOKEN)";
    if (placement_late(m, why, len)) {
        *retry = true;
        return why;
    }
    char bad[400];
    if (validate_register(msg->body, bad, sizeof bad) < 0) {
        snprintf(why, len, "bad register: %s", bad);
        return why;
    }
    return NULL;
}

/* The rank a register gets: the one asked for (--rank), which is that rank
 * or a refusal, never another one — the node's operator meant it (its data
 * shard, its servers), and taking another would turn the node that owns it
 * away later — else the lowest free one. -1 with why when refused. */
static int64_t placement_rank(const master *m, const ctl_msg *msg, agg_role r, char *why, size_t len)
{
    const char *role = agg_role_name(r);
    uint32_t cap = r == AGG_TRAINER ? m->set.ntrainer : m->set.nserver;
    node *const *v = r == AGG_TRAINER ? m->trainers : m->servers;
    json_t *jw = json_object_get(msg->body, "want_rank");
    if (jw && !json_is_null(jw)) {
        json_int_t want = json_integer_value(jw); /* a whole number >= 0 (validate_register) */
        if (want < 0 || (uint64_t)want >= cap) {
            if (cap == 0)
                snprintf(why, len, "--rank %lld: this job has no %ss", (long long)want, role);
            else
                snprintf(why, len, "--rank %lld is outside 0..%u (this job has %u %s%s)", (long long)want, cap - 1, cap,
                         role, cap == 1 ? "" : "s");
            return -1;
        }
        const node *owner = v[want];
        if (!owner)
            return want;
        if (owner->pid > 0)
            snprintf(why, len, "%s rank %lld is taken (by the %s on %s, pid %lld)", role, (long long)want, role,
                     owner->host, (long long)owner->pid);
        else
            snprintf(why, len, "%s rank %lld is taken (by the %s on %s)", role, (long long)want, role, owner->host);
        return -1;
    }
    for (uint32_t i = 0; i < cap; i++)
        if (!v[i])
            return i;
    if (cap == 0)
        snprintf(why, len, "this job has no %ss", role);
    else
        snprintf(why, len, "all %u %ss are already registered", cap, role);
    return -1;
}

/* Registered: the node takes its slot and is answered at once (it bounds
 * its wait for that first answer); what it said of itself is kept. */
static void placement_take(master *m, node *n, const ctl_msg *msg, agg_role r, uint32_t rank)
{
    node **v = r == AGG_TRAINER ? m->trainers : m->servers;
    assert(rank < (r == AGG_TRAINER ? m->set.ntrainer : m->set.nserver) && !v[rank]);
    n->role = r;
    n->rank = rank;
    n->registered = true;
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
    /* "clock" (extension, issue 42): it answers `clock`. */
    n->clock_answers = json_is_true(json_object_get(msg->body, "clock"));
    v[rank] = n;
    node_set_state(n, NS_REGISTERED);
    wire_registered(n);
    wire_send(n, "registered", json_pack("{s:I}", "rank", (json_int_t)rank));
    mtrace_node_registered(m, n);
}

/* A server's data plane and memory, from its register. Trainers must reach
 * it: the address it asked to be advertised, else where it listens, unless
 * that is a wildcard — then the address this master saw it connect from. */
static void placement_server_joined(node *n, const ctl_msg *msg)
{
    const char *adv = ctl_str(msg->body, "advertise", NULL);
    const char *lh = ctl_str(msg->body, "listen_host", "0.0.0.0");
    int64_t port = ctl_int(msg->body, "port", 0); /* 1..65535 (validate_register) */
    assert(port > 0 && port <= 65535);
    const char *h = adv && *adv ? adv : (strcmp(lh, "0.0.0.0") == 0 || strcmp(lh, "::") == 0 || !*lh) ? n->peer_ip : lh;
    if (strchr(h, ':'))
        snprintf(n->addr, sizeof n->addr, "[%s]:%" PRId64, h, port);
    else
        snprintf(n->addr, sizeof n->addr, "%s:%" PRId64, h, port);
    int64_t mt = ctl_int(msg->body, "mem_total_bytes", 0), ma = ctl_int(msg->body, "mem_available_bytes", 0);
    n->mem_total = mt > 0 ? (uint64_t)mt : 0;
    n->mem_available = ma > 0 ? (uint64_t)ma : 0;
    log_info("server %u registered from %s, data plane %s", n->rank, n->host, n->addr);
}

/* A trainer's BLAS warning, said on the trainer's host too, but that may
 * be far away. */
static void placement_trainer_warning(const node *n)
{
    const char *warn = json_string_value(json_object_get(json_object_get(n->environment, "blas"), "warning"));
    if (warn) {
        char shown[512];
        text_escape(warn, shown, sizeof shown);
        log_warn("trainer %u (%s): %s", n->rank, n->host, shown);
    }
}

int placement_register(master *m, node *n, ctl_msg *msg, char *verdict, size_t len)
{
    if (n->registered) {
        snprintf(verdict, len, "%s %u sent register twice", agg_role_name(n->role), n->rank);
        return -1;
    }
    char why[sizeof m->error + 100];
    bool retry;
    const char *refused = placement_gate(m, msg, why, sizeof why, &retry);
    agg_role r = !refused && strcmp(ctl_str(msg->body, "role", ""), "trainer") == 0 ? AGG_TRAINER : AGG_SERVER;
    int64_t rank = refused ? -1 : placement_rank(m, msg, r, why, sizeof why);
    if (rank < 0) {
        /* No place for it in this job (no such role, rank, or a free one):
         * the next job of a sweep may have one. */
        wire_refuse(n, refused ? refused : why, refused ? retry : true);
        return 0;
    }
    placement_take(m, n, msg, r, (uint32_t)rank);
    if (r == AGG_SERVER) {
        placement_server_joined(n, msg);
        if (placement_assign_servers(m, verdict, len) < 0)
            return -1;
    } else {
        log_info("trainer %u registered from %s", n->rank, n->host);
        if (placement_check_nccl_gpu(m, n, verdict, len) < 0)
            return -1;
        placement_trainer_warning(n);
    }
    placement_assign_trainers(m);
    return 0;
}
