/* test_opts.c — the three binaries' option tables (shared/opts.h;
 * server/opts.c, trainer/opts.c, master/opts.c): every option of every
 * table parsed from each spelling (long, alias, '_' for '-', --opt=v and
 * --opt v, short) to the same settings, each refusing a bad value with its
 * one-line error naming the option as spelled, the defaults, the options
 * the binaries share behaving the same in all three, and the token's
 * precedence; opts_parse_args, the subcommands' parser (psbench-master
 * sweep and diff: a table's options among arguments it hands on). The
 * --help texts themselves: tests/golden (help_golden). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/config.h"
#include "master/opts.h"
#include "shared/opts.h"
#include "shared/cli.h"
#include "shared/shm.h"
#include "tests/unit/test_opts.h"

/* ---- the three binaries ----------------------------------------------------- */

static int master_init(void *s)
{
    return config_init(s);
}

static void master_fini(void *s)
{
    config_free(s);
}

static void master_extra(const void *s, char *buf, size_t len)
{
    const run_config *c = s;
    char *j = c->trainer_flags ? json_dumps(c->trainer_flags, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *k = c->set_flags ? json_dumps(c->set_flags, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    snprintf(buf, len, "listen=%s trainer_flags=%s set=%s", c->listen ? c->listen : "-", j ? j : "-", k ? k : "-");
    free(j);
    free(k);
}

static binary binaries[3];
#define NBIN (sizeof binaries / sizeof binaries[0])

static void *settings_new(const binary *b)
{
    void *s = calloc(1, b->size);
    assert_non_null(s);
    assert_int_equal(b->init(s), 0);
    return s;
}

static void settings_free(const binary *b, void *s)
{
    if (b->fini)
        b->fini(s);
    free(s);
}

/* Every option field, given flag and extra as text: two parses that
 * reach the same settings have the same fingerprint. */
static void fingerprint(const binary *b, const void *s, char *buf, size_t len)
{
    size_t n = 0;
    opt_spec o;
    buf[0] = '\0';
    for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
        if (o.kind == OPT_TEXT)
            continue;
        const opt_field *f[] = {&o.to, &o.given[0], &o.given[1]};
        for (size_t k = 0; k < 3; k++) {
            if (!f[k]->off1)
                continue;
            char v[600];
            opts_field_text(f[k], s, v, sizeof v);
            n += (size_t)snprintf(buf + n, len - n, "%s.%zu=%s;", o.name, k, v);
            assert_true(n < len);
        }
    }
    char extra[1024];
    b->extra(s, extra, sizeof extra);
    n += (size_t)snprintf(buf + n, len - n, "%s", extra);
    assert_true(n < len);
}

/* Parse the arguments (after the program's name) into fresh settings:
 * opts_parse's result, the fingerprint and the error. */
static int parse_opts(const binary *b, const char *const *args, char *fp, size_t fplen, char *err, size_t errlen)
{
    char *argv[8];
    int argc = 0;
    argv[argc++] = strdup(b->name);
    for (size_t i = 0; args[i]; i++)
        argv[argc++] = strdup(args[i]); /* opts_parse rewrites '_' in place */
    argv[argc] = NULL;
    void *s = settings_new(b);
    err[0] = '\0';
    int rc = opts_parse(b->table(), argc, argv, s, err, errlen);
    if (fp)
        fingerprint(b, s, fp, fplen);
    settings_free(b, s);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return rc;
}

static int parse1(const binary *b, const char *a0, const char *a1, char *err, size_t errlen)
{
    const char *args[] = {a0, a1, NULL};
    return parse_opts(b, args, NULL, 0, err, errlen);
}

static void assert_has(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("expected \"%s\" in \"%s\"\n", needle, hay);
        fail();
    }
}

/* ---- each option from each spelling ---------------------------------------- */

/* A value the option takes, other than its default where it can be. */
static const char *good_value(const opt_spec *o, char *buf, size_t len)
{
    if (o->example)
        return o->example;
    switch (o->kind) {
    case OPT_U64: snprintf(buf, len, "%" PRIu64, o->max > o->min ? o->max - 1 : o->min); return buf;
    case OPT_SECONDS: return "2.5";
    case OPT_STRING: return "value-x";
    case OPT_HOSTPORT: return "127.0.0.1:4242";
    case OPT_CHOICE: {
        size_t n = 0;
        while (o->choices[n + 1])
            n++;
        return o->choices[n];
    }
    default: return NULL;
    }
}

/* "--long-name" with '_' for '-'. */
static void underscored(const char *dashed, char *buf, size_t len)
{
    snprintf(buf, len, "%s", dashed);
    for (char *p = buf + 2; *p && *p != '='; p++)
        if (*p == '-')
            *p = '_';
}

/* Every spelling of o with value v: each parses to the same settings
 * (the first's); the value is where o says. */
static void check_spellings(const binary *b, const opt_spec *o, const char *v)
{
    const char *names[8] = {o->name};
    size_t nn = 1;
    for (size_t a = 0; o->aliases && o->aliases[a]; a++)
        names[nn++] = o->aliases[a];
    char first[8192] = "", fp[8192], err[512];
    int want = o->action ? o->action : OPTS_OK;
    for (size_t i = 0; i < nn; i++) {
        char dash[96], eq[160], us[96], useq[160];
        snprintf(dash, sizeof dash, "--%s", names[i]);
        snprintf(eq, sizeof eq, "--%s=%s", names[i], v ? v : "");
        underscored(dash, us, sizeof us);
        underscored(eq, useq, sizeof useq);
        const char *forms[4][3] = {{dash, v, NULL}, {us, v, NULL}, {eq, NULL, NULL}, {useq, NULL, NULL}};
        size_t nforms = v ? 4 : 2; /* an option without a value has no =v form */
        for (size_t f = 0; f < nforms; f++) {
            int rc = parse_opts(b, forms[f], fp, sizeof fp, err, sizeof err);
            if (rc != want)
                print_error("%s %s %s: %d, %s\n", b->name, forms[f][0], forms[f][1] ? forms[f][1] : "", rc, err);
            assert_int_equal(rc, want);
            if (!first[0])
                snprintf(first, sizeof first, "%s", fp);
            else
                assert_string_equal(fp, first);
        }
    }
    if (o->letter) {
        char shortopt[3] = {'-', o->letter, '\0'};
        const char *args[] = {shortopt, v, NULL};
        assert_int_equal(parse_opts(b, args, fp, sizeof fp, err, sizeof err), want);
        assert_string_equal(fp, first);
    }
}

