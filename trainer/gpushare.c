/* gpushare.c — the calls of gpushare.h over the compute layer: the one
 * place where a trainer's shared GPU memory meets its compute context. */
#include "trainer/gpushare.h"
#include "trainer/compute.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static compute *gs_compute(const gpushare *g) { return g->impl_compute; }

/* dst (a device address inside the exported buffer) as a span of it. */
static cspan gs_span(const gpushare *g, devmem dst, uint64_t bytes)
{
    uint64_t off = devmem_offset(g->base, dst);
    assert(off % 4 == 0 && bytes % 4 == 0 && off <= g->bytes && bytes <= g->bytes - off);
    return cspan_at(g->impl_buf, off / 4, bytes / 4);
}

static void gs_record(void *ctx)
{
    compute_share_record(gs_compute(ctx));
}

static devmem gs_open(void *ctx, const unsigned char *mem, uint64_t bytes, char *err, size_t errlen)
{
    return compute_peer_open(gs_compute(ctx), mem, bytes, err, errlen);
}

static void gs_close(void *ctx, devmem p)
{
    compute_peer_close(gs_compute(ctx), p);
}

static void gs_copy(void *ctx, devmem dst, devmem src, uint64_t bytes)
{
    compute_copy_from_peer(gs_compute(ctx), gs_span(ctx, dst, bytes), src);
}

static void gs_upload(void *ctx, devmem dst, const void *src, uint64_t bytes)
{
    compute_write(gs_compute(ctx), gs_span(ctx, dst, bytes), src);
}

static void gs_narrow(void *ctx, devmem dst, devmem src, uint64_t n, half_type t)
{
    const gpushare *g = ctx;
    assert(g->shadow && devmem_offset(g->base, dst) >= g->shadow && n * 2 <= g->bytes - devmem_offset(g->base, dst));
    compute_narrow(gs_compute(g), dst, gs_span(g, src, n * 4), t == HALF_BF16);
}

static void gs_widen(void *ctx, devmem dst, devmem src, uint64_t n, half_type t)
{
    compute_widen(gs_compute(ctx), gs_span(ctx, dst, n * 4), src, t == HALF_BF16);
}

int gpushare_init(gpushare *g, compute *c, cbuf *b, uint64_t shadow, char *err, size_t errlen)
{
    compute_share x;
    memset(g, 0, sizeof *g);
    if (compute_share_export(c, b, &x, err, errlen) < 0)
        return -1;
    assert(cbuf_dtype(b) == COMPUTE_F32);
    snprintf(g->gpu, sizeof g->gpu, "%s", x.gpu);
    memcpy(g->mem, x.mem, sizeof g->mem);
    memcpy(g->ev, x.ev, sizeof g->ev);
    g->bytes = x.bytes;
    assert(shadow % 4 == 0 && shadow <= g->bytes);
    g->shadow = shadow;
    g->base = x.base;
    g->ctx = g;
    g->impl_compute = c;
    g->impl_buf = b;
    g->record = gs_record;
    g->open = gs_open;
    g->close = gs_close;
    g->copy = gs_copy;
    g->upload = gs_upload;
    g->narrow = gs_narrow;
    g->widen = gs_widen;
    return 0;
}
