/* config_load.c — the four configuration files of configs/ (data, model,
 * trainer, server) read and resolved for the chosen ids, with the flags
 * that set their keys (--set, the seed launcher's trainer flags,
 * --ddp-hook), every value checked (shared/jobconf.h): config_load and
 * config_unload (see config.h). */
#include "master/config_load.h"
#include "master/opts.h"
#include "shared/cli.h"
#include "shared/jobconf.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What config_load resolved, released: c->resolved zeroed. */
void config_unload(run_config *c)
{
    config_entry *e[] = {&c->resolved.model, &c->resolved.data, &c->resolved.trainer, &c->resolved.server};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        json_decref(e[i]->json);
        memset(e[i], 0, sizeof *e[i]);
    }
    modelconf_free(&c->resolved.mc);
    memset(&c->resolved, 0, sizeof c->resolved);
}


/* Join the keys of obj as "a, b, c" into buf. */
static void load_keys_list(json_t *obj, char *buf, size_t len)
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
    json_error_t je;
    json_t *root;
    int lrc = userpath_load_json(path, JSON_REJECT_DUPLICATES, &root, &je, why, sizeof why);
    if (lrc == -1) {
        errbuf_set(err, errlen, "cannot read %s configurations %s: %s", what, path, why);
        return -1;
    }
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
        load_keys_list(root, have, sizeof have);
        text_shown shown;
        errbuf_set(err, errlen, "%s %s not in %s (have: %s)", what, text_show(id, '\'', &shown), path, have);
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

static char *load_value_text(const json_t *v);

/* The flags that changed a KIND entry before it is checked, as the user
 * wrote them (" with --set trainer.lr=0.1 --powersgd-start-iter 1"; empty
 * where none did) into buf. */
static void load_flags_text(const run_config *c, const char *kind, const config_entry *e, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
#define LOAD_APPEND(...)                                                                                               \
    do {                                                                                                               \
        if (n < len)                                                                                                   \
            n += (size_t)snprintf(buf + n, len - n, __VA_ARGS__);                                                      \
    } while (0)
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(c->set_flags, kind), key, v) {
        char *val = load_value_text(v);
        LOAD_APPEND("%s--set %s.%s=%s", n ? " " : " with ", kind, key, val ? val : "");
        free(val);
    }
    if (strcmp(kind, "trainer") == 0) {
        if (c->ddp_hook && jobconf_class_takes("trainer", e->cls, "ddp_hook"))
            LOAD_APPEND("%s--ddp-hook %s", n ? " " : " with ", c->ddp_hook);
        const char *name, *prev_name, *prev_key;
        for (size_t i = 0; c->trainer_flags && master_trainer_key_flag(i, &name, &key); i++) {
            if (!(v = json_object_get(c->trainer_flags, key)) || !jobconf_class_takes("trainer", e->cls, key))
                continue;
            bool said = false; /* a flag that sets two keys (--compress powersgd:RANK): its first one's value */
            for (size_t j = 0; j < i && master_trainer_key_flag(j, &prev_name, &prev_key); j++)
                said |= strcmp(prev_name, name) == 0 && json_object_get(c->trainer_flags, prev_key) != NULL;
            if (said)
                continue;
            char *val = load_value_text(v);
            LOAD_APPEND("%s--%s %s", n ? " " : " with ", name, val ? val : "");
            free(val);
        }
    }
#undef LOAD_APPEND
}

/* Check an entry's values (jobconf_check: types, ranges, required keys,
 * defaults written, the rules between keys), the file named in front of
 * the reason, and the flags that changed the entry (a rule's refusal may
 * be a flag's doing: --powersgd-start-iter 1 with error feedback). */
static int load_check(const run_config *c, const char *kind, const char *path, config_entry *e, char *err,
                      size_t errlen)
{
    char why[1024], flags[512];
    if (jobconf_check(kind, e->cls, e->id, e->conf, why, sizeof why) == 0)
        return 0;
    load_flags_text(c, kind, e, flags, sizeof flags);
    errbuf_set(err, errlen, "%s%s: %s", path, flags, why);
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
    if (!hy && (emb || hy_trainer) && c->ddp_rpc_flags && !(emb ? c->server_set : c->trainer_set)) {
        /* Not named by the user: a DDP + RPC flag chose it. */
        errbuf_set(err, errlen,
                   "model '%s' is %s, but a flag of the DDP + RPC benchmark (--number-ps, --number-embeddings, "
                   "--embedding-dim, --warmup-cycles or --rpc-pattern) selects that benchmark's %s %s, whose "
                   "model is a HybridModel (for a DummyModel: --nserver, --warmup-steps)",
                   mo->id, mo->cls, emb ? "server" : "trainer", emb ? sv->cls : tr->cls);
        return -1;
    }
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
    return 0; /* the shape over the servers: config_check_fit */
oom:
    errbuf_set(err, errlen, "out of memory");
    return -1;
}

/* The batch-update benchmark: BatchUpdateParameterServer, the Linear model
 * and BatchUpdateTrainer go together. Run by config_load once every entry
 * is checked; the counts that must fill every round: config_check_fit. */
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

/* A flag's value as the user would write it (malloc'd; NULL: out of
 * memory): a string as it is, anything else as JSON. */
