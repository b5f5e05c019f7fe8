/* kinds.c — the registry of kinds: their names, and building the one a
 * server runs. The only file that knows every kind; a kind knows none of
 * the others. */
#include "server/kinds.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    [KIND_AVERAGE] = "average",
    [KIND_AVERAGE_BATCH] = "average-batch",
    [KIND_BATCH_UPDATE] = "batch-update",
    [KIND_EMBEDDING] = "embedding",
};

int kind_parse(const char *name, kind_id *out)
{
    for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (kind_id)i;
            return 0;
        }
    return -1;
}

const char *kind_name(kind_id id)
{
    return (unsigned)id < sizeof kind_names / sizeof kind_names[0] ? kind_names[id] : "?";
}

kind *kind_new(const kind_config *cfg, device *dev, bufpool *pool, metrics *m, char *err, size_t errlen)
{
    kind *k;
    switch (cfg->id) {
    case KIND_AVERAGE:
        k = kind_average_new(cfg, dev, err, errlen);
        break;
    case KIND_AVERAGE_BATCH:
        k = kind_average_batch_new(cfg, dev, err, errlen);
        break;
    case KIND_BATCH_UPDATE:
        k = kind_batch_update_new(cfg, dev, err, errlen);
        break;
    case KIND_EMBEDDING:
        k = kind_embedding_new(cfg, dev, err, errlen);
        break;
    default:
        snprintf(err, errlen, "unknown server kind");
        return NULL;
    }
    if (!k)
        return NULL;
    k->cfg = *cfg;
    k->dev = dev;
    k->pool = pool;
    if (!k->expected)
        k->expected = cfg->trainers;
    const char *compute = cfg->id == KIND_BATCH_UPDATE ? "method_metric,update"
                          : cfg->id == KIND_EMBEDDING  ? "method_metric,lookup"
                                                       : "method_metric,average computation";
    k->m_compute = metrics_get(m, compute);
    if (cfg->id == KIND_EMBEDDING && !(k->m_update = metrics_get(m, "method_metric,update")))
        k->m_compute = NULL;
    if (!k->m_compute || (k->ops->start && k->ops->start(k) < 0)) {
        k->ops->destroy(k);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return k;
}

void kind_free(kind *k)
{
    if (k)
        k->ops->destroy(k);
}
