/* device_test.c — the `test` device: CPU arithmetic that completes late,
 * on memory it checks the kinds use as they would a GPU's.
 *
 * It exists to prove, on any machine, the path a GPU device takes: a job
 * is handed to a worker thread, which sleeps a random delay (up to
 * $PSBENCH_TEST_DEVICE_MAX_DELAY_US microseconds, default 2000), runs the
 * job's arithmetic and queues it as complete; an eventfd registered on the
 * reactor's event_base wakes the reactor, which runs the `done` callbacks
 * in submission order — so every future resolves later than the call that
 * started it, exactly as with a CUDA stream's host callback. Streaming
 * folds run inline (their source bytes live only during the call).
 *
 * Its buffers are host memory (device_host.c), but it enforces device.h's
 * rules, aborting the process with the reason on the first breach:
 *  - a host image is read (device_buf_host, device_buf_take_host) only
 *    once a job with to_host naming it has completed and nothing has
 *    written the buffer since (a fold, a recv, a job): a kind that would
 *    send a GPU's stale pinned memory dies here;
 *  - a buffer or accumulator a job in flight names is not folded into,
 *    received into, read, reset or freed;
 *  - recv areas are a staging buffer of its own, of a random length (at
 *    least DEVICE_AREA_MIN), copied into the buffer only by
 *    device_recv_done for the area just given: bytes a kind receives
 *    without saying so, or says it has without receiving, are lost, as
 *    they would be with a GPU's staging ring;
 *  - every buffer is freed before the device is destroyed.
 *
 * Threads: the reactor submits, drains, and keeps the bookkeeping above
 * (touched only on its thread); the worker runs jobs. The two queues
 * (submitted, completed) are guarded by one mutex; a job's buffers are
 * touched by the worker only between submit and completion, when the
 * reactor leaves them alone (the rules above).
 */
#include "server/device_host.h"
#include "shared/log.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

typedef struct test_device {
    device base;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work submitted, or stop */
    pthread_cond_t idle_cv; /* a job completed */
    device_job *todo_head, *todo_tail; /* submitted, not yet run */
    device_job *done_head, *done_tail; /* run, `done` not yet called */
    size_t in_flight;                  /* submitted and not yet delivered */
    bool stop;
    unsigned max_delay_us;
    uint64_t rng; /* the worker's delay draws */
    int efd;
    struct event *wake_ev;
    /* The reactor's side: memory, recv areas, bookkeeping. */
    device_host mem;
    size_t live;          /* devbufs and devsparses not freed */
    uint8_t *stage;       /* recv areas: TEST_STAGE_MAX bytes */
    devbuf *area_dst;     /* the area given last, until another call */
    uint64_t area_off;
    size_t area_max;
    uint64_t area_rng;    /* lengths of areas */
} test_device;

/* The staging buffer: recv areas are 1 to 16 times DEVICE_AREA_MIN. */
#define TEST_STAGE_MAX (16u * DEVICE_AREA_MIN)

/* A breach of device.h's rules: say which, and stop here (in every build:
 * the test device exists to catch these). */
__attribute__((format(printf, 1, 2), noreturn)) static void test_fatal(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error("test device: %s", msg);
    abort();
}

static uint64_t test_mix(uint64_t *state)
{
    uint64_t x = (*state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Any call but recv_done ends the area given last. */
static void test_area_end(test_device *t) { t->area_dst = NULL; }

static void test_check_idle(const devbuf *b, const char *what)
{
    if (b->jobs)
        test_fatal("%s a buffer that a job in flight uses", what);
}

static devbuf *test_buf_new(device *d, size_t bytes)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    devbuf *b = device_host_buf_new(&t->mem, bytes);
    if (b)
        t->live++;
    return b;
}

static void test_buf_free(device *d, devbuf *b)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    test_check_idle(b, "freeing");
    t->live--;
    device_host_buf_free(&t->mem, b);
}

static void test_check_host(const devbuf *b, const char *what)
{
    test_check_idle(b, what);
    if (!b->host_valid)
        test_fatal("%s a host image no to-host job made host-visible (or written since)", what);
}

static psbuf *test_buf_host(device *d, devbuf *b)
{
    test_area_end((test_device *)d);
    test_check_host(b, "reading");
    return b->host;
}

static psbuf *test_buf_take_host(device *d, devbuf *b)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    test_check_host(b, "taking");
    t->live--;
    return device_host_buf_take(&t->mem, b);
}

static uint8_t *test_recv_area(device *d, devbuf *dst, uint64_t off, size_t *max)
{
    test_device *t = (test_device *)d;
    test_check_idle(dst, "receiving into");
    if (off >= dst->host->len)
        test_fatal("a recv area at %llu of a %zu-byte buffer", (unsigned long long)off, dst->host->len);
    size_t len = DEVICE_AREA_MIN * (size_t)(1 + test_mix(&t->area_rng) % (TEST_STAGE_MAX / DEVICE_AREA_MIN));
    size_t left = dst->host->len - off;
    *max = len < left ? len : left;
    t->area_dst = dst;
    t->area_off = off;
    t->area_max = *max;
    return t->stage;
}

