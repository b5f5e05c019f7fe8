/* optim.c — SGD with momentum (see optim.h for the exact semantics), on
 * the model's compute layer: the steps are its sgd_dense and sgd_sparse
 * operations, the momentum buffers its memory. */
#include "trainer/optim.h"
#include "shared/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sgd {
    float lr;
    float momentum;
    uint32_t nparams;
    uint64_t total;
    compute *dev;    /* the model's */
    cbuf *buf;       /* momentum buffers, same layout as the model's values; NULL without momentum */
    bool *has_buf;   /* per parameter: buf holds a value (a first step copies the gradient) */
    cbuf *stage;     /* a gradient from the host (sgd_step_dense), allocated on first use */
    cbuf *sp_host;   /* the model's own sparse values on the host where they have no view
                        (pinned; sgd_step); else NULL */
};

sgd *sgd_new(const dummy_model *m, double lr, double momentum, char *err, size_t errlen)
{
    if (!(lr > 0) || !(momentum >= 0 && momentum < 1)) {
        errbuf_set(err, errlen, "sgd: lr must be > 0 and momentum in [0, 1) (got lr %g, momentum %g)", lr,
                    momentum);
        return NULL;
    }
    uint32_t n = model_nparams(m);
    if (momentum > 0) {
        for (uint32_t i = 0; i < n; i++) {
            if (model_param(m, i)->sparse) {
                errbuf_set(err, errlen,
                            "sgd: momentum %g with the sparse gradient of %s is not supported (PyTorch's SGD "
                            "refuses it too): use momentum 0 or a dense embedding (sparse: false)",
                            momentum, model_param(m, i)->name);
                return NULL;
            }
        }
    }
    sgd *o = calloc(1, sizeof *o);
    if (!o)
        goto oom;
    o->lr = (float)lr;
    o->momentum = (float)momentum;
    o->nparams = n;
    o->total = model_total_size(m);
    o->dev = model_compute(m);
    if (momentum > 0) {
        o->has_buf = calloc(n, sizeof *o->has_buf);
        if (!o->has_buf)
            goto oom;
        if (!(o->buf = compute_alloc(o->dev, o->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, errlen))) {
            sgd_free(o);
            return NULL;
        }
    }
    /* A sparse embedding whose values have no host view (a device's
     * memory): sgd_step copies them to pinned memory first. */
    const int64_t *rows;
    const float *vals;
    if (n > 0 && model_param(m, 0)->sparse && (model_sparse_grad(m, &rows, &vals), !vals) &&
        !(o->sp_host = compute_alloc(o->dev, model_param(m, 0)->size, COMPUTE_F32, COMPUTE_MEM_PINNED, err,
                                     errlen))) {
        sgd_free(o);
        return NULL;
    }
    return o;
oom:
    sgd_free(o);
    errbuf_set(err, errlen, "sgd: out of memory");
    return NULL;
}

void sgd_free(sgd *o)
{
    if (!o)
        return;
    compute_release(o->dev, o->buf);
    compute_release(o->dev, o->stage);
    compute_release(o->dev, o->sp_host);
    free(o->has_buf);
    free(o);
}

void sgd_reset(sgd *o)
{
    if (o->has_buf)
        memset(o->has_buf, 0, o->nparams * sizeof *o->has_buf);
}

/* Parameter i's step from g (its size, on the layer). */
static void sgd_apply(sgd *o, dummy_model *m, uint32_t i, cspan g)
{
    assert(i < o->nparams && model_total_size(m) == o->total && model_compute(m) == o->dev);
    const model_param_info *pi = model_param(m, i);
    assert(!pi->sparse && g.n == pi->size);
    cspan buf = cspan_none();
    bool first = false;
    if (o->buf) {
        buf = cspan_at(o->buf, pi->offset, pi->size);
        first = !o->has_buf[i];
        o->has_buf[i] = true;
    }
    compute_sgd_dense(o->dev, model_values_span(m, i), g, buf, o->lr, o->momentum, first);
}

void sgd_step_param(sgd *o, dummy_model *m, uint32_t i)
{
    sgd_apply(o, m, i, model_grad_span(m, i));
}

int sgd_step_dense(sgd *o, dummy_model *m, uint32_t i, const float *grad, char *err, size_t errlen)
{
    const model_param_info *pi = model_param(m, i);
    if (grad == model_param_grad(m, i)) { /* the model's own */
        sgd_step_param(o, m, i);
        return 0;
    }
    if (!o->stage && !(o->stage = compute_alloc(o->dev, o->total, COMPUTE_F32, COMPUTE_MEM_DEVICE, err, errlen)))
        return -1;
    cspan g = cspan_at(o->stage, 0, pi->size);
    compute_write(o->dev, g, grad);
    sgd_apply(o, m, i, g);
    return 0;
}

int sgd_step_sparse(sgd *o, dummy_model *m, uint32_t i, const int64_t *rows, const float *vals, uint64_t nnz,
                    char *err, size_t errlen)
{
    assert(i < o->nparams && model_total_size(m) == o->total);
    const model_param_info *pi = model_param(m, i);
    assert(pi->sparse && !o->buf); /* sgd_new refused momentum for sparse models */
    uint64_t nrows = pi->shape[0], cols = pi->shape[1];
    for (uint64_t k = 0; k < nnz; k++) {
        if (rows[k] < 0 || (uint64_t)rows[k] >= nrows) {
            errbuf_set(err, errlen, "sgd: %s: sparse gradient row %lld out of range [0, %llu)", pi->name,
                        (long long)rows[k], (unsigned long long)nrows);
            return -1;
        }
    }
    compute_sgd_sparse(o->dev, model_values_span(m, i), cols, rows, vals, nnz, o->lr);
    return 0;
}

/* The model's own sparse gradient of parameter i on the host: its values'
 * view, or (memory without one) a copy into pinned memory, waited for —
 * sgd_sparse takes its values from the host. */
static const float *sgd_own_sparse(sgd *o, dummy_model *m, uint32_t i, const int64_t **rows, uint64_t *nnz)
{
    const float *vals;
    *nnz = model_sparse_grad(m, rows, &vals);
    if (vals || *nnz == 0)
        return vals;
    const model_param_info *pi = model_param(m, i);
    assert(o->sp_host && i == 0); /* sgd_new's */
    float *h = compute_host_view(o->dev, o->sp_host);
    compute_read(o->dev, cspan_sub(model_grad_span(m, i), 0, *nnz * pi->shape[1]), h);
    compute_wait(o->dev, compute_mark(o->dev));
    return h;
}

void sgd_step(sgd *o, dummy_model *m)
{
    for (uint32_t i = 0; i < o->nparams; i++) {
        if (model_param(m, i)->sparse) {
            /* The model's own rows are in range by construction; its values
             * are read through the host view (cpu: the buffer itself), or a
             * pinned copy where there is none. */
            const int64_t *rows;
            uint64_t nnz;
            const float *vals = sgd_own_sparse(o, m, i, &rows, &nnz);
            int rc = sgd_step_sparse(o, m, i, rows, vals, nnz, NULL, 0);
            assert(rc == 0);
            (void)rc;
        } else {
            sgd_step_param(o, m, i);
        }
    }
}
