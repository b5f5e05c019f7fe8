/* trace_sum.h — `psbench-master trace summarize FILE`: what a run's
 * trace.json says (master/trace_an.h).
 *
 * Reads a trace.json that --trace wrote and prints, per bucket over every
 * traced step and trainer, where its time went — queue, wire, straggler
 * wait, fold, return, apply: the median and the max in ms, and how many
 * (batch, trainer) pairs each figure is known for — then the
 * representative steady-state step and its critical path, span by span.
 * --json prints the same as one JSON document. docs/results.md, "Reading
 * the trace", defines every figure.
 */
#ifndef PSBENCH_TRACE_SUM_H
#define PSBENCH_TRACE_SUM_H

#include <stdio.h>

/* argv[0] is the subcommand ("trace"); its verb and the file follow.
 * Returns 0 ok, 1 a file that cannot be read or is not a trace.json (a
 * line naming it on err), 2 a usage error. --help prints the usage on out
 * and returns 0. */
int trace_main(int argc, char **argv, FILE *out, FILE *err);

void trace_usage(FILE *f);

#endif
