/* launchenv.c — a rank's place from a launcher's environment, Slurm's host
 * lists, and psbench-node's rank-to-role map (see launchenv.h). */
#include "shared/launchenv.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *launch_getenv(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

/* A whole number in [0, max]: decimal digits only (no sign, no blanks: a
 * launcher writes them so, and "3 " is more likely a mistake than a rank). */
static int launch_parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    if (!s || !*s || strlen(s) > 10)
        return -1;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    if (v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* The first of `names` (flag value first, then each variable) that is set;
 * what it is called goes to *from. */
typedef struct launch_source {
    const char *value;
    const char *from;
} launch_source;

static launch_source launch_first(const char *flag, const char *flag_name, char *const *envp,
                                  const char *const *vars)
{
    if (flag)
        return (launch_source){flag, flag_name};
    for (size_t i = 0; vars[i]; i++) {
        const char *v = launch_getenv(envp, vars[i]);
        if (v && *v) /* an empty variable is an unset one (export X= in a script) */
            return (launch_source){v, vars[i]};
    }
    return (launch_source){NULL, NULL};
}

static int launch_num_read(launch_num *n, launch_source s, uint32_t max, const char *what, char *err,
                           size_t errlen)
{
    if (!s.value)
        return 0;
    if (launch_parse_u32(s.value, max, &n->v) < 0) {
        snprintf(err, errlen, "%s='%.64s' is not %s", s.from, s.value, what);
        return -1;
    }
    n->set = true;
    snprintf(n->from, sizeof n->from, "%s", s.from);
    return 0;
}

/* A host: a name or an address, nothing a shell or a URL would read
 * otherwise (the value is handed on as HOST:PORT). */
static int launch_host_ok(const char *h)
{
    if (!*h || strlen(h) > 253)
        return 0;
    for (const char *c = h; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '.' || *c == '_' || *c == ':'))
            return 0;
    return 1;
}

static const char *launch_name(const launch_place *p, char *const *envp)
{
    if (!p->rank.set && !p->master_addr.set)
        return "";
    const char *from = p->rank.set ? p->rank.from : p->master_addr.from;
    if (strncmp(from, "SLURM_", 6) == 0)
        return "slurm";
    if (strcmp(from, "JOB_COMPLETION_INDEX") == 0)
        return "kubernetes";
    if (strcmp(from, "RANK") == 0 || strcmp(from, "MASTER_ADDR") == 0)
        return launch_getenv(envp, "TORCHELASTIC_RUN_ID") ? "torchrun" : "pytorch";
    /* The rank from a flag or PSBENCH_RANK: the launcher's name is still
     * that of whatever else it set. */
    if (launch_getenv(envp, "TORCHELASTIC_RUN_ID"))
        return "torchrun";
    if (launch_getenv(envp, "SLURM_PROCID"))
        return "slurm";
    if (launch_getenv(envp, "JOB_COMPLETION_INDEX"))
        return "kubernetes";
    if (launch_getenv(envp, "RANK") || launch_getenv(envp, "MASTER_ADDR"))
        return "pytorch";
    return "psbench";
}

