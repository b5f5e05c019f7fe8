/* optim.h — SGD with optional momentum for a dummy_model, PyTorch's
 * semantics (torch.optim.SGD, dampening 0, no Nesterov, no weight decay):
 *
 *   momentum == 0:  p -= lr * g
 *   momentum  > 0:  buf = g on a parameter's first step,
 *                   buf = momentum * buf + g afterwards;  p -= lr * buf
 *
 * All arithmetic is float32 (lr and momentum are rounded to float once).
 *
 * Sparse gradients (a COO row list for the embedding of a sparse model):
 * p[row] -= lr * g_row for each listed row, nothing else touched; a row
 * listed twice is applied twice (an uncoalesced sparse tensor sums). With
 * momentum a sparse gradient is refused: PyTorch's SGD raises an error for
 * that combination too (a momentum buffer would have to decay rows the
 * gradient does not list, i.e. update every row anyway), so sgd_new
 * rejects momentum > 0 for a model with a sparse parameter.
 *
 * The gradient can be the model's own (sgd_step, sgd_step_param, after
 * model_backward; the hooks leave the mean there) or an outside one on the
 * host, e.g. the rows received from the parameter servers (sgd_step_dense /
 * sgd_step_sparse). sgd_step's sparse embedding takes its values from
 * the host: their view, or where they have none (a device's memory) a copy
 * into pinned memory the optimizer owns, waited for.
 *
 * The steps run on the model's compute layer (compute.h: its sgd_dense and
 * sgd_sparse operations, cmath.h's arithmetic); the momentum buffers are
 * its memory.
 */
#ifndef PSBENCH_OPTIM_H
#define PSBENCH_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/model.h"

typedef struct sgd sgd;

/* An optimizer for the parameters of m (its layout; m itself is passed to
 * each step). lr > 0, momentum in [0, 1). Returns NULL with a reason in err
 * for invalid values, momentum with a sparse model, or out of memory. */
sgd *sgd_new(const dummy_model *m, double lr, double momentum, char *err, size_t errlen);
void sgd_free(sgd *o);
/* Forget the momentum: the next step of every parameter is a first one (a
 * fresh optimizer for a new pass). */
void sgd_reset(sgd *o);

/* One step for every parameter from the model's own gradients (a sparse
 * embedding from model_sparse_grad). */
void sgd_step(sgd *o, dummy_model *m);

/* One step for dense parameter i from the model's own gradient buffer. */
void sgd_step_param(sgd *o, dummy_model *m, uint32_t i);

/* One step for dense parameter i from grad, host memory
 * (model_param(m, i)->size floats; may be model_param_grad(m, i): then as
 * sgd_step_param). Another gradient is written to a staging buffer of the
 * layer first (allocated on first use). 0, or -1 with err (out of memory). */
int sgd_step_dense(sgd *o, dummy_model *m, uint32_t i, const float *grad, char *err, size_t errlen);

/* One step for sparse parameter i from nnz rows (host memory): rows[k] <
 * shape[0], vals nnz x shape[1]. Rows need not be sorted or unique. Returns 0, or -1 with
 * a reason in err (and nothing updated) if a row is out of range — the
 * rows may come off the network. */
int sgd_step_sparse(sgd *o, dummy_model *m, uint32_t i, const int64_t *rows, const float *vals, uint64_t nnz,
                    char *err, size_t errlen);

#endif