/* The value reached o's field as its kind stores it; a custom option
 * changed the settings (its example is not the default) and set its
 * given flags. */
static void check_value(const binary *b, const opt_spec *o, const char *v)
{
    void *s = settings_new(b);
    char before[8192], after[8192], err[512];
    fingerprint(b, s, before, sizeof before);
    char flag[96];
    snprintf(flag, sizeof flag, "--%s", o->name);
    if (opts_apply(o, flag, v, s, err, sizeof err) < 0)
        print_error("%s %s %s: %s\n", b->name, flag, v ? v : "", err);
    assert_int_equal(opts_apply(o, flag, v, s, err, sizeof err), 0);
    fingerprint(b, s, after, sizeof after);
    for (int g = 0; g < 2; g++)
        if (o->given[g].off1)
            assert_true(*(bool *)((char *)s + o->given[g].off1 - 1));
    char got[600] = "", want[600] = "";
    if (o->to.off1)
        opts_field_text(&o->to, s, got, sizeof got);
    if (o->parse || !o->to.off1) {
        if (!o->action && o->to.off1 + o->given[0].off1 > 0 && strcmp(before, after) == 0)
            print_error("%s %s %s changed nothing\n", b->name, flag, v ? v : "");
        assert_true(o->action || (!o->to.off1 && !o->given[0].off1) || strcmp(before, after) != 0);
    } else if (o->kind == OPT_FLAG) {
        assert_string_equal(got, o->negate ? "false" : "true");
    } else if (o->kind == OPT_SECONDS) {
        snprintf(want, sizeof want, "%.17g", strtod(v, NULL));
        assert_string_equal(got, want);
    } else {
        assert_string_equal(got, v); /* numbers as given: no sizes in the values used */
    }
    settings_free(b, s);
}

static void test_every_option_every_spelling(void **state)
{
    (void)state;
    for (size_t bi = 0; bi < NBIN; bi++) {
        const binary *b = &binaries[bi];
        opt_spec o;
        size_t n = 0;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
            if (o.kind == OPT_TEXT)
                continue;
            char buf[64];
            const char *v = o.kind == OPT_FLAG ? NULL : good_value(&o, buf, sizeof buf);
            assert_true(o.kind == OPT_FLAG || v);
            check_spellings(b, &o, v);
            check_value(b, &o, v);
            n++;
        }
        assert_true(n >= 25); /* the tables are whole: 33, 27 and 47 options */
    }
}

/* ---- bad values ------------------------------------------------------------ */

