/* launcher.h — `psbench-master --local`: the servers and trainers as child
 * processes of the master on this host.
 *
 * Each child's stdout and stderr come back through pipes and are printed
 * line by line behind "[server 0] " / "[trainer 1] ". Children die with the
 * master (PR_SET_PDEATHSIG) and are reaped on every exit path; one that
 * exits before the run is over fails the run. With --runs the servers are
 * started once and the trainers again for every run.
 */
#ifndef PSBENCH_LAUNCHER_H
#define PSBENCH_LAUNCHER_H

#include "shared/shm.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
typedef struct launcher launcher;

/* What to start and whom to tell when a child ends badly. The launcher
 * knows no run: child_failed (called from the event loop) decides whether
 * a child's end fails the run. */
typedef struct launcher_job {
    struct event_base *base;
    uint32_t nserver, ntrainer; /* servers then trainers */
    /* The last ones of each get --device cuda; the others no --device:
     * the CPU, or a server's $PSBENCH_SERVER_DEVICE. */
    uint32_t ncudaserver, ncudatrainer;
    psb_transport transport; /* given to every child as --transport */
    /* Relay the children's stdout (their ready line, their own summary
     * and tables as they exit): false under --tables none, so that the
     * master's headline is all the run prints of its figures. */
    bool child_stdout;
    void (*child_failed)(void *ctx, const char *why);
    void *ctx;
} launcher_job;

/* Spawn nserver servers then ntrainer trainers, each given `--master
 * CTL_HOST:ctl_port --rank R` (CUDA slots also `--device cuda`, servers
 * also `--listen CTL_HOST:0`), CTL_HOST being the master's listen address, or the
 * loopback for a wildcard one. bin_dir holds the psbench-server and psbench-trainer
 * binaries; a job token reaches them through PSBENCH_TOKEN in the
 * environment. NULL with err set. */
launcher *launcher_start(const launcher_job *job, const char *bin_dir, const char *ctl_host, uint16_t ctl_port,
                         char *err, size_t errlen);
bool launcher_all_exited(const launcher *l);
/* --runs: every trainer of the last run has exited (and its output is in). */
bool launcher_trainers_exited(const launcher *l);
/* --runs: start the trainers again for the next run (the servers stay).
 * Call once launcher_trainers_exited. 0, or -1 with err. */
int launcher_restart_trainers(launcher *l, char *err, size_t errlen);
/* SIGTERM every live child; SIGKILL those still alive on the next call. */
void launcher_kill_all(launcher *l);
/* Kill what is left, reap, free. */
void launcher_free(launcher *l);

#endif
