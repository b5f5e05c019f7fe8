/* loss_check.c — a training loss that stops being a number (see loss_check.h). */
#include "trainer/loss_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

void loss_check_start(loss_check *c, bool allow)
{
    c->allow = allow;
    c->diverged = false;
    c->epoch = c->batch = 0;
    c->loss = 0;
}

static const char *loss_check_word(double v)
{
    return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

int loss_check_batch(loss_check *c, uint64_t epoch, uint64_t batch, double loss, char *err, size_t errlen)
{
    if (isfinite(loss))
        return 0;
    if (!c->diverged) {
        c->diverged = true;
        c->epoch = epoch;
        c->batch = batch;
        c->loss = loss;
    }
    if (c->allow)
        return 0;
    snprintf(err, errlen, "loss diverged at epoch %" PRIu64 ", batch %" PRIu64 " (loss = %s)", c->epoch, c->batch,
             loss_check_word(c->loss));
    return -1;
}

void loss_check_reason(const loss_check *c, const char *pass, char *buf, size_t len)
{
    snprintf(buf, len, "loss diverged at epoch %" PRIu64 ", batch %" PRIu64 "%s%s%s (loss = %s)%s", c->epoch,
             c->batch, pass ? " of the " : "", pass ? pass : "", pass ? " pass" : "", loss_check_word(c->loss),
             c->allow ? ""
                      : ": lower the learning rate (the trainer configuration's lr), or let the run go on with "
                        "psbench-master --allow-divergence");
}

json_t *loss_json(double v)
{
    return isfinite(v) ? json_real(v) : json_string(loss_check_word(v));
}

json_t *loss_check_json(const loss_check *c, const char *pass)
{
    if (!c->diverged)
        return NULL;
    json_t *o = json_pack("{s:I, s:I, s:o}", "epoch", (json_int_t)c->epoch, "batch", (json_int_t)c->batch, "loss",
                          loss_json(c->loss));
    if (o && pass)
        json_object_set_new(o, "pass", json_string(pass));
    return o;
}
