/* kind_average.c — kind `average`, the seed's AverageParameterServer: every
 * push is folded into one accumulator as its bytes arrive.
 *
 * Dense: each push's bytes arrive in order, so the future only tracks how
 * far each push has got:
 *  - above the frontier (the furthest any push has got) nobody has written:
 *    the push that gets there copies its bytes, straight from the socket
 *    into the accumulator when it can;
 *  - below it, a push adds; where every other push has already been (below
 *    the least progress of the others) it is the last to touch those
 *    elements, and applies the mean's scale in the same pass:
 *    acc = (acc + x) * (1/N), which is exactly sum * (1/N).
 * So no pass zeroes the accumulator, none scales it at the end, and each
 * push costs one pass over memory. The accumulator is a devbuf; each of
 * those passes is a device fold, and the raw bytes above the frontier are
 * received into the device's recv area. Resolving has nothing left to
 * compute; it still goes through the device (a barrier job that makes the
 * accumulator host-visible), so the answer leaves only once the device's
 * work on it is complete — on the cpu device, the accumulator's own bytes.
 *
 * Narrow pushes (f16, bf16) run the same dance one step later: the first
 * push to reach an element keeps its 16 bits as they came, in a stash
 * (received straight from the socket when it can: no widening); the
 * second adds its value to the stash's, both widened, into the f32
 * accumulator (device_fold_narrow_pair) — or, when it is also the last
 * (two trainers), writes their mean narrowed into the answer's own buffer
 * and no accumulator exists at all; a later one adds its widened value
 * (kind_fold_narrow); the last toucher adds and scales and writes the
 * mean narrowed, once, into the answer (device_fold_narrow_out), never
 * back into the accumulator. The sums are the f32 path's of the widened
 * values, in the same order, bit for bit: a stash widened is what a copy
 * into the accumulator would have held. A narrow push from a trainer's GPU
 * memory (CUDA IPC) takes the same steps, whole, its values read where
 * they lie; its answer (nout) is lent like an f32 one.
 *
 * Sparse: rows are coalesced in a device sparse accumulator as they
 * arrive; resolving emits them (indices ascending, values scaled) on the
 * device into a devbuf made host-visible.
 */
#include "server/kind.h"
#include "shared/clock.h"
#include "shared/mean.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-future states kept for reuse: a round of K buckets would otherwise
 * allocate and free K of each. */
#define AVG_KEEP 64

/* Per-future state. Offsets are in bytes and multiples of 4 (the
 * transport hands over whole floats). */
typedef struct avg_future {
    struct kind *k;
    future *f;
    devbuf *acc;         /* dense: accumulator, then the result */
    devsparse *sacc;     /* sparse: coalesced rows */
    devbuf *out;         /* sparse: the emitted result */
    devbuf *nout;        /* dense, narrow pushes: the answer, each element narrowed by the fold that completes
                          * its mean (device_fold_narrow_out, device_fold_narrow_pair) */
    devbuf *stash;       /* dense, narrow pushes (2 trainers or more): each element's first push, as it came; acc
                          * is NULL with exactly 2 (the pair's mean goes straight to nout) */
    device_job job;
    bool stays;          /* dense: the result stays on the device (kind_result_stays) */
    uint64_t frontier;   /* dense: [0, frontier) of acc is written */
    uint64_t progress[]; /* dense, per trainer slot: bytes of its push folded in */
} avg_future;

typedef struct avg_kind {
    kind base;
    avg_future *spare[AVG_KEEP];
    size_t nspare;
    devsparse *sspare[AVG_KEEP]; /* hash tables grown to a bucket's size once */
    size_t nsspare;
} avg_kind;

static frame_errcode avg_admit(kind *k, const frame_hdr *h, uint64_t *batch, char *msg, size_t len)
{
    (void)k;
    (void)msg;
    (void)len;
    *batch = h->batch;
    return ERR_NONE;
}

