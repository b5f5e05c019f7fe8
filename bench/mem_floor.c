/* mem_floor.c — what one core's memory can do: the limits beside which
 * bench/server_throughput.sh puts a shared-memory server's rounds/s.
 *
 *   mem-floor [--mib M] [--reps R]     (defaults: 64 MiB, 5 repetitions)
 *
 * On one thread, with buffers of M MiB whose pages were all written first:
 *   copy: memcpy of one buffer into another;
 *   add:  a[i] += b[i] over two float arrays (the dense fold a parameter
 *         server does per pushed float; compiled for AVX2 where the CPU has
 *         it, as server/reduce.c's fold is, otherwise the baseline ISA).
 * Each is run once as a warm-up, then R times; the best (shortest) time
 * counts. One line on stdout:
 *
 *   mem-floor copy_bytes_per_s=X add_bytes_per_s=Y
 *
 * (copy: bytes copied per second; add: source bytes, M MiB, folded per
 * second), plus, on stderr, the buffer size and the ISA the add used. On any
 * error: a one-line reason on stderr, exit 1 (2 for a usage error).
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PSBENCH_VERSION
#define PSBENCH_VERSION "dev"
#endif

#define MF_MAX_MIB 16384L
#define MF_MAX_REPS 1000L

static double mf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define MF_ADD(sfx, attr)                                                              \
    attr static void mf_add_##sfx(float *restrict a, const float *restrict b, size_t n) \
    {                                                                                  \
        for (size_t i = 0; i < n; i++)                                                 \
            a[i] += b[i];                                                              \
    }
MF_ADD(base, )
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define MF_HAVE_AVX2 1
MF_ADD(avx2, __attribute__((target("avx2"))))
#endif

/* What the optimiser must not drop: every timed pass feeds it. */
static volatile float mf_sink;

static int mf_parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "mem-floor: %s: '%s' is not a whole number in %ld..%ld\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void mf_usage(FILE *to)
{
    fprintf(to, "usage: mem-floor [--mib M] [--reps R]\n"
                "  one core's memcpy rate and float-add (a[i] += b[i]) rate over buffers of\n"
                "  M MiB (default 64), best of R timed passes (default 5) after a warm-up;\n"
                "  prints: mem-floor copy_bytes_per_s=X add_bytes_per_s=Y\n");
}

int main(int argc, char **argv)
{
    long mib = 64, reps = 5;
    static const struct option opts[] = {
        {"mib", required_argument, NULL, 'm'},
        {"reps", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (mf_parse_long("--mib", optarg, 1, MF_MAX_MIB, &mib) < 0)
                return 2;
            break;
        case 'r':
            if (mf_parse_long("--reps", optarg, 1, MF_MAX_REPS, &reps) < 0)
                return 2;
            break;
        case 'h':
            mf_usage(stdout);
            return 0;
        case 'V':
            printf("mem-floor %s\n", PSBENCH_VERSION);
            return 0;
        default:
            mf_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mem-floor: unexpected argument '%s'\n", argv[optind]);
        mf_usage(stderr);
        return 2;
    }

    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(float);
    float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
    if (!a || !b) {
        fprintf(stderr, "mem-floor: cannot allocate 2 x %ld MiB\n", mib);
        free(a);
        free(b);
        return 1;
    }
    /* Every page written before anything is timed (no first-touch faults);
     * small values so that repeated adds stay finite. */
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i & 1023) * 1e-6f;
        b[i] = (float)((i * 7) & 1023) * 1e-6f;
    }

    void (*add)(float *restrict, const float *restrict, size_t) = mf_add_base;
    const char *isa = "baseline";
#ifdef MF_HAVE_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        add = mf_add_avx2;
        isa = "avx2";
    }
#endif

    double best_copy = 0, best_add = 0;
    for (long r = 0; r <= reps; r++) { /* pass 0: the warm-up */
        double t0 = mf_now();
        memcpy(a, b, bytes);
        double t1 = mf_now();
        mf_sink = a[(size_t)r * 4099 % n];
        add(a, b, n);
        double t2 = mf_now();
        mf_sink = a[(size_t)r * 8191 % n];
        if (r == 0)
            continue;
        if (best_copy == 0 || t1 - t0 < best_copy)
            best_copy = t1 - t0;
        if (best_add == 0 || t2 - t1 < best_add)
            best_add = t2 - t1;
    }
    free(a);
    free(b);
    if (best_copy <= 0 || best_add <= 0) {
        fprintf(stderr, "mem-floor: the clock did not advance\n");
        return 1;
    }
    fprintf(stderr, "mem-floor: %ld MiB buffers, best of %ld passes, add: %s\n", mib, reps, isa);
    printf("mem-floor copy_bytes_per_s=%.0f add_bytes_per_s=%.0f\n", (double)bytes / best_copy,
           (double)bytes / best_add);
    return 0;
}
