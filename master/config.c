/* config.c — the master's run configuration: flags, checks, configs/ files
 * (see config.h). */
#include "master/config.h"
#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/userpath.h"
#include "shared/net.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/cli.h"

/* ---- small helpers ----------------------------------------------------- */

/* Replace *dst with a copy of s (NULL allowed). Returns 0 or -1 (no memory). */
static int set_str(char **dst, const char *s)
{
    char *n = NULL;
    if (s) {
        n = strdup(s);
        if (!n)
            return -1;
    }
    free(*dst);
    *dst = n;
    return 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *config_default_dir(char *buf, size_t len)
{
    const char *env = getenv("PSBENCH_CONFIG_DIR");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            /* Beside a build (<bin>/../configs), then where `cmake --install`
             * and the .deb put them (<prefix>/bin/../share/psbench/configs):
             * relative to the executable, so any prefix works. */
            static const char *const rel[] = {"/../configs", "/../share/psbench/configs"};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                char cand[PATH_MAX + 32];
                snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
                if (is_dir(cand)) {
                    char real[PATH_MAX];
                    snprintf(buf, len, "%s", realpath(cand, real) ? real : cand);
                    return buf;
                }
            }
        }
    }
#ifdef PSBENCH_SOURCE_CONFIG_DIR
    if (is_dir(PSBENCH_SOURCE_CONFIG_DIR)) {
        snprintf(buf, len, "%s", PSBENCH_SOURCE_CONFIG_DIR);
        return buf;
    }
#endif
    snprintf(buf, len, "configs");
    return buf;
}

/* ---- defaults ------------------------------------------------------------ */

static void resolved_free(run_config *c)
{
    config_entry *e[] = {&c->resolved.model, &c->resolved.data, &c->resolved.trainer, &c->resolved.server};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        json_decref(e[i]->json);
        memset(e[i], 0, sizeof *e[i]);
    }
    modelconf_free(&c->resolved.mc);
    memset(&c->resolved, 0, sizeof c->resolved);
}

void config_free(run_config *c)
{
    if (!c)
        return;
    resolved_free(c);
    json_decref(c->trainer_flags);
    c->trainer_flags = NULL;
    char **s[] = {&c->trainer, &c->server, &c->data, &c->model, &c->backend, &c->data_config_path,
                  &c->model_config_path, &c->trainer_config_path, &c->server_config_path, &c->ddp_hook,
                  &c->rpc_pattern, &c->placement, &c->listen, &c->http, &c->out_dir, &c->token, &c->token_file};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        free(*s[i]);
        *s[i] = NULL;
    }
}

int config_init(run_config *c)
{
    memset(c, 0, sizeof *c);
    c->ntrainer = CONFIG_DEFAULT_NTRAINER;
    c->nserver = CONFIG_DEFAULT_NSERVER;
    c->epochs = CONFIG_DEFAULT_EPOCHS;
    c->batch_size = CONFIG_DEFAULT_BATCH_SIZE;
    c->rpc_timeout_s = CONFIG_DEFAULT_RPC_TIMEOUT_S;
    c->warmup_cycles = 5; /* the seed's benchmark_ddp_rpc.py */
    c->seed = 0;
    c->local = false;
    c->linger_s = 0;
    c->transport = psb_transport_default();
    c->runs = 1;
    c->log_level = LOG_INFO;

    char dir[PATH_MAX];
    config_default_dir(dir, sizeof dir);
    char p[4][PATH_MAX + 64];
    snprintf(p[0], sizeof p[0], "%s/data_configurations.json", dir);
    snprintf(p[1], sizeof p[1], "%s/model_configurations.json", dir);
    snprintf(p[2], sizeof p[2], "%s/trainer_configurations.json", dir);
    snprintf(p[3], sizeof p[3], "%s/server_configurations.json", dir);

    const char *tok = getenv("PSBENCH_TOKEN");
    if (set_str(&c->trainer, CONFIG_DEFAULT_TRAINER) || set_str(&c->server, CONFIG_DEFAULT_SERVER) ||
        set_str(&c->data, CONFIG_DEFAULT_DATA) || set_str(&c->model, CONFIG_DEFAULT_MODEL) ||
        set_str(&c->backend, CONFIG_DEFAULT_BACKEND) || set_str(&c->data_config_path, p[0]) ||
        set_str(&c->model_config_path, p[1]) || set_str(&c->trainer_config_path, p[2]) ||
        set_str(&c->server_config_path, p[3]) || set_str(&c->placement, "seed") ||
        set_str(&c->listen, CONFIG_DEFAULT_LISTEN) || set_str(&c->http, CONFIG_DEFAULT_HTTP) ||
        set_str(&c->token, tok && *tok ? tok : NULL)) {
        config_free(c);
        return -1;
    }
    return 0;
}

/* ---- command line ------------------------------------------------------------ */

enum {
    OPT_HELP = 'h',
    OPT_NTRAINER = 256,
    OPT_NCUDATRAINER,
    OPT_NSERVER,
    OPT_NCUDASERVER,
    OPT_TRAINER,
    OPT_SERVER,
    OPT_DATA,
    OPT_MODEL,
    OPT_EPOCHS,
    OPT_BATCH_SIZE,
    OPT_BACKEND,
    OPT_RPC_TIMEOUT,
    OPT_DATA_CONFIG_PATH,
    OPT_MODEL_CONFIG_PATH,
    OPT_TRAINER_CONFIG_PATH,
    OPT_SERVER_CONFIG_PATH,
    OPT_SEED,
    OPT_TORCH_SEED,
    OPT_CUDA_SEED,
    OPT_DDP_HOOK,
    OPT_PREPROCESS_DATA,
    OPT_CREATE_CRITERION,
    OPT_CREATE_DDP_MODEL,
    OPT_HOOK_STATE,
    OPT_ITERATION_STEP,
    OPT_CREATE_OPTIMIZER,
    OPT_LR,
    OPT_MASTER_ADDR,
    OPT_MASTER_PORT,
    OPT_FILESTORE,
    OPT_PLACEMENT,
    OPT_LISTEN,
    OPT_HTTP,
    OPT_LOCAL,
    OPT_LINGER,
    OPT_TRANSPORT,
    OPT_RUNS,
    OPT_ALLOW_DIVERGENCE,
    OPT_OUT,
    OPT_TOKEN,
    OPT_TOKEN_FILE,
    OPT_LOG_LEVEL,
    OPT_VERSION,
    OPT_NUMBER_TRAINERS,
    OPT_NUMBER_PS,
    OPT_NUMBER_EMBEDDINGS,
    OPT_EMBEDDING_DIM,
    OPT_WARMUP_CYCLES,
    OPT_RPC_PATTERN,
};

static const struct option long_opts[] = {
    {"ntrainer", required_argument, NULL, OPT_NTRAINER},
    {"ncudatrainer", required_argument, NULL, OPT_NCUDATRAINER},
    {"nserver", required_argument, NULL, OPT_NSERVER},
    {"ncudaserver", required_argument, NULL, OPT_NCUDASERVER},
    {"trainer", required_argument, NULL, OPT_TRAINER},
    {"server", required_argument, NULL, OPT_SERVER},
    {"data", required_argument, NULL, OPT_DATA},
    {"model", required_argument, NULL, OPT_MODEL},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"rpc-timeout", required_argument, NULL, OPT_RPC_TIMEOUT},
    {"data-config-path", required_argument, NULL, OPT_DATA_CONFIG_PATH},
    {"model-config-path", required_argument, NULL, OPT_MODEL_CONFIG_PATH},
    {"trainer-config-path", required_argument, NULL, OPT_TRAINER_CONFIG_PATH},
    {"server-config-path", required_argument, NULL, OPT_SERVER_CONFIG_PATH},
    {"seed", required_argument, NULL, OPT_SEED},
    {"torch-seed", required_argument, NULL, OPT_TORCH_SEED},
    {"cuda-seed", required_argument, NULL, OPT_CUDA_SEED},
    {"ddp-hook", required_argument, NULL, OPT_DDP_HOOK},
    {"preprocess-data", required_argument, NULL, OPT_PREPROCESS_DATA},
    {"create-criterion", required_argument, NULL, OPT_CREATE_CRITERION},
    {"create-ddp-model", required_argument, NULL, OPT_CREATE_DDP_MODEL},
    {"hook-state", required_argument, NULL, OPT_HOOK_STATE},
    {"iteration-step", required_argument, NULL, OPT_ITERATION_STEP},
    {"create-optimizer", required_argument, NULL, OPT_CREATE_OPTIMIZER},
    {"lr", required_argument, NULL, OPT_LR},
    {"master-addr", required_argument, NULL, OPT_MASTER_ADDR},
    {"master-port", required_argument, NULL, OPT_MASTER_PORT},
    {"filestore", required_argument, NULL, OPT_FILESTORE},
    {"placement", required_argument, NULL, OPT_PLACEMENT},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"http", required_argument, NULL, OPT_HTTP},
    {"local", no_argument, NULL, OPT_LOCAL},
    {"linger", required_argument, NULL, OPT_LINGER},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"runs", required_argument, NULL, OPT_RUNS},
    {"allow-divergence", no_argument, NULL, OPT_ALLOW_DIVERGENCE},
    {"out", required_argument, NULL, OPT_OUT},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"version", no_argument, NULL, OPT_VERSION},
    {"number-trainers", required_argument, NULL, OPT_NUMBER_TRAINERS},
    {"number-ps", required_argument, NULL, OPT_NUMBER_PS},
    {"number-embeddings", required_argument, NULL, OPT_NUMBER_EMBEDDINGS},
    {"embedding-dim", required_argument, NULL, OPT_EMBEDDING_DIM},
    {"warmup-cycles", required_argument, NULL, OPT_WARMUP_CYCLES},
    {"rpc-pattern", required_argument, NULL, OPT_RPC_PATTERN},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* The seed launcher's flags that name a key of the trainer configuration
 * (besides --ddp-hook), with the seed's experiment scripts' --create-optimizer
 * and --lr: the value replaces the key's (config_load). Their values are
 * the seed's DdpTrainer's, which psbench's table (shared/jobconf.c) holds. */
