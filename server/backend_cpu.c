/* backend_cpu.c — averaging on the reactor's own CPU thread.
 *
 * Kind `average` (the seed's AverageParameterServer) folds every push into
 * one accumulator as its bytes arrive. Each push's bytes arrive in order,
 * so the entry only tracks how far each push has got:
 *  - above the frontier (the furthest any push has got) nobody has written:
 *    the push that gets there copies its bytes, straight from the socket
 *    into the accumulator when it can;
 *  - below it, a push adds; where every other push has already been (below
 *    the least progress of the others) it is the last to touch those
 *    elements, and applies the mean's scale in the same pass:
 *    acc = (acc + x) * (1/N), which is exactly sum * (1/N).
 * So no pass zeroes the accumulator, none scales it at the end, and each
 * push costs one pass over memory.
 *
 * Kind `average-batch` (the seed's AverageBatchParameterServer) keeps every
 * push in its own buffer and sums them, in slot order, at resolve time.
 *
 * Sparse pushes (either kind) coalesce rows in a sparse_acc; the kind only
 * changes whether rows are folded as they arrive or at resolve time.
 */
#include "server/backend.h"
#include "server/server.h"
#include "shared/mean.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sparse accumulators kept for reuse: their hash tables and row storage
 * grow to the bucket's size once and are then recycled batch after batch. */
#define CPU_SPARSE_KEEP 64

typedef struct cpu_backend {
    backend base;
    sparse_acc *spare[CPU_SPARSE_KEEP];
    size_t nspare;
    void *dense_spare[CPU_SPARSE_KEEP]; /* cpu_dense blocks, all of one size */
    size_t ndense_spare;
} cpu_backend;

static sparse_acc *cpu_sparse_get(cpu_backend *cb)
{
    if (cb->nspare)
        return cb->spare[--cb->nspare];
    sparse_acc *a = malloc(sizeof *a);
    if (a)
        sparse_acc_init(a);
    return a;
}

static void cpu_sparse_put(cpu_backend *cb, sparse_acc *a)
{
    if (cb->nspare < CPU_SPARSE_KEEP) {
        cb->spare[cb->nspare++] = a;
        return;
    }
    sparse_acc_free(a);
    free(a);
}

/* Per-entry state of the `average` kind, dense layout. Offsets are in
 * bytes and multiples of 4 (conn.c hands over whole floats). */
typedef struct cpu_dense {
    uint64_t frontier;   /* [0, frontier) of the accumulator is written */
    uint64_t progress[]; /* per trainer slot: bytes of its push folded in */
} cpu_dense;

static server_kind cpu_kind(backend *b) { return b->srv->cfg.kind; }

static int cpu_grow_idx(push_ctx *p, uint64_t nnz)
{
    if (nnz <= p->idx_cap)
        return 0;
    uint8_t *idx = realloc(p->idx, nnz * 8);
    if (!idx)
        return -1;
    p->idx = idx;
    uint32_t *rs = realloc(p->rowslot, nnz * sizeof *rs);
    if (!rs)
        return -1;
    p->rowslot = rs;
    p->idx_cap = nnz;
    return 0;
}

void push_ctx_free(push_ctx *p)
{
    free(p->idx);
    free(p->rowslot);
    p->idx = NULL;
    p->rowslot = NULL;
    p->idx_cap = 0;
}

static int cpu_push_begin(backend *b, push_ctx *p)
{
    pending_entry *e = p->e;
    server *s = b->srv;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH) {
        if (!e->stored && !(e->stored = calloc(s->cfg.trainers, sizeof *e->stored)))
            return -1;
        assert(!e->stored[p->slot]);
        e->stored[p->slot] = bufpool_get(&s->pool, p->len);
        return e->stored[p->slot] ? 0 : -1;
    }
    if (e->layout == LAYOUT_SPARSE) {
        if (p->first) {
            if (!e->sacc && !(e->sacc = cpu_sparse_get((cpu_backend *)b)))
                return -1;
            sparse_acc_reset(e->sacc, e->rows, e->cols);
        }
        return cpu_grow_idx(p, p->nnz);
    }
    if (p->first) {
        cpu_backend *cb = (cpu_backend *)b;
        size_t dsize = sizeof(cpu_dense) + s->cfg.trainers * sizeof(uint64_t);
        cpu_dense *d = cb->ndense_spare ? cb->dense_spare[--cb->ndense_spare] : malloc(dsize);
        if (d)
            memset(d, 0, dsize);
        e->acc = bufpool_get(&s->pool, e->count * 4);
        if (!d || !e->acc) {
            free(d);
            return -1;
        }
        e->backend_state = d;
    }
    return 0;
}

static void cpu_push_direct_done(backend *b, push_ctx *p, uint64_t off, size_t n)
{
    pending_entry *e = p->e;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH)
        return;
    cpu_dense *d = e->backend_state;
    assert(off == d->frontier && off == d->progress[p->slot]);
    d->frontier = off + n;
    d->progress[p->slot] = off + n;
}

