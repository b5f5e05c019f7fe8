/* cugpu.h — a GPU as psbench's roles use it: memory (device and pinned
 * host), in-order streams, a role's kernels (cugpu_kernels), events, host
 * functions. Nothing here knows devices, futures, kinds or models: the
 * server's cuda device (server/cuda/device_cuda.c) runs on it with the
 * server's kernels, and so can the trainer with its own.
 *
 * Two implementations behind one ops table:
 *
 *   cuda   the CUDA runtime, loaded on first use (shared/gpu/cudaload.h), the
 *          role's kernels from the fatbin embedded in its binary
 *          (cudaLibraryLoadData); one GPU (cudaSetDevice on every thread
 *          that calls in).
 *   fake   host memory and a worker thread per stream that runs each
 *          queued operation in order (copies are memcpy, kernels run
 *          the role's host loops, host functions run on the
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
 *
 * IPC between processes on one host (a CUDA trainer and a CUDA server):
 * device memory and events are exported as handles — plain bytes
 * (cugpu_ipc_handle), which a protocol carries in a frame — and opened by
 * the peer, once (opening is expensive: the peer caches what it opened).
 * The exporter allocates the memory with dev_alloc_ipc (only such memory
 * can be exported) and makes its events with event_new_ipc; the peer opens
 * them (ipc_open, event_open), makes its stream wait for the exporter's
 * event (stream_wait: on the GPU, the host never waits) and reads or
 * writes the exporter's memory on that stream, device to device.
 *
 *   cuda   cudaMalloc'ed memory (not the stream-ordered pool's: memory from
 *          cudaMallocAsync's default pool cannot be exported) and
 *          cudaIpcGetMemHandle / cudaIpcOpenMemHandle (peer access enabled
 *          lazily) / cudaIpcCloseMemHandle; events made with
 *          cudaEventInterprocess | cudaEventDisableTiming,
 *          cudaIpcGetEventHandle / cudaIpcOpenEventHandle; stream_wait is
 *          cudaStreamWaitEvent. CUDA refuses to open a handle in the
 *          process that exported it. The size given to ipc_open is the
 *          peer's word: it is checked against the opened allocation's own
 *          (cuMemGetAddressRange, the driver's, through shared/gpu/cudaload.h)
 *          and refused when larger (cugpu_ipc_check_range).
 *   fake   the memory is a memfd (sealed against shrinking and growing, so
 *          no one can truncate it under a mapping), mapped shared; its
 *          handle says the exporter's pid, the memfd's descriptor number
 *          there, its size and its identity (device and inode), and
 *          ipc_open maps it by opening /proc/<pid>/fd/<n> — same host,
 *          same user: what the fake GPU is for — after checking all of
 *          that (a descriptor closed, or reused by another file, or a file
 *          that is not ordinary shared memory, is refused with the reason).
 *          Like the driver it maps the whole object (the memfd's own size,
 *          whatever the handle says) and checks the size given to ipc_open
 *          against that (cugpu_ipc_check_range). An IPC event's state is a page
 * of its own memfd, opened the same way: a record counts itself there when
 *          queued and marks itself complete when its stream's worker
 *          reaches it (atomics in the shared page), and a stream_wait's
 *          worker polls the page until the record it waits for is
 *          complete. Such a wait gives up, failing its stream, when the
 *          record can never complete: its stream failed, or the process
 *          that made it is gone; or, to bound it where a dead process
 *          cannot be told (its pid reused), after FAKE_IPC_WAIT_S (120 s)
 *          of waiting on another process's record. The fake also opens a
 *          handle in the process that exported it (two fake GPUs in one
 *          test). Its events (local ones too) count records: the latest
 *          one reached is what is complete, so where one event is recorded
 *          on several streams at once, a wait may end when a later record
 *          on another stream completes first (CUDA tracks each record).
 */
#ifndef PSBENCH_CUGPU_H
#define PSBENCH_CUGPU_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shared/devmem.h"

typedef struct cugpu cugpu;
typedef struct cugpu_stream cugpu_stream;
typedef struct cugpu_event cugpu_event;

/* An exported device allocation or event, as bytes that mean something
 * only to the GPU layer that made them (CUDA's cudaIpcMemHandle_t and
 * cudaIpcEventHandle_t are 64 bytes each; the fake GPU's fit). */
