/* main.c — psbench-node: one command for every rank of a launcher.
 *
 * It reads the rank's place (shared/launchenv.h: flags, PSBENCH_*, then the
 * launcher's variables), finds the rank's role in the map, says in one line
 * what it took from where, and execs the role's binary from its own
 * directory with the arguments that role needs. It never links a role's
 * code: the roles stay the binaries they are, and every rank behaves, once
 * exec'd, as that binary started by hand would (its exit status included).
 *
 * Its life is short and straight: parse, read the place, make the map,
 * check, exec. Every failure before the exec is a one-line reason and exit
 * 2; nothing is started before the checks are done.
 */
#include "launch/opts.h"
#include "shared/launchenv.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

#define NODE_PROG "psbench-node"

static void node_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void node_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, NODE_PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static char *node_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        node_die("out of memory");
    return d;
}

static char *node_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *node_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        node_die("out of memory");
    return s;
}

/* ---- the binaries --------------------------------------------------------- */

/* The directory the roles' binaries are in: $PSBENCH_BIN_DIR, else this
 * executable's own (the three are installed beside it, and built beside it). */
static void node_bin_dir(char *dir, size_t len)
{
    const char *env = getenv("PSBENCH_BIN_DIR");
    if (env && *env) {
        snprintf(dir, len, "%s", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        node_die("cannot find its own executable (/proc/self/exe: %s): set PSBENCH_BIN_DIR", strerror(errno));
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    assert(slash); /* the kernel's path is absolute */
    *slash = '\0';
    snprintf(dir, len, "%s", self[0] ? self : "/");
}

/* ---- the command for a rank ---------------------------------------------- */

/* A growing argv. */
typedef struct node_cmd {
    char **v;
    int n, cap;
} node_cmd;

static void cmd_add(node_cmd *c, const char *s)
{
    if (c->n + 2 > c->cap) {
        c->cap = c->cap ? c->cap * 2 : 32;
        c->v = realloc(c->v, (size_t)c->cap * sizeof *c->v);
        if (!c->v)
            node_die("out of memory");
    }
    c->v[c->n++] = node_strdup(s);
    c->v[c->n] = NULL;
}

/* The one place a command's strings are freed (a dry run makes one per
 * rank; the rank's own is handed to execv and lives as long as the
 * process). */
static void cmd_free(node_cmd *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->v[i]);
    free(c->v);
    *c = (node_cmd){0};
}

/* What the whole world shares: the place, the map, the options. */
typedef struct node_world {
    const node_args *args;
    const launch_place *place;
    launch_map map;
    char bin_dir[PATH_MAX];
    char master[300];   /* HOST:PORT for the servers and trainers */
} node_world;

static void node_cmd_for(const node_world *w, uint32_t rank, node_cmd *c, launch_role *role, uint32_t *role_rank)
{
    const node_args *a = w->args;
    const launch_place *p = w->place;
    bool cuda;
    int rc = launch_map_role(&w->map, rank, role, role_rank, &cuda);
    assert(rc == 0);
    (void)rc;
    const char *bin = *role == LAUNCH_MASTER ? "psbench-master" : *role == LAUNCH_SERVER ? "psbench-server"
                                                                                         : "psbench-trainer";
    char *path = node_fmt("%s/%s", w->bin_dir, bin);
    cmd_add(c, path);
    free(path);
    if (*role == LAUNCH_MASTER) {
        char *v = node_fmt("0.0.0.0:%u", p->port.v);
        cmd_add(c, "--listen"), cmd_add(c, v), free(v);
        v = node_fmt("0.0.0.0:%u", p->http_port.v);
        cmd_add(c, "--http"), cmd_add(c, v), free(v);
        /* The counts it was not given: derived here, said to it. */
        if (!a->ntrainer_set) {
            v = node_fmt("%u", w->map.ntrainer);
            cmd_add(c, "--ntrainer"), cmd_add(c, v), free(v);
        }
        if (!a->nserver_set) {
            v = node_fmt("%u", w->map.nserver);
            cmd_add(c, "--nserver"), cmd_add(c, v), free(v);
        }
        for (int i = 0; i < a->nmaster; i++)
            cmd_add(c, a->master[i]);
        return;
    }
    char *v = node_fmt("%u", *role_rank);
    cmd_add(c, "--master"), cmd_add(c, w->master);
    cmd_add(c, "--rank"), cmd_add(c, v), free(v);
    if (cuda) {
        /* "cuda" alone under a launcher: the GPU of this local rank (in
         * the dry run's map, each rank's own). */
        if (strcmp(a->device, "cuda") == 0 && a->dry_run)
            v = node_strdup("cuda:LOCAL_RANK");
        else if (strcmp(a->device, "cuda") == 0 && p->local_rank.set)
            v = node_fmt("cuda:%u", p->local_rank.v);
        else
            v = node_strdup(a->device);
        cmd_add(c, "--device"), cmd_add(c, v), free(v);
    }
    if (a->connect_timeout_set) {
        v = node_fmt("%g", a->connect_timeout_s);
        cmd_add(c, "--connect-timeout"), cmd_add(c, v), free(v);
    }
    if (a->token)
        cmd_add(c, "--token"), cmd_add(c, a->token);
    if (a->token_file)
        cmd_add(c, "--token-file"), cmd_add(c, a->token_file);
}

/* ---- where the master is ----------------------------------------------- */

/* Whether host is this machine: loopback, or an address (one of the
 * name's) that a socket can bind, which only a local address can.
 * 1 yes, 0 no, -1 the name does not resolve (why in why). */
static int node_host_is_here(const char *host, char *why, size_t whylen)
{
    if (net_host_is_loopback(host))
        return 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, NULL, &hints, &res);
    if (g != 0) {
        snprintf(why, whylen, "%s", gai_strerror(g));
        return -1;
    }
    int here = 0;
    for (struct addrinfo *r = res; r && !here; r = r->ai_next) {
        int fd = socket(r->ai_family, SOCK_STREAM, 0);
        if (fd < 0)
            continue;
        /* Port 0 in the resolved address: binding takes any free port. */
        if (bind(fd, r->ai_addr, r->ai_addrlen) == 0)
            here = 1;
        close(fd);
    }
    freeaddrinfo(res);
    return here;
}