static uint8_t *cpu_push_direct(backend *b, push_ctx *p, uint64_t off, size_t *max)
{
    pending_entry *e = p->e;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH) {
        uint64_t ibytes = e->layout == LAYOUT_SPARSE ? p->nnz * 8 : 0;
        if (off < ibytes) {
            /* Sparse row indices go through push_data, which checks them
             * once they are all in: a bad push is refused then, not at
             * resolve time where it would fail everybody's future. */
            *max = (size_t)(ibytes - off);
            return NULL;
        }
        *max = p->len - off;
        return e->stored[p->slot]->data + off;
    }
    *max = 0;
    if (e->layout != LAYOUT_DENSE || b->srv->cfg.trainers == 1)
        return NULL; /* a lone trainer's push is also the last and is scaled */
    cpu_dense *d = e->backend_state;
    if (off != d->frontier) {
        /* Only the push at the frontier may write raw bytes. One behind it
         * reads up to the frontier and then takes over the raw writes: the
         * pushes of a bucket run neck and neck, and reading past the
         * frontier into the input buffer would cost a copy of the excess
         * (most of a 256 KiB read) where a short read costs a syscall. */
        assert(off < d->frontier);
        *max = (size_t)(d->frontier - off);
        return NULL;
    }
    *max = p->len - off;
    return e->acc->data + off;
}

/* Least progress of the pushes other than `slot` (0 for one not begun). */
static uint64_t cpu_others_min(const cpu_dense *d, uint32_t n, uint32_t slot)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (i != slot && d->progress[i] < m)
            m = d->progress[i];
    return m;
}

/* Dense, kind average: see the comment at the top of the file. */
static void cpu_dense_data(backend *b, pending_entry *e, push_ctx *p, uint64_t off, const uint8_t *src,
                           size_t n)
{
    cpu_dense *d = e->backend_state;
    uint32_t ntr = b->srv->cfg.trainers;
    float scale = mean_scale(ntr);
    float *acc = (float *)(void *)e->acc->data;
    uint64_t end = off + n;
    assert(off % 4 == 0 && d->frontier % 4 == 0 && off == d->progress[p->slot]);
    if (ntr == 1) { /* the only push: copy and scale (by 1) at once */
        reduce_copy_scale_f32(acc + off / 4, src, n / 4, scale);
    } else {
        uint64_t last_upto = cpu_others_min(d, ntr, p->slot);
        uint64_t add_end = end < d->frontier ? end : d->frontier;
        /* [off, min(last_upto, add_end)): last toucher, add and scale. */
        uint64_t x = off;
        uint64_t fin = last_upto < add_end ? last_upto : add_end;
        if (fin > x) {
            reduce_add_scale_f32(acc + x / 4, src + (x - off), (fin - x) / 4, scale);
            x = fin;
        }
        if (add_end > x) { /* others still to come: plain add */
            reduce_add_f32(acc + x / 4, src + (x - off), (add_end - x) / 4);
            x = add_end;
        }
        if (end > x) { /* beyond the frontier: first to arrive, copy */
            assert(x == d->frontier);
            memcpy(acc + x / 4, src + (x - off), end - x);
            d->frontier = end;
        }
    }
    d->progress[p->slot] = end;
}

static int cpu_sparse_data(backend *b, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    pending_entry *e = p->e;
    uint64_t ibytes = p->nnz * 8;
    if (off < ibytes) {
        size_t take = ibytes - off < n ? (size_t)(ibytes - off) : n;
        memcpy(p->idx + off, src, take);
        off += take;
        src += take;
        n -= take;
        if (off == ibytes) {
            int64_t bad;
            int rc = sparse_acc_map(e->sacc, p->idx, p->nnz, p->rowslot, &bad);
            if (rc == -1) {
                snprintf(p->err, sizeof p->err, "row index %" PRId64 " outside 0..%" PRIu64, bad,
                         e->rows ? e->rows - 1 : 0);
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
        sparse_acc_add(e->sacc, p->rowslot, (off - ibytes) / 4, src, n / 4);
    }
    return 0;
}

static int cpu_push_data(backend *b, push_ctx *p, uint64_t off, const uint8_t *src, size_t n)
{
    pending_entry *e = p->e;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH) {
        memcpy(e->stored[p->slot]->data + off, src, n);
        /* Sparse: check the indices as soon as they are all in, so that a
         * bad push is refused now rather than poisoning the resolve. */
        uint64_t ibytes = p->nnz * 8;
        if (e->layout == LAYOUT_SPARSE && off < ibytes && off + n >= ibytes) {
            int64_t bad;
            if (sparse_indices_check(e->stored[p->slot]->data, p->nnz, e->rows, &bad) < 0) {
                snprintf(p->err, sizeof p->err, "row index %" PRId64 " outside 0..%" PRIu64, bad,
                         e->rows ? e->rows - 1 : 0);
                return -1;
            }
        }
        return 0;
    }
    if (e->layout == LAYOUT_SPARSE)
        return cpu_sparse_data(b, p, off, src, n);
    cpu_dense_data(b, e, p, off, src, n);
    return 0;
}

static void cpu_push_abort(backend *b, push_ctx *p)
{
    pending_entry *e = p->e;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH && e->stored && e->stored[p->slot]) {
        psbuf_unref(e->stored[p->slot]);
        e->stored[p->slot] = NULL;
    }
}

