/* blame.c — naming the silent node (blame.h).
 *
 * A server before any trainer among those that stopped together: a
 * server's loop waits on no one and reports twice a second whatever its
 * trainers do, while a trainer reports between batches — so every trainer
 * waiting on a stopped server falls silent with it, and one whose last
 * report came just before the server's looks silent longer.
 */
#include "master/blame.h"
#include "master/placement.h"

#include <assert.h>
#include <stdio.h>

double blame_since(const master *m, double t)
{
    double s = m->t_init_progress > t ? m->t_init_progress : t;
    return m->t_resumed > s ? m->t_resumed : s;
}

double blame_silence(const master *m, const node *n, double now)
{
    return now - (m->t_resumed > n->last_seen ? m->t_resumed : n->last_seen);
}

/* Whether n can be silent: registered, connected, not waiting for the
 * verdict on the failure it reported. */
static bool blame_candidate(const node *n)
{
    return n->registered && n->bev && n->state != NS_FAILED;
}

node *blame_silent(const master *m, double now, double min_s)
{
    double longest = 0;
    for (node *n = m->nodes; n; n = n->next)
        if (blame_candidate(n) && blame_silence(m, n, now) > longest)
            longest = blame_silence(m, n, now);
    double floor = longest - BLAME_SILENT_S > min_s ? longest - BLAME_SILENT_S : min_s;
    node *worst = NULL;
    for (node *n = m->nodes; n; n = n->next) {
        if (!blame_candidate(n) || blame_silence(m, n, now) < floor)
            continue;
        if (!worst || (n->role == AGG_SERVER && worst->role != AGG_SERVER) ||
            (n->role == worst->role && n->last_seen < worst->last_seen))
            worst = n;
    }
    assert(!worst || (worst->registered && worst->rank < (worst->role == AGG_TRAINER ? m->set.ntrainer
                                                                                   : m->set.nserver)));
    return worst;
}

void blame_waiting_on(const master *m, const node *s, double now, double min_s, char *buf, size_t len)
{
    buf[0] = '\0';
    if (s->role != AGG_SERVER)
        return;
    char ranks[200] = "";
    size_t k = 0, count = 0;
    for (uint32_t t = 0; t < m->set.ntrainer; t++) {
        const node *n = m->trainers[t];
        if (!n || !n->bev || blame_silence(m, n, now) < min_s || !placement_feeds(m, s->rank, t))
            continue;
        if (k + 16 < sizeof ranks)
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%u", count ? ", " : "", t);
        else if (k + 4 < sizeof ranks)
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, " ...");
        count++;
    }
    if (count)
        snprintf(buf, len, "; trainer%s %s, which wait%s on it, went silent too", count == 1 ? "" : "s", ranks,
                 count == 1 ? "s" : "");
}

node *blame_late(const master *m, double now, double limit)
{
    node *late = NULL;
    for (node *n = m->nodes; n; n = n->next)
        if (blame_candidate(n) && blame_silence(m, n, now) > limit && (!late || n->last_seen < late->last_seen))
            late = n;
    return late;
}

const char *blame_doing(const node *n)
{
    switch (n->state) {
    case NS_REGISTERED: return " (it had registered and was waiting for its assignment)";
    case NS_ASSIGNED: return " (it was setting up after its assignment)";
    case NS_READY: return " (it was ready, waiting for the pass to start)";
    case NS_RESETTING: return " (it was resetting)";
    default: return "";
    }
}