/* "RANK, WORLD_SIZE" for the start line. */
static void node_sources(char *buf, size_t len, const launch_num *a, const launch_num *b)
{
    if (b && b->set)
        snprintf(buf, len, "%s, %s", a->from, b->from);
    else
        snprintf(buf, len, "%s", a->from);
}

/* The launcher's facts as the master records them (results.json's
 * "launcher"; docs/results.md): handed over in $PSBENCH_LAUNCHER. */
static char *node_launcher_json(const node_world *w, uint32_t rank, const char *role)
{
    const launch_place *p = w->place;
    json_t *vars = json_object();
    json_t *o = json_object();
    if (!vars || !o)
        node_die("out of memory");
    const struct {
        const char *key;
        const launch_num *n;
    } nums[] = {{"rank", &p->rank}, {"world_size", &p->world}, {"local_rank", &p->local_rank},
                {"port", &p->port}, {"http_port", &p->http_port}};
    json_object_set_new(o, "name", json_string(p->launcher));
    json_object_set_new(o, "map", json_string(w->map.master_first ? "master-first" : "pytorch"));
    json_object_set_new(o, "rank", json_integer(rank));
    json_object_set_new(o, "role", json_string(role));
    json_object_set_new(o, "world_size", json_integer(launch_map_world(&w->map)));
    json_object_set_new(o, "local_rank", p->local_rank.set ? json_integer(p->local_rank.v) : json_null());
    json_object_set_new(o, "master", json_string(w->master));
    json_object_set_new(o, "http_port", json_integer(p->http_port.v));
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        json_object_set_new(vars, nums[i].key, nums[i].n->set ? json_string(nums[i].n->from) : json_null());
    json_object_set_new(vars, "master_addr", p->master_addr.set ? json_string(p->master_addr.from) : json_null());
    json_object_set_new(o, "variables", vars);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        node_die("out of memory");
    return s;
}

static void node_print_cmd(FILE *f, const node_cmd *c)
{
    for (int i = 0; i < c->n; i++)
        fprintf(f, "%s%s", i ? " " : "", c->v[i]);
    fprintf(f, "\n");
}

static int node_print_host(const char *host, void *ctx)
{
    (void)ctx;
    printf("%s\n", host);
    return 0;
}

