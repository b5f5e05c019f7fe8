/* model.h — the seed's DummyModel: forward, backward with a per-parameter
 * "gradient ready" callback, parameters and gradients in flat float32
 * buffers of the compute layer (compute.h) it was created on: the cpu's
 * today; the model does not know which device runs it.
 *
 * DummyModel(num_embeddings, embedding_dim, dense_input_size,
 * dense_output_size, dense_layers_count, sparse):
 *   x = EmbeddingBag(num_embeddings, embedding_dim, mode="mean")(indices)
 *       (one bag per sample: the mean of its sample_length rows)
 *   x = Linear_{L-1}(... Linear_0(x))   (no activation in between)
 *   p = softmax(x, dim=1)
 *   loss = CrossEntropyLoss(p, target)  = mean_b [ logsumexp(p_b) - p_b[y_b] ]
 * The loss is applied to the softmax *output*, as the seed does (its
 * criterion is nn.CrossEntropyLoss on the model's softmax). psbench builds
 * dense_layers_count layers (the seed accidentally always built 10).
 *
 * Parameters, in PyTorch's order (index: name [shape]):
 *   0:      embedding.weight [num_embeddings x embedding_dim]
 *   1+2i:   dense.i.weight   [dense_output_size x dense_input_size]
 *   2+2i:   dense.i.bias     [dense_output_size]
 * All values live in one flat float32 allocation in that order (and all
 * gradients in another, same offsets), so a caller can cut buckets as
 * contiguous ranges. The gradients' may be memory lent by whoever sends
 * them (model_new_lent: a hook's shared segment), so that buckets leave
 * from where backward wrote them.
 *
 * Initialization, deterministic from the seed (stream RNG_STREAM_MODEL of
 * shared/rng.h), in parameter order, each tensor row-major:
 *   embedding.weight ~ N(0, 1)                      (PyTorch's default)
 *   dense.i.weight, dense.i.bias ~ U(-k, k), k = 1/sqrt(dense_input_size)
 *                                                   (PyTorch's Linear default)
 * U(-k, k) and N(0, 1) are rng_fill_uniform and rng_fill_normal: exact
 * definitions, bit-identical on every IEEE-754 host, in shared/rng.h.
 *
 * Sparse (sparse = true): the embedding's gradient is a COO list: the unique
 * row indices touched by the batch, ascending, and one row of
 * embedding_dim floats per index (model_sparse_grad). model_param_grad
 * returns NULL for it. Dense parameters are always dense.
 *
 * Gradients are written, not accumulated: each model_backward leaves
 * exactly the gradient of the last forward's batch (the seed zeroes them
 * before every step anyway). model_zero_grad sets them all to zero (and a
 * sparse gradient to nnz = 0).
 *
 * Host access: model_values, model_grads, model_param_values,
 * model_param_grad and model_sparse_grad's values are host views of the
 * layer's buffers (compute_host_view): the memory itself on the cpu, NULL
 * where the buffers are not host-visible (a GPU's: use the buffers and
 * spans, model_values_buf / model_grad_span, with compute_read and
 * compute_write). On the cpu every operation is complete on return, so a
 * view holds the last forward's, backward's or step's results.
 *
 * Threads: the model is not thread-safe. The ready callback runs on the
 * thread calling model_backward; from the moment it is called for
 * parameter i until the next model_forward, model_backward neither reads
 * nor writes gradient i, so another thread may read it (send it) and
 * overwrite it (with the averaged result) concurrently. Values are only
 * read by forward/backward, so an optimizer may update parameter i after
 * model_backward returns.
 */
#ifndef PSBENCH_MODEL_H
#define PSBENCH_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/compute.h"
#include "trainer/data.h"

/* The values of a model configuration (configs/model_configurations.json,
 * "configurations"). */
typedef struct model_config {
    uint64_t num_embeddings;
    uint64_t embedding_dim;
    uint64_t dense_input_size;
    uint64_t dense_output_size; /* the number of classes */
    uint32_t dense_layers_count;
    bool sparse;
    /* The gradients in device memory a process on the same GPU can open
     * (compute_alloc_shared: a CUDA server folds them where they are);
     * where the compute layer cannot share, ordinary device memory. With
     * grads_narrow, the shared buffer holds, after the gradients (total
     * floats), their narrow shadow (total 16-bit values, at half each
     * gradient's offset: model_grads_shadow), where narrow pushes by CUDA
     * IPC lie (rpc_hook --compress). */
    bool grads_shared;
    bool grads_narrow;
} model_config;

typedef struct model_param_info {
    char name[32];     /* "embedding.weight", "dense.3.bias", ... */
    uint32_t ndim;     /* 2 for weights, 1 for biases */
    uint64_t shape[2]; /* shape[1] = 1 when ndim == 1 */
    uint64_t size;     /* floats */
    uint64_t offset;   /* floats from the start of the flat buffers */
    bool sparse;       /* gradient is a COO row list (model_sparse_grad) */
} model_param_info;

typedef struct dummy_model dummy_model;

/* Called by model_backward the moment parameter param_index's gradient is
 * final, in reverse parameter order. */
typedef void (*model_ready_fn)(void *ctx, uint32_t param_index);

