/* outq.c — a connection's output queue (see outq.h). */
#include "server/outq.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define OUTQ_IOV 128

void outq_init(outq *q)
{
    memset(q, 0, sizeof *q);
    zcopy_init(&q->zc);
}

void outq_splice_on(outq *q, uint64_t lend_cap)
{
    assert(q->nloans == 0); /* frames queued before are copied or decided later */
    q->splice = true;
    q->lend_cap = lend_cap;
}

static outq_item *outq_at(outq *q, size_t i)
{
    return &q->items[(q->head + i) % q->cap];
}

static uint64_t outq_item_total(const outq_item *it)
{
    return it->hlen + (it->payload ? it->payload->len : 0);
}

static void outq_item_release(outq_item *it)
{
    if (it->hdr != it->small)
        free(it->hdr);
    if (it->payload)
        psbuf_unref(it->payload);
    it->payload = NULL;
}

static void outq_pop(outq *q)
{
    outq_item_release(outq_at(q, 0));
    q->head = (q->head + 1) % q->cap;
    q->len--;
}

/* The head frame is all in the socket: drop it. A payload whose pages went
 * by reference stays ours, lent, until the peer has provably read it. */
static void outq_lend(outq *q, psbuf *b, uint64_t tag);
static void outq_finish_head(outq *q)
{
    outq_item *h = outq_at(q, 0);
    assert(h->done == outq_item_total(h));
    if (h->trace_t0_ns && q->written)
        q->written(q->written_ctx, h);
    if (h->lent_pages) {
        assert(q->zc.in_pipe == 0);
        outq_lend(q, h->payload, h->tag);
        h->payload = NULL; /* the loan holds our reference now */
    }
    outq_pop(q);
}

void outq_trace_last(outq *q, uint64_t t0_ns, uint64_t nvtx, uint64_t batch, uint64_t bucket)
{
    assert(q->len > 0);
    outq_item *it = outq_at(q, q->len - 1);
    it->trace_t0_ns = t0_ns;
    it->trace_nvtx = nvtx;
    it->trace_batch = batch;
    it->trace_bucket = bucket;
}

void outq_free(outq *q)
{
    if (q->len > 0) {
        /* Part of the head payload may be in the socket by reference: its
         * pages are out of our hands. (What the pipe holds goes with it.) */
        outq_item *h = outq_at(q, 0);
        if (h->lent_pages)
            h->payload->no_recycle = true;
    }
    zcopy_close(&q->zc);
    for (size_t i = 0; i < q->len; i++)
        outq_item_release(outq_at(q, i));
    for (size_t i = 0; i < q->nloans; i++) {
        /* Whether the peer read these is unknown now: never reuse pages
         * that may still be in a socket. */
        if (!q->loans[i].shared)
            q->loans[i].buf->no_recycle = true;
        psbuf_unref(q->loans[i].buf);
    }
    free(q->loans);
    free(q->items);
    outq_init(q);
}

static int outq_grow(outq *q)
{
    size_t cap = q->cap ? q->cap * 2 : 32;
    outq_item *items = malloc(cap * sizeof *items);
    if (!items)
        return -1;
    for (size_t i = 0; i < q->len; i++) {
        items[i] = *outq_at(q, i);
        if (items[i].hdr == outq_at(q, i)->small)
            items[i].hdr = items[i].small; /* inline bytes moved with it */
    }
    free(q->items);
    q->items = items;
    q->cap = cap;
    q->head = 0;
    return 0;
}

int outq_push(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload, uint64_t tag)
{
    if (q->len == q->cap && outq_grow(q) < 0)
        return -1;
    outq_item *it = outq_at(q, q->len);
    it->hdr = hlen <= OUTQ_INLINE_HDR ? it->small : malloc(hlen);
    if (!it->hdr)
        return -1;
    memcpy(it->hdr, hdr, hlen);
    it->hlen = (uint32_t)hlen;
    it->payload = payload;
    it->tag = tag;
    it->mode = payload ? OUTQ_UNDECIDED : OUTQ_COPY;
    it->lent_pages = false;
    it->done = 0;
    it->trace_t0_ns = 0;
    it->trace_nvtx = 0;
    if (payload)
        psbuf_ref(payload);
    q->len++;
    q->bytes += hlen + (payload ? payload->len : 0);
    return 0;
}

int outq_push_copy(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload)
{
    if (outq_push(q, hdr, hlen, payload, 0) < 0)
        return -1;
    outq_at(q, q->len - 1)->mode = OUTQ_COPY;
    return 0;
}

/* ---- loans ------------------------------------------------------------- */

/* Room for one more loan. 0, or -1 (no memory). */
static int outq_loans_room(outq *q)
{
    if (q->nloans < q->loans_cap)
        return 0;
    size_t cap = q->loans_cap ? q->loans_cap * 2 : 16;
    outq_loan *l = realloc(q->loans, cap * sizeof *l);
    if (!l)
        return -1;
    q->loans = l;
    q->loans_cap = cap;
    return 0;
}

/* Keep b (our reference) on loan, tagged; there is room (outq_loans_room). */
static void outq_lend_as(outq *q, psbuf *b, uint64_t tag, bool shared)
{
    assert(q->nloans < q->loans_cap);
    q->loans[q->nloans++] = (outq_loan){.buf = b, .tag = tag, .shared = shared};
    q->lent_bytes += b->len;
}

/* A payload spliced in full: keep it until the peer has provably read it. */
static void outq_lend(outq *q, psbuf *b, uint64_t tag)
{
    if (outq_loans_room(q) < 0) {
        /* Cannot keep track of it: make sure it is never reused. */
        b->no_recycle = true;
        psbuf_unref(b);
        return;
    }
    outq_lend_as(q, b, tag, false);
}