static char *load_value_text(const json_t *v)
{
    return json_is_string(v) ? strdup(json_string_value(v))
                             : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
}

/* --set KIND.KEY=VALUE: each value replaces the KIND entry's KEY before
 * the entry is checked, itself checked first by the files' schema
 * (shared/jobconf.c) so that the refusal names the flag, the key and what
 * it must be, not the file. A class the schema does not know is left to
 * load_check, which names it. */
static int load_set_flags(run_config *c, char *err, size_t errlen)
{
    const char *kind;
    json_t *keys;
    json_object_foreach(c->set_flags, kind, keys) {
        config_entry *e = strcmp(kind, "trainer") == 0 ? &c->resolved.trainer
                          : strcmp(kind, "model") == 0 ? &c->resolved.model
                          : strcmp(kind, "data") == 0  ? &c->resolved.data
                                                       : &c->resolved.server;
        assert(strcmp(kind, "server") == 0 || e != &c->resolved.server); /* master_opt_set's four */
        bool known = false; /* a class the schema has (else load_check refuses it) */
        for (size_t i = 0; jobconf_class_name(kind, i); i++)
            known |= strcmp(jobconf_class_name(kind, i), e->cls) == 0;
        const char *key;
        json_t *v;
        json_object_foreach(keys, key, v) {
            char *val = load_value_text(v);
            char why[1024] = "";
            if (known && !jobconf_class_takes(kind, e->cls, key)) {
                char list[700] = "";
                const char *k;
                for (size_t j = 0; (k = jobconf_key_name(kind, e->cls, j)) != NULL; j++) {
                    size_t n = strlen(list);
                    snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", k);
                }
                snprintf(why, sizeof why, "%s '%s' (%s) has no \"%s\" (it takes %s)", kind, e->id, e->cls, key,
                         list[0] ? list : "no keys");
            } else if (known) {
                char must[300];
                if (jobconf_check_value(kind, e->cls, key, v, must, sizeof must) < 0)
                    snprintf(why, sizeof why, "%s '%s' (%s): \"%s\" %s", kind, e->id, e->cls, key, must);
            }
            if (why[0]) {
                errbuf_set(err, errlen, "--set %s.%s=%s: %s", kind, key, val ? val : "", why);
                free(val);
                return -1;
            }
            free(val);
            if (json_object_set(e->conf, key, v) < 0) {
                errbuf_set(err, errlen, "out of memory");
                return -1;
            }
        }
    }
    return 0;
}

/* trainer_key_flags (--hook-state, --lr, ...): as --ddp-hook, each value
 * replaces the trainer configuration's key before the entry is checked,
 * where the class takes that key; a class that does not (BatchUpdateTrainer
 * has no lr of its own, HybridTrainer none of the seed's DdpTrainer
 * functions) is refused once every entry is checked, naming what it takes. */
static int load_trainer_key_flags(run_config *c, bool after_checks, char *err, size_t errlen)
{
    const config_entry *tr = &c->resolved.trainer;
    const char *name, *key;
    for (size_t i = 0; c->trainer_flags && master_trainer_key_flag(i, &name, &key); i++) {
        json_t *v = json_object_get(c->trainer_flags, key);
        if (!v)
            continue;
        bool takes = jobconf_class_takes("trainer", tr->cls, key);
        if (!after_checks) {
            /* A value the class refuses is the flag's fault, not the
             * configuration file's: said here, naming the flag. */
            char must[300];
            if (takes && jobconf_check_value("trainer", tr->cls, key, v, must, sizeof must) < 0) {
                char *val = load_value_text(v);
                errbuf_set(err, errlen, "--%s %s: trainer '%s' (%s): \"%s\" %s", name, val ? val : "", tr->id,
                           tr->cls, key, must);
                free(val);
                return -1;
            }
            if (takes && json_object_set(tr->conf, key, v) < 0) {
                errbuf_set(err, errlen, "out of memory");
                return -1;
            }
            continue;
        }
        if (takes)
            continue;
        char *val = load_value_text(v);
        char list[700] = "";
        const char *k;
        for (size_t j = 0; (k = jobconf_key_name("trainer", tr->cls, j)) != NULL; j++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s", j ? ", " : "", k);
        }
        errbuf_set(err, errlen, "--%s %s: trainer '%s' (%s) has no \"%s\" (it takes %s)", name,
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
    config_unload(c);
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
    if (load_set_flags(c, err, errlen) < 0 || load_check(c, "data", c->data_config_path, da, err, errlen) < 0)
        goto fail;
    {
        char why[400]; /* the model, parsed as the trainers will parse it */
        if (modelconf_parse(mo->id, mo->cls, mo->conf, &c->resolved.mc, why, sizeof why) < 0) {
            errbuf_set(err, errlen, "%s: %s", c->model_config_path, why);
            goto fail;
        }
    }
    if (load_hook_flag(c, false, err, errlen) < 0 || load_trainer_key_flags(c, false, err, errlen) < 0 ||
        load_check(c, "trainer", c->trainer_config_path, tr, err, errlen) < 0 ||
        load_check(c, "server", c->server_config_path, sv, err, errlen) < 0 ||
        load_hook_flag(c, true, err, errlen) < 0 || load_trainer_key_flags(c, true, err, errlen) < 0)
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
    config_unload(c);
    return -1;
}
