/* opts.c — psbench-master's option table (shared/opts.h): the seed
 * launcher's flags (both spellings: --batch-size / --batch_size, and its
 * aliases) and psbench's own, each once with its argument, default, help
 * text, field of run_config and key in the configuration's echo
 * (config_to_json); and config_init, config_parse_args and config_usage
 * (config.h) made from it. */
#include "master/opts.h"
#include "shared/cli.h"
#include "shared/jobconf.h"
#include "shared/log.h"
#include "shared/paramsfile.h"
#include "shared/text.h"
#include "shared/trace.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AT(F) OPT_AT(run_config, F)
#define STR_(x) #x
#define STR(x) STR_(x)

/* The trainer class whose values the trainer-key flags take: the seed's. */
#define TRAINER_KEY_FLAGS_CLASS "DdpTrainer"

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

/* --data-config-path and the other three: CONFIGS/<what>_configurations.json
 * (config_default_dir), <what> the option's first word. */
static int master_opt_config_path(const opt_spec *o, void *settings)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    config_default_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%.*s_configurations.json", dir, (int)strcspn(o->name, "-"), o->name);
    return set_str((char **)((char *)settings + o->to.off1 - 1), path);
}

static int master_opt_ddp_hook(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                               size_t errlen)
{
    bool servers, collective;
    if (!hookconf_lookup(arg, &servers, &collective)) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s is not rpc_hook, allreduce_hook, sparse_rpc_hook or hybrid_hook", flag,
                   text_show(arg, '\'', &shown));
        return -1;
    }
    return opts_store_string(o, flag, arg, settings, err, errlen);
}

/* A trainer-key flag's value (JSON: a string, or a number for --lr),
 * checked against the seed's DdpTrainer's key with the configuration
 * file's message, into c->trainer_flags[key] (v taken over). */
static int master_trainer_key_set(const char *key, const char *flag, json_t *v, run_config *c, char *err,
                                  size_t errlen)
{
    if (!v || (!c->trainer_flags && !(c->trainer_flags = json_object()))) {
        json_decref(v);
        errbuf_set(err, errlen, "%s: out of memory", flag);
        return -1;
    }
    char why[TEXT_SHOW_LEN + 256];
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

/* master_trainer_key_set for the key the option echoes (its .json). */
static int master_opt_trainer_value(const opt_spec *o, const char *flag, json_t *v, run_config *c, char *err,
                                    size_t errlen)
{
    return master_trainer_key_set(o->json, flag, v, c, err, errlen);
}

static int master_opt_trainer_string(const opt_spec *o, const char *flag, const char *arg, void *settings,
                                     char *err, size_t errlen)
{
    return master_opt_trainer_value(o, flag, json_string(arg), settings, err, errlen);
}

/* --lr, --bucket-cap-mb: a decimal number (cli_is_decimal: no hex, no
 * blanks, no "inf"), which a double holds (1e-400 would be 0), else
 * refused saying what it must be; then checked as the configuration's
 * value is, in the type it is used in (shared/jobconf.c: an lr that is 0
 * as a float, a bucket cap below a byte). */
static int master_opt_trainer_number(const opt_spec *o, const char *flag, const char *arg, void *settings,
                                     char *err, size_t errlen)
{
    double x;
    char why[256];
    if (cli_parse_real(flag, arg, &x, why, sizeof why) < 0) {
        char want[160];
        text_shown shown;
        jobconf_key_expect("trainer", TRAINER_KEY_FLAGS_CLASS, o->json, want, sizeof want);
        errbuf_set(err, errlen, "%s: must be %s, got %s", flag, want, text_show(arg, '\'', &shown));
        return -1;
    }
    return master_opt_trainer_value(o, flag, json_real(x), settings, err, errlen);
}

/* --powersgd-start-iter, --powersgd-random-seed: a whole number, checked
 * as the configuration's value. */
static int master_opt_trainer_whole(const opt_spec *o, const char *flag, const char *arg, void *settings,
                                    char *err, size_t errlen)
{
    uint64_t v;
    if (cli_parse_u64(flag, arg, 0, UINT64_MAX, 0, &v, err, errlen) < 0)
        return -1;
    return master_opt_trainer_value(o, flag, json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v), settings,
                                    err, errlen);
}

/* --powersgd-no-error-feedback, --powersgd-no-warm-start: the key false. */
static int master_opt_trainer_off(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                  size_t errlen)
{
    (void)arg;
    return master_opt_trainer_value(o, flag, json_false(), settings, err, errlen);
}

/* --powersgd-batched: PyTorch's batched_powerSGD_hook. */
static int master_opt_psgd_batched(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                   size_t errlen)
{
    (void)arg;
    return master_opt_trainer_value(o, flag, json_string("batched_powerSGD_hook"), settings, err, errlen);
}

/* --compress none|fp16|bf16|powersgd[:RANK]: the trainer configuration's
 * compress and, with powersgd, its matrix_approximation_rank (RANK, else
 * PyTorch's 1). */
