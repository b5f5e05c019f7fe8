/* cugpu_fake.c — the fake GPU of cugpu.h: host memory, a worker thread per
 * stream running its operations in order, kernels on the host (the role's
 * host_run: the same arithmetic, the same bits as its GPU code), injected
 * errors.
 *
 * A test aid, like the `test` device: it exercises the cuda device's host
 * logic (queues, completions from another thread, drains, failures) on any
 * machine. It is not fast and does not try to be.
 */
#include "shared/cugpu.h"
#include "shared/clock.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* FOP_FREE: a stream-ordered free (dst is the memory). It runs even on a
 * failed stream (nothing else of that stream runs any more) and counts in
 * no injected failure: it is the allocator's, not the GPU's work. */
typedef enum fake_kind { FOP_COPY, FOP_LAUNCH, FOP_HOST_FN, FOP_RECORD, FOP_FREE } fake_kind;

typedef struct fake_op {
    fake_kind kind;
    void *dst;
    const void *src;
    size_t n;
    void (*fn)(void *);
    void *arg;
    cugpu_event *ev;
    struct fake_op *next;
    max_align_t launch[]; /* FOP_LAUNCH: a copy of the role's launch (launch_size bytes) */
} fake_op;

struct cugpu_event {
    uint64_t t_ns; /* when the worker reached it */
    bool done;
};

typedef struct fake_gpu fake_gpu;

struct cugpu_stream {
    fake_gpu *gpu;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, or the stream became idle */
    fake_op *head, *tail;
    bool running;           /* the worker holds an operation */
    bool stop;
    bool failed;
    char why[256];
    unsigned seed;
};

struct fake_gpu {
    cugpu base;
    uint64_t fail_at;
    unsigned delay_us;
    char *hold; /* while this file exists, no operation starts */
    atomic_uint_fast64_t ops; /* operations run, over every stream */
};

/* ---- the stream's worker ------------------------------------------------------ */

static void fake_run(cugpu_stream *s, fake_op *op)
{
    switch (op->kind) {
    case FOP_COPY:
        memmove(op->dst, op->src, op->n);
        break;
    case FOP_LAUNCH:
        s->gpu->base.kernels->host_run(op->launch);
        break;
    case FOP_HOST_FN:
        op->fn(op->arg);
        break;
    case FOP_RECORD:
        op->ev->t_ns = clock_now_ns();
        __atomic_store_n(&op->ev->done, true, __ATOMIC_RELEASE);
        break;
    case FOP_FREE:
        free(op->dst);
        break;
    }
    (void)s;
}

static void *fake_worker(void *arg)
{
    cugpu_stream *s = arg;
    fake_gpu *g = s->gpu;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        fake_op *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        bool skip = s->failed && op->kind != FOP_FREE;
        s->running = !skip;
        pthread_mutex_unlock(&s->mu);
        if (op->kind == FOP_FREE) {
            fake_run(s, op);
        } else if (!skip) {
            while (g->hold && access(g->hold, F_OK) == 0) {
                struct timespec ts = {0, 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            if (g->delay_us) {
                unsigned us = (unsigned)rand_r(&s->seed) % (g->delay_us + 1);
                struct timespec ts = {0, (long)us * 1000};
                nanosleep(&ts, NULL);
            }
            uint64_t nth = atomic_fetch_add(&g->ops, 1) + 1;
            if (g->fail_at && nth == g->fail_at) {
                pthread_mutex_lock(&s->mu);
                s->failed = true;
                snprintf(s->why, sizeof s->why, "fake GPU: injected failure of operation %llu (an unspecified launch "
                         "failure)", (unsigned long long)nth);
                pthread_mutex_unlock(&s->mu);
            } else {
                fake_run(s, op);
            }
        }
        free(op);
        pthread_mutex_lock(&s->mu);
        s->running = false;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* op at the end of s's queue, the worker woken (s->mu held). */
static void fake_append(cugpu_stream *s, fake_op *op)
{
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&s->cv);
}

static int fake_queue(cugpu *g, cugpu_stream *s, fake_op *op)
{
    if (!op) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    if (s->failed) {
        /* CUDA refuses work on a context with a sticky error at once. */
        snprintf(g->err, sizeof g->err, "%s", s->why);
        pthread_mutex_unlock(&s->mu);
        free(op);
        return -1;
    }
    fake_append(s, op);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- the ops ------------------------------------------------------------------- */

/* The most one allocation may take: a GPU's memory is finite, and an
 * allocation beyond it is refused as cudaMalloc refuses it (without asking
 * the host, whose sanitizers would abort on such a size). */
#define FAKE_GPU_MEMORY ((size_t)16 << 30)

/* Page-aligned, as cudaMalloc's and cudaHostAlloc's are. */
static void *fake_alloc(cugpu *g, size_t bytes)
{
    void *p = NULL;
    if (bytes > FAKE_GPU_MEMORY || posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
        p = NULL;
    if (!p)
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory (%zu bytes)", bytes);
    return p;
}

static void fake_free(cugpu *g, void *p)
{
    (void)g;
    free(p);
}

static void *fake_alloc_async(cugpu *g, cugpu_stream *s, size_t bytes)
{
    (void)s; /* host memory: usable at once, so also in stream order */
    return fake_alloc(g, bytes);
}

static void fake_free_async(cugpu *g, cugpu_stream *s, void *p)
{
    if (!p)
        return;
    fake_op *op = calloc(1, sizeof *op);
    pthread_mutex_lock(&s->mu);
    if (s->failed || !op) {
        /* A failed stream runs nothing more; without memory for the
         * operation, wait for the stream (never on a real GPU's path). */
        while (!s->failed && (s->head || s->running))
            pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        free(op);
        fake_free(g, p);
        return;
    }
    op->kind = FOP_FREE;
    op->dst = p;
    fake_append(s, op);
    pthread_mutex_unlock(&s->mu);
}

static cugpu_stream *fake_stream_new(cugpu *g)
{
    cugpu_stream *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return NULL;
    }
    s->gpu = (fake_gpu *)g;
    s->seed = (unsigned)(uintptr_t)s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, fake_worker, s) != 0) {
        snprintf(g->err, sizeof g->err, "fake GPU: cannot start a stream's thread");
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return NULL;
    }
    return s;
}

static void fake_stream_free(cugpu *g, cugpu_stream *s)
{
    (void)g;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true; /* the worker empties its queue first */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static int fake_copy(cugpu *g, cugpu_stream *s, void *dst, const void *src, size_t n, cugpu_dir dir)
{
    (void)dir;
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_COPY;
        op->dst = dst;
        op->src = src;
        op->n = n;
    }
    return fake_queue(g, s, op);
}

static int fake_launch(cugpu *g, cugpu_stream *s, const void *l)
{
    size_t n = g->kernels->launch_size;
    fake_op *op = calloc(1, sizeof *op + n);
    if (op) {
        op->kind = FOP_LAUNCH;
        memcpy(op->launch, l, n);
    }
    return fake_queue(g, s, op);
}

static int fake_host_fn(cugpu *g, cugpu_stream *s, void (*fn)(void *), void *arg)
{
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_HOST_FN;
        op->fn = fn;
        op->arg = arg;
    }
    return fake_queue(g, s, op);
}

