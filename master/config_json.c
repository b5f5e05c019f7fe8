/* config_json.c — a run configuration as JSON (see config.h): the echo of
 * the options with what config_load resolved (results.json's
 * "configuration", the "args:" line), and the objects the servers'
 * assignments carry (the HybridModel's embedding, batch-update's model). */
#include "master/config_json.h"
#include "master/config_passes.h"
#include "master/opts.h"
#include "shared/jobconf.h"

#include <string.h>

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

json_t *config_to_json(const run_config *c)
{
    /* The options, in the table's order (master/opts.c: each one's key). */
    json_t *o = opts_to_json(master_opts(), c);
    if (!o)
        return NULL;
    int bad = 0;
#define SET(k, v) bad |= json_object_set_new(o, k, v)
    if (c->resolved.loaded) {
        json_t *r = json_pack("{s:O, s:O, s:O, s:O, s:s, s:I}", "model", c->resolved.model.json, "data",
                              c->resolved.data.json, "trainer", c->resolved.trainer.json, "server",
                              c->resolved.server.json, "server_kind", c->resolved.server_kind,
                              "batches_per_pass", (json_int_t)config_batches_per_pass(c));
        /* --compress (issue 43), PyTorch's names: none, fp16, bf16 */
        json_t *cz = json_object_get(c->resolved.trainer.conf, "compress");
        bad |= r &&
               json_object_set_new(r, "compress", json_string(json_is_string(cz) ? json_string_value(cz) : "none")) < 0;
        /* --compress powersgd: its state's parameters, PyTorch's names */
        if (r && json_is_string(cz) && strcmp(json_string_value(cz), "powersgd") == 0) {
            psgd_conf p;
            psgd_conf_of(c->resolved.trainer.conf, &p);
            json_t *pj = psgd_conf_json(&p);
            bad |= !pj || json_object_set_new(r, "powersgd", pj) < 0;
        }
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
