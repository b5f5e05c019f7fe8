/* cuda_peer.c — the cuda device's peers (CUDA IPC, device.h): a trainer on
 * this GPU exports the memory its gradients live in and an event; the
 * device opens both once (devpeer), makes its stream wait for the event's
 * latest record when the transport says a push from it came (peer_wait),
 * and folds from that memory with the same kernels that fold from staging —
 * the source pointer is the peer's (f32 pushes; narrow ones, whose first is
 * copied into the stash as it is). A peer is closed once the next job
 * submitted after its close has completed (every fold from it was enqueued
 * before that job: the job engine submits that barrier, device_cuda.c's
 * cuda_peer_close, and parks the peer here), or at a drain.
 *
 * Calls down into cuda_batch.c only (the batch, the failure).
 */
#include "server/cuda/cuda_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cuda_gpu_id(device *d) { return ((cuda_device *)d)->gpu->uuid; }

devpeer *cuda_peer_open(device *d, const uint8_t *mem, uint64_t bytes, const uint8_t *ev, char *err, size_t errlen)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    const cugpu_ops *o = c->gpu->ops;
    devpeer *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cugpu_ipc_handle hm, he;
    memcpy(hm.bytes, mem, sizeof hm.bytes);
    memcpy(he.bytes, ev, sizeof he.bytes);
    if (c->failed) {
        snprintf(err, errlen, "%s", c->error);
        free(p);
        return NULL;
    }
    if (devmem_is_none(p->base = o->ipc_open(c->gpu, &hm, bytes))) {
        snprintf(err, errlen, "GPU memory: %s", c->gpu->err);
        free(p);
        return NULL;
    }
    if (!(p->ev = o->event_open(c->gpu, &he))) {
        snprintf(err, errlen, "event: %s", c->gpu->err);
        o->ipc_close(c->gpu, p->base);
        free(p);
        return NULL;
    }
    p->bytes = bytes;
    c->npeers++;
    return p;
}

static void cuda_peer_unmap(cuda_device *c, devpeer *p)
{
    assert(c->npeers > 0 && !p->wait_pending);
    c->npeers--;
    c->gpu->ops->event_free(c->gpu, p->ev);
    c->gpu->ops->ipc_close(c->gpu, p->base);
    free(p);
}

void cuda_peer_park(cuda_device *c, devpeer *p, uint64_t after)
{
    p->close_after = after;
    p->next = c->closing;
    c->closing = p;
}

/* Closed peers whose folds are all done (every one of them, after a drain
 * or once the device failed: nothing runs any more). */
void cuda_peers_reap(cuda_device *c, bool all)
{
    for (devpeer **pp = &c->closing; *pp;) {
        devpeer *p = *pp;
        if (all || c->failed || c->completed >= p->close_after) {
            *pp = p->next;
            cuda_peer_unmap(c, p);
        } else {
            pp = &p->next;
        }
    }
}

/* A push from p came: the stream must wait for p's event before it reads
 * p's memory. The wait is enqueued with the next op that may (the batch of
 * the iteration's small folds, a big fold, a job): one cudaStreamWaitEvent
 * per trainer and iteration however many of its pushes came in it
 * (cuda_batch.c's cuda_peers_wait_now enqueues them), on the event's
 * record as it stands then — the latest, which covers every push
 * read before (each recorded before it was sent), and never waits on
 * anything of ours (issue 44). */
void cuda_peer_wait(device *d, devpeer *p)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    if (c->failed || p->wait_pending)
        return;
    p->wait_pending = true;
    p->wnext = c->waiting;
    c->waiting = p;
}


void cuda_fold_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at, size_t n,
                    float s)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(acc->jobs == 0 && (elem_off + n) * sizeof(float) <= acc->bytes);
    assert(at % sizeof(float) == 0 && at <= p->bytes && n * sizeof(float) <= p->bytes - at);
    acc->host_valid = false;
    if (c->failed || n == 0)
        return;
    const float *src = devmem_f32(devmem_at(p->base, at)).p;
    if (n * sizeof(float) <= CUDA_SMALL) { /* batched with this iteration's other small folds */
        cuda_defer_desc(c, cuda_fold_op(op), acc, elem_off, src, n, s);
        return;
    }
    cuda_emit_batch(c); /* the small folds into acc before this one */
    psb_launch l = {.kernel = PSB_K_FOLD};
    l.u.fold.op = cuda_fold_op(op);
    l.u.fold.acc = cuda_f32(acc, elem_off);
    l.u.fold.src = src;
    l.u.fold.n = n;
    l.u.fold.s = s;
    if (c->gpu->ops->launch(c->gpu, c->stream, &l) < 0)
        cuda_fail(c, c->gpu->err);
}

/* bytes of the peer's memory at `at` into dst at byte off (a narrow push's
 * first values, stashed as they are), on the stream. */
void cuda_copy_peer(device *d, devbuf *dst, uint64_t off, devpeer *p, uint64_t at, size_t bytes)
{
    cuda_device *c = (cuda_device *)d;
    c->area_dst = NULL;
    assert(dst->jobs == 0 && off <= dst->bytes && bytes <= dst->bytes - off);
    assert(at <= p->bytes && bytes <= p->bytes - at);
    dst->host_valid = false;
    if (c->failed || bytes == 0)
        return;
    cuda_emit_batch(c); /* the small folds into dst before this */
    if (c->gpu->ops->copy_d2d(c->gpu, c->stream, devmem_at(dst->dev, off), devmem_at(p->base, at), bytes) < 0)
        cuda_fail(c, c->gpu->err);
}

void cuda_fold_narrow_peer(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, devpeer *p, uint64_t at,
                           size_t n, float s, half_type t)
{
    cuda_fold_narrow_in((cuda_device *)d, op, acc, elem_off, (devsrc){.peer = p, .at = at}, n, s, t);
}

void cuda_fold_narrow_out_peer(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off, devpeer *p,
                               uint64_t at, size_t n, float s, half_type t)
{
    cuda_fold_narrow_out_from((cuda_device *)d, op, acc, out, elem_off, (devsrc){.peer = p, .at = at}, n, s, t);
}

void cuda_fold_narrow_pair_peer(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                uint64_t elem_off, devpeer *p, uint64_t at, size_t n, float s, half_type t)
{
    cuda_fold_narrow_pair_from((cuda_device *)d, op, stash, acc, out, elem_off, (devsrc){.peer = p, .at = at}, n, s, t);
}