int outq_push_shared(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload, uint64_t tag, uint64_t cap)
{
    if (q->lent_bytes + payload->len > cap)
        return 1;
    if (outq_loans_room(q) < 0 || outq_push(q, hdr, hlen, NULL, 0) < 0)
        return -1;
    psbuf_ref(payload);
    outq_lend_as(q, payload, tag, true);
    return 0;
}

void outq_return(outq *q, uint64_t batch)
{
    size_t keep = 0;
    for (size_t i = 0; i < q->nloans; i++) {
        outq_loan l = q->loans[i];
        if (l.tag < batch) {
            assert(q->lent_bytes >= l.buf->len);
            q->lent_bytes -= l.buf->len;
            psbuf_unref(l.buf);
        } else {
            q->loans[keep++] = l;
        }
    }
    q->nloans = keep;
}

void outq_return_all(outq *q)
{
    for (size_t i = 0; i < q->nloans; i++)
        psbuf_unref(q->loans[i].buf);
    q->nloans = 0;
    q->lent_bytes = 0;
}

/* ---- writing ----------------------------------------------------------- */

/* Decide how its payload leaves, once, before any of it has. */
static outq_mode outq_decide(outq *q, outq_item *it)
{
    if (it->mode == OUTQ_UNDECIDED) {
        bool big = it->payload->len >= ZCOPY_MIN && it->payload->mapped;
        it->mode = q->splice && big && q->lent_bytes + it->payload->len <= q->lend_cap ? OUTQ_SPLICE
                                                                                          : OUTQ_COPY;
    }
    return it->mode;
}

/* Splicing is not possible here (no pipes left, a kernel or filter that
 * refuses it): copy from now on. The pipe holds only references to bytes
 * we still have, so dropping it loses nothing: the payload resumes from
 * `done` by writev (and is still lent at the end if some of it went by
 * reference). */
static void outq_splice_fail(outq *q, int err)
{
    q->splice = false;
    q->splice_errno = err ? err : EINVAL;
    zcopy_close(&q->zc);
    for (size_t i = 0; i < q->len; i++)
        if (outq_at(q, i)->mode == OUTQ_SPLICE)
            outq_at(q, i)->mode = OUTQ_COPY;
}

static ssize_t outq_writev(outq *q, int fd);

/* One step of the head payload, spliced. */
static ssize_t outq_splice_step(outq *q, int fd, outq_item *it)
{
    assert(it->mode == OUTQ_SPLICE && it->done >= it->hlen);
    uint64_t pdone = it->done - it->hlen;
    ssize_t w = zcopy_send(&q->zc, fd, it->payload->data, it->payload->len, pdone);
    if (w == ZCOPY_UNSUPPORTED) {
        outq_splice_fail(q, errno);
        return outq_writev(q, fd);
    }
    if (w < 0)
        return -1;
    q->bytes -= (uint64_t)w;
    q->spliced += (uint64_t)w;
    it->done += (uint64_t)w;
    it->lent_pages = true;
    if (it->done == outq_item_total(it))
        outq_finish_head(q);
    return w;
}

/* Headers and copied payloads, as many frames as one writev takes; stops
 * after the header of a payload that is to be spliced. */
static ssize_t outq_writev(outq *q, int fd)
{
    struct iovec iov[OUTQ_IOV];
    int n = 0;
    for (size_t i = 0; i < q->len && n + 2 <= OUTQ_IOV; i++) {
        outq_item *it = outq_at(q, i);
        if (it->done < it->hlen) {
            iov[n].iov_base = it->hdr + it->done;
            iov[n++].iov_len = it->hlen - it->done;
        }
        if (!it->payload)
            continue;
        if (outq_decide(q, it) == OUTQ_SPLICE)
            break;
        uint64_t pdone = it->done > it->hlen ? it->done - it->hlen : 0;
        if (it->payload->len > pdone) {
            iov[n].iov_base = it->payload->data + pdone;
            iov[n++].iov_len = it->payload->len - pdone;
        }
    }
    /* The head has header bytes left, or its payload is copied (a head
     * ready to be spliced goes to outq_splice_step). */
    assert(n > 0);
    ssize_t w = writev(fd, iov, n);
    if (w <= 0)
        return w;
    size_t left = (size_t)w;
    q->bytes -= left;
    while (left && q->len) {
        outq_item *it = outq_at(q, 0);
        uint64_t total = outq_item_total(it);
        uint64_t rest = total - it->done;
        uint64_t pay_rest = total - (it->done > it->hlen ? it->done : it->hlen);
        if (it->mode == OUTQ_SPLICE) {
            /* only its header went by writev */
            uint64_t hrest = it->hlen > it->done ? it->hlen - it->done : 0;
            uint64_t take = left < hrest ? left : hrest;
            it->done += take;
            left -= take;
            assert(left == 0);
            break;
        }
        if (left < rest) {
            uint64_t hrest = it->hlen > it->done ? it->hlen - it->done : 0;
            if (left > hrest)
                q->copied += left - hrest;
            it->done += left;
            break;
        }
        q->copied += pay_rest;
        left -= rest;
        it->done = total;
        outq_finish_head(q); /* lent if splicing stopped part way through it */
    }
    return w;
}

ssize_t outq_write(outq *q, int fd)
{
    if (q->len == 0)
        return 0;
    outq_item *h = outq_at(q, 0);
    if (h->done >= h->hlen && h->payload && h->mode == OUTQ_SPLICE)
        return outq_splice_step(q, fd, h);
    return outq_writev(q, fd);
}
