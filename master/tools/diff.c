/* diff.c — compare two results.json files (see diff.h): the command line,
 * the files, whether the runs are comparable and what differs besides the
 * figures (diff_figures.c); diff_int.h says how the parts stand. */
#include "master/tools/diff.h"
#include "master/tools/diff_int.h"
#include "shared/atomicfile.h"
#include "shared/log.h"
#include "shared/opts.h"
#include "shared/userpath.h"
#include "shared/text.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
             "intervals overlap), then what B costs training against A: each trainer's\n"
             "loss per epoch in both with B-A, and the relative L2 distance\n"
             "||B-A||/||A|| of the final parameters (trainer 0's, exact, from the\n"
             "params.bin beside each results.json; \"not comparable: WHY\" where a run\n"
             "has none or the counts differ), then where their configurations (not\n"
             "listen, http, out, ...) and environments differ (what each node computed with:\n"
             "CPU, BLAS and its kernels, the server's folds, compiler, kernel), then per\n"
             "group and rank every metric's count, mean, p50, p90, p99 and max in ms,\n"
             "with B-A and the change in percent of A (negative: B is faster).\n"
             "A run that failed is said first, and not compared unless --allow-failed:\n"
             "its figures stop where it failed (and may be the warm-up pass's).\n"
             "A run's warnings (e.g. a loss that diverged under --allow-divergence)\n"
             "are shown before the figures.\n"},
    {.kind = OPT_STRING, .name = "csv", .meta = "FILE", .to = DIFF_AT(csv_path), .missing = "needs a file name",
     .help = "also write the rows as CSV (checked before comparing:\n"
             "its folder is made, the name must be free for a file);\n"
             "the training rows: group training, metric loss_epoch_N\n"
             "(stat mean) and final_params (stats l2_norm, and\n"
             "relative_l2_distance in b_minus_a)"},
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

/* ---- configurations ------------------------------------------------------ */

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
        keyset_finish(&keys, keyset_cmp_str);
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
            keyset_finish(&keys, keyset_cmp_str);
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
    /* Whole names only, as every psbench option; a slip gets the name
     * it was near. */
    if (!d->files_only && a[0] == '-' && a[1] != '\0')
        return opts_refuse_unknown(&diff_table, a, err, errlen);
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
    diff_training(out, csv, d.files, a, b);
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
