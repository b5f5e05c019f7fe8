/* coll.c — the backend-independent half of coll.h: argument checks, the
 * dispatch through a backend's table of operations (coll_impl.h), and the
 * latch that makes every call after a failure fail fast with the first
 * reason. */
#include "trainer/coll_impl.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shared/log.h"

coll *coll_wrap(const coll_ops *ops, void *impl, uint32_t rank, uint32_t size, char *err, size_t errlen)
{
    coll *c = calloc(1, sizeof *c);
    if (!c) {
        errbuf_set(err, errlen, "%s: out of memory", ops->name);
        return NULL;
    }
    c->ops = ops;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    return c;
}

int coll_check_args(const char *backend, uint32_t rank, uint32_t size, const coll_store *store, double timeout_s,
                    char *err, size_t errlen)
{
    if (size == 0 || size > INT32_MAX) {
        errbuf_set(err, errlen, "%s: a group of %u members (1 to %d)", backend, size, INT32_MAX);
        return -1;
    }
    if (rank >= size) {
        errbuf_set(err, errlen, "%s: rank %u in a group of %u", backend, rank, size);
        return -1;
    }
    if (!store || !store->set || !store->get) {
        errbuf_set(err, errlen, "%s: no rendezvous store", backend);
        return -1;
    }
    /* Up to 10^6 s keeps every conversion to milliseconds exact. */
    if (!isfinite(timeout_s) || timeout_s <= 0 || timeout_s > 1e6) {
        errbuf_set(err, errlen, "%s: timeout %g s (must be above 0 and at most 1e6)", backend, timeout_s);
        return -1;
    }
    return 0;
}

char *coll_key(const char *prefix, const char *name)
{
    size_t pl = prefix ? strlen(prefix) : 0, nl = strlen(name);
    char *k = malloc(pl + 1 + nl + 1);
    if (!k)
        return NULL;
    if (pl) {
        memcpy(k, prefix, pl);
        k[pl++] = '/';
    }
    memcpy(k + pl, name, nl + 1);
    return k;
}

double coll_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void coll_ignore_sigpipe(void)
{
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) != 0)
        return;
    if (!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
}

const char *coll_backend(const coll *c) { return c->ops->name; }
uint32_t coll_rank(const coll *c) { return c->rank; }
uint32_t coll_size(const coll *c) { return c->size; }

/* Marks the group failed with `why` (the first reason stays) and repeats
 * the reason into err. Returns -1. */
static int coll_fail(coll *c, const char *why, char *err, size_t errlen)
{
    if (!c->failed) {
        c->failed = true;
        snprintf(c->failure, sizeof c->failure, "%s", why[0] ? why : "the collective failed (no reason given)");
    }
    errbuf_set(err, errlen, "%s", c->failure);
    return -1;
}

/* 0 when the group may run a collective; -1 with the earlier reason. */
static int coll_usable(coll *c, char *err, size_t errlen)
{
    if (!c) {
        errbuf_set(err, errlen, "no group");
        return -1;
    }
    if (c->failed) {
        errbuf_set(err, errlen, "%s", c->failure);
        return -1;
    }
    return 0;
}

/* An allreduce's buffer of n floats (host or device memory) that no
 * backend can take: none, or more floats than bytes can count. why says
 * which (for coll_fail). */
/* `have`: the buffer is there (host or device memory alike). */
static bool coll_bad_f32(const coll *c, bool have, size_t n, char *why, size_t whylen)
{
    if (have && n <= SIZE_MAX / sizeof(float))
        return false;
    snprintf(why, whylen, "%s allreduce: %s", c->ops->name, have ? "too many elements" : "no buffer");
    return true;
}

