/* device_cpu.c — the `cpu` device: arithmetic on the reactor's own thread,
 * on host memory.
 *
 * A devbuf is a psbuf from the server's pool, and its host image is the
 * storage itself: recv areas are the buffer (a direct receive lands in the
 * accumulator), a to-host copy is nothing, and the result the transport
 * sends is the very buffer the arithmetic wrote. Folds and jobs run inline
 * (device_host.c); a job's `done` is called before device_submit returns,
 * so nothing is ever in flight and drain has nothing to wait for.
 */
#include "server/device_host.h"
#include "server/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_device {
    device base;
    device_host mem;
} cpu_device;

static devbuf *cpu_buf_new(device *d, size_t bytes) { return device_host_buf_new(&((cpu_device *)d)->mem, bytes); }

static void cpu_buf_free(device *d, devbuf *b) { device_host_buf_free(&((cpu_device *)d)->mem, b); }

static psbuf *cpu_buf_host(device *d, devbuf *b)
{
    (void)d;
    return b->host;
}

static psbuf *cpu_buf_take_host(device *d, devbuf *b) { return device_host_buf_take(&((cpu_device *)d)->mem, b); }

static uint8_t *cpu_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max)
{
    (void)d;
    *max = dst->host->len - off;
    return dst->host->data + off;
}

static void cpu_recv_done(device *d, devbuf *dst, uint64_t off, size_t n)
{
    (void)d;
    (void)dst;
    (void)off;
    (void)n; /* the bytes are where they belong */
}

static void cpu_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                     float s)
{
    (void)d;
    device_host_fold(op, acc, elem_off, src, n, s);
}

static void cpu_fold_narrow_out(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                                const uint8_t *src, size_t n, float s, half_type t)
{
    (void)d;
    device_host_fold_narrow_out(op, acc, out, elem_off, src, n, s, t);
}

static void cpu_fold_narrow_pair(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                 uint64_t elem_off, const uint8_t *src, size_t n, float s, half_type t)
{
    (void)d;
    device_host_fold_narrow_pair(op, stash, acc, out, elem_off, src, n, s, t);
}

static devsparse *cpu_sparse_new(device *d)
{
    (void)d;
    return device_host_sparse_new();
}

static void cpu_sparse_free(device *d, devsparse *s)
{
    (void)d;
    device_host_sparse_free(s);
}

static void cpu_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols)
{
    (void)d;
    sparse_acc_reset(&s->acc, rows, cols);
}

static int cpu_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad)
{
    (void)d;
    return sparse_acc_map(&s->acc, idx, nnz, slots, bad);
}

static void cpu_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src,
                            size_t n)
{
    (void)d;
    sparse_acc_add(&s->acc, slots, e0, src, n);
}

static uint64_t cpu_sparse_result_size(device *d, devsparse *s)
{
    (void)d;
    return sparse_acc_result_size(&s->acc);
}

static void cpu_submit(device *d, device_job *j)
{
    (void)d;
    device_host_job_run(j);
    j->error = NULL;
    j->gpu_ms = -1;
    j->done(j);
}

static void cpu_drain(device *d) { (void)d; }

static void cpu_destroy(device *d)
{
    cpu_device *c = (cpu_device *)d;
    device_host_free(&c->mem);
    free(c);
}

static const device_ops cpu_ops = {
    .name = "cpu",
    .buf_new = cpu_buf_new,
    .buf_free = cpu_buf_free,
    .buf_host = cpu_buf_host,
    .buf_take_host = cpu_buf_take_host,
    .recv_area = cpu_recv_area,
    .recv_done = cpu_recv_done,
    .fold = cpu_fold,
    .fold_narrow_out = cpu_fold_narrow_out,
    .fold_narrow_pair = cpu_fold_narrow_pair,
    .sparse_new = cpu_sparse_new,
    .sparse_free = cpu_sparse_free,
    .sparse_reset = cpu_sparse_reset,
    .sparse_map = cpu_sparse_map,
    .sparse_fold = cpu_sparse_fold,
    .sparse_result_size = cpu_sparse_result_size,
    .submit = cpu_submit,
    .drain = cpu_drain,
    .destroy = cpu_destroy,
};

device *device_cpu_new(bufpool *pool)
{
    cpu_device *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.ops = &cpu_ops;
    device_host_init(&c->mem, pool);
    return &c->base;
}
