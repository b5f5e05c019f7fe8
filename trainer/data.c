/* data.c — DummyData generation, its PRNG, and round-robin sharding (see
 * data.h for the exact order of draws, which is part of the contract: all
 * hosts must produce the same bytes from the same seed). */
#include "trainer/data.h"
#include "shared/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- DummyData --------------------------------------------------------------- */

/* Limits that keep every size computation far from overflow and every
 * per-batch count in a uint32. */
#define DATA_MAX_VAL ((uint64_t)1 << 40)
#define DATA_MAX_LEN ((uint64_t)1 << 24)
#define DATA_MAX_ELEMS ((uint64_t)1 << 34) /* sample_count x sample_length */

static int data_check_config(const data_config *c, char *err, size_t errlen)
{
    if (c->max_val == 0 || c->max_val > DATA_MAX_VAL) {
        errbuf_set(err, errlen, "data: max_val must be in 1..%llu (got %llu)",
                     (unsigned long long)DATA_MAX_VAL, (unsigned long long)c->max_val);
        return -1;
    }
    if (c->sample_count == 0 || c->sample_length == 0 || c->sample_length > DATA_MAX_LEN) {
        errbuf_set(err, errlen, "data: sample_count must be >= 1 and sample_length in 1..%llu (got %llu, %llu)",
                     (unsigned long long)DATA_MAX_LEN, (unsigned long long)c->sample_count,
                     (unsigned long long)c->sample_length);
        return -1;
    }
    if (c->sample_count > DATA_MAX_ELEMS / c->sample_length) {
        errbuf_set(err, errlen, "data: sample_count x sample_length (%llu x %llu) is too large",
                     (unsigned long long)c->sample_count, (unsigned long long)c->sample_length);
        return -1;
    }
    if (c->sparsity_percentage > 100) {
        errbuf_set(err, errlen, "data: sparsity_percentage must be in 0..99 (got %u)", c->sparsity_percentage);
        return -1;
    }
    /* Integer arithmetic: the exact floor. (The seed computes
     * max_val * ((100 - s) / 100.0) in floating point, which can land just
     * below an integer, e.g. 100 * 0.29 = 28.999..., and then truncates to
     * one less; psbench takes the exact value.) */
    uint64_t count = c->max_val * (100 - c->sparsity_percentage) / 100;
    if (count == 0) {
        errbuf_set(err, errlen,
                     "data: sparsity_percentage %u of max_val %llu leaves no index values to draw from",
                     c->sparsity_percentage, (unsigned long long)c->max_val);
        return -1;
    }
    return 0;
}

dummy_data *data_generate(const data_config *cfg, uint64_t seed, char *err, size_t errlen)
{
    if (data_check_config(cfg, err, errlen) < 0)
        return NULL;
    dummy_data *d = calloc(1, sizeof *d);
    int64_t *elems = malloc(cfg->max_val * sizeof *elems); /* scratch: the shuffled values */
    if (!d || !elems)
        goto oom;
    d->cfg = *cfg;
    d->index_count = cfg->max_val * (100 - cfg->sparsity_percentage) / 100;
    d->indices = malloc(cfg->sample_count * cfg->sample_length * sizeof *d->indices);
    d->targets = malloc(cfg->sample_count * sizeof *d->targets);
    if (!d->indices || !d->targets)
        goto oom;

    rng r;
    rng_seed(&r, seed, RNG_STREAM_DATA);
    for (uint64_t i = 0; i < cfg->max_val; i++)
        elems[i] = (int64_t)i;
    for (uint64_t i = cfg->max_val - 1; i >= 1; i--) {
        uint64_t j = rng_below(&r, i + 1);
        int64_t t = elems[i];
        elems[i] = elems[j];
        elems[j] = t;
    }
    uint64_t n = cfg->sample_count * cfg->sample_length;
    for (uint64_t k = 0; k < n; k++)
        d->indices[k] = elems[rng_below(&r, d->index_count)];
    for (uint64_t s = 0; s < cfg->sample_count; s++)
        d->targets[s] = (int64_t)rng_below(&r, cfg->max_val);
    free(elems);
    return d;
oom:
    free(elems);
    data_free(d);
    errbuf_set(err, errlen, "data: out of memory generating %llu x %llu samples",
                 (unsigned long long)cfg->sample_count, (unsigned long long)cfg->sample_length);
    return NULL;
}

void data_free(dummy_data *d)
{
    if (!d)
        return;
    free(d->indices);
    free(d->targets);
    free(d);
}

/* ---- sharding ------------------------------------------------------------------- */

data_shard *data_shard_new(const dummy_data *d, uint32_t batch_size, uint32_t rank, uint32_t ntrainers,
                           char *err, size_t errlen)
{
    if (batch_size == 0 || ntrainers == 0 || rank >= ntrainers) {
        errbuf_set(err, errlen, "data: invalid sharding (batch_size %u, rank %u of %u trainers)", batch_size,
                     rank, ntrainers);
        return NULL;
    }
    uint64_t samples = d->cfg.sample_count;
    uint64_t total = (samples + batch_size - 1) / batch_size;
    uint64_t per = total / ntrainers;
    if (per == 0) {
        errbuf_set(err, errlen,
                     "data: %llu samples make %llu batch%s of %u, fewer than the %u trainers "
                     "(lower the batch size or use more samples)",
                     (unsigned long long)samples, (unsigned long long)total, total == 1 ? "" : "es", batch_size,
                     ntrainers);
        return NULL;
    }
    data_shard *s = calloc(1, sizeof *s);
    if (s)
        s->batches = calloc(per, sizeof *s->batches);
    if (!s || !s->batches) {
        data_shard_free(s);
        errbuf_set(err, errlen, "data: out of memory");
        return NULL;
    }
    s->nbatches = per;
    s->total_batches = total;
    s->dropped = total % ntrainers;
    uint64_t L = d->cfg.sample_length;
    for (uint64_t k = 0; k < per; k++) {
        uint64_t b = rank + k * ntrainers;
        uint64_t first = b * batch_size;
        assert(b < total && first < samples);
        uint64_t len = samples - first < batch_size ? samples - first : batch_size;
        data_batch *o = &s->batches[k];
        o->indices = d->indices + first * L;
        o->targets = d->targets + first;
        o->len = (uint32_t)len;
        o->sample_length = (uint32_t)L;
        o->number = b;
        if (o->len > s->max_len)
            s->max_len = o->len;
    }
    return s;
}

void data_shard_free(data_shard *s)
{
    if (!s)
        return;
    free(s->batches);
    free(s);
}
