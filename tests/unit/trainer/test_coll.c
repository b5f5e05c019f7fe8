/* test_coll.c — trainer/coll.h with real member processes: groups of 1, 2
 * and 4 forked members over loopback TCP (Gloo) rendezvousing through a
 * store of files in a mkdtemp directory; sums exact and bit-identical on
 * every member, allgather and allgatherv with unequal counts (0 among
 * them); members that never join, die in the rendezvous, die before or
 * during a collective, or fall silent: the others get -1 within the
 * timeout, never a hang. The NCCL backend runs where a CUDA device answers;
 * elsewhere its constructor's error is checked and the GPU part skipped.
 * The fp16/bf16 allreduce of --compress (coll_allreduce_sum_half): with 2
 * members each element is the narrow sum half.h's scalar functions give
 * (one add in float, rounded once), bit-identical on every member with 3;
 * NCCL's fake stand-in refuses it and stays usable. Their compression of
 * device buckets (coll_allreduce_compress_device: NCCL, its fake
 * stand-in): each member's bucket cast and times 1/N, summed narrow, widened
 * back, the same bits on every member; gloo refuses it and stays usable. PowerSGD
 * (trainer/powersgd.c over coll_allreduce_sum_f32, --compress powersgd):
 * members with different gradients end every step, plain or compressed,
 * layer-wise or batched, with the same bits, the plain steps' the mean.
 *
 * Children report through files in the store directory and exit codes;
 * the parent reaps (or kills and reaps) every child on every path before
 * it asserts anything. Children die with the parent (PR_SET_PDEATHSIG).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/half.h"
#include "shared/half_elem.h"
#include "shared/mean.h"
#include "trainer/coll.h"
#include "trainer/powersgd.h"

#ifdef PSBENCH_HAVE_NCCL
#include "shared/gpu/cudaload.h"
#endif

#define MAX_MEMBERS 4
#define SHORT_TIMEOUT_S 2.0 /* the group's timeout where members fail */
#define LONG_TIMEOUT_S 20.0 /* where every member is expected to succeed */
#define SLACK_S 1.5         /* what a failure may take beyond its timeout */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- the store: one file per key in a directory ------------------------ */

typedef struct file_store {
    char dir[256];
    double wait_s;         /* how long get waits for a missing key */
    const char *die_after; /* setting this key kills the process (SIGKILL) */
} file_store;

/* dir/<key with every byte outside [A-Za-z0-9_.-] as %XX> */
static void fs_path(const file_store *fs, const char *key, const char *tag, char *path, size_t len)
{
    size_t n = (size_t)snprintf(path, len, "%s/%s", fs->dir, tag);
    for (const unsigned char *k = (const unsigned char *)key; *k && n + 4 < len; k++) {
        if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') || *k == '_' ||
            *k == '.' || *k == '-')
            path[n++] = (char)*k;
        else
            n += (size_t)snprintf(path + n, len - n, "%%%02X", *k);
    }
    path[n] = '\0';
}

static int write_all(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return close(fd);
}

/* The whole file, malloc'd (NUL-terminated past *len); NULL if absent. */
static uint8_t *read_whole_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1)) != NULL) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        buf[got] = '\0';
        *len = got;
    }
    close(fd);
    return buf;
}

static int fs_set(void *ctx, const char *key, const void *val, size_t len, char *err, size_t errlen)
{
    file_store *fs = ctx;
    char tmp[512], path[512], tag[64];
    snprintf(tag, sizeof tag, ".tmp.%d.", (int)getpid());
    fs_path(fs, key, tag, tmp, sizeof tmp);
    fs_path(fs, key, "k.", path, sizeof path);
    if (write_all(tmp, val, len) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    if (fs->die_after && strcmp(key, fs->die_after) == 0)
        raise(SIGKILL);
    return 0;
}

static int fs_get(void *ctx, const char *key, uint8_t **val, size_t *len, char *err, size_t errlen)
{
    file_store *fs = ctx;
    char path[512];
    fs_path(fs, key, "k.", path, sizeof path);
    const double deadline = now_s() + fs->wait_s;
    for (;;) {
        uint8_t *v = read_whole_file(path, len);
        if (v) {
            *val = v;
            return 0;
        }
        if (errno != ENOENT) {
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            return -1;
        }
        if (now_s() >= deadline) {
            snprintf(err, errlen, "key not set within %g s", fs->wait_s);
            return -1;
        }
        sleep_s(0.002);
    }
}

static coll_store store_of(file_store *fs)
{
    coll_store s = {fs_set, fs_get, fs};
    return s;
}

/* A report file of the test's own (not a store key). */
static void report(const char *dir, const char *name, uint32_t rank, const void *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%u", dir, name, rank);
    (void)write_all(path, data, len);
}

static void report_str(const char *dir, const char *name, uint32_t rank, const char *s)
{
    report(dir, name, rank, s, strlen(s));
}

static char *read_report(const char *dir, const char *name, uint32_t rank, size_t *len)
{
    char path[512];
    size_t dummy;
    snprintf(path, sizeof path, "%s/%s.%u", dir, name, rank);
    return (char *)read_whole_file(path, len ? len : &dummy);
}

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- members: forked processes --------------------------------------- */

typedef struct member {
    uint32_t rank, size;
    const char *backend; /* "gloo" or "nccl" */
    const char *prefix;
    double timeout_s;
    file_store fs; /* each member's own copy (die_after differs) */
} member;

typedef int (*member_fn)(const member *m);

static pid_t spawn(member_fn fn, const member *m)
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(99);
    exit(fn(m));
}

/* Waits for every child up to `limit_s`; kills and reaps those still
 * running. status[i]: the exit code, 128 + signal when killed by one, -1
 * when it overran and was killed here. Returns how many overran. */
static int reap(const pid_t *pids, int n, double limit_s, int *status)
{
    const double deadline = now_s() + limit_s;
    int left = 0;
    for (int i = 0; i < n; i++) {
        status[i] = pids[i] > 0 ? -2 : -1;
        left += pids[i] > 0;
    }
    while (left > 0 && now_s() < deadline) {
        for (int i = 0; i < n; i++) {
            int st;
            if (status[i] != -2 || waitpid(pids[i], &st, WNOHANG) != pids[i])
                continue;
            status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            left--;
        }
        if (left > 0)
            sleep_s(0.005);
    }
    int overran = 0;
    for (int i = 0; i < n; i++) {
        if (status[i] != -2)
            continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        status[i] = -1;
        overran++;
    }
    return overran;
}

static coll *member_join(const member *m, file_store *fs, char *err, size_t errlen)
{
    coll_store store = store_of(fs);
    if (strcmp(m->backend, "fake-nccl") == 0)
        return coll_nccl_fake_new(m->rank, m->size, "127.0.0.1", &store, m->prefix, m->timeout_s, err, errlen);
    if (strcmp(m->backend, "nccl") == 0)
        return coll_nccl_new(m->rank, m->size, (int)m->rank, &store, m->prefix, m->timeout_s, err, errlen);
    return coll_gloo_new(m->rank, m->size, "127.0.0.1", &store, m->prefix, m->timeout_s, err, errlen);
}

