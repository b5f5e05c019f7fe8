/* data.h — the seed's DummyData, generated deterministically, and the
 * share of it that one trainer trains on.
 *
 * DummyData(max_val, sample_count, sample_length, sparsity_percentage):
 * index_count = floor(max_val * (100 - sparsity_percentage) / 100) distinct
 * values are taken from a shuffled 0..max_val-1; each of the sample_count
 * samples is sample_length indices drawn uniformly from those index_count
 * values (repeats allowed); each target is uniform in [0, max_val).
 *
 * psbench draws everything from one documented PRNG (rng below) so
 * that every host generates the same bytes from the same seed. The draws
 * happen in this order, all from the stream (seed, RNG_STREAM_DATA):
 *   1. Fisher-Yates shuffle of e = [0, 1, ..., max_val-1]:
 *      for i = max_val-1 down to 1: j = below(i+1); swap(e[i], e[j]);
 *      the index values are e[0 .. index_count-1].
 *   2. indices, sample-major: for s in samples, for t in positions:
 *      index[s][t] = e[below(index_count)].
 *   3. targets: for s in samples: target[s] = below(max_val).
 *
 * Sharding (data_shard_new): the samples are cut into batches of batch_size
 * in sample order, the last partial batch being a batch of its own (a
 * DataLoader without drop_last). Batches are dealt round-robin: trainer r
 * of n gets batches r, r+n, r+2n, ...; every trainer keeps only the first
 * floor(nbatches / n) of its share so all trainers run the same number of
 * steps (the seed's DDP trainers must: every step is a collective). The
 * nbatches % n batches left over are dropped (always the last ones).
 */
#ifndef PSBENCH_DATA_H
#define PSBENCH_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "shared/rng.h"

/* ---- DummyData ----------------------------------------------------------- */

/* The values of a data configuration (configs/data_configurations.json,
 * "configurations": max_val, sample_count, sample_length,
 * sparsity_percentage; the seed's older names input_samples and input_dim
 * are aliases of sample_count and sample_length — resolving them is the
 * config reader's job). */
typedef struct data_config {
    uint64_t max_val;
    uint64_t sample_count;
    uint64_t sample_length;
    uint32_t sparsity_percentage; /* 0..99 */
} data_config;

/* A generated data set. Read-only after data_generate; the arrays are owned
 * by the struct and released by data_free. Indices and targets are int64,
 * like PyTorch's LongTensor and psbench's sparse wire format. */
typedef struct dummy_data {
    data_config cfg;
    uint64_t index_count; /* distinct index values available */
    int64_t *indices;     /* sample_count x sample_length, row-major */
    int64_t *targets;     /* sample_count */
} dummy_data;

/* Generate the data set for cfg from seed. Returns NULL with a reason in
 * err on an invalid configuration (zero sizes, sparsity that leaves no index
 * values, sizes that overflow) or when out of memory. */
dummy_data *data_generate(const data_config *cfg, uint64_t seed, char *err, size_t errlen);
void data_free(dummy_data *d);

/* ---- a trainer's shard ----------------------------------------------------- */

/* One batch: views into the dummy_data it was cut from. */
typedef struct data_batch {
    const int64_t *indices; /* len x sample_length */
    const int64_t *targets; /* len */
    uint32_t len;           /* samples in this batch: batch_size, or fewer for the last */
    uint32_t sample_length;
    uint64_t number;        /* the batch's position in the whole data set (0-based) */
} data_batch;

typedef struct data_shard {
    uint64_t nbatches;   /* this trainer's batches: floor(total_batches / ntrainers) */
    data_batch *batches; /* nbatches, in training order */
    uint64_t total_batches; /* ceil(sample_count / batch_size) */
    uint64_t dropped;    /* total_batches % ntrainers: batches no trainer trains on */
    uint32_t max_len;    /* the largest batch's len (size model buffers with this) */
} data_shard;

/* Trainer `rank` of `ntrainers`'s share of d, cut into batches of
 * batch_size. The shard points into d, which must outlive it. Returns NULL
 * with a reason in err when the arguments are invalid or when there are
 * fewer batches than trainers (some trainer would get none). The caller
 * should warn when shard->dropped > 0. */
data_shard *data_shard_new(const dummy_data *d, uint32_t batch_size, uint32_t rank, uint32_t ntrainers,
                           char *err, size_t errlen);
void data_shard_free(data_shard *s);

#endif
