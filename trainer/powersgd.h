/* powersgd.h — PyTorch's PowerSGD communication hooks (torch/distributed/
 * algorithms/ddp_comm_hooks/powerSGD_hook.py: powerSGD_hook and
 * batched_powerSGD_hook, with PowerSGDState's parameters, psgd_conf in
 * shared/jobconf.h) on a dense bucket in host memory, over any sum
 * allreduce (psgd_sum_fn: allreduce_hook's Gloo group, a test's stand-in).
 *
 * One state per trainer and pass (PyTorch's PowerSGDState, made with the
 * DDP model: a pass starts from a fresh model, psgd_reset). Its iteration
 * counter is PyTorch's state.iter: one more after the last bucket of each
 * step (hook_bucket.last). While iter < start_powerSGD_iter a bucket is
 * allreduced plainly in fp32 (psbench's mean: the sum times mean_scale(N),
 * exactly allreduce_hook's). From then on, per bucket:
 *
 * powerSGD_hook (layer-wise):
 *   1. error feedback: the bucket's error from its previous step is added
 *      to it (use_error_feedback), and the sum kept as the input;
 *   2. each tensor (hook_bucket.tensors: rows x cols, PyTorch's
 *      view(shape[0], -1)) with r = min(rows, cols, rank) is compressed
 *      where psgd_should_compress says so (PyTorch's _should_compress:
 *      (rows + cols) r min_compression_rate < rows cols), else it goes
 *      uncompressed (so a bias, rows x 1, always does);
 *   3. the uncompressed tensors, packed, are allreduced and times 1/N;
 *   4. Q (cols x r per tensor) is drawn N(0, 1) and orthogonalized the
 *      first time (and every time without warm_start), else last step's Q
 *      is orthogonalized again; P = M Q; P allreduced (a sum: it is
 *      orthogonalized next, its scale does not matter);
 *   5. P orthogonalized; Q = M^T P; Q allreduced and times 1/N;
 *   6. M = P Q^T written into the bucket; the error = input - result.
 * Orders are PyTorch's: its bucket lists a rebuilt bucket's tensors last
 * first (hook_bucket.ddp_reversed), and powerSGD_hook groups the
 * compressed ones by shape (its shape_to_tensors), so P, Q and the Q draws
 * follow that order, not memory's.
 * batched_powerSGD_hook: the whole bucket, as PyTorch's flat buffer holds
 * it (its tensors in its order), as one side x side matrix,
 * side = ceil(sqrt(count)), zero-padded (error and the rank-1 tensors
 * included: nothing is split off), r = min(side, rank), steps 1, 4-6 on it.
 *
 * The random Q: PyTorch seeds torch's generator with state.rng.randint(1e9)
 * (numpy, seeded with random_seed) each time it draws. psbench does the
 * same with its own generator (shared/rng.h): the state's rng, seeded with
 * random_seed on stream RNG_STREAM_POWERSGD, gives rng_below(10^9), which
 * seeds a generator on the same stream whose rng_fill_normal fills the Qs
 * in PyTorch's order, one fill per Q. Identical on every trainer, so every
 * trainer starts from the same Q; not torch's stream: PyTorch made to draw
 * these Qs ends where psbench does, within rounding
 * (tests/integration/test_compress_pytorch.py).
 *
 * Arithmetic: the matrix products and the Gram-Schmidt norms and dots
 * accumulate in double, in a fixed order, and round once to float (no
 * BLAS: the hook's thread runs beside backward's products, and every
 * trainer, on any host, computes M = P Q^T from the same P and Q to the
 * same bits, so the trainers stay identical); powersgd.c is compiled
 * without FMA contraction. Orthogonalization is PyTorch's Gram-Schmidt for
 * every rank (PyTorch switches to a QR factorization above rank 2: the
 * same column space, the columns' signs aside, which P P^T M cancels).
 *
 * Only dense buckets come here: a sparse model's embedding bucket is
 * allreduce_hook's sparse allreduce, fp32, and where it is a step's last
 * the hook ends the step (psgd_step_done).
 *
 * Bytes: a plain step moves the bucket's floats, a compressed one its
 * P and Q and uncompressed floats (batched: side x r twice), 4 bytes each,
 * sent and as many received (psgd_stats).
 */
#ifndef PSBENCH_POWERSGD_H
#define PSBENCH_POWERSGD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/jobconf.h"
#include "trainer/hook.h"

/* Sum x[0..n) over the group in place (every member the same bits). 0, or
 * -1 with err. */
typedef int (*psgd_sum_fn)(void *ctx, float *x, size_t n, char *err, size_t errlen);

typedef struct psgd psgd;

/* Figures of a state since it was made or reset. */
typedef struct psgd_stats {
    uint64_t iter; /* PowerSGDState.iter: steps done */
    uint64_t plain_steps, compressed_steps;
    uint64_t plain_bytes, compressed_bytes; /* allreduced in each kind of step (each way) */
    uint64_t numel_before, numel_after;     /* PyTorch's total_numel_before/after_compression */
} psgd_stats;

/* A state for a group of world_size trainers. NULL: out of memory. */
psgd *psgd_new(const psgd_conf *p, uint32_t world_size);
void psgd_free(psgd *s);
/* A fresh state (a new pass): iteration 0, no error, no P or Q, the
 * random stream from its start. */
void psgd_reset(psgd *s);
/* Reduce dense bucket b (host memory, b->tensors set) to its mean
 * (plainly) or its mean approximation (compressed), in place, through sum;
 * *bytes: the floats it allreduced times 4. 0, or -1 with err (a failed
 * sum, memory). */
int psgd_reduce(psgd *s, hook_bucket *b, psgd_sum_fn sum, void *ctx, uint64_t *bytes, char *err, size_t errlen);
/* A step's last bucket was not this state's (a sparse one, which stays
 * fp32): the step is done all the same. psgd_reduce counts the steps
 * whose last bucket it reduced. */
void psgd_step_done(psgd *s);
void psgd_get_stats(const psgd *s, psgd_stats *o);

/* ---- the math, for tests ---------------------------------------------------- */

/* PyTorch's _should_compress: whether a rows x cols matrix at rank r is
 * worth compressing. */
bool psgd_should_compress(uint64_t rows, uint64_t cols, uint32_t r, double min_compression_rate);
/* Gram-Schmidt on the columns of a rows x cols row-major matrix m, in
 * place (PyTorch's _orthogonalize_gram_schmidt): each column divided by
 * its norm plus epsilon (a zero column with epsilon 0 becomes NaN, as in
 * PyTorch: the reason for orthogonalization_epsilon), then its projection
 * taken from every later column. */
void psgd_orthogonalize(float *m, uint64_t rows, uint32_t cols, float epsilon);
/* Bucket id's error held for its next step (n floats; batched: side^2),
 * NULL where it has none (no error feedback, not compressed yet). */
const float *psgd_error(const psgd *s, uint32_t id, uint64_t *n);
/* batched_powerSGD_hook's side: ceil(sqrt(count)). */
uint64_t psgd_side(uint64_t count);
/* The floats a compressed step of bucket b allreduces (P, Q and the
 * uncompressed tensors; batched: 2 side r). */
uint64_t psgd_compressed_floats(const psgd_conf *p, const hook_bucket *b);

#endif