/* A member's failure: the reason in err.<rank>, exit code `code`. */
static int member_fail(const member *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int member_fail(const member *m, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report_str(m->fs.dir, "err", m->rank, msg);
    return code;
}

/* Deterministic floats of varied magnitudes, so that the order of a sum
 * shows in its last bits. */
static float noise(uint32_t rank, size_t i)
{
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (rank * 0x9e3779b9u) ^ 0x5bd1e995u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    float unit = (float)((double)(int32_t)x / 2147483648.0);
    static const float scale[4] = {1e-3f, 1.0f, 7.5f, 1e3f};
    return unit * scale[(x >> 8) & 3];
}

#define NOISE_N 100003
static const uint64_t counts2[2] = {0, 9};
static const uint64_t counts4[4] = {5, 0, 17, 3};

static uint8_t rank_byte(uint32_t rank, size_t j) { return (uint8_t)(rank * 37 + j * 11 + 1); }

/* Device memory of the member's GPU (nccl: cudaMalloc on GPU `rank`, as
 * member_join places it; fake-nccl: the fake GPU's, host memory), set to
 * host's n floats; none with err. */
static devf32 device_copy(const member *m, const float *host, size_t n, char *err, size_t errlen)
{
    if (strcmp(m->backend, "fake-nccl") == 0) {
        float *d = malloc(n * sizeof *d);
        if (d)
            memcpy(d, host, n * sizeof *d);
        else
            snprintf(err, errlen, "out of memory");
        return devf32_of(d);
    }
#ifdef PSBENCH_HAVE_NCCL
    const cudart_api *rt = cudaload_cudart(err, errlen);
    void *d = NULL;
    cudaError_t ce;
    if (!rt || (ce = rt->cudaSetDevice((int)m->rank)) != cudaSuccess || (ce = rt->cudaMalloc(&d, n * 4)) != cudaSuccess ||
        (ce = rt->cudaMemcpyAsync(d, host, n * 4, cudaMemcpyHostToDevice, NULL)) != cudaSuccess ||
        (ce = rt->cudaStreamSynchronize(NULL)) != cudaSuccess) {
        if (rt)
            snprintf(err, errlen, "device buffer: %s", rt->cudaGetErrorString(ce));
        return devf32_none();
    }
    return devf32_of(d);
#else
    snprintf(err, errlen, "no device memory in this build");
    return devf32_none();
#endif
}

/* The device buffer d's n floats into host, and d freed. 0, or -1. */
static int device_back(const member *m, devf32 dd, float *host, size_t n)
{
    float *d = dd.p; /* a fake GPU's is host memory; a GPU's goes to the runtime */
    if (strcmp(m->backend, "fake-nccl") == 0) {
        memcpy(host, d, n * sizeof *host);
        free(d);
        return 0;
    }
#ifdef PSBENCH_HAVE_NCCL
    const cudart_api *rt = cudaload_cudart(NULL, 0);
    int rc = rt->cudaMemcpyAsync(host, d, n * 4, cudaMemcpyDeviceToHost, NULL) == cudaSuccess &&
                     rt->cudaStreamSynchronize(NULL) == cudaSuccess
                 ? 0
                 : -1;
    rt->cudaFree(d);
    return rc;
#else
    (void)m, (void)d, (void)host, (void)n;
    return -1;
#endif
}

/* The sum on device memory, times a scale (coll_allreduce_mean_f32_device):
 * the same bits as the host's sum followed by the host's multiply, with a
 * scale that is not 1/N (so that a group of one scales too: on a GPU,
 * cuBLAS's). A group without device memory (gloo) refuses it and stays
 * usable. 0, or the member's failure. */
static int member_device_mean(const member *m, coll *c)
{
    char err[512] = "";
    if (!coll_on_device(c)) {
        float x = 1.0f;
        if (coll_allreduce_mean_f32_device(c, devf32_of(&x), 1, 0.5f, err, sizeof err) != -1 ||
            !strstr(err, "not on device memory"))
            return member_fail(m, 20, "device allreduce on %s: %s", coll_backend(c), err);
        return 0;
    }
    const float scale = 1.0f / 3.0f;
    float *want = malloc(NOISE_N * sizeof *want), *got = malloc(NOISE_N * sizeof *got);
    if (!want || !got) {
        free(want);
        free(got);
        return member_fail(m, 4, "out of memory");
    }
    int rc = 0;
    for (size_t i = 0; i < NOISE_N; i++)
        want[i] = noise(m->rank + 7, i);
    devf32 d = device_copy(m, want, NOISE_N, err, sizeof err);
    if (devf32_is_none(d)) {
        rc = member_fail(m, 21, "%s", err);
    } else if (coll_allreduce_mean_f32_device(c, d, NOISE_N, scale, err, sizeof err) != 0) {
        rc = member_fail(m, 22, "device allreduce: %s", err);
        device_back(m, d, got, NOISE_N);
    } else if (device_back(m, d, got, NOISE_N) != 0) {
        rc = member_fail(m, 23, "device allreduce: copying the mean back failed");
    } else if (coll_allreduce_sum_f32(c, want, NOISE_N, err, sizeof err) != 0) {
        rc = member_fail(m, 24, "host allreduce: %s", err);
    } else {
        for (size_t i = 0; i < NOISE_N && rc == 0; i++) {
            float w = want[i] * scale;
            if (memcmp(&w, &got[i], sizeof w) != 0)
                rc = member_fail(m, 25, "device mean [%zu] = %a, the host's %a", i, (double)got[i], (double)w);
        }
    }
    free(want);
    free(got);
    return rc;
}

/* PyTorch's fp16/bf16 compress hook on a device bucket
 * (coll_allreduce_compress_device): each member's bucket cast and times 1/N
 * (half_elem.h's he_narrow_mul), summed in the narrow type, widened back.
 * One member: its own values so narrowed and widened; two: one narrow add
 * per element, whichever member's first. Bigger groups (NCCL's own sum
 * order) are compared across members by the parent. A group without it
 * (gloo) refuses it and stays usable. 0, or the member's failure. */
static int member_device_compress(const member *m, coll *c)
{
    char err[512] = "";
    if (!coll_has_half_device(c)) {
        float x = 1.0f;
        if (coll_allreduce_compress_device(c, devf32_of(&x), 1, HALF_BF16, err, sizeof err) != -1 ||
            !strstr(err, "no bf16 compression of device buckets") || coll_allreduce_sum_f32(c, &x, 1, err, sizeof err))
            return member_fail(m, 30, "compressed device allreduce on %s: %s", coll_backend(c), err);
        return 0;
    }
    const uint32_t n = m->size, r = m->rank;
    const float inv = 1.0f / (float)n;
    float *x = malloc(NOISE_N * sizeof *x), *got = malloc(NOISE_N * sizeof *got);
    int rc = !x || !got ? member_fail(m, 4, "out of memory") : 0;
    for (int bf = 0; bf < 2 && rc == 0; bf++) {
        for (size_t i = 0; i < NOISE_N; i++)
            x[i] = noise(r + 11, i) * (bf ? 1e30f : 1.0f); /* bf16 keeps fp32's range */
        devf32 d = device_copy(m, x, NOISE_N, err, sizeof err);
        if (devf32_is_none(d)) {
            rc = member_fail(m, 31, "%s", err);
            break;
        }
        int arc = coll_allreduce_compress_device(c, d, NOISE_N, bf ? HALF_BF16 : HALF_FP16, err, sizeof err);
        if (device_back(m, d, got, NOISE_N) != 0 || arc != 0) {
            rc = member_fail(m, 32, "%s device allreduce: %s", bf ? "bf16" : "fp16", arc ? err : "copy back");
            break;
        }
        report(m->fs.dir, bf ? "cbf16" : "cfp16", r, got, NOISE_N * sizeof *got);
        for (size_t i = 0; i < NOISE_N && n <= 2 && rc == 0; i++) {
            float want = he_widen(bf, he_narrow_mul(bf, x[i], inv));
            if (n == 2) {
                float other = noise(1 - r + 11, i) * (bf ? 1e30f : 1.0f);
                want = he_widen(bf, he_narrow(bf, want + he_widen(bf, he_narrow_mul(bf, other, inv))));
            }
            if (memcmp(&want, &got[i], sizeof want) != 0)
                rc = member_fail(m, 33, "%s [%zu]: %a, want %a", bf ? "bf16" : "fp16", i, (double)got[i], (double)want);
        }
    }
    free(x);
    free(got);
    return rc;
}

/* Every collective with known answers; the noisy sum's bytes go to
 * out.<rank> for the parent to compare across members. */
static int member_collectives(const member *m)
{
    char err[512] = "";
    file_store fs = m->fs;
    coll *c = member_join(m, &fs, err, sizeof err);
    if (!c)
        return member_fail(m, 2, "join: %s", err);
    int rc = 0;
    const uint32_t n = m->size, r = m->rank;
    const char *want_backend = strcmp(m->backend, "fake-nccl") == 0 ? "nccl (the fake GPU's: Gloo)" : m->backend;
    if (coll_rank(c) != r || coll_size(c) != n || strcmp(coll_backend(c), want_backend) != 0) {
        rc = member_fail(m, 3, "rank/size/backend: %u %u %s", coll_rank(c), coll_size(c), coll_backend(c));
        goto out;
    }

    /* Exact sums (integers below 2^24), several lengths: one element, fewer
     * than members, several 1 MiB segments. */
    static const size_t lens[] = {1, 3, 1000, 300001};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t len = lens[l];
        float *buf = malloc(len * sizeof *buf);
        if (!buf) {
            rc = member_fail(m, 4, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < len; i++)
            buf[i] = (float)((r + 1) * (i % 251 + 1));
        if (coll_allreduce_sum_f32(c, buf, len, err, sizeof err) != 0) {
            free(buf);
            rc = member_fail(m, 5, "allreduce(%zu): %s", len, err);
            goto out;
        }
        for (size_t i = 0; i < len; i++) {
            float want = (float)((i % 251 + 1) * (n * (n + 1) / 2));
            if (buf[i] != want) {
                rc = member_fail(m, 6, "allreduce(%zu)[%zu] = %g, want %g", len, i, buf[i], want);
                free(buf);
                goto out;
            }
        }
        free(buf);
    }
    if (coll_allreduce_sum_f32(c, NULL, 0, err, sizeof err) != 0) {
        rc = member_fail(m, 7, "allreduce of nothing: %s", err);
        goto out;
    }

    /* The noisy sum: identical bytes everywhere (checked by the parent). */
    float *noisy = malloc(NOISE_N * sizeof *noisy);
    if (!noisy) {
        rc = member_fail(m, 4, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < NOISE_N; i++)
        noisy[i] = noise(r, i);
    if (coll_allreduce_sum_f32(c, noisy, NOISE_N, err, sizeof err) != 0) {
        free(noisy);
        rc = member_fail(m, 8, "noisy allreduce: %s", err);
        goto out;
    }
    report(m->fs.dir, "out", r, noisy, NOISE_N * sizeof *noisy);
    free(noisy);
    if ((rc = member_device_mean(m, c)) != 0 || (rc = member_device_compress(m, c)) != 0)
        goto out;

    /* allgather: 13 bytes each, then in place. */
    uint8_t in[32], out[MAX_MEMBERS * 32];
    for (size_t j = 0; j < sizeof in; j++)
        in[j] = rank_byte(r, j);
    memset(out, 0xee, sizeof out);
    if (coll_allgather(c, in, 13, out, err, sizeof err) != 0) {
        rc = member_fail(m, 9, "allgather: %s", err);
        goto out;
    }
    for (uint32_t q = 0; q < n; q++)
        for (size_t j = 0; j < 13; j++)
            if (out[q * 13 + j] != rank_byte(q, j)) {
                rc = member_fail(m, 10, "allgather: byte %zu of member %u", j, q);
                goto out;
            }
    memset(out, 0xee, sizeof out);
    memcpy(out + r * 7, in, 7);
    if (coll_allgather(c, out + r * 7, 7, out, err, sizeof err) != 0) {
        rc = member_fail(m, 11, "allgather in place: %s", err);
        goto out;
    }
    for (uint32_t q = 0; q < n; q++)
        for (size_t j = 0; j < 7; j++)
            if (out[q * 7 + j] != rank_byte(q, j)) {
                rc = member_fail(m, 12, "allgather in place: byte %zu of member %u", j, q);
                goto out;
            }
    if (coll_allgather(c, in, 0, out, err, sizeof err) != 0) {
        rc = member_fail(m, 13, "allgather of nothing: %s", err);
        goto out;
    }

    /* allgatherv: unequal counts with a 0 among them; then all 0. */
    uint64_t one[1] = {17};
    const uint64_t *counts = n == 1 ? one : n == 2 ? counts2 : counts4;
    memset(out, 0xee, sizeof out);
    if (coll_allgatherv(c, in, (size_t)counts[r], counts, out, err, sizeof err) != 0) {
        rc = member_fail(m, 14, "allgatherv: %s", err);
        goto out;
    }
    size_t off = 0;
    for (uint32_t q = 0; q < n; q++)
        for (size_t j = 0; j < counts[q]; j++, off++)
            if (out[off] != rank_byte(q, j)) {
                rc = member_fail(m, 15, "allgatherv: byte %zu of member %u", j, q);
                goto out;
            }
    if (out[off] != 0xee) {
        rc = member_fail(m, 16, "allgatherv wrote past its output");
        goto out;
    }
    uint64_t zeros[MAX_MEMBERS] = {0};
    if (coll_allgatherv(c, in, 0, zeros, out, err, sizeof err) != 0) {
        rc = member_fail(m, 17, "allgatherv of nothing: %s", err);
        goto out;
    }
    /* One more sum after all that: the group is still in step. */
    float last = 1.0f;
    if (coll_allreduce_sum_f32(c, &last, 1, err, sizeof err) != 0 || last != (float)n) {
        rc = member_fail(m, 18, "last allreduce: %s (%g)", err, last);
        goto out;
    }
out:
    coll_free(c);
    return rc;
}

static void make_dir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/psbench-coll-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static member member_of(const char *dir, const char *backend, const char *prefix, uint32_t rank, uint32_t size,
                        double timeout_s, double store_wait_s)
{
    member m;
    memset(&m, 0, sizeof m);
    m.rank = rank;
    m.size = size;
    m.backend = backend;
    m.prefix = prefix;
    m.timeout_s = timeout_s;
    snprintf(m.fs.dir, sizeof m.fs.dir, "%s", dir);
    m.fs.wait_s = store_wait_s;
    return m;
}

/* Prints what failed members reported (before the assertion fails). */
static int check_members(const char *dir, const int *status, uint32_t n)
{
    int bad = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (status[r] == 0)
            continue;
        char *e = read_report(dir, "err", r, NULL);
        print_error("member %u: exit %d: %s\n", r, status[r], e ? e : "(no report)");
        free(e);
        bad++;
    }
    return bad;
}

/* n members of backend in a fresh folder (dir), each running fn in group
 * `job` with the long timeouts, reaped within 60 s. Returns how many
 * overran; *bad: how many failed (check_members, which says why). */
static int run_members(char *dir, size_t dirlen, const char *backend, const char *job, member_fn fn, uint32_t n,
                       int *bad)
{
    assert_true(n <= MAX_MEMBERS);
    make_dir(dir, dirlen);
    pid_t pids[MAX_MEMBERS];
    int status[MAX_MEMBERS];
    for (uint32_t r = 0; r < n; r++) {
        member m = member_of(dir, backend, job, r, n, LONG_TIMEOUT_S, LONG_TIMEOUT_S);
        pids[r] = spawn(fn, &m);
    }
    int overran = reap(pids, (int)n, 60, status);
    *bad = check_members(dir, status, n);
    return overran;
}

static void run_collectives(const char *backend, uint32_t n)
{
    char dir[256];
    int bad = 0;
    int overran = run_members(dir, sizeof dir, backend, "job7/coll", member_collectives, n, &bad);

    /* Identical bytes on every member, and close to the sum in double. */
    size_t len0 = 0, len = 0;
    char *first = read_report(dir, "out", 0, &len0);
    int differ = 0;
    for (uint32_t r = 1; first && r < n; r++) {
        char *o = read_report(dir, "out", r, &len);
        differ += !o || len != len0 || memcmp(o, first, len0) != 0;
        free(o);
    }
    size_t far = 0;
    if (first && len0 == NOISE_N * sizeof(float)) {
        const float *got = (const float *)first;
        for (size_t i = 0; i < NOISE_N; i++) {
            double sum = 0, mag = 0;
            for (uint32_t r = 0; r < n; r++) {
                sum += noise(r, i);
                mag += fabs(noise(r, i));
            }
            far += fabs((double)got[i] - sum) > 1e-6 * mag + 1e-30;
        }
    }
    free(first);
    /* The compressed device allreduce: the same bits on every member. */
    int cdiffer = 0;
    for (int bf = 0; bf < 2 && strcmp(backend, "gloo") != 0; bf++) {
        char *c0 = read_report(dir, bf ? "cbf16" : "cfp16", 0, &len);
        size_t clen = len;
        cdiffer += !c0 || clen != NOISE_N * sizeof(float);
        for (uint32_t r = 1; c0 && r < n; r++) {
            char *o = read_report(dir, bf ? "cbf16" : "cfp16", r, &len);
            cdiffer += !o || len != clen || memcmp(o, c0, clen) != 0;
            free(o);
        }
        free(c0);
    }
    rm_rf(dir);
    assert_int_equal(overran, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(len0, NOISE_N * sizeof(float));
    assert_int_equal(differ, 0);
    assert_int_equal(far, 0);
    assert_int_equal(cdiffer, 0);
}

/* ---- the narrow allreduce (--compress fp16|bf16) ------------------------ */

/* Member r's input to the narrow allreduce of type bf: its noise cast and
 * divided by the group's size, as PyTorch's compress hooks do (x: room for
 * NOISE_N floats). */
static void half_input(uint32_t r, uint32_t n, int bf, float *x, uint16_t *out)
{
    for (size_t i = 0; i < NOISE_N; i++)
        x[i] = noise(r, i);
    (bf ? half_to_bf16_div : half_to_fp16_div)(out, x, NOISE_N, (float)n);
}

static uint16_t half_sum_ref(int bf, uint16_t a, uint16_t b)
{
    if (bf)
        return half_bf16_of(half_bf16_to_float(a) + half_bf16_to_float(b));
    return half_fp16_of(half_fp16_to_float(a) + half_fp16_to_float(b));
}

static int member_half(const member *m)
{
    char err[512] = "";
    file_store fs = m->fs;
    coll *c = member_join(m, &fs, err, sizeof err);
    if (!c)
        return member_fail(m, 2, "join: %s", err);
    int rc = 0;
    const uint32_t n = m->size, r = m->rank;
    uint16_t *buf = malloc(NOISE_N * sizeof *buf), *other = malloc(NOISE_N * sizeof *other);
    uint16_t *mine = malloc(NOISE_N * sizeof *mine);
    float *x = malloc(NOISE_N * sizeof *x);
    if (!buf || !other || !mine || !x) {
        rc = member_fail(m, 4, "out of memory");
        goto out;
    }
    if (strcmp(m->backend, "fake-nccl") == 0) {
        /* No narrow sum there yet: refused, the group still in step. */
        float one = 1.0f;
        if (coll_has_half(c) || coll_allreduce_sum_half(c, buf, 1, HALF_FP16, err, sizeof err) == 0 ||
            !strstr(err, "no fp16 sum")) {
            rc = member_fail(m, 5, "fake NCCL's narrow allreduce was not refused: '%s'", err);
            goto out;
        }
        if (coll_allreduce_sum_f32(c, &one, 1, err, sizeof err) != 0 || one != (float)n)
            rc = member_fail(m, 6, "allreduce after the refusal: %s (%g)", err, one);
        goto out;
    }
    if (!coll_has_half(c)) {
        rc = member_fail(m, 5, "%s has no narrow allreduce", coll_backend(c));
        goto out;
    }
    for (int bf = 0; bf < 2; bf++) {
        half_input(r, n, bf, x, buf);
        memcpy(mine, buf, NOISE_N * sizeof *buf);
        if (coll_allreduce_sum_half(c, buf, NOISE_N, bf ? HALF_BF16 : HALF_FP16, err, sizeof err) != 0) {
            rc = member_fail(m, 7, "%s allreduce: %s", bf ? "bf16" : "fp16", err);
            goto out;
        }
        report(m->fs.dir, bf ? "bf16" : "fp16", r, buf, NOISE_N * sizeof *buf);
        if (n == 1 && memcmp(buf, mine, NOISE_N * sizeof *buf) != 0) {
            rc = member_fail(m, 8, "%s: a group of one changed its buffer", bf ? "bf16" : "fp16");
            goto out;
        }
        if (n != 2)
            continue;
        /* Two members: one add per element, whichever member's comes first. */
        half_input(1 - r, n, bf, x, other);
        for (size_t i = 0; i < NOISE_N; i++) {
            uint16_t want = half_sum_ref(bf, mine[i], other[i]);
            if (buf[i] != want) {
                rc = member_fail(m, 9, "%s [%zu]: 0x%04X + 0x%04X = 0x%04X, want 0x%04X", bf ? "bf16" : "fp16", i,
                                 mine[i], other[i], buf[i], want);
                goto out;
            }
        }
    }
out:
    free(buf);
    free(other);
    free(mine);
    free(x);
    coll_free(c);
    return rc;
}

static void run_half(const char *backend, uint32_t n)
{
    char dir[256];
    int bad = 0;
    int overran = run_members(dir, sizeof dir, backend, "job7/half", member_half, n, &bad);
    /* Identical bytes on every member. */
    int differ = 0, missing = 0;
    for (int bf = 0; bf < 2 && strcmp(backend, "fake-nccl") != 0; bf++) {
        size_t len0 = 0, len = 0;
        char *first = read_report(dir, bf ? "bf16" : "fp16", 0, &len0);
        missing += !first || len0 != NOISE_N * sizeof(uint16_t);
        for (uint32_t r = 1; first && r < n; r++) {
            char *o = read_report(dir, bf ? "bf16" : "fp16", r, &len);
            differ += !o || len != len0 || memcmp(o, first, len0) != 0;
            free(o);
        }
        free(first);
    }
    rm_rf(dir);
    assert_int_equal(overran, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(missing, 0);
    assert_int_equal(differ, 0);
}

/* ---- PowerSGD over the group (--compress powersgd) ------------------------ */

/* A bucket like a DummyModel's: a 40 x 30 weight, its 40 bias, a 30 x 20
 * weight (layer-wise: the weights factored at rank 3, the bias not). */
#define PSGD_N (40 * 30 + 40 + 30 * 20)
static const hook_tensor psgd_tensors[3] = {
    {.offset = 0, .rows = 40, .cols = 30}, {.offset = 1200, .rows = 40, .cols = 1}, {.offset = 1240, .rows = 30, .cols = 20}};

static int psgd_member_sum(void *ctx, float *x, size_t n, char *err, size_t errlen)
{
    return coll_allreduce_sum_f32(ctx, x, n, err, errlen);
}

static int member_powersgd(const member *m)
{
    char err[512] = "";
    file_store fs = m->fs;
    coll *c = member_join(m, &fs, err, sizeof err);
    if (!c)
        return member_fail(m, 2, "join: %s", err);
    int rc = 0;
    static float x[PSGD_N], mean[PSGD_N];
    for (int batched = 0; batched < 2 && rc == 0; batched++) {
        psgd_conf pc;
        psgd_conf_default(&pc);
        pc.rank = 3;
        pc.start_iter = 2;
        pc.batched = batched;
        psgd *s = psgd_new(&pc, m->size);
        if (!s) {
            rc = member_fail(m, 3, "out of memory");
            break;
        }
        for (uint32_t step = 0; step < 5 && rc == 0; step++) {
            /* every member's own gradient, another each step */
            for (size_t i = 0; i < PSGD_N; i++) {
                x[i] = noise(m->rank, i + 7 * step);
                double sum = 0;
                for (uint32_t r = 0; r < m->size; r++)
                    sum += noise(r, i + 7 * step);
                mean[i] = (float)sum;
            }
            hook_bucket b = {.id = 0, .data = x, .count = PSGD_N, .tensors = psgd_tensors, .ntensors = 3,
                             .last = true};
            uint64_t bytes = 0;
            if (psgd_reduce(s, &b, psgd_member_sum, c, &bytes, err, sizeof err) < 0) {
                rc = member_fail(m, 4, "powersgd step %u: %s", step, err);
                break;
            }
            uint64_t want = step < 2 ? PSGD_N : psgd_compressed_floats(&pc, &b);
            if (bytes != want * 4) {
                rc = member_fail(m, 5, "step %u: %llu bytes, want %llu", step, (unsigned long long)bytes,
                                 (unsigned long long)want * 4);
                break;
            }
            for (size_t i = 0; i < PSGD_N && rc == 0; i++) {
                /* plain: the mean, up to the sum's order; compressed: finite */
                if (!isfinite(x[i]) ||
                    (step < 2 && fabs((double)x[i] - (double)mean[i] * mean_scale(m->size)) > 1e-5 * fabs(mean[i]) + 1e-6))
                    rc = member_fail(m, 6, "step %u [%zu]: %g (sum %g)", step, i, x[i], mean[i]);
            }
            char name[32];
            snprintf(name, sizeof name, "psgd%d.%u", batched, step);
            report(m->fs.dir, name, m->rank, x, sizeof x);
        }
        psgd_free(s);
    }
    coll_free(c);
    return rc;
}

static void run_powersgd(uint32_t n)
{
    char dir[256];
    int bad = 0;
    int overran = run_members(dir, sizeof dir, "gloo", "job7/psgd", member_powersgd, n, &bad);
    int differ = 0, missing = 0, same_as_input = 0;
    for (int batched = 0; batched < 2; batched++)
        for (uint32_t step = 0; step < 5; step++) {
            char name[32];
            snprintf(name, sizeof name, "psgd%d.%u", batched, step);
            size_t len0 = 0, len = 0;
            char *first = read_report(dir, name, 0, &len0);
            missing += !first || len0 != PSGD_N * sizeof(float);
            for (uint32_t r = 1; first && r < n; r++) {
                char *o = read_report(dir, name, r, &len);
                differ += !o || len != len0 || memcmp(o, first, len0) != 0;
                free(o);
            }
            /* a compressed step changed the weights (low rank of noise) */
            if (first && step >= 2 && len0 == PSGD_N * sizeof(float) && n == 1) {
                float v;
                memcpy(&v, first, sizeof v);
                same_as_input += v == noise(0, 7 * step);
            }
            free(first);
        }
    rm_rf(dir);
    assert_int_equal(overran, 0);
    assert_int_equal(bad, 0);
    assert_int_equal(missing, 0);
    assert_int_equal(differ, 0);
    assert_int_equal(same_as_input, 0);
}

static void test_gloo_powersgd(void **state)
{
    (void)state;
    run_powersgd(1);
    run_powersgd(3);
}

static void test_gloo_half(void **state)
{
    (void)state;
    run_half("gloo", 1);
    run_half("gloo", 2);
    run_half("gloo", 3);
    run_half("fake-nccl", 2);
}

static void test_gloo_1(void **state)
{
    (void)state;
    run_collectives("gloo", 1);
}

static void test_gloo_2(void **state)
{
    (void)state;
    run_collectives("gloo", 2);
}

static void test_gloo_4(void **state)
{
    (void)state;
    run_collectives("gloo", 4);
}

/* ---- in this process: arguments, a group of one, the failure latch ---- */

/* NCCL's stand-in for fake-cuda trainers: Gloo's collectives, and the
 * device-memory mean on the fake GPU's (host) memory. */
static void test_fake_nccl_2(void **state)
{
    (void)state;
    run_collectives("fake-nccl", 2);
}

static void test_gloo_args(void **state)
{
    (void)state;
    char dir[256], err[512];
    make_dir(dir, sizeof dir);
    file_store fs = {.wait_s = 1};
    snprintf(fs.dir, sizeof fs.dir, "%s", dir);
    coll_store store = store_of(&fs);

    assert_null(coll_gloo_new(2, 2, "127.0.0.1", &store, "p", 2, err, sizeof err));
    assert_string_equal(err, "gloo: rank 2 in a group of 2");
    assert_null(coll_gloo_new(0, 0, "127.0.0.1", &store, "p", 2, err, sizeof err));
    assert_non_null(strstr(err, "a group of 0 members"));
    assert_null(coll_gloo_new(0, 1, "127.0.0.1", NULL, "p", 2, err, sizeof err));
    assert_string_equal(err, "gloo: no rendezvous store");
    assert_null(coll_gloo_new(0, 1, "127.0.0.1", &store, "p", 0, err, sizeof err));
    assert_non_null(strstr(err, "timeout 0 s"));
    assert_null(coll_gloo_new(0, 2, "no-such-host.invalid", &store, "p", 2, err, sizeof err));
    assert_non_null(strstr(err, "gloo init: cannot resolve host 'no-such-host.invalid'"));

    /* A group of one: copies, no store traffic; then a failure that sticks. */
    coll *c = coll_gloo_new(0, 1, NULL, &store, "p", 2, err, sizeof err);
    assert_non_null(c);
    assert_string_equal(coll_backend(c), "gloo");
    assert_int_equal(coll_rank(c), 0);
    assert_int_equal(coll_size(c), 1);
    float f[3] = {1.5f, -2.0f, 3.25f};
    assert_int_equal(coll_allreduce_sum_f32(c, f, 3, err, sizeof err), 0);
    assert_true(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
    uint8_t in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    assert_int_equal(coll_allgather(c, in, 5, out, err, sizeof err), 0);
    assert_memory_equal(in, out, 5);
    uint64_t cnt[1] = {4};
    memset(out, 0, sizeof out);
    assert_int_equal(coll_allgatherv(c, in, 4, cnt, out, err, sizeof err), 0);
    assert_memory_equal(in, out, 4);
    assert_int_equal(out[4], 0);

    assert_int_equal(coll_allgatherv(c, in, 3, cnt, out, err, sizeof err), -1);
    assert_string_equal(err, "gloo allgatherv: counts[0] is 4 but this member gives 3 bytes");
    err[0] = '\0';
    assert_int_equal(coll_allreduce_sum_f32(c, f, 3, err, sizeof err), -1);
    assert_string_equal(err, "gloo allgatherv: counts[0] is 4 but this member gives 3 bytes");
    assert_int_equal(coll_allgather(c, in, 5, out, NULL, 0), -1);
    coll_free(c);
    coll_free(NULL);

    /* No key was ever set for a group of one. */
    DIR *d = opendir(dir);
    assert_non_null(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    closedir(d);
    rm_rf(dir);
    assert_int_equal(entries, 0);
}

/* ---- members that fail ----------------------------------------------- */

/* Joins; writes the time it took and the reason to t.<rank>, err.<rank>.
 * Exit 0 when joining failed, 1 when it succeeded. */
static int member_expect_join_fails(const member *m)
{
    char err[512] = "";
    file_store fs = m->fs;
    double t0 = now_s();
    coll *c = member_join(m, &fs, err, sizeof err);
    double took = now_s() - t0;
    report(m->fs.dir, "t", m->rank, &took, sizeof took);
    report_str(m->fs.dir, "err", m->rank, c ? "joined" : err);
    coll_free(c);
    return c ? 1 : 0;
}

/* A member of a group one of whose members dies the moment it has
 * published its addresses: its join fails — or, where it connected to the
 * dying member before it died (the kernel completes a connection to a
 * listening socket that nobody will serve), it joins and its first
 * allreduce fails. Either way within the timeout; reports the reason
 * ("joined, then ..." for the second) and the time of the whole. */
static int member_expect_fails_soon(const member *m)
{
    char err[512] = "", why[600];
    file_store fs = m->fs;
    double t0 = now_s();
    coll *c = member_join(m, &fs, err, sizeof err);
    int rc = 0;
    if (c) {
        float x = 1.0f;
        rc = coll_allreduce_sum_f32(c, &x, 1, err, sizeof err) == 0; /* 1: it should not have worked */
        snprintf(why, sizeof why, "joined, then %s", rc ? "an allreduce that worked" : err);
    } else {
        snprintf(why, sizeof why, "%s", err);
    }
    double took = now_s() - t0;
    report(m->fs.dir, "t", m->rank, &took, sizeof took);
    report_str(m->fs.dir, "err", m->rank, why);
    coll_free(c);
    return rc;
}

static double read_double(const char *dir, const char *name, uint32_t rank)
{
    size_t len = 0;
    char *p = read_report(dir, name, rank, &len);
    double v = -1;
    if (p && len == sizeof v)
        memcpy(&v, p, sizeof v);
    free(p);
    return v;
}

/* Groups of 2 where one member never comes: rank 0 of one, rank 1 of
 * another. Each fails within the timeout, naming the key it waited for. */
static void test_gloo_never_joins(void **state)
{
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    member a = member_of(dir, "gloo", "alone-a", 0, 2, SHORT_TIMEOUT_S, SHORT_TIMEOUT_S);
    member b = member_of(dir, "gloo", "alone-b", 1, 2, SHORT_TIMEOUT_S, SHORT_TIMEOUT_S);
    pid_t pids[2] = {spawn(member_expect_join_fails, &a), spawn(member_expect_join_fails, &b)};
    int status[2];
    int overran = reap(pids, 2, SHORT_TIMEOUT_S + 20, status);
    char *e0 = read_report(dir, "err", 0, NULL), *e1 = read_report(dir, "err", 1, NULL);
    double t0 = read_double(dir, "t", 0), t1 = read_double(dir, "t", 1);
    print_message("alone as rank 0 (%.2f s): %s\nalone as rank 1 (%.2f s): %s\n", t0, e0 ? e0 : "?", t1,
                  e1 ? e1 : "?");
    int ok0 = e0 && strstr(e0, "gloo init: rendezvous failed: store get 'alone-a/1': key not set within 2 s");
    int ok1 = e1 && strstr(e1, "gloo init: rendezvous failed: store get 'alone-b/rank_0': key not set within 2 s");
    free(e0);
    free(e1);
    rm_rf(dir);
    assert_int_equal(overran, 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 0);
    assert_true(ok0);
    assert_true(ok1);
    assert_true(t0 >= 0 && t0 < SHORT_TIMEOUT_S + SLACK_S);
    assert_true(t1 >= 0 && t1 < SHORT_TIMEOUT_S + SLACK_S);
}

/* A group of 3 whose rank 2 dies (SIGKILL) the moment it has published its
 * addresses: the others fail within the timeout — their joins, or (a
 * member that connected to rank 2 before it died) the first allreduce. */
static void test_gloo_dies_in_rendezvous(void **state)
{
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    pid_t pids[3];
    for (uint32_t r = 0; r < 3; r++) {
        member m = member_of(dir, "gloo", "rdv", r, 3, SHORT_TIMEOUT_S, SHORT_TIMEOUT_S);
        if (r == 2)
            m.fs.die_after = "rdv/2";
        pids[r] = spawn(member_expect_fails_soon, &m);
    }
    int status[3];
    int overran = reap(pids, 3, SHORT_TIMEOUT_S * 2 + 20, status);
    int ok = 1;
    for (uint32_t r = 0; r < 2; r++) {
        char *e = read_report(dir, "err", r, NULL);
        double t = read_double(dir, "t", r);
        print_message("rank %u (%.2f s): %s\n", r, t, e ? e : "?");
        ok &= e && (strncmp(e, "gloo init: ", 11) == 0 || strncmp(e, "joined, then gloo allreduce: ", 29) == 0) &&
              t >= 0 && t < SHORT_TIMEOUT_S + SLACK_S;
        free(e);
    }
    rm_rf(dir);
    assert_int_equal(overran, 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], 128 + SIGKILL);
    assert_true(ok);
}

/* Sets the store key "<prefix>/<name>" (the parent's and members' signals). */
static void signal_key(file_store *fs, const char *prefix, const char *name)
{
    char key[256], err[256];
    snprintf(key, sizeof key, "%s/%s", prefix, name);
    coll_store s = store_of(fs);
    (void)s.set(s.ctx, key, "1", 1, err, sizeof err);
}

static int await_key(file_store *fs, const char *prefix, const char *name)
{
    char key[256], err[256];
    snprintf(key, sizeof key, "%s/%s", prefix, name);
    uint8_t *v = NULL;
    size_t len;
    coll_store s = store_of(fs);
    int rc = s.get(s.ctx, key, &v, &len, err, sizeof err);
    free(v);
    return rc;
}

/* The scenarios after a successful join (a group of 3, the victim rank 1):
 *   BEFORE: everyone sums once; the victim dies once the others say so
 *           through the store; then the others sum again.
 *   DURING: everyone sums in a loop until it fails; the parent kills the
 *           victim while they do.
 *   SILENT: the parent stops the victim (SIGSTOP); the others sum.
 * A survivor writes when its failing call ended (fail.<rank>, monotonic
 * seconds), how long that call took (t.<rank>) and why (err.<rank>), checks
 * that the next call fails at once with the same reason, and exits 0. */
enum { BEFORE, DURING, SILENT };
#define VICTIM 1u

typedef struct scenario_member {
    member m;
    int kind;
} scenario_member;

static int member_scenario(const member *mm)
{
    const scenario_member *sm = (const scenario_member *)mm;
    const member *m = &sm->m;
    char err[512] = "", again[512] = "";
    file_store fs = m->fs;
    coll *c = member_join(m, &fs, err, sizeof err);
    if (!c)
        return member_fail(m, 2, "join: %s", err);
    char name[32];
    snprintf(name, sizeof name, "joined.%u", m->rank);
    signal_key(&fs, m->prefix, name);

    const size_t n = sm->kind == DURING ? (size_t)1 << 20 : 1000;
    float *buf = calloc(n, sizeof *buf);
    int rc = 0;
    if (!buf) {
        rc = member_fail(m, 4, "out of memory");
        goto out;
    }
    if (sm->kind == BEFORE) {
        if (coll_allreduce_sum_f32(c, buf, n, err, sizeof err) != 0) {
            rc = member_fail(m, 5, "first allreduce: %s", err);
            goto out;
        }
        snprintf(name, sizeof name, "summed.%u", m->rank);
        signal_key(&fs, m->prefix, name);
        if (m->rank == VICTIM) {
            for (uint32_t r = 0; r < m->size; r++) {
                snprintf(name, sizeof name, "summed.%u", r);
                if (r != VICTIM && await_key(&fs, m->prefix, name) != 0)
                    break;
            }
            raise(SIGKILL);
        }
        sleep_s(0.2);
    } else if (sm->kind == SILENT) {
        if (await_key(&fs, m->prefix, "go") != 0) { /* the parent has stopped the victim */
            rc = member_fail(m, 6, "no go from the parent");
            goto out;
        }
    }
    double t0, t1;
    const double give_up = now_s() + 30;
    for (;;) {
        t0 = now_s();
        int r = coll_allreduce_sum_f32(c, buf, n, err, sizeof err);
        t1 = now_s();
        if (r != 0)
            break;
        if (sm->kind != DURING || t1 > give_up) {
            rc = member_fail(m, 7, "the allreduce succeeded");
            goto out;
        }
    }
    double took = t1 - t0;
    report(m->fs.dir, "fail", m->rank, &t1, sizeof t1);
    report(m->fs.dir, "t", m->rank, &took, sizeof took);
    report_str(m->fs.dir, "err", m->rank, err);
    double t2 = now_s();
    if (coll_allgather(c, buf, 4, buf, again, sizeof again) != -1 || strcmp(again, err) != 0 || now_s() - t2 > 0.1)
        rc = member_fail(m, 8, "the next call: \"%s\" after \"%s\"", again, err);
out:
    free(buf);
    coll_free(c);
    return rc;
}

static void run_scenario(int kind, const char *prefix, double *took, char **errs, int *status, int *overran,
                         double *fail_after_kill)
{
    char dir[256];
    make_dir(dir, sizeof dir);
    pid_t pids[3];
    scenario_member sms[3];
    for (uint32_t r = 0; r < 3; r++) {
        sms[r].m = member_of(dir, "gloo", prefix, r, 3, SHORT_TIMEOUT_S, 10);
        sms[r].kind = kind;
        pids[r] = spawn(member_scenario, &sms[r].m);
    }
    file_store fs = {.wait_s = 10};
    snprintf(fs.dir, sizeof fs.dir, "%s", dir);
    double killed_at = -1;
    if (kind != BEFORE) {
        int joined = 1;
        for (uint32_t r = 0; r < 3 && joined; r++) {
            char name[32];
            snprintf(name, sizeof name, "joined.%u", r);
            joined = await_key(&fs, prefix, name) == 0;
        }
        if (joined && kind == DURING) {
            sleep_s(0.3);
            kill(pids[VICTIM], SIGKILL);
            killed_at = now_s();
        } else if (joined) {
            kill(pids[VICTIM], SIGSTOP);
            signal_key(&fs, prefix, "go");
        }
    }
    /* SILENT: the victim stays stopped until the others are done. */
    pid_t others[2] = {pids[0], pids[2]};
    int st[2];
    *overran = reap(others, 2, SHORT_TIMEOUT_S + 30, st);
    status[0] = st[0];
    status[2] = st[1];
    if (kind == SILENT)
        kill(pids[VICTIM], SIGKILL);
    *overran += reap(&pids[VICTIM], 1, 10, &status[VICTIM]);
    for (uint32_t r = 0; r < 3; r += 2) {
        took[r] = read_double(dir, "t", r);
        errs[r] = read_report(dir, "err", r, NULL);
        double failed_at = read_double(dir, "fail", r);
        fail_after_kill[r] = killed_at > 0 && failed_at > 0 ? failed_at - killed_at : -1;
        print_message("rank %u: exit %d, %.2f s: %s\n", r, status[r], took[r], errs[r] ? errs[r] : "?");
    }
    rm_rf(dir);
}

static void test_gloo_killed_before(void **state)
{
    (void)state;
    double took[3], after[3];
    char *errs[3] = {NULL};
    int status[3], overran;
    run_scenario(BEFORE, "before", took, errs, status, &overran, after);
    int ok = 1;
    for (uint32_t r = 0; r < 3; r += 2) {
        ok &= errs[r] && strncmp(errs[r], "gloo allreduce: ", 16) == 0;
        ok &= took[r] >= 0 && took[r] < SHORT_TIMEOUT_S + SLACK_S;
        free(errs[r]);
    }
    assert_int_equal(overran, 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[2], 0);
    assert_int_equal(status[VICTIM], 128 + SIGKILL);
    assert_true(ok);
}

static void test_gloo_killed_during(void **state)
{
    (void)state;
    double took[3], after[3];
    char *errs[3] = {NULL};
    int status[3], overran;
    run_scenario(DURING, "during", took, errs, status, &overran, after);
    int ok = 1;
    for (uint32_t r = 0; r < 3; r += 2) {
        ok &= errs[r] && strncmp(errs[r], "gloo allreduce: ", 16) == 0;
        ok &= after[r] >= 0 && after[r] < SHORT_TIMEOUT_S + SLACK_S;
        free(errs[r]);
    }
    assert_int_equal(overran, 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[2], 0);
    assert_int_equal(status[VICTIM], 128 + SIGKILL);
    assert_true(ok);
}

static void test_gloo_silent_peer(void **state)
{
    (void)state;
    double took[3], after[3];
    char *errs[3] = {NULL};
    int status[3], overran;
    run_scenario(SILENT, "silent", took, errs, status, &overran, after);
    int timed_out = 0, in_time = 1;
    for (uint32_t r = 0; r < 3; r += 2) {
        timed_out += errs[r] && strstr(errs[r], "timed out after 2 s (--rpc-timeout)") != NULL;
        in_time &= took[r] >= 0 && took[r] < SHORT_TIMEOUT_S + SLACK_S;
        free(errs[r]);
    }
    assert_int_equal(overran, 0);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[2], 0);
    assert_true(timed_out >= 1); /* the other may learn it from the first */
    assert_true(in_time);
}

/* ---- NCCL -------------------------------------------------------------- */

/* The number of CUDA devices, asked in a child so that this process never
 * initialises CUDA (forked members could not use it). -1 with why. */
static int cuda_devices(char *why, size_t len)
{
#ifdef PSBENCH_HAVE_NCCL
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char msg[600];
        int n = 0;
        const cudart_api *rt = cudaload_cudart(msg + 3, sizeof msg - 3);
        cudaError_t ce = rt ? rt->cudaGetDeviceCount(&n) : cudaSuccess;
        if (!rt)
            memcpy(msg, "-1 ", 3);
        else if (ce != cudaSuccess)
            snprintf(msg, sizeof msg, "-1 cudaGetDeviceCount: %s", rt->cudaGetErrorString(ce));
        else
            snprintf(msg, sizeof msg, "%d cudaGetDeviceCount found %d", n, n);
        if (write(fds[1], msg, strlen(msg)) < 0)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    char msg[256] = "";
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof msg && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)r;
    msg[got] = '\0';
    close(fds[0]);
    pid_t p = pid;
    int st;
    reap(&p, 1, 60, &st);
    int n = -1;
    int skip_chars = 0;
    if (sscanf(msg, "%d %n", &n, &skip_chars) != 1) {
        snprintf(why, len, "the probe said nothing (exit %d)", st);
        return -1;
    }
    snprintf(why, len, "%s", msg + skip_chars);
    return n;
#else
    snprintf(why, len, "no CUDA in this build");
    return -1;
#endif
}

static int member_nccl_no_device(const member *m)
{
    char err[512] = "";
    file_store fs = m->fs;
    coll *c = member_join(m, &fs, err, sizeof err);
    report_str(m->fs.dir, "err", m->rank, c ? "joined" : err);
    coll_free(c);
    return c ? 1 : 0;
}

static void test_nccl(void **state)
{
    (void)state;
    char err[512] = "", why[256];
    file_store fs = {.wait_s = 1};
    snprintf(fs.dir, sizeof fs.dir, "/nonexistent");
    coll_store store = store_of(&fs);
    if (!coll_have_nccl()) {
        assert_null(coll_nccl_new(0, 1, 0, &store, "n", SHORT_TIMEOUT_S, err, sizeof err));
        assert_string_equal(err, "this build has no NCCL (CUDA toolkit and NCCL were not found at build time)");
        print_message("built without NCCL: coll_nccl_new says so\n");
        return;
    }
    int ndev = cuda_devices(why, sizeof why);
    if (ndev <= 0) {
        /* The constructor must say the same, without a hang. */
        char dir[256];
        make_dir(dir, sizeof dir);
        member m = member_of(dir, "nccl", "n", 0, 1, SHORT_TIMEOUT_S, SHORT_TIMEOUT_S);
        pid_t pid = spawn(member_nccl_no_device, &m);
        int st;
        int overran = reap(&pid, 1, 60, &st);
        char *e = read_report(dir, "err", 0, NULL);
        /* A host without the CUDA libraries (shared/gpu/cudaload.h): the
         * soname the probe missed, and how to do without. */
        int ok = e && (strstr(e, "nccl: no CUDA device answers (cudaGetDeviceCount") != NULL ||
                       (strstr(why, " not found") && strstr(e, " not found (install ") &&
                        strstr(e, "or use --backend gloo)")));
        print_message("no CUDA device answers (%s): the NCCL collectives are skipped; coll_nccl_new said: %s\n", why,
                      e ? e : "?");
        free(e);
        rm_rf(dir);
        assert_int_equal(overran, 0);
        assert_int_equal(st, 0);
        assert_true(ok);
        skip();
    }
    print_message("%s: NCCL groups of 1%s\n", why, ndev >= 2 ? " and 2" : " (2 needs two devices)");
    run_collectives("nccl", 1);
    if (ndev >= 2)
        run_collectives("nccl", 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gloo_args),
        cmocka_unit_test(test_gloo_1),
        cmocka_unit_test(test_gloo_2),
        cmocka_unit_test(test_gloo_4),
        cmocka_unit_test(test_fake_nccl_2),
        cmocka_unit_test(test_gloo_half),
        cmocka_unit_test(test_gloo_never_joins),
        cmocka_unit_test(test_gloo_dies_in_rendezvous),
        cmocka_unit_test(test_gloo_killed_before),
        cmocka_unit_test(test_gloo_killed_during),
        cmocka_unit_test(test_gloo_silent_peer),
        cmocka_unit_test(test_gloo_powersgd),
        cmocka_unit_test(test_nccl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
