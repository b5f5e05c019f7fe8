/* trace_sum.c — `psbench-master trace summarize FILE` (see trace_sum.h):
 * the command line, the file read back (trace_an_load), the buckets'
 * parts gathered over the steps, the text or JSON out. */
#include "master/tools/trace_sum.h"
#include "master/trace_an.h"
#include "shared/log.h"
#include "shared/opts.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct trace_args {
    const char *verb; /* "summarize" */
    const char *file;
    bool json; /* --json */
} trace_args;

#define TRACE_AT(f) OPT_AT(trace_args, f)
static const opt_spec trace_specs[] = {
    {.kind = OPT_TEXT,
     .help = "usage: psbench-master trace summarize [--json] FILE\n"
             "\n"
             "Reads a trace.json that `psbench-master --trace --out DIR` wrote and says\n"
             "where the time went. Per bucket, over every traced step and trainer: the\n"
             "median and the max, in ms, of its queue (ready -> sent), wire (sent -> in\n"
             "at the server), straggler wait (in -> the last trainer's push in), fold\n"
             "(the last push in -> the answer out: folds, device jobs, resolve), return\n"
             "(answer out -> in at the trainer) and apply, with n, the (step, trainer)\n"
             "pairs each is known for. Then the representative steady-state step (the\n"
             "median of the steps' slowest trainer's step, the first traced step left\n"
             "out where more than 2) and its critical path: the spans that decided when\n"
             "the last trainer's optimizer could start. docs/results.md, \"Reading the\n"
             "trace\", defines each figure.\n"},
    {.kind = OPT_FLAG, .name = "json", .to = TRACE_AT(json), .help = "print the same as one JSON document"},
    {.shared = &opts_help},
    {.kind = OPT_TEXT,
     .help = "Exit status: 0 ok, 1 a file that cannot be read or is not a trace.json,\n"
             "2 usage error.\n"},
    OPTS_END,
};
#undef TRACE_AT

static const opts_table trace_table = {.prog = "psbench-master trace", .specs = trace_specs, .help_col = 19};

void trace_usage(FILE *f) { opts_usage(&trace_table, f); }

/* An argument that is none of the options: the verb, then the file. */
static int trace_other_arg(const char *a, void *settings, char *err, size_t errlen)
{
    trace_args *t = settings;
    text_shown shown;
    if (a[0] == '-' && a[1] != '\0')
        return opts_refuse_unknown(&trace_table, a, err, errlen);
    if (!t->verb) {
        if (strcmp(a, "summarize") != 0) {
            errbuf_set(err, errlen, "unknown command %s: the command is summarize", text_show(a, '\'', &shown));
            return -1;
        }
        t->verb = a;
        return 0;
    }
    if (t->file) {
        errbuf_set(err, errlen, "too many arguments (%s): give one trace.json", text_show(a, '\'', &shown));
        return -1;
    }
    t->file = a;
    return 0;
}

/* ---- the buckets' parts over the steps ----------------------------------------------- */

static int ts_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One part of one bucket over its (step, trainer) pairs: n known, the
 * median (the mean of the two middle ones of an even count) and max. */
static json_t *ts_part(const trace_an_bucket *b, size_t nb, int64_t bucket, int part, int64_t *scratch)
{
    size_t n = 0;
    for (size_t i = 0; i < nb; i++)
        if (b[i].bucket == bucket && b[i].part[part] >= 0)
            scratch[n++] = b[i].part[part];
    if (n == 0)
        return json_pack("{s:I, s:n, s:n}", "n", (json_int_t)0, "median_ms", "max_ms");
    qsort(scratch, n, sizeof *scratch, ts_cmp_i64);
    double med = n % 2 ? (double)scratch[n / 2] : ((double)scratch[n / 2 - 1] + (double)scratch[n / 2]) / 2;
    return json_pack("{s:I, s:f, s:f}", "n", (json_int_t)n, "median_ms", med / 1e6, "max_ms",
                     (double)scratch[n - 1] / 1e6);
}

/* [{"bucket", "n", PART: {n, median_ms, max_ms}, ...}] by bucket. NULL: out of memory. */
static json_t *ts_buckets(const trace_an_trace *t)
{
    trace_an_bucket *b;
    size_t nb;
    if (trace_an_buckets(t->sp, t->n, &b, &nb) != 0)
        return NULL;
    json_t *arr = json_array();
    int64_t *scratch = malloc((nb ? nb : 1) * sizeof *scratch);
    int64_t *ids = malloc((nb ? nb : 1) * sizeof *ids);
    if (!arr || !scratch || !ids) {
        json_decref(arr);
        arr = NULL;
        goto out;
    }
    for (size_t i = 0; i < nb; i++)
        ids[i] = b[i].bucket;
    qsort(ids, nb, sizeof *ids, ts_cmp_i64);
    for (size_t i = 0; i < nb; i++) {
        if (i > 0 && ids[i] == ids[i - 1])
            continue;
        size_t pairs = 0;
        for (size_t k = 0; k < nb; k++)
            pairs += b[k].bucket == ids[i];
        json_t *o = json_pack("{s:I, s:I}", "bucket", (json_int_t)ids[i], "n", (json_int_t)pairs);
        for (int p = 0; o && p < TRACE_AN_NPARTS; p++)
            json_object_set_new(o, trace_an_part_name((trace_an_part)p), ts_part(b, nb, ids[i], p, scratch));
        if (json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
            goto out;
        }
    }
out:
    free(scratch);
    free(ids);
    free(b);
    return arr;
}