/* A custom option's bad value and the whole error it gets. */
static const struct {
    const char *bin, *opt, *bad, *err;
} custom_bad[] = {
    {"psbench-server", "--listen", "nohost", "--listen: "},
    {"psbench-server", "--kind", "sum", "--kind: 'sum' is not average, average-batch, batch-update or embedding"},
    {"psbench-server", "--lr", "-1", "--lr: '-1' is not a number in 0..1e6"},
    /* Numbers are decimal and checked in the type they are used in (issue 39). */
    {"psbench-server", "--lr", "0x1", "--lr: '0x1' is not a number in 0..1e6"},
    {"psbench-server", "--lr", " 0.1", "--lr: ' 0.1' is not a number in 0..1e6"},
    {"psbench-server", "--lr", "inf", "--lr: 'inf' is not a number in 0..1e6"},
    {"psbench-server", "--lr", "1e-46", "--lr: 1e-46: it is 0 as a float, whose smallest normal number is 1.17549e-38"},
    {"psbench-server", "--lr", "1e-40", "--lr: 1e-40: it is 0 as a float, whose smallest normal number is 1.17549e-38"},
    {"psbench-server", "--momentum", "2e6", "--momentum: '2e6' is not a number in 0..1e6"},
    {"psbench-server", "--momentum", "1e-400", "--momentum: '1e-400' is not a number in 0..1e6"},
    {"psbench-server", "--part", "2/2", "--part: '2/2' is not P/N with 0 <= P < N <= 65536"},
    {"psbench-server", "--part", " 0/2", "--part: ' 0/2' is not P/N with 0 <= P < N <= 65536"},
    {"psbench-server", "--part", "0/0x2", "--part: '0/0x2' is not P/N with 0 <= P < N <= 65536"},
    {"psbench-server", "--part", "-1/2", "--part: '-1/2' is not P/N with 0 <= P < N <= 65536"},
    {"psbench-server", "--part", "18446744073709551617/2",
     "--part: '18446744073709551617/2' is not P/N with 0 <= P < N <= 65536"},
    {"psbench-server", "--advertise", "h:1", "--advertise: "},
    {"psbench-server", "--log-level", "loud", "--log-level: 'loud' is not error, warn, info or debug"},
    {"psbench-server", "--transport", "udp", "--transport: 'udp' is not a transport (auto, tcp or shm)"},
    {"psbench-server", "--trace-steps", "5:2", "--trace-steps: '5:2': the first step is after the last"},
    {"psbench-trainer", "--server", "nohost", "--server: "},
    {"psbench-trainer", "--master", "a:1,b:2", "--master: 'a:1,b:2' is one HOST:PORT, not a list"},
    {"psbench-trainer", "--collective-host", "h:1", "--collective-host: "},
    {"psbench-trainer", "--device", "tpu", "--device 'tpu' is not cpu, cuda or cuda:N (N: a GPU's index, 0..255)"},
    {"psbench-trainer", "--log-level", "loud", "--log-level: 'loud' is not error, warn, info or debug"},
    {"psbench-trainer", "--transport", "udp", "--transport: 'udp' is not a transport (auto, tcp or shm)"},
    {"psbench-trainer", "--trace-steps", "5:2", "--trace-steps: '5:2': the first step is after the last"},
    {"psbench-master", "--ddp-hook", "x_hook",
     "--ddp-hook: 'x_hook' is not rpc_hook, allreduce_hook, sparse_rpc_hook or hybrid_hook"},
    {"psbench-master", "--trace-steps", "5:2", "--trace-steps: '5:2': the first step is after the last"},
    {"psbench-master", "--preprocess-data", "x", "--preprocess-data: "},
    {"psbench-master", "--create-criterion", "x", "--create-criterion: "},
    {"psbench-master", "--create-ddp-model", "x", "--create-ddp-model: "},
    {"psbench-master", "--hook-state", "x", "--hook-state: "},
    {"psbench-master", "--compress", "fp8", "--compress: "},
    {"psbench-master", "--compress", "powersgd:0", "--compress: 0 is outside 1..1024"},
    {"psbench-master", "--compress", "fp16:2", "--compress: 'fp16:2': only powersgd takes a :RANK (powersgd:4)"},
    {"psbench-master", "--powersgd-start-iter", "-1", "--powersgd-start-iter: '-1' is not a whole number"},
    {"psbench-master", "--powersgd-min-compression-rate", "x", "--powersgd-min-compression-rate: must be "},
    {"psbench-master", "--powersgd-orthogonalization-epsilon", "2",
     "--powersgd-orthogonalization-epsilon: must be a number in [0, 1], got 2.0"},
    {"psbench-master", "--powersgd-random-seed", "4294967296",
     "--powersgd-random-seed: must be a whole number in 0..4294967295, got 4294967296"},
    {"psbench-master", "--iteration-step", "x", "--iteration-step: "},
    {"psbench-master", "--create-optimizer", "x", "--create-optimizer: "},
    {"psbench-master", "--lr", "fast", "--lr: must be "},
    {"psbench-master", "--bucket-cap-mb", "big", "--bucket-cap-mb: must be a number in (0, 1048576], got 'big'"},
    {"psbench-master", "--bucket-cap-mb", "0x10", "--bucket-cap-mb: must be a number in (0, 1048576], got '0x10'"},
    {"psbench-master", "--bucket-cap-mb", " 16", "--bucket-cap-mb: must be a number in (0, 1048576], got ' 16'"},
    {"psbench-master", "--bucket-cap-mb", "16MB", "--bucket-cap-mb: must be a number in (0, 1048576], got '16MB'"},
    {"psbench-master", "--bucket-cap-mb", "1e-9",
     "--bucket-cap-mb: must be a number in (0, 1048576], got 1e-9 (less than 1 byte, it would be 0)"},
    {"psbench-master", "--lr", "1e-46", "--lr: must be a number in (0, 3.40282346638529e+38], got 1e-46 (it is 0 as a "
     "float, whose smallest normal number is 1.17549e-38)"},
    {"psbench-master", "--lr", "nan", "--lr: must be a number in (0, 3.40282346638529e+38], got 'nan'"},
    {"psbench-master", "--lr", "0x1p-3", "--lr: must be a number in (0, 3.40282346638529e+38], got '0x1p-3'"},
    {"psbench-master", "--set", "trainer.lr= 0.5", "--set: 'trainer.lr= 0.5': the VALUE has blanks around it"},
    {"psbench-master", "--set", "trainer.lr", "--set: 'trainer.lr' is not KIND.KEY=VALUE with KIND trainer, "
     "model, data or server (e.g. trainer.bucket_cap_mb=4)"},
    {"psbench-master", "--set", "optimizer.lr=1", "--set: 'optimizer.lr=1' is not KIND.KEY=VALUE with KIND trainer, "
     "model, data or server (e.g. trainer.bucket_cap_mb=4)"},
    {"psbench-master", "--set", "trainer.=1", "--set: 'trainer.=1' is not KIND.KEY=VALUE with KIND trainer, "
     "model, data or server (e.g. trainer.bucket_cap_mb=4)"},
    {"psbench-master", "--master-addr", "", "--master-addr: needs a non-empty value"},
    {"psbench-master", "--master-port", "70000", "--master-port: 70000 is outside 0..65535"},
    {"psbench-master", "--linger", "-1", "--linger: '-1' is not a positive number of seconds"},
    {"psbench-master", "--linger", "0x0", "--linger: '0x0' is not a positive number of seconds"},
    {"psbench-master", "--master-port", "0x50", "--master-port: '0x50' is not a whole number"},
    {"psbench-master", "--master-port", " 80", "--master-port: ' 80' is not a whole number"},
    {"psbench-master", "--quiet-host", "-1", "--quiet-host: '-1' is not a positive number of seconds"},
    {"psbench-master", "--log-level", "loud", "--log-level: 'loud' is not error, warn, info or debug"},
    {"psbench-master", "--transport", "udp", "--transport: 'udp' is not a transport (auto, tcp or shm)"},
};

static void check_bad(const binary *b, const char *flag, const char *bad, const char *want, bool whole)
{
    char err[512];
    if (parse1(b, flag, bad, err, sizeof err) != -1)
        print_error("%s %s '%s' was taken\n", b->name, flag, bad);
    assert_int_equal(parse1(b, flag, bad, err, sizeof err), -1);
    if (whole)
        assert_string_equal(err, want);
    else if (strncmp(err, want, strlen(want)) != 0) {
        print_error("%s %s '%s': \"%s\" does not start with \"%s\"\n", b->name, flag, bad, err, want);
        fail();
    }
}

