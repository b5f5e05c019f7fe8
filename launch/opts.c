/* opts.c — psbench-node's options (see opts.h). Its own options are one
 * table; an argument the table does not name is the master's, kept in
 * order and handed on: psbench-node does not know the master's options,
 * the master checks them (on every rank that becomes the master). */
#include "launch/opts.h"
#include "shared/cli.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT(f) OPT_AT(node_args, f)

static const char *const ntrainer_aliases[] = {"number-trainers", NULL};
static const char *const nserver_aliases[] = {"number-ps", NULL};

/* --master-rank: where the master is in the map. */
static const char *const master_rank_choices[] = {"last", "0", NULL};

static const opt_spec node_specs[] = {
    {.kind = OPT_TEXT,
     .help =
         "usage: psbench-node [options] [psbench-master options...]\n"
         "       psbench-node --dry-run [options] [psbench-master options...]\n"
         "       psbench-node --print-hostnames LIST\n"
         "\n"
         "One command for every rank of a launcher (torchrun, Kubeflow's PyTorchJob,\n"
         "Slurm's srun, a Kubernetes Indexed Job or JobSet, Ray Train): it reads its\n"
         "place from the environment and becomes the master, a server or a trainer,\n"
         "exec'ing psbench-master, psbench-server or psbench-trainer from its own\n"
         "directory ($PSBENCH_BIN_DIR overrides). Every rank takes the same command\n"
         "line: the master's job flags (--ntrainer, --nserver, --ddp-hook, --epochs,\n"
         "--out, ...) go to the rank that becomes the master.\n"
         "\n"
         "The map, PyTorch's RPC benchmark launcher's: ranks 0 .. T-1 the trainers\n"
         "(CPU, then CUDA), the next S the servers (CPU, then CUDA), the last rank\n"
         "the master; the world size must be T + S + 1. With only one of --ntrainer\n"
         "and --nserver, the other is derived from the world size (neither: one\n"
         "server). The master listens on 0.0.0.0, on MASTER_PORT + 1 (control) and\n"
         "MASTER_PORT + 2 (HTTP): never MASTER_PORT itself, which torchrun's own\n"
         "store may hold on rank 0's host. The master's rank must run on\n"
         "MASTER_ADDR's host (checked: refused otherwise).\n"
         "\n"
         "Examples:\n"
         "  torchrun --nproc-per-node 4 --master-addr 127.0.0.1 --master-port 29400 \\\n"
         "      --no-python psbench-node --ntrainer 2 --nserver 1 --epochs 1 --out r1\n"
         "  srun -n 4 psbench-node --master-rank 0 --nserver 1 --out r1\n"
         "  psbench-node --world-size 4 --nserver 1 --dry-run       the map, nothing started\n"
         "\n"
         "The job's shape (read here, and handed to the master):\n"},
    {.name = "ntrainer", .meta = "N", .kind = OPT_U64, .aliases = ntrainer_aliases, .min = 0,
     .max = LAUNCH_MAX_WORLD, .to = AT(ntrainer), .given = {AT(ntrainer_set)},
     .help = "CPU trainers (--number-trainers: the same; default: what\n"
             "the world leaves)"},
    {.name = "nserver", .meta = "N", .kind = OPT_U64, .aliases = nserver_aliases, .min = 0,
     .max = LAUNCH_MAX_WORLD, .to = AT(nserver), .given = {AT(nserver_set)},
     .help = "CPU servers (--number-ps: the same; default: what the\n"
             "world leaves, 1 when --ntrainer is not given either)"},
    {.name = "ncudatrainer", .meta = "N", .kind = OPT_U64, .min = 0, .max = LAUNCH_MAX_WORLD,
     .to = AT(ncudatrainer), .help = "CUDA trainers (default 0): the trainers' last ranks"},
    {.name = "ncudaserver", .meta = "N", .kind = OPT_U64, .min = 0, .max = LAUNCH_MAX_WORLD,
     .to = AT(ncudaserver), .help = "CUDA servers (default 0): the servers' last ranks"},
    {.kind = OPT_TEXT, .help = "\nThe place (each: the flag, else the PSBENCH_ variable, else the launcher's):\n"},
    {.name = "rank", .meta = "R", .kind = OPT_STRING, .to = AT(place.rank),
     .help = "$PSBENCH_RANK, RANK (torchrun, PyTorchJob, Ray),\n"
             "SLURM_PROCID, JOB_COMPLETION_INDEX (Indexed Job, JobSet)"},
    {.name = "world-size", .meta = "N", .kind = OPT_STRING, .to = AT(place.world_size),
     .help = "$PSBENCH_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS (none on\n"
             "Kubernetes: then T + S + 1 from --ntrainer and --nserver)"},
    {.name = "local-rank", .meta = "L", .kind = OPT_STRING, .to = AT(place.local_rank),
     .help = "$PSBENCH_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID"},
    {.name = "master-addr", .meta = "HOST", .kind = OPT_STRING, .to = AT(place.master_addr),
     .help = "where every rank reaches the master, a name or an\n"
             "address: $PSBENCH_MASTER_ADDR, MASTER_ADDR, else the\n"
             "first host of SLURM_STEP_NODELIST or SLURM_JOB_NODELIST\n"
             "(expanded as scontrol show hostnames does). On Kubernetes\n"
             "index 0's stable DNS name, with --master-rank 0"},
    {.name = "port", .meta = "PORT", .kind = OPT_STRING, .to = AT(place.port),
     .help = "the master's control port: $PSBENCH_PORT, MASTER_PORT + 1,\n"
             "else 29500"},
    {.name = "http-port", .meta = "PORT", .kind = OPT_STRING, .to = AT(place.http_port),
     .help = "the master's HTTP API and dashboard: $PSBENCH_HTTP_PORT,\n"
             "MASTER_PORT + 2, else 8080"},
    {.kind = OPT_TEXT, .help = "\npsbench-node's own:\n"},
    {.name = "master-rank", .meta = "last|0", .kind = OPT_CHOICE, .choices = master_rank_choices,
     .to = AT(master_rank), .def = "last",
     .help = "the master's rank: last (PyTorch's map, the default), or\n"
             "0, the others shifted up by one: for launchers that put\n"
             "rank 0 on MASTER_ADDR's host (torchrun's node 0 with a\n"
             "static rendezvous, srun's first node, an Indexed Job's\n"
             "index 0 behind its DNS name)"},
    {.shared = &opts_device, .to = AT(device), .def = "cuda",
     .help = "the CUDA servers' and trainers' device (default cuda):\n"
             "cuda without an index is cuda:LOCAL_RANK where a local\n"
             "rank is known"},
    {.shared = &opts_connect_timeout, .to = AT(connect_timeout_s), .given = {AT(connect_timeout_set)},
     .help = "handed to the servers and trainers: how long they keep\n"
             "trying to reach the master (their default 30)"},
    {.shared = &opts_token_file, .to = AT(token_file),
     .help = "the job's token, handed to every role (the master too)"},
    {.shared = &opts_token, .to = AT(token),
     .help = "the same on the command line (prefer --token-file);\n"
             "$PSBENCH_TOKEN reaches every role as it is"},
    {.name = "dry-run", .kind = OPT_FLAG, .to = AT(dry_run),
     .help = "print the map for the world (each rank: its role and the\n"
             "command it would run) and exit 0; no rank needed. (The\n"
             "master's own --dry-run: psbench-master --dry-run)"},
    {.name = "print-hostnames", .meta = "LIST", .kind = OPT_STRING, .to = AT(print_hostnames),
     .help = "print a Slurm host list's hosts, one a line, as\n"
             "scontrol show hostnames does (node[01-03,7]), and exit"},
    {.shared = &opts_help, .head = "--help, --version", .help = ""},
    {.shared = &opts_version_opt},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "Refused (psbench-node decides them): --listen, --http, --local and the\n"
         "master's --master-port.\n"
         "\n"
         "Every value taken from the environment is named in the start line\n"
         "(\"psbench-node: torchrun: rank 3 of 4 (RANK, WORLD_SIZE), master\n"
         "127.0.0.1:29501 (MASTER_ADDR, MASTER_PORT+1): the master\") and, by the\n"
         "master, in results.json (\"launcher\"; psbench-node hands it over in\n"
         "$PSBENCH_LAUNCHER). Each role exits as it does alone: a lost or missing\n"
         "rank ends every rank non-zero, so that the launcher's restart policy acts.\n"
         "\n"
         "Exit status: the role's; 2 a bad flag or place (psbench-node's line says\n"
         "why); 0 after --dry-run, --print-hostnames, --help or --version.\n"},
    OPTS_END,
};