/* The whole summary as JSON (what --json prints, and what the text is
 * printed from). NULL: out of memory. */
static json_t *ts_summary(const char *file, const trace_an_trace *t)
{
    trace_an_step *st;
    size_t nst;
    if (trace_an_steps(t->sp, t->n, &st, &nst) != 0)
        return NULL;
    json_t *steps = json_array();
    for (size_t i = 0; steps && i < nst; i++)
        json_array_append_new(steps, json_integer((json_int_t)st[i].batch));
    free(st);
    json_t *buckets = ts_buckets(t), *rep = trace_an_representative_json(t);
    if (!steps || !buckets || !rep) {
        json_decref(steps);
        json_decref(buckets);
        json_decref(rep);
        return NULL;
    }
    return json_pack("{s:s, s:I, s:I, s:o, s:o, s:o}", "file", file, "trainers", (json_int_t)t->ntrainers, "servers",
                     (json_int_t)t->nservers, "steps", steps, "buckets", buckets, "representative", rep);
}

/* ---- the text ------------------------------------------------------------------------ */

static void ts_put_part(FILE *out, const json_t *p, bool last)
{
    json_t *med = json_object_get(p, "median_ms"), *max = json_object_get(p, "max_ms");
    char cell[48];
    if (json_is_number(med))
        snprintf(cell, sizeof cell, "%.3f / %.3f", json_number_value(med), json_number_value(max));
    else
        snprintf(cell, sizeof cell, "-");
    fprintf(out, last ? "  %s" : "  %-17s", cell);
}

static void ts_put_steps(FILE *out, const json_t *steps)
{
    size_t n = json_array_size(steps);
    if (n == 0) {
        fputs("no step traced", out);
        return;
    }
    json_int_t first = json_integer_value(json_array_get(steps, 0));
    json_int_t last = json_integer_value(json_array_get(steps, n - 1));
    fprintf(out, "%zu step%s traced (batch%s %" JSON_INTEGER_FORMAT, n, n == 1 ? "" : "s", n == 1 ? "" : "es", first);
    if (n > 1)
        fprintf(out, "..%" JSON_INTEGER_FORMAT "%s", last, (json_int_t)n == last - first + 1 ? "" : ", with gaps");
    fputs(")", out);
}

static void ts_put_critical(FILE *out, const json_t *rep)
{
    json_t *spans = json_object_get(rep, "spans"), *lanes = json_object_get(rep, "lanes");
    json_t *crit = json_object_get(rep, "critical");
    if (json_array_size(crit) == 0) {
        fputs("Critical path: none (no optimizer span in this step)\n", out);
        return;
    }
    json_t *opt = json_array_get(spans, (size_t)json_integer_value(json_array_get(crit, json_array_size(crit) - 1)));
    json_t *opt_lane = json_array_get(lanes, (size_t)json_integer_value(json_object_get(opt, "lane")));
    fprintf(out, "Critical path (what decided when %s's optimizer could start, the last to):\n",
            json_string_value(json_object_get(opt_lane, "process")));
    fprintf(out, "  %10s %10s  %-24s %-16s %s\n", "start ms", "dur ms", "where", "span", "ids");
    size_t i;
    json_t *ix;
    json_array_foreach (crit, i, ix) {
        json_t *s = json_array_get(spans, (size_t)json_integer_value(ix));
        json_t *lane = json_array_get(lanes, (size_t)json_integer_value(json_object_get(s, "lane")));
        char where[96], ids[96] = "";
        snprintf(where, sizeof where, "%s %s", json_string_value(json_object_get(lane, "process")),
                 json_string_value(json_object_get(lane, "lane")));
        static const char *const keys[] = {"bucket", "trainer", "server"};
        for (size_t k = 0; k < 3; k++) {
            json_t *v = json_object_get(s, keys[k]);
            if (json_is_integer(v)) {
                size_t used = strlen(ids);
                snprintf(ids + used, sizeof ids - used, "%s%s %" JSON_INTEGER_FORMAT, used ? ", " : "", keys[k],
                         json_integer_value(v));
            }
        }
        fprintf(out, "  %10.3f %10.3f  %-24s %-16s %s\n", json_number_value(json_object_get(s, "ts")) / 1e3,
                json_number_value(json_object_get(s, "dur")) / 1e3, where,
                json_string_value(json_object_get(s, "name")), ids);
    }
}