#define CUGPU_IPC_HANDLE_SIZE 64
typedef struct cugpu_ipc_handle {
    unsigned char bytes[CUGPU_IPC_HANDLE_SIZE];
} cugpu_ipc_handle;

/* A role's kernels, as the GPU layer runs them: the server's
 * (server/cuda/kernels_host.c), the trainer's. A launch is the role's own
 * description of one kernel call: a struct of launch_size bytes whose
 * first member is `int kernel`, the index of its row in the role's table,
 * followed by its arguments. The layer reads that index and otherwise never
 * looks inside but through the row's functions.
 *
 * Each kernel is one row (cugpu_kernel), and a role's table is made from
 * its kernel list (an X-macro in its kernels.h, each kernel named once
 * there) by CUGPU_KERNEL_ROW: the name, and the host functions named after
 * it, <name>_run and <name>_args.
 *
 *   cuda   the fatbin (embedded by the build: every kernel extern "C",
 *          found by its row's name) and args: its arguments as
 *          cudaLaunchKernel takes them (pointers into the launch, which
 *          stays valid until launch returns; CUGPU_ARGS) and the number of
 *          threads' worth of work (blocks of 256, at most 8 per SM: the
 *          kernels loop over the rest, grid-stride).
 *   fake   run: the kernel's loops on the host, with the per-element
 *          arithmetic the GPU's code uses (the same bits), given a copy of
 *          the launch taken when it was queued.
 *
 * Library calls (cuBLAS, ...) are rows too, with no name (not in the
 * fatbin) and no args, queued in stream order like a kernel, when the
 * role's table has `library`: on a GPU, launch hands it the launch and the
 * native stream (a cudaStream_t) to enqueue the call on (0, or -1: it
 * failed, the reason in err). On the fake GPU, the row's run runs the host
 * version on the stream's worker, in order, as any kernel. */
typedef struct cugpu_kernel {
    const char *name;                /* in the fatbin; NULL: a library call */
    void (*run)(const void *launch); /* the host loops */
    /* cudaLaunchKernel's arguments into args (at most CUGPU_MAX_ARGS);
     * the threads' worth of work. NULL: a library call. */
    size_t (*args)(const void *launch, void **args);
} cugpu_kernel;

typedef struct cugpu_kernels {
    const char *what;            /* "the server's kernels": for messages */
    const unsigned char *fatbin; /* NULL: this build has none (fake only) */
    const char *archs;           /* the architectures the fatbin has code for */
    const cugpu_kernel *table;   /* by the launch's `kernel` */
    int count;
    size_t launch_size;
    /* Enqueue a library row's launch on the native stream. NULL: the role
     * has no library calls (the server's). */
    int (*library)(const void *launch, void *stream, char *err, size_t errlen);
} cugpu_kernels;

/* A role's table row for kernel `name` (its X-macro's entry ID, name). */
#define CUGPU_KERNEL_ROW(ID, name) [ID] = {#name, name##_run, name##_args},
/* A library call's row: run is its host version. */
#define CUGPU_LIBRARY_ROW(ID, name) [ID] = {NULL, name##_run, NULL},

/* The most arguments one kernel takes. */
#define CUGPU_MAX_ARGS 16
/* An args function's body: the launch's fields (their addresses, in the
 * kernel's order) into args, and the work: return CUGPU_ARGS(a, work,
 * &l->x, &l->y). The kernels never write their arguments, so a pointer
 * into the (const) launch is what cudaLaunchKernel reads. */
#define CUGPU_ARGS(a, work, ...) cugpu_args_put((a), (work), (const void *const[]){__VA_ARGS__, NULL})
static inline size_t cugpu_args_put(void **a, size_t work, const void *const *fields)
{
    for (int i = 0; fields[i]; i++) {
        assert(i < CUGPU_MAX_ARGS);
        a[i] = (void *)(uintptr_t)fields[i];
    }
    return work;
}

/* The index of launch l's kernel (its first member). */
static inline int cugpu_launch_kernel(const void *l)
{
    int k;
    memcpy(&k, l, sizeof k);
    return k;
}