static void test_recv_done(device *d, devbuf *dst, uint64_t off, size_t n)
{
    test_device *t = (test_device *)d;
    if (t->area_dst != dst || t->area_off != off || n > t->area_max)
        test_fatal("recv_done of %zu bytes at %llu matches no recv area given just before", n,
                   (unsigned long long)off);
    test_area_end(t);
    memcpy(dst->host->data + off, t->stage, n);
    dst->host_valid = false;
}

static void test_fold(device *d, device_fold_op op, devbuf *acc, uint64_t elem_off, const uint8_t *src, size_t n,
                      float s)
{
    test_area_end((test_device *)d);
    test_check_idle(acc, "folding into");
    if ((elem_off + n) * sizeof(float) > acc->host->len)
        test_fatal("a fold past the end of its buffer");
    acc->host_valid = false;
    device_host_fold(op, acc, elem_off, src, n, s);
}

static void test_fold_narrow_out(device *d, device_fold_op op, devbuf *acc, devbuf *out, uint64_t elem_off,
                                 const uint8_t *src, size_t n, float s, half_type t)
{
    test_area_end((test_device *)d);
    test_check_idle(acc, "folding from");
    test_check_idle(out, "folding into");
    if ((elem_off + n) * sizeof(float) > acc->host->len || (elem_off + n) * 2 > out->host->len)
        test_fatal("a narrow fold past the end of its buffers");
    out->host_valid = false;
    device_host_fold_narrow_out(op, acc, out, elem_off, src, n, s, t);
}

static void test_fold_narrow_pair(device *d, device_fold_op op, devbuf *stash, devbuf *acc, devbuf *out,
                                  uint64_t elem_off, const uint8_t *src, size_t n, float s, half_type t)
{
    test_area_end((test_device *)d);
    test_check_idle(stash, "folding from");
    devbuf *dst = op == FOLD_ADD ? acc : out;
    test_check_idle(dst, "folding into");
    if ((elem_off + n) * 2 > stash->host->len || (elem_off + n) * (op == FOLD_ADD ? 4 : 2) > dst->host->len)
        test_fatal("a narrow pair fold past the end of its buffers");
    dst->host_valid = false;
    device_host_fold_narrow_pair(op, stash, acc, out, elem_off, src, n, s, t);
}

static void test_check_sparse(const devsparse *s, const char *what)
{
    if (s->jobs)
        test_fatal("%s a sparse accumulator that a job in flight uses", what);
}

static devsparse *test_sparse_new(device *d)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    devsparse *s = device_host_sparse_new();
    if (s)
        t->live++;
    return s;
}

static void test_sparse_free(device *d, devsparse *s)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    test_check_sparse(s, "freeing");
    t->live--;
    device_host_sparse_free(s);
}

static void test_sparse_reset(device *d, devsparse *s, uint64_t rows, uint64_t cols)
{
    test_area_end((test_device *)d);
    test_check_sparse(s, "resetting");
    sparse_acc_reset(&s->acc, rows, cols);
}

static int test_sparse_map(device *d, devsparse *s, const uint8_t *idx, uint64_t nnz, uint32_t *slots, int64_t *bad)
{
    test_area_end((test_device *)d);
    test_check_sparse(s, "mapping rows of");
    return sparse_acc_map(&s->acc, idx, nnz, slots, bad);
}

static void test_sparse_fold(device *d, devsparse *s, const uint32_t *slots, uint64_t e0, const uint8_t *src,
                             size_t n)
{
    test_area_end((test_device *)d);
    test_check_sparse(s, "folding into");
    sparse_acc_add(&s->acc, slots, e0, src, n);
}

static uint64_t test_sparse_result_size(device *d, devsparse *s)
{
    test_area_end((test_device *)d);
    return sparse_acc_result_size(&s->acc);
}

/* Bookkeeping at submit: the job's buffers are the device's now, and what
 * it writes is no longer host-visible. */
static void test_claim(devbuf *b, bool writes, void *arg)
{
    (void)arg;
    b->jobs++;
    if (writes)
        b->host_valid = false;
}

/* At completion, before `done`: given back. */
static void test_unclaim(devbuf *b, bool writes, void *arg)
{
    (void)writes;
    (void)arg;
    assert(b->jobs > 0);
    b->jobs--;
}

static unsigned test_delay_us(test_device *t)
{
    if (!t->max_delay_us)
        return 0;
    return (unsigned)(test_mix(&t->rng) % (t->max_delay_us + 1u));
}