/* Sum the stored pushes of an average-batch entry into a result. */
static psbuf *cpu_resolve_batch(server *s, pending_entry *e, float scale)
{
    uint32_t n = s->cfg.trainers;
    if (e->layout == LAYOUT_DENSE) {
        psbuf *acc = NULL;
        for (uint32_t i = 0; i < n; i++) {
            psbuf *pb = e->stored[i];
            if (!pb)
                continue;
            if (!acc) {
                acc = pb; /* the first push becomes the accumulator */
                e->stored[i] = NULL;
                continue;
            }
            reduce_add_f32((float *)(void *)acc->data, pb->data, e->count);
        }
        assert(acc);
        reduce_scale_f32((float *)(void *)acc->data, e->count, scale);
        return acc;
    }
    sparse_acc sa;
    sparse_acc_init(&sa);
    sparse_acc_reset(&sa, e->rows, e->cols);
    psbuf *out = NULL;
    uint32_t *slots = NULL;
    for (uint32_t i = 0; i < n; i++) {
        psbuf *pb = e->stored[i];
        if (!pb)
            continue;
        uint64_t nnz = pb->len / (8 + 4 * e->cols);
        uint32_t *ns = realloc(slots, (nnz ? nnz : 1) * sizeof *ns);
        if (!ns)
            goto done;
        slots = ns;
        int64_t bad;
        if (sparse_acc_map(&sa, pb->data, nnz, slots, &bad) < 0)
            goto done;
        sparse_acc_add(&sa, slots, 0, pb->data + nnz * 8, nnz * e->cols);
    }
    out = bufpool_get(&s->pool, sparse_acc_result_size(&sa));
    if (out && sparse_acc_emit(&sa, scale, out->data) < 0) {
        psbuf_unref(out);
        out = NULL;
    }
done:
    free(slots);
    sparse_acc_free(&sa);
    return out;
}

static void cpu_resolve(backend *b, pending_entry *e)
{
    server *s = b->srv;
    float scale = mean_scale(s->cfg.trainers);
    uint64_t t0 = clock_now_ns();
    psbuf *result;
    if (cpu_kind(b) == KIND_AVERAGE_BATCH) {
        result = cpu_resolve_batch(s, e, scale);
    } else if (e->layout == LAYOUT_DENSE) {
        result = e->acc;
        e->acc = NULL;
        /* Already scaled: every element's last push applied 1/N. */
    } else {
        result = bufpool_get(&s->pool, sparse_acc_result_size(e->sacc));
        if (result && sparse_acc_emit(e->sacc, scale, result->data) < 0) {
            psbuf_unref(result);
            result = NULL;
        }
    }
    metrics_add(s->m_average, (double)(clock_now_ns() - t0) / 1e6);
    if (!result) {
        server_entry_fail(s, e, "out of memory computing the mean");
        return;
    }
    server_entry_resolved(s, e, result);
    psbuf_unref(result);
}

static void cpu_release(backend *b, pending_entry *e)
{
    if (e->acc) {
        psbuf_unref(e->acc);
        e->acc = NULL;
    }
    if (e->sacc) {
        cpu_sparse_put((cpu_backend *)b, e->sacc);
        e->sacc = NULL;
    }
    if (e->stored) {
        for (uint32_t i = 0; i < b->srv->cfg.trainers; i++)
            if (e->stored[i])
                psbuf_unref(e->stored[i]);
        free(e->stored);
        e->stored = NULL;
    }
    if (e->backend_state) {
        cpu_backend *cb = (cpu_backend *)b;
        if (cb->ndense_spare < CPU_SPARSE_KEEP)
            cb->dense_spare[cb->ndense_spare++] = e->backend_state;
        else
            free(e->backend_state);
        e->backend_state = NULL;
    }
}

static void cpu_destroy(backend *b)
{
    cpu_backend *cb = (cpu_backend *)b;
    while (cb->ndense_spare)
        free(cb->dense_spare[--cb->ndense_spare]);
    while (cb->nspare) {
        sparse_acc *a = cb->spare[--cb->nspare];
        sparse_acc_free(a);
        free(a);
    }
    free(b);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .push_begin = cpu_push_begin,
    .push_direct = cpu_push_direct,
    .push_direct_done = cpu_push_direct_done,
    .push_data = cpu_push_data,
    .push_abort = cpu_push_abort,
    .resolve = cpu_resolve,
    .release = cpu_release,
    .destroy = cpu_destroy,
};

backend *backend_cpu_new(server *srv)
{
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return NULL;
    cb->base.ops = &cpu_ops;
    cb->base.srv = srv;
    return &cb->base;
}