/* Create a model for cfg on dev (the caller's: it must outlive the model),
 * initialized from seed, with activation buffers for batches of up to
 * max_batch samples. Returns NULL with a reason in err
 * on inconsistent shapes (embedding_dim != dense_input_size; more than one
 * layer with dense_output_size != dense_input_size), zero or oversized
 * dimensions, or when out of memory. */
dummy_model *model_new(compute *dev, const model_config *cfg, uint64_t seed, uint32_t max_batch, char *err,
                       size_t errlen);
/* Memory for the flat gradient buffer from whoever sends the gradients (a
 * hook that sends from its shared segment without a copy, hook.h): get
 * returns `bytes` of host memory, aligned for floats and kept by the lender
 * until after model_free, or NULL (none to lend). */
typedef struct model_grads_lender {
    void *(*get)(void *ctx, size_t bytes);
    void *ctx;
} model_grads_lender;
/* model_new, the gradients in memory from lender (NULL: as model_new)
 * where dev computes on host memory it is lent (compute_lends: the cpu);
 * elsewhere, or when the lender has none, in the layer's own memory as
 * model_new puts them (model_grads_lent says which). Nothing else
 * changes: the same arithmetic on the same bits. */
dummy_model *model_new_lent(compute *dev, const model_config *cfg, uint64_t seed, uint32_t max_batch,
                            const model_grads_lender *lender, char *err, size_t errlen);
/* The gradients live in lent memory (model_new_lent). */
bool model_grads_lent(const dummy_model *m);
void model_free(dummy_model *m);
/* The parameters model_new(seed) gives, again, and every gradient zero (a
 * fresh model for a new pass). 0, or -1 with err (out of memory). */
int model_reinit(dummy_model *m, uint64_t seed, char *err, size_t errlen);

/* Check that data d can be fed to m: its indices, drawn from [0, max_val),
 * must be rows of the embedding (max_val <= num_embeddings) and its
 * targets, also in [0, max_val), must be classes (max_val <=
 * dense_output_size). Returns 0, or -1 with a reason in err. model_forward
 * only asserts this, so call it once before training. */
int model_check_data(const dummy_model *m, const dummy_data *d, char *err, size_t errlen);

const model_config *model_cfg(const dummy_model *m);
uint32_t model_nparams(const dummy_model *m);
const model_param_info *model_param(const dummy_model *m, uint32_t i);
/* All values / all gradient buffers, model_total_size floats each. For a
 * sparse model the embedding's region of the gradient buffer holds the
 * COO rows (see model_sparse_grad), not a dense table. */
uint64_t model_total_size(const dummy_model *m);
float *model_values(dummy_model *m);
const float *model_values_const(const dummy_model *m);
float *model_grads(dummy_model *m);
/* Parameter i's values / dense gradient (NULL for a sparse parameter). */
float *model_param_values(dummy_model *m, uint32_t i);
float *model_param_grad(dummy_model *m, uint32_t i);

/* The same on the compute layer: its context, the two flat buffers, and
 * parameter i's range of each (a sparse parameter's gradient range holds
 * the COO values, model_sparse_grad). */
compute *model_compute(const dummy_model *m);
cbuf *model_values_buf(dummy_model *m);
cbuf *model_grads_buf(dummy_model *m);
/* The byte offset of the gradients' narrow shadow in model_grads_buf (its
 * floats [0, total) are the gradients), 0 where it has none. */
uint64_t model_grads_shadow(const dummy_model *m);
cspan model_values_span(dummy_model *m, uint32_t i);
cspan model_grad_span(dummy_model *m, uint32_t i);
/* The last forward's output probabilities p = softmax(z) (model.h's
 * definition, before the loss head), B x C floats for its batch of B
 * samples (B <= max_batch), on the compute layer: read them with
 * compute_host_read or compute_read. Valid until the next model_forward.
 * For tests that compare devices (tests/unit/trainer/test_model_device.c). */
cspan model_prob_span(dummy_model *m, uint32_t B);

/* The sparse embedding gradient of the last backward: returns nnz and sets
 * *rows to the nnz unique row indices (ascending) and *vals to nnz x
 * embedding_dim floats (row k is the gradient of row (*rows)[k]). Only for
 * a sparse model. The pointers stay valid for the model's lifetime; the
 * contents change with the next model_backward or model_zero_grad. */
uint64_t model_sparse_grad(const dummy_model *m, const int64_t **rows, const float **vals);

/* Forward pass over batch b (1 <= b->len <= max_batch): returns the loss
 * (the mean over the batch). Keeps what backward needs; b must stay valid
 * until model_backward. */
double model_forward(dummy_model *m, const data_batch *b);

/* Backward pass for the batch of the last model_forward (b must be that
 * batch). Computes the gradients in reverse parameter order — dense.L-1.bias,
 * dense.L-1.weight, ..., dense.0.bias, dense.0.weight, embedding.weight —
 * and calls ready(ctx, i) as soon as gradient i is final (ready may be
 * NULL). */
void model_backward(dummy_model *m, const data_batch *b, model_ready_fn ready, void *ctx);

void model_zero_grad(dummy_model *m);

#endif