/* Each kind's bad values, for every option of that kind, from every
 * spelling: the error names the option as spelled (an alias as itself). */
static void check_bad_values(const binary *b, const opt_spec *o, const char *flag)
{
    char want[512], v[64];
    switch (o->kind) {
    case OPT_U64: {
        const char *what = o->sizes ? "size (a whole number, optionally with K, M or G)" : "whole number";
        /* Decimal only (issue 39): no blanks, no sign, no hex, no junk. */
        const char *nan[] = {"x", "-1", "1.5", "", " 1", "1 ", "+1", "0x10", "1e3", "0b1", "inf"};
        for (size_t i = 0; i < sizeof nan / sizeof nan[0]; i++) {
            snprintf(want, sizeof want, "%s: '%s' is not a %s", flag, nan[i], what);
            check_bad(b, flag, nan[i], want, true);
        }
        /* A control character is shown escaped: the line stays one line. */
        snprintf(want, sizeof want, "%s: '\\t2' is not a %s", flag, what);
        check_bad(b, flag, "\t2", want, true);
        if (o->max < UINT64_MAX) {
            snprintf(v, sizeof v, "%" PRIu64, o->max + 1);
            snprintf(want, sizeof want, "%s: %s is outside %" PRIu64 "..%" PRIu64, flag, v, o->min, o->max);
            check_bad(b, flag, v, want, true);
        }
        if (o->min > 0) {
            snprintf(v, sizeof v, "%" PRIu64, o->min - 1);
            snprintf(want, sizeof want, "%s: %s is outside %" PRIu64 "..%" PRIu64, flag, v, o->min, o->max);
            check_bad(b, flag, v, want, true);
        }
        break;
    }
    case OPT_SECONDS: {
        const char *nan[] = {"x", "0", "-2", "nan", "inf", "0x10", "0x1p3", " 5", "5 ", "5s", "1e-400", "+inf"};
        for (size_t i = 0; i < sizeof nan / sizeof nan[0]; i++) {
            snprintf(want, sizeof want, "%s: '%s' is not a positive number of seconds", flag, nan[i]);
            check_bad(b, flag, nan[i], want, true);
        }
        snprintf(want, sizeof want, "%s: 2e6 s is more than the 1000000 s allowed", flag);
        check_bad(b, flag, "2e6", want, true);
        /* Waits count milliseconds: less than one would be no wait. */
        snprintf(want, sizeof want, "%s: 0.0001 s is less than the 0.001 s psbench can wait (it counts milliseconds)",
                 flag);
        check_bad(b, flag, "0.0001", want, true);
        break;
    }
    case OPT_CHOICE: {
        snprintf(want, sizeof want, "%s: 'bogus' is not ", flag);
        check_bad(b, flag, "bogus", want, false);
        char err[512];
        parse1(b, flag, "bogus", err, sizeof err);
        for (size_t i = 0; o->choices[i]; i++)
            assert_has(err, o->choices[i]);
        break;
    }
    case OPT_HOSTPORT:
        snprintf(want, sizeof want, "%s: ", flag);
        check_bad(b, flag, "nohost", want, false);
        check_bad(b, flag, "h:70000", want, false);
        break;
    case OPT_STRING:
        /* A string the binary keeps a copy of must not be empty. */
        if (o->to.type == OPT_C_STR && !o->parse) {
            snprintf(want, sizeof want, "%s: needs a non-empty value", flag);
            check_bad(b, flag, "", want, true);
        }
        break;
    default: break;
    }
}

static void test_bad_values(void **state)
{
    (void)state;
    size_t custom_seen = 0;
    for (size_t bi = 0; bi < NBIN; bi++) {
        const binary *b = &binaries[bi];
        opt_spec o;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
            if (o.kind == OPT_TEXT)
                continue;
            char flag[96], us[96];
            snprintf(flag, sizeof flag, "--%s", o.name);
            underscored(flag, us, sizeof us);
            /* A flag takes no value, whatever sets it (a custom parser
             * writing a trainer key: --powersgd-batched): none is bad. */
            if (!o.parse || o.kind == OPT_FLAG) {
                check_bad_values(b, &o, flag);
                for (size_t a = 0; o.aliases && o.aliases[a]; a++) {
                    char alias[96];
                    snprintf(alias, sizeof alias, "--%s", o.aliases[a]);
                    check_bad_values(b, &o, alias);
                }
                continue;
            }
            /* A custom parser's bad value is listed above, with its error. */
            bool listed = false;
            for (size_t k = 0; k < sizeof custom_bad / sizeof custom_bad[0]; k++) {
                if (strcmp(custom_bad[k].bin, b->name) != 0 || strcmp(custom_bad[k].opt, flag) != 0)
                    continue;
                const char *want = custom_bad[k].err;
                check_bad(b, flag, custom_bad[k].bad, want, want[strlen(want) - 1] != ' ');
                /* The '_' spelling is named as the '-' one. */
                char err[512], err_us[512];
                assert_int_equal(parse1(b, flag, custom_bad[k].bad, err, sizeof err), -1);
                assert_int_equal(parse1(b, us, custom_bad[k].bad, err_us, sizeof err_us), -1);
                assert_string_equal(err_us, err);
                listed = true;
                custom_seen++;
            }
            if (!listed && !(o.shared == &opts_device && strcmp(b->name, "psbench-server") == 0))
                print_error("%s %s: a custom option without a bad value in custom_bad\n", b->name, flag);
            assert_true(listed || (o.shared == &opts_device && strcmp(b->name, "psbench-server") == 0));
        }
    }
    assert_int_equal(custom_seen, sizeof custom_bad / sizeof custom_bad[0]);
}

