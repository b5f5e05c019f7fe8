/* config_passes.c — what a resolved run configuration asks of a pass
 * (see config.h): the batches each trainer runs in the timed pass and the
 * warm-up, and the epochs of data the timed pass spans, from --epochs or
 * --steps and the data's or the model's batches. Below the checks and
 * the JSON, which both use them. */
#include "master/config_passes.h"

/* Batches in one epoch of the job's data, per trainer (0: not known). */
static uint64_t config_epoch_batches(const run_config *c)
{
    uint64_t t = (uint64_t)c->ntrainer + c->ncudatrainer;
    if (c->resolved.loaded && c->resolved.batch_update)
        return c->resolved.bu.batches;
    if (c->resolved.loaded && c->resolved.hybrid)
        return c->resolved.hy.batches;
    if (!c->resolved.loaded || c->resolved.samples == 0 || c->batch_size == 0 || t == 0)
        return 0;
    uint64_t nb = (c->resolved.samples + c->batch_size - 1) / c->batch_size; /* DataLoader, last partial */
    return nb / t;
}

/* `steps` as a pass can run them: the HybridModel's passes are whole
 * epochs (its epoch metric is one), so they are rounded up to those. */
static uint64_t config_steps_in_pass(const run_config *c, uint64_t steps)
{
    uint64_t e = config_epoch_batches(c);
    if (c->resolved.loaded && c->resolved.hybrid && e > 0)
        return (steps + e - 1) / e * e;
    return steps;
}

uint64_t config_batches_per_pass(const run_config *c)
{
    if (c->steps)
        return config_epoch_batches(c) ? config_steps_in_pass(c, c->steps) : 0;
    return c->epochs * config_epoch_batches(c);
}

uint64_t config_pass_epochs(const run_config *c)
{
    uint64_t e = config_epoch_batches(c);
    if (!c->steps)
        return c->epochs;
    return e ? (config_steps_in_pass(c, c->steps) + e - 1) / e : 1;
}

uint64_t config_batches_warmup(const run_config *c)
{
    if (c->warmup_steps)
        return config_epoch_batches(c) ? config_steps_in_pass(c, c->warmup_steps) : 0;
    if (c->resolved.loaded && c->resolved.hybrid)
        return c->warmup_cycles * c->resolved.hy.batches;
    return config_batches_per_pass(c);
}