static int master_opt_compress(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                               size_t errlen)
{
    const char *colon = strchr(arg, ':');
    bool psgd = colon ? (size_t)(colon - arg) == 8 && strncmp(arg, "powersgd", 8) == 0
                      : strcmp(arg, "powersgd") == 0;
    if (colon && !psgd) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s: only powersgd takes a :RANK (powersgd:4)", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    if (!psgd)
        return master_opt_trainer_string(o, flag, arg, settings, err, errlen);
    uint64_t rank = 1;
    if (colon && cli_parse_u64(flag, colon + 1, 1, PSGD_MAX_RANK, 0, &rank, err, errlen) < 0)
        return -1;
    if (master_opt_trainer_value(o, flag, json_string("powersgd"), settings, err, errlen) < 0)
        return -1;
    return master_trainer_key_set("matrix_approximation_rank", flag, json_integer((json_int_t)rank), settings, err,
                                  errlen);
}

/* Its echo: as given (powersgd:RANK where the rank is not 1), or null. */
static json_t *master_opt_compress_json(const opt_spec *o, const void *settings)
{
    const run_config *c = settings;
    json_t *v = c->trainer_flags ? json_object_get(c->trainer_flags, o->json) : NULL;
    json_t *r = c->trainer_flags ? json_object_get(c->trainer_flags, "matrix_approximation_rank") : NULL;
    if (json_is_string(v) && strcmp(json_string_value(v), "powersgd") == 0 && json_is_integer(r) &&
        json_integer_value(r) != 1)
        return json_sprintf("powersgd:%" JSON_INTEGER_FORMAT, json_integer_value(r));
    return v ? json_incref(v) : json_null();
}

/* Its echo: the value given, or null. */
static json_t *master_opt_trainer_json(const opt_spec *o, const void *settings)
{
    const run_config *c = settings;
    json_t *v = c->trainer_flags ? json_object_get(c->trainer_flags, o->json) : NULL;
    return v ? json_incref(v) : json_null();
}

/* --set KIND.KEY=VALUE: VALUE as JSON (0.5, true, "x", [1,2]), else as a
 * string (basic_ddp_model), into c->set_flags[KIND][KEY]. Only its shape
 * is checked here: whether KEY is one of the class's, and VALUE one of
 * KEY's, waits for the class (config_load), as a file's value does. */