static void ts_print(FILE *out, const json_t *sum)
{
    json_int_t nt = json_integer_value(json_object_get(sum, "trainers"));
    json_int_t ns = json_integer_value(json_object_get(sum, "servers"));
    fprintf(out, "%s: %" JSON_INTEGER_FORMAT " trainer%s, %" JSON_INTEGER_FORMAT " server%s; ",
            json_string_value(json_object_get(sum, "file")), nt, nt == 1 ? "" : "s", ns, ns == 1 ? "" : "s");
    ts_put_steps(out, json_object_get(sum, "steps"));
    fputs("\n\n", out);
    json_t *buckets = json_object_get(sum, "buckets");
    if (json_array_size(buckets) == 0) {
        fputs("No bucket's spans in the trace.\n", out);
    } else {
        fputs("Where each bucket's time went, over the traced steps and trainers: median / max, ms\n"
              "(n: the (step, trainer) pairs; '-': not known, a span missing):\n",
              out);
        fprintf(out, "%7s %5s", "bucket", "n");
        for (int p = 0; p < TRACE_AN_NPARTS; p++)
            fprintf(out, p + 1 < TRACE_AN_NPARTS ? "  %-17s" : "  %s", trace_an_part_name((trace_an_part)p));
        fputs("\n", out);
        size_t i;
        json_t *b;
        json_array_foreach (buckets, i, b) {
            fprintf(out, "%7" JSON_INTEGER_FORMAT " %5" JSON_INTEGER_FORMAT,
                    json_integer_value(json_object_get(b, "bucket")), json_integer_value(json_object_get(b, "n")));
            for (int p = 0; p < TRACE_AN_NPARTS; p++)
                ts_put_part(out, json_object_get(b, trace_an_part_name((trace_an_part)p)), p + 1 == TRACE_AN_NPARTS);
            fputs("\n", out);
        }
    }
    fputs("\n", out);
    json_t *rep = json_object_get(sum, "representative");
    if (json_is_null(rep)) {
        fputs("Representative step: none (no step traced whole on every trainer)\n", out);
        return;
    }
    fprintf(out, "Representative step: batch %" JSON_INTEGER_FORMAT " (its slowest trainer's step %.3f ms; %s)\n",
            json_integer_value(json_object_get(rep, "batch")), json_number_value(json_object_get(rep, "step_ms")),
            json_string_value(json_object_get(rep, "why")));
    ts_put_critical(out, rep);
}

/* ---- main ----------------------------------------------------------------------------- */

/* The file read back; NULL with the line said on err. */
static json_t *ts_load(const char *path, FILE *err)
{
    char why[256];
    json_error_t je;
    json_t *doc = NULL;
    if (userpath_load_json(path, 0, &doc, &je, why, sizeof why) == -1) {
        fprintf(err, "psbench-master trace: cannot read %s: %s\n", path, why);
        return NULL;
    }
    if (!doc)
        fprintf(err, "psbench-master trace: %s:%d:%d: invalid JSON: %s\n", path, je.line, je.column, je.text);
    return doc;
}

int trace_main(int argc, char **argv, FILE *out, FILE *err)
{
    trace_args a = {0};
    char msg[512];
    int rc = opts_init(&trace_table, &a, msg, sizeof msg);
    if (rc == 0)
        rc = opts_parse_args(&trace_table, argc, argv, &a, trace_other_arg, msg, sizeof msg);
    if (rc == OPTS_HELP) {
        trace_usage(out);
        return 0;
    }
    if (rc == 0 && !a.verb) {
        snprintf(msg, sizeof msg, "give a command: summarize FILE");
        rc = -1;
    } else if (rc == 0 && !a.file) {
        snprintf(msg, sizeof msg, "summarize needs a trace.json");
        rc = -1;
    }
    if (rc != 0) {
        fprintf(err, "psbench-master trace: %s\n", msg);
        trace_usage(err);
        return 2;
    }
    json_t *doc = ts_load(a.file, err);
    if (!doc)
        return 1;
    trace_an_trace t;
    if (trace_an_load(doc, &t, msg, sizeof msg) != 0) {
        json_decref(doc);
        fprintf(err, "psbench-master trace: %s: not a trace.json: %s\n", a.file, msg);
        return 1;
    }
    json_decref(doc);
    json_t *sum = ts_summary(a.file, &t);
    trace_an_trace_free(&t);
    if (!sum) {
        fprintf(err, "psbench-master trace: out of memory summarizing %s\n", a.file);
        return 1;
    }
    if (a.json) {
        char *s = json_dumps(sum, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
        if (s) {
            fputs(s, out);
            fputs("\n", out);
        }
        free(s);
    } else {
        ts_print(out, sum);
    }
    json_decref(sum);
    return fflush(out) == 0 ? 0 : 1;
}
