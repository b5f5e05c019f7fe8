/* diff.h — `psbench-master diff A.json B.json`: compare two runs.
 *
 * The seed's diff.py subtracted two ProcessedMetricsPrinter CSVs column by
 * column. This reads two results.json files (their "groups" object has the
 * shape of GET /api/v1/metrics "groups") and prints, per group and rank
 * ("all" first), one table per metric present in either run: the stat,
 * A, B, B-A and the change in percent of A. Configuration keys that differ
 * are listed first. A run whose results.json says it failed is named
 * before anything else, and compared only with --allow-failed (else exit
 * 1): a failed run's figures stop where it failed. With --csv FILE the
 * same rows go to a CSV file, checked before anything is compared
 * (shared/userpath.h: its folder made, no folder or FIFO in its place;
 * else exit 2) and written whole (shared/atomicfile) after the table: a
 * write that fails exits 1 naming the path and the errno, and leaves the
 * old file as it was.
 */
#ifndef PSBENCH_DIFF_H
#define PSBENCH_DIFF_H

#include <stdio.h>

/* argv[0] is the subcommand ("diff"); options and the two files follow.
 * Returns 0 ok, 1 unreadable or invalid input or a failed run without
 * --allow-failed (a line naming the file on err), 2 usage error or a
 * --csv FILE that cannot be written. --help prints the usage on out and returns 0. */
int diff_main(int argc, char **argv, FILE *out, FILE *err);

void diff_usage(FILE *f);

#endif
