/* diff_keys.c — a sorted list of unique keys (master/tools/diff_int.h):
 * the union of two JSON objects' keys, which `psbench-master diff` walks
 * to compare them key by key (metrics, ranks, configurations). */
#include "master/tools/diff_int.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int keys_add(keyset *k, const char *s)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 16;
        const char **nv = realloc(k->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        k->v = nv;
        k->cap = cap;
    }
    k->v[k->n++] = s;
    return 0;
}

int keyset_add_object(keyset *k, json_t *obj)
{
    const char *key;
    json_t *val;
    if (!json_is_object(obj))
        return 0;
    json_object_foreach(obj, key, val) {
        if (keys_add(k, key) < 0)
            return -1;
    }
    return 0;
}

int keyset_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Ranks: numbers in numeric order, then anything else by name. */
int keyset_cmp_rank(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    char *ex, *ey;
    long long nx = strtoll(x, &ex, 10), ny = strtoll(y, &ey, 10);
    bool ix = *x && !*ex, iy = *y && !*ey;
    if (ix && iy)
        return nx < ny ? -1 : nx > ny;
    if (ix != iy)
        return ix ? -1 : 1;
    return strcmp(x, y);
}

void keyset_finish(keyset *k, int (*cmp)(const void *, const void *))
{
    if (k->n == 0)
        return;
    qsort(k->v, k->n, sizeof *k->v, cmp);
    size_t w = 1;
    for (size_t i = 1; i < k->n; i++)
        if (strcmp(k->v[i], k->v[w - 1]) != 0)
            k->v[w++] = k->v[i];
    k->n = w;
}

void keyset_free(keyset *k)
{
    free(k->v);
    memset(k, 0, sizeof *k);
}