static avg_future *avg_state_get(avg_kind *ak)
{
    uint32_t n = ak->base.cfg.trainers;
    size_t size = sizeof(avg_future) + n * sizeof(uint64_t);
    avg_future *st = ak->nspare ? ak->spare[--ak->nspare] : malloc(size);
    if (st)
        memset(st, 0, size);
    return st;
}

static int avg_push_begin(kind *k, push_ctx *p)
{
    avg_kind *ak = (avg_kind *)k;
    future *f = p->f;
    if (p->first) {
        avg_future *st = avg_state_get(ak);
        if (!st)
            return -1;
        st->k = k;
        st->f = f;
        f->kstate = st;
        if (f->layout == LAYOUT_DENSE) {
            bool narrow = f->dtype != HALF_FP32;
            uint32_t ntr = k->cfg.trainers;
            if ((!narrow || ntr != 2) && !(st->acc = device_buf_new(k->dev, f->count * 4)))
                return -1;
            if (narrow && !(st->nout = device_buf_new(k->dev, f->count * 2)))
                return -1;
            if (narrow && ntr > 1 && !(st->stash = device_buf_new(k->dev, f->count * 2)))
                return -1;
        } else {
            st->sacc = ak->nsspare ? ak->sspare[--ak->nsspare] : device_sparse_new(k->dev);
            if (!st->sacc)
                return -1;
            device_sparse_reset(k->dev, st->sacc, f->rows, f->cols);
        }
    }
    if (f->layout == LAYOUT_SPARSE)
        return kind_push_grow_idx(p, p->nnz);
    return 0;
}

static uint8_t *avg_push_direct(kind *k, push_ctx *p, uint64_t off, size_t *max)
{
    future *f = p->f;
    *max = 0;
    if (f->layout != LAYOUT_DENSE || k->cfg.trainers == 1)
        return NULL; /* a lone trainer's push is also the last and is scaled */
    avg_future *st = f->kstate;
    if (f->dtype != HALF_FP32) { /* into the stash, 2 bytes an element: acc's offsets are twice these */
        if (off * 2 != st->frontier) {
            assert(off * 2 < st->frontier);
            *max = (size_t)(st->frontier / 2 - off);
            return NULL;
        }
        return device_recv_area(k->dev, st->stash, off, max); /* the stash is p->len bytes */
    }
    if (off != st->frontier) {
        /* Only the push at the frontier may write raw bytes. One behind it
         * reads up to the frontier and then takes over the raw writes: the
         * pushes of a bucket run neck and neck, and reading past the
         * frontier into the input buffer would cost a copy of the excess
         * (most of a 256 KiB read) where a short read costs a syscall. */
        assert(off < st->frontier);
        *max = (size_t)(st->frontier - off);
        return NULL;
    }
    return device_recv_area(k->dev, st->acc, off, max); /* acc is p->len bytes */
}

static void avg_push_direct_done(kind *k, push_ctx *p, uint64_t off, size_t n)
{
    avg_future *st = p->f->kstate;
    bool narrow = p->f->dtype != HALF_FP32;
    uint64_t x = narrow ? off * 2 : off; /* acc's bytes */
    assert(x == st->frontier && x == st->progress[p->slot]);
    device_recv_done(k->dev, narrow ? st->stash : st->acc, off, n);
    st->frontier = st->progress[p->slot] = narrow ? (off + n) * 2 : off + n;
}

/* Least progress of the pushes other than `slot` (0 for one not begun). */
static uint64_t avg_others_min(const avg_future *st, uint32_t n, uint32_t slot)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (i != slot && st->progress[i] < m)
            m = st->progress[i];
    return m;
}

/* One fold of acc's floats [x / 4, x / 4 + nf) from the push whose
 * payload chunk for acc bytes [off, ..) is src (f32). */
static void avg_fold(kind *k, const avg_future *st, device_fold_op op, uint64_t x, devsrc src, uint64_t off,
                     size_t nf, float s)
{
    assert(st->f->dtype == HALF_FP32);
    device_fold_from(k->dev, op, st->acc, x / 4, src, x - off, nf, s);
}

