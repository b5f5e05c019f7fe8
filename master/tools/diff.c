/* diff.c — compare two results.json files (see diff.h). */
#include "master/tools/diff.h"
#include "shared/atomicfile.h"
#include "shared/log.h"
#include "shared/opts.h"
#include "shared/userpath.h"
#include "shared/text.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The stats shown, in this order. */
static const char *const diff_stats[] = {"count", "mean", "p50", "p90", "p99", "max"};
#define NSTATS (sizeof diff_stats / sizeof diff_stats[0])
/* A metric name as shown (escaped: the file may come from anywhere). */
#define DIFF_NAME_SHOWN 1024

/* diff's command line: its options anywhere among the two files; after
 * "--" every argument is a file. */
typedef struct diff_args {
    const char *files[2];
    int nfiles;
    bool files_only;      /* "--" was given */
    const char *csv_path; /* --csv FILE, NULL */
    bool allow_failed;    /* --allow-failed */
    bool force;           /* --force: runs of different models too */
} diff_args;

#define DIFF_AT(f) OPT_AT(diff_args, f)
static const opt_spec diff_specs[] = {
    {.kind = OPT_TEXT,
     .help = "usage: psbench-master diff [--csv FILE] [--allow-failed] [--force] A.json B.json\n"
             "\n"
             "Compares two runs' results.json (written by --out DIR): first whether they\n"
             "are comparable (runs of different models are refused unless --force), then\n"
             "the headline with its noise (within noise where both sides are runs of a\n"
             "--runs series, DIR/summary.json beside their folders, and their 95%\n"
             "intervals overlap), then where their configurations (not listen, http, out,\n"
             "...) and environments differ (what each node computed with:\n"
             "CPU, BLAS and its kernels, the server's folds, compiler, kernel), then per\n"
             "group and rank every metric's count, mean, p50, p90, p99 and max in ms,\n"
             "with B-A and the change in percent of A (negative: B is faster).\n"
             "A run that failed is said first, and not compared unless --allow-failed:\n"
             "its figures stop where it failed (and may be the warm-up pass's).\n"
             "A run's warnings (e.g. a loss that diverged under --allow-divergence)\n"
             "are shown before the figures.\n"},
    {.kind = OPT_STRING, .name = "csv", .meta = "FILE", .to = DIFF_AT(csv_path), .missing = "needs a file name",
     .help = "also write the rows as CSV (checked before comparing:\n"
             "its folder is made, the name must be free for a file)"},
    {.kind = OPT_FLAG, .name = "allow-failed", .to = DIFF_AT(allow_failed), .help = "compare a failed run too (exit 0)"},
    {.kind = OPT_FLAG, .name = "force", .to = DIFF_AT(force), .help = "compare runs of different models too"},
    {.shared = &opts_help},
    {.kind = OPT_TEXT,
     .help = "Exit status: 0 ok, 1 unreadable or invalid input, a failed run without\n"
             "--allow-failed or runs of different models without --force, 2 usage error\n"
             "(a --csv FILE that cannot be written too).\n"},
    OPTS_END,
};
#undef DIFF_AT

static const opts_table diff_table = {.prog = "psbench-master diff", .specs = diff_specs, .help_col = 19};

void diff_usage(FILE *f)
{
    opts_usage(&diff_table, f);
}

/* ---- a sorted, unique list of keys ------------------------------------- */

typedef struct keyset {
    const char **v;
    size_t n, cap;
} keyset;

static int keyset_add(keyset *k, const char *s)
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

