/* admit.h — who the master's control port takes in.
 *
 * The control listener, and the bounds that keep a flood of connections
 * (no token needed to open one) from growing the master or spinning it:
 *
 *  - Descriptors. The soft limit is raised to the hard one at start. A
 *    connection is taken only while ADMIT_FD_RESERVE descriptors stay free
 *    for the HTTP API (a health check must still get in), the --local
 *    children's pipes and the results files; past that, and whenever
 *    accept() itself runs out (EMFILE, ENFILE), the waiting connection is
 *    accepted on a descriptor kept spare, told why (`stop`, status
 *    `refused`: "the master is out of file descriptors (limit N): raise
 *    `ulimit -n`"), and closed — the node ends with that line instead of
 *    waiting in the backlog. Where even that fails, accepting pauses for a
 *    second (a readable listener would spin the loop otherwise).
 *  - Connections that have not registered. At most ADMIT_MAX_PENDING at a
 *    time: at the bound the listener pauses (new ones wait in the backlog,
 *    as a burst of nodes starting together does for a moment) until one
 *    registers or goes (run.c bounds each by its register timeout and the
 *    size of its first message).
 *  - Logs: a refusal's warning at most once a second, with the count.
 *
 * One thread: the reactor's.
 */
#ifndef PSBENCH_MASTER_ADMIT_H
#define PSBENCH_MASTER_ADMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct event_base;

/* Connections that have not registered, at most (admit_set_pending). */
#define ADMIT_MAX_PENDING 64u

typedef struct admit admit;

/* A connection taken: fd (non-blocking) and its peer address. */
typedef void (*admit_conn_fn)(void *ctx, int fd, const struct sockaddr *sa, int salen);

/* Take over the listening socket fd (closed by admit_free, or here on
 * failure). NULL with err. */
admit *admit_new(struct event_base *base, int fd, admit_conn_fn on_conn, void *ctx, char *err, size_t errlen);
void admit_free(admit *a);
/* The connections that have not registered now: at ADMIT_MAX_PENDING the
 * listener pauses, below it accepts again. */
void admit_set_pending(admit *a, unsigned pending);
/* Connections refused so far for want of descriptors; why (the last
 * reason) into buf when there were any. */
uint64_t admit_refused(const admit *a, char *buf, size_t len);

#endif
