/* comm.c — the trainer's communication thread (see comm.h). */
#include "trainer/comm.h"
#include "shared/clock.h"
#include "trainer/ttrace.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>


struct comm {
    client *cl;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake;                 /* eventfd */
    comm_bucket **queue;      /* pushed, not yet given to the client (mu) */
    uint32_t nqueue;
    comm_bucket *inflight[COMM_MAX_BUCKETS]; /* by id: pushed, result not begun (comm thread only) */
    bool stop, failed;        /* mu */
    char err[512];            /* mu, when failed */
    double rpc_timeout_s;
    const ttrace *tt;         /* NULL: no trace */
    uint64_t trace_step;      /* the comm ring's step (comm thread only) */
};

/* ---- the sink: runs on the comm thread ---------------------------------- */

/* The bucket's own result buffer holds at least `bytes`. 0, or -1. */
static int comm_result_room(comm_bucket *b, uint64_t bytes, char *err, size_t errlen)
{
    if (bytes <= b->result_cap)
        return 0;
    uint8_t *r = realloc(b->result, bytes);
    if (!r) {
        snprintf(err, errlen, "out of memory for a result of %" PRIu64 " bytes", bytes);
        return -1;
    }
    b->result = r;
    b->result_cap = bytes;
    return 0;
}

static int comm_begin(void *ctx, uint32_t server, const frame_hdr *h, void **frame, char *err, size_t errlen)
{
    comm *c = ctx;
    comm_bucket *b = h->bucket < COMM_MAX_BUCKETS ? c->inflight[h->bucket] : NULL;
    if (!b || h->batch != b->hdr.batch || h->layout != b->hdr.layout) {
        snprintf(err, errlen, "unexpected result for batch %" PRIu64 " bucket %" PRIu64, h->batch, h->bucket);
        return -1;
    }
    if (h->layout == LAYOUT_DENSE) {
        if (frame_dtype_type(h->dtype) != (int)b->wire) {
            snprintf(err, errlen, "result for bucket %" PRIu64 " is not in %s, the type of its push", h->bucket,
                     frame_dtype_name(b->wire));
            return -1;
        }
        if (h->count != b->hdr.count || h->payload != b->hdr.count * half_type_size(b->wire)) {
            snprintf(err, errlen, "result for bucket %" PRIu64 " has the wrong size", h->bucket);
            return -1;
        }
        /* A bucket pushed from GPU memory (no host destination) whose mean
         * comes on the socket: kept here in f32 (a narrow one widened as it
         * comes), uploaded by the hook. */
        if (!b->dense_dst && comm_result_room(b, h->count * 4, err, errlen) < 0)
            return -1;
    } else {
        if (h->cols != b->hdr.cols || h->rows != b->hdr.rows || h->nnz > h->rows ||
            h->payload != h->nnz * (8 + 4 * h->cols)) {
            snprintf(err, errlen, "sparse result for bucket %" PRIu64 " has the wrong shape", h->bucket);
            return -1;
        }
        if (comm_result_room(b, h->payload, err, errlen) < 0)
            return -1;
        b->result_len = h->payload;
        b->result_nnz = h->nnz;
    }
    /* From here the result's frame owns the bucket: a second result for
     * it (from any server) is unexpected. */
    c->inflight[h->bucket] = NULL;
    b->t_in_ns = c->cl->rx_ns;
    *frame = b;
    return 0;
}

static int comm_data(void *ctx, void *frame, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    comm_bucket *b = frame;
    if (b->hdr.layout == LAYOUT_DENSE && b->wire != HALF_FP32) {
        /* A narrow mean, widened (exactly) into the gradients it
         * averages (or, for a bucket in GPU memory, into the result the
         * hook uploads): whole elements, as off + n is even. */
        assert(off % 2 == 0 && n % 2 == 0);
        float *dst = b->dense_dst ? b->dense_dst : (float *)(void *)b->result;
        half_widen(b->wire, dst + off / 2, p, n / 2);
    } else if (b->hdr.layout == LAYOUT_DENSE)
        memcpy(b->dense_dst ? (uint8_t *)b->dense_dst + off : b->result + off, p, n);
    else
        memcpy(b->result + off, p, n);
    return 0;
}

static int comm_dev(void *ctx, void *frame, devmem src, uint64_t n, char *err, size_t errlen)
{
    comm_bucket *b = frame;
    (void)ctx;
    if (b->hdr.layout != LAYOUT_DENSE || n != b->hdr.count * half_type_size(b->wire)) {
        snprintf(err, errlen, "a result in GPU memory for bucket %u that is not its dense mean", b->id);
        return -1;
    }
    b->result_dev = src; /* copied (a narrow one widened) by the hook, in the trainer's stream order */
    return 0;
}

