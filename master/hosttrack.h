/* hosttrack.h — the host's state's arithmetic and records (issue 38):
 * one process's CPU readings over a run (a node's, or the master's own),
 * the busy and oversubscribed verdicts, and the master's part of the
 * state. A layer under master.h, which holds these records in its node and
 * master structs; what reads the master to fill and publish them is
 * hoststate.h, above it. */
#ifndef PSBENCH_MASTER_HOSTTRACK_H
#define PSBENCH_MASTER_HOSTTRACK_H

#include "shared/hostinfo.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HOSTSTATE_STEAL_BUSY 0.05  /* steal share above which a host was busy */
#define HOSTSTATE_OTHERS_BUSY 0.10 /* other processes' share of the CPUs above which it was */
#define HOSTSTATE_LIVE_S 5.0       /* the live window spans 5 to 10 s of readings */

/* One process's readings (a node's, or the master's own). */
typedef struct hs_track {
    hostinfo_sample pre, first, last; /* the last before the timed pass, the first and last in it */
    bool has_pre, has_first, has_last;
    hostinfo_sample live_base, live_mid, live_last; /* live: base..last spans 5..10 s */
    bool has_live;
} hs_track;

/* A reading into t: inside the timed pass (`timed`) or not. */
void hs_track_push(hs_track *t, const hostinfo_sample *s, bool timed);
/* The timed pass starts: its readings are forgotten (a run's, with --runs). */
void hs_track_timed_start(hs_track *t);
/* The timed pass's window: first..last, or pre..last when only one
 * reading fell inside a short pass. false: none. */
bool hs_track_timed(const hs_track *t, hostinfo_sample *a, hostinfo_sample *b);
/* The live window. false: fewer than two readings. */
bool hs_track_live(const hs_track *t, hostinfo_sample *a, hostinfo_sample *b);

/* The verdict on one host's window, shares of its CPUs (NAN: not known):
 * 1 busy, 0 not, -1 not known; why: "other processes used 43 % of its 2
 * CPUs (the job's 30 %, all non-idle 73 %); CPU steal was 12 %" (what
 * exceeded what), "" when not busy. */
int hoststate_verdict(double steal, double busy, double job, double other, int64_t cpus, char *why,
                      size_t len);
/* More busy processes than cores (cores <= 0: not known, false). */
bool hoststate_oversubscribed(uint32_t trainers, uint32_t servers, int64_t cores);

/* The master's part (master.h's `hs`). */
typedef struct hoststate {
    hs_track own;          /* the master's own readings */
    bool timed_done;       /* the timed pass ended (its window is closed) */
    char host[256];        /* this host's name (gethostname) */
    bool quiet_failed;     /* --quiet-host: the host never became quiet */
    char quiet_why[512];   /* its warning */
} hoststate;

#endif