static int keyset_add_object(keyset *k, json_t *obj)
{
    const char *key;
    json_t *val;
    if (!json_is_object(obj))
        return 0;
    json_object_foreach(obj, key, val) {
        if (keyset_add(k, key) < 0)
            return -1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Ranks: numbers in numeric order, then anything else by name. */
static int cmp_rank(const void *a, const void *b)
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

static void keyset_finish(keyset *k, int (*cmp)(const void *, const void *))
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

static void keyset_free(keyset *k)
{
    free(k->v);
    memset(k, 0, sizeof *k);
}

/* ---- loading and checking one file ---------------------------------------- */

/* A section is {METRIC: STATS}; NULL is allowed (absent). Returns NULL or
 * the problem, with its location in where. */
static const char *check_section(json_t *sec, const char *prefix, char *where, size_t len)
{
    if (!sec)
        return NULL;
    if (!json_is_object(sec)) {
        snprintf(where, len, "%s", prefix);
        return "is not an object";
    }
    const char *m;
    json_t *mv;
    json_object_foreach(sec, m, mv) {
        if (!json_is_object(mv)) {
            snprintf(where, len, "%s.%s", prefix, m);
            return "is not a stats object";
        }
    }
    return NULL;
}

static json_t *diff_load(const char *path, FILE *err)
{
    /* A regular file only: a FIFO would block for ever (userpath.h). */
    char why[256];
    json_error_t je;
    json_t *root;
    if (userpath_load_json(path, 0, &root, &je, why, sizeof why) == -1) {
        fprintf(err, "psbench-master diff: cannot read %s: %s\n", path, why);
        return NULL;
    }
    if (!root) {
        fprintf(err, "psbench-master diff: %s:%d:%d: invalid JSON: %s\n", path, je.line, je.column, je.text);
        return NULL;
    }
    const char *problem = NULL;
    char where[512] = "";
    json_t *groups = json_object_get(root, "groups");
    if (!json_is_object(root)) {
        problem = "not a JSON object (expected a results.json)";
    } else if (!json_is_object(groups)) {
        problem = "no 'groups' object (expected a results.json)";
    } else {
        const char *g;
        json_t *gv;
        json_object_foreach(groups, g, gv) {
            if (!json_is_object(gv)) {
                snprintf(where, sizeof where, "groups.%s", g);
                problem = "is not an object";
                break;
            }
            char prefix[300];
            snprintf(prefix, sizeof prefix, "groups.%s.all", g);
            if ((problem = check_section(json_object_get(gv, "all"), prefix, where, sizeof where)))
                break;
            json_t *ranks = json_object_get(gv, "ranks");
            if (ranks && !json_is_object(ranks)) {
                snprintf(where, sizeof where, "groups.%s.ranks", g);
                problem = "is not an object";
                break;
            }
            const char *r;
            json_t *rv;
            json_object_foreach(ranks, r, rv) {
                snprintf(prefix, sizeof prefix, "groups.%s.ranks.%s", g, r);
                if ((problem = check_section(rv, prefix, where, sizeof where)))
                    break;
            }
            if (problem)
                break;
        }
    }
    if (problem) {
        fprintf(err, "psbench-master diff: %s: %s%s%s\n", path, where, where[0] ? " " : "", problem);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- output --------------------------------------------------------------------- */

/* A stat of a metric (NULL section or metric: missing). */
static bool stat_get(json_t *section, const char *metric, const char *stat, double *out)
{
    json_t *m = json_object_get(section, metric);
    json_t *v = json_object_get(m, stat);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

static void fmt_val(char *buf, size_t len, bool have, double v, bool count)
{
    if (!have)
        snprintf(buf, len, "-");
    else if (count)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%.3f", v);
}

static void csv_field_num(FILE *f, bool have, double v)
{
    if (have)
        fprintf(f, ",%.6f", v);
    else
        fputc(',', f);
}

/* Print one section (group + "all" or a rank) of both files. */
static void diff_section(FILE *out, FILE *csv, const char *group, const char *rank, json_t *sa, json_t *sb)
{
    keyset metrics = {0};
    if (keyset_add_object(&metrics, sa) < 0 || keyset_add_object(&metrics, sb) < 0) {
        keyset_free(&metrics);
        return;
    }
    keyset_finish(&metrics, cmp_str);
    if (metrics.n == 0) {
        keyset_free(&metrics);
        return;
    }
    int mw = (int)strlen("metric");
    for (size_t i = 0; i < metrics.n; i++) {
        char m[DIFF_NAME_SHOWN];
        if ((int)text_escape(metrics.v[i], m, sizeof m) > mw)
            mw = (int)strlen(m);
    }

    if (strcmp(rank, "all") == 0)
        fprintf(out, "\n== %s: all ranks ==\n", group);
    else
        fprintf(out, "\n== %s: rank %s ==\n", group, rank);
    fprintf(out, "%-*s  %-5s  %12s  %12s  %12s  %8s\n", mw, "metric", "stat", "A", "B", "B-A", "change");
    for (size_t i = 0; i < metrics.n; i++) {
        char m[DIFF_NAME_SHOWN];
        text_escape(metrics.v[i], m, sizeof m); /* from a file: escaped for the terminal */
        for (size_t s = 0; s < NSTATS; s++) {
            bool count = strcmp(diff_stats[s], "count") == 0;
            double a = 0, b = 0;
            bool ha = stat_get(sa, metrics.v[i], diff_stats[s], &a);
            bool hb = stat_get(sb, metrics.v[i], diff_stats[s], &b);
            char ca[32], cb[32], cd[32], cp[32];
            fmt_val(ca, sizeof ca, ha, a, count);
            fmt_val(cb, sizeof cb, hb, b, count);
            bool hd = ha && hb;
            double d = b - a;
            if (!hd)
                snprintf(cd, sizeof cd, "-");
            else
                snprintf(cd, sizeof cd, count ? "%+.0f" : "%+.3f", d);
            bool hp = hd && (a != 0 || b == 0);
            double pct = (a != 0) ? 100.0 * d / fabs(a) : 0.0;
            if (hp)
                snprintf(cp, sizeof cp, "%+.1f%%", pct);
            else
                snprintf(cp, sizeof cp, "-");
            fprintf(out, "%-*s  %-5s  %12s  %12s  %12s  %8s\n", mw, s == 0 ? m : "", diff_stats[s], ca, cb, cd,
                    cp);
            if (csv) {
                fprintf(csv, "%s,%s,\"%s\",%s", group, rank, m, diff_stats[s]);
                csv_field_num(csv, ha, a);
                csv_field_num(csv, hb, b);
                csv_field_num(csv, hd, d);
                if (hp)
                    fprintf(csv, ",%.3f\n", pct);
                else
                    fprintf(csv, ",\n");
            }
        }
    }
    keyset_free(&metrics);
}

static void diff_group(FILE *out, FILE *csv, const char *group, json_t *ga, json_t *gb)
{
    diff_section(out, csv, group, "all", json_object_get(ga, "all"), json_object_get(gb, "all"));
    json_t *ra = json_object_get(ga, "ranks"), *rb = json_object_get(gb, "ranks");
    keyset ranks = {0};
    if (keyset_add_object(&ranks, ra) == 0 && keyset_add_object(&ranks, rb) == 0) {
        keyset_finish(&ranks, cmp_rank);
        for (size_t i = 0; i < ranks.n; i++)
            diff_section(out, csv, group, ranks.v[i], json_object_get(ra, ranks.v[i]),
                         json_object_get(rb, ranks.v[i]));
    }
    keyset_free(&ranks);
}

static void env_compare(const char *prefix, json_t *a, json_t *b, json_t *lines);

/* Configuration keys that say where a run listened and wrote, how long it
 * stayed, and where its files were read from (their contents are in
 * "resolved"): not what it measured. */
static const char *const diff_config_ignored[] = {
    "listen", "http", "out", "linger", "auth", "runs", "rpc_timeout",
    "data_config_path", "model_config_path", "trainer_config_path", "server_config_path",
};

static bool diff_config_matters(const char *key)
{
    for (size_t i = 0; i < sizeof diff_config_ignored / sizeof *diff_config_ignored; i++)
        if (strcmp(key, diff_config_ignored[i]) == 0)
            return false;
    return true;
}

/* The configuration's differences that matter, "key: A -> B" a line; an
 * object's by the dotted path of each differing value
 * ("resolved.trainer.bucket_cap_mb: 25 -> 4"). */
static json_t *diff_config_lines(json_t *ca, json_t *cb)
{
    json_t *lines = json_array();
    if (!lines || !json_is_object(ca) || !json_is_object(cb))
        return lines;
    keyset keys = {0};
    if (keyset_add_object(&keys, ca) == 0 && keyset_add_object(&keys, cb) == 0) {
        keyset_finish(&keys, cmp_str);
        for (size_t i = 0; i < keys.n; i++) {
            if (!diff_config_matters(keys.v[i]))
                continue;
            char key[256];
            text_escape(keys.v[i], key, sizeof key);
            env_compare(key, json_object_get(ca, keys.v[i]), json_object_get(cb, keys.v[i]), lines);
        }
    }
    keyset_free(&keys);
    return lines;
}

/* The configuration keys whose values differ (diff_config_lines). */
static void diff_configuration(FILE *out, json_t *ca, json_t *cb)
{
    if (!json_is_object(ca) || !json_is_object(cb))
        return;
    json_t *lines = diff_config_lines(ca, cb);
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l)
        fprintf(out, "%s  %s\n", i == 0 ? "configuration differences:\n" : "", json_string_value(l));
    if (json_array_size(lines) == 0)
        fprintf(out, "configuration: same\n");
    fprintf(out, "(not compared: listen, http, out, linger, auth, runs, rpc_timeout and the configuration files' "
                 "paths)\n");
    json_decref(lines);
}

/* The DDP + RPC benchmark's RPC pattern of a result (its ddp_rpc), or NULL
 * when it has none: a result written before the pattern existed ran
 * psbench's. */
static const char *diff_rpc_pattern_of(json_t *doc)
{
    json_t *d = json_object_get(doc, "ddp_rpc");
    if (!d)
        return NULL;
    const char *p = json_string_value(json_object_get(d, "rpc_pattern"));
    return p ? p : "psbench (a result from before rpc_pattern: psbench's way)";
}

/* Runs of the DDP + RPC benchmark in different RPC patterns differ in what
 * they measure (trainer/hybrid.h): said before any figure, never left to
 * the configuration's details. */
static void diff_rpc_pattern(FILE *out, json_t *a, json_t *b)
{
    const char *pa = diff_rpc_pattern_of(a), *pb = diff_rpc_pattern_of(b);
    if (!pa && !pb)
        return;
    if (pa && pb && strcmp(pa, pb) == 0)
        fprintf(out, "DDP + RPC rpc_pattern: %s (both)\n", pa);
    else
        fprintf(out, "DDP + RPC rpc_pattern differs: %s -> %s (the runs measure different patterns)\n",
                pa ? pa : "-", pb ? pb : "-");
}

/* ---- environments -------------------------------------------------------- */

/* Keys of an environment that differ between any two runs by nature. */
static bool env_volatile(const char *path) { return strcmp(path, "finished_at") == 0; }

/* Every leaf of two environments by its path ("blas.core"), appended to
 * lines as "path: A -> B" where a and b differ. Arrays and
 * scalars are leaves (compared whole, shown compact). */
static void env_compare(const char *prefix, json_t *a, json_t *b, json_t *lines)
{
    if (json_is_object(a) && json_is_object(b)) {
        keyset keys = {0};
        if (keyset_add_object(&keys, a) == 0 && keyset_add_object(&keys, b) == 0) {
            keyset_finish(&keys, cmp_str);
            for (size_t i = 0; i < keys.n; i++) {
                /* A key as the node sent it (values are shown as JSON,
                 * escaped): escaped for the terminal (shared/text.h). */
                char path[512], key[256];
                text_escape(keys.v[i], key, sizeof key);
                snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key);
                env_compare(path, json_object_get(a, keys.v[i]), json_object_get(b, keys.v[i]), lines);
            }
        }
        keyset_free(&keys);
        return;
    }
    if ((!a && !b) || (a && b && json_equal(a, b)) || env_volatile(prefix))
        return;
    char *sa = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char *sb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char line[1400];
    snprintf(line, sizeof line, "%s: %.600s -> %.600s", prefix, sa ? sa : "-", sb ? sb : "-");
    json_array_append_new(lines, json_string(line));
    free(sa);
    free(sb);
}

/* The differences of one environment pair, as an array of lines. */
static json_t *env_lines(json_t *a, json_t *b)
{
    json_t *lines = json_array();
    if (lines)
        env_compare("", a, b, lines);
    return lines;
}

static void env_print(FILE *out, int *shown, const char *who, json_t *lines)
{
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        if (!(*shown)++)
            fprintf(out, "environment differences (what the runs computed with):\n");
        fprintf(out, "  %s: %s\n", who, json_string_value(l));
    }
}

/* The environment of a node of `role` ("trainers", "servers") and rank r
 * in a results document, or NULL. */
static json_t *env_of(json_t *doc, const char *role, size_t r)
{
    json_t *arr = json_object_get(doc, role);
    size_t i;
    json_t *n;
    json_array_foreach(arr, i, n) {
        json_t *rank = json_object_get(n, "rank");
        if (json_is_integer(rank) && (size_t)json_integer_value(rank) == r)
            return json_object_get(n, "environment");
    }
    return NULL;
}

/* The ranks a role has in either document: one past the highest. */
static size_t env_ranks(json_t *a, json_t *b, const char *role)
{
    size_t top = 0;
    json_t *docs[2] = {a, b};
    for (int d = 0; d < 2; d++) {
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(docs[d], role), i, n) {
            json_t *rank = json_object_get(n, "rank");
            if (json_is_integer(rank) && json_integer_value(rank) >= 0 && (size_t)json_integer_value(rank) >= top)
                top = (size_t)json_integer_value(rank) + 1;
        }
    }
    return top;
}

/* Environment differences, before any figure: the master's host, then
 * each role's nodes — once for the role when every node of it differs
 * alike (all trainers moved to another BLAS), else node by node. */
static void diff_environment(FILE *out, json_t *a, json_t *b)
{
    int shown = 0;
    json_t *ea = json_object_get(a, "environment"), *eb = json_object_get(b, "environment");
    json_t *lines = env_lines(ea, eb);
    env_print(out, &shown, "master", lines);
    json_decref(lines);
    static const char *const roles[] = {"servers", "trainers"};
    bool recorded = false;
    for (int k = 0; k < 2; k++) {
        size_t nr = env_ranks(a, b, roles[k]);
        json_t *per = json_array();
        bool alike = true;
        for (size_t r = 0; r < nr; r++) {
            json_t *na = env_of(a, roles[k], r), *nb = env_of(b, roles[k], r);
            recorded |= na || nb;
            json_t *l = env_lines(na, nb);
            if (r > 0 && !json_equal(l, json_array_get(per, 0)))
                alike = false;
            json_array_append_new(per, l);
        }
        char who[64];
        if (nr > 1 && alike) {
            snprintf(who, sizeof who, "every %.*s (%zu)", (int)strlen(roles[k]) - 1, roles[k], nr);
            env_print(out, &shown, who, json_array_get(per, 0));
        } else {
            for (size_t r = 0; r < nr; r++) {
                snprintf(who, sizeof who, "%.*s %zu", (int)strlen(roles[k]) - 1, roles[k], r);
                env_print(out, &shown, who, json_array_get(per, r));
            }
        }
        json_decref(per);
    }
    if (!shown)
        fprintf(out, recorded || ea || eb ? "environment: same\n" : "environment: not recorded\n");
}

/* ---- how each run ended ----------------------------------------------------- */

/* Whether a results document is of a run that did not finish: "phase"
 * other than "done" (results.json says "done" or "failed"; a file
 * without it, from before it was written, counts as finished). */
static bool diff_unfinished(json_t *doc)
{
    const char *phase = json_string_value(json_object_get(doc, "phase"));
    return phase && strcmp(phase, "done") != 0;
}

/* "is a failed run: ERROR" (or "is not a finished run (phase 'x')") into buf. */
static void diff_unfinished_line(json_t *doc, char *buf, size_t len)
{
    const char *phase = json_string_value(json_object_get(doc, "phase"));
    const char *error = json_string_value(json_object_get(doc, "error"));
    if (strcmp(phase, "failed") == 0)
        snprintf(buf, len, "is a failed run: %.900s", error ? error : "(no reason recorded)");
    else
        snprintf(buf, len, "is not a finished run (phase '%.64s')", phase);
}

/* The runs' states and warnings, before anything else: a failed run's
 * figures stop where it failed, a run with warnings went on past them. */
static void diff_states(FILE *out, const char *const *files, json_t *const *docs)
{
    static const char *const who[] = {"A", "B"};
    for (int d = 0; d < 2; d++) {
        if (diff_unfinished(docs[d])) {
            char line[1024];
            diff_unfinished_line(docs[d], line, sizeof line);
            fprintf(out, "%s (%s) %s\n", who[d], files[d], line);
        }
    }
    for (int d = 0; d < 2; d++) {
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(docs[d], "warnings"), i, w)
            if (json_is_string(w))
                fprintf(out, "%s: warning: %s\n", who[d], json_string_value(w));
    }
}