/* A value of a million characters, given to every option of every
 * binary (issue 39): where it is refused, the line shows at most
 * TEXT_SHOW_MAX characters of it and says its length; never the value
 * whole (the error buffer here could hold it). Also as an unknown option
 * and as a stray argument. */
static void test_long_values_cut(void **state)
{
    (void)state;
    size_t big = 1000000;
    char *v = malloc(big + 1), *err = malloc(2 * big);
    assert_non_null(v);
    assert_non_null(err);
    memset(v, 'h', big);
    v[big] = '\0';
    char *junk = malloc(big + 3);
    assert_non_null(junk);
    snprintf(junk, big + 3, "--%s", v);
    size_t refused = 0;
    for (size_t bi = 0; bi < NBIN; bi++) {
        const binary *b = &binaries[bi];
        opt_spec o;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
            if (o.kind == OPT_TEXT || o.kind == OPT_FLAG)
                continue;
            char flag[96];
            snprintf(flag, sizeof flag, "--%s", o.name);
            err[0] = '\0';
            if (parse1(b, flag, v, err, 2 * big) == 0)
                continue; /* a string taken as it is */
            refused++;
            if (strlen(err) > 400 || (strstr(err, "hhhh") && !strstr(err, "(1000000 characters)"))) {
                print_error("%s %s: a %zu-byte line: %.200s\n", b->name, flag, strlen(err), err);
                fail();
            }
        }
        for (int k = 0; k < 2; k++) { /* an unknown option, a stray argument */
            const char *args[] = {k ? v : junk, NULL};
            err[0] = '\0';
            assert_int_equal(parse_opts(b, args, NULL, 0, err, 2 * big), -1);
            if (strlen(err) > 400 || !strstr(err, "(100000")) {
                print_error("%s: a %zu-byte line: %.200s\n", b->name, strlen(err), err);
                fail();
            }
        }
    }
    assert_true(refused >= 20);
    free(v);
    free(err);
    free(junk);
}

/* What getopt cannot match, in each table's wording. */
/* Whole names only (issue 40): getopt_long takes any unambiguous
 * beginning of a long name ("--epoch 2" ran as --epochs); every table now
 * refuses each beginning of each of its names, in both forms, with the
 * name it was near, and a slip gets the nearest name. */
static void test_whole_names_only(void **state)
{
    (void)state;
    char err[512];
    const binary *ms = &binaries[2];
    const char *const beginnings[][2] = {{"--epoch", "2"}, {"--epoch=2", NULL}, {"--epoch", NULL}};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(parse1(ms, beginnings[k][0], beginnings[k][1], err, sizeof err), -1);
        assert_string_equal(err, "unknown option --epoch: did you mean --epochs?");
    }
    const char *dry[] = {"stray", "--ep", "2", NULL}; /* after a non-option too (getopt permutes) */
    assert_int_equal(parse_opts(ms, dry, NULL, 0, err, sizeof err), -1);
    assert_string_equal(err, "unknown option --ep: did you mean --epochs?");
    assert_int_equal(parse1(ms, "--epochz", "2", err, sizeof err), -1);
    assert_string_equal(err, "unknown option --epochz: did you mean --epochs?");
    assert_int_equal(parse1(&binaries[0], "--liste", "127.0.0.1:0", err, sizeof err), -1);
    assert_string_equal(err, "unknown option --liste: did you mean --listen?");
    assert_int_equal(parse1(&binaries[1], "--maste", "127.0.0.1:1", err, sizeof err), -1);
    assert_string_equal(err, "unknown option --maste: did you mean --master?");
    /* Nothing near: the table's wording, as before. */
    assert_int_equal(parse1(ms, "--frobnicate", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown option '--frobnicate' (see --help)");
    /* Every beginning of every long name (that is not a name itself). */
    size_t refused = 0;
    for (size_t bi = 0; bi < NBIN; bi++) {
        const binary *b = &binaries[bi];
        opt_spec o;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
            if (o.kind == OPT_TEXT)
                continue;
            for (size_t a = 0; a <= (o.aliases ? 8 : 0); a++) {
                const char *name = a == 0 ? o.name : o.aliases[a - 1];
                if (!name)
                    break;
                for (size_t len = 2; len < strlen(name); len++) {
                    char flag[160];
                    const char *near;
                    snprintf(flag, sizeof flag, "--%.*s", (int)len, name);
                    if (opts_is_long_name(b->table(), flag + 2, len, NULL, 0, &near))
                        continue; /* --lr is a name, not a beginning of --lr-decay */
                    int rc = parse1(b, flag, "1", err, sizeof err);
                    if (rc != -1 || strncmp(err, "unknown option ", 15) != 0 || !strstr(err, "did you mean --")) {
                        print_error("%s %s: rc %d, err \"%s\"\n", b->name, flag, rc, err);
                        fail();
                    }
                    refused++;
                }
            }
        }
    }
    assert_true(refused > 500);
    /* cli_nearest: a beginning first, the shortest; else a slip of at
     * most 2 edits (or a third of the word); else none. */
    const char *const names[] = {"lr", "epochs", "epochs-max", "ntrainer", "nserver"};
    assert_string_equal(cli_nearest("ep", 2, names, 5), "epochs");
    assert_string_equal(cli_nearest("nsevrer", 7, names, 5), "nserver");
    assert_string_equal(cli_nearest("l", 1, names, 5), "lr");
    assert_null(cli_nearest("zzzzzz", 6, names, 5));
    assert_null(cli_nearest("x", 1, names, 5)); /* one letter: one edit at most */
}

