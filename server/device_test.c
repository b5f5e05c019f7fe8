/* device_test.c — the `test` device: CPU arithmetic that completes late.
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
 * Threads: the reactor submits and drains; the worker runs jobs. The two
 * queues (submitted, completed) are guarded by one mutex; a job's buffers
 * are touched by the worker only between submit and completion, when the
 * reactor leaves them alone (device.h).
 */
#include "server/device.h"

#include <errno.h>
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
} test_device;

static void test_fold(device *d, device_fold_op op, float *acc, const uint8_t *src, size_t n, float s)
{
    (void)d;
    device_fold_run(op, acc, src, n, s);
}

static unsigned test_delay_us(test_device *t)
{
    if (!t->max_delay_us)
        return 0;
    uint64_t x = (t->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (unsigned)(x % (t->max_delay_us + 1u));
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
        device_job_run(j);

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
    free(t);
}

static const device_ops test_ops = {
    .name = "test",
    .fold = test_fold,
    .submit = test_submit,
    .drain = test_drain,
    .destroy = test_destroy,
};

device *device_test_new(struct event_base *base, char *err, size_t errlen)
{
    test_device *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->base.ops = &test_ops;
    t->max_delay_us = 2000;
    const char *env = getenv("PSBENCH_TEST_DEVICE_MAX_DELAY_US");
    if (env && *env) {
        char *end;
        unsigned long v = strtoul(env, &end, 10);
        if (*end || v > 10000000ul) {
            snprintf(err, errlen, "PSBENCH_TEST_DEVICE_MAX_DELAY_US='%s' is not 0..10000000", env);
            free(t);
            return NULL;
        }
        t->max_delay_us = (unsigned)v;
    }
    t->rng = (uint64_t)getpid() * 0x2545F4914F6CDD1Dull ^ (uint64_t)time(NULL);
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
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
        free(t);
        return NULL;
    }
    return &t->base;
}