/* Memory. Device memory is a devmem (shared/devmem.h: never a host
 * pointer, and the compiler holds to it); pinned host memory is a host
 * pointer. A failed allocation is devmem_none() (NULL) with g->err; freeing
 * none does nothing. */
typedef struct cugpu_ops {
    const char *name; /* "cuda" or "fake" */
    devmem (*dev_alloc)(cugpu *g, size_t bytes);
    void (*dev_free)(cugpu *g, devmem p);
    /* Stream-ordered device memory: usable by what is queued on s after
     * the allocation; freed once everything queued on s before the free
     * has run. Neither waits for the GPU (cudaMalloc and cudaFree may
     * synchronise the device: the reactor calls these instead). */
    devmem (*dev_alloc_async)(cugpu *g, cugpu_stream *s, size_t bytes);
    void (*dev_free_async)(cugpu *g, cugpu_stream *s, devmem p);
    void *(*host_alloc)(cugpu *g, size_t bytes); /* pinned */
    void (*host_free)(cugpu *g, void *p);
    cugpu_stream *(*stream_new)(cugpu *g);
    /* Waits for what the stream holds, then frees it. */
    void (*stream_free)(cugpu *g, cugpu_stream *s);
    /* n bytes, queued on s: host to device, device to host, device to
     * device. The host side must stay as it is until the copy has run. */
    int (*copy_h2d)(cugpu *g, cugpu_stream *s, devmem dst, const void *src, size_t n);
    int (*copy_d2h)(cugpu *g, cugpu_stream *s, void *dst, devmem src, size_t n);
    int (*copy_d2d)(cugpu *g, cugpu_stream *s, devmem dst, devmem src, size_t n);
    /* One of the GPU's kernels (a launch of its cugpu_kernels). */
    int (*launch)(cugpu *g, cugpu_stream *s, const void *launch);
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
    /* The time between two recorded events, both complete (never IPC
     * events: they keep no time). */
    int (*elapsed_ms)(cugpu *g, cugpu_event *from, cugpu_event *to, float *ms);
    /* The work queued on s from now on waits until the work before e's
     * most recent record, as it stands at this call, is complete; a later
     * record of e changes nothing for this wait, and an event never
     * recorded makes no wait (cudaStreamWaitEvent). On the GPU: the caller
     * does not wait. e: an event of this GPU, local or opened (event_open);
     * it may be freed once this returns. 0, or -1 with g->err; on the fake
     * GPU a wait that cannot end fails s (see IPC above). */
    int (*stream_wait)(cugpu *g, cugpu_stream *s, cugpu_event *e);

    /* ---- IPC (see the top of this file) ---- */
    /* Device memory another process can open: as dev_alloc's otherwise
     * (copies and launches use it alike), freed with dev_free_ipc only
     * (NULL: nothing), once no peer uses it any more. NULL with g->err. */
    devmem (*dev_alloc_ipc)(cugpu *g, size_t bytes);
    void (*dev_free_ipc)(cugpu *g, devmem p);
    /* The handle of the allocation whose base dev_alloc_ipc returned: the
     * same each time it is asked. 0, or -1 with g->err. */
    int (*ipc_export)(cugpu *g, devmem base, cugpu_ipc_handle *h);
    /* Another process's allocation (h from its ipc_export) mapped here,
     * `bytes` of it usable: device memory of this GPU, none with g->err
     * (a handle that is no allocation, or no longer one, or whose
     * allocation is smaller than bytes — the peer's claim, checked
     * against the opened object itself — is refused, and nothing stays
     * open). Closed with ipc_close. */
    devmem (*ipc_open)(cugpu *g, const cugpu_ipc_handle *h, size_t bytes);
    void (*ipc_close)(cugpu *g, devmem p);
    /* An event another process can open and wait for (no timing), freed
     * with event_free. NULL with g->err. */
    cugpu_event *(*event_new_ipc)(cugpu *g);
    /* The handle of an event from event_new_ipc. 0, or -1 with g->err
     * (any other event). */
    int (*event_export)(cugpu *g, cugpu_event *e, cugpu_ipc_handle *h);
    /* Another process's IPC event (h from its event_export), here: record,
     * query and stream_wait as on a local one; event_free releases it (the
     * exporter's event lives on). NULL with g->err. */
    cugpu_event *(*event_open)(cugpu *g, const cugpu_ipc_handle *h);
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
    const cugpu_kernels *kernels;
    int device;     /* the GPU's index */
    char name[160]; /* "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" or "fake GPU" */
    /* Which GPU this is, for peers on the host to compare (CUDA IPC):
     * "GPU-" and CUDA's UUID (nvidia-smi's spelling), or "fake" (every
     * fake GPU is host memory: any two can open each other's). */
    char uuid[48];
    char err[512]; /* the last error */
};