static void test_getopt_errors(void **state)
{
    (void)state;
    char err[512];
    const binary *sv = &binaries[0], *tr = &binaries[1], *ms = &binaries[2];
    assert_int_equal(parse1(sv, "--trainers", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown or incomplete option '--trainers' (see --help)");
    assert_int_equal(parse1(sv, "--standalone=1", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown or incomplete option '--standalone=1' (see --help)");
    assert_int_equal(parse1(tr, "--bogus", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown or incomplete option '--bogus' (see --help)");
    assert_int_equal(parse1(tr, "stray", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unexpected argument 'stray' (see --help)");
    assert_int_equal(parse1(ms, "--ntrainer", NULL, err, sizeof err), -1);
    assert_string_equal(err, "option --ntrainer needs a value");
    assert_int_equal(parse1(ms, "--local=1", NULL, err, sizeof err), -1);
    assert_string_equal(err, "option '--local=1' takes no value");
    assert_int_equal(parse1(ms, "--help=1", NULL, err, sizeof err), -1);
    assert_string_equal(err, "option '--help=1' takes no value");
    assert_int_equal(parse1(ms, "-x", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown option '-x' (see --help)");
    assert_int_equal(parse1(ms, "--bogus", NULL, err, sizeof err), -1);
    assert_string_equal(err, "unknown option '--bogus' (see --help)");
    /* --help: the server and the trainer stop there; the master parses
     * the whole line first (an error wins, --help wins over --version). */
    assert_int_equal(parse1(sv, "--help", "--bogus", err, sizeof err), OPTS_HELP);
    assert_int_equal(parse1(sv, "--version", "--help", err, sizeof err), OPTS_VERSION);
    assert_int_equal(parse1(ms, "--help", "--bogus", err, sizeof err), -1);
    assert_int_equal(parse1(ms, "--version", "--help", err, sizeof err), OPTS_HELP);
    assert_int_equal(parse1(ms, "--help", "stray", err, sizeof err), OPTS_HELP);
}

/* ---- defaults ---------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    test_opts_server_defaults();
    test_opts_trainer_defaults();
    run_config c;
    assert_int_equal(config_init(&c), 0);
    assert_int_equal(c.ntrainer, CONFIG_DEFAULT_NTRAINER);
    assert_int_equal(c.nserver, CONFIG_DEFAULT_NSERVER);
    assert_true(c.epochs == CONFIG_DEFAULT_EPOCHS && c.batch_size == CONFIG_DEFAULT_BATCH_SIZE);
    assert_true(c.rpc_timeout_s == CONFIG_DEFAULT_RPC_TIMEOUT_S);
    assert_string_equal(c.trainer, CONFIG_DEFAULT_TRAINER);
    assert_string_equal(c.backend, CONFIG_DEFAULT_BACKEND);
    assert_string_equal(c.listen, CONFIG_DEFAULT_LISTEN);
    assert_string_equal(c.http, CONFIG_DEFAULT_HTTP);
    assert_string_equal(c.placement, "seed");
    assert_true(c.warmup_cycles == 5 && c.runs == 1 && c.linger_s == 0);
    assert_false(c.nserver_set || c.ddp_rpc_flags || c.listen_set || c.local);
    assert_null(c.rpc_pattern);
    config_free(&c);
}

/* ---- the shared options -------------------------------------------------------- */

static const struct {
    const opt_spec *spec;
    bool in[NBIN];              /* which binaries have it: server, trainer, master */
    const char *good[4], *bad[3]; /* NULL-terminated */
} shared[] = {
    {&opts_help, {true, true, true}, {NULL}, {NULL}},
    {&opts_version_opt, {true, true, true}, {NULL}, {NULL}},
    {&opts_log_level, {true, true, true}, {"debug", "error", "warn", NULL}, {"loud", "", NULL}},
    {&opts_token, {true, true, true}, {"s3cret", "a b", NULL}, {NULL}},
    {&opts_token_file, {true, true, true}, {"/some/file", NULL}, {NULL}},
    {&opts_transport, {true, true, true}, {"tcp", "shm", "auto", NULL}, {"udp", "TCP", NULL}},
    {&opts_connect_timeout, {true, true, false}, {"2.5", "1e3", NULL}, {"0", "x", NULL}},
    {&opts_follow, {true, true, false}, {NULL}, {NULL}},
    {&opts_follow_idle, {true, true, false}, {"5", "0.5", NULL}, {"0", "x", NULL}},
    /* The server checks --device once parsing is done ($PSBENCH_SERVER_DEVICE
     * goes through the same check), the trainer as it parses: their bad
     * values differ, the good ones do not. */
    {&opts_device, {true, true, false}, {"cpu", "cuda", "cuda:3", NULL}, {NULL}},
};

/* The i-th binary's entry for a shared option, resolved. */
static bool shared_entry(const binary *b, const opt_spec *spec, opt_spec *out)
{
    for (size_t i = 0; opts_entry(b->table(), i, out); i++)
        if (out->shared == spec)
            return true;
    return false;
}

static void test_shared_options_alike(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++) {
        const char *name = shared[k].spec->name;
        for (size_t g = 0; shared[k].good[g] || g == 0; g++) {
            const char *v = shared[k].good[g];
            char first[600] = "", err[512];
            for (size_t bi = 0; bi < NBIN; bi++) {
                const binary *b = &binaries[bi];
                opt_spec o;
                assert_int_equal(shared_entry(b, shared[k].spec, &o), shared[k].in[bi]);
                if (!shared[k].in[bi])
                    continue;
                assert_string_equal(o.name, name);
                char flag[64];
                snprintf(flag, sizeof flag, "--%s", name);
                int want = shared[k].spec->action ? shared[k].spec->action : OPTS_OK;
                assert_int_equal(parse1(b, flag, v, err, sizeof err), want);
                if (!v)
                    continue;
                void *s = settings_new(b);
                assert_int_equal(opts_apply(&o, flag, v, s, err, sizeof err), 0);
                char got[600];
                opts_field_text(&o.to, s, got, sizeof got);
                settings_free(b, s);
                if (!first[0])
                    snprintf(first, sizeof first, "%s", got);
                assert_string_equal(got, first);
            }
            if (!v)
                break;
        }
        for (size_t x = 0; shared[k].bad[x]; x++) {
            char first[512] = "", err[512];
            for (size_t bi = 0; bi < NBIN; bi++) {
                if (!shared[k].in[bi])
                    continue;
                char flag[64];
                snprintf(flag, sizeof flag, "--%s", name);
                assert_int_equal(parse1(&binaries[bi], flag, shared[k].bad[x], err, sizeof err), -1);
                if (!first[0])
                    snprintf(first, sizeof first, "%s", err);
                assert_string_equal(err, first);
            }
        }
    }
    /* One difference kept from before the tables: the master refuses an
     * empty --token (its strings are copies, never empty); the server and
     * the trainer take it. */
    char err[512];
    assert_int_equal(parse1(&binaries[0], "--token", "", err, sizeof err), OPTS_OK);
    assert_int_equal(parse1(&binaries[1], "--token", "", err, sizeof err), OPTS_OK);
    assert_int_equal(parse1(&binaries[2], "--token", "", err, sizeof err), -1);
    assert_string_equal(err, "--token: needs a non-empty value");
}

/* --token, else --token-file, else $PSBENCH_TOKEN: opts_token_resolve,
 * the one implementation all three binaries call. */
static void test_token_precedence(void **state)
{
    (void)state;
    char path[] = "/tmp/psbench-test-opts-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "from-file \r\n", 12), 12);
    close(fd);
    chmod(path, 0600);
    char buf[CLI_TOKEN_MAX + 1], err[512];
    const char *tok, *src;
    int loose;
    setenv("PSBENCH_TOKEN", "from-env", 1);
    assert_int_equal(opts_token_resolve("from-flag", path, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), 0);
    assert_string_equal(tok, "from-flag");
    assert_string_equal(src, "--token");
    assert_int_equal(opts_token_resolve(NULL, path, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), 0);
    assert_string_equal(tok, "from-file");
    assert_string_equal(src, "--token-file");
    assert_int_equal(loose, 0);
    chmod(path, 0644);
    assert_int_equal(opts_token_resolve(NULL, path, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), 0);
    assert_int_equal(loose, 1);
    assert_int_equal(opts_token_resolve(NULL, NULL, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), 0);
    assert_string_equal(tok, "from-env");
    assert_string_equal(src, "PSBENCH_TOKEN");
    setenv("PSBENCH_TOKEN", "", 1);
    assert_int_equal(opts_token_resolve(NULL, NULL, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), 0);
    assert_null(tok);
    assert_null(src);
    char longtok[CLI_TOKEN_MAX + 2];
    memset(longtok, 'k', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = '\0';
    assert_int_equal(opts_token_resolve(longtok, NULL, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), -1);
    assert_string_equal(err, "--token: the token is longer than 255 bytes (the most psbench takes)");
    setenv("PSBENCH_TOKEN", longtok, 1);
    assert_int_equal(opts_token_resolve(NULL, NULL, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), -1);
    assert_string_equal(err, "PSBENCH_TOKEN: the token is longer than 255 bytes (the most psbench takes)");
    unsetenv("PSBENCH_TOKEN");
    unlink(path);
    assert_int_equal(opts_token_resolve(NULL, path, buf, sizeof buf, &tok, &src, &loose, err, sizeof err), -1);
    assert_has(err, path);
}

/* ---- the tables themselves ----------------------------------------------------- */

/* No name twice in a table; every option and alias named in its --help;
 * the echo's keys unique. */
static void test_tables_whole(void **state)
{
    (void)state;
    for (size_t bi = 0; bi < NBIN; bi++) {
        const binary *b = &binaries[bi];
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        opts_usage(b->table(), f);
        fclose(f);
        const char *names[OPTS_MAX];
        size_t n = 0;
        opt_spec o;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++) {
            if (o.kind == OPT_TEXT)
                continue;
            names[n++] = o.name;
            for (size_t a = 0; o.aliases && o.aliases[a]; a++)
                names[n++] = o.aliases[a];
        }
        for (size_t i = 0; i < n; i++) {
            for (size_t j = i + 1; j < n; j++)
                assert_string_not_equal(names[i], names[j]);
            char dashed[96];
            snprintf(dashed, sizeof dashed, "--%s", names[i]);
            assert_has(text, dashed);
        }
        free(text);
        /* The echo holds each key once. */
        void *s = settings_new(b);
        json_t *j = opts_to_json(b->table(), s);
        assert_non_null(j);
        size_t keys = 0;
        for (size_t i = 0; opts_entry(b->table(), i, &o); i++)
            keys += o.kind != OPT_TEXT && o.json;
        assert_int_equal(json_object_size(j), keys);
        json_decref(j);
        settings_free(b, s);
    }
}

/* ---- opts_parse_args: a line that is not all the table's ------------------- */

typedef struct pa_settings {
    const char *name; /* --name S, alias --nom */
    uint64_t count;   /* --count N, 1..9 */
    bool flag;        /* --flag */
    bool flag_given;
    const char *stop; /* --stop DIR: ends the parsing (an action of the table's own) */
    const char *others[16];
    size_t nothers;
    bool rest;        /* "--" seen: every later argument is another */
} pa_settings;

static int pa_other(const char *arg, void *settings, char *err, size_t errlen)
{
    pa_settings *p = settings;
    if (strcmp(arg, "--refuse") == 0) {
        snprintf(err, errlen, "refused %s", arg);
        return -1;
    }
    assert_true(p->nothers < 16);
    p->others[p->nothers++] = arg;
    if (!p->rest && strcmp(arg, "--") == 0) {
        p->rest = true;
        return OPTS_REST;
    }
    return 0;
}

static const char *const pa_aliases[] = {"nom", NULL};
static const opt_spec pa_specs[] = {
    {.kind = OPT_STRING, .name = "name", .aliases = pa_aliases, .meta = "S", .to = OPT_AT(pa_settings, name)},
    {.kind = OPT_U64, .name = "count", .meta = "N", .min = 1, .max = 9, .to = OPT_AT(pa_settings, count),
     .missing = "needs a count"},
    {.kind = OPT_FLAG, .name = "the-flag", .to = OPT_AT(pa_settings, flag), .given = {OPT_AT(pa_settings, flag_given)}},
    {.kind = OPT_STRING, .name = "stop", .meta = "DIR", .to = OPT_AT(pa_settings, stop), .action = OPTS_OWN},
    {.shared = &opts_help},
    OPTS_END,
};
static const opts_table pa_table = {.prog = "pa", .specs = pa_specs, .help_col = 20};

/* argv (NULL-ended, after the program) parsed into *p; the return code. */
static int pa_parse(pa_settings *p, char *err, size_t errlen, ...)
{
    char *argv[32] = {"pa"};
    int argc = 1;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    memset(p, 0, sizeof *p);
    err[0] = '\0';
    assert_int_equal(opts_init(&pa_table, p, err, errlen), 0);
    return opts_parse_args(&pa_table, argc, argv, p, pa_other, err, errlen);
}

/* The table's options in every spelling, the others handed on in order
 * and as given (nothing permuted, argv not rewritten), "--" only where
 * the callback makes one, the errors, an action ending the parsing. */
static void test_parse_args(void **state)
{
    (void)state;
    pa_settings p;
    char err[256];
    char keep[] = "--job_flag";
    assert_int_equal(pa_parse(&p, err, sizeof err, "--x", "1", "--name", "a", keep, "--count=3", "-y", "--the_flag",
                              "2", NULL),
                     OPTS_OK);
    assert_string_equal(p.name, "a");
    assert_int_equal(p.count, 3);
    assert_true(p.flag && p.flag_given);
    assert_int_equal(p.nothers, 5);
    const char *want[] = {"--x", "1", "--job_flag", "-y", "2"};
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(p.others[i], want[i]);
    assert_ptr_equal(p.others[2], keep); /* as given: not a copy, not rewritten */
    assert_string_equal(keep, "--job_flag");

    /* An alias, '_' for '-'; the next argument is the value, whatever it is. */
    assert_int_equal(pa_parse(&p, err, sizeof err, "--nom", "--the-flag", "--name=", NULL), OPTS_OK);
    assert_string_equal(p.name, "");
    assert_false(p.flag);
    assert_int_equal(pa_parse(&p, err, sizeof err, "--nom", "--the-flag", NULL), OPTS_OK);
    assert_string_equal(p.name, "--the-flag");

    /* Whole names only: a beginning, or a name with more, is another's. */
    assert_int_equal(pa_parse(&p, err, sizeof err, "--coun", "2", "--counts", "--namex=1", NULL), OPTS_OK);
    assert_int_equal(p.count, 0);
    assert_int_equal(p.nothers, 4);

    /* "--" is the callback's: after its OPTS_REST, every argument is handed on. */
    assert_int_equal(pa_parse(&p, err, sizeof err, "--", "--count", "2", "--", "-h", NULL), OPTS_OK);
    assert_int_equal(p.count, 0);
    assert_int_equal(p.nothers, 5);

    /* Errors: the value missing (.missing words it), a value for a flag,
     * a bad value, the callback's. */
    assert_int_equal(pa_parse(&p, err, sizeof err, "--name", NULL), -1);
    assert_string_equal(err, "--name needs a value");
    assert_int_equal(pa_parse(&p, err, sizeof err, "--nom", NULL), -1);
    assert_string_equal(err, "--name needs a value"); /* the option's own name */
    assert_int_equal(pa_parse(&p, err, sizeof err, "--count", NULL), -1);
    assert_string_equal(err, "--count needs a count");
    assert_int_equal(pa_parse(&p, err, sizeof err, "--the-flag=1", NULL), -1);
    assert_string_equal(err, "option '--the-flag=1' takes no value");
    assert_int_equal(pa_parse(&p, err, sizeof err, "--count", "10", NULL), -1);
    assert_non_null(strstr(err, "--count"));
    assert_int_equal(pa_parse(&p, err, sizeof err, "--refuse", "--help", NULL), -1);
    assert_string_equal(err, "refused --refuse");

    /* An action ends the parsing where it stands: the rest is not read. */
    assert_int_equal(pa_parse(&p, err, sizeof err, "-h", "--count", "10", NULL), OPTS_HELP);
    assert_int_equal(pa_parse(&p, err, sizeof err, "--x", "--stop", "d", "--refuse", NULL), OPTS_OWN);
    assert_string_equal(p.stop, "d");
    assert_int_equal(p.nothers, 1);
    assert_int_equal(pa_parse(&p, err, sizeof err, "-hx", NULL), OPTS_OK); /* letters alone, never grouped */
    assert_int_equal(p.nothers, 1);
}

int main(void)
{
    binaries[0] = test_opts_server;
    binaries[1] = test_opts_trainer;
    binaries[2] = (binary){"psbench-master", master_opts, sizeof(run_config), master_init, master_fini, master_extra};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_option_every_spelling),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_long_values_cut),
        cmocka_unit_test(test_getopt_errors),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_shared_options_alike),
        cmocka_unit_test(test_token_precedence),
        cmocka_unit_test(test_tables_whole),
        cmocka_unit_test(test_whole_names_only),
        cmocka_unit_test(test_parse_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
