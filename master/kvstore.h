/* kvstore.h — the master as the rendezvous store of the trainers'
 * collective groups (Gloo's and NCCL's): kv_set puts a value, kv_get
 * answers with kv_value as soon as the key has one (at once, or when a
 * later kv_set brings it). Keys and values are opaque strings (values: hex
 * of a few hundred bytes: addresses, an NCCL id); the store lives as long
 * as the run. Bounded: a node cannot grow it past the limits below.
 */
#ifndef PSBENCH_KVSTORE_H
#define PSBENCH_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>

#define KV_MAX_KEY 512
#define KV_MAX_VALUE (1u << 20)   /* characters */
#define KV_MAX_KEYS 65536
#define KV_MAX_WAITERS 65536

typedef struct kv_entry kv_entry;
typedef struct kv_waiter kv_waiter;

typedef struct kvstore {
    kv_entry *entries; /* a list: groups are formed once per run */
    size_t nentries;
    kv_waiter *waiters;
    size_t nwaiters;
} kvstore;

/* Called for every answer: `who` is the waiting party given to kv_get. */
typedef void (*kv_answer_fn)(void *who, const char *key, const char *value, void *ctx);

void kv_init(kvstore *s);
void kv_free(kvstore *s);
/* Set key (a second set replaces the value) and answer everyone waiting
 * for it. 0, or -1 with err (limits, memory). */
int kv_set(kvstore *s, const char *key, const char *value, kv_answer_fn answer, void *ctx, char *err,
           size_t errlen);
/* Answer `who` now if key has a value, else when it gets one. 0 or -1. */
int kv_get(kvstore *s, const char *key, void *who, kv_answer_fn answer, void *ctx, char *err, size_t errlen);
/* Forget every wait of `who` (it disconnected). */
void kv_forget(kvstore *s, void *who);

#endif
