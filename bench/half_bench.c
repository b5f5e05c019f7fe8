/* half_bench.c — what the fp32 <-> fp16 / bf16 conversions cost
 * (shared/half.h) against issue 43's target: a conversion moves its input
 * bytes at >= 0.8 of a memcpy of the same bytes on this CPU.
 *
 *   half-bench [--mib M] [--l2-kib K] [--reps R]
 *              (defaults: 64 MiB, 256 KiB, 7 repetitions)
 *
 * For two sizes of fp32 input, M MiB (far beyond the caches) and K KiB
 * (input and output inside a core's L2), on one thread: each conversion on
 * each path this CPU runs, and a memcpy of the conversion's input bytes
 * (4 a float when narrowing, 2 an element when widening or folding),
 * measured in the same run. Every buffer's pages are written first; each
 * case runs once as a warm-up, then R times, and the best (shortest) round
 * counts (the host is shared: the least-disturbed round is the cost).
 * Rates are input bytes per second; "vs copy" is that rate over the
 * memcpy's, printed beside the target. Exit 1 on an error, 2 on a usage
 * error.
 *
 * Where memory is the limit, the ratio follows the traffic: a memcpy of B
 * bytes reads B and writes B; a narrowing of B input bytes reads B and
 * writes B/2 (above 1 is possible); a widening reads B and writes 2B, a fold
 * reads 3B and writes 2B (near 0.6 whatever the code). "pair" is a
 * server's fold of two narrow pushes into their narrow mean
 * (half_pair_mean): two 16-bit inputs (B bytes in all) read, B/2 written. */
#include "shared/half.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HB_TARGET 0.8
#define HB_MAX_PATHS 8

typedef enum hb_conv {
    HB_TO_FP16,
    HB_FROM_FP16,
    HB_FOLD_FP16,
    HB_TO_BF16,
    HB_FROM_BF16,
    HB_FOLD_BF16,
    HB_TO_FP16_DIV,
    HB_PAIR_FP16,
    HB_PAIR_BF16,
    HB_NCONV
} hb_conv;

static const struct {
    const char *name;
    int narrowing; /* input fp32, or two 16-bit arrays (4 bytes an element), else one 16-bit */
} hb_convs[HB_NCONV] = {
    [HB_TO_FP16] = {"fp32->fp16", 1},        [HB_FROM_FP16] = {"fp16->fp32", 0}, [HB_FOLD_FP16] = {"acc+=fp16", 0},
    [HB_TO_BF16] = {"fp32->bf16", 1},        [HB_FROM_BF16] = {"bf16->fp32", 0}, [HB_FOLD_BF16] = {"acc+=bf16", 0},
    [HB_TO_FP16_DIV] = {"fp16 cast/div", 1}, [HB_PAIR_FP16] = {"pair fp16", 1}, [HB_PAIR_BF16] = {"pair bf16", 1},
};

typedef struct hb_bufs {
    size_t n;     /* elements */
    size_t inner; /* passes a round: a small buffer's round lasts ~ms, not us */
    float *f32, *f32b;
    uint16_t *h16, *h16b, *h16o; /* the pair folds: two inputs, one output */
    unsigned char *copy_dst;
} hb_bufs;

static volatile float hb_sink; /* every pass feeds it: nothing is dropped */

static double hb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void hb_run(hb_bufs *b, int conv)
{
    switch (conv) {
    case HB_TO_FP16:
        half_to_fp16(b->h16, b->f32, b->n);
        break;
    case HB_FROM_FP16:
        half_from_fp16(b->f32b, b->h16, b->n);
        break;
    case HB_FOLD_FP16:
        half_fold_fp16(b->f32b, b->h16, b->n);
        break;
    case HB_TO_BF16:
        half_to_bf16(b->h16, b->f32, b->n);
        break;
    case HB_FROM_BF16:
        half_from_bf16(b->f32b, b->h16, b->n);
        break;
    case HB_FOLD_BF16:
        half_fold_bf16(b->f32b, b->h16, b->n);
        break;
    case HB_TO_FP16_DIV:
        half_to_fp16_div(b->h16, b->f32, b->n, 4.0f);
        break;
    case HB_PAIR_FP16:
        half_pair_mean(HALF_FP16, b->h16o, b->h16, b->h16b, b->n, 0.5f);
        break;
    case HB_PAIR_BF16:
        half_pair_mean(HALF_BF16, b->h16o, b->h16, b->h16b, b->n, 0.5f);
        break;
    default:
        abort();
    }
    hb_sink = b->f32b[b->n / 2] + (float)b->h16[b->n / 3] + (float)b->h16o[b->n / 5];
}

/* The best of reps rounds after a warm-up: seconds a pass. conv < 0: the
 * memcpy of `bytes` input bytes. */
