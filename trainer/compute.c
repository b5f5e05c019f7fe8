/* compute.c — what every implementation of the compute layer shares:
 * buffer handles, spans, host access through a staging area (see
 * compute.h). The devices by name are computes.c's. */
#include "trainer/compute_impl.h"
#include "shared/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void compute_free(compute *c)
{
    if (c)
        c->ops->destroy(c);
}

const char *compute_name(const compute *c) { return c->ops->name; }

cbuf *cbuf_wrap(compute *c, void *ptr, uint64_t n, compute_dtype t, compute_mem mem)
{
    cbuf *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    b->ptr = ptr;
    b->n = n;
    b->dtype = t;
    b->mem = mem;
    b->lent = false;
    b->owner = c;
    b->shared = false;
    return b;
}

cbuf *compute_lend(compute *c, void *p, uint64_t n, compute_dtype t, char *err, size_t errlen)
{
    if (compute_status(c, err, errlen) < 0)
        return NULL;
    if (!compute_lends(c)) {
        errbuf_set(err, errlen, "compute (%s): computes on memory of its own only", c->ops->name);
        return NULL;
    }
    assert(p && (uintptr_t)p % compute_dtype_size(t) == 0);
    return c->ops->lend(c, p, n, t, err, errlen);
}

uint64_t cbuf_count(const cbuf *b) { return b->n; }
compute_mem cbuf_mem(const cbuf *b) { return b->mem; }
compute_dtype cbuf_dtype(const cbuf *b) { return b->dtype; }

cspan cspan_all(cbuf *b)
{
    cspan s = {b, 0, b->n};
    return s;
}

void *compute_span_view(compute *c, cspan s)
{
    assert(cspan_valid(s));
    char *p = compute_host_view(c, s.buf);
    return p ? p + s.off * compute_dtype_size(s.buf->dtype) : NULL;
}

devmem compute_span_device(compute *c, cspan s)
{
    assert(cspan_valid(s));
    devmem p = c->ops->device_view(c, s.buf);
    return devmem_is_none(p) ? p : devmem_at(p, s.off * compute_dtype_size(s.buf->dtype));
}

const void *compute_host_read(compute *c, cspan s, void *stage)
{
    const void *v = compute_span_view(c, s);
    if (v)
        return v;
    compute_read(c, s, stage);
    compute_sync(c);
    return stage;
}

void *compute_host_write_begin(compute *c, cspan s, void *stage)
{
    void *v = compute_span_view(c, s);
    return v ? v : stage;
}

void compute_host_write_end(compute *c, cspan s, const void *p)
{
    if (p != compute_span_view(c, s))
        compute_write(c, s, p);
}

int compute_status(const compute *c, char *err, size_t errlen)
{
    if (!compute_failed(c))
        return 0;
    errbuf_set(err, errlen, "%s", c->failure);
    return -1;
}

void compute_fail(compute *c, const char *fmt, ...)
{
    if (compute_failed(c))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    if (!c->failure[0])
        snprintf(c->failure, sizeof c->failure, "compute (%s): failed", c->ops->name);
}

double compute_loss(compute *c, cspan loss)
{
    assert(loss.n == 1 && loss.buf->dtype == COMPUTE_F64);
    double v = NAN;
    compute_read(c, loss, &v);
    compute_sync(c);
    return v;
}

cbuf *compute_alloc_shared(compute *c, uint64_t n, compute_dtype t, char *err, size_t errlen)
{
    if (compute_status(c, err, errlen) < 0)
        return NULL;
    if (!c->ops->alloc_shared) {
        snprintf(err, errlen, "compute (%s): no GPU memory to share (the trainer computes on the host)", c->ops->name);
        return NULL;
    }
    return c->ops->alloc_shared(c, n, t, err, errlen);
}

int compute_share_export(compute *c, cbuf *b, compute_share *x, char *err, size_t errlen)
{
    if (compute_status(c, err, errlen) < 0)
        return -1;
    if (!c->ops->share_export || !b->shared) {
        snprintf(err, errlen, "compute (%s): this buffer cannot be shared", c->ops->name);
        return -1;
    }
    return c->ops->share_export(c, b, x, err, errlen);
}

devmem compute_peer_open(compute *c, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen)
{
    if (compute_status(c, err, errlen) < 0)
        return devmem_none();
    if (!c->ops->peer_open) {
        snprintf(err, errlen, "compute (%s): no GPU to open a peer's memory on", c->ops->name);
        return devmem_none();
    }
    return c->ops->peer_open(c, mem, bytes, err, errlen);
}
