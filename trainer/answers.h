/* answers.h — one answer awaited from every server of a client: the
 * bookkeeping the batch-update trainer (a fetch, a round) and the
 * HybridModel trainer (a lookup) share. The workload's client sink calls
 * answers_begin / answers_end as frames arrive; the workload waits with
 * answers_wait, bounded by --rpc-timeout.
 */
#ifndef PSBENCH_ANSWERS_H
#define PSBENCH_ANSWERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/client.h"

typedef struct answer_rx {
    bool receiving, done;
} answer_rx;

typedef struct answers {
    answer_rx *rx;     /* n: one per server */
    size_t n, remaining;
    uint64_t t_last_ns; /* the read that brought the last answer (client rx_ns) */
} answers;

/* Called between polls while waiting (the master link reports there): 0,
 * or -1 with a reason in err to stop. */
typedef int (*answers_tick_fn)(void *ctx, uint64_t batches_done, char *err, size_t errlen);

/* For n servers. 0, or -1 (memory). */
int answers_init(answers *a, size_t n);
void answers_free(answers *a);
/* Await one answer from every server. */
void answers_expect(answers *a);
/* Await one answer from `server` only (a call to one server at a time). */
void answers_expect_one(answers *a, size_t server);
/* Whether frame (a cookie of answers_begin) is one of a's. */
bool answers_owns(const answers *a, const void *frame);
/* A frame from `server` begins: false when it is not awaited (already
 * answered, or an answer of it is being received); else *frame is the
 * cookie the sink hands back to answers_server / answers_end. */
bool answers_begin(answers *a, size_t server, void **frame);
size_t answers_server(const answers *a, const void *frame);
void answers_end(answers *a, void *frame, uint64_t rx_ns);
/* Poll cl until every server answered; t0 (clock_now_ns) starts the
 * timeout. `what` names the answer in the timeout's message; tick (may be
 * NULL) runs between polls. 0, or -1 with err. */
int answers_wait(answers *a, client *cl, uint64_t t0, double timeout_s, const char *what, answers_tick_fn tick,
                 void *ctx, uint64_t batches_done, char *err, size_t errlen);

#endif
