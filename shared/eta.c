/* eta.c — the time left at the pace so far (eta.h). */
#include "shared/eta.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>

double eta_left_s(double elapsed, double done, double left)
{
    assert(left >= 0);
    if (!(done > 0) || !(elapsed > 0) || !isfinite(elapsed))
        return -1;
    return elapsed / done * left;
}

void eta_format(double s, char *buf, size_t len)
{
    assert(len > 0);
    if (s < 0 || !isfinite(s))
        buf[0] = '\0';
    else if (s < 9.95) /* "~10.0 s" would read as more precise than "~10 s" */
        snprintf(buf, len, ", time left ~%.1f s", s);
    else if (s < 119.5)
        snprintf(buf, len, ", time left ~%.0f s", s);
    else {
        double whole = floor(s + 0.5);
        snprintf(buf, len, ", time left ~%.0f min %.0f s", floor(whole / 60), fmod(whole, 60));
    }
}