static void *test_worker(void *arg)
{
    test_device *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->todo_head && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (!t->todo_head)
            break; /* stop, and nothing left to run */
        device_job *j = t->todo_head;
        t->todo_head = j->next;
        if (!t->todo_head)
            t->todo_tail = NULL;
        unsigned us = test_delay_us(t);
        pthread_mutex_unlock(&t->mu);

        struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
        device_host_job_run(j);

        pthread_mutex_lock(&t->mu);
        j->next = NULL;
        if (t->done_tail)
            t->done_tail->next = j;
        else
            t->done_head = j;
        t->done_tail = j;
        pthread_cond_broadcast(&t->idle_cv);
        uint64_t one = 1;
        ssize_t w = write(t->efd, &one, sizeof one); /* wakes the reactor */
        (void)w; /* the counter cannot overflow with so few writes */
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Take the completed jobs and run their callbacks, in order, without the
 * lock (a callback may submit more work). */
static size_t test_deliver(test_device *t)
{
    pthread_mutex_lock(&t->mu);
    device_job *j = t->done_head;
    t->done_head = t->done_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    size_t n = 0;
    while (j) {
        device_job *next = j->next;
        pthread_mutex_lock(&t->mu);
        t->in_flight--;
        pthread_mutex_unlock(&t->mu);
        device_host_job_bufs(j, test_unclaim, NULL);
        devsparse *s = device_host_job_sparse(j);
        if (s)
            s->jobs--;
        /* Host-visible once no other job in flight still names it. */
        if (j->to_host && j->to_host->jobs == 0)
            j->to_host->host_valid = true;
        j->done(j); /* may free j */
        j = next;
        n++;
    }
    return n;
}

static void test_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    test_device *t = arg;
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r; /* EAGAIN: another wake-up took the count; deliver anyway */
    if (test_deliver(t) && t->base.after)
        t->base.after(t->base.after_ctx);
}

static void test_submit(device *d, device_job *j)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    device_host_job_bufs(j, test_claim, NULL);
    devsparse *s = device_host_job_sparse(j);
    if (s)
        s->jobs++;
    j->error = NULL;
    j->gpu_ms = -1;
    j->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->todo_tail)
        t->todo_tail->next = j;
    else
        t->todo_head = j;
    t->todo_tail = j;
    t->in_flight++;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void test_drain(device *d)
{
    test_device *t = (test_device *)d;
    test_area_end(t);
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->in_flight && !t->done_head)
            pthread_cond_wait(&t->idle_cv, &t->mu);
        bool more = t->in_flight > 0;
        pthread_mutex_unlock(&t->mu);
        if (!more)
            return;
        test_deliver(t);
    }
}

static void test_destroy(device *d)
{
    test_device *t = (test_device *)d;
    test_drain(d);
    if (t->live)
        test_fatal("destroyed with %zu buffer(s) or accumulator(s) not freed", t->live);
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->worker, NULL);
    if (t->wake_ev)
        event_free(t->wake_ev);
    close(t->efd);
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->idle_cv);
    pthread_mutex_destroy(&t->mu);
    device_host_free(&t->mem);
    free(t->stage);
    free(t);
}

static const device_ops test_ops = {
    .name = "test",
    .buf_new = test_buf_new,
    .buf_free = test_buf_free,
    .buf_host = test_buf_host,
    .buf_take_host = test_buf_take_host,
    .recv_area = test_recv_area,
    .recv_done = test_recv_done,
    .fold = test_fold,
    .fold_narrow_out = test_fold_narrow_out,
    .fold_narrow_pair = test_fold_narrow_pair,
    .sparse_new = test_sparse_new,
    .sparse_free = test_sparse_free,
    .sparse_reset = test_sparse_reset,
    .sparse_map = test_sparse_map,
    .sparse_fold = test_sparse_fold,
    .sparse_result_size = test_sparse_result_size,
    .submit = test_submit,
    .drain = test_drain,
    .destroy = test_destroy,
};

device *device_test_new(struct event_base *base, bufpool *pool, char *err, size_t errlen)
{
    test_device *t = calloc(1, sizeof *t);
    if (!t || !(t->stage = malloc(TEST_STAGE_MAX))) {
        free(t);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    device_host_init(&t->mem, pool);
    t->base.ops = &test_ops;
    t->max_delay_us = 2000;
    const char *env = getenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US");
    if (env && *env) {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end || v > 10000000ul) {
            snprintf(err, errlen, "PSBENCH_TEST_DEVICE_MAX_DELAY_US='%s' is not 0..10000000", env);
            free(t->stage);
            free(t);
            return NULL;
        }
        t->max_delay_us = (unsigned)v;
    }
    t->rng = (uint64_t)getpid() * 0x2545F4914F6CDD1Dull ^ (uint64_t)time(NULL);
    t->area_rng = t->rng ^ 0x5851F42D4C957F2Dull;
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        free(t->stage);
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->idle_cv, NULL);
    t->wake_ev = event_new(base, t->efd, EV_READ | EV_PERSIST, test_on_wake, t);
    if (!t->wake_ev || event_add(t->wake_ev, NULL) < 0 ||
        pthread_create(&t->worker, NULL, test_worker, t) != 0) {
        snprintf(err, errlen, "cannot start the test device");
        if (t->wake_ev)
            event_free(t->wake_ev);
        close(t->efd);
        free(t->stage);
        free(t);
        return NULL;
    }
    return &t->base;
}