/* ---- comparable? ------------------------------------------------------------- */

/* How many values of the environments differ: the master's, and every
 * node's (diff_environment shows them). */
static size_t diff_env_count(json_t *a, json_t *b)
{
    json_t *l = env_lines(json_object_get(a, "environment"), json_object_get(b, "environment"));
    size_t n = json_array_size(l);
    json_decref(l);
    static const char *const roles[] = {"servers", "trainers"};
    for (int k = 0; k < 2; k++)
        for (size_t r = 0; r < env_ranks(a, b, roles[k]); r++) {
            l = env_lines(env_of(a, roles[k], r), env_of(b, roles[k], r));
            n += json_array_size(l);
            json_decref(l);
        }
    return n;
}

/* Whether the two runs can be compared, said first on out (NULL: only
 * the check): runs of different models (a DummyModel against a
 * HybridModel) measure different workloads and are refused unless --force
 * (true: refused, said on err); else what differs, by key, and whether
 * the environments do. */
static bool diff_verdict(FILE *out, FILE *err, const char *const *files, json_t *a, json_t *b, bool force)
{
    json_t *ca = json_object_get(a, "configuration"), *cb = json_object_get(b, "configuration");
    const char *ma = json_string_value(json_object_get(ca, "model"));
    const char *mb = json_string_value(json_object_get(cb, "model"));
    char shown_a[128] = "", shown_b[128] = "";
    if (ma && mb && strcmp(ma, mb) != 0) {
        text_escape(ma, shown_a, sizeof shown_a);
        text_escape(mb, shown_b, sizeof shown_b);
        if (!force) {
            fprintf(err, "psbench-master diff: %s and %s are not comparable: model %s -> %s (different workloads; "
                    "--force compares them anyway)\n", files[0], files[1], shown_a, shown_b);
            return true;
        }
        if (out)
            fprintf(out, "comparable: no (model %s -> %s: different workloads), compared as --force asks\n", shown_a,
                    shown_b);
        return false;
    }
    if (!out) /* only the check, before anything is printed */
        return false;
    json_t *lines = diff_config_lines(ca, cb);
    size_t nenv = diff_env_count(a, b);
    if (!json_is_object(ca) || !json_is_object(cb))
        fprintf(out, "comparable: not known (a configuration is not recorded)");
    else if (json_array_size(lines) == 0)
        fprintf(out, "comparable: yes, the same configuration");
    else {
        /* The keys that differ, by name: what the comparison measures. */
        fprintf(out, "comparable: yes, configurations differ in");
        size_t i;
        json_t *l;
        json_array_foreach(lines, i, l) {
            const char *t = json_string_value(l);
            fprintf(out, "%s %.*s", i ? "," : "", (int)strcspn(t, ":"), t);
        }
    }
    fprintf(out, "; %s\n", nenv ? "environments differ (below): the difference may be theirs"
                                 : "no environment differs");
    json_decref(lines);
    return false;
}