int coll_allreduce_sum_f32(coll *c, float *buf, size_t n, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (n == 0)
        return 0;
    if (coll_bad_f32(c, buf != NULL, n, why, sizeof why))
        return coll_fail(c, why, err, errlen);
    why[0] = '\0';
    if (c->ops->allreduce_sum_f32(c, buf, n, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

bool coll_has_half(const coll *c) { return c && c->ops->allreduce_sum_half != NULL; }

int coll_allreduce_sum_half(coll *c, uint16_t *buf, size_t n, half_type t, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (!c->ops->allreduce_sum_half || (t != HALF_FP16 && t != HALF_BF16)) {
        /* A caller's mistake, not the group's: the group stays usable. */
        errbuf_set(err, errlen, "%s allreduce: no %s sum in this backend", c->ops->name, half_type_name(t));
        return -1;
    }
    if (n == 0)
        return 0;
    if (!buf || n > SIZE_MAX / sizeof *buf) {
        snprintf(why, sizeof why, "%s allreduce: %s", c->ops->name, buf ? "too many elements" : "no buffer");
        return coll_fail(c, why, err, errlen);
    }
    why[0] = '\0';
    if (c->ops->allreduce_sum_half(c, buf, n, t, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

bool coll_on_device(const coll *c) { return c && c->ops->allreduce_mean_f32_device != NULL; }

int coll_allreduce_mean_f32_device(coll *c, devf32 dbuf, size_t n, float scale, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (!c->ops->allreduce_mean_f32_device) {
        /* A caller's mistake, not the group's: the group stays usable. */
        errbuf_set(err, errlen, "%s allreduce: not on device memory (this backend takes host buffers)", c->ops->name);
        return -1;
    }
    if (n == 0)
        return 0;
    if (coll_bad_f32(c, !devf32_is_none(dbuf), n, why, sizeof why))
        return coll_fail(c, why, err, errlen);
    why[0] = '\0';
    if (c->ops->allreduce_mean_f32_device(c, dbuf, n, scale, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

bool coll_has_half_device(const coll *c) { return c && c->ops->allreduce_compress_device != NULL; }

int coll_allreduce_compress_device(coll *c, devf32 dbuf, size_t n, half_type t, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (!c->ops->allreduce_compress_device || (t != HALF_FP16 && t != HALF_BF16)) {
        /* A caller's mistake, not the group's: the group stays usable. */
        errbuf_set(err, errlen, "%s allreduce: no %s compression of device buckets in this backend", c->ops->name,
                   half_type_name(t));
        return -1;
    }
    if (n == 0)
        return 0;
    if (coll_bad_f32(c, !devf32_is_none(dbuf), n, why, sizeof why))
        return coll_fail(c, why, err, errlen);
    why[0] = '\0';
    if (c->ops->allreduce_compress_device(c, dbuf, n, t, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

int coll_allgather(coll *c, const void *in, size_t bytes, void *out, char *err, size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (bytes == 0)
        return 0;
    if (!in || !out || bytes > SIZE_MAX / c->size) {
        snprintf(why, sizeof why, "%s allgather: %s", c->ops->name,
                 !in || !out ? "no buffer" : "the output would not fit in memory");
        return coll_fail(c, why, err, errlen);
    }
    why[0] = '\0';
    if (c->ops->allgather(c, in, bytes, out, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

int coll_allgatherv(coll *c, const void *in, size_t bytes, const uint64_t *counts, void *out, char *err,
                    size_t errlen)
{
    char why[COLL_ERR_MAX];
    if (coll_usable(c, err, errlen) != 0)
        return -1;
    if (!counts) {
        snprintf(why, sizeof why, "%s allgatherv: no counts", c->ops->name);
        return coll_fail(c, why, err, errlen);
    }
    if (counts[c->rank] != bytes) {
        snprintf(why, sizeof why, "%s allgatherv: counts[%u] is %llu but this member gives %zu bytes", c->ops->name,
                 c->rank, (unsigned long long)counts[c->rank], bytes);
        return coll_fail(c, why, err, errlen);
    }
    uint64_t total = 0;
    for (uint32_t r = 0; r < c->size; r++) {
        if (counts[r] > SIZE_MAX - total) {
            snprintf(why, sizeof why, "%s allgatherv: the counts add up to more than fits in memory", c->ops->name);
            return coll_fail(c, why, err, errlen);
        }
        total += counts[r];
    }
    if (total == 0)
        return 0;
    if ((bytes && !in) || !out) {
        snprintf(why, sizeof why, "%s allgatherv: no buffer", c->ops->name);
        return coll_fail(c, why, err, errlen);
    }
    why[0] = '\0';
    if (c->ops->allgatherv(c, in, bytes, counts, total, out, why, sizeof why) != 0)
        return coll_fail(c, why, err, errlen);
    return 0;
}

void coll_free(coll *c)
{
    if (!c)
        return;
    c->ops->destroy(c);
    free(c);
}