static const struct {
    int opt;
    const char *flag, *key;
    bool number; /* a JSON number (else a string) */
} trainer_key_flags[] = {
    {OPT_PREPROCESS_DATA, "--preprocess-data", "preprocess_data", false},
    {OPT_CREATE_CRITERION, "--create-criterion", "create_criterion", false},
    {OPT_CREATE_DDP_MODEL, "--create-ddp-model", "create_ddp_model", false},
    {OPT_HOOK_STATE, "--hook-state", "hook_state", false},
    {OPT_ITERATION_STEP, "--iteration-step", "iteration_step", false},
    {OPT_CREATE_OPTIMIZER, "--create-optimizer", "create_optimizer", false},
    {OPT_LR, "--lr", "lr", true},
};
#define N_TRAINER_KEY_FLAGS (sizeof trainer_key_flags / sizeof trainer_key_flags[0])
#define TRAINER_KEY_FLAGS_CLASS "DdpTrainer" /* the seed's trainer, whose values these are */

void config_usage(FILE *f)
{
    fprintf(f,
        "usage: psbench-master [options]\n"
        "       psbench-master diff [--csv FILE] A.json B.json\n"
        "\n"
        "Runs a parameter-server benchmark: waits for servers and trainers (or\n"
        "spawns them with --local), runs a warm-up pass and a timed pass, prints\n"
        "the processed metrics and serves them over HTTP. Every long option also\n"
        "accepts '_' for '-' (--batch_size = --batch-size), like the seed's launcher.\n"
        "\n"
        "The seed launcher's options:\n"
        "  --ntrainer N              CPU trainers (default %d)\n"
        "  --ncudatrainer N          CUDA trainers (default 0)\n"
        "  --nserver N               CPU parameter servers (default %d; 0 with a hook that\n"
        "                            uses none, e.g. --trainer DdpTrainer: the seed's pure-DDP\n"
        "                            baseline, trainers allreduce among themselves, and the\n"
        "                            default when such a hook is chosen)\n"
        "  --ncudaserver N           CUDA parameter servers (default 0)\n"
        "  --trainer ID              trainer configuration id (default %s)\n"
        "  --server ID               server configuration id (default %s)\n"
        "  --data ID                 data configuration id (default %s)\n"
        "  --model ID                model configuration id (default %s)\n"
        "  --epochs N                epochs per pass (default %d); batch-update: the\n"
        "                            trainer configuration's batches x N per pass\n"
        "  --batch-size N            examples per batch (default %d; batch-update: the\n"
        "                            trainer configuration's batch_size, 20)\n"
        "  --backend NAME            trainers' collectives (allreduce_hook, sparse_rpc_hook,\n"
        "                            hybrid_hook): gloo (CPU; CUDA trainers stage through pinned\n"
        "                            host memory), nccl (CUDA trainers, one GPU each: on the\n"
        "                            gradients' device memory) or multi (NCCL on GPUs, Gloo on\n"
        "                            CPUs) (default %s)\n"
        "  --rpc-timeout SECONDS     bound on every wait for a peer (default %g)\n"
        "  --data-config-path F      data configurations (default CONFIGS/data_configurations.json)\n"
        "  --model-config-path F     model configurations (default CONFIGS/model_configurations.json)\n"
        "  --trainer-config-path F   trainer configurations (default CONFIGS/trainer_configurations.json)\n"
        "  --server-config-path F    server configurations (default CONFIGS/server_configurations.json)\n"
        "                            (every value in them is checked before anything starts; the\n"
        "                            keys, types and ranges: docs/operations.md)\n"
        "  --seed N                  random seed (default 0); --torch-seed and --cuda-seed are aliases\n"
        "  --ddp-hook NAME           override the trainer configuration's communication hook:\n"
        "                            rpc_hook (buckets to the servers), allreduce_hook (among\n"
        "                            trainers), sparse_rpc_hook (sparse to servers, dense\n"
        "                            allreduced), hybrid_hook (sparse on Gloo, dense on NCCL)\n"
        "  --preprocess-data NAME    the seed's DdpTrainer parts: each replaces the trainer\n"
        "  --create-criterion NAME   configuration's key of that name (preprocess_data, ...),\n"
        "  --create-ddp-model NAME   as --ddp-hook does ddp_hook. psbench has exactly the\n"
        "  --hook-state NAME         seed's: preprocess_dummy_data, cel, basic_ddp_model,\n"
        "  --iteration-step NAME     BasicHookState, basic_iteration_step; any other value is\n"
        "                            refused, naming the one allowed\n"
        "  --create-optimizer NAME   (the seed's experiment scripts) the same for\n"
        "                            create_optimizer: sgd_optimizer\n"
        "  --lr LR                   (the seed's experiment scripts) the trainers' learning\n"
        "                            rate, replacing the trainer configuration's lr: a number\n"
        "                            in (0, 3.4e38] (a DdpTrainer's or a HybridTrainer's; a\n"
        "                            BatchUpdateTrainer's servers step with the server\n"
        "                            configuration's). Each of these seven is refused for a\n"
        "                            trainer class without that key, and echoed in the args\n"
        "                            line and results.json (configuration)\n"
        "  --master-addr HOST, --master-port PORT\n"
        "                            the seed's spelling of --listen HOST:PORT (--master-port\n"
        "                            alone keeps the default host)\n"
        "  --filestore PATH          accepted for the seed's scripts; psbench needs no file store\n"
        "\n"
        "Where psbench's defaults differ from the seed's launcher: the launcher has a default\n"
        "only for --ddp-hook (allreduce_hook, which then replaces every trainer\n"
        "configuration's hook) and needs every other flag it uses given. psbench has the\n"
        "defaults shown above for all of them: the counts (--ntrainer, --nserver), --epochs,\n"
        "--batch-size, the ids, --backend, --rpc-timeout, the configuration files, one --seed\n"
        "for --torch-seed and --cuda-seed alike, and --listen for --master-addr and\n"
        "--master-port. Without --ddp-hook the trainer configuration's ddp_hook runs (the\n"
        "default DdpRpcTrainer's: rpc_hook, not allreduce_hook); without --preprocess-data,\n"
        "--create-criterion, --create-ddp-model, --hook-state, --iteration-step,\n"
        "--create-optimizer and --lr, the trainer configuration's values.\n"
        "\n"
        "the seed's DDP + RPC benchmark (benchmark_ddp_rpc.py; any of these selects --model\n"
        "HybridModel, --trainer HybridTrainer, --server EmbeddingParameterServer and 100\n"
        "epochs unless those are given):\n"
        "  --number-trainers N       the same as --ntrainer\n"
        "  --number-ps N             parameter servers, each holding one embedding table (--nserver)\n"
        "  --number-embeddings N     rows of every table (the model configuration's, 300)\n"
        "  --embedding-dim N         columns of every table (64); number-ps x embedding-dim must\n"
        "                            be a multiple of 512\n"
        "  --warmup-cycles N         epochs of the warm-up pass (default 5)\n"
        "  --rpc-pattern seed|psbench  how trainers use the servers (the HybridTrainer\n"
        "                            configuration's rpc_pattern, default seed): seed = the\n"
        "                            seed's (lookups one server at a time, each update awaited,\n"
        "                            the table's dense gradient applied to every row); psbench =\n"
        "                            every lookup at once, updates unanswered, a step per named\n"
        "                            row (fewer waits and less server work, about the same\n"
        "                            bytes; results.json and the tables name the pattern)\n"
        "\n"
        "psbench's options:\n"
        "  --placement seed|shard    seed: trainer r uses server r / (ntrainer / nserver);\n"
        "                            shard: bucket k goes to server k mod nserver (default seed)\n"
        "  --listen HOST:PORT        control plane address (default %s; with --local\n"
        "                            127.0.0.1:29500)\n"
        "  --http HOST:PORT          HTTP API and dashboard (default %s; with --local\n"
        "                            127.0.0.1:8080)\n"
        "  --local                   spawn the servers and trainers on this host: the\n"
        "                            CUDA ones (the last --ncudaserver / --ncudatrainer\n"
        "                            ranks) with --device cuda, the others without\n"
        "                            --device (a server's $PSBENCH_SERVER_DEVICE, else cpu)\n"
        "  --linger SECONDS          keep serving HTTP after the run (default 0)\n"
        "  --transport T             with --local, between trainers and servers: auto\n"
        "                            (default; $PSBENCH_TRANSPORT sets it): shared memory\n"
        "                            on this host (Unix sockets, sealed memfd segments),\n"
        "                            TCP where not; shm: shared memory or a clear error;\n"
        "                            tcp: TCP only. Each trainer's links are shown in\n"
        "                            /api/v1/nodes and results.json (\"links\")\n"
        "  --runs N                  run the job N times back to back (default 1; 0: until\n"
        "                            stopped). The servers stay connected between runs (told\n"
        "                            to reset, not to stop); trainers join again for every run\n"
        "                            (--local starts them again). A failed run ends the master.\n"
        "                            A signal between runs, before a trainer of the next one\n"
        "                            joined, ends it cleanly (not with --local)\n"
        "  --allow-divergence        a trainer whose loss becomes NaN or infinite goes on and\n"
        "                            the run ends done with a warning (default: the trainer\n"
        "                            stops there and the run fails, naming epoch and batch)\n"
        "  --out DIR                 write results.json and a CSV per group into DIR (with\n"
        "                            --runs other than 1: into DIR/run-001/, DIR/run-002/, ...);\n"
        "                            made and checked before the run starts\n"
        "  --token-file FILE         the job's token, a shared secret every node must present:\n"
        "                            FILE's first line (keep it mode 600; the nodes take the\n"
        "                            same flag). Without a token a master listening beyond\n"
        "                            loopback warns: anyone who reaches it can join the run\n"
        "  --token T                 the token on the command line (shown by ps: prefer\n"
        "                            --token-file). Precedence: --token, --token-file,\n"
        "                            $PSBENCH_TOKEN. --local hands it to its nodes in the\n"
        "                            environment\n"
        "  --log-level L             error, warn, info, debug (default info)\n"
        "  --version, --help\n"
        "\n"
        "Exit status: 0 the run (every run) done; 1 a run failed, or its results could not\n"
        "be written; 2 a bad flag or configuration; 128+N signal N interrupted a run (130\n"
        "SIGINT, 143 SIGTERM, 129 SIGHUP; a signal after the run is done, or between runs,\n"
        "keeps the run's code).\n"
        "\n"
        "CONFIGS is $PSBENCH_CONFIG_DIR, else <bin>/../configs, else <bin>/../share/psbench/configs\n"
        "(installed), else the source tree's configs/.\n",
        CONFIG_DEFAULT_NTRAINER, CONFIG_DEFAULT_NSERVER, CONFIG_DEFAULT_TRAINER, CONFIG_DEFAULT_SERVER,
        CONFIG_DEFAULT_DATA, CONFIG_DEFAULT_MODEL, CONFIG_DEFAULT_EPOCHS, CONFIG_DEFAULT_BATCH_SIZE,
        CONFIG_DEFAULT_BACKEND, CONFIG_DEFAULT_RPC_TIMEOUT_S, CONFIG_DEFAULT_LISTEN, CONFIG_DEFAULT_HTTP);
}

