/* cugpu_fake.c — the fake GPU of cugpu.h: host memory, a worker thread per
 * stream running its operations in order, kernels on the host (the role's
 * run: the same arithmetic, the same bits as its GPU code), injected
 * errors.
 *
 * A test aid, like the `test` device: it exercises the cuda device's host
 * logic (queues, completions from another thread, drains, failures) on any
 * machine. It is not fast and does not try to be.
 *
 * IPC (cugpu.h): exported memory and events are memfds, opened by the peer
 * through /proc/<pid>/fd/<n>; an event's state (fake_evsync) is then a
 * shared page that both processes update with atomics only.
 */
#include "shared/gpu/cugpu.h"
#include "shared/clock.h"
#include "shared/shm.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* FOP_FREE: a stream-ordered free (dst is the memory). It runs even on a
 * failed stream (nothing else of that stream runs any more) and counts in
 * no injected failure: it is the allocator's, not the GPU's work. */
typedef enum fake_kind { FOP_COPY, FOP_LAUNCH, FOP_HOST_FN, FOP_RECORD, FOP_WAIT, FOP_FREE } fake_kind;

typedef struct fake_op {
    fake_kind kind;
    bool ran;        /* FOP_RECORD: the worker reached it */
    void *dst;
    const void *src;
    size_t n;
    void (*fn)(void *);
    void *arg;
    cugpu_event *ev; /* FOP_RECORD, FOP_WAIT: a reference of the operation's own */
    uint64_t seq;    /* FOP_RECORD: the record's number; FOP_WAIT: the record it waits for */
    struct fake_op *next;
    max_align_t launch[]; /* FOP_LAUNCH: a copy of the role's launch (launch_size bytes) */
} fake_op;

/* An event's state, as records set it and waits and queries read it: in
 * the event itself for a local one, in a page of its own memfd for an IPC
 * event, which another process maps and updates too. So atomics only
 * (lock-free 64-bit atomics are address-free: they work across processes
 * and mappings). Records are numbered; a record's number is taken when it
 * is queued. */
typedef struct fake_evsync {
    uint64_t magic;     /* FAKE_EV_MAGIC: checked by event_open */
    uint64_t recorded;  /* the latest record's number (0: never recorded) */
    uint64_t completed; /* the highest number a worker has reached */
    uint64_t failed;    /* the highest number that will never be reached (its stream failed) */
    uint64_t t_ns;      /* when the latest completed record was reached (timing: local events) */
    int32_t pid;        /* the process that queued the latest record */
} fake_evsync;

#define FAKE_EV_MAGIC 0x56454b4146425350ull /* "PSBFAKEV" */

/* A memfd mapped here: an IPC allocation or event's page. */
typedef struct fake_map {
    void *base;
    size_t size;       /* bytes (what the handle says; mapped: whole pages) */
    int fd;            /* made here: the memfd a peer opens by number; opened: -1 */
    uint64_t dev, ino; /* the memfd's identity, in the handle */
    struct fake_map *next;
} fake_map;

/* Shared by every reference: the caller's, and one per queued operation
 * that names the event (CUDA lets an event be freed with its record or a
 * wait on it still queued). The last one frees it. */
struct cugpu_event {
    fake_evsync *sync; /* &own, or the IPC page (map.base) */
    int refs;
    bool ipc;          /* an IPC event (made with event_new_ipc or opened): no timing */
    fake_map map;      /* ipc: the page's memfd (fd -1 when opened) */
    fake_evsync own;
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
    pthread_mutex_t ipc_mu;   /* the lists below: the callers' threads */
    fake_map *ipc_own;        /* dev_alloc_ipc's allocations */
    fake_map *ipc_opened;     /* ipc_open's mappings of peers' */
};

/* ---- events' state ------------------------------------------------------------- */

static void fake_atomic_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

static cugpu_event *fake_event_ref(cugpu_event *e)
{
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
    return e;
}

static void fake_event_unref(cugpu_event *e)
{
    if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (e->ipc) {
        munmap(e->map.base, e->map.size);
        if (e->map.fd >= 0)
            close(e->map.fd);
    }
    free(e);
}