/* The progress of the pushes other than `slot`, in acc's bytes: the least
 * (*least: 0 for one not begun), the greatest (*first: how far a value
 * has been stashed) and the second greatest (*second: how far the
 * accumulator holds a sum; 0 with one other push). */
static void avg_others_rank(const avg_future *st, uint32_t n, uint32_t slot, uint64_t *least, uint64_t *first,
                            uint64_t *second)
{
    uint64_t lo = UINT64_MAX, hi = 0, hi2 = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == slot)
            continue;
        uint64_t v = st->progress[i];
        lo = v < lo ? v : lo;
        if (v > hi) {
            hi2 = hi;
            hi = v;
        } else if (v > hi2) {
            hi2 = v;
        }
    }
    *least = lo;
    *first = hi;
    *second = hi2;
}

/* v clamped to [lo, hi]. */
static uint64_t avg_clamp(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A narrow push's elements [e, e + ne) (its payload from element e at
 * src: host bytes, or a peer's GPU memory), as the comment at the top of
 * the file says: where two or more others have been, a fold into the
 * accumulator (the last toucher's narrowed into nout); where only one
 * has, a fold with its stashed value; where none has, the values stashed
 * as they are. Each range is split at `least`: below it this push is the
 * last toucher. */
static void avg_narrow_data(kind *k, push_ctx *p, uint64_t e, devsrc src, size_t ne)
{
    avg_future *st = p->f->kstate;
    half_type t = p->f->dtype;
    uint32_t ntr = k->cfg.trainers;
    float scale = mean_scale(ntr);
    uint64_t end = e + ne;
    assert(st->progress[p->slot] == e * 4);
    if (ntr == 1) { /* the only push: its mean is itself, scaled by 1 and narrowed */
        device_fold_narrow_out_from(k->dev, FOLD_COPY_SCALE, st->acc, st->nout, e, src, 0, ne, scale, t);
    } else {
        uint64_t least, first, second;
        avg_others_rank(st, ntr, p->slot, &least, &first, &second);
        least /= 4, first /= 4, second /= 4;
        uint64_t x = e, to, cut;
        /* two or more in the accumulator (three trainers or more) */
        if ((to = avg_clamp(second, x, end)) > x) {
            if ((cut = avg_clamp(least, x, to)) > x) /* the last toucher: the mean, narrowed */
                device_fold_narrow_out_from(k->dev, FOLD_ADD_SCALE, st->acc, st->nout, x, src, (x - e) * 2, cut - x,
                                            scale, t);
            if (to > cut)
                kind_fold_narrow_from(k, FOLD_ADD, st->acc, cut, src, (cut - e) * 2, to - cut, 0, t);
            x = to;
        }
        /* one stashed: with two trainers the pair's mean, else their sum
         * (with three or more, least <= second: never the last toucher) */
        if ((to = avg_clamp(first, x, end)) > x) {
            cut = avg_clamp(least, x, to);
            assert(ntr == 2 || cut == x);
            if (cut > x)
                device_fold_narrow_pair_from(k->dev, FOLD_ADD_SCALE, st->stash, st->acc, st->nout, x, src, (x - e) * 2,
                                             cut - x, scale, t);
            if (to > cut)
                device_fold_narrow_pair_from(k->dev, FOLD_ADD, st->stash, st->acc, st->nout, cut, src, (cut - e) * 2,
                                             to - cut, 0, t);
            x = to;
        }
        if (end > x) { /* the first to arrive: stashed */
            device_write_from(k->dev, st->stash, x * 2, src, (x - e) * 2, (end - x) * 2);
            st->frontier = end * 4;
        }
    }
    st->progress[p->slot] = end * 4;
}

/* Dense: see the comment at the top of the file. off and n are in the
 * accumulator's bytes (a narrow push's payload offsets times 2). */
static void avg_dense_data(kind *k, push_ctx *p, uint64_t off, devsrc src, size_t n)
{
    avg_future *st = p->f->kstate;
    uint32_t ntr = k->cfg.trainers;
    float scale = mean_scale(ntr);
    uint64_t end = off + n;
    assert(off % 4 == 0 && st->frontier % 4 == 0 && off == st->progress[p->slot]);
    if (ntr == 1) { /* the only push: copy and scale (by 1) at once */
        avg_fold(k, st, FOLD_COPY_SCALE, off, src, off, n / 4, scale);
    } else {
        uint64_t last_upto = avg_others_min(st, ntr, p->slot);
        uint64_t add_end = end < st->frontier ? end : st->frontier;
        /* [off, min(last_upto, add_end)): last toucher, add and scale. */
        uint64_t x = off;
        uint64_t fin = last_upto < add_end ? last_upto : add_end;
        if (fin > x) {
            avg_fold(k, st, FOLD_ADD_SCALE, x, src, off, (fin - x) / 4, scale);
            x = fin;
        }
        if (add_end > x) { /* others still to come: plain add */
            avg_fold(k, st, FOLD_ADD, x, src, off, (add_end - x) / 4, 0);
            x = add_end;
        }
        if (end > x) { /* beyond the frontier: first to arrive, copy */
            assert(x == st->frontier);
            avg_fold(k, st, FOLD_COPY, x, src, off, (end - x) / 4, 0);
            st->frontier = end;
        }
    }
    st->progress[p->slot] = end;
}

static int avg_sparse_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    avg_future *st = p->f->kstate;
    uint64_t ibytes = p->nnz * 8;
    if (off < ibytes) {
        size_t take = ibytes - off < n ? (size_t)(ibytes - off) : n;
        memcpy(p->idx + off, src, take);
        off += take;
        src += take;
        n -= take;
        if (off == ibytes) {
            int64_t bad;
            int rc = device_sparse_map(k->dev, st->sacc, p->idx, p->nnz, p->rowslot, &bad);
            if (rc == -1) {
                snprintf(p->err, sizeof p->err, "row index %" PRId64 " outside 0..%" PRIu64, bad,
                         p->f->rows ? p->f->rows - 1 : 0);
                return -1;
            }
            if (rc < 0) {
                snprintf(p->err, sizeof p->err, "out of memory coalescing rows");
                return -1;
            }
        }
    }
    if (n) {
        assert((off - ibytes) % 4 == 0);
        device_sparse_fold(k->dev, st->sacc, p->rowslot, (off - ibytes) / 4, src, n / 4);
    }
    return 0;
}

static int avg_push_data(kind *k, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    if (p->f->layout == LAYOUT_SPARSE)
        return avg_sparse_data(k, p, off, src, n);
    if (p->f->dtype != HALF_FP32) { /* 2 bytes an element */
        assert(off % 2 == 0 && n % 2 == 0);
        avg_narrow_data(k, p, off / 2, (devsrc){.host = src}, n / 2);
        return 0;
    }
    avg_dense_data(k, p, off, (devsrc){.host = src}, n);
    return 0;
}

static void avg_push_peer(kind *k, push_ctx *p, devpeer *peer, uint64_t at)
{
    assert(p->f->layout == LAYOUT_DENSE);
    devsrc src = {.peer = peer, .at = at};
    if (p->f->dtype != HALF_FP32)
        avg_narrow_data(k, p, 0, src, p->f->count);
    else
        avg_dense_data(k, p, 0, src, p->len);
}

static void avg_push_abort(kind *k, push_ctx *p)
{
    /* Bytes already folded cannot be taken out: a push that stops half-way
     * either fails the future (peer lost) or was refused before any value
     * was folded (a bad sparse index is caught before the values). */
    (void)k;
    (void)p;
}

static void avg_done(device_job *j)
{
    avg_future *st = j->arg;
    kind *k = st->k;
    future *f = st->f;
    metrics_add(k->m_compute, kind_job_ms(j, f->t_resolve_ns));
    psbuf *result = NULL;
    const char *why = NULL;
    frame_errcode code = ERR_NONE;
    if (j->error) {
        why = j->error;
        code = ERR_DEVICE;
    } else if (f->layout == LAYOUT_DENSE) {
        /* Already scaled: every element's last push applied 1/N (a
         * narrow future's, narrowed once into nout for every pusher). */
        devbuf **ans = f->dtype == HALF_FP32 ? &st->acc : &st->nout;
        result = kind_result_take(k, *ans, st->stays);
        *ans = NULL;
        if (!result) {
            why = "out of memory for the result";
            code = ERR_DEVICE;
        }
    } else if (j->u.emit.status < 0) {
        why = "out of memory computing the mean";
    } else {
        result = device_buf_take_host(k->dev, st->out);
        st->out = NULL;
    }
    k->resolved(k->resolved_ctx, f, result, code, why);
}

static void avg_resolve(kind *k, future *f)
{
    avg_future *st = f->kstate;
    memset(&st->job, 0, sizeof st->job);
    st->job.done = avg_done;
    st->job.arg = st;
    device_job_for(&st->job, f->batch, f->bucket);
    if (f->layout == LAYOUT_DENSE) {
        st->job.op = JOB_BARRIER;
        devbuf *ans = f->dtype == HALF_FP32 ? st->acc : st->nout; /* a narrow future's acc may be NULL */
        st->stays = kind_result_stays(k, f, ans);
        st->job.to_host = st->stays ? NULL : ans;
    } else {
        st->out = device_buf_new(k->dev, device_sparse_result_size(k->dev, st->sacc));
        if (!st->out) {
            k->resolved(k->resolved_ctx, f, NULL, ERR_PEER_LOST, "out of memory computing the mean");
            return;
        }
        st->job.op = JOB_SPARSE_EMIT;
        st->job.u.emit.acc = st->sacc;
        st->job.u.emit.out = st->out;
        st->job.u.emit.scale = mean_scale(k->cfg.trainers);
        st->job.to_host = st->out;
    }
    device_submit(k->dev, &st->job);
}

static void avg_release(kind *k, future *f)
{
    avg_kind *ak = (avg_kind *)k;
    avg_future *st = f->kstate;
    if (!st)
        return;
    f->kstate = NULL;
    device_buf_free(k->dev, st->acc);
    device_buf_free(k->dev, st->nout);
    device_buf_free(k->dev, st->stash);
    device_buf_free(k->dev, st->out);
    if (st->sacc) {
        if (ak->nsspare < AVG_KEEP)
            ak->sspare[ak->nsspare++] = st->sacc;
        else
            device_sparse_free(k->dev, st->sacc);
    }
    if (ak->nspare < AVG_KEEP)
        ak->spare[ak->nspare++] = st;
    else
        free(st);
}

static void avg_destroy(kind *k)
{
    avg_kind *ak = (avg_kind *)k;
    while (ak->nspare)
        free(ak->spare[--ak->nspare]);
    while (ak->nsspare)
        device_sparse_free(k->dev, ak->sspare[--ak->nsspare]);
    free(ak);
}

static const kind_ops avg_ops = {
    .name = "average",
    .narrow = true,
    .admit = avg_admit,
    .push_begin = avg_push_begin,
    .push_direct = avg_push_direct,
    .push_direct_done = avg_push_direct_done,
    .push_data = avg_push_data,
    .push_peer = avg_push_peer,
    .push_abort = avg_push_abort,
    .resolve = avg_resolve,
    .release = avg_release,
    .destroy = avg_destroy,
};

kind *kind_average_new(const kind_config *cfg, device *dev, char *err, size_t errlen)
{
    avg_kind *ak = calloc(1, sizeof *ak);
    if (!ak) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ak->base.ops = &avg_ops;
    ak->base.dev = dev;
    ak->base.cfg = *cfg; /* push_begin sizes its state by the trainer count */
    return &ak->base;
}
