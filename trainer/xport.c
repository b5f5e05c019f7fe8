/* xport.c — the registry of a trainer connection's transports (xport.h):
 * the one list of them, in the order a connection moves through them; and
 * what the links that hand nothing over share (xport_refuse_in_place). */
#include "trainer/client_impl.h"
#include "trainer/xport.h"

#include <assert.h>
#include <string.h>

#ifdef PSBENCH_TEST_XPORTS
extern const xport_ops xport_loop_ops;
#endif

const xport_ops *const xport_registry[] = {
    [XPORT_TCP] = &xport_tcp_ops,
    [XPORT_SHM] = &xport_shm_ops,
    [XPORT_IPC] = &xport_ipc_ops,
#ifdef PSBENCH_TEST_XPORTS
    &xport_loop_ops, /* xport_loop.c: test builds only */
#endif
};
const size_t xport_count = sizeof xport_registry / sizeof xport_registry[0];

int xport_refuse_in_place(client *cl, client_conn *c, const frame_hdr *h, char *err, size_t errlen)
{
    if (h->has & FH_DEV) {
        uint64_t want;
        int r = client_check_dev(cl, c, h, &want, err, errlen);
        assert(r < 0); /* nothing exported on such a link */
        (void)r;
        return -1;
    }
    return xport_shm_read_at(cl, c, h, err, errlen);
}

const xport_ops *xport_get(xport_kind k)
{
    assert((size_t)k < xport_count);
    return xport_registry[k];
}

size_t xport_order(const xport_ops *x)
{
    for (size_t i = 0; i < xport_count; i++)
        if (xport_registry[i] == x)
            return i;
    assert(!"a transport not in the registry");
    return xport_count;
}

const xport_ops *xport_named(const char *p, size_t n)
{
    for (size_t i = 0; i < xport_count; i++)
        if (strlen(xport_registry[i]->link) == n && memcmp(xport_registry[i]->link, p, n) == 0)
            return xport_registry[i];
    return NULL;
}