static const opts_table node_table = {
    .prog = "psbench-node",
    .specs = node_specs,
    .help_col = 28,
    .stop_at_help = true,
    .precise_errors = true,
};

const opts_table *node_opts(void)
{
    return &node_table;
}

/* Options the master takes as well: read here and handed on as typed. */
static bool node_opt_for_master(const char *name)
{
    static const char *const both[] = {"ntrainer", "nserver", "ncudatrainer", "ncudaserver", "token", "token-file",
                                       NULL};
    for (size_t i = 0; both[i]; i++)
        if (strcmp(name, both[i]) == 0)
            return true;
    return false;
}

/* The master's options psbench-node decides: refused, naming the way. */
static const char *node_opt_refused(const char *name)
{
    if (strcmp(name, "listen") == 0 || strcmp(name, "master-port") == 0)
        return "the master listens on 0.0.0.0 at --port (PSBENCH_PORT, MASTER_PORT + 1)";
    if (strcmp(name, "http") == 0)
        return "the master's HTTP listens on 0.0.0.0 at --http-port (PSBENCH_HTTP_PORT, MASTER_PORT + 2)";
    if (strcmp(name, "local") == 0)
        return "every role is a rank of the launcher's world";
    return NULL;
}

int node_args_parse(node_args *a, int argc, char **argv, char *err, size_t errlen)
{
    const opts_table *t = node_opts();
    memset(a, 0, sizeof *a);
    if (opts_init(t, a, err, errlen) < 0)
        return -1;
    a->master = calloc((size_t)argc + 1, sizeof *a->master);
    if (!a->master) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0)
            arg = "--help";
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            a->master[a->nmaster++] = argv[i]; /* a value of the master's, or its own */
            continue;
        }
        /* "--name" or "--name=value", '_' taken for '-' as the master does. */
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (n >= sizeof name) {
            a->master[a->nmaster++] = argv[i];
            continue;
        }
        memcpy(name, arg + 2, n);
        name[n] = '\0';
        for (char *c = name; *c; c++)
            if (*c == '_')
                *c = '-';
        const char *why = node_opt_refused(name);
        if (why) {
            snprintf(err, errlen, "--%s: not with psbench-node: %s", name, why);
            return -1;
        }
        opt_spec o;
        if (opts_find(t, name, &o) < 0) {
            a->master[a->nmaster++] = argv[i];
            continue;
        }
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", name);
        if (o.action == OPTS_HELP) {
            opts_usage(t, stdout);
            return OPTS_HELP;
        }
        if (o.action == OPTS_VERSION) {
            opts_version(t, stdout);
            return OPTS_VERSION;
        }
        const char *value = NULL;
        bool takes = o.meta != NULL;
        if (takes) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else {
                snprintf(err, errlen, "option %s needs a value", flag);
                return -1;
            }
        } else if (eq) {
            snprintf(err, errlen, "option '%s' takes no value", arg);
            return -1;
        }
        if (opts_apply(&o, flag, value, a, err, errlen) < 0)
            return -1;
        if (node_opt_for_master(o.name)) {
            a->master[a->nmaster++] = argv[i - (takes && !eq ? 1 : 0)];
            if (takes && !eq)
                a->master[a->nmaster++] = argv[i];
        }
    }
    return OPTS_OK;
}

void node_args_free(node_args *a)
{
    free(a->master);
    a->master = NULL;
    a->nmaster = 0;
}
