/* clock.h — the one clock every psbench role reads for durations and
 * deadlines: CLOCK_MONOTONIC in nanoseconds (never steps with the wall
 * clock, so a measured interval is never negative). */
#ifndef PSBENCH_CLOCK_H
#define PSBENCH_CLOCK_H

#include <pthread.h>
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

/* The interval from from_ns to to_ns (clock_now_ns readings) in
 * milliseconds: the unit of every metric. */
static inline double clock_ms(uint64_t from_ns, uint64_t to_ns) { return (double)(to_ns - from_ns) / 1e6; }

/* Timed waits on a condition variable, on the same clock: make the
 * variable with clock_cond_init, wait with pthread_cond_timedwait until
 * clock_deadline(seconds from now). */
static inline int clock_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a) != 0)
        return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cv, &a) == 0 ? 0 : -1;
    pthread_condattr_destroy(&a);
    return rc;
}

static inline struct timespec clock_deadline(double seconds)
{
    uint64_t ns = clock_now_ns() + (uint64_t)(seconds * 1e9);
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    return ts;
}

#endif