static int master_opt_set(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                          size_t errlen)
{
    (void)o;
    static const char *const kinds[] = {"trainer", "model", "data", "server", NULL};
    run_config *c = settings;
    const char *dot = strchr(arg, '.'), *eq = strchr(arg, '=');
    size_t klen = dot ? (size_t)(dot - arg) : 0;
    bool kind_ok = false;
    for (size_t i = 0; kinds[i] && dot; i++)
        kind_ok |= strlen(kinds[i]) == klen && strncmp(arg, kinds[i], klen) == 0;
    text_shown shown;
    if (!dot || !eq || eq < dot || !kind_ok || eq == dot + 1) {
        errbuf_set(err, errlen, "%s: %s is not KIND.KEY=VALUE with KIND trainer, model, data or server "
                   "(e.g. trainer.bucket_cap_mb=4)", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    /* JSON would skip blanks around a number (" 5" is 5): a value is
     * spelt as it is meant, like every other number psbench reads. */
    size_t vlen = strlen(eq + 1);
    if (vlen && (isspace((unsigned char)eq[1]) || isspace((unsigned char)eq[vlen]))) {
        errbuf_set(err, errlen, "%s: %s: the VALUE has blanks around it", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    char kind[16], key[128];
    snprintf(kind, sizeof kind, "%.*s", (int)klen, arg);
    if ((size_t)(eq - dot - 1) >= sizeof key) {
        errbuf_set(err, errlen, "%s: the key in %s is too long", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(eq + 1);
    json_t *k = NULL;
    if (v && !c->set_flags)
        c->set_flags = json_object();
    if (v && c->set_flags && !(k = json_object_get(c->set_flags, kind)) &&
        json_object_set_new(c->set_flags, kind, json_object()) == 0)
        k = json_object_get(c->set_flags, kind);
    if (!v || !k || json_object_set_new(k, key, v) < 0) {
        if (!k)
            json_decref(v);
        errbuf_set(err, errlen, "%s: out of memory", flag);
        return -1;
    }
    return 0;
}

/* Its echo: {KIND: {KEY: value}}, or null. */
static json_t *master_opt_set_json(const opt_spec *o, const void *settings)
{
    (void)o;
    const run_config *c = settings;
    return c->set_flags ? json_deep_copy(c->set_flags) : json_null();
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

/* --master-addr HOST: the seed's spelling of --listen's host. */
static int master_opt_master_addr(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                  size_t errlen)
{
    (void)o;
    if (!*arg) {
        errbuf_set(err, errlen, "%s: needs a non-empty value", flag);
        return -1;
    }
    return listen_set_part(settings, arg, NULL, err, errlen);
}

/* --master-port PORT: its port, as given (the host stays). */
static int master_opt_master_port(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                  size_t errlen)
{
    (void)o;
    uint64_t v;
    if (cli_parse_u64(flag, arg, 0, 65535, 0, &v, err, errlen) < 0)
        return -1;
    return listen_set_part(settings, NULL, arg, err, errlen);
}

/* --trace-steps A:B: checked now (trace_window_parse), kept as given; the
 * window itself is made from it where the master's trace is (main.c). */
static int master_opt_trace_steps(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                  size_t errlen)
{
    trace_window w;
    char why[256];
    if (trace_window_parse(arg, &w, why, sizeof why) < 0) {
        /* The reason without trace.c's own quote of the value (raw):
         * the value is shown escaped here. */
        const char *reason = strstr(why, "': ");
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s: %s", flag, text_show(arg, '\'', &shown), reason ? reason + 3 : why);
        return -1;
    }
    return opts_store_string(o, flag, arg, settings, err, errlen);
}

/* --linger: seconds >= 0 (cli_parse_seconds takes only positive ones). */
static int master_opt_linger(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                             size_t errlen)
{
    double *out = (double *)((char *)settings + o->to.off1 - 1);
    if (*arg && strspn(arg, "0.") == strlen(arg) && strchr(arg, '0') && strchr(arg, '.') == strrchr(arg, '.')) {
        *out = 0;
        return 0;
    }
    return cli_parse_seconds(flag, arg, out, err, errlen);
}

static json_t *master_opt_transport_json(const opt_spec *o, const void *settings)
{
    (void)o;
    return json_string(psb_transport_name(((const run_config *)settings)->transport));
}

/* The token is never echoed: only whether there is one. */
static json_t *master_opt_auth_json(const opt_spec *o, const void *settings)
{
    (void)o;
    return json_boolean(((const run_config *)settings)->token != NULL);
}

static const char *const ntrainer_aliases[] = {"number-trainers", NULL};
static const char *const seed_aliases[] = {"torch-seed", "cuda-seed", NULL};
static const char *const rpc_patterns[] = {"seed", "psbench", NULL};
static const char *const placements[] = {"seed", "shard", NULL};
static const char *const tables_choices[] = {"all", "none", NULL};

/* A flag that replaces the trainer configuration's KEY (config_load). */
#define TRAINER_KEY(KEY, EXAMPLE)                                                                                \
    .kind = OPT_CUSTOM, .parse = master_opt_trainer_string, .json = KEY, .to_json = master_opt_trainer_json,   \
    .example = EXAMPLE

static const opt_spec master_specs[] = {
    {.kind = OPT_TEXT,
     .help =
         "usage: psbench-master [options]\n"
         "       psbench-master diff [--csv FILE] A.json B.json\n"
         "       psbench-master sweep [sweep options] [options]   (psbench-master sweep --help)\n"
         "       psbench-master trace summarize [--json] FILE     (where a trace.json's time went)\n"
         "\n"
         "Runs a parameter-server benchmark: waits for servers and trainers (or\n"
         "spawns them with --local), runs a warm-up pass and a timed pass, prints\n"
         "the processed metrics and serves them over HTTP. Every long option also\n"
         "accepts '_' for '-' (--batch_size = --batch-size), like PyTorch's launcher.\n"
         "\n"
         "Examples:\n"
         "  psbench-master --local                    the default job (rpc_hook) on this host\n"
         "  psbench-master --local --ddp-hook allreduce_hook\n"
         "                                            the same job allreduced, no server\n"
         "  psbench-master --local --bucket-cap-mb 4 --set trainer.momentum=0.9 --out r1\n"
         "                                            a trainer configuration changed, results\n"
         "                                            in r1/results.json\n"
         "  psbench-master --local --ntrainer 4 --nserver 2 --dry-run\n"
         "                                            the plan (placement, buckets, ports) only\n"
         "  psbench-master diff r1/results.json r2/results.json\n"
         "\n"
         "The configuration IDs --data, --model, --trainer and --server accept are listed\n"
         "at the end, read from the configuration files.\n"
         "\n"
         "PyTorch launcher's options:\n"},
    {.name = "ntrainer", .meta = "N", .kind = OPT_U64, .aliases = ntrainer_aliases, .min = 0,
     .max = CONFIG_MAX_NODES, .to = AT(ntrainer), .def = STR(CONFIG_DEFAULT_NTRAINER), .json = "ntrainer",
     .help = "CPU trainers (default " STR(CONFIG_DEFAULT_NTRAINER) ")"},
    {.name = "ncudatrainer", .meta = "N", .kind = OPT_U64, .min = 0, .max = CONFIG_MAX_NODES,
     .to = AT(ncudatrainer), .json = "ncudatrainer",
     .help = "CUDA trainers (default 0)"},
    {.name = "nserver", .meta = "N", .kind = OPT_U64, .min = 0, .max = CONFIG_MAX_NODES, .to = AT(nserver),
     .def = STR(CONFIG_DEFAULT_NSERVER), .given = {AT(nserver_set)}, .json = "nserver",
     .help = "CPU parameter servers (default " STR(CONFIG_DEFAULT_NSERVER) "; 0 with a hook that\n"
             "uses none, e.g. --trainer DdpTrainer: PyTorch's pure-DDP\n"
             "baseline, trainers allreduce among themselves, and the\n"
             "default when such a hook is chosen)"},
    {.name = "ncudaserver", .meta = "N", .kind = OPT_U64, .min = 0, .max = CONFIG_MAX_NODES, .to = AT(ncudaserver),
     .json = "ncudaserver",
     .help = "CUDA parameter servers (default 0)"},
    {.name = "trainer", .meta = "ID", .kind = OPT_STRING, .to = AT(trainer), .def = CONFIG_DEFAULT_TRAINER,
     .given = {AT(trainer_set)}, .json = "trainer",
     .help = "trainer configuration id (default " CONFIG_DEFAULT_TRAINER ")"},
    {.name = "server", .meta = "ID", .kind = OPT_STRING, .to = AT(server), .def = CONFIG_DEFAULT_SERVER,
     .given = {AT(server_set)}, .json = "server",
     .help = "server configuration id (default " CONFIG_DEFAULT_SERVER ")"},
    {.name = "data", .meta = "ID", .kind = OPT_STRING, .to = AT(data), .def = CONFIG_DEFAULT_DATA, .json = "data",
     .help = "data configuration id (default " CONFIG_DEFAULT_DATA ")"},
    {.name = "model", .meta = "ID", .kind = OPT_STRING, .to = AT(model), .def = CONFIG_DEFAULT_MODEL,
     .given = {AT(model_set)}, .json = "model",
     .help = "model configuration id (default " CONFIG_DEFAULT_MODEL ")"},
    {.name = "epochs", .meta = "N", .kind = OPT_U64, .min = 1, .max = CONFIG_MAX_EPOCHS, .to = AT(epochs),
     .def = STR(CONFIG_DEFAULT_EPOCHS), .given = {AT(epochs_set)}, .json = "epochs",
     .help = "epochs per pass (default " STR(CONFIG_DEFAULT_EPOCHS) "); batch-update: the\n"
             "trainer configuration's batches x N per pass"},
    {.name = "steps", .meta = "N", .kind = OPT_U64, .min = 1, .max = CONFIG_MAX_STEPS, .to = AT(steps),
     .given = {AT(steps_set)}, .json = "steps",
     .help = "(psbench's) timed steps (batches) per trainer and run instead of\n"
             "--epochs, the data cycled as epochs as needed (nccl-tests'\n"
             "-n); a step is one batch. The HybridModel runs whole epochs:\n"
             "N rounded up to them"},
    {.name = "warmup-steps", .meta = "N", .kind = OPT_U64, .min = 1, .max = CONFIG_MAX_STEPS,
     .to = AT(warmup_steps), .given = {AT(warmup_steps_set)}, .json = "warmup_steps",
     .help = "(psbench's) the warm-up pass's steps per trainer (nccl-tests'\n"
             "-w; default: as many as the timed pass; HybridModel:\n"
             "--warmup-cycles epochs)"},
    {.name = "batch-size", .meta = "N", .kind = OPT_U64, .min = 1, .max = CONFIG_MAX_BATCH_SIZE,
     .to = AT(batch_size), .def = STR(CONFIG_DEFAULT_BATCH_SIZE), .given = {AT(batch_size_set)},
     .json = "batch_size",
     .help = "examples per batch (default " STR(CONFIG_DEFAULT_BATCH_SIZE) "; batch-update: the\n"
             "trainer configuration's batch_size, 20)"},
    {.name = "backend", .meta = "NAME", .kind = OPT_STRING, .to = AT(backend), .def = CONFIG_DEFAULT_BACKEND,
     .json = "backend",
     .help = "trainers' collectives (allreduce_hook, sparse_rpc_hook,\n"
             "hybrid_hook): gloo (CPU; CUDA trainers stage through pinned\n"
             "host memory), nccl (CUDA trainers, one GPU each: on the\n"
             "gradients' device memory) or multi (NCCL on GPUs, Gloo on\n"
             "CPUs) (default " CONFIG_DEFAULT_BACKEND ")"},
    {.name = "rpc-timeout", .meta = "SECONDS", .kind = OPT_SECONDS, .to = AT(rpc_timeout_s),
     .def = STR(CONFIG_DEFAULT_RPC_TIMEOUT_S), .json = "rpc_timeout",
     .help = "bound on every wait for a peer (default " STR(CONFIG_DEFAULT_RPC_TIMEOUT_S) ")"},
    {.name = "data-config-path", .meta = "F", .kind = OPT_STRING, .to = AT(data_config_path),
     .init = master_opt_config_path, .json = "data_config_path",
     .help = "data configurations (default CONFIGS/data_configurations.json)"},
    {.name = "model-config-path", .meta = "F", .kind = OPT_STRING, .to = AT(model_config_path),
     .init = master_opt_config_path, .json = "model_config_path",
     .help = "model configurations (default CONFIGS/model_configurations.json)"},
    {.name = "trainer-config-path", .meta = "F", .kind = OPT_STRING, .to = AT(trainer_config_path),
     .init = master_opt_config_path, .json = "trainer_config_path",
     .help = "trainer configurations (default CONFIGS/trainer_configurations.json)"},
    {.name = "server-config-path", .meta = "F", .kind = OPT_STRING, .to = AT(server_config_path),
     .init = master_opt_config_path, .json = "server_config_path",
     .help = "server configurations (default CONFIGS/server_configurations.json)\n"
             "(every value in them is checked before anything starts; the\n"
             "keys, types and ranges: docs/operations.md)"},
    {.name = "seed", .meta = "N", .kind = OPT_U64, .aliases = seed_aliases, .min = 0, .max = UINT64_MAX,
     .to = AT(seed), .json = "seed",
     .help = "random seed (default 0); --torch-seed and --cuda-seed are aliases"},
    {.name = "ddp-hook", .meta = "NAME", .kind = OPT_CUSTOM, .parse = master_opt_ddp_hook, .to = AT(ddp_hook),
     .json = "ddp_hook", .example = "allreduce_hook",
     .help = "override the trainer configuration's communication hook:\n"
             "rpc_hook (buckets to the servers), allreduce_hook (among\n"
             "trainers), sparse_rpc_hook (sparse to servers, dense\n"
             "allreduced), hybrid_hook (sparse on Gloo, dense on NCCL)"},
    {.name = "preprocess-data", .meta = "NAME", TRAINER_KEY("preprocess_data", "preprocess_dummy_data"),
     .help = "PyTorch's DdpTrainer parts: each replaces the trainer"},
    {.name = "create-criterion", .meta = "NAME", TRAINER_KEY("create_criterion", "cel"),
     .help = "configuration's key of that name (preprocess_data, ...),"},
    {.name = "create-ddp-model", .meta = "NAME", TRAINER_KEY("create_ddp_model", "basic_ddp_model"),
     .help = "as --ddp-hook does ddp_hook. psbench has exactly"},
    {.name = "hook-state", .meta = "NAME", TRAINER_KEY("hook_state", "BasicHookState"),
     .help = "PyTorch's: preprocess_dummy_data, cel, basic_ddp_model,"},
    {.name = "iteration-step", .meta = "NAME", TRAINER_KEY("iteration_step", "basic_iteration_step"),
     .help = "BasicHookState, basic_iteration_step; any other value is\n"
             "refused, naming the one allowed"},
    {.name = "create-optimizer", .meta = "NAME", TRAINER_KEY("create_optimizer", "sgd_optimizer"),
     .help = "(PyTorch's experiment scripts) the same for\n"
             "create_optimizer: sgd_optimizer"},
    {.name = "lr", .meta = "LR", .kind = OPT_CUSTOM, .parse = master_opt_trainer_number, .json = "lr",
     .to_json = master_opt_trainer_json, .example = "0.125",
     .help = "(PyTorch's experiment scripts) the trainers' learning\n"
             "rate, replacing the trainer configuration's lr: a number\n"
             "in (0, 3.4e38] (a DdpTrainer's or a HybridTrainer's; a\n"
             "BatchUpdateTrainer's servers step with the server\n"
             "configuration's). Each of these seven is refused for a\n"
             "trainer class without that key, and echoed in the args\n"
             "line and results.json (configuration)"},
    {.name = "master-addr", .kind = OPT_CUSTOM, .parse = master_opt_master_addr, .given = {AT(listen_set)},
     .example = "127.0.0.2", .head = "--master-addr HOST, --master-port PORT",
     .help = "\n"
             "PyTorch's spelling of --listen HOST:PORT (--master-port\n"
             "alone keeps the default host)"},
    {.name = "master-port", .kind = OPT_CUSTOM, .parse = master_opt_master_port, .example = "29511"},
    {.name = "filestore", .meta = "PATH", .kind = OPT_STRING,
     .help = "accepted for PyTorch's scripts; psbench needs no file store"},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "Where psbench's defaults differ from PyTorch's launcher: the launcher has a default\n"
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
         "PyTorch's DDP + RPC benchmark (benchmark_ddp_rpc.py; any of these selects --model\n"
         "HybridModel, --trainer HybridTrainer, --server EmbeddingParameterServer and 100\n"
         "epochs unless those are given):\n"},
    {.kind = OPT_TEXT, .head = "--number-trainers N",
     .help = "the same as --ntrainer"},
    {.name = "number-ps", .meta = "N", .kind = OPT_U64, .min = 0, .max = CONFIG_MAX_NODES, .to = AT(nserver),
     .given = {AT(nserver_set), AT(ddp_rpc_flags)},
     .help = "parameter servers, each holding one embedding table (--nserver)"},
    {.name = "number-embeddings", .meta = "N", .kind = OPT_U64, .min = 1, .max = (uint64_t)1 << 31,
     .to = AT(number_embeddings), .given = {AT(ddp_rpc_flags)},
     .help = "rows of every table (the model configuration's, 300)"},
    {.name = "embedding-dim", .meta = "N", .kind = OPT_U64, .min = 1, .max = 1u << 20, .to = AT(embedding_dim),
     .given = {AT(ddp_rpc_flags)},
     .help = "columns of every table (64); number-ps x embedding-dim must\n"
             "be a multiple of 512"},
    {.name = "warmup-cycles", .meta = "N", .kind = OPT_U64, .min = 1, .max = CONFIG_MAX_EPOCHS,
     .to = AT(warmup_cycles), .def = "5", .given = {AT(ddp_rpc_flags)}, .json = "warmup_cycles",
     .help = "epochs of the warm-up pass (default 5)"},
    {.name = "rpc-pattern", .meta = "seed|psbench", .kind = OPT_CHOICE, .choices = rpc_patterns,
     .to = AT(rpc_pattern), .given = {AT(ddp_rpc_flags)}, .json = "rpc_pattern",
     .help = "how trainers use the servers (the HybridTrainer\n"
             "configuration's rpc_pattern, default seed): seed =\n"
             "PyTorch's (lookups one server at a time, each update\n"
             "awaited, the table's dense gradient applied to every row);\n"
             "psbench = every lookup at once, updates unanswered, a step\n"
             "per named row (fewer waits and less server work, about the\n"
             "same bytes; results.json and the tables name the pattern)"},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "psbench's options:\n"},
    {.name = "bucket-cap-mb", .meta = "MB", .kind = OPT_CUSTOM, .parse = master_opt_trainer_number,
     .json = "bucket_cap_mb", .to_json = master_opt_trainer_json, .example = "4",
     .help = "the trainers' DDP bucket cap in MiB, replacing the trainer\n"
             "configuration's bucket_cap_mb: a number in (0, 1048576]\n"
             "(a DdpTrainer's; refused for other trainer classes)"},
    {.name = "compress", .meta = "none|fp16|bf16|powersgd[:RANK]", .kind = OPT_CUSTOM,
     .parse = master_opt_compress, .json = "compress", .to_json = master_opt_compress_json, .example = "fp16",
     .help = "the gradients' type on the wire, replacing the trainer\n"
             "configuration's compress (default none: fp32). fp16, bf16:\n"
             "allreduce_hook as PyTorch's fp16_compress_hook /\n"
             "bf16_compress_hook (each bucket cast, divided by the\n"
             "trainer count, allreduced in that type, cast back), on\n"
             "gloo and nccl (there on the GPU, the division as CUDA's\n"
             "multiply by 1/N); rpc_hook and the Synthetic model\n"
             "(dense): pushes in\n"
             "that type, the servers' mean (summed in fp32) answered in\n"
             "it (servers of kind average and average-batch, CPU or\n"
             "CUDA); the HybridModel: its dense part's allreduce_hook;\n"
             "refused with the other hooks and batch-update.\n"
             "powersgd:\n"

             "allreduce_hook as PyTorch's powerSGD_hook, low-rank\n"
             "factors of rank RANK (matrix_approximation_rank, default\n"
             "1) after start_powerSGD_iter plain steps (--powersgd-*);\n"
             "on gloo and nccl (CUDA trainers' buckets staged through\n"
             "host memory)"},
    {.name = "powersgd-start-iter", .meta = "N", .kind = OPT_CUSTOM, .parse = master_opt_trainer_whole,
     .json = "start_powerSGD_iter", .to_json = master_opt_trainer_json, .example = "10",
     .help = "PowerSGD's start_powerSGD_iter: plain fp32 allreduces for\n"
             "the first N steps of each pass (PyTorch's default 1000;\n"
             "more than 1 with error feedback or warm start)"},
    {.name = "powersgd-min-compression-rate", .meta = "X", .kind = OPT_CUSTOM, .parse = master_opt_trainer_number,
     .json = "min_compression_rate", .to_json = master_opt_trainer_json, .example = "2",
     .help = "PowerSGD's min_compression_rate (default 2): a rows x cols\n"
             "tensor is factored where (rows + cols) RANK X < rows cols"},
    {.name = "powersgd-no-error-feedback", .kind = OPT_FLAG, .parse = master_opt_trainer_off,
     .json = "use_error_feedback", .to_json = master_opt_trainer_json,
     .help = "PowerSGD's use_error_feedback false (default true)"},
    {.name = "powersgd-no-warm-start", .kind = OPT_FLAG, .parse = master_opt_trainer_off, .json = "warm_start",
     .to_json = master_opt_trainer_json,
     .help = "PowerSGD's warm_start false: Q drawn anew every step"},
    {.name = "powersgd-orthogonalization-epsilon", .meta = "X", .kind = OPT_CUSTOM,
     .parse = master_opt_trainer_number, .json = "orthogonalization_epsilon", .to_json = master_opt_trainer_json,
     .example = "1e-8",
     .help = "PowerSGD's orthogonalization_epsilon (default 0)"},
    {.name = "powersgd-random-seed", .meta = "N", .kind = OPT_CUSTOM, .parse = master_opt_trainer_whole,
     .json = "random_seed", .to_json = master_opt_trainer_json, .example = "7",
     .help = "PowerSGD's random_seed (default 0): the first Q's draw"},
    {.name = "powersgd-batched", .kind = OPT_FLAG, .parse = master_opt_psgd_batched, .json = "powersgd_hook",
     .to_json = master_opt_trainer_json,
     .help = "PowerSGD as PyTorch's batched_powerSGD_hook: each bucket\n"
             "one square matrix (default powerSGD_hook: per tensor)"},
    {.name = "set", .meta = "KIND.KEY=VALUE", .kind = OPT_CUSTOM, .parse = master_opt_set, .json = "set",
     .to_json = master_opt_set_json, .example = "trainer.momentum=0.5",
     .help = "replace KEY of the KIND configuration (trainer, model,\n"
             "data or server; repeatable), e.g. --set trainer.lr=0.1:\n"
             "VALUE is JSON, else a string; checked as the files' values\n"
             "are (docs/operations.md), refused naming the key and what\n"
             "it must be. The flags for a key (--lr, --ddp-hook, ...) win\n"
             "over --set for it"},
    {.name = "dry-run", .kind = OPT_FLAG, .to = AT(dry_run),
     .help = "print the resolved plan (placement, buckets, bytes per\n"
             "step, ports; last, a line 'plan: {JSON}' for programs) and\n"
             "exit 0, starting nothing"},
    {.name = "placement", .meta = "seed|shard", .kind = OPT_CHOICE, .choices = placements, .to = AT(placement),
     .def = "seed", .json = "placement",
     .help = "seed: PyTorch's placement, trainer r uses\n"
             "server r / (ntrainer / nserver); shard: bucket k goes to\n"
             "server k mod nserver (default seed)"},
    {.name = "listen", .meta = "HOST:PORT", .kind = OPT_STRING, .to = AT(listen), .def = CONFIG_DEFAULT_LISTEN,
     .given = {AT(listen_set)}, .json = "listen", .example = "127.0.0.1:0",
     .help = "control plane address (default " CONFIG_DEFAULT_LISTEN "; with --local\n"
             "127.0.0.1:29500)"},
    {.name = "http", .meta = "HOST:PORT", .kind = OPT_STRING, .to = AT(http), .def = CONFIG_DEFAULT_HTTP,
     .given = {AT(http_set)}, .json = "http", .example = "127.0.0.1:0",
     .help = "HTTP API and dashboard (default " CONFIG_DEFAULT_HTTP "; with --local\n"
             "127.0.0.1:8080)"},
    {.name = "local", .kind = OPT_FLAG, .to = AT(local), .json = "local",
     .help = "spawn the servers and trainers on this host: the\n"
             "CUDA ones (the last --ncudaserver / --ncudatrainer\n"
             "ranks) with --device cuda, the others without\n"
             "--device (a server's $PSBENCH_SERVER_DEVICE, else cpu)"},
    {.name = "linger", .meta = "SECONDS", .kind = OPT_CUSTOM, .parse = master_opt_linger, .to = AT(linger_s),
     .json = "linger", .example = "0.5",
     .help = "keep serving HTTP after the run (default 0)"},
    {.name = "join-timeout", .meta = "SECONDS", .kind = OPT_SECONDS, .to = AT(join_timeout_s),
     .given = {AT(join_timeout_set)},
     .help = "how long the run waits for every server and trainer to\n"
             "join before it fails, naming who is missing (default: 120,\n"
             "or --rpc-timeout when longer)"},
    {.name = "quiet-host", .meta = "SECONDS", .kind = OPT_CUSTOM, .parse = master_opt_linger,
     .to = AT(quiet_host_s), .json = "quiet_host", .example = "30",
     .help = "before each run, wait up to SECONDS for this host to\n"
             "be quiet (CPU steal <= 5 %, other processes below\n"
             "10 % of its CPUs, over 1-s readings); a run whose\n"
             "host never was is marked busy (default 0: no wait)"},
    {.shared = &opts_transport, .to = AT(transport), .json = "transport", .to_json = master_opt_transport_json,
     .help = "with --local, between trainers and servers: auto\n"
             "(default; $PSBENCH_TRANSPORT sets it): shared memory\n"
             "on this host (Unix sockets, sealed memfd segments),\n"
             "TCP where not; shm: shared memory or a clear error;\n"
             "tcp: TCP only. Each trainer's links are shown in\n"
             "/api/v1/nodes and results.json (\"links\")"},
    {.name = "runs", .meta = "N", .kind = OPT_U64, .min = 0, .max = CONFIG_MAX_RUNS, .to = AT(runs), .def = "1",
     .json = "runs",
     .help = "run the job N times back to back (default 1; 0: until\n"
             "stopped). The servers stay connected between runs (told\n"
             "to reset, not to stop); trainers join again for every run\n"
             "(--local starts them again). A failed run ends the master.\n"
             "A signal between runs, before a trainer of the next one\n"
             "joined, ends it cleanly (not with --local)"},
    {.name = "allow-divergence", .kind = OPT_FLAG, .to = AT(allow_divergence), .json = "allow_divergence",
     .help = "a trainer whose loss becomes NaN or infinite goes on and\n"
             "the run ends done with a warning (default: the trainer\n"
             "stops there and the run fails, naming epoch and batch)"},
    {.name = "tables", .meta = "all|none", .kind = OPT_CHOICE, .choices = tables_choices, .to = AT(tables),
     .help = "the per-rank tables on stdout under the run's headline:\n"
             "all, or none (the headline only: neither the master's\n"
             "tables nor, with --local, the nodes' own; the files keep\n"
             "every table). Default all, none with --log-level warn or\n"
             "error"},
    {.name = "out", .meta = "DIR", .kind = OPT_STRING, .to = AT(out_dir), .json = "out",
     .help = "write results.json and a CSV per group into DIR (with\n"
             "--runs other than 1: into DIR/run-001/, DIR/run-002/, ...);\n"
             "made and checked before the run starts. Trainer 0's final\n"
             "parameters go beside them (params.bin, up to 64 MiB of\n"
             "them), for psbench-master diff's parameter distance"},
    {.name = "trace", .kind = OPT_FLAG, .to = AT(trace), .json = "trace",
     .help = "record the run's trace into DIR/trace.json (needs --out;\n"
             "per run like results.json): every trainer's and server's\n"
             "spans (carried to each node in its assignment) and the\n"
             "master's phases on one clock, each node's offset estimated\n"
             "over the control link, for Perfetto or chrome://tracing\n"
             "(docs/results.md; psbench-master trace summarize) (default\n"
             "off)"},
    {.name = "trace-steps", .meta = "A:B", .kind = OPT_CUSTOM, .parse = master_opt_trace_steps,
     .to = AT(trace_steps), .json = "trace_steps", .example = "10:20",
     .help = "with --trace, the steps traced: A:B (both included), A:\n"
             "(A onwards) or A (that step alone) (default: every step of\n"
             "the timed pass)"},
    {.name = "params-max", .meta = "N", .kind = OPT_U64, .min = 0, .max = PARAMSFILE_MAX_FLOATS,
     .to = AT(params_max), .def = STR(CONFIG_DEFAULT_PARAMS_MAX), .json = "params_max",
     .help = "with --out, the most final parameters of trainer 0\n"
             "params.bin records, for diff's and a sweep's parameter\n"
             "distance (default " STR(CONFIG_DEFAULT_PARAMS_MAX) ": 4 MiB; at most 16777216;\n"
             "0: none); a bigger model's results.json keeps their\n"
             "count, digest and norm (a sweep over --compress gives\n"
             "its points 16777216)"},
    {.name = "trace-buffer", .meta = "N", .kind = OPT_U64, .min = 1, .max = TRACE_CAPACITY_MAX,
     .to = AT(trace_buffer), .def = STR(CONFIG_DEFAULT_TRACE_BUFFER), .json = "trace_buffer",
     .help = "with --trace, spans each ring holds (default\n"
             STR(CONFIG_DEFAULT_TRACE_BUFFER) ", at most 4194304); a full ring keeps the\n"
             "first spans and says how many it dropped"},
    {.shared = &opts_token_file, .to = AT(token_file),
     .help = "the job's token, a shared secret every node must present:\n"
             "FILE's first line (keep it mode 600; the nodes take the\n"
             "same flag). Without a token a master listening beyond\n"
             "loopback warns: anyone who reaches it can join the run"},
    {.shared = &opts_token, .to = AT(token), .json = "auth", .to_json = master_opt_auth_json,
     .help = "the token on the command line (shown by ps: prefer\n"
             "--token-file). Precedence: --token, --token-file,\n"
             "$PSBENCH_TOKEN. --local hands it to its nodes in the\n"
             "environment"},
    {.shared = &opts_log_level, .meta = "L", .to = AT(log_level),
     .help = "error, warn, info, debug (default info)"},
    {.shared = &opts_version_opt, .head = "--version, --help", .help = ""},
    {.shared = &opts_help},
    {.kind = OPT_TEXT,
     .help =
         "\n"
         "Exit status: 0 the run (every run) done; 1 a run failed, or its results could not\n"
         "be written; 2 a bad flag or configuration (a --listen or --http address in use\n"
         "too); 128+N signal N interrupted a run (130 SIGINT, 143 SIGTERM, 129 SIGHUP; a\n"
         "signal after the run is done, or between runs, keeps the run's code).\n"
         "\n"
         "CONFIGS is $PSBENCH_CONFIG_DIR, else <bin>/../configs, else <bin>/../share/psbench/configs\n"
         "(installed), else the source tree's configs/.\n"},

    OPTS_END,
};

static const opts_table master_table = {
    .prog = "psbench-master",
    .specs = master_specs,
    .help_col = 28,
    .precise_errors = true,
};

const opts_table *master_opts(void)
{
    return &master_table;
}

bool master_trainer_key_flag(size_t i, const char **name, const char **key)
{
    size_t n = 0;
    opt_spec o;
    for (size_t k = 0; opts_entry(&master_table, k, &o); k++) {
        if (o.parse != master_opt_trainer_string && o.parse != master_opt_trainer_number &&
            o.parse != master_opt_compress && o.parse != master_opt_trainer_whole &&
            o.parse != master_opt_trainer_off && o.parse != master_opt_psgd_batched)
            continue;
        if (n++ < i)
            continue;
        *name = o.name;
        *key = o.json;
        return true;
    }
    /* --compress powersgd:RANK sets a second key */
    if (n == i) {
        *name = "compress";
        *key = "matrix_approximation_rank";
        return true;
    }
    return false;
}

/* After the options: what follows from them together. */
int master_opts_finish(run_config *c, char *err, size_t errlen)
{
    /* A --local job stays on this host: loopback unless an address was
     * given (--master-port alone sets only the port). */
    if (c->local && !c->listen_set && listen_set_part(c, "127.0.0.1", NULL, err, errlen) < 0)
        return -1;
    if (c->local && !c->http_set && set_str(&c->http, CONFIG_LOCAL_HTTP) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    const char *token, *source;
    char buf[CLI_TOKEN_MAX + 1];
    int loose;
    if (opts_token_resolve(c->token, c->token_file, buf, sizeof buf, &token, &source, &loose, err, errlen) < 0)
        return -1;
    c->token_file_loose = loose != 0;
    if (token != c->token && set_str(&c->token, token) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    /* The trace goes into a file beside results.json: without --out it
     * would be recorded for nothing. */
    if (c->trace && !c->out_dir) {
        errbuf_set(err, errlen, "--trace needs --out DIR (where trace.json is written)");
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

