/* steptimer.h — a training step's metrics timed on the trainer's device,
 * as the seed's record_start(..., cuda=True) times them with CUDA events.
 *
 * A workload names its marks (0, 1, ... in the step's order) and the
 * metrics measured between two of them (steptimer_span: forward between
 * marks 0 and 1, and so on); a step may add samples between marks it took
 * itself (steptimer_sample: each bucket's hook metric, from the mark after
 * its gradients to the mark after its mean is back on the device). Each
 * step takes its marks (steptimer_mark: compute_mark on the trainer's
 * stream) and ends with steptimer_end, which
 * keeps the step's marks and records, with compute_elapsed, every kept
 * step whose last mark is done — never waiting: a step's samples usually
 * come in at the end of the next step (whose forward reads its loss, so
 * the stream has drained). steptimer_flush, at the end of a pass, waits
 * for the rest (the stream is synchronised there, as the seed's
 * torch.cuda.synchronize).
 *
 * On the cpu device nothing is timed here (steptimer_on is false): the
 * workload keeps its wall-clock metrics as before, and no span is marked
 * GPU-timed. On any other device (cuda, fake-cuda, the staged test device)
 * the spans' metrics are marked GPU-timed in the registry
 * (metrics_set_gpu_timed), which the trainer's reports carry to the master
 * (docs/protocol.md, `gpu_timed`).
 */
#ifndef PSBENCH_STEPTIMER_H
#define PSBENCH_STEPTIMER_H

#include <stdbool.h>
#include <stdint.h>

#include "shared/metrics.h"
#include "trainer/compute.h"

#define STEPT_MARKS 8   /* marks of one step */
#define STEPT_SPANS 6   /* metrics of one step */
#define STEPT_PENDING 8 /* steps kept until their marks are done */

typedef struct stept_span {
    stats *st;
    uint8_t from, to; /* mark indices */
} stept_span;

/* A sample between two marks a workload took itself (a bucket's). */
typedef struct stept_sample {
    stats *st;
    cmark from, to;
    double ms; /* read when the step is recorded */
} stept_sample;

/* One step's marks and its own samples (grown as needed, kept for the
 * next steps: one owner, the timer, frees them in steptimer_release). */
typedef struct stept_step {
    cmark mark[STEPT_MARKS];
    stept_sample *sample;
    uint32_t nsample, cap;
} stept_step;

typedef struct steptimer {
    compute *dev;
    bool on; /* the device times (not the cpu) */
    stept_span span[STEPT_SPANS];
    uint32_t nspans, nmarks;
    stept_step cur;                  /* this step's */
    stept_step pend[STEPT_PENDING];  /* ended steps, oldest at head */
    uint32_t head, npend;
    uint64_t lost; /* steps not timed: a mark too old (compute_elapsed -1), or no memory for a sample */
    bool warned;
} steptimer;

/* On device dev (times unless it is the cpu). */
void steptimer_init(steptimer *t, compute *dev);
/* Frees what steptimer_sample grew (the timer itself is the caller's). */
void steptimer_release(steptimer *t);
static inline bool steptimer_on(const steptimer *t) { return t->on; }
/* Metric `key` of m is the time from mark `from` to mark `to` (from < to <
 * STEPT_MARKS): marked GPU-timed in m when the timer is on. Returns its
 * stats (NULL: out of memory). */
stats *steptimer_span(steptimer *t, metrics *m, const char *key, unsigned from, unsigned to);
/* Mark i of this step, on the device's order (a no-op when off). */
void steptimer_mark(steptimer *t, unsigned i);
/* A sample of st (from metrics_get: it is marked GPU-timed) from mark
 * `from` to mark `to` (compute_mark of the timer's device, this step's,
 * both taken before its last mark): recorded with the step's spans. A
 * no-op when off. */
void steptimer_sample(steptimer *t, stats *st, cmark from, cmark to);
/* The step's marks are taken: kept, and every kept step that is done is
 * recorded (no wait; at most STEPT_PENDING kept: the oldest is waited for
 * beyond that). */
void steptimer_end(steptimer *t);
/* Every kept step recorded, waiting for its marks (the end of a pass). */
void steptimer_flush(steptimer *t);
/* Forget the kept steps (a pass that failed, before the next). */
void steptimer_drop(steptimer *t);

#endif
