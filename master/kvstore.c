/* kvstore.c — the rendezvous store (see kvstore.h). */
#include "master/kvstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_entry {
    char *key, *value;
    kv_entry *next;
};

struct kv_waiter {
    char *key;
    void *who;
    kv_waiter *next;
};

void kv_init(kvstore *s)
{
    memset(s, 0, sizeof *s);
}

void kv_free(kvstore *s)
{
    while (s->entries) {
        kv_entry *e = s->entries;
        s->entries = e->next;
        free(e->key);
        free(e->value);
        free(e);
    }
    while (s->waiters) {
        kv_waiter *w = s->waiters;
        s->waiters = w->next;
        free(w->key);
        free(w);
    }
    memset(s, 0, sizeof *s);
}

static kv_entry *kv_find(kvstore *s, const char *key)
{
    for (kv_entry *e = s->entries; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static int kv_check_key(const char *key, char *err, size_t errlen)
{
    size_t n = strlen(key);
    if (n == 0 || n > KV_MAX_KEY) {
        snprintf(err, errlen, "a key must have 1..%d characters", KV_MAX_KEY);
        return -1;
    }
    return 0;
}

int kv_set(kvstore *s, const char *key, const char *value, kv_answer_fn answer, void *ctx, char *err,
           size_t errlen)
{
    if (kv_check_key(key, err, errlen) < 0)
        return -1;
    if (strlen(value) > KV_MAX_VALUE) {
        snprintf(err, errlen, "a value must have at most %u characters", KV_MAX_VALUE);
        return -1;
    }
    char *v = strdup(value);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    kv_entry *e = kv_find(s, key);
    if (e) {
        free(e->value);
        e->value = v;
    } else {
        if (s->nentries >= KV_MAX_KEYS) {
            free(v);
            snprintf(err, errlen, "more than %d keys", KV_MAX_KEYS);
            return -1;
        }
        e = calloc(1, sizeof *e);
        if (!e || !(e->key = strdup(key))) {
            free(e);
            free(v);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        e->value = v;
        e->next = s->entries;
        s->entries = e;
        s->nentries++;
    }
    /* Answer the waiters of this key, unlinking each first: an answer may
     * not reenter the store, but the list stays consistent if it did. */
    kv_waiter **pp = &s->waiters;
    while (*pp) {
        kv_waiter *w = *pp;
        if (strcmp(w->key, key) != 0) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        s->nwaiters--;
        answer(w->who, key, e->value, ctx);
        free(w->key);
        free(w);
    }
    return 0;
}

int kv_get(kvstore *s, const char *key, void *who, kv_answer_fn answer, void *ctx, char *err, size_t errlen)
{
    if (kv_check_key(key, err, errlen) < 0)
        return -1;
    kv_entry *e = kv_find(s, key);
    if (e) {
        answer(who, key, e->value, ctx);
        return 0;
    }
    if (s->nwaiters >= KV_MAX_WAITERS) {
        snprintf(err, errlen, "more than %d waits", KV_MAX_WAITERS);
        return -1;
    }
    kv_waiter *w = calloc(1, sizeof *w);
    if (!w || !(w->key = strdup(key))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->who = who;
    w->next = s->waiters;
    s->waiters = w;
    s->nwaiters++;
    return 0;
}

void kv_forget(kvstore *s, void *who)
{
    kv_waiter **pp = &s->waiters;
    while (*pp) {
        kv_waiter *w = *pp;
        if (w->who != who) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        s->nwaiters--;
        free(w->key);
        free(w);
    }
}
