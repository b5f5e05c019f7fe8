/* trace_cost.c — what a trace point costs (issue 42: "off, it costs
 * nothing measurable"): ns per trace_add call with tracing not set up
 * (NULL ring), created off, on but outside the steps' window, and
 * recording, each against a plain clock_now_ns() call and an empty loop
 * measured in the same run. The best of several rounds is printed (the
 * host is shared: the least-disturbed round is the cost).
 *
 *   trace-cost [calls per round, default 10000000]
 */
#include "shared/clock.h"
#include "shared/trace.h"

#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 7

/* Read through a volatile each call, as a trace point reads its node's
 * ring pointer from memory: the compiler cannot hoist the gate's test. */
static trace_ring *volatile bench_ring;
static volatile uint64_t bench_sink;

typedef enum bench_case {
    BENCH_EMPTY,
    BENCH_CLOCK,
    BENCH_NULL,
    BENCH_OFF,
    BENCH_OUTSIDE,
    BENCH_REC,
    BENCH_REC_CLOCK,
    BENCH_NCASES
} bench_case;

static const char *const bench_names[BENCH_NCASES] = {
    [BENCH_EMPTY] = "empty loop (a volatile load)",
    [BENCH_CLOCK] = "clock_now_ns()",
    [BENCH_NULL] = "trace_add, not set up (NULL ring)",
    [BENCH_OFF] = "trace_add, node created off",
    [BENCH_OUTSIDE] = "trace_add, on, step outside the window",
    [BENCH_REC] = "trace_add, recording",
    [BENCH_REC_CLOCK] = "recorded span with its two clock reads",
};

/* ns per call of one case over calls calls. */
static double bench_run(bench_case c, uint64_t calls)
{
    uint64_t sink = 0;
    uint64_t t0 = clock_now_ns();
    switch (c) {
    case BENCH_EMPTY:
        for (uint64_t i = 0; i < calls; i++)
            sink += (uintptr_t)bench_ring;
        break;
    case BENCH_CLOCK:
        for (uint64_t i = 0; i < calls; i++)
            sink += clock_now_ns();
        break;
    case BENCH_NULL:
    case BENCH_OFF:
    case BENCH_OUTSIDE:
    case BENCH_REC:
        for (uint64_t i = 0; i < calls; i++)
            trace_add(bench_ring, TRACE_FOLD, 0, i, i + 1, trace_ids_make((int64_t)i, 3, 1, 0));
        break;
    case BENCH_REC_CLOCK:
        for (uint64_t i = 0; i < calls; i++) {
            uint64_t a = clock_now_ns();
            trace_add(bench_ring, TRACE_FOLD, 0, a, clock_now_ns(), trace_ids_make((int64_t)i, 3, 1, 0));
        }
        break;
    case BENCH_NCASES:
        break;
    }
    uint64_t t1 = clock_now_ns();
    bench_sink = sink;
    return (double)(t1 - t0) / (double)calls;
}

/* A node of one lane and one ring: on or off, its ring at step. */
static trace_node *bench_node(bool on, uint32_t capacity, uint64_t step, trace_ring **ring)
{
    trace_conf conf = {.role = TRACE_SERVER, .rank = 0, .on = on, .capacity = capacity, .window = {0, 100}};
    char err[256];
    trace_node *n = trace_node_new(&conf, err, sizeof err);
    if (!n || trace_lane(n, "reactor") != 0 || !(*ring = trace_ring_add(n, "reactor"))) {
        fprintf(stderr, "trace-cost: %s\n", n ? "no ring" : err);
        exit(1);
    }
    trace_ring_step(*ring, step);
    return n;
}

int main(int argc, char **argv)
{
    uint64_t calls = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    if (calls == 0 || calls > TRACE_CAPACITY_MAX * 64ull) {
        fprintf(stderr, "usage: trace-cost [calls per round, 1..%llu]\n", TRACE_CAPACITY_MAX * 64ull);
        return 2;
    }
    /* Recording rounds write at most a ring's capacity (past it a call
     * only counts a drop, another path), 1 Mi spans: 48 MiB of ring. */
    uint64_t rec_calls = calls < (1u << 20) ? calls : (1u << 20);
    double best[BENCH_NCASES];
    for (int c = 0; c < BENCH_NCASES; c++)
        best[c] = 1e30;
    for (int round = 0; round < ROUNDS; round++) {
        for (int c = 0; c < BENCH_NCASES; c++) {
            trace_ring *r = NULL;
            trace_node *n = NULL;
            uint64_t k = calls;
            if (c == BENCH_OFF)
                n = bench_node(false, 1, 5, &r);
            else if (c == BENCH_OUTSIDE)
                n = bench_node(true, 1, 500, &r);
            else if (c == BENCH_REC || c == BENCH_REC_CLOCK) {
                n = bench_node(true, (uint32_t)rec_calls, 5, &r);
                k = rec_calls;
            }
            bench_ring = r;
            double ns = bench_run((bench_case)c, k);
            if ((c == BENCH_REC || c == BENCH_REC_CLOCK) && (trace_ring_count(r) != k || trace_ring_dropped(r))) {
                fprintf(stderr, "trace-cost: the ring kept %u of %llu spans\n", trace_ring_count(r),
                        (unsigned long long)k);
                return 1;
            }
            best[c] = ns < best[c] ? ns : best[c];
            trace_node_free(n);
        }
    }
    printf("trace-cost: best of %d rounds of %llu calls (recording: %llu), ns per call\n", ROUNDS,
           (unsigned long long)calls, (unsigned long long)rec_calls);
    for (int c = 0; c < BENCH_NCASES; c++)
        printf("  %-42s %8.2f ns  (%5.2fx clock_now_ns)\n", bench_names[c], best[c], best[c] / best[BENCH_CLOCK]);
    return 0;
}
