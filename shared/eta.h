/* eta.h — the time left of work that goes at a steady pace: the master's
 * progress line ("time left ~12 s") and the sweep's ("point 3 of 8: ...,
 * time left ~4 min 10 s"). An estimate from the pace so far, never a
 * promise: it is said as "~", and not at all before any work is done. */
#ifndef PSBENCH_ETA_H
#define PSBENCH_ETA_H

#include <stddef.h>

/* The seconds that `left` more units take when `done` units took
 * `elapsed` seconds; -1 when there is no pace yet (nothing done, no time
 * gone) to estimate from. */
double eta_left_s(double elapsed, double done, double left);

/* ", time left ~N s" into buf for eta_left_s's result s: one decimal
 * below 10 s, whole seconds below 120 s, then "~M min S s"; "" for s < 0
 * (no estimate yet). */
void eta_format(double s, char *buf, size_t len);

#endif