/* An operation done with, run or not. A record that never ran (its stream
 * failed, or refused it) says so in the event, so that a wait for it —
 * maybe in another process — fails instead of waiting forever. */
static void fake_op_free(fake_op *op)
{
    if (op->ev) {
        if (op->kind == FOP_RECORD && !op->ran)
            fake_atomic_max(&op->ev->sync->failed, op->seq);
        fake_event_unref(op->ev);
    }
    free(op);
}

/* Whether process pid still runs: not gone, and not a zombie (a peer killed
 * but not yet reaped by its parent can record nothing any more). */
static bool fake_pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return true; /* cannot tell: the timeout bounds the wait */
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* The longest a stream waits on a record made by another process that
 * still seems alive (a pid reused by an unrelated process looks alive):
 * generous, since a peer's GPU may be held by a test for a while. */
#define FAKE_IPC_WAIT_S 120

/* A stream_wait on the worker: until the record it names is complete.
 * 0, or -1 with why when that record can never complete. */
static int fake_wait(const fake_op *op, char *why, size_t whylen)
{
    fake_evsync *y = op->ev->sync;
    const uint64_t start = clock_now_ns();
    long sleep_ns = 10 * 1000;
    for (;;) {
        if (__atomic_load_n(&y->completed, __ATOMIC_ACQUIRE) >= op->seq)
            return 0;
        if (__atomic_load_n(&y->failed, __ATOMIC_ACQUIRE) >= op->seq) {
            snprintf(why, whylen, "fake GPU: a stream waits for an event's record that will never complete (the "
                     "stream that recorded it failed)");
            return -1;
        }
        pid_t pid = __atomic_load_n(&y->pid, __ATOMIC_RELAXED);
        if (pid > 0 && pid != getpid()) {
            bool gone = !fake_pid_alive(pid);
            /* It may have completed the record just before it went. */
            if (__atomic_load_n(&y->completed, __ATOMIC_ACQUIRE) >= op->seq)
                return 0;
            if (gone) {
                snprintf(why, whylen, "fake GPU: a stream waits for an event recorded by process %d, which is gone",
                         (int)pid);
                return -1;
            }
            if (clock_now_ns() - start > (uint64_t)FAKE_IPC_WAIT_S * 1000000000ull) {
                snprintf(why, whylen, "fake GPU: a stream waited %d s for an event recorded by process %d; giving up",
                         FAKE_IPC_WAIT_S, (int)pid);
                return -1;
            }
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000 * 1000)
            sleep_ns *= 2;
    }
}

/* ---- the stream's worker ------------------------------------------------------ */

/* 0, or -1 with why: the operation failed, and so does its stream. */
static int fake_run(cugpu_stream *s, fake_op *op, char *why, size_t whylen)
{
    switch (op->kind) {
    case FOP_COPY:
        memmove(op->dst, op->src, op->n);
        break;
    case FOP_LAUNCH:
        s->gpu->base.kernels->table[cugpu_launch_kernel(op->launch)].run(op->launch);
        break;
    case FOP_HOST_FN:
        op->fn(op->arg);
        break;
    case FOP_RECORD:
        __atomic_store_n(&op->ev->sync->t_ns, clock_now_ns(), __ATOMIC_RELAXED);
        fake_atomic_max(&op->ev->sync->completed, op->seq); /* release: the work before it, and t_ns */
        op->ran = true;
        break;
    case FOP_WAIT:
        return fake_wait(op, why, whylen);
    case FOP_FREE:
        free(op->dst);
        break;
    }
    return 0;
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
            fake_run(s, op, NULL, 0);
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
            char why[sizeof s->why];
            int rc = -1;
            if (g->fail_at && nth == g->fail_at)
                snprintf(why, sizeof why, "fake GPU: injected failure of operation %llu (an unspecified launch "
                         "failure)", (unsigned long long)nth);
            else
                rc = fake_run(s, op, why, sizeof why);
            if (rc < 0) {
                pthread_mutex_lock(&s->mu);
                s->failed = true;
                snprintf(s->why, sizeof s->why, "%s", why);
                pthread_mutex_unlock(&s->mu);
            }
        }
        fake_op_free(op);
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
        fake_op_free(op);
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

