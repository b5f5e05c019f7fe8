/* optim.c — SGD with momentum (see optim.h for the exact semantics). */
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
    float *buf;      /* momentum buffers, same layout as the model's values; NULL without momentum */
    bool *has_buf;   /* per parameter: buf holds a value (a first step copies the gradient) */
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
    if (momentum > 0) {
        o->buf = malloc(o->total * sizeof *o->buf);
        o->has_buf = calloc(n, sizeof *o->has_buf);
        if (!o->buf || !o->has_buf)
            goto oom;
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
    free(o->buf);
    free(o->has_buf);
    free(o);
}

void sgd_step_dense(sgd *o, dummy_model *m, uint32_t i, const float *grad)
{
    assert(i < o->nparams && model_total_size(m) == o->total);
    const model_param_info *pi = model_param(m, i);
    assert(!pi->sparse);
    float *p = model_param_values(m, i);
    uint64_t n = pi->size;
    float nlr = -o->lr;
    if (!o->buf) {
        for (uint64_t k = 0; k < n; k++)
            p[k] += nlr * grad[k];
        return;
    }
    float *b = o->buf + pi->offset;
    if (!o->has_buf[i]) {
        memcpy(b, grad, n * sizeof *b); /* PyTorch: buf = clone(grad) on the first step */
        o->has_buf[i] = true;
    } else {
        for (uint64_t k = 0; k < n; k++)
            b[k] = o->momentum * b[k] + grad[k];
    }
    for (uint64_t k = 0; k < n; k++)
        p[k] += nlr * b[k];
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
    float *p = model_param_values(m, i);
    float nlr = -o->lr;
    for (uint64_t k = 0; k < nnz; k++) {
        float *row = p + (uint64_t)rows[k] * cols;
        const float *g = vals + k * cols;
        for (uint64_t c = 0; c < cols; c++)
            row[c] += nlr * g[c];
    }
    return 0;
}

void sgd_step(sgd *o, dummy_model *m)
{
    for (uint32_t i = 0; i < o->nparams; i++) {
        if (model_param(m, i)->sparse) {
            const int64_t *rows;
            const float *vals;
            uint64_t nnz = model_sparse_grad(m, &rows, &vals);
            /* The model's own rows are in range by construction. */
            int rc = sgd_step_sparse(o, m, i, rows, vals, nnz, NULL, 0);
            assert(rc == 0);
            (void)rc;
        } else {
            sgd_step_dense(o, m, i, model_param_grad(m, i));
        }
    }
}
