/* xport.c — the registry of a trainer connection's transports (xport.h):
 * the one list of them, by kind. */
#include "trainer/xport.h"

#include <assert.h>

static const xport_ops *const xport_registry[XPORT_KINDS] = {
    [XPORT_TCP] = &xport_tcp_ops,
    [XPORT_SHM] = &xport_shm_ops,
    [XPORT_IPC] = &xport_ipc_ops,
};

const xport_ops *xport_get(xport_kind k)
{
    assert(k < XPORT_KINDS && xport_registry[k]->kind == k);
    return xport_registry[k];
}
