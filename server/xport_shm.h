/* xport_shm.h — the shared-memory transport's state on a trainer
 * connection (docs/protocol.md, "Shared memory on one host"); its ops are
 * xport_shm (xport.h). Held by the connection (conn.h), changed only by
 * xport_shm.c. */
#ifndef PSBENCH_XPORT_SHM_H
#define PSBENCH_XPORT_SHM_H

#include <stdbool.h>

#include "shared/shm.h"

/* Over the server's Unix socket: the trainer's segment, mapped read-only
 * once its hello handed it over (pushes name their payload in it by
 * offset; SHM_SEG_NONE: none), and whether results may be read in place
 * (the hello's zerocopy promise, and a server segment to lend them in). */
typedef struct xport_shm_state {
    shm_seg seg;
    bool in_place;
} xport_shm_state;

#endif