static cugpu_event *fake_event_new(cugpu *g)
{
    cugpu_event *e = calloc(1, sizeof *e);
    if (!e)
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
    else
        e->done = true; /* never recorded: complete, as CUDA answers */
    return e;
}

static void fake_event_free(cugpu *g, cugpu_event *e)
{
    (void)g;
    free(e);
}

static int fake_event_record(cugpu *g, cugpu_stream *s, cugpu_event *e)
{
    __atomic_store_n(&e->done, false, __ATOMIC_RELEASE);
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_RECORD;
        op->ev = e;
    }
    return fake_queue(g, s, op);
}

static int fake_event_query(cugpu *g, cugpu_event *e)
{
    (void)g;
    return __atomic_load_n(&e->done, __ATOMIC_ACQUIRE) ? 0 : 1;
}

static int fake_elapsed_ms(cugpu *g, cugpu_event *from, cugpu_event *to, float *ms)
{
    if (!__atomic_load_n(&from->done, __ATOMIC_ACQUIRE) || !__atomic_load_n(&to->done, __ATOMIC_ACQUIRE)) {
        snprintf(g->err, sizeof g->err, "fake GPU: an event is not complete");
        return -1;
    }
    *ms = (float)((double)(to->t_ns - from->t_ns) / 1e6);
    return 0;
}

static int fake_query(cugpu *g, cugpu_stream *s)
{
    pthread_mutex_lock(&s->mu);
    int rc = s->failed ? -1 : s->head || s->running ? 1 : 0;
    if (rc < 0)
        snprintf(g->err, sizeof g->err, "%s", s->why);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int fake_sync(cugpu *g, cugpu_stream *s)
{
    pthread_mutex_lock(&s->mu);
    while ((s->head || s->running) && !s->failed)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return fake_query(g, s) < 0 ? -1 : 0;
}

static void fake_destroy(cugpu *g)
{
    free(((fake_gpu *)g)->hold);
    free(g);
}

static const cugpu_ops fake_ops = {
    .name = "fake",
    .dev_alloc = fake_alloc,
    .dev_free = fake_free,
    .dev_alloc_async = fake_alloc_async,
    .dev_free_async = fake_free_async,
    .host_alloc = fake_alloc,
    .host_free = fake_free,
    .stream_new = fake_stream_new,
    .stream_free = fake_stream_free,
    .copy = fake_copy,
    .launch = fake_launch,
    .host_fn = fake_host_fn,
    .event_new = fake_event_new,
    .event_free = fake_event_free,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .elapsed_ms = fake_elapsed_ms,
    .query = fake_query,
    .sync = fake_sync,
    .destroy = fake_destroy,
};

cugpu *cugpu_fake_new(const cugpu_kernels *k, uint64_t fail_at, unsigned delay_us, char *err, size_t errlen)
{
    assert(k && k->host_run && k->launch_size > 0);
    fake_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->base.ops = &fake_ops;
    g->base.kernels = k;
    g->base.device = 0;
    snprintf(g->base.name, sizeof g->base.name, "fake GPU (host memory, a thread per stream)");
    g->fail_at = fail_at;
    g->delay_us = delay_us;
    atomic_init(&g->ops, 0);
    return &g->base;
}

int cugpu_fake_hold(cugpu *g, const char *path)
{
    fake_gpu *f = (fake_gpu *)g;
    assert(g->ops == &fake_ops);
    free(f->hold);
    f->hold = NULL;
    if (path && *path && !(f->hold = strdup(path))) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return -1;
    }
    return 0;
}