/* The fake GPU's device memory is host memory: its devmem holds a host
 * address, which only this file and the roles' host loops (their rows' run) read
 * as one. */
static devmem fake_dev_alloc(cugpu *g, size_t bytes) { return devmem_of(fake_alloc(g, bytes)); }

static void fake_dev_free(cugpu *g, devmem p) { fake_free(g, p.p); }

static devmem fake_alloc_async(cugpu *g, cugpu_stream *s, size_t bytes)
{
    (void)s; /* host memory: usable at once, so also in stream order */
    return fake_dev_alloc(g, bytes);
}

static void fake_free_async(cugpu *g, cugpu_stream *s, devmem dp)
{
    void *p = dp.p;
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

/* Every direction is a memcpy on the stream's worker (the device's memory
 * is the host's). */
static int fake_copy(cugpu *g, cugpu_stream *s, void *dst, const void *src, size_t n)
{
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_COPY;
        op->dst = dst;
        op->src = src;
        op->n = n;
    }
    return fake_queue(g, s, op);
}

static int fake_copy_h2d(cugpu *g, cugpu_stream *s, devmem dst, const void *src, size_t n)
{
    return fake_copy(g, s, dst.p, src, n);
}

static int fake_copy_d2h(cugpu *g, cugpu_stream *s, void *dst, devmem src, size_t n)
{
    return fake_copy(g, s, dst, src.p, n);
}

static int fake_copy_d2d(cugpu *g, cugpu_stream *s, devmem dst, devmem src, size_t n)
{
    return fake_copy(g, s, dst.p, src.p, n);
}

static int fake_launch(cugpu *g, cugpu_stream *s, const void *l)
{
    int k = cugpu_launch_kernel(l);
    if (k < 0 || k >= g->kernels->count) {
        snprintf(g->err, sizeof g->err, "unknown kernel %d", k);
        return -1;
    }
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

/* A local event: never recorded, so complete, as CUDA answers. */
static cugpu_event *fake_event_new(cugpu *g)
{
    cugpu_event *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return NULL;
    }
    e->refs = 1;
    e->sync = &e->own;
    e->map.fd = -1;
    return e;
}

static void fake_event_free(cugpu *g, cugpu_event *e)
{
    (void)g;
    if (e)
        fake_event_unref(e);
}

static int fake_event_record(cugpu *g, cugpu_stream *s, cugpu_event *e)
{
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_RECORD;
        op->ev = fake_event_ref(e);
        op->seq = __atomic_add_fetch(&e->sync->recorded, 1, __ATOMIC_ACQ_REL);
        __atomic_store_n(&e->sync->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
    }
    return fake_queue(g, s, op);
}

/* Complete: the latest record was reached (a record that never runs
 * leaves the event incomplete, as on a failed stream). */
static bool fake_event_done(const cugpu_event *e)
{
    uint64_t recorded = __atomic_load_n(&e->sync->recorded, __ATOMIC_ACQUIRE);
    return __atomic_load_n(&e->sync->completed, __ATOMIC_ACQUIRE) >= recorded;
}

static int fake_event_query(cugpu *g, cugpu_event *e)
{
    (void)g;
    return fake_event_done(e) ? 0 : 1;
}

static int fake_elapsed_ms(cugpu *g, cugpu_event *from, cugpu_event *to, float *ms)
{
    if (from->ipc || to->ipc) {
        snprintf(g->err, sizeof g->err, "fake GPU: an IPC event keeps no time");
        return -1;
    }
    if (!fake_event_done(from) || !fake_event_done(to)) {
        snprintf(g->err, sizeof g->err, "fake GPU: an event is not complete");
        return -1;
    }
    uint64_t t0 = __atomic_load_n(&from->sync->t_ns, __ATOMIC_RELAXED);
    uint64_t t1 = __atomic_load_n(&to->sync->t_ns, __ATOMIC_RELAXED);
    *ms = (float)((double)(t1 - t0) / 1e6);
    return 0;
}