int launch_read(launch_place *p, const launch_flags *f, char *const *envp, char *err, size_t errlen)
{
    static const char *const rank_vars[] = {"PSBENCH_RANK", "RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX", NULL};
    static const char *const world_vars[] = {"PSBENCH_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", NULL};
    static const char *const local_vars[] = {"PSBENCH_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", NULL};
    static const char *const addr_vars[] = {"PSBENCH_MASTER_ADDR", "MASTER_ADDR", NULL};
    static const char *const port_vars[] = {"PSBENCH_PORT", NULL};
    static const char *const http_vars[] = {"PSBENCH_HTTP_PORT", NULL};
    static const char *const list_vars[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", NULL};
    static const char *const base_vars[] = {"MASTER_PORT", NULL};
    static const launch_flags none = {0};
    if (!f)
        f = &none;
    memset(p, 0, sizeof *p);
    if (launch_num_read(&p->rank, launch_first(f->rank, "--rank", envp, rank_vars), LAUNCH_MAX_WORLD - 1,
                        "a rank", err, errlen) < 0 ||
        launch_num_read(&p->world, launch_first(f->world_size, "--world-size", envp, world_vars), LAUNCH_MAX_WORLD,
                        "a world size", err, errlen) < 0 ||
        launch_num_read(&p->local_rank, launch_first(f->local_rank, "--local-rank", envp, local_vars),
                        LAUNCH_MAX_WORLD - 1, "a local rank", err, errlen) < 0)
        return -1;
    if (p->world.set && p->world.v == 0) {
        snprintf(err, errlen, "%s=0: a world has at least one rank", p->world.from);
        return -1;
    }
    if (p->rank.set && p->world.set && p->rank.v >= p->world.v) {
        snprintf(err, errlen, "%s=%u is not below %s=%u", p->rank.from, p->rank.v, p->world.from, p->world.v);
        return -1;
    }

    /* The master's host: a flag or variable, else Slurm's first node. */
    launch_source a = launch_first(f->master_addr, "--master-addr", envp, addr_vars);
    if (a.value) {
        if (!launch_host_ok(a.value)) {
            snprintf(err, errlen, "%s='%.64s' is not a host name or address", a.from, a.value);
            return -1;
        }
        snprintf(p->master_addr.v, sizeof p->master_addr.v, "%s", a.value);
        snprintf(p->master_addr.from, sizeof p->master_addr.from, "%s", a.from);
        p->master_addr.set = true;
    } else {
        launch_source l = launch_first(NULL, NULL, envp, list_vars);
        if (l.value) {
            char why[200];
            if (launch_hostlist_first(l.value, p->master_addr.v, sizeof p->master_addr.v, why, sizeof why) < 0) {
                snprintf(err, errlen, "%s='%.64s': %s", l.from, l.value, why);
                return -1;
            }
            snprintf(p->master_addr.from, sizeof p->master_addr.from, "%s", l.from);
            p->master_addr.set = true;
        }
    }

    /* The ports: psbench's own, else next to the launcher's MASTER_PORT. */
    launch_num base = {0};
    if (launch_num_read(&p->port, launch_first(f->port, "--port", envp, port_vars), 65535, "a port", err, errlen) <
            0 ||
        launch_num_read(&p->http_port, launch_first(f->http_port, "--http-port", envp, http_vars), 65535, "a port",
                        err, errlen) < 0 ||
        launch_num_read(&base, launch_first(NULL, NULL, envp, base_vars), 65535, "a port", err, errlen) < 0)
        return -1;
    if ((p->port.set && p->port.v == 0) || (p->http_port.set && p->http_port.v == 0)) {
        launch_num *z = p->port.set && p->port.v == 0 ? &p->port : &p->http_port;
        snprintf(err, errlen, "%s=0 is not a port: the other ranks must know it", z->from);
        return -1;
    }
    if (base.set && (base.v == 0 || base.v > 65533) && (!p->port.set || !p->http_port.set)) {
        snprintf(err, errlen, "MASTER_PORT=%u: psbench's master takes MASTER_PORT+1 and +2 (set PSBENCH_PORT and "
                 "PSBENCH_HTTP_PORT, or --port and --http-port)", base.v);
        return -1;
    }
    if (!p->port.set) {
        p->port.set = true;
        p->port.v = base.set ? base.v + 1 : LAUNCH_DEFAULT_PORT;
        snprintf(p->port.from, sizeof p->port.from, "%s", base.set ? "MASTER_PORT+1" : "default");
    }
    if (!p->http_port.set) {
        p->http_port.set = true;
        p->http_port.v = base.set ? base.v + 2 : LAUNCH_DEFAULT_HTTP_PORT;
        snprintf(p->http_port.from, sizeof p->http_port.from, "%s", base.set ? "MASTER_PORT+2" : "default");
    }
    if (p->port.v == p->http_port.v) {
        snprintf(err, errlen, "the control port (%s) and the HTTP port (%s) are both %u", p->port.from,
                 p->http_port.from, p->port.v);
        return -1;
    }
    snprintf(p->launcher, sizeof p->launcher, "%s", launch_name(p, envp));
    return 0;
}

/* ---- Slurm's host lists ------------------------------------------------ */

typedef struct hl_state {
    launch_host_fn fn;
    void *ctx;
    long count;
    int stopped;
    char *err;
    size_t errlen;
} hl_state;

/* Expand item[0..len) after `prefix` (what came before in this item):
 * the first bracket group's values, each followed by the rest expanded. */
static int hl_item(hl_state *s, const char *prefix, const char *item, size_t len)
{
    const char *open = memchr(item, '[', len);
    const char *close = memchr(item, ']', len);
    if (!open) {
        if (close) {
            snprintf(s->err, s->errlen, "a ']' without its '['");
            return -1;
        }
        char host[512];
        if (strlen(prefix) + len > 255) {
            snprintf(s->err, s->errlen, "a host name over 255 characters");
            return -1;
        }
        snprintf(host, sizeof host, "%s%.*s", prefix, (int)len, item);
        if (++s->count > (long)LAUNCH_MAX_HOSTS) {
            snprintf(s->err, s->errlen, "more than %u hosts", LAUNCH_MAX_HOSTS);
            return -1;
        }
        if (s->fn && !s->stopped && s->fn(host, s->ctx))
            s->stopped = 1;
        return 0;
    }
    size_t pre = (size_t)(open - item);
    const char *body = open + 1;
    const char *end = memchr(body, ']', len - pre - 1);
    if (!end || (close && close < open)) {
        snprintf(s->err, s->errlen, end ? "a ']' without its '['" : "a '[' without its ']'");
        return -1;
    }
    if (memchr(body, '[', (size_t)(end - body))) {
        snprintf(s->err, s->errlen, "nested '['");
        return -1;
    }
    if (end == body) {
        snprintf(s->err, s->errlen, "an empty '[]'");
        return -1;
    }
    char head[512];
    if (strlen(prefix) + pre > 255) {
        snprintf(s->err, s->errlen, "a host name over 255 characters");
        return -1;
    }
    snprintf(head, sizeof head, "%s%.*s", prefix, (int)pre, item);
    const char *rest = end + 1;
    size_t rest_len = len - (size_t)(rest - item);
    /* The ranges: "N" or "N-M", comma-separated. */
    const char *r = body;
    while (r < end) {
        const char *comma = memchr(r, ',', (size_t)(end - r));
        const char *stop = comma ? comma : end;
        const char *dash = memchr(r, '-', (size_t)(stop - r));
        const char *lo_end = dash ? dash : stop;
        const char *hi = dash ? dash + 1 : r;
        char lo_s[16], hi_s[16];
        size_t lo_n = (size_t)(lo_end - r), hi_n = (size_t)(stop - hi);
        uint32_t lo, hv;
        snprintf(lo_s, sizeof lo_s, "%.*s", (int)(lo_n < 15 ? lo_n : 15), r);
        snprintf(hi_s, sizeof hi_s, "%.*s", (int)(hi_n < 15 ? hi_n : 15), hi);
        if (lo_n == 0 || hi_n == 0 || lo_n > 10 || hi_n > 10 || launch_parse_u32(lo_s, 999999999, &lo) < 0 ||
            launch_parse_u32(hi_s, 999999999, &hv) < 0 || hv < lo) {
            snprintf(s->err, s->errlen, "'%.*s' is not a range (N or N-M with N <= M)", (int)(stop - r), r);
            return -1;
        }
        if ((uint64_t)(hv - lo) >= LAUNCH_MAX_HOSTS) {
            snprintf(s->err, s->errlen, "more than %u hosts", LAUNCH_MAX_HOSTS);
            return -1;
        }
        /* Zero padding: the first number's width, as scontrol keeps it. */
        int width = (int)lo_n;
        for (uint32_t v = lo;; v++) {
            char name[600];
            snprintf(name, sizeof name, "%s%0*u", head, width, v);
            if (hl_item(s, name, rest, rest_len) < 0)
                return -1;
            if (v == hv)
                break;
        }
        r = comma ? comma + 1 : end;
        if (comma && r == end) {
            snprintf(s->err, s->errlen, "an empty range before ']'");
            return -1;
        }
    }
    return 0;
}

long launch_hostlist_expand(const char *list, launch_host_fn fn, void *ctx, char *err, size_t errlen)
{
    hl_state s = {.fn = fn, .ctx = ctx, .err = err, .errlen = errlen};
    if (!list || !*list) {
        snprintf(err, errlen, "an empty host list");
        return -1;
    }
    const char *p = list;
    for (;;) {
        /* An item ends at a comma outside brackets. */
        const char *q = p;
        int depth = 0;
        while (*q && !(*q == ',' && depth == 0)) {
            if (*q == '[')
                depth++;
            else if (*q == ']')
                depth--;
            if (*q == ' ' || *q == '\t' || *q == '\n') {
                snprintf(err, errlen, "a blank in the host list");
                return -1;
            }
            q++;
        }
        if (q == p) {
            snprintf(err, errlen, "an empty host in the list");
            return -1;
        }
        if (hl_item(&s, "", p, (size_t)(q - p)) < 0)
            return -1;
        if (!*q)
            break;
        p = q + 1;
        if (!*p) {
            snprintf(err, errlen, "an empty host at the list's end");
            return -1;
        }
    }
    return s.count;
}

typedef struct hl_first {
    char *out;
    size_t len;
} hl_first;

static int hl_take_first(const char *host, void *ctx)
{
    hl_first *f = ctx;
    snprintf(f->out, f->len, "%s", host);
    return 1;
}

int launch_hostlist_first(const char *list, char *out, size_t outlen, char *err, size_t errlen)
{
    hl_first f = {out, outlen};
    assert(outlen > 0);
    out[0] = '\0';
    /* The whole list is checked, not only up to its first host: a list
     * that is wrong further on is a mistake worth saying at once. */
    return launch_hostlist_expand(list, hl_take_first, &f, err, errlen) < 0 ? -1 : 0;
}

/* ---- the rank-to-role map ---------------------------------------------- */

int launch_map_make(launch_map *m, const launch_counts *c, uint32_t world, const char *world_from, char *err,
                    size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->ncudatrainer = c->ncudatrainer;
    m->ncudaserver = c->ncudaserver;
    uint64_t cuda = (uint64_t)c->ncudatrainer + c->ncudaserver;
    if (!world && !(c->ntrainer_set && c->nserver_set)) {
        snprintf(err, errlen, "no world size (WORLD_SIZE, SLURM_NTASKS, PSBENCH_WORLD_SIZE or --world-size): give "
                 "both --ntrainer and --nserver");
        return -1;
    }
    uint64_t t = c->ntrainer, s = c->nserver;
    if (!c->nserver_set && !c->ntrainer_set)
        s = 1;
    if (c->ntrainer_set || !world) {
        if (!c->nserver_set) {
            uint64_t have = t + cuda + 1;
            if (world < have) {
                snprintf(err, errlen, "%s=%u is too small for %" PRIu64 " trainer(s) and the master", world_from,
                         world, t + c->ncudatrainer);
                return -1;
            }
            s = world - have;
        }
    } else {
        uint64_t have = s + cuda + 1;
        t = world > have ? world - have : 0;
    }
    m->ntrainer = (uint32_t)t;
    m->nserver = (uint32_t)s;
    uint64_t total = t + s + cuda + 1;
    if (t + c->ncudatrainer == 0) {
        snprintf(err, errlen, "%s=%u leaves no rank for a trainer (%" PRIu64 " server(s) and the master): a job "
                 "needs at least one", world_from ? world_from : "the world", world, s + c->ncudaserver);
        return -1;
    }
    if (total > LAUNCH_MAX_WORLD) {
        snprintf(err, errlen, "a world of %" PRIu64 " ranks: at most %u", total, LAUNCH_MAX_WORLD);
        return -1;
    }
    if (world && total != world) {
        snprintf(err, errlen, "%s=%u, but %" PRIu64 " trainer(s) + %" PRIu64 " server(s) + the master make %" PRIu64
                 ": the world size must be T + S + 1", world_from, world, t + c->ncudatrainer, s + c->ncudaserver,
                 total);
        return -1;
    }
    return 0;
}

uint32_t launch_map_world(const launch_map *m)
{
    return m->ntrainer + m->ncudatrainer + m->nserver + m->ncudaserver + 1;
}

int launch_map_role(const launch_map *m, uint32_t r, launch_role *role, uint32_t *role_rank, bool *cuda)
{
    uint32_t world = launch_map_world(m);
    uint32_t nt = m->ntrainer + m->ncudatrainer, ns = m->nserver + m->ncudaserver;
    if (r >= world)
        return -1;
    if (m->master_first) {
        if (r == 0) {
            *role = LAUNCH_MASTER, *role_rank = 0, *cuda = false;
            return 0;
        }
        r--; /* the others, shifted up by one */
    } else if (r == world - 1) {
        *role = LAUNCH_MASTER, *role_rank = 0, *cuda = false;
        return 0;
    }
    if (r < nt) {
        *role = LAUNCH_TRAINER, *role_rank = r, *cuda = r >= m->ntrainer;
    } else {
        assert(r - nt < ns);
        *role = LAUNCH_SERVER, *role_rank = r - nt, *cuda = r - nt >= m->nserver;
    }
    return 0;
}

const char *launch_role_name(launch_role role)
{
    switch (role) {
    case LAUNCH_TRAINER: return "trainer";
    case LAUNCH_SERVER: return "server";
    case LAUNCH_MASTER: return "master";
    }
    return "?";
}