/* ---- the headline and its noise --------------------------------------------- */

/* The headline figures compared ("shares.KEY": a share). */
static const char *const diff_hl_figures[] = {
    "step_p50_ms", "step_p90_ms", "samples_per_s", "shares.exposed_comm", "effective_gb_per_s",
};
#define DIFF_NHL (sizeof diff_hl_figures / sizeof diff_hl_figures[0])

/* The "all" row of a headline's or a summary's trainers. */
static json_t *diff_all_row(json_t *o)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(o, "trainers"), i, row) {
        const char *t = json_string_value(json_object_get(row, "trainer"));
        if (t && strcmp(t, "all") == 0)
            return row;
    }
    return NULL;
}

/* The summary of the series a results.json is a run of (--runs: its
 * folder's parent holds summary.json, master/summary.h), when it summed up
 * two runs or more; else NULL. */
static json_t *diff_series_summary(const char *file, json_t *doc)
{
    json_t *runs = json_object_get(doc, "runs");
    if (!json_is_integer(runs) || json_integer_value(runs) == 1)
        return NULL;
    char path[4200];
    const char *slash = strrchr(file, '/');
    int dlen = slash ? (int)(slash - file) : 0;
    /* DIR/run-NNN/results.json -> DIR/summary.json */
    snprintf(path, sizeof path, "%.*s%s../summary.json", dlen, file, slash ? "/" : "");
    char why[256];
    json_error_t je;
    json_t *s;
    if (userpath_load_json(path, 0, &s, &je, why, sizeof why) < 0)
        return NULL;
    if (!s || json_integer_value(json_object_get(s, "runs")) < 2) {
        json_decref(s);
        return NULL;
    }
    /* A folder reused by a later series keeps older run-NNN folders: the
     * summary must hold this run's step p50 among its values. */
    json_t *mine = json_object_get(diff_all_row(json_object_get(doc, "headline")), "step_p50_ms");
    json_t *values = json_object_get(json_object_get(diff_all_row(s), "step_p50_ms"), "values");
    bool found = false;
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v) found = found || (json_is_number(mine) && json_is_number(v) &&
                                                       json_number_value(v) == json_number_value(mine));
    if (!found) {
        json_decref(s);
        return NULL;
    }
    return s;
}