static double hb_best(hb_bufs *b, int conv, size_t bytes, long reps)
{
    double best = 1e30;
    for (long r = -1; r < reps; r++) {
        double t0 = hb_now();
        for (size_t k = 0; k < b->inner; k++)
            if (conv < 0) {
                memcpy(b->copy_dst, b->f32, bytes);
                hb_sink = (float)b->copy_dst[bytes / 2];
            } else
                hb_run(b, conv);
        double t = (hb_now() - t0) / (double)b->inner;
        if (r >= 0 && t < best)
            best = t;
    }
    return best;
}

static int hb_size(size_t bytes_f32, long reps, const char **paths, size_t npaths, const char *chosen)
{
    hb_bufs b = {.n = bytes_f32 / sizeof(float), .inner = bytes_f32 >= (16u << 20) ? 1 : (16u << 20) / bytes_f32};
    b.f32 = malloc(b.n * sizeof(float));
    b.f32b = malloc(b.n * sizeof(float));
    b.h16 = malloc(b.n * sizeof(uint16_t));
    b.h16b = malloc(b.n * sizeof(uint16_t));
    b.h16o = malloc(b.n * sizeof(uint16_t));
    b.copy_dst = malloc(b.n * sizeof(float));
    if (!b.f32 || !b.f32b || !b.h16 || !b.h16b || !b.h16o || !b.copy_dst) {
        fprintf(stderr, "half-bench: out of memory for %zu bytes\n", bytes_f32);
        return -1;
    }
    /* gradients' magnitudes, every page written */
    uint32_t x = 12345;
    for (size_t i = 0; i < b.n; i++) {
        x = x * 1664525u + 1013904223u;
        b.f32[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e-2f;
    }
    memset(b.f32b, 0, b.n * sizeof(float));
    memset(b.copy_dst, 0, b.n * sizeof(float));
    half_to_fp16(b.h16, b.f32, b.n);
    half_to_fp16(b.h16b, b.f32, b.n);
    memset(b.h16o, 0, b.n * sizeof(uint16_t));

    double copy4 = (double)(b.n * 4) / hb_best(&b, -1, b.n * 4, reps);
    double copy2 = (double)(b.n * 2) / hb_best(&b, -1, b.n * 2, reps);
    printf("\n%zu KiB of fp32 (%zu elements): memcpy %.2f GB/s (%zu KiB), %.2f GB/s (%zu KiB)\n", bytes_f32 / 1024, b.n,
           copy4 / 1e9, b.n * 4 / 1024, copy2 / 1e9, b.n * 2 / 1024);
    printf("  %-14s %-11s %9s %8s  target >= %.1f\n", "conversion", "path", "GB/s in", "vs copy", HB_TARGET);
    for (int c = 0; c < HB_NCONV; c++)
        for (size_t p = 0; p < npaths; p++) {
            if (half_set_path(paths[p]) != 0)
                return -1;
            size_t in = b.n * (hb_convs[c].narrowing ? 4 : 2);
            double rate = (double)in / hb_best(&b, c, in, reps);
            double ratio = rate / (hb_convs[c].narrowing ? copy4 : copy2);
            printf("  %-14s %-11s %9.2f %8.2f  %s%s\n", hb_convs[c].name, paths[p], rate / 1e9, ratio,
                   ratio >= HB_TARGET ? "meets" : "below", strcmp(paths[p], chosen) == 0 ? "  (default path)" : "");
        }
    half_set_path(chosen);
    free(b.f32);
    free(b.f32b);
    free(b.h16);
    free(b.h16b);
    free(b.h16o);
    free(b.copy_dst);
    return 0;
}

static int hb_parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "half-bench: %s: '%s' is not a whole number in %ld..%ld\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    long mib = 64, l2_kib = 256, reps = 7;
    static const struct option longs[] = {
        {"mib", required_argument, NULL, 'm'},
        {"l2-kib", required_argument, NULL, 'k'},
        {"reps", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (o == 'm' && hb_parse_long("--mib", optarg, 1, 16384, &mib) == 0)
            continue;
        if (o == 'k' && hb_parse_long("--l2-kib", optarg, 4, 1 << 20, &l2_kib) == 0)
            continue;
        if (o == 'r' && hb_parse_long("--reps", optarg, 1, 1000, &reps) == 0)
            continue;
        if (o == 'h') {
            printf("usage: half-bench [--mib M] [--l2-kib K] [--reps R]\n");
            return 0;
        }
        fprintf(stderr, "usage: half-bench [--mib M] [--l2-kib K] [--reps R]\n");
        return 2;
    }
    if (optind != argc) {
        fprintf(stderr, "half-bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    const char *paths[HB_MAX_PATHS];
    size_t npaths = half_paths(paths, HB_MAX_PATHS);
    if (npaths > HB_MAX_PATHS)
        npaths = HB_MAX_PATHS;
    const char *chosen = half_path();
    printf("half-bench: one thread, best of %ld rounds; rates are input bytes per second; default path %s\n", reps,
           chosen);
    if (hb_size((size_t)mib << 20, reps, paths, npaths, chosen) != 0 ||
        hb_size((size_t)l2_kib << 10, reps, paths, npaths, chosen) != 0)
        return 1;
    return 0;
}