/* The record to wait for is the latest one now: what is recorded later
 * does not concern this wait. Queued (and counted as an operation) even
 * when nothing was recorded, when it waits for nothing. */
static int fake_stream_wait(cugpu *g, cugpu_stream *s, cugpu_event *e)
{
    fake_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = FOP_WAIT;
        op->ev = fake_event_ref(e);
        op->seq = __atomic_load_n(&e->sync->recorded, __ATOMIC_ACQUIRE);
    }
    return fake_queue(g, s, op);
}

/* ---- IPC: memfds, opened by the peer through /proc ------------------------------ */

#define FAKE_IPC_MAGIC 0x3143504955504746ull /* "FGPUIPC1" */
enum { FAKE_IPC_MEM = 1, FAKE_IPC_EVENT = 2 };

/* A handle's bytes. */
typedef struct fake_ipc_wire {
    uint64_t magic;
    uint32_t kind;     /* FAKE_IPC_MEM, FAKE_IPC_EVENT */
    int32_t pid;       /* the exporter */
    int32_t fd;        /* the memfd's descriptor there */
    uint32_t zero;
    uint64_t size;     /* bytes */
    uint64_t dev, ino; /* the memfd: a descriptor closed and its number reused is told apart */
} fake_ipc_wire;

_Static_assert(sizeof(fake_ipc_wire) <= sizeof(cugpu_ipc_handle), "the fake GPU's handle fits cugpu_ipc_handle");

static const char *fake_ipc_kind_name(uint32_t kind) { return kind == FAKE_IPC_MEM ? "memory" : "an event"; }

/* A sealed memfd of `size` bytes mapped shared into m. Sealed against
 * shrinking and growing: no process that maps it can truncate the pages
 * under another's mapping (SIGBUS). 0, or -1 with g->err. */
static int fake_memfd_new(cugpu *g, const char *name, size_t size, fake_map *m)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    struct stat st;
    const char *call = "memfd_create";
    if (fd >= 0 && (call = "ftruncate", ftruncate(fd, (off_t)size) == 0) &&
        (call = "fcntl(F_ADD_SEALS)", fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) &&
        (call = "fstat", fstat(fd, &st) == 0)) {
        call = "mmap";
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            *m = (fake_map){.base = p, .size = size, .fd = fd, .dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino};
            return 0;
        }
    }
    snprintf(g->err, sizeof g->err, "fake GPU: %s for %zu bytes of IPC memory: %s", call, size, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

static void fake_ipc_handle_of(const fake_map *m, uint32_t kind, cugpu_ipc_handle *h)
{
    assert(m->fd >= 0);
    fake_ipc_wire w = {.magic = FAKE_IPC_MAGIC, .kind = kind, .pid = (int32_t)getpid(), .fd = m->fd,
                       .size = m->size, .dev = m->dev, .ino = m->ino};
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &w, sizeof w);
}

/* The memfd a handle names, opened and checked, then mapped shared into m
 * (m->fd -1: the mapping keeps the memory): the whole object, its own
 * size, as the driver opens a whole allocation whatever the handle's
 * bytes say; the caller checks what it needs of it against m->size. 0, or
 * -1 with g->err: never a crash, whatever the bytes. */
