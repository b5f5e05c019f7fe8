/* evring.h — numbered points on one GPU stream (marks), each an event
 * recorded there, for both roles: the trainer's compute marks
 * (trainer/compute_cuda.c: done, wait, the time between two) and the
 * server's jobs' timing events (server/cuda/device_cuda.c: one mark before
 * a job's work, one after its to-host copy).
 *
 * Marks are numbered 1, 2, ... in the order they were recorded; 0 is no
 * mark. The ring holds the events of the latest marks, oldest first, in one
 * of two ways, chosen at init:
 *
 *   overwrite  (the trainer) `cap` events, all made at init; a new mark
 *              records the oldest one again. An older mark is then no
 *              longer held: it cannot be timed, and evring_done answers
 *              it by the oldest mark still held — a later point in the
 *              same order, so never done too early.
 *   grow       (the server) events made as needed; a mark is held until
 *              the caller releases it (evring_release, in order: jobs
 *              complete in the order they were recorded), and the ring
 *              doubles rather than record a held one again: a job's time
 *              is never lost however many are in flight.
 *
 * Invariants: the held marks are marks - count + 1 .. marks, slot
 * (first + i) % cap holding the i-th oldest; done_upto <= marks; in grow
 * mode released <= marks. Once the stream has failed (evring_fail, or a
 * record that failed) nothing is recorded any more and every mark answers
 * done: no event completes after an error.
 *
 * Threads: one caller (the reactor, or the trainer's thread).
 */
#ifndef PSBENCH_GPU_EVRING_H
#define PSBENCH_GPU_EVRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/gpu/cugpu.h"

typedef uint64_t evmark; /* 0: none */

typedef struct evring {
    cugpu *g;
    cugpu_stream *s;
    cugpu_event **ev; /* cap slots; grow mode: NULL until first used */
    evmark *mark;     /* the mark each slot holds */
    size_t cap, first, count;
    bool grow;
    bool failed;
    evmark marks;     /* the latest mark's number */
    evmark done_upto; /* every mark up to this one is known done */
    evmark released;  /* grow: marks up to this one may be recorded again */
} evring;

/* A ring of `cap` (> 0) events on stream s of g: overwrite mode makes them
 * all now. 0, or -1 with g->err (evring_free frees what was made). */
int evring_init(evring *r, cugpu *g, cugpu_stream *s, size_t cap, bool grow);

/* The next mark, recorded on the stream: *m is its number (always, a
 * failed ring's too: the trainer numbers its marks on). 0, or -1 with g->err
 * (grow mode: no event could be made, *m = 0; either mode: the record
 * failed, and the ring has failed with it). A failed ring records nothing
 * and answers 0. */
int evring_mark(evring *r, evmark *m);

/* 0: the work before mark m is done (a failed ring: every mark); 1: not
 * yet; -1: an error (g->err). */
int evring_done(evring *r, evmark m);

/* Blocks until mark m is done: polls, backing off up to 50 us, and asks
 * the stream meanwhile whether it failed (no event completes after an
 * error). Blocking callers only (the trainer), never the reactor. 0, or -1
 * with g->err. */
int evring_wait(evring *r, evmark m);

/* Event e's latest record done, as evring_wait waits (the staging ring's
 * wait, shared/gpu/staging.h). 0, or -1 with g->err. */
int evring_wait_event(cugpu *g, cugpu_stream *s, cugpu_event *e);

/* Is mark m's event still its own (not recorded again, not released)? */
bool evring_held(const evring *r, evmark m);

/* The GPU time between marks a <= b, both held and done. 0 with *ms, or
 * -1 (not held, or the layer's error in g->err). */
int evring_elapsed(evring *r, evmark a, evmark b, float *ms);

/* Grow mode: marks up to m are no longer asked about; their events may be
 * recorded again. */
void evring_release(evring *r, evmark m);

/* The stream is idle (after a sync or a drain): every mark is done. Held
 * marks stay held (they can still be timed). */
void evring_reset(evring *r);

/* The stream failed: nothing is recorded from now on; every mark is done. */
void evring_fail(evring *r);

/* Frees every event (the stream must not still be recording them: free
 * after a sync, or once the stream is gone). */
void evring_free(evring *r);

#endif
