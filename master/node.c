/* node.c — a node as the rest of the master sees it: its one state
 * setter (the change checked against states.c's table) and its name in
 * logs and verdicts (master.h). */
#include "master/master.h"
#include "shared/log.h"

#include <assert.h>
#include <stdio.h>

void node_describe(const node *n, char *buf, size_t len)
{
    if (n->registered)
        snprintf(buf, len, "%s %u (%s)", agg_role_name(n->role), n->rank, n->host);
    else
        snprintf(buf, len, "an unregistered node (%s)", n->peer_ip);
}

void node_set_state(node *n, node_state to)
{
    node_state from = n->state;
    assert(node_state_allowed(from, to));
    /* Only a register takes a node out of CONNECTED, and a registered
     * node holds its rank. */
    assert((to == NS_REGISTERED) == (from == NS_CONNECTED));
    assert(n->registered);
    if (log_get_level() >= LOG_DEBUG) {
        char who[300];
        node_describe(n, who, sizeof who);
        log_debug("%s: %s -> %s", who, node_state_name(from), node_state_name(to));
    }
    n->state = to;
}