static int fake_ipc_map(cugpu *g, const cugpu_ipc_handle *h, uint32_t kind, fake_map *m)
{
    fake_ipc_wire w;
    memcpy(&w, h->bytes, sizeof w);
    if (w.magic != FAKE_IPC_MAGIC) {
        snprintf(g->err, sizeof g->err, "fake GPU: not an IPC handle of the fake GPU (bad magic)");
        return -1;
    }
    if (w.kind != kind) {
        snprintf(g->err, sizeof g->err, "fake GPU: an IPC handle of %s where one of %s was expected",
                 w.kind == FAKE_IPC_MEM || w.kind == FAKE_IPC_EVENT ? fake_ipc_kind_name(w.kind) : "nothing known",
                 fake_ipc_kind_name(kind));
        return -1;
    }
    if (w.pid <= 0 || w.fd < 0 || w.size == 0 || w.size > FAKE_GPU_MEMORY) {
        snprintf(g->err, sizeof g->err, "fake GPU: a malformed IPC handle (pid %d, descriptor %d, %llu bytes)",
                 (int)w.pid, (int)w.fd, (unsigned long long)w.size);
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: process %d has no descriptor %d (closed, or the "
                     "process is gone)", (int)w.pid, (int)w.fd);
        else
            snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    char why[200];
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != w.dev || (uint64_t)st.st_ino != w.ino) {
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: descriptor %d of process %d is another file now (the "
                 "exported one was closed)", (int)w.fd, (int)w.pid);
    } else if (seals < 0 || !(seals & F_SEAL_SHRINK) || st.st_size <= 0 || (uint64_t)st.st_size < w.size ||
               (uint64_t)st.st_size > FAKE_GPU_MEMORY) {
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: %s is not a sealed memfd of %llu bytes", path,
                 (unsigned long long)w.size);
    } else if (shm_fd_check_shmem(fd, path, why, sizeof why) < 0) {
        /* A hugetlbfs memfd seals and maps like any, then raises SIGBUS
         * in whichever thread first touches a page the pool lacks. */
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: %s", why);
    } else {
        size_t size = (size_t)st.st_size; /* the object's, not the handle's word */
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            close(fd);
            *m = (fake_map){.base = p, .size = size, .fd = -1, .dev = w.dev, .ino = w.ino};
            return 0;
        }
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: mmap of %zu bytes: %s", size, strerror(errno));
    }
    close(fd);
    return -1;
}

/* m, copied into a node of *list (under ipc_mu). 0, or -1: out of memory. */
static int fake_ipc_keep(fake_gpu *f, fake_map **list, const fake_map *m)
{
    fake_map *node = malloc(sizeof *node);
    if (!node) {
        snprintf(f->base.err, sizeof f->base.err, "fake GPU: out of memory");
        return -1;
    }
    *node = *m;
    pthread_mutex_lock(&f->ipc_mu);
    node->next = *list;
    *list = node;
    pthread_mutex_unlock(&f->ipc_mu);
    return 0;
}

/* The node of *list at base, taken out of it (the caller owns it now);
 * NULL when none. */
static fake_map *fake_ipc_take(fake_gpu *f, fake_map **list, const void *base)
{
    pthread_mutex_lock(&f->ipc_mu);
    fake_map **at = list;
    while (*at && (*at)->base != base)
        at = &(*at)->next;
    fake_map *m = *at;
    if (m)
        *at = m->next;
    pthread_mutex_unlock(&f->ipc_mu);
    return m;
}

static void fake_map_release(fake_map *m)
{
    munmap(m->base, m->size);
    if (m->fd >= 0)
        close(m->fd);
}

static devmem fake_dev_alloc_ipc(cugpu *g, size_t bytes)
{
    if (bytes > FAKE_GPU_MEMORY) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory (%zu bytes)", bytes);
        return devmem_none();
    }
    fake_map m;
    if (fake_memfd_new(g, "psbench-fake-gpu-ipc", bytes ? bytes : 1, &m) < 0)
        return devmem_none();
    if (fake_ipc_keep((fake_gpu *)g, &((fake_gpu *)g)->ipc_own, &m) < 0) {
        fake_map_release(&m);
        return devmem_none();
    }
    return devmem_of(m.base);
}

static void fake_dev_free_ipc(cugpu *g, devmem dp)
{
    void *p = dp.p;
    if (!p)
        return;
    fake_map *m = fake_ipc_take((fake_gpu *)g, &((fake_gpu *)g)->ipc_own, p);
    assert(m && "dev_free_ipc of memory dev_alloc_ipc did not give");
    if (!m)
        return;
    fake_map_release(m);
    free(m);
}

