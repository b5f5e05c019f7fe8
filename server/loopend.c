/* loopend.c — one callback at the end of an event-loop iteration (see
 * loopend.h). */
#include "server/loopend.h"

#include <string.h>

static void loopend_on_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    loopend *p = arg;
    /* Cleared first: a want from inside the pass is never lost (it runs
     * the pass once more, this iteration). */
    p->armed = false;
    p->fn(p->arg);
}

int loopend_init(loopend *p, struct event_base *base, void (*fn)(void *arg), void *arg)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->arg = arg;
    p->ev = event_new(base, -1, 0, loopend_on_event, p);
    return p->ev ? 0 : -1;
}

void loopend_free(loopend *p)
{
    if (p->ev)
        event_free(p->ev); /* also takes it off the active queue */
    p->ev = NULL;
    p->armed = false;
}
