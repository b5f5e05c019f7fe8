/* members.c — a server's trainer slots, and where the futures' outcomes go
 * (see members.h). */
#include "server/members.h"
#include "server/pending.h"
#include "shared/log.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int members_init(members *m, uint32_t cap, futures *fut, metrics *reg, const members_ops *ops)
{
    memset(m, 0, sizeof *m);
    m->cap = cap;
    m->fut = fut;
    m->metrics = reg;
    m->ops = *ops;
    m->slots = calloc(cap ? cap : 1, sizeof *m->slots);
    m->eps = calloc(cap ? cap : 1, sizeof *m->eps);
    return m->slots && m->eps ? 0 : -1;
}

void members_free(members *m)
{
    free(m->slots);
    free(m->eps);
    m->slots = NULL;
    m->eps = NULL;
    m->n = 0;
}

uint32_t members_join(members *m, void *ep, const char *peer, uint64_t rank, char *msg, size_t len)
{
    assert(ep);
    for (uint32_t i = 0; i < m->n; i++) {
        member *s = &m->slots[i];
        if (s->rank != rank)
            continue;
        if (s->ep) {
            snprintf(msg, len, "trainer rank %" PRIu64 " is already connected from %s", rank, s->peer);
            return MEMBERS_NO_SLOT;
        }
        s->ep = ep;
        s->peer = peer;
        s->lost = false;
        futures_member_back(m->fut, i);
        return i;
    }
    if (m->n == m->cap) {
        snprintf(msg, len, "this server expects %u trainers and all of them are taken", m->cap);
        return MEMBERS_NO_SLOT;
    }
    member *s = &m->slots[m->n];
    s->rank = rank;
    s->ep = ep;
    s->peer = peer;
    s->lost = false;
    /* Each trainer's lag behind the first push of every (batch, bucket):
     * the straggler metric per trainer, so a slow trainer (or link) is
     * named, not only seen. In rank order among the others, whatever
     * order the trainers join in (metrics_get). */
    char name[96];
    snprintf(name, sizeof name, "parameter_server_straggler_metric,trainer_lag_%" PRIu64, rank);
    futures_set_lag_metric(m->fut, m->n, metrics_get(m->metrics, name));
    return m->n++;
}

bool members_any_connected(const members *m)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->slots[i].ep)
            return true;
    return false;
}

void members_lost(members *m, uint32_t slot, void *ep)
{
    assert(slot < m->n && m->slots[slot].ep == ep);
    (void)ep;
    member *s = &m->slots[slot];
    s->ep = NULL;
    s->peer = NULL;
    s->lost = true;
    futures_member_lost(m->fut, slot, s->rank);
    if (members_any_connected(m))
        return;
    /* Every trainer has left and nothing is pending: the job is over, the
     * next trainers to connect start a new one at batch 0. What is left are
     * failed futures (tombstones) of the old job, and maybe device work for
     * futures nobody waits for: drain, forget. */
    futures_new_session(m->fut);
    m->n = 0;
    log_info("all trainers left: ready for a new job");
    if (m->ops.session_end)
        m->ops.session_end(m->ops.ctx);
}

/* The endpoints of the connected slots that pushed into f, into m->eps. */
static uint32_t members_pushers(members *m, const future *f)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->slots[i].ep && pending_has_slot(f, i))
            m->eps[n++] = m->slots[i].ep;
    return n;
}

void members_on_answer(void *ctx, future *f, psbuf *result)
{
    members *m = ctx;
    /* Queueing output never closes a connection (that waits for the
     * reactor's pass), so no loss, and no other outcome, can come back
     * here while eps is handed out. */
    assert(!m->delivering);
    uint32_t n = members_pushers(m, f);
    if (!n)
        return;
    m->delivering = true;
    m->ops.answer(m->ops.ctx, m->eps, n, f, result);
    m->delivering = false;
}

void members_on_fail(void *ctx, future *f, frame_errcode code, const char *msg)
{
    members *m = ctx;
    assert(!m->delivering);
    uint32_t n = members_pushers(m, f);
    if (!n)
        return;
    m->delivering = true;
    m->ops.fail(m->ops.ctx, m->eps, n, f, code, msg);
    m->delivering = false;
}
