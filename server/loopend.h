/* loopend.h — one callback at the end of an event-loop iteration (Redis's
 * beforeSleep, on libevent).
 *
 * Whoever has work that should happen once per iteration — the reactor's
 * write of every connection with output, and the freeing of connections
 * closed meanwhile — asks for the pass with loopend_want; asking again
 * before it runs costs a flag test. The pass runs after every callback the
 * loop's last poll (and its expired timers) made active, and before the
 * loop polls again: so the output of everything one round of input
 * produced leaves in one write per connection.
 *
 * How: the pass is a plain event (never added, only activated) at the
 * base's one priority. libevent runs the active events of a priority in
 * the order they became active, and everything the poll reported is
 * already active when the first callback runs: an event activated from a
 * callback therefore runs after all of them, within the same iteration.
 * (A lower priority would not do: libevent does not look at a lower
 * priority in an iteration where a higher one ran a callback, so the pass
 * would wait for an iteration with no I/O at all — never, under steady
 * input.) A want from inside the pass, or from a callback activated after
 * it ran, makes it run again in the same iteration.
 *
 * Single-threaded: want and the pass run on the loop's thread.
 */
#ifndef PSBENCH_LOOPEND_H
#define PSBENCH_LOOPEND_H

#include <assert.h>
#include <stdbool.h>

#include <event2/event.h>

typedef struct loopend {
    struct event *ev;
    bool armed; /* activated, not yet run */
    void (*fn)(void *arg);
    void *arg;
} loopend;

/* Set up the pass fn(arg) on base. Returns -1 when out of memory. */
int loopend_init(loopend *p, struct event_base *base, void (*fn)(void *arg), void *arg);
/* Safe on a zeroed or half-initialised p. */
void loopend_free(loopend *p);

/* Make sure the pass runs before the loop next polls. */
static inline void loopend_want(loopend *p)
{
    if (p->armed)
        return;
    assert(p->ev);
    p->armed = true;
    event_active(p->ev, EV_WRITE, 0);
}

#endif