static int fake_ipc_export(cugpu *g, devmem dbase, cugpu_ipc_handle *h)
{
    void *base = dbase.p;
    fake_gpu *f = (fake_gpu *)g;
    /* Found under the lock, read under it: a concurrent free of another
     * allocation relinks the list, never this node. */
    pthread_mutex_lock(&f->ipc_mu);
    const fake_map *m = f->ipc_own;
    while (m && m->base != base)
        m = m->next;
    if (m)
        fake_ipc_handle_of(m, FAKE_IPC_MEM, h);
    pthread_mutex_unlock(&f->ipc_mu);
    if (!m) {
        snprintf(g->err, sizeof g->err, "fake GPU: %p is not the base of an IPC allocation of this GPU", base);
        return -1;
    }
    return 0;
}

static devmem fake_ipc_open(cugpu *g, const cugpu_ipc_handle *h, size_t bytes)
{
    fake_map m;
    if (fake_ipc_map(g, h, FAKE_IPC_MEM, &m) < 0)
        return devmem_none();
    /* What the real GPU does after cudaIpcOpenMemHandle: the claim checked
     * against the opened object's range (the mapping: the memfd's size). */
    if (cugpu_ipc_check_range(g, (uintptr_t)m.base, (uintptr_t)m.base, m.size, bytes) < 0) {
        char why[sizeof g->err];
        snprintf(why, sizeof why, "fake GPU: %s", g->err);
        snprintf(g->err, sizeof g->err, "%s", why);
        fake_map_release(&m);
        return devmem_none();
    }
    if (fake_ipc_keep((fake_gpu *)g, &((fake_gpu *)g)->ipc_opened, &m) < 0) {
        fake_map_release(&m);
        return devmem_none();
    }
    return devmem_of(m.base);
}

static void fake_ipc_close(cugpu *g, devmem dp)
{
    void *p = dp.p;
    if (!p)
        return;
    fake_map *m = fake_ipc_take((fake_gpu *)g, &((fake_gpu *)g)->ipc_opened, p);
    assert(m && "ipc_close of memory ipc_open did not give");
    if (!m)
        return;
    fake_map_release(m);
    free(m);
}

static cugpu_event *fake_event_new_ipc(cugpu *g)
{
    cugpu_event *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return NULL;
    }
    if (fake_memfd_new(g, "psbench-fake-gpu-event", sizeof(fake_evsync), &e->map) < 0) {
        free(e);
        return NULL;
    }
    e->refs = 1;
    e->ipc = true;
    e->sync = e->map.base;
    __atomic_store_n(&e->sync->magic, FAKE_EV_MAGIC, __ATOMIC_RELEASE);
    return e;
}

static int fake_event_export(cugpu *g, cugpu_event *e, cugpu_ipc_handle *h)
{
    if (!e->ipc || e->map.fd < 0) {
        snprintf(g->err, sizeof g->err, "fake GPU: %s", !e->ipc ? "not an IPC event (event_new's, not event_new_ipc's)"
                                                               : "an opened IPC event cannot be exported again");
        return -1;
    }
    fake_ipc_handle_of(&e->map, FAKE_IPC_EVENT, h);
    return 0;
}

static cugpu_event *fake_event_open(cugpu *g, const cugpu_ipc_handle *h)
{
    cugpu_event *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(g->err, sizeof g->err, "fake GPU: out of memory");
        return NULL;
    }
    if (fake_ipc_map(g, h, FAKE_IPC_EVENT, &e->map) < 0) {
        free(e);
        return NULL;
    }
    if (e->map.size < sizeof(fake_evsync)) {
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: an event's page of %zu bytes (%zu needed)",
                 e->map.size, sizeof(fake_evsync));
        fake_map_release(&e->map);
        free(e);
        return NULL;
    }
    e->sync = e->map.base;
    if (__atomic_load_n(&e->sync->magic, __ATOMIC_ACQUIRE) != FAKE_EV_MAGIC) {
        snprintf(g->err, sizeof g->err, "fake GPU: IPC handle: not an event's page (bad magic)");
        fake_map_release(&e->map);
        free(e);
        return NULL;
    }
    e->refs = 1;
    e->ipc = true;
    return e;
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

