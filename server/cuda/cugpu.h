/* cugpu.h — a GPU as the server's cuda device uses it: memory (device and
 * pinned host), in-order streams, the kernels of kernels.h, events, host
 * functions. Nothing here knows devices, futures or kinds.
 *
 * Two implementations behind one ops table:
 *
 *   cuda   the CUDA runtime, loaded on first use (shared/cudaload.h), the
 *          kernels from the fatbin embedded in the server (kernels.h,
 *          cudaLibraryLoadData); one GPU (cudaSetDevice on every thread
 *          that calls in).
 *   fake   host memory and a worker thread per stream that runs each
 *          queued operation in order (copies are memcpy, kernels run
 *          cumath.h's arithmetic on the host, host functions run on the
 *          worker as CUDA runs them on its callback thread). It lets the
 *          cuda device's own logic — queues, completion order, drain with
 *          work in flight, a failed operation — run and be tested, under
 *          ASan and TSan, on machines without a GPU. An operation can be
 *          made to fail (an injected error), as a launch failure or a lost
 *          device fails a real stream.
 *
 * Errors. A call that cannot even be queued returns -1 (NULL) with the
 * reason in g->err. An operation that fails later fails its stream: the
 * stream's later operations do not run and its host functions are not
 * called (CUDA calls no host function after an error), so whoever waits
 * on them must ask cugpu_query, which then answers -1 with the reason —
 * the cuda device polls it while work is in flight.
 */
#ifndef PSBENCH_CUGPU_H
#define PSBENCH_CUGPU_H

#include <stddef.h>
#include <stdint.h>

#include "server/cuda/kernels.h"

typedef struct cugpu cugpu;
typedef struct cugpu_stream cugpu_stream;
typedef struct cugpu_event cugpu_event;

typedef enum cugpu_dir { CUGPU_H2D = 0, CUGPU_D2H, CUGPU_D2D } cugpu_dir;

/* One kernel launch: which (PSB_K_*) and its arguments, as kernels.cu
 * takes them (device pointers; srcs is a device array of device
 * pointers). */
typedef struct cugpu_launch {
    int kernel;
    union {
        struct {
            int op; /* PSB_FOLD_* */
            float *acc;
            const float *src;
            size_t n;
            float s;
        } fold;
        struct {
            const psb_fold_desc *descs; /* device memory */
            const psb_fold_chain *chains;
            unsigned nchains;
        } batch;
        struct {
            float *dst;
            const float *const *srcs;
            unsigned nsrc;
            size_t n;
            float scale;
        } sum;
        struct {
            float *param, *buf;
            const float *const *srcs;
            unsigned nsrc;
            size_t n;
            float scale, lr, momentum;
            int first;
            float *out; /* NULL: none */
        } sgd;
        struct {
            float *table; /* the table (gather reads it, scatter steps it) */
            size_t cols;
            const int64_t *idx, *off;
            size_t nnz, bags;
            float *out;        /* gather */
            const float *grad; /* scatter */
            float lr;          /* scatter */
        } bags;
    } u;
} cugpu_launch;

typedef struct cugpu_ops {
    const char *name; /* "cuda" or "fake" */
    void *(*dev_alloc)(cugpu *g, size_t bytes);
    void (*dev_free)(cugpu *g, void *p);
    /* Stream-ordered device memory: usable by what is queued on s after
     * the allocation; freed once everything queued on s before the free
     * has run. Neither waits for the GPU (cudaMalloc and cudaFree may
     * synchronise the device: the reactor calls these instead). */
    void *(*dev_alloc_async)(cugpu *g, cugpu_stream *s, size_t bytes);
    void (*dev_free_async)(cugpu *g, cugpu_stream *s, void *p);
    void *(*host_alloc)(cugpu *g, size_t bytes); /* pinned */
    void (*host_free)(cugpu *g, void *p);
    cugpu_stream *(*stream_new)(cugpu *g);
    /* Waits for what the stream holds, then frees it. */
    void (*stream_free)(cugpu *g, cugpu_stream *s);
    int (*copy)(cugpu *g, cugpu_stream *s, void *dst, const void *src, size_t n, cugpu_dir dir);
    int (*launch)(cugpu *g, cugpu_stream *s, const cugpu_launch *l);
    /* fn(arg) once every operation queued before has completed; never
     * after the stream failed. It runs on a thread of the GPU's: it may
     * not call into cugpu. */
    int (*host_fn)(cugpu *g, cugpu_stream *s, void (*fn)(void *arg), void *arg);
    cugpu_event *(*event_new)(cugpu *g);
    void (*event_free)(cugpu *g, cugpu_event *e);
    int (*event_record)(cugpu *g, cugpu_stream *s, cugpu_event *e);
    /* 0: the work before the event's last record is done (or it was
     * never recorded, as CUDA answers); 1: not yet; -1: an error. */
    int (*event_query)(cugpu *g, cugpu_event *e);
    /* The time between two recorded events, both complete. */
    int (*elapsed_ms)(cugpu *g, cugpu_event *from, cugpu_event *to, float *ms);
    /* 0: everything queued is done; 1: work is in flight; -1: the stream
     * failed (g->err says how). */
    int (*query)(cugpu *g, cugpu_stream *s);
    /* Waits until the stream is idle or failed: 0 or -1. Shutdown and
     * drains only; never on the data path. */
    int (*sync)(cugpu *g, cugpu_stream *s);
    void (*destroy)(cugpu *g);
} cugpu_ops;

struct cugpu {
    const cugpu_ops *ops;
    int device;       /* the GPU's index */
    char name[160];   /* "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" or "fake GPU" */
    char err[512];    /* the last error */
};

/* GPU `device` through the CUDA runtime: NULL with the reason (no runtime,
 * no such GPU, the kernels would not load). */
cugpu *cugpu_cuda_new(int device, char *err, size_t errlen);

/* The fake GPU. `fail_at`: the 1-based count of operations (copies,
 * launches, records, host functions, over all streams) at which one
 * fails with an injected error; 0: none fails. `delay_us`: at most this
 * long, at random, before each operation runs (so that completions come
 * late, as on a GPU). */
cugpu *cugpu_fake_new(uint64_t fail_at, unsigned delay_us, char *err, size_t errlen);

/* The fake GPU `g` holds its work while the file `path` exists: no
 * operation starts (each waits, queued, the stream busy) until the file is
 * removed. A test holds a job in flight for as long as it needs, e.g. to
 * lose a trainer under it. `path` is copied; NULL or "" holds nothing.
 * Call it before any work is queued. Returns -1 (out of memory) or 0. */
int cugpu_fake_hold(cugpu *g, const char *path);

static inline void cugpu_destroy(cugpu *g)
{
    if (g)
        g->ops->destroy(g);
}

#endif
