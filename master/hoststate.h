/* hoststate.h — the state of every host that took part in a run (issue 38:
 * the host's state is part of the result). A busy host measures the other
 * processes, an oversubscribed one the scheduler, and the figures should
 * say so wherever they are read.
 *
 * Each node adds a `host` object (shared/hostinfo.h's reading: its host's
 * CPU ticks, runnable tasks, load, and its own process CPU seconds) to every
 * report; the master keeps, per node, the last reading before the timed
 * pass, the first and the last inside it, and a live window of the last
 * 5 to 10 s; its own readings it takes as the pass starts and ends and on
 * its tick. Per host, over the timed pass:
 *   - the host's shares (steal, non-idle) come from one window of one
 *     process on it: the master's own where it is there (its readings are
 *     taken exactly as the pass starts and ends), else the node's widest;
 *   - the job's share is the sum over the job's processes on the host of
 *     each one's own CPU rate over its own window (each window is within
 *     a report's period, half a second, of the pass), plus the master's;
 *   - the others' share is the non-idle share less the job's.
 * Shares are rates, so windows that differ by a report's period add up.
 *
 * Busy: steal above HOSTSTATE_STEAL_BUSY, or others above
 * HOSTSTATE_OTHERS_BUSY of the host's capacity. Oversubscribed: more of the
 * job's busy processes (trainers, servers) on a host than it has cores.
 */
#ifndef PSBENCH_MASTER_HOSTSTATE_H
#define PSBENCH_MASTER_HOSTSTATE_H

#include "shared/hostinfo.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct master;
struct node;

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

/* A node's report body (validated): its `host`, if any, into its track. */
void hoststate_report(struct master *m, struct node *n, const json_t *body);
/* The timed pass starts or ends (the master's reading then). */
void hoststate_mark(struct master *m, bool start);
/* The tick: the master's live reading. */
void hoststate_tick(struct master *m);
/* The next run (--runs): its passes are measured afresh. */
void hoststate_next_run(struct master *m);
/* results.json's "host_state" (docs/results.md), a new object. */
json_t *hoststate_json(const struct master *m);
/* /api/v1/status's "host_state": null before any node registered, else
 * {"busy", "oversubscribed", "warnings"}; the live view while the run is
 * live, the verdict once the timed pass ended. A new value. */
json_t *hoststate_status(const struct master *m);
/* --quiet-host: wait up to `seconds` for this host to be quiet (over 1-s
 * readings), saying once what it waits for; when it never is, the run is
 * marked busy (hs.quiet_failed, its warning). */
void hoststate_quiet_wait(struct master *m, double seconds);

#endif
