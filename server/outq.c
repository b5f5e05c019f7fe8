/* outq.c — a connection's output queue (see outq.h). */
#include "server/outq.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#define OUTQ_IOV 128

void outq_init(outq *q)
{
    memset(q, 0, sizeof *q);
}

static outq_item *outq_at(outq *q, size_t i)
{
    return &q->items[(q->head + i) % q->cap];
}

static void outq_item_release(outq_item *it)
{
    if (it->hdr != it->small)
        free(it->hdr);
    if (it->payload)
        psbuf_unref(it->payload);
    it->payload = NULL;
}

void outq_free(outq *q)
{
    for (size_t i = 0; i < q->len; i++)
        outq_item_release(outq_at(q, i));
    free(q->items);
    memset(q, 0, sizeof *q);
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

int outq_push(outq *q, const uint8_t *hdr, size_t hlen, psbuf *payload)
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
    it->done = 0;
    if (payload)
        psbuf_ref(payload);
    q->len++;
    q->bytes += hlen + (payload ? payload->len : 0);
    return 0;
}

ssize_t outq_write(outq *q, int fd)
{
    struct iovec iov[OUTQ_IOV];
    int n = 0;
    for (size_t i = 0; i < q->len && n + 2 <= OUTQ_IOV; i++) {
        outq_item *it = outq_at(q, i);
        if (it->done < it->hlen) {
            iov[n].iov_base = it->hdr + it->done;
            iov[n++].iov_len = it->hlen - it->done;
        }
        uint64_t pdone = it->done > it->hlen ? it->done - it->hlen : 0;
        if (it->payload && it->payload->len > pdone) {
            iov[n].iov_base = it->payload->data + pdone;
            iov[n++].iov_len = it->payload->len - pdone;
        }
    }
    if (n == 0)
        return 0;
    ssize_t w = writev(fd, iov, n);
    if (w <= 0)
        return w;
    size_t left = (size_t)w;
    q->bytes -= left;
    while (left && q->len) {
        outq_item *it = outq_at(q, 0);
        uint64_t total = it->hlen + (it->payload ? it->payload->len : 0);
        uint64_t rest = total - it->done;
        if (left < rest) {
            it->done += left;
            break;
        }
        left -= rest;
        outq_item_release(it);
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    return w;
}