/* What IPC memory the caller left is released with the GPU: a descriptor
 * kept would outlive it (and show in /proc/PID/fd). */
static void fake_destroy(cugpu *g)
{
    fake_gpu *f = (fake_gpu *)g;
    fake_map *lists[] = {f->ipc_own, f->ipc_opened};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        for (fake_map *m = lists[i], *next; m; m = next) {
            next = m->next;
            fake_map_release(m);
            free(m);
        }
    pthread_mutex_destroy(&f->ipc_mu);
    free(f->hold);
    free(g);
}

static const cugpu_ops fake_ops = {
    .name = "fake",
    .dev_alloc = fake_dev_alloc,
    .dev_free = fake_dev_free,
    .dev_alloc_async = fake_alloc_async,
    .dev_free_async = fake_free_async,
    .host_alloc = fake_alloc,
    .host_free = fake_free,
    .stream_new = fake_stream_new,
    .stream_free = fake_stream_free,
    .copy_h2d = fake_copy_h2d,
    .copy_d2h = fake_copy_d2h,
    .copy_d2d = fake_copy_d2d,
    .launch = fake_launch,
    .host_fn = fake_host_fn,
    .event_new = fake_event_new,
    .event_free = fake_event_free,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .elapsed_ms = fake_elapsed_ms,
    .stream_wait = fake_stream_wait,
    .dev_alloc_ipc = fake_dev_alloc_ipc,
    .dev_free_ipc = fake_dev_free_ipc,
    .ipc_export = fake_ipc_export,
    .ipc_open = fake_ipc_open,
    .ipc_close = fake_ipc_close,
    .event_new_ipc = fake_event_new_ipc,
    .event_export = fake_event_export,
    .event_open = fake_event_open,
    .query = fake_query,
    .sync = fake_sync,
    .destroy = fake_destroy,
};

cugpu *cugpu_fake_new(const cugpu_kernels *k, uint64_t fail_at, unsigned delay_us, char *err, size_t errlen)
{
    assert(k && k->table && k->count > 0 && k->launch_size >= sizeof(int));
    fake_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->base.ops = &fake_ops;
    g->base.kernels = k;
    g->base.device = 0;
    snprintf(g->base.name, sizeof g->base.name, "fake GPU (host memory, a thread per stream)");
    snprintf(g->base.uuid, sizeof g->base.uuid, "fake");
    g->fail_at = fail_at;
    g->delay_us = delay_us;
    atomic_init(&g->ops, 0);
    pthread_mutex_init(&g->ipc_mu, NULL);
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

/* An unsigned environment variable, or `def` when unset or not a whole
 * number. */
static uint64_t fake_env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    return *end || errno ? def : x;
}

cugpu_fake_env cugpu_fake_env_read(unsigned delay_us_default)
{
    const char *hold = getenv("PSBENCH_FAKE_GPU_HOLD");
    uint64_t delay = fake_env_u64("PSBENCH_FAKE_GPU_DELAY_US", delay_us_default);
    return (cugpu_fake_env){
        .fail_at = fake_env_u64("PSBENCH_FAKE_GPU_FAIL_AT", 0),
        .delay_us = delay > UINT_MAX ? delay_us_default : (unsigned)delay,
        .hold = hold && *hold ? hold : NULL,
    };
}

cugpu *cugpu_fake_from_env(const cugpu_kernels *k, unsigned delay_us_default, char *err, size_t errlen)
{
    cugpu_fake_env e = cugpu_fake_env_read(delay_us_default);
    cugpu *g = cugpu_fake_new(k, e.fail_at, e.delay_us, err, errlen);
    if (g && cugpu_fake_hold(g, e.hold) < 0) {
        snprintf(err, errlen, "%s", g->err);
        cugpu_destroy(g);
        return NULL;
    }
    return g;
}
