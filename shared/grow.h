/* grow.h — scratch buffers reused call after call (a hook's narrow bucket,
 * the PowerSGD state's factors): one rule for growing them, so that every
 * such buffer is either big enough or untouched. */
#ifndef PSBENCH_SHARED_GROW_H
#define PSBENCH_SHARED_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Make *p hold need elements of elem bytes, *cap counting them (never NULL
 * after success, even for 0). 0, or -1 with *p and *cap as they were. */
static inline int grow_to(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap && *p)
        return 0;
    void *q = realloc(*p, (size_t)(need ? need : 1) * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = need;
    return 0;
}

#endif
