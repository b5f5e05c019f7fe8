/* xport.c — the registry of the server's transports (xport.h): the one
 * list the connection asks, in the order each builds on the one before.
 */
#include "server/xport.h"

#include <string.h>

#ifdef PSBENCH_TEST_XPORTS
extern const xport_ops xport_loop;
#endif

const xport_ops *const xport_all[] = {
    &xport_tcp,
    &xport_shm,
    &xport_ipc,
#ifdef PSBENCH_TEST_XPORTS
    &xport_loop, /* xport_loop.c: test builds only */
#endif
};
const size_t xport_count = sizeof xport_all / sizeof xport_all[0];

const xport_ops *xport_of_push(const frame_hdr *h)
{
    for (size_t i = xport_count; i-- > 0;)
        if (xport_all[i]->field & h->has)
            return xport_all[i];
    return &xport_tcp;
}

void xport_answer_init(xport_answer *a, const frame_hdr *h, psbuf *payload)
{
    a->h = h;
    a->payload = payload;
    memset(a->len, 0, sizeof a->len);
    memset(a->absent, 0, sizeof a->absent);
}
