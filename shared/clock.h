/* clock.h — the one clock every psbench role reads for durations and
 * deadlines: CLOCK_MONOTONIC in nanoseconds (never steps with the wall
 * clock, so a measured interval is never negative). */
#ifndef PSBENCH_CLOCK_H
#define PSBENCH_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Milliseconds and seconds on the same clock, for poll() timeouts and
 * human-scale deadlines. */
static inline int64_t clock_now_ms(void) { return (int64_t)(clock_now_ns() / 1000000u); }
static inline double clock_now_s(void) { return (double)clock_now_ns() / 1e9; }

#endif
