/* mean.h — the protocol's arithmetic rule for a mean: a server scales the
 * sum of N pushes by the float32 reciprocal 1/N (not a division per
 * element), and every psbench component uses the same factor, so that a
 * trainer can predict a result bit for bit (docs/protocol.md). */
#ifndef PSBENCH_MEAN_H
#define PSBENCH_MEAN_H

#include <stdint.h>

static inline float mean_scale(uint32_t n) { return 1.0f / (float)n; }

#endif
