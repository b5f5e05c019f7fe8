/* bounds.c — what one trainer may make a server hold (see bounds.h). */
#include "server/bounds.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void bounds_from_flags(uint32_t pushes, uint64_t bytes, futures_limits *out)
{
    memset(out, 0, sizeof *out);
    out->pushes = pushes;
    out->bytes = bytes;
    out->buckets = BOUNDS_DEFAULT_BUCKETS;
    out->first_free = true; /* one push of any size up to --max-payload, as before the bounds */
    snprintf(out->source, sizeof out->source, "--max-open-pushes %u, --max-open-bytes %" PRIu64, pushes, bytes);
}

/* One trainer's buckets per batch and their payload bytes for model m:
 * upper bounds, whatever the placement (shard sends each server a share). */
static void bounds_batch(const modelconf *m, uint64_t *buckets, uint64_t *bytes)
{
    *buckets = 0;
    *bytes = 0;
    switch (m->cls) {
    case MODEL_SYNTHETIC: {
        *buckets = m->syn.buckets;
        if (m->syn.sparse) {
            /* trainer/synthetic.c: nnz = bucket_floats / cols (at least 1)
             * rows of cols floats, each with its int64 index. */
            uint64_t cols = m->syn.sparse_cols ? m->syn.sparse_cols : 1;
            uint64_t nnz = m->syn.bucket_floats / cols ? m->syn.bucket_floats / cols : 1;
            *bytes = *buckets * nnz * (8 + 4 * cols);
        } else if (m->syn.sizes) {
            for (uint32_t k = 0; k < m->syn.buckets; k++)
                *bytes += m->syn.sizes[k] * 4;
        } else {
            *bytes = *buckets * m->syn.bucket_floats * 4;
        }
        break;
    }
    case MODEL_DUMMY: {
        /* DDP's buckets (trainer/ddp_buckets.h) hold whole parameters, at
         * least one each: at most the parameter tensors (the embedding, a
         * weight and a bias per layer). Dense buckets cut the flat dense
         * gradient; a sparse embedding travels alone, at most every row
         * of its table once (rows coalesced), each with its index. */
        uint64_t layers = m->dummy.dense_layers_count;
        uint64_t in = m->dummy.dense_input_size, outs = m->dummy.dense_output_size;
        uint64_t emb = m->dummy.num_embeddings * m->dummy.embedding_dim;
        uint64_t dense = layers * (outs * in + outs) + (m->dummy.sparse ? 0 : emb);
        *buckets = 2 * layers + 1;
        *bytes = dense * 4 + (m->dummy.sparse ? m->dummy.num_embeddings * (8 + 4 * m->dummy.embedding_dim) : 0);
        break;
    }
    case MODEL_LINEAR:
        /* batch-update: one push per batch of (at most) the whole model */
        *buckets = 1;
        *bytes = (m->linear.out_features * m->linear.in_features + m->linear.out_features) * 4;
        break;
    case MODEL_HYBRID:
        break; /* lookups and updates, no pushes */
    }
}

void bounds_from_model(const modelconf *m, futures_limits *out)
{
    memset(out, 0, sizeof *out);
    uint64_t buckets, bytes;
    bounds_batch(m, &buckets, &bytes);
    uint64_t pushes = buckets * BOUNDS_BATCHES;
    out->pushes = pushes > UINT32_MAX ? UINT32_MAX : (uint32_t)pushes;
    /* A model of no pushes admits none: bounds of 1 push of 0 bytes would
     * still open futures; a kind that takes no pushes refuses them first. */
    out->bytes = bytes * BOUNDS_BATCHES;
    out->buckets = buckets > UINT32_MAX ? UINT32_MAX : (uint32_t)buckets;
    if (out->pushes == 0) {
        out->pushes = 1;
        out->buckets = 1;
    }
    snprintf(out->source, sizeof out->source,
             "this job: %" PRIu64 " bucket%s of %" PRIu64 " bytes per batch at most, %u batches; raise with "
             "--max-open-pushes and --max-open-bytes",
             buckets, buckets == 1 ? "" : "s", bytes, BOUNDS_BATCHES);
}
