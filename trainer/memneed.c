/* memneed.c — a trainer's memory, checked before it computes (see
 * memneed.h). */
#include "trainer/memneed.h"
#include "shared/cli.h"

#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* The product that makes OpenBLAS map its buffer: big enough to take its
 * ordinary path (small products, up to 100^3, skip the buffer on some
 * cores), small enough to cost a millisecond. */
#define MEMNEED_PROBE_N 256

/* The DummyModel's dense layers' floats (weights and biases). The sizes
 * are bounded by the configuration's checks (at most 2^36 parameters,
 * 2^34 data values): no sum here or below overflows. */
static uint64_t memneed_dense_layers(const model_config *m)
{
    return (uint64_t)m->dense_layers_count * (m->dense_output_size * m->dense_input_size + m->dense_output_size);
}

void memneed_dummy(const train_job *j, bool host_model, memneed *n)
{
    const model_config *m = &j->model;
    uint64_t params = m->num_embeddings * m->embedding_dim + memneed_dense_layers(m);
    uint64_t B = j->batch_size, D = m->dense_input_size, C = m->dense_output_size;
    uint64_t wide = D > C ? D : C;
    /* model.c's activations: x[0], one per layer, prob, q, two of the widest. */
    uint64_t act = B * D + (uint64_t)m->dense_layers_count * B * C + 2 * B * C + 2 * B * wide;
    memset(n, 0, sizeof *n);
    if (host_model) {
        /* Values and gradients, the momentum buffer, the activations; a
         * sparse embedding's row lists (8 + 4 bytes a row). */
        n->model = (2 * params + (j->momentum > 0 ? params : 0) + act) * sizeof(float);
        if (m->sparse)
            n->model += m->num_embeddings * 12;
        n->blas = MEMNEED_BLAS_BUFFER;
    } else {
        /* On a GPU: the host holds the gradients' pinned twins. */
        n->model = params * sizeof(float);
    }
    /* data.c's set: int64 indices and targets, and its shuffle's scratch. */
    n->data = (j->data.sample_count * j->data.sample_length + j->data.sample_count + j->data.max_val) *
              sizeof(int64_t);
}

void memneed_add_powersgd(const train_job *j, const psgd_conf *p, memneed *n)
{
    const model_config *m = &j->model;
    uint64_t dense = memneed_dense_layers(m);
    if (!m->sparse)
        dense += m->num_embeddings * m->embedding_dim;
    if (p->error_feedback)
        n->model += dense * sizeof(float);
}

void memneed_linear(uint64_t in, uint64_t out, uint64_t batch, bool host_model, memneed *n)
{
    uint64_t params = in * out + out; /* at most 2^31 */
    memset(n, 0, sizeof *n);
    if (host_model) {
        /* The parameters, their gradients, a batch's inputs and outputs. */
        n->model = (2 * params + batch * (in + out)) * sizeof(float);
        n->blas = MEMNEED_BLAS_BUFFER;
    } else {
        n->model = params * sizeof(float);
    }
}

void memneed_hybrid(bool host_model, memneed *n)
{
    memset(n, 0, sizeof *n);
    if (host_model)
        n->blas = MEMNEED_BLAS_BUFFER;
}

void memneed_synthetic(uint64_t floats, memneed *n)
{
    memset(n, 0, sizeof *n);
    n->model = 2 * floats * sizeof(float); /* what it pushes, what comes back */
}

void memneed_add_threads(memneed *n, unsigned threads)
{
    pthread_attr_t a;
    size_t size = 0;
    if (pthread_getattr_default_np(&a) == 0) {
        pthread_attr_getstacksize(&a, &size);
        pthread_attr_destroy(&a);
    }
    n->stacks += (uint64_t)threads * size;
}

/* ---- the room ----------------------------------------------------------------- */

