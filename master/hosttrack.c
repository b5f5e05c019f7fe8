/* hosttrack.c — one process's CPU readings over a run and the verdicts on
 * a host's window (see hosttrack.h). */
#include "master/hosttrack.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- one process's readings ------------------------------------------------------ */

void hs_track_push(hs_track *t, const hostinfo_sample *s, bool timed)
{
    if (timed) {
        if (!t->has_first)
            t->first = *s;
        t->has_first = true;
        t->last = *s;
        t->has_last = true;
    } else if (!t->has_first) {
        /* Before the pass only: a reading after it must not widen it. */
        t->pre = *s;
        t->has_pre = true;
    }
    /* The live window: base..last spans HOSTSTATE_LIVE_S to twice that. */
    if (!t->has_live) {
        t->live_base = t->live_mid = *s;
        t->has_live = true;
    } else if (s->t - t->live_mid.t >= HOSTSTATE_LIVE_S) {
        t->live_base = t->live_mid;
        t->live_mid = *s;
    }
    t->live_last = *s;
}

void hs_track_timed_start(hs_track *t)
{
    /* The reading before an earlier pass is no start for this one. */
    if (t->has_first)
        t->has_pre = false;
    t->has_first = t->has_last = false;
}

bool hs_track_timed(const hs_track *t, hostinfo_sample *a, hostinfo_sample *b)
{
    if (!t->has_last)
        return false;
    *b = t->last;
    if (t->has_first && t->last.t > t->first.t)
        *a = t->first;
    else if (t->has_pre && t->last.t > t->pre.t)
        *a = t->pre; /* one reading inside a short pass: from the one before it */
    else
        return false;
    return true;
}

bool hs_track_live(const hs_track *t, hostinfo_sample *a, hostinfo_sample *b)
{
    if (!t->has_live || t->live_last.t <= t->live_base.t)
        return false;
    *a = t->live_base;
    *b = t->live_last;
    return true;
}

/* ---- the arithmetic --------------------------------------------------------------- */

int hoststate_verdict(double steal, double busy, double job, double other, int64_t cpus, char *why, size_t len)
{
    (void)busy;
    why[0] = '\0';
    bool stolen = isfinite(steal) && steal > HOSTSTATE_STEAL_BUSY;
    bool others = isfinite(other) && other > HOSTSTATE_OTHERS_BUSY;
    if (others) {
        size_t n = strlen(why);
        snprintf(why + n, len - n, "other processes used %.0f %% of its %lld CPUs (the job's own %s%.0f %%, all "
                 "non-idle %.0f %%; more than %.0f %% is busy)", 100 * other, (long long)cpus, "",
                 isfinite(job) ? 100 * job : 0, isfinite(busy) ? 100 * busy : 0, 100 * HOSTSTATE_OTHERS_BUSY);
    }
    if (stolen) {
        size_t n = strlen(why);
        snprintf(why + n, len - n, "%sCPU steal was %.0f %% (more than %.0f %% is busy)", n ? "; " : "", 100 * steal,
                 100 * HOSTSTATE_STEAL_BUSY);
    }
    if (stolen || others)
        return 1;
    return isfinite(steal) && isfinite(other) ? 0 : -1;
}

bool hoststate_oversubscribed(uint32_t trainers, uint32_t servers, int64_t cores)
{
    return cores > 0 && (int64_t)trainers + (int64_t)servers > cores;
}