/* GPU `device` through the CUDA runtime, with kernels k: NULL with the
 * reason (no runtime, no such GPU, the kernels would not load). Only in
 * builds with CUDA (PSBENCH_HAVE_CUDA). */
cugpu *cugpu_cuda_new(int device, const cugpu_kernels *k, char *err, size_t errlen);

/* The fake GPU. `fail_at`: the 1-based count of operations (copies,
 * launches, records, waits, host functions, over all streams) at which one
 * fails with an injected error; 0: none fails. `delay_us`: at most this
 * long, at random, before each operation runs (so that completions come
 * late, as on a GPU). */
cugpu *cugpu_fake_new(const cugpu_kernels *k, uint64_t fail_at, unsigned delay_us, char *err, size_t errlen);

/* The fake GPU `g` holds its work while the file `path` exists: no
 * operation starts (each waits, queued, the stream busy) until the file is
 * removed. A test holds a job in flight for as long as it needs, e.g. to
 * lose a trainer under it. `path` is copied; NULL or "" holds nothing.
 * Call it before any work is queued. Returns -1 (out of memory) or 0. */
int cugpu_fake_hold(cugpu *g, const char *path);

/* The fake GPU as a role's --device fake-cuda makes it: from the
 * environment, which the tests set.
 *
 *   PSBENCH_FAKE_GPU_FAIL_AT=K   fail_at (unset or 0: no failure)
 *   PSBENCH_FAKE_GPU_DELAY_US=D  delay_us (unset: the role's default)
 *   PSBENCH_FAKE_GPU_HOLD=FILE   cugpu_fake_hold(FILE) (unset or "": none)
 *
 * A number that is not a whole number is as if unset. The roles' default
 * delays differ, on purpose:
 *   server   200 us: its cuda device is the fake GPU's first user. The
 *            delay makes each job complete late, after the reactor has gone
 *            on and other jobs queued, so that the device's completion
 *            paths (futures answered from another thread, drains with work
 *            in flight, a trainer lost under a job) run in every server
 *            test that uses it, as they do on a GPU.
 *   trainer  0: a training step enqueues hundreds of operations and waits
 *            for them every step; a delay on each would make every
 *            fake-cuda training test many times longer, while the ordering
 *            it would exercise is the compute layer's own (one stream, in
 *            order), which its unit tests check with a delay they set. */
enum {
    CUGPU_FAKE_DELAY_US_SERVER = 200,
    CUGPU_FAKE_DELAY_US_TRAINER = 0,
};
typedef struct cugpu_fake_env {
    uint64_t fail_at;
    unsigned delay_us;
    const char *hold; /* the environment's string, or NULL */
} cugpu_fake_env;
/* What the environment says, with delay_us_default where it says nothing. */
cugpu_fake_env cugpu_fake_env_read(unsigned delay_us_default);
/* cugpu_fake_new and cugpu_fake_hold as cugpu_fake_env_read says: NULL
 * with the reason in err. */
cugpu *cugpu_fake_from_env(const cugpu_kernels *k, unsigned delay_us_default, char *err, size_t errlen);

/* The range an ipc_open mapped (what the driver says of the opened
 * object: its base and size) checked against the size the peer claims for
 * it: the range must start where the handle opened and hold `claim` bytes.
 * Every implementation calls it before ipc_open returns (the caller closes
 * what it opened on -1). 0, or -1 with g->err. */
int cugpu_ipc_check_range(cugpu *g, uintptr_t opened, uintptr_t base, uint64_t size, uint64_t claim);

static inline void cugpu_destroy(cugpu *g)
{
    if (g)
        g->ops->destroy(g);
}

#endif
