/* loss_check.h — a training loss that stops being a number.
 *
 * A learning rate far too high (the trainer configuration's "lr") makes
 * the parameters overflow within a batch or two; every loss after that is
 * NaN or infinite, and so is everything the run would report. The trainer
 * must not carry on as if nothing happened, nor drop the values: each
 * workload hands every batch's loss to loss_check_batch, which keeps the
 * first one that is not finite (where: the epoch of the pass and the batch
 * in that epoch, both from 0, and the value) and says whether to stop. By
 * default training stops there and the run fails with the reason; with the
 * master's --allow-divergence it goes on and the run ends done with a
 * warning (the assignment's "allow_divergence").
 *
 * JSON has no NaN or infinity: loss_json writes those values as the strings
 * "nan", "inf" and "-inf" (every other loss as a number), wherever a loss
 * is reported (loss_per_epoch, diverged.loss).
 */
#ifndef PSBENCH_LOSS_CHECK_H
#define PSBENCH_LOSS_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loss_check {
    bool allow;            /* keep training after a divergence */
    bool diverged;         /* a loss that is not finite was seen this pass */
    uint64_t epoch, batch; /* the first one: epoch of the pass, batch in the epoch (from 0) */
    double loss;           /* its value: NaN or +-inf */
} loss_check;

/* A new pass: nothing seen yet. */
void loss_check_start(loss_check *c, bool allow);
/* One batch's loss. 0: go on (it is finite, or divergence is allowed; the
 * first divergence is kept either way). -1: the loss diverged and training
 * must stop; err says where ("loss diverged at epoch E, batch B (loss =
 * nan)"). */
int loss_check_batch(loss_check *c, uint64_t epoch, uint64_t batch, double loss, char *err, size_t errlen);
/* The kept divergence as one line: where (in the pass named `pass`, if not
 * NULL) and the value, then what to do about it unless it was allowed. */
void loss_check_reason(const loss_check *c, const char *pass, char *buf, size_t len);
/* A loss as JSON: a number, or "nan", "inf", "-inf". */
json_t *loss_json(double v);
/* {"epoch", "batch", "loss"} (and "pass" if not NULL) of the kept
 * divergence; NULL if there is none. */
json_t *loss_check_json(const loss_check *c, const char *pass);

#endif
