/* placement.h — who a node is and where it works: a register taken or
 * refused (the token, the run's state, the rank asked for), the seed's
 * placement (which server a trainer's buckets go to), the embedding
 * tables' fit in their hosts' memory, the NCCL trainers' GPUs, and the
 * assignments that tell each node its part.
 *
 * It fails no run itself: where the run cannot go on it returns the
 * verdict, and the caller (run.c's handler) gives it.
 */
#ifndef PSBENCH_MASTER_PLACEMENT_H
#define PSBENCH_MASTER_PLACEMENT_H

#include "master/master.h"
#include "shared/control.h"

/* A register (from a node in NS_CONNECTED, or a second one): the node is
 * registered and answered, or refused and told why (0 either way). -1 when
 * the run must fail, with the verdict in `verdict`: a second register, two
 * NCCL trainers on one GPU, embedding tables too big for a host. The
 * servers are assigned once all have registered, the trainers once every
 * server is ready (placement_assign_trainers). */
int placement_register(master *m, node *n, ctl_msg *msg, char *verdict, size_t len);
/* Trainers learn their servers' addresses once every server is ready: each
 * registered trainer is assigned (RUN_WAITING only). */
void placement_assign_trainers(master *m);
/* Whether server s gets trainer t's buckets (seed placement: t's group's
 * server; shard: every server). */
bool placement_feeds(const master *m, uint32_t s, uint32_t t);

#endif