/* A figure of a run's headline (all trainers), NAN when not known. */
static double diff_hl_value(json_t *doc, const char *fig)
{
    json_t *row = diff_all_row(json_object_get(doc, "headline"));
    json_t *v = strncmp(fig, "shares.", 7) == 0 ? json_object_get(json_object_get(row, "shares"), fig + 7)
                                                 : json_object_get(row, fig);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The headline of both runs, all trainers: a side with a series' summary
 * shows its mean and 95% interval; where both have one, a difference whose
 * intervals overlap is within noise. */
static void diff_headline(FILE *out, const char *const *files, json_t *a, json_t *b)
{
    json_t *sum[2] = {diff_series_summary(files[0], a), diff_series_summary(files[1], b)};
    json_t *docs[2] = {a, b};
    bool any = diff_all_row(json_object_get(a, "headline")) || diff_all_row(json_object_get(b, "headline"));
    if (any || sum[0] || sum[1]) {
        fprintf(out, "headline, all trainers (a series: its mean [95%% interval] over its runs):\n");
        fprintf(out, "  %-20s %28s %28s %9s  %s\n", "figure", "A", "B", "change", "noise");
    }
    for (size_t f = 0; (any || sum[0] || sum[1]) && f < DIFF_NHL; f++) {
        double v[2], lo[2] = {NAN, NAN}, hi[2] = {NAN, NAN};
        char cell[2][64];
        bool scale100 = strncmp(diff_hl_figures[f], "shares.", 7) == 0;
        for (int d = 0; d < 2; d++) {
            json_t *c = json_object_get(diff_all_row(sum[d]), diff_hl_figures[f]);
            if (c) {
                json_t *m = json_object_get(c, "mean"), *ci = json_object_get(c, "ci95");
                v[d] = json_is_number(m) ? json_number_value(m) : NAN;
                if (json_is_number(json_array_get(ci, 0)) && json_is_number(json_array_get(ci, 1))) {
                    lo[d] = json_number_value(json_array_get(ci, 0));
                    hi[d] = json_number_value(json_array_get(ci, 1));
                }
            } else {
                v[d] = diff_hl_value(docs[d], diff_hl_figures[f]);
            }
            double k = scale100 ? 100 : 1;
            if (!isfinite(v[d]))
                snprintf(cell[d], sizeof cell[d], "-");
            else if (isfinite(lo[d]))
                snprintf(cell[d], sizeof cell[d], "%.4g [%.4g, %.4g]", v[d] * k, lo[d] * k, hi[d] * k);
            else
                snprintf(cell[d], sizeof cell[d], "%.4g", v[d] * k);
        }
        char change[32] = "-";
        if (isfinite(v[0]) && isfinite(v[1]) && v[0] != 0)
            snprintf(change, sizeof change, "%+.1f%%", 100 * (v[1] - v[0]) / fabs(v[0]));
        const char *noise = "-";
        if (isfinite(lo[0]) && isfinite(lo[1]))
            noise = lo[0] <= hi[1] && lo[1] <= hi[0] ? "within noise" : "beyond noise";
        fprintf(out, "  %-20s %28s %28s %9s  %s\n", diff_hl_figures[f], cell[0], cell[1], change, noise);
    }
    if (!sum[0] && !sum[1])
        fprintf(out, "one run each: no noise estimate (a --runs N series on both sides gives one)\n");
    else if (!sum[0] || !sum[1])
        fprintf(out, "%s is one run (no summary.json of its series beside it): no noise estimate\n",
                sum[0] ? "B" : "A");
    else
        fprintf(out, "noise: within noise where the two 95%% intervals overlap (%lld and %lld runs)\n",
                (long long)json_integer_value(json_object_get(sum[0], "runs")),
                (long long)json_integer_value(json_object_get(sum[1], "runs")));
    json_decref(sum[0]);
    json_decref(sum[1]);
}

/* Close the in-memory CSV and write it to path whole: a temporary file in
 * the same directory, fsync, rename (afile_write). 0, or 1 with the error
 * (the path, the errno by name and text) on err. */
static int diff_write_csv(FILE *csv, char **text, size_t *len, const char *path, FILE *err)
{
    char msg[4400];
    if (afile_write_memstream(path, csv, text, len, msg, sizeof msg) < 0) {
        fprintf(err, "psbench-master diff: %s\n", msg);
        return 1;
    }
    return 0;
}

/* An argument that is none of diff's options: "--", a file, or an
 * unknown option ("unknown option --forc: did you mean --force?"). */
static int diff_other_arg(const char *a, void *settings, char *err, size_t errlen)
{
    diff_args *d = settings;
    text_shown shown;
    if (!d->files_only && strcmp(a, "--") == 0) {
        d->files_only = true;
        return OPTS_REST;
    }
    if (!d->files_only && a[0] == '-' && a[1] != '\0') {
        /* Whole names only, as every psbench option; a slip gets the name
         * it was near. */
        const char *near = NULL;
        size_t len = strcspn(a + 2, "=");
        if (a[1] == '-')
            (void)opts_is_long_name(&diff_table, a + 2, len, NULL, 0, &near);
        if (near)
            errbuf_set(err, errlen, "unknown option --%s: did you mean --%s?", text_show_n(a + 2, len, 0, &shown),
                       near);
        else
            errbuf_set(err, errlen, "unknown option %s", text_show(a, '\'', &shown));
        return -1;
    }
    if (d->nfiles == 2) {
        errbuf_set(err, errlen, "too many arguments (%s): give two results.json files", text_show(a, '\'', &shown));
        return -1;
    }
    d->files[d->nfiles++] = a;
    return 0;
}

/* The command line (diff_table). -1 to go on, else the exit code: 0
 * after --help, 2 for a usage error (said on err, with the usage). */
static int diff_parse_args(int argc, char **argv, diff_args *d, FILE *out, FILE *err)
{
    char msg[512];
    int rc = opts_init(&diff_table, d, msg, sizeof msg);
    if (rc == 0)
        rc = opts_parse_args(&diff_table, argc, argv, d, diff_other_arg, msg, sizeof msg);
    if (rc == OPTS_HELP) {
        diff_usage(out);
        return 0;
    }
    if (rc == 0 && d->nfiles != 2) {
        snprintf(msg, sizeof msg, "give two results.json files");
        rc = -1;
    }
    if (rc != 0) {
        fprintf(err, "psbench-master diff: %s\n", msg);
        diff_usage(err);
        return 2;
    }
    if (d->csv_path && !*d->csv_path) {
        fprintf(err, "psbench-master diff: --csv needs a file name\n");
        return 2;
    }
    /* The output first: a comparison must not end with "cannot write". */
    char why[4400];
    if (d->csv_path && userpath_check_out_file(d->csv_path, why, sizeof why) < 0) {
        fprintf(err, "psbench-master diff: --csv %s: %s\n", d->csv_path, why);
        return 2;
    }
    return -1;
}

/* A failed run is said first; compared only when asked. true: one was. */
static bool diff_refuse_unfinished(const diff_args *d, json_t *const docs[2], FILE *err)
{
    for (int i = 0; i < 2 && !d->allow_failed; i++) {
        if (diff_unfinished(docs[i])) {
            char line[1024];
            diff_unfinished_line(docs[i], line, sizeof line);
            fprintf(err, "psbench-master diff: %s %s (its figures stop where it ended; --allow-failed compares "
                    "it anyway)\n", d->files[i], line);
            return true;
        }
    }
    return false;
}

/* Every group's table: trainer, server, then any other group by name.
 * 0, or 1 (out of memory, said on err). */
static int diff_groups(FILE *out, FILE *csv, json_t *a, json_t *b, FILE *err)
{
    json_t *ga = json_object_get(a, "groups"), *gb = json_object_get(b, "groups");
    keyset groups = {0};
    int rc = 0;
    if (keyset_add_object(&groups, ga) < 0 || keyset_add_object(&groups, gb) < 0) {
        fprintf(err, "psbench-master diff: out of memory\n");
        rc = 1;
    } else {
        keyset_finish(&groups, cmp_str);
        static const char *const first[] = {"trainer", "server"};
        for (size_t i = 0; i < 2; i++)
            if (json_object_get(ga, first[i]) || json_object_get(gb, first[i]))
                diff_group(out, csv, first[i], json_object_get(ga, first[i]), json_object_get(gb, first[i]));
        for (size_t i = 0; i < groups.n; i++)
            if (strcmp(groups.v[i], "trainer") != 0 && strcmp(groups.v[i], "server") != 0)
                diff_group(out, csv, groups.v[i], json_object_get(ga, groups.v[i]),
                           json_object_get(gb, groups.v[i]));
    }
    keyset_free(&groups);
    return rc;
}

int diff_main(int argc, char **argv, FILE *out, FILE *err)
{
    diff_args d = {0};
    int rc = diff_parse_args(argc, argv, &d, out, err);
    if (rc >= 0)
        return rc;
    json_t *a = diff_load(d.files[0], err);
    if (!a)
        return 1;
    json_t *b = diff_load(d.files[1], err);
    json_t *docs[2] = {a, b};
    if (!b || diff_refuse_unfinished(&d, docs, err) || diff_verdict(NULL, err, d.files, a, b, d.force)) {
        json_decref(a);
        json_decref(b);
        return 1;
    }
    /* The CSV is built in memory and written whole at the end (afile_write):
     * a full disk never leaves a cut-short file that looks like a diff. */
    FILE *csv = NULL;
    char *csv_text = NULL;
    size_t csv_len = 0;
    if (d.csv_path) {
        csv = open_memstream(&csv_text, &csv_len);
        if (!csv) {
            fprintf(err, "psbench-master diff: cannot write %s: out of memory\n", d.csv_path);
            json_decref(a);
            json_decref(b);
            return 1;
        }
        fprintf(csv, "group,rank,metric,stat,a,b,b_minus_a,change_pct\n");
    }

    diff_states(out, d.files, docs);
    diff_verdict(out, err, d.files, a, b, d.force);
    fprintf(out, "A: %s\nB: %s\n", d.files[0], d.files[1]);
    diff_headline(out, d.files, a, b);
    fprintf(out, "values in ms; B-A and change are B relative to A (negative: B is faster)\n");
    diff_configuration(out, json_object_get(a, "configuration"), json_object_get(b, "configuration"));
    diff_rpc_pattern(out, a, b);
    diff_environment(out, a, b);
    rc = diff_groups(out, csv, a, b, err);
    if (csv && rc == 0)
        rc = diff_write_csv(csv, &csv_text, &csv_len, d.csv_path, err);
    else if (csv)
        fclose(csv);
    free(csv_text);
    json_decref(a);
    json_decref(b);
    return rc;
}
