/* master_link.h — a server's control connection to psbench-master.
 *
 * Before the reactor starts, master_link_join registers (this host, its
 * memory, the data-plane port), takes the master's first answer within
 * --connect-timeout (a peer that is no psbench master is named, see
 * shared/peer.h) and waits for the assignment: rank, trainers per bucket,
 * kind. Then master_link_attach puts the connection on the reactor: metrics
 * (and heartbeats) twice a second — with the progress of the kind's fill
 * while it fills its table — `ready` once the kind is ready, `reset`
 * between the warm-up and the timed pass (answered `reset_done` once the
 * fresh table is filled), `stop` at the end. With the master's --runs, a
 * `reset` with "new_run" between runs instead of `stop`: the server answers
 * it once the run's trainers have all left (the reactor calls
 * s->trainers_left). A trainer refused for want of descriptors is reported
 * as `failed` (the master fails the run naming this server).
 */
#ifndef PSBENCH_MASTER_LINK_H
#define PSBENCH_MASTER_LINK_H

#include <stdint.h>

#include "server/server.h"
#include "shared/control.h"

/* The register's "device" is cfg->device's name, the test devices named as
 * what they stand for ("test": cpu, "fake-cuda": cuda).
 * `environment` (borrowed; may be NULL): what this server computes with
 * (shared/hostinfo.h, and its fold), sent in the register. `fail_reason`
 * (NULL: none): this server's setup has failed already (no GPU answers,
 * its port is taken): it registers only to report that as `failed`, and
 * returns -1 with the master's verdict in err (master_link_report_failure). */
/* reach_s: how long to keep trying while the master does not listen
 * (--connect-timeout, or less under --follow); connect_timeout_s: the
 * longest wait for its first answer; with bounded (--follow), the connect
 * and that wait together take no longer than reach_s. On -1, *retry says
 * whether another try could get a job: no master answered (none could be
 * reached, or the peer closed, stayed silent or answered in another
 * protocol), or it refused with "retry" (the job has no place for this
 * server now); not for a refusal for good (a wrong token). */
int master_link_join(ctl_conn *c, const char *master, server_config *cfg, const char *advertise, int64_t want_rank,
                     json_t *environment, double reach_s, bool bounded, double connect_timeout_s,
                     const char *fail_reason, bool *retry, char *err, size_t errlen);
/* The server cannot serve (its setup failed after it joined: no memory
 * for its table, its device): tell the master (`failed` with the reason,
 * so that its verdict names this server and the reason, not "server 0
 * disconnected"), and wait up to 3 s for that verdict, which becomes err
 * ("the run failed: server 0 (HOST) failed: ..."); without one, err is
 * the reason itself. */
void master_link_report_failure(ctl_conn *c, const char *reason, char *err, size_t errlen);
/* Hand the joined connection to the reactor (s takes it over). */
int master_link_attach(server *s, ctl_conn *c, char *err, size_t errlen);
void master_link_free(server *s);

#endif