static int parse_count(const char *opt, const char *s, uint32_t *out, char *err, size_t errlen)
{
    uint64_t v;
    if (cli_parse_u64(opt, s, 0, CONFIG_MAX_NODES, 0, &v, err, errlen) < 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* A non-empty string value: ids, paths, addresses. */
static int parse_str(const char *opt, const char *s, char **dst, char *err, size_t errlen)
{
    if (!s || !*s) {
        errbuf_set(err, errlen, "%s: needs a non-empty value", opt);
        return -1;
    }
    if (set_str(dst, s) < 0) {
        errbuf_set(err, errlen, "%s: out of memory", opt);
        return -1;
    }
    return 0;
}

/* Seconds >= 0 (cli_parse_seconds accepts only positive numbers). */
static int parse_nonneg_seconds(const char *opt, const char *s, double *out, char *err, size_t errlen)
{
    if (s && *s && strspn(s, "0.") == strlen(s) && strchr(s, '0') && strchr(s, '.') == strrchr(s, '.')) {
        *out = 0;
        return 0;
    }
    return cli_parse_seconds(opt, s, out, err, errlen);
}

/* One of trainer_key_flags: its value as the configuration file would
 * hold it (--lr: a finite number, else refused as text), checked against
 * the DdpTrainer's key with the file's message: what it must be. */
static int parse_trainer_key_flag(run_config *c, int opt, const char *s, char *err, size_t errlen)
{
    size_t i = 0;
    while (i < N_TRAINER_KEY_FLAGS && trainer_key_flags[i].opt != opt)
        i++;
    assert(i < N_TRAINER_KEY_FLAGS);
    const char *flag = trainer_key_flags[i].flag, *key = trainer_key_flags[i].key;
    s = s ? s : "";
    json_t *v = NULL;
    if (trainer_key_flags[i].number) {
        char *end = NULL;
        double x = strtod(s, &end); /* as JSON would: an underflow is its tiny number */
        if (!*s || !end || *end != '\0' || !isfinite(x)) {
            char want[160];
            jobconf_key_expect("trainer", TRAINER_KEY_FLAGS_CLASS, key, want, sizeof want);
            errbuf_set(err, errlen, "%s: must be %s, got '%s'", flag, want, s);
            return -1;
        }
        v = json_real(x);
    } else {
        v = json_string(s);
    }
    if (!v || (!c->trainer_flags && !(c->trainer_flags = json_object()))) {
        json_decref(v);
        errbuf_set(err, errlen, "%s: out of memory", flag);
        return -1;
    }
    char why[256];
    if (jobconf_check_value("trainer", TRAINER_KEY_FLAGS_CLASS, key, v, why, sizeof why) < 0) {
        json_decref(v);
        errbuf_set(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    if (json_object_set_new(c->trainer_flags, key, v) < 0) {
        errbuf_set(err, errlen, "%s: out of memory", flag);
        return -1;
    }
    return 0;
}

/* Replace the host or the port of c->listen. */
static int listen_set_part(run_config *c, const char *host, const char *port, char *err, size_t errlen)
{
    const char *cur = c->listen ? c->listen : CONFIG_DEFAULT_LISTEN;
    const char *colon = strrchr(cur, ':');
    char curhost[512] = "0.0.0.0", curport[32] = "29500";
    if (colon) {
        snprintf(curhost, sizeof curhost, "%.*s", (int)(colon - cur), cur);
        snprintf(curport, sizeof curport, "%s", colon + 1);
    }
    char buf[600];
    int bracket = host && strchr(host, ':') && host[0] != '[';
    snprintf(buf, sizeof buf, "%s%s%s:%s", bracket ? "[" : "", host ? host : curhost, bracket ? "]" : "",
             port ? port : curport);
    if (set_str(&c->listen, buf) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int config_parse_args(run_config *c, int argc, char **argv, char *err, size_t errlen)
{
    if (config_init(c) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    cli_normalize_args(argc, argv);
    optind = 0; /* glibc: full re-initialization, so parsing can run again */
    opterr = 0;
    int help = 0, version = 0;
    bool token_flag = false;
    for (;;) {
        int idx = -1;
        int o = getopt_long(argc, argv, ":h", long_opts, &idx);
        if (o == -1)
            break;
        const char *a = optarg;
        uint64_t v;
        int rc = 0;
        switch (o) {
        case OPT_HELP: help = 1; break;
        case OPT_VERSION: version = 1; break;
        case OPT_NTRAINER: rc = parse_count("--ntrainer", a, &c->ntrainer, err, errlen); break;
        case OPT_NCUDATRAINER: rc = parse_count("--ncudatrainer", a, &c->ncudatrainer, err, errlen); break;
        case OPT_NSERVER:
            rc = parse_count("--nserver", a, &c->nserver, err, errlen);
            c->nserver_set = true;
            break;
        case OPT_NCUDASERVER: rc = parse_count("--ncudaserver", a, &c->ncudaserver, err, errlen); break;
        case OPT_NUMBER_TRAINERS: rc = parse_count("--number-trainers", a, &c->ntrainer, err, errlen); break;
        case OPT_NUMBER_PS:
            rc = parse_count("--number-ps", a, &c->nserver, err, errlen);
            c->nserver_set = c->ddp_rpc_flags = true;
            break;
        case OPT_NUMBER_EMBEDDINGS:
            rc = cli_parse_u64("--number-embeddings", a, 1, (uint64_t)1 << 31, 0, &c->number_embeddings, err, errlen);
            c->ddp_rpc_flags = true;
            break;
        case OPT_EMBEDDING_DIM:
            rc = cli_parse_u64("--embedding-dim", a, 1, 1u << 20, 0, &c->embedding_dim, err, errlen);
            c->ddp_rpc_flags = true;
            break;
        case OPT_WARMUP_CYCLES:
            rc = cli_parse_u64("--warmup-cycles", a, 1, CONFIG_MAX_EPOCHS, 0, &c->warmup_cycles, err, errlen);
            c->ddp_rpc_flags = true;
            break;
        case OPT_RPC_PATTERN:
            if (!a || (strcmp(a, "seed") != 0 && strcmp(a, "psbench") != 0)) {
                errbuf_set(err, errlen, "--rpc-pattern: '%s' is not seed or psbench", a ? a : "");
                rc = -1;
            } else {
                rc = parse_str("--rpc-pattern", a, &c->rpc_pattern, err, errlen);
            }
            c->ddp_rpc_flags = true;
            break;
        case OPT_TRAINER:
            rc = parse_str("--trainer", a, &c->trainer, err, errlen);
            c->trainer_set = true;
            break;
        case OPT_SERVER:
            rc = parse_str("--server", a, &c->server, err, errlen);
            c->server_set = true;
            break;
        case OPT_DATA: rc = parse_str("--data", a, &c->data, err, errlen); break;
        case OPT_MODEL:
            rc = parse_str("--model", a, &c->model, err, errlen);
            c->model_set = true;
            break;
        case OPT_EPOCHS:
            rc = cli_parse_u64("--epochs", a, 1, CONFIG_MAX_EPOCHS, 0, &c->epochs, err, errlen);
            c->epochs_set = true;
            break;
        case OPT_BATCH_SIZE:
            rc = cli_parse_u64("--batch-size", a, 1, CONFIG_MAX_BATCH_SIZE, 0, &c->batch_size, err, errlen);
            c->batch_size_set = true;
            break;
        case OPT_BACKEND: rc = parse_str("--backend", a, &c->backend, err, errlen); break;
        case OPT_RPC_TIMEOUT: rc = cli_parse_seconds("--rpc-timeout", a, &c->rpc_timeout_s, err, errlen); break;
        case OPT_DATA_CONFIG_PATH:
            rc = parse_str("--data-config-path", a, &c->data_config_path, err, errlen);
            break;
        case OPT_MODEL_CONFIG_PATH:
            rc = parse_str("--model-config-path", a, &c->model_config_path, err, errlen);
            break;
        case OPT_TRAINER_CONFIG_PATH:
            rc = parse_str("--trainer-config-path", a, &c->trainer_config_path, err, errlen);
            break;
        case OPT_SERVER_CONFIG_PATH:
            rc = parse_str("--server-config-path", a, &c->server_config_path, err, errlen);
            break;
        case OPT_SEED: rc = cli_parse_u64("--seed", a, 0, UINT64_MAX, 0, &c->seed, err, errlen); break;
        case OPT_TORCH_SEED: rc = cli_parse_u64("--torch-seed", a, 0, UINT64_MAX, 0, &c->seed, err, errlen); break;
        case OPT_CUDA_SEED: rc = cli_parse_u64("--cuda-seed", a, 0, UINT64_MAX, 0, &c->seed, err, errlen); break;
        case OPT_DDP_HOOK: {
            bool servers, collective;
            if (!a || !hookconf_lookup(a, &servers, &collective)) {
                errbuf_set(err, errlen, "--ddp-hook: '%s' is not rpc_hook, allreduce_hook, sparse_rpc_hook or "
                           "hybrid_hook", a ? a : "");
                rc = -1;
            } else {
                rc = parse_str("--ddp-hook", a, &c->ddp_hook, err, errlen);
            }
            break;
        }
        case OPT_PREPROCESS_DATA:
        case OPT_CREATE_CRITERION:
        case OPT_CREATE_DDP_MODEL:
        case OPT_HOOK_STATE:
        case OPT_ITERATION_STEP:
        case OPT_CREATE_OPTIMIZER:
        case OPT_LR: rc = parse_trainer_key_flag(c, o, a, err, errlen); break;
        case OPT_MASTER_ADDR:
            if (!a || !*a) {
                errbuf_set(err, errlen, "--master-addr: needs a non-empty value");
                rc = -1;
            } else {
                rc = listen_set_part(c, a, NULL, err, errlen);
                c->listen_set = true; /* the seed's spelling of --listen's host */
            }
            break;
        case OPT_MASTER_PORT:
            rc = cli_parse_u64("--master-port", a, 0, 65535, 0, &v, err, errlen);
            if (rc == 0)
                rc = listen_set_part(c, NULL, a, err, errlen);
            break;
        case OPT_FILESTORE: break; /* the seed's c10d FileStore: nothing to do */
        case OPT_PLACEMENT:
            if (!a || (strcmp(a, "seed") != 0 && strcmp(a, "shard") != 0)) {
                errbuf_set(err, errlen, "--placement: '%s' is not seed or shard", a ? a : "");
                rc = -1;
            } else {
                rc = parse_str("--placement", a, &c->placement, err, errlen);
            }
            break;
        case OPT_LISTEN:
            rc = parse_str("--listen", a, &c->listen, err, errlen);
            c->listen_set = true;
            break;
        case OPT_HTTP:
            rc = parse_str("--http", a, &c->http, err, errlen);
            c->http_set = true;
            break;
        case OPT_LOCAL: c->local = true; break;
        case OPT_ALLOW_DIVERGENCE: c->allow_divergence = true; break;
        case OPT_LINGER: rc = parse_nonneg_seconds("--linger", a, &c->linger_s, err, errlen); break;
        case OPT_TRANSPORT:
            if (psb_transport_parse(a, &c->transport) < 0) {
                errbuf_set(err, errlen, "--transport: '%.64s' is not a transport (auto, tcp or shm)", a);
                rc = -1;
            }
            break;
        case OPT_RUNS:
            rc = cli_parse_u64("--runs", a, 0, CONFIG_MAX_RUNS, 0, &v, err, errlen);
            if (rc == 0)
                c->runs = (uint32_t)v;
            break;
        case OPT_OUT: rc = parse_str("--out", a, &c->out_dir, err, errlen); break;
        case OPT_TOKEN:
            rc = parse_str("--token", a, &c->token, err, errlen);
            token_flag = true;
            break;
        case OPT_TOKEN_FILE: rc = parse_str("--token-file", a, &c->token_file, err, errlen); break;
        case OPT_LOG_LEVEL:
            if (log_level_parse(a, &c->log_level) < 0) {
                errbuf_set(err, errlen, "--log-level: '%s' is not error, warn, info or debug", a ? a : "");
                rc = -1;
            }
            break;
        case ':':
            errbuf_set(err, errlen, "option %s needs a value", argv[optind - 1]);
            return -1;
        case '?':
        default:
            if (optopt >= 256)
                errbuf_set(err, errlen, "option '%s' takes no value", argv[optind - 1]);
            else if (optopt)
                errbuf_set(err, errlen, "unknown option '-%c' (see --help)", optopt);
            else
                errbuf_set(err, errlen, "unknown option '%s' (see --help)", argv[optind - 1]);
            return -1;
        }
        if (rc < 0)
            return -1;
    }
    if (help)
        return 1;
    if (version)
        return 2;
    if (optind < argc) {
        errbuf_set(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    /* A --local job stays on this host: loopback unless an address was
     * given (--master-port alone sets only the port). */
    if (c->local && !c->listen_set && listen_set_part(c, "127.0.0.1", NULL, err, errlen) < 0)
        return -1;
    if (c->local && !c->http_set && set_str(&c->http, CONFIG_LOCAL_HTTP) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    /* The token: --token, else --token-file, else $PSBENCH_TOKEN (config_init). */
    if (!token_flag && c->token_file) {
        char tok[CLI_TOKEN_MAX + 1];
        int loose = 0;
        if (cli_read_token_file(c->token_file, tok, sizeof tok, &loose, err, errlen) < 0)
            return -1;
        if (set_str(&c->token, tok) < 0) {
            errbuf_set(err, errlen, "out of memory");
            return -1;
        }
        c->token_file_loose = loose != 0;
    } else if (cli_check_token(token_flag ? "--token" : "PSBENCH_TOKEN", c->token, err, errlen) < 0) {
        return -1;
    }
    /* The seed's DDP + RPC flags select that benchmark's configurations
     * (and its 100 epochs) wherever the command line names no other. */
    if (c->ddp_rpc_flags) {
        if ((!c->model_set && set_str(&c->model, "HybridModel")) ||
            (!c->trainer_set && set_str(&c->trainer, "HybridTrainer")) ||
            (!c->server_set && set_str(&c->server, "EmbeddingParameterServer"))) {
            errbuf_set(err, errlen, "out of memory");
            return -1;
        }
        if (!c->epochs_set)
            c->epochs = 100;
    }
    return 0;
}

/* ---- validation ----------------------------------------------------------------- */

int config_check_flags(const run_config *c, char *err, size_t errlen)
{
    uint64_t tcount = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t scount = (uint64_t)c->nserver + c->ncudaserver;

    if (!c->placement || (strcmp(c->placement, "seed") != 0 && strcmp(c->placement, "shard") != 0)) {
        errbuf_set(err, errlen, "--placement must be seed or shard");
        return -1;
    }
    if (tcount == 0) {
        errbuf_set(err, errlen, "no trainers: --ntrainer + --ncudatrainer must be at least 1");
        return -1;
    }
    if (tcount > CONFIG_MAX_NODES || scount > CONFIG_MAX_NODES) {
        errbuf_set(err, errlen, "too many nodes: at most %u trainers and %u servers", CONFIG_MAX_NODES,
                CONFIG_MAX_NODES);
        return -1;
    }
    if (c->epochs == 0 || c->epochs > CONFIG_MAX_EPOCHS) {
        errbuf_set(err, errlen, "--epochs must be in 1..%u", CONFIG_MAX_EPOCHS);
        return -1;
    }
    if (c->batch_size == 0 || c->batch_size > CONFIG_MAX_BATCH_SIZE) {
        errbuf_set(err, errlen, "--batch-size must be in 1..%u", CONFIG_MAX_BATCH_SIZE);
        return -1;
    }
    if (!(c->rpc_timeout_s > 0)) {
        errbuf_set(err, errlen, "--rpc-timeout must be a positive number of seconds");
        return -1;
    }
    if (!(c->linger_s >= 0)) {
        errbuf_set(err, errlen, "--linger must be 0 or a positive number of seconds");
        return -1;
    }
    if (!c->backend || (strcmp(c->backend, "gloo") != 0 && strcmp(c->backend, "nccl") != 0 &&
                        strcmp(c->backend, "multi") != 0)) {
        errbuf_set(err, errlen, "--backend '%s' is not gloo, nccl or multi", c->backend ? c->backend : "");
        return -1;
    }
    struct { const char *opt, *v; } req[] = {
        {"--trainer", c->trainer},
        {"--server", c->server},
        {"--data", c->data},
        {"--model", c->model},
        {"--data-config-path", c->data_config_path},
        {"--model-config-path", c->model_config_path},
        {"--trainer-config-path", c->trainer_config_path},
        {"--server-config-path", c->server_config_path},
        {"--listen", c->listen},
        {"--http", c->http},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (!req[i].v || !*req[i].v) {
            errbuf_set(err, errlen, "%s needs a non-empty value", req[i].opt);
            return -1;
        }
    }
    struct { const char *opt, *v; } addr[] = {{"--listen", c->listen}, {"--http", c->http}};
    for (size_t i = 0; i < 2; i++) {
        char host[256], perr[400];
        uint16_t port;
        /* net_parse_hostport's reason: "'h:99999': port 99999 is outside
         * 0..65535" says what is wrong, not only that something is. */
        if (net_parse_hostport(addr[i].v, host, sizeof host, &port, 1, perr, sizeof perr) < 0) {
            errbuf_set(err, errlen, "%s %s", addr[i].opt, perr);
            return -1;
        }
    }
    if (c->out_dir && !*c->out_dir) {
        errbuf_set(err, errlen, "--out needs a directory");
        return -1;
    }
    return 0;
}

/* The batch-update benchmark's counts: a server owns the model, the
 * servers can split it, and the rounds of batch_update_size pushes fill. */
static int validate_batch_update(const run_config *c, char *err, size_t errlen)
{
    const config_batch_update *b = &c->resolved.bu;
    const char *sid = c->resolved.server.id;
    uint64_t total = b->out_features * b->in_features + b->out_features;
    uint64_t trainers = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t servers = (uint64_t)c->nserver + c->ncudaserver;
    if (servers == 0) {
        errbuf_set(err, errlen,
                   "server '%s' (BatchUpdateParameterServer) owns the model: --nserver 0 (pure DDP) cannot run "
                   "it; use --nserver 1 or more", sid);
        return -1;
    }
    if (servers > total) {
        errbuf_set(err, errlen, "%llu servers cannot split Linear(%llu, %llu)'s %llu parameters",
                   (unsigned long long)servers, (unsigned long long)b->in_features,
                   (unsigned long long)b->out_features, (unsigned long long)total);
        return -1;
    }
    uint64_t k = b->batch_update_size; /* config_load: 0 in the file is the trainer count */
    if (k > trainers) {
        errbuf_set(err, errlen,
                   "server '%s': batch_update_size %llu is more than the %llu trainers; a trainer waits for "
                   "each update, so a round of more pushes than trainers never fills", sid,
                   (unsigned long long)k, (unsigned long long)trainers);
        return -1;
    }
    uint64_t pushes = trainers * c->epochs * b->batches;
    if (k == 0 || pushes % k != 0) {
        errbuf_set(err, errlen,
                   "server '%s': batch_update_size %llu does not divide the %llu pushes per pass (%llu trainers "
                   "x %llu batches x %llu epochs): the last round would never fill", sid,
                   (unsigned long long)k, (unsigned long long)pushes, (unsigned long long)trainers,
                   (unsigned long long)b->batches, (unsigned long long)c->epochs);
        return -1;
    }
    return 0;
}

int config_validate(const run_config *c, char *err, size_t errlen)
{
    uint64_t tcount = (uint64_t)c->ntrainer + c->ncudatrainer;
    uint64_t scount = (uint64_t)c->nserver + c->ncudaserver;

    if (config_check_flags(c, err, errlen) < 0)
        return -1;
    bool shard = strcmp(c->placement, "shard") == 0;
    if (c->resolved.loaded && c->resolved.batch_update && validate_batch_update(c, err, errlen) < 0)
        return -1;
    bool serverless = c->resolved.loaded && !c->resolved.hook_servers;
    if (c->resolved.loaded && c->resolved.hybrid) {
        if (scount == 0) {
            errbuf_set(err, errlen, "the HybridModel's embedding tables live on parameter servers: --number-ps "
                       "(--nserver) must be at least 1");
            return -1;
        }
        if (hybrid_shape_check(scount, c->resolved.mc.hybrid.embedding_dim, err, errlen) < 0)
            return -1;
    }
    if (scount == 0 && !serverless) {
        if (c->resolved.loaded && c->resolved.hook)
            errbuf_set(err, errlen,
                       "no servers: %s sends buckets to parameter servers, so --nserver + --ncudaserver must be "
                       "at least 1 (the seed's pure-DDP run, --nserver 0, takes a hook without servers: "
                       "--trainer DdpTrainer for allreduce_hook)", c->resolved.hook);
        else
            errbuf_set(err, errlen, "no servers: --nserver + --ncudaserver must be at least 1");
        return -1;
    }
    /* Batch-update and HybridModel trainers use every server. */
    if (!shard && scount > 0 && !serverless &&
        !(c->resolved.loaded && (c->resolved.batch_update || c->resolved.hybrid))) {
        /* The seed launcher's checks: CPU trainers feed CPU servers, CUDA
         * trainers CUDA servers, each group split evenly. */
        if (c->ntrainer > 0 && c->ncudatrainer > 0 && (c->nserver == 0 || c->ncudaserver == 0)) {
            errbuf_set(err, errlen,
                    "CPU and CUDA trainers together need both CPU and CUDA servers "
                    "(--ntrainer %u --ncudatrainer %u, --nserver %u --ncudaserver %u)",
                    c->ntrainer, c->ncudatrainer, c->nserver, c->ncudaserver);
            return -1;
        }
        if (c->nserver > 0 && c->ntrainer == 0) {
            errbuf_set(err, errlen, "--nserver %u needs CPU trainers: --ntrainer is 0", c->nserver);
            return -1;
        }
        if (c->ntrainer > 0 && c->nserver == 0) {
            errbuf_set(err, errlen, "--ntrainer %u needs CPU servers: --nserver is 0", c->ntrainer);
            return -1;
        }
        if (c->nserver > 0 && c->ntrainer % c->nserver != 0) {
            errbuf_set(err, errlen,
                    "--ntrainer %u is not divisible by --nserver %u (placement seed gives every server "
                    "ntrainer / nserver trainers; use --placement shard for other counts)",
                    c->ntrainer, c->nserver);
            return -1;
        }
        if (c->ncudaserver > 0 && c->ncudatrainer == 0) {
            errbuf_set(err, errlen, "--ncudaserver %u needs CUDA trainers: --ncudatrainer is 0", c->ncudaserver);
            return -1;
        }
        if (c->ncudatrainer > 0 && c->ncudaserver == 0) {
            errbuf_set(err, errlen, "--ncudatrainer %u needs CUDA servers: --ncudaserver is 0", c->ncudatrainer);
            return -1;
        }
        if (c->ncudaserver > 0 && c->ncudatrainer % c->ncudaserver != 0) {
            errbuf_set(err, errlen,
                    "--ncudatrainer %u is not divisible by --ncudaserver %u (placement seed gives every "
                    "server ncudatrainer / ncudaserver trainers; use --placement shard for other counts)",
                    c->ncudatrainer, c->ncudaserver);
            return -1;
        }
    }
    if (c->resolved.loaded && c->resolved.hook_collective && strcmp(c->backend, "nccl") == 0 &&
        c->ncudatrainer < tcount) {
        errbuf_set(err, errlen,
                   "--backend nccl needs CUDA trainers, and %llu of the trainers are CPUs (--ntrainer %u): CPU "
                   "trainers allreduce with gloo (--backend gloo, or multi: NCCL on GPUs, Gloo on CPUs)",
                   (unsigned long long)(tcount - c->ncudatrainer), c->ntrainer);
        return -1;
    }
    uint64_t samples = c->resolved.loaded ? c->resolved.samples : 0;
    if (samples > 0 && !c->resolved.batch_update && !c->resolved.hybrid && config_batches_per_pass(c) == 0) {
        uint64_t nb = (samples + c->batch_size - 1) / c->batch_size;
        errbuf_set(err, errlen,
                "data '%s' has %llu samples: %llu batch%s of %llu cannot feed %llu trainers "
                "(lower --batch-size or use more samples)",
                c->data, (unsigned long long)samples, (unsigned long long)nb, nb == 1 ? "" : "es",
                (unsigned long long)c->batch_size, (unsigned long long)tcount);
        return -1;
    }
    return 0;
}

/* ---- configuration files ------------------------------------------------------- */

/* Join the keys of obj as "a, b, c" into buf. */
static void keys_list(json_t *obj, char *buf, size_t len)
{
    size_t n = 0;
    const char *k;
    json_t *v;
    buf[0] = '\0';
    json_object_foreach(obj, k, v) {
        int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", k);
        if (w < 0 || (size_t)w >= len - n) {
            if (len > 4)
                snprintf(buf + len - 4, 4, "...");
            return;
        }
        n += (size_t)w;
    }
    if (n == 0)
        snprintf(buf, len, "none");
}

/* Load one configuration file and resolve id into *e. what: "model", ...;
 * class_keys: the accepted "<x>_class" names, NULL-terminated. */
static int load_entry(const char *what, const char *path, const char *id, const char *const *class_keys,
                      config_entry *e, char *err, size_t errlen)
{
    /* A regular file only: a FIFO would block the master without a word,
     * a directory read as "'[' or '{' expected" (userpath.h). */
    char why[256];
    int fd = userpath_open_read(path, why, sizeof why);
    if (fd < 0) {
        errbuf_set(err, errlen, "cannot read %s configurations %s: %s", what, path, why);
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    if (!root) {
        errbuf_set(err, errlen, "%s configurations %s:%d:%d: %s", what, path, je.line, je.column, je.text);
        return -1;
    }
    if (!json_is_object(root)) {
        errbuf_set(err, errlen, "%s configurations %s: expected an object of {\"ID\": {...}}", what, path);
        json_decref(root);
        return -1;
    }
    json_t *ent = json_object_get(root, id);
    if (!ent) {
        char have[512];
        keys_list(root, have, sizeof have);
        errbuf_set(err, errlen, "%s '%s' not in %s (have: %s)", what, id, path, have);
        json_decref(root);
        return -1;
    }
    if (!json_is_object(ent)) {
        errbuf_set(err, errlen, "%s '%s' in %s: expected an object", what, id, path);
        json_decref(root);
        return -1;
    }
    json_t *cls = NULL;
    for (size_t i = 0; class_keys[i] && !cls; i++)
        cls = json_object_get(ent, class_keys[i]);
    if (!json_is_string(cls) || json_string_length(cls) == 0) {
        errbuf_set(err, errlen, "%s '%s' in %s: no \"%s\" string", what, id, path, class_keys[0]);
        json_decref(root);
        return -1;
    }
    json_t *conf = json_object_get(ent, "configurations");
    if (conf && !json_is_object(conf)) {
        errbuf_set(err, errlen, "%s '%s' in %s: \"configurations\" must be an object", what, id, path);
        json_decref(root);
        return -1;
    }
    e->json = json_pack("{s:s, s:O, s:o}", "id", id, "class", cls, "configurations",
                        conf ? json_deep_copy(conf) : json_object());
    json_decref(root);
    if (!e->json) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    e->id = json_string_value(json_object_get(e->json, "id"));
    e->cls = json_string_value(json_object_get(e->json, "class"));
    e->conf = json_object_get(e->json, "configurations");
    return 0;
}

/* Check an entry's values (jobconf_check: types, ranges, required keys,
 * defaults written), the file named in front of the reason. */
static int load_check(const char *kind, const char *path, config_entry *e, char *err, size_t errlen)
{
    char why[400];
    if (jobconf_check(kind, e->cls, e->id, e->conf, why, sizeof why) == 0)
        return 0;
    errbuf_set(err, errlen, "%s: %s", path, why);
    return -1;
}

/* The seed's DDP + RPC benchmark: HybridModel, HybridTrainer and
 * EmbeddingParameterServer go together; the seed's flags override the
 * table's shape. Run by config_load once every entry is checked. */
static int load_hybrid(run_config *c, char *err, size_t errlen)
{
    const config_entry *mo = &c->resolved.model, *tr = &c->resolved.trainer, *sv = &c->resolved.server;
    bool hy = c->resolved.mc.cls == MODEL_HYBRID;
    bool emb = strcmp(c->resolved.server_kind, "embedding") == 0;
    bool hy_trainer = strcmp(tr->cls, "HybridTrainer") == 0;
    if (!hy && (emb || hy_trainer)) {
        errbuf_set(err, errlen,
                   "%s '%s' (class %s) belongs to the DDP + RPC benchmark, whose model is a HybridModel; model '%s' "
                   "is %s (e.g. --model HybridModel)", emb ? "server" : "trainer", emb ? sv->id : tr->id,
                   emb ? sv->cls : tr->cls, mo->id, mo->cls);
        return -1;
    }
    if (!hy && c->rpc_pattern) {
        errbuf_set(err, errlen, "--rpc-pattern belongs to the DDP + RPC benchmark, whose model is a HybridModel; "
                   "model '%s' is %s", mo->id, mo->cls);
        return -1;
    }
    if (!hy)
        return 0;
    if (!emb) {
        errbuf_set(err, errlen,
                   "model '%s' (HybridModel) keeps its embedding tables on servers of class "
                   "EmbeddingParameterServer; server '%s' is %s (e.g. --server EmbeddingParameterServer)", mo->id,
                   sv->id, sv->cls);
        return -1;
    }
    if (!hy_trainer) {
        errbuf_set(err, errlen,
                   "model '%s' (HybridModel) needs a trainer of class HybridTrainer; trainer '%s' is %s "
                   "(e.g. --trainer HybridTrainer)", mo->id, tr->id, tr->cls);
        return -1;
    }
    c->resolved.hybrid = true;
    /* The seed's flags win over the configuration; trainers get the result. */
    if (c->number_embeddings) {
        c->resolved.mc.hybrid.num_embeddings = c->number_embeddings;
        if (json_object_set_new(mo->conf, "num_embeddings", json_integer((json_int_t)c->number_embeddings)) < 0)
            goto oom;
    }
    if (c->embedding_dim) {
        c->resolved.mc.hybrid.embedding_dim = c->embedding_dim;
        if (json_object_set_new(mo->conf, "embedding_dim", json_integer((json_int_t)c->embedding_dim)) < 0)
            goto oom;
    }
    uint64_t rows = c->resolved.mc.hybrid.num_embeddings, dim = c->resolved.mc.hybrid.embedding_dim;
    if (rows * dim > ((uint64_t)1 << 31)) {
        errbuf_set(err, errlen, "a %llu x %llu embedding table is too large (at most 2^31 floats per server; "
                   "--number-embeddings and --embedding-dim replace the model's)",
                   (unsigned long long)rows, (unsigned long long)dim);
        return -1;
    }
    c->resolved.hy.batches = jobconf_u64(tr->conf, "batches");
    c->resolved.hy.server_lr = jobconf_f64(sv->conf, "lr");
    /* --rpc-pattern wins over the configuration (checked by the parser);
     * trainers get the result in their assignment's trainer entry. */
    if (c->rpc_pattern && json_object_set_new(tr->conf, "rpc_pattern", json_string(c->rpc_pattern)) < 0)
        goto oom;
    c->resolved.hy.rpc_pattern = jobconf_str(tr->conf, "rpc_pattern");
    return 0; /* the shape over the servers: config_validate */
oom:
    errbuf_set(err, errlen, "out of memory");
    return -1;
}

/* The batch-update benchmark: BatchUpdateParameterServer, the Linear model
 * and BatchUpdateTrainer go together. Run by config_load once every entry
 * is checked; the counts that must fill every round: config_validate. */
static int load_batch_update(run_config *c, char *err, size_t errlen)
{
    const config_entry *mo = &c->resolved.model, *tr = &c->resolved.trainer, *sv = &c->resolved.server;
    bool bu = c->resolved.batch_update;
    bool linear = strcmp(mo->cls, "Linear") == 0;
    bool bu_trainer = strcmp(tr->cls, "BatchUpdateTrainer") == 0;
    if (!bu && (linear || bu_trainer)) {
        errbuf_set(err, errlen,
                   "%s '%s' (class %s) trains only through a BatchUpdateParameterServer; server '%s' is %s "
                   "(e.g. --server BatchUpdateParameterServer)",
                   linear ? "model" : "trainer", linear ? mo->id : tr->id, linear ? "Linear" : "BatchUpdateTrainer",
                   sv->id, sv->cls);
        return -1;
    }
    if (!bu)
        return 0;
    if (!linear) {
        errbuf_set(err, errlen,
                   "server '%s' (BatchUpdateParameterServer) needs a model of class Linear; model '%s' is %s "
                   "(e.g. --model BatchUpdateLinear)", sv->id, mo->id, mo->cls);
        return -1;
    }
    if (!bu_trainer) {
        errbuf_set(err, errlen,
                   "server '%s' (BatchUpdateParameterServer) needs a trainer of class BatchUpdateTrainer; "
                   "trainer '%s' is %s (e.g. --trainer BatchUpdateTrainer)", sv->id, tr->id, tr->cls);
        return -1;
    }
    config_batch_update *b = &c->resolved.bu;
    b->in_features = c->resolved.mc.linear.in_features;
    b->out_features = c->resolved.mc.linear.out_features;
    b->lr = jobconf_f64(sv->conf, "lr");
    b->momentum = jobconf_f64(sv->conf, "momentum");
    b->batches = jobconf_u64(tr->conf, "batches");
    if (!c->batch_size_set)
        c->batch_size = jobconf_u64(tr->conf, "batch_size"); /* an explicit --batch-size wins */
    /* 0 in the file: a round is one push from every trainer. */
    b->batch_update_size = jobconf_u64(sv->conf, "batch_update_size");
    if (b->batch_update_size == 0)
        b->batch_update_size = (uint64_t)c->ntrainer + c->ncudatrainer;
    return 0;
}

/* --ddp-hook (a name the parser checked) replaces the trainer
 * configuration's ddp_hook where the class can run it: before the trainer
 * entry is checked (a DdpTrainer needs a hook from one or the other), with
 * the refusal for other classes after every entry is (the file's values
 * come first). */
static bool load_hook_flag_fits(const run_config *c)
{
    const char *cls = c->resolved.trainer.cls;
    return strcmp(cls, "DdpTrainer") == 0 ||
           (strcmp(cls, "HybridTrainer") == 0 && strcmp(c->ddp_hook, "allreduce_hook") == 0);
}

static int load_hook_flag(run_config *c, bool after_checks, char *err, size_t errlen)
{
    const config_entry *tr = &c->resolved.trainer;
    if (!c->ddp_hook)
        return 0;
    if (!after_checks) {
        if (load_hook_flag_fits(c) && json_object_set_new(tr->conf, "ddp_hook", json_string(c->ddp_hook)) < 0) {
            errbuf_set(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    if (load_hook_flag_fits(c))
        return 0;
    if (strcmp(tr->cls, "HybridTrainer") == 0)
        errbuf_set(err, errlen, "--ddp-hook %s: trainer '%s' (HybridTrainer) averages the HybridModel's dense part "
                   "with allreduce_hook only", c->ddp_hook, tr->id);
    else
        errbuf_set(err, errlen, "--ddp-hook %s: trainer '%s' (%s) has no communication hook", c->ddp_hook, tr->id,
                   tr->cls);
    return -1;
}

/* trainer_key_flags (--hook-state, --lr, ...): as --ddp-hook, each value
 * replaces the trainer configuration's key before the entry is checked,
 * where the class takes that key; a class that does not (BatchUpdateTrainer
 * has no lr of its own, HybridTrainer none of the seed's DdpTrainer
 * functions) is refused once every entry is checked, naming what it takes. */
static int load_trainer_key_flags(run_config *c, bool after_checks, char *err, size_t errlen)
{
    const config_entry *tr = &c->resolved.trainer;
    for (size_t i = 0; c->trainer_flags && i < N_TRAINER_KEY_FLAGS; i++) {
        const char *key = trainer_key_flags[i].key;
        json_t *v = json_object_get(c->trainer_flags, key);
        if (!v)
            continue;
        bool takes = jobconf_class_takes("trainer", tr->cls, key);
        if (!after_checks) {
            if (takes && json_object_set(tr->conf, key, v) < 0) {
                errbuf_set(err, errlen, "out of memory");
                return -1;
            }
            continue;
        }
        if (takes)
            continue;
        char *val = json_is_string(v) ? strdup(json_string_value(v))
                                      : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
        char list[256] = "";
        const char *k;
        for (size_t j = 0; (k = jobconf_key_name("trainer", tr->cls, j)) != NULL; j++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", k);
        }
        errbuf_set(err, errlen, "%s %s: trainer '%s' (%s) has no \"%s\" (it takes %s)", trainer_key_flags[i].flag,
                   val ? val : "", tr->id, tr->cls, key, list[0] ? list : "no keys");
        free(val);
        return -1;
    }
    return 0;
}

/* The trainers' hook: DummyModel trains through the configuration's; the
 * Synthetic model pushes to the servers (what rpc_hook does) and takes no
 * other. */
static int load_hook(run_config *c, char *err, size_t errlen)
{
    const config_entry *tr = &c->resolved.trainer;
    c->resolved.hook_servers = true;
    if (c->resolved.hybrid) {
        c->resolved.hook = "allreduce_hook"; /* its dense part; the tables need the servers */
        c->resolved.hook_collective = true;
        return 0;
    }
    if (c->resolved.mc.cls != MODEL_DUMMY && c->resolved.mc.cls != MODEL_SYNTHETIC)
        return 0;
    const char *hook = jobconf_str(tr->conf, "ddp_hook"); /* DdpTrainer: required */
    bool servers = false, collective = false;
    bool known = hookconf_lookup(hook, &servers, &collective);
    assert(known); /* jobconf_check allows only these */
    (void)known;
    if (c->resolved.mc.cls == MODEL_SYNTHETIC) {
        if (!servers || collective) {
            errbuf_set(err, errlen,
                       "model '%s' (Synthetic) pushes its buckets to the servers, as rpc_hook does; trainer '%s' has "
                       "ddp_hook %s (e.g. --trainer DdpRpcTrainer, or a DummyModel for %s)", c->resolved.model.id,
                       tr->id, hook, hook);
            return -1;
        }
        return 0;
    }
    c->resolved.hook = hook;
    c->resolved.hook_servers = servers;
    c->resolved.hook_collective = collective;
    /* The seed's pure DDP: a hook that uses no server needs none. */
    if (!servers && !c->nserver_set && c->ncudaserver == 0)
        c->nserver = 0;
    else if (!servers && (uint64_t)c->nserver + c->ncudaserver > 0)
        log_warn("%s does not use parameter servers: the %u server(s) will sit idle (--nserver 0 runs "
                 "without them)", hook, c->nserver + c->ncudaserver);
    return 0;
}

/* DummyData feeds a DummyModel: its indices pick embedding rows and its
 * targets are classes of the last layer. */
static int load_data_fits_model(const run_config *c, char *err, size_t errlen)
{
    if (c->resolved.mc.cls != MODEL_DUMMY)
        return 0;
    uint64_t max_val = jobconf_u64(c->resolved.data.conf, "max_val");
    const struct { const char *key; uint64_t v; const char *what; } lim[] = {
        {"num_embeddings", c->resolved.mc.dummy.num_embeddings, "its indices pick embedding rows"},
        {"dense_output_size", c->resolved.mc.dummy.dense_output_size, "its targets are the model's classes"},
    };
    for (size_t i = 0; i < 2; i++) {
        if (max_val > lim[i].v) {
            errbuf_set(err, errlen, "data '%s' has max_val %llu, more than model '%s''s %s %llu: %s",
                       c->resolved.data.id, (unsigned long long)max_val, c->resolved.model.id, lim[i].key,
                       (unsigned long long)lim[i].v, lim[i].what);
            return -1;
        }
    }
    return 0;
}

int config_load(run_config *c, char *err, size_t errlen)
{
    resolved_free(c);
    static const char *const data_keys[] = {"data_class", NULL};
    static const char *const model_keys[] = {"model_class", NULL};
    static const char *const trainer_keys[] = {"trainer_class", NULL};
    /* "ps_class": the seed's older server configurations. */
    static const char *const server_keys[] = {"server_class", "ps_class", NULL};
    config_entry *da = &c->resolved.data, *mo = &c->resolved.model, *tr = &c->resolved.trainer,
                 *sv = &c->resolved.server;

    /* The files, and every value in them, before anything that depends on
     * the flags: a bad value is the cause of whatever it would break. */
    if (load_entry("data", c->data_config_path, c->data, data_keys, da, err, errlen) < 0 ||
        load_entry("model", c->model_config_path, c->model, model_keys, mo, err, errlen) < 0 ||
        load_entry("trainer", c->trainer_config_path, c->trainer, trainer_keys, tr, err, errlen) < 0 ||
        load_entry("server", c->server_config_path, c->server, server_keys, sv, err, errlen) < 0)
        goto fail;
    if (load_check("data", c->data_config_path, da, err, errlen) < 0)
        goto fail;
    {
        char why[400]; /* the model, parsed as the trainers will parse it */
        if (modelconf_parse(mo->id, mo->cls, mo->conf, &c->resolved.mc, why, sizeof why) < 0) {
            errbuf_set(err, errlen, "%s: %s", c->model_config_path, why);
            goto fail;
        }
    }
    if (load_hook_flag(c, false, err, errlen) < 0 || load_trainer_key_flags(c, false, err, errlen) < 0 ||
        load_check("trainer", c->trainer_config_path, tr, err, errlen) < 0 ||
        load_check("server", c->server_config_path, sv, err, errlen) < 0 || load_hook_flag(c, true, err, errlen) < 0 ||
        load_trainer_key_flags(c, true, err, errlen) < 0)
        goto fail;

    /* Server class -> psbench server kind (jobconf_check knows no other). */
    if (strcmp(sv->cls, "AverageParameterServer") == 0) {
        c->resolved.server_kind = "average";
    } else if (strcmp(sv->cls, "AverageBatchParameterServer") == 0) {
        c->resolved.server_kind = "average-batch";
    } else if (strcmp(sv->cls, "BatchUpdateParameterServer") == 0) {
        c->resolved.server_kind = "batch-update";
        c->resolved.batch_update = true;
    } else {
        assert(strcmp(sv->cls, "EmbeddingParameterServer") == 0);
        c->resolved.server_kind = "embedding";
    }
    if (load_batch_update(c, err, errlen) < 0 || load_hybrid(c, err, errlen) < 0 || load_hook(c, err, errlen) < 0 ||
        load_data_fits_model(c, err, errlen) < 0)
        goto fail;
    if (json_object_set_new(sv->json, "kind", json_string(c->resolved.server_kind)) < 0) {
        errbuf_set(err, errlen, "out of memory");
        goto fail;
    }
    c->resolved.samples = jobconf_u64(da->conf, "sample_count"); /* "input_samples": renamed by the check */

    /* The Synthetic model's parameters. */
    if (c->resolved.mc.cls == MODEL_SYNTHETIC) {
        c->resolved.synthetic = true;
        c->resolved.syn.buckets = c->resolved.mc.syn.buckets;
        c->resolved.syn.bucket_floats = c->resolved.mc.syn.bucket_floats;
        c->resolved.syn.sparse = c->resolved.mc.syn.sparse;
        c->resolved.syn.sparse_cols = c->resolved.mc.syn.sparse_cols;
    }
    c->resolved.loaded = true;
    return 0;
fail:
    resolved_free(c);
    return -1;
}

int config_resolve(run_config *c, char *err, size_t errlen)
{
    if (config_check_flags(c, err, errlen) < 0 || config_load(c, err, errlen) < 0 ||
        config_validate(c, err, errlen) < 0)
        return -1;
    return 0;
}

uint64_t config_batches_per_pass(const run_config *c)
{
    uint64_t t = (uint64_t)c->ntrainer + c->ncudatrainer;
    if (c->resolved.loaded && c->resolved.batch_update)
        return c->epochs * c->resolved.bu.batches;
    if (c->resolved.loaded && c->resolved.hybrid)
        return c->epochs * c->resolved.hy.batches;
    if (!c->resolved.loaded || c->resolved.samples == 0 || c->batch_size == 0 || t == 0)
        return 0;
    uint64_t nb = (c->resolved.samples + c->batch_size - 1) / c->batch_size; /* DataLoader, last partial */
    return c->epochs * (nb / t);
}

uint64_t config_batches_warmup(const run_config *c)
{
    if (c->resolved.loaded && c->resolved.hybrid)
        return c->warmup_cycles * c->resolved.hy.batches;
    return config_batches_per_pass(c);
}

json_t *config_embedding_json(const run_config *c)
{
    if (!c->resolved.loaded || !c->resolved.hybrid)
        return NULL;
    return json_pack("{s:I, s:I, s:f, s:I}", "num_embeddings", (json_int_t)c->resolved.mc.hybrid.num_embeddings,
                     "embedding_dim", (json_int_t)c->resolved.mc.hybrid.embedding_dim, "lr", c->resolved.hy.server_lr,
                     "seed", (json_int_t)c->seed);
}

json_t *config_model_json(const run_config *c)
{
    return c->resolved.loaded ? c->resolved.model.json : NULL;
}

json_t *config_batch_update_json(const run_config *c)
{
    if (!c->resolved.loaded || !c->resolved.batch_update)
        return NULL;
    const config_batch_update *b = &c->resolved.bu;
    return json_pack("{s:I, s:I, s:f, s:f, s:I, s:I}", "in_features", (json_int_t)b->in_features, "out_features",
                     (json_int_t)b->out_features, "lr", b->lr, "momentum", b->momentum, "batch_update_size",
                     (json_int_t)b->batch_update_size, "seed", (json_int_t)c->seed);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *config_to_json(const run_config *c)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
#define SET(k, v) bad |= json_object_set_new(o, k, v)
    SET("ntrainer", json_integer(c->ntrainer));
    SET("ncudatrainer", json_integer(c->ncudatrainer));
    SET("nserver", json_integer(c->nserver));
    SET("ncudaserver", json_integer(c->ncudaserver));
    SET("trainer", str_or_null(c->trainer));
    SET("server", str_or_null(c->server));
    SET("data", str_or_null(c->data));
    SET("model", str_or_null(c->model));
    SET("epochs", json_integer((json_int_t)c->epochs));
    SET("batch_size", json_integer((json_int_t)c->batch_size));
    SET("backend", str_or_null(c->backend));
    SET("rpc_timeout", json_real(c->rpc_timeout_s));
    SET("data_config_path", str_or_null(c->data_config_path));
    SET("model_config_path", str_or_null(c->model_config_path));
    SET("trainer_config_path", str_or_null(c->trainer_config_path));
    SET("server_config_path", str_or_null(c->server_config_path));
    /* Seeds above INT64_MAX do not fit a JSON integer in jansson: a string. */
    if (c->seed <= (uint64_t)INT64_MAX) {
        SET("seed", json_integer((json_int_t)c->seed));
    } else {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->seed);
        SET("seed", json_string(buf));
    }
    SET("ddp_hook", str_or_null(c->ddp_hook));
    for (size_t i = 0; i < N_TRAINER_KEY_FLAGS; i++) {
        json_t *v = c->trainer_flags ? json_object_get(c->trainer_flags, trainer_key_flags[i].key) : NULL;
        SET(trainer_key_flags[i].key, v ? json_incref(v) : json_null());
    }
    SET("warmup_cycles", json_integer((json_int_t)c->warmup_cycles));
    SET("rpc_pattern", str_or_null(c->rpc_pattern));
    SET("placement", str_or_null(c->placement));
    SET("listen", str_or_null(c->listen));
    SET("http", str_or_null(c->http));
    SET("local", json_boolean(c->local));
    SET("linger", json_real(c->linger_s));
    SET("transport", json_string(psb_transport_name(c->transport)));
    SET("runs", json_integer((json_int_t)c->runs));
    SET("allow_divergence", json_boolean(c->allow_divergence));
    SET("out", str_or_null(c->out_dir));
    SET("auth", json_boolean(c->token != NULL));
    if (c->resolved.loaded) {
        json_t *r = json_pack("{s:O, s:O, s:O, s:O, s:s, s:I}", "model", c->resolved.model.json, "data",
                              c->resolved.data.json, "trainer", c->resolved.trainer.json, "server",
                              c->resolved.server.json, "server_kind", c->resolved.server_kind,
                              "batches_per_pass", (json_int_t)config_batches_per_pass(c));
        if (r && c->resolved.batch_update) {
            json_t *bu = config_batch_update_json(c);
            if (bu)
                json_object_set_new(bu, "batches", json_integer((json_int_t)c->resolved.bu.batches));
            bad |= !bu || json_object_set_new(r, "batch_update", bu) < 0;
        }
        SET("resolved", r ? r : json_null());
        bad |= !r;
    }
#undef SET
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}