static int comm_end(void *ctx, void *frame, char *err, size_t errlen)
{
    comm *c = ctx;
    comm_bucket *b = frame;
    b->t_done_ns = clock_now_ns();
    const client_conn *cn = &c->cl->conns[b->server];
    trace_add(c->cl->trace, TRACE_FRAME_IN, cn->trace_lane_in, b->t_in_ns, b->t_done_ns,
              trace_ids_make((int64_t)b->hdr.batch, b->id, c->cl->trace_trainer, (int32_t)cn->server_rank));
    pthread_mutex_lock(&c->mu);
    b->done = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* ---- the thread --------------------------------------------------------- */

static void comm_fail(comm *c, const char *why)
{
    pthread_mutex_lock(&c->mu);
    if (!c->failed) {
        c->failed = true;
        snprintf(c->err, sizeof c->err, "%s", why);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* A bucket of `batch` is taken: the comm ring's step from now on is that
 * batch's (outside the timed pass: outside every window). Its answer, and
 * every frame before the next batch's, are that step's: a batch's pushes
 * go once the previous batch's answers are all in. */
static void comm_trace_step(comm *c, uint64_t batch)
{
    uint64_t step = ttrace_step_of(c->tt, batch);
    if (step != c->trace_step) {
        c->trace_step = step;
        trace_ring_step(c->cl->trace, step);
    }
}

static void *comm_main(void *arg)
{
    comm *c = arg;
    char err[512];
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool stop = c->stop;
        comm_bucket *take[64];
        uint32_t n = 0;
        while (n < 64 && c->nqueue > 0) {
            take[n++] = c->queue[0];
            memmove(c->queue, c->queue + 1, (c->nqueue - 1) * sizeof *c->queue);
            c->nqueue--;
        }
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return NULL;
        for (uint32_t i = 0; i < n; i++) {
            comm_bucket *b = take[i];
            c->inflight[b->id] = b;
            if (c->cl->trace)
                comm_trace_step(c, b->hdr.batch);
            client_src src = {.host = b->payload, .dev = b->dev, .on_dev = b->on_dev};
            if (client_queue_src(c->cl, b->server, &b->hdr, &src, err, sizeof err) < 0) {
                comm_fail(c, err);
                return NULL;
            }
        }
        if (client_poll(c->cl, 100, err, sizeof err) < 0) {
            comm_fail(c, err);
            return NULL;
        }
    }
}

comm *comm_start(client *cl, double rpc_timeout_s, const ttrace *tt, char *err, size_t errlen)
{
    comm *c = calloc(1, sizeof *c);
    if (!c || !(c->queue = calloc(COMM_MAX_BUCKETS, sizeof *c->queue))) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->cl = cl;
    c->rpc_timeout_s = rpc_timeout_s;
    /* A client traced has its trace's ttrace here (hook_rpc.c). */
    assert(!cl->trace || tt);
    c->tt = tt;
    c->trace_step = TTRACE_UNTIMED; /* the ring's gate starts outside */
    c->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = c->wake < 0 ? errno : 0;
    pthread_mutex_init(&c->mu, NULL);
    clock_cond_init(&c->cv);
    cl->sink.begin = comm_begin;
    cl->sink.data = comm_data;
    cl->sink.end = comm_end;
    cl->sink.dev = comm_dev;
    cl->sink.ctx = c;
    cl->wake_fd = c->wake;
    if (rc == 0)
        rc = pthread_create(&c->th, NULL, comm_main, c);
    if (rc != 0) {
        /* EAGAIN: no memory for its stack (`ulimit -v`), or no thread left. */
        snprintf(err, errlen, "cannot start the communication thread: %s%s", strerror(rc),
                 rc == EAGAIN ? " (out of memory for its stack, or out of threads)" : "");
        if (c->wake >= 0)
            close(c->wake);
        cl->wake_fd = -1;
        free(c->queue);
        free(c);
        return NULL;
    }
    return c;
}

void comm_push(comm *c, comm_bucket *b, uint32_t server, uint64_t batch)
{
    assert(server < c->cl->nconns);
    b->server = server;
    b->hdr.batch = batch;
    b->done = false;
    b->result_dev = devmem_none();
    b->t_push_ns = clock_now_ns();
    assert(b->id < COMM_MAX_BUCKETS);
    pthread_mutex_lock(&c->mu);
    assert(c->nqueue < COMM_MAX_BUCKETS);
    c->queue[c->nqueue++] = b;
    pthread_mutex_unlock(&c->mu);
    uint64_t one = 1;
    if (write(c->wake, &one, sizeof one) < 0) {
        /* The counter cannot overflow here; the thread polls at 100 ms anyway. */
    }
}

int comm_wait(comm *c, comm_bucket **bs, uint32_t n, char *err, size_t errlen)
{
    struct timespec deadline = clock_deadline(c->rpc_timeout_s);
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        while (!bs[i]->done && !c->failed) {
            if (pthread_cond_timedwait(&c->cv, &c->mu, &deadline) == ETIMEDOUT) {
                snprintf(err, errlen, "timed out after %g s waiting for the result of batch %" PRIu64
                         " bucket %u (--rpc-timeout)", c->rpc_timeout_s, bs[i]->hdr.batch, bs[i]->id);
                rc = -1;
                break;
            }
        }
        if (c->failed) {
            snprintf(err, errlen, "%s", c->err);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void comm_stop(comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_mutex_unlock(&c->mu);
    uint64_t one = 1;
    if (write(c->wake, &one, sizeof one) < 0) {
        /* the 100 ms poll timeout ends the loop anyway */
    }
    pthread_join(c->th, NULL);
    c->cl->wake_fd = -1;
    close(c->wake);
    free(c->queue);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}
