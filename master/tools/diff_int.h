/* diff_int.h — the parts of `psbench-master diff` (diff.h) and what they
 * share. Layers, each using only those under it:
 *
 *   diff.c          the subcommand: its command line, the two files loaded,
 *                   how each run ended, whether they are comparable, what
 *                   differs in their configurations and environments
 *   diff_figures.c  the figures: the headline with its noise, every
 *                   group's and rank's metrics (a table, CSV rows)
 *   diff_cost.c     what a change costs training: the loss per epoch, the
 *                   final parameters' relative distance (params.bin)
 *   diff_keys.c     a sorted list of unique keys, to walk two objects
 */
#ifndef PSBENCH_DIFF_INT_H
#define PSBENCH_DIFF_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* ---- diff_keys.c ---- */

/* Keys borrowed from the objects they were added from. */
typedef struct keyset {
    const char **v;
    size_t n, cap;
} keyset;

/* Every key of obj (nothing if it is not an object). 0, or -1 without memory. */
int keyset_add_object(keyset *k, json_t *obj);
/* Sorted by cmp, each key once. */
void keyset_finish(keyset *k, int (*cmp)(const void *, const void *));
void keyset_free(keyset *k);
/* By name; ranks: numbers in numeric order, then anything else by name. */
int keyset_cmp_str(const void *a, const void *b);
int keyset_cmp_rank(const void *a, const void *b);

/* ---- diff_figures.c ---- */

/* The headline of both runs, all trainers: a side with a series' summary
 * shows its mean and 95% interval; where both have one, a difference
 * whose intervals overlap is within noise. files: A's and B's paths. */
void diff_headline(FILE *out, const char *const *files, json_t *a, json_t *b);
/* Every group's table: trainer, server, then any other group by name;
 * the rows into csv too (NULL: none). 0, or 1 (out of memory, said on err). */
int diff_groups(FILE *out, FILE *csv, json_t *a, json_t *b, FILE *err);

/* ---- diff_cost.c ---- */

/* The loss per epoch of every trainer both runs have, with B-A, and the
 * relative L2 distance of their final parameters (each run's params.bin,
 * beside its results.json; "not comparable: WHY" where there is none);
 * the rows into csv too (group "training"). files: A's and B's paths. */
void diff_training(FILE *out, FILE *csv, const char *const *files, json_t *a, json_t *b);

#endif