int main(int argc, char **argv)
{
    char err[600];
    node_args a;
    int rc = node_args_parse(&a, argc, argv, err, sizeof err);
    if (rc == OPTS_HELP || rc == OPTS_VERSION) {
        node_args_free(&a);
        return 0;
    }
    if (rc < 0)
        node_die("%s (see --help)", err);

    if (a.print_hostnames) {
        if (launch_hostlist_expand(a.print_hostnames, node_print_host, NULL, err, sizeof err) < 0)
            node_die("--print-hostnames '%.100s': %s", a.print_hostnames, err);
        node_args_free(&a);
        return 0;
    }

    launch_place p;
    if (launch_read(&p, &a.place, environ, err, sizeof err) < 0)
        node_die("%s", err);
    node_world w = {.args = &a, .place = &p};
    launch_counts counts = {
        .ntrainer_set = a.ntrainer_set, .nserver_set = a.nserver_set, .ntrainer = (uint32_t)a.ntrainer,
        .nserver = (uint32_t)a.nserver, .ncudatrainer = (uint32_t)a.ncudatrainer, .ncudaserver = (uint32_t)a.ncudaserver};
    if (launch_map_make(&w.map, &counts, p.world.set ? p.world.v : 0, p.world.from, err, sizeof err) < 0)
        node_die("%s", err);
    w.map.master_first = strcmp(a.master_rank, "0") == 0;
    uint32_t world = launch_map_world(&w.map);
    node_bin_dir(w.bin_dir, sizeof w.bin_dir);
    const char *host = p.master_addr.set ? p.master_addr.v : "MASTER_ADDR";
    snprintf(w.master, sizeof w.master, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, p.port.v);
    const char *name = p.launcher[0] ? p.launcher : "psbench";
    char where[200];
    snprintf(where, sizeof where, "master %s (%s, %s)", w.master, p.master_addr.set ? p.master_addr.from : "not set",
             p.port.from);

    if (a.dry_run) {
        char ws[120];
        snprintf(ws, sizeof ws, "%s", p.world.set ? p.world.from : "--ntrainer + --nserver + 1");
        printf("%s: world of %u (%s), %s; map: %s\n", name, world, ws, where,
               w.map.master_first ? "master on rank 0 (--master-rank 0), then trainers, then servers"
                                  : "PyTorch's (trainers, servers, the master last)");
        for (uint32_t r = 0; r < world; r++) {
            node_cmd c = {0};
            launch_role role;
            uint32_t rr;
            node_cmd_for(&w, r, &c, &role, &rr);
            if (role == LAUNCH_MASTER)
                printf("rank %u: master: ", r);
            else
                printf("rank %u: %s %u: ", r, launch_role_name(role), rr);
            node_print_cmd(stdout, &c);
            cmd_free(&c);
        }
        node_args_free(&a);
        return 0;
    }

    if (!p.rank.set)
        node_die("no rank: not under a launcher (RANK, SLURM_PROCID, JOB_COMPLETION_INDEX and PSBENCH_RANK are "
                 "unset); give --rank, or --dry-run for the map");
    if (p.rank.v >= world)
        node_die("%s=%u is not below the world size %u (%s)", p.rank.from, p.rank.v, world,
                 p.world.set ? p.world.from : "--ntrainer + --nserver + 1");
    node_cmd c = {0};
    launch_role role;
    uint32_t role_rank;
    node_cmd_for(&w, p.rank.v, &c, &role, &role_rank);
    if (!p.master_addr.set && role != LAUNCH_MASTER)
        node_die("%s %u of %u: no master address (--master-addr, PSBENCH_MASTER_ADDR, MASTER_ADDR, or Slurm's node "
                 "list): on Kubernetes, give index 0's DNS name with --master-rank 0",
                 p.rank.from, p.rank.v, world);
    if (role == LAUNCH_MASTER && p.master_addr.set) {
        char why[200];
        int here = node_host_is_here(p.master_addr.v, why, sizeof why);
        if (here == 0)
            node_die("rank %u is the master (%s), but %s=%s, where the other ranks look for it, is not this host: "
                     "%s", p.rank.v, w.map.master_first ? "--master-rank 0" : "the last rank, PyTorch's map",
                     p.master_addr.from, p.master_addr.v,
                     w.map.master_first ? "the launcher must start rank 0 on that host"
                                        : "where the launcher starts rank 0 on MASTER_ADDR's host (torchrun's node 0, "
                                          "srun's first node, an Indexed Job's index 0), use --master-rank 0");
        if (here < 0)
            fprintf(stderr, NODE_PROG ": %s=%s does not resolve here (%s): not checked that the master runs there\n",
                    p.master_addr.from, p.master_addr.v, why);
    }

    char ranks[120];
    node_sources(ranks, sizeof ranks, &p.rank, p.world.set ? &p.world : NULL);
    char role_text[80];
    if (role == LAUNCH_MASTER)
        snprintf(role_text, sizeof role_text, "the master (HTTP port %u, %s)", p.http_port.v, p.http_port.from);
    else
        snprintf(role_text, sizeof role_text, "%s %u", launch_role_name(role), role_rank);
    char local[80] = "";
    if (p.local_rank.set)
        snprintf(local, sizeof local, ", local rank %u (%s)", p.local_rank.v, p.local_rank.from);
    fprintf(stderr, NODE_PROG ": %s: rank %u of %u (%s)%s, %s: %s\n", name, p.rank.v, world, ranks, local, where,
            role_text);
    if (role == LAUNCH_MASTER) {
        char *j = node_launcher_json(&w, p.rank.v, "master");
        if (setenv("PSBENCH_LAUNCHER", j, 1) < 0)
            node_die("setenv: %s", strerror(errno));
        free(j);
    }
    fflush(stderr);
    execv(c.v[0], c.v);
    node_die("cannot run %s: %s (the roles' binaries must be beside psbench-node, or in $PSBENCH_BIN_DIR)", c.v[0],
             strerror(errno));
}