static uint64_t memneed_limit(int resource)
{
    struct rlimit rl;
    if (getrlimit(resource, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT64_MAX;
    return (uint64_t)rl.rlim_cur;
}

/* "Key:   123 kB" lines of a /proc file: the value of key in bytes, or
 * UINT64_MAX. */
static uint64_t memneed_proc_kb(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return UINT64_MAX;
    char line[256];
    size_t kl = strlen(key);
    uint64_t v = UINT64_MAX;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (strncmp(line, key, kl) == 0 && line[kl] == ':' && sscanf(line + kl + 1, "%llu", &kb) == 1) {
            v = (uint64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

void memneed_room(memroom *r)
{
    r->as_limit = memneed_limit(RLIMIT_AS);
    r->data_limit = memneed_limit(RLIMIT_DATA);
    r->as_used = memneed_proc_kb("/proc/self/status", "VmSize");
    r->data_used = memneed_proc_kb("/proc/self/status", "VmData");
    r->available = memneed_proc_kb("/proc/meminfo", "MemAvailable");
}

/* ---- the check ------------------------------------------------------------------ */

/* "about 1.2 GiB (model 1.1 GiB, data 8 MiB, OpenBLAS's buffer 128 MiB,
 * thread stacks 8 MiB)": the address space's parts with `mapped`, else
 * what must be resident; parts of 0 left out. */
static void memneed_describe(const memneed *n, bool mapped, char *buf, size_t len)
{
    const struct {
        const char *name;
        uint64_t bytes;
    } parts[] = {{"model", n->model}, {"data", n->data}, {"OpenBLAS's buffer", mapped ? n->blas : 0},
                 {"thread stacks", mapped ? n->stacks : 0}};
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        sum += parts[i].bytes;
    char b[32];
    cli_format_bytes(sum, b, sizeof b);
    size_t used = (size_t)snprintf(buf, len, "about %s", b);
    const char *sep = " (";
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && used < len; i++) {
        if (!parts[i].bytes)
            continue;
        cli_format_bytes(parts[i].bytes, b, sizeof b);
        used += (size_t)snprintf(buf + used, len - used, "%s%s %s", sep, parts[i].name, b);
        sep = ", ";
    }
    if (used < len && sep[0] == ',')
        snprintf(buf + used, len - used, ")");
}

/* Whether `need` more fits under `limit` with `used` taken; if not, the
 * reason into err. */
static bool memneed_fits(const memneed *n, uint64_t limit, uint64_t used, const char *what, char *err,
                         size_t errlen)
{
    uint64_t need = n->model + n->data + n->blas + n->stacks;
    if (limit == UINT64_MAX || used == UINT64_MAX || (used <= limit && need <= limit - used))
        return true;
    char desc[256], lim[32], left[32], in_use[32];
    memneed_describe(n, true, desc, sizeof desc);
    cli_format_bytes(limit, lim, sizeof lim);
    cli_format_bytes(used < limit ? limit - used : 0, left, sizeof left);
    cli_format_bytes(used, in_use, sizeof in_use);
    snprintf(err, errlen, "out of memory: this trainer needs %s more, and its %s of %s leaves %s (%s in use): "
             "raise the limit or choose a smaller model or data set", desc, what, lim, left, in_use);
    return false;
}

int memneed_check(const memneed *n, const memroom *r, char *err, size_t errlen)
{
    if (!memneed_fits(n, r->as_limit, r->as_used, "address-space limit (ulimit -v)", err, errlen) ||
        !memneed_fits(n, r->data_limit, r->data_used, "data-segment limit (ulimit -d)", err, errlen))
        return -1;
    /* Resident: the arrays are written whole; OpenBLAS's buffer only in
     * part (address space, above). */
    uint64_t resident = n->model + n->data;
    if (r->available != UINT64_MAX && resident > r->available) {
        char desc[256], avail[32];
        memneed_describe(n, false, desc, sizeof desc);
        cli_format_bytes(r->available, avail, sizeof avail);
        snprintf(err, errlen, "out of memory: this trainer needs %s in memory, and its host has %s available "
                 "(MemAvailable): choose a smaller model or data set, or a host with more memory", desc, avail);
        return -1;
    }
    return 0;
}

int memneed_reserve_blas(const memneed *n, char *err, size_t errlen)
{
    if (n->blas == 0)
        return 0;
    /* The mapping OpenBLAS will ask for (with its flags: private,
     * anonymous, writable, counted by RLIMIT_AS and RLIMIT_DATA alike),
     * tried here, where a refusal is an error and not a loop. A page more:
     * its own may be a little larger than the size it is built with. */
    size_t len = (size_t)n->blas + 4096;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        char blas[32];
        cli_format_bytes(n->blas, blas, sizeof blas);
        snprintf(err, errlen, "out of memory: OpenBLAS needs a buffer of %s and this process cannot map it (%s): "
                 "raise `ulimit -v` / `ulimit -d`, or free memory", blas, strerror(errno));
        return -1;
    }
    munmap(p, len);
    /* The product that maps it, at once (the room just seen is the
     * room it has). */
    float *a = calloc(3 * (size_t)MEMNEED_PROBE_N * MEMNEED_PROBE_N, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory: %zu KiB for the product that sets up OpenBLAS",
                 3 * (size_t)MEMNEED_PROBE_N * MEMNEED_PROBE_N * sizeof *a / 1024);
        return -1;
    }
    const int N = MEMNEED_PROBE_N;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a + N * N, N, 0.0f,
                a + 2 * N * N, N);
    free(a);
    return 0;
}
