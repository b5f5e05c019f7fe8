/* trace_an.h — what a merged trace says (issue 42): the steps it holds, a
 * representative steady-state step, where each bucket's time went, and
 * the chain of spans that decided when a step's last optimizer could
 * start. Pure functions over trace_out_spans' array (master time), used
 * by `psbench-master trace summarize`, the sweep's report and the
 * dashboard's GET /api/v1/trace/step; docs/results.md, "Reading the
 * trace", defines every figure.
 *
 * The spans come from the live nodes (trace_out_spans) or from a
 * trace.json read back (trace_an_load): the same array either way.
 */
#ifndef PSBENCH_TRACE_AN_H
#define PSBENCH_TRACE_AN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "master/trace_out.h"

/* A figure that is not known (a span missing, or clocks that cannot say). */
#define TRACE_AN_UNKNOWN (-1)

/* ---- steps ------------------------------------------------------------------ */

/* A step: a trainer's batch in the timed pass, as its `step` spans say. */
typedef struct trace_an_step {
    int64_t batch;
    uint32_t ntrainers;       /* trainers with a `step` span of this batch */
    int64_t slowest_ns;       /* the longest of those spans */
    int64_t start_ns, end_ns; /* the earliest start, the latest end (master time) */
} trace_an_step;

/* The steps present, by batch (*out malloc'd, NULL where none). 0, or -1
 * out of memory. */
int trace_an_steps(const trace_out_span *sp, size_t n, trace_an_step **out, size_t *nout);
/* The trainers that have a `step` span at all (distinct ranks). */
uint32_t trace_an_trainers(const trace_out_span *sp, size_t n);
/* The representative steady-state step among the steps complete on
 * ntrainers trainers (0: on every one of trace_an_trainers'): skipping the
 * first such step where there are more than 2, the one whose slowest
 * trainer's step is the median (the lower one of an even count; ties: the
 * earlier batch). Its index into st, or -1 where no step is complete. */
ptrdiff_t trace_an_representative(const trace_an_step *st, size_t n, uint32_t ntrainers);
/* The rule above in words (the JSON's "why"). */
#define TRACE_AN_RULE                                                                                                  \
    "the median step: of the steps every trainer traced whole, the first left out where more than 2, the one "         \
    "whose slowest trainer's step is the median (the lower of two)"

/* The latest step complete on ntrainers trainers: its index, or -1. */
ptrdiff_t trace_an_last_complete(const trace_an_step *st, size_t n, uint32_t ntrainers);

/* ---- where a bucket's time went ----------------------------------------------- */

typedef enum trace_an_part {
    TRACE_AN_QUEUE,     /* bucket_ready start -> frame_out start (the trainer's) */
    TRACE_AN_WIRE,      /* frame_out start -> the server's push_recv end */
    TRACE_AN_STRAGGLER, /* push_recv end -> the last trainer's push_recv end (the same server) */
    TRACE_AN_FOLD,      /* the last push_recv end -> answer_out start (folds, device jobs, resolve) */
    TRACE_AN_RETURN,    /* answer_out start -> the trainer's frame_in end */
    TRACE_AN_APPLY,     /* bucket_apply's duration */
    TRACE_AN_NPARTS
} trace_an_part;

const char *trace_an_part_name(trace_an_part p); /* "queue", "wire", "straggler", "fold", "return", "apply" */

/* One trainer's bucket of one batch. */
typedef struct trace_an_bucket {
    int64_t batch, bucket;
    int32_t trainer, server;       /* server: where its push went (-1: not known) */
    int64_t part[TRACE_AN_NPARTS]; /* ns, or TRACE_AN_UNKNOWN */
    bool clamped[TRACE_AN_NPARTS]; /* below 0 by less than the clocks' uncertainty: taken as 0 */
} trace_an_bucket;

/* Every (batch, bucket, trainer) with a span of its own, sorted so
 * (*out malloc'd, NULL where none). 0, or -1 out of memory. */
int trace_an_buckets(const trace_out_span *sp, size_t n, trace_an_bucket **out, size_t *nout);

/* ---- the critical path ------------------------------------------------------------ */

/* The chain of spans that decided when batch's optimizer could start on
 * the trainer that started it last, in time order (forward first):
 * indices into sp (*out malloc'd). Links whose span is missing are left
 * out; no optimizer span of batch: none (0 spans). 0, or -1 out of
 * memory. */
int trace_an_critical(const trace_out_span *sp, size_t n, int64_t batch, size_t **out, size_t *nout);

/* ---- one step as data ------------------------------------------------------------- */

/* The step of `batch` as JSON (what the sweep's report embeds and
 * GET /api/v1/trace/step answers; docs/http-api.md): its lanes, spans,
 * the buckets' flows between lanes, the critical path, each bucket's
 * parts, and `why` (how the step was chosen; copied). NULL: out of
 * memory. */
json_t *trace_an_step_json(const trace_out_span *sp, size_t n, int64_t batch, uint32_t ntrainers, const char *why);

/* ---- the live view ----------------------------------------------------------------- */

/* GET /api/v1/trace/step's answer from the master's gathered traces
 * (mtrace_gathered: nodes, n of them; NULL and 0 when it does not trace):
 * the latest step whose `step` span every trainer among nodes has, as
 * trace_an_step_json gives it, *code 200; none yet: {"batch": null,
 * "reason": ...}, 200; not tracing: the same, 404. Malloc'd; NULL: out
 * of memory. */
char *trace_an_live_json(const trace_out_node *nodes, size_t n, unsigned *code);

/* ---- a trace.json read back --------------------------------------------------------- */

typedef struct trace_an_proc trace_an_proc; /* trace_an.c's */

typedef struct trace_an_trace {
    trace_out_span *sp; /* owned; lane names point into procs */
    size_t n;
    uint32_t ntrainers, nservers; /* processes of each role */
    trace_an_proc *proc;          /* owned */
    size_t nprocs;
} trace_an_trace;

/* The spans of a document trace_out wrote (its "X" events; processes and
 * lanes from its "M" events, clocks from its metadata). 0, or -1 with the
 * reason in err (not such a document; a process, lane or span name it
 * does not know). t is then empty. */
int trace_an_load(const json_t *doc, trace_an_trace *t, char *err, size_t errlen);
void trace_an_trace_free(trace_an_trace *t);

/* The representative step of a trace.json's spans as trace_an_step_json
 * gives it, or JSON null where no step is complete (NULL: out of memory). */
json_t *trace_an_representative_json(const trace_an_trace *t);

#endif
