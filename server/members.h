/* members.h — a server's trainer slots, and where the futures' outcomes go.
 *
 * A slot is the n-th distinct trainer rank that said hello. A trainer that
 * reconnects gets its slot back, so the futures layer's bitmaps over slots
 * stay valid. While connected, a slot holds its connection as an opaque
 * endpoint: this module never looks inside one, it hands endpoints back to
 * the transport through members_ops.
 *
 * The futures layer's two hooks (future.h) land here: members_on_answer
 * and members_on_fail pick the connected slots that pushed into the future
 * and hand their endpoints, all at once, to ops.answer (the result to each
 * of them, its header encoded once) or ops.fail (peer_lost to each).
 *
 * A session ends when the last trainer has gone: every future and lost
 * mark is forgotten (futures_new_session), the slots are free again, and
 * ops.session_end tells the owner (the reactor: fill the kind's state
 * again, tell the master link).
 */
#ifndef PSBENCH_MEMBERS_H
#define PSBENCH_MEMBERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/bufpool.h"
#include "server/future.h"
#include "shared/metrics.h"

#define MEMBERS_NO_SLOT UINT32_MAX

typedef struct members_ops {
    /* f resolved: queue `result` (borrowed) to each of eps[0 .. n). */
    void (*answer)(void *ctx, void *const *eps, uint32_t n, const future *f, psbuf *result);
    /* f failed: tell each of eps[0 .. n) `code` with msg. */
    void (*fail)(void *ctx, void *const *eps, uint32_t n, const future *f, frame_errcode code, const char *msg);
    /* Every trainer has gone: a new session begins. */
    void (*session_end)(void *ctx);
    void *ctx;
} members_ops;

typedef struct member {
    uint64_t rank;
    void *ep;         /* the connection; NULL while disconnected */
    const char *peer; /* its name for messages (borrowed while connected) */
    bool lost;        /* was connected, then went away */
} member;

typedef struct members {
    member *slots;
    uint32_t n;   /* slots taken this session */
    uint32_t cap; /* trainers expected */
    void **eps;   /* cap entries: the endpoints handed to ops */
    futures *fut;
    metrics *metrics;
    members_ops ops;
    bool delivering; /* in ops.answer or ops.fail: eps is in use */
} members;

/* cap slots; fut (which may be initialised later, before the first join)
 * hears of joins and losses, reg gets each slot's lag metric. Returns
 * -1 when out of memory. */
int members_init(members *m, uint32_t cap, futures *fut, metrics *reg, const members_ops *ops);
void members_free(members *m);

/* Give endpoint ep (named peer) the slot of `rank`: a new one, or the one
 * it had before a disconnect. Returns the slot, or MEMBERS_NO_SLOT with a
 * reason in msg (the rank is connected already; every slot is taken). */
uint32_t members_join(members *m, void *ep, const char *peer, uint64_t rank, char *msg, size_t len);
/* The endpoint of a slot went away: every future the slot has not pushed
 * to fails; when no trainer is left, the session ends. */
void members_lost(members *m, uint32_t slot, void *ep);
/* Some trainer is connected. */
bool members_any_connected(const members *m);

/* futures_hooks.answer and .fail; ctx is the members. */
void members_on_answer(void *ctx, future *f, psbuf *result);
void members_on_fail(void *ctx, future *f, frame_errcode code, const char *msg);

#endif
