/* opts.c — option tables: getopt_long's array, parsing, defaults, --help
 * and the JSON echo from one declaration per binary (see opts.h), and the
 * options every binary shares. */
#include "shared/opts.h"
#include "shared/cli.h"
#include "shared/frame.h"
#include "shared/log.h"
#include "shared/net.h"
#include "shared/shm.h"
#include "shared/text.h"

#include <assert.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- one entry ------------------------------------------------------------ */

/* The entry as parsed and shown: a shared option's declaration with what
 * the binary's entry adds (where the value goes, the help, overrides). */
static void opts_resolve(const opt_spec *e, opt_spec *out)
{
    if (!e->shared) {
        *out = *e;
        return;
    }
    const opt_spec *s = e->shared;
    assert(!s->shared && s->kind != OPT_TEXT && s->kind != OPT_END);
    *out = *s;
    out->to = e->to;
    out->given[0] = e->given[0];
    out->given[1] = e->given[1];
    out->head = e->head;
    out->help = e->help;
    out->json = e->json;
    out->to_json = e->to_json;
    if (e->meta)
        out->meta = e->meta;
    if (e->def || e->init) {
        out->def = e->def;
        out->init = e->init;
    }
    if (e->parse)
        out->parse = e->parse;
    if (e->example)
        out->example = e->example;
    out->shared = s;
}

/* The end of a table: a shared option's entry sets no kind of its own. */
static bool opts_at_end(const opt_spec *e)
{
    return e->kind == OPT_END && !e->shared;
}

static bool opts_is_option(const opt_spec *o)
{
    return o->kind != OPT_END && o->kind != OPT_TEXT;
}

bool opts_entry(const opts_table *t, size_t i, opt_spec *out)
{
    for (size_t k = 0; k <= i; k++)
        if (opts_at_end(&t->specs[k]))
            return false;
    opts_resolve(&t->specs[i], out);
    return true;
}

int opts_find(const opts_table *t, const char *name, opt_spec *out)
{
    opt_spec o;
    for (size_t i = 0; opts_entry(t, i, &o); i++) {
        if (!opts_is_option(&o))
            continue;
        bool hit = strcmp(o.name, name) == 0;
        for (size_t a = 0; !hit && o.aliases && o.aliases[a]; a++)
            hit = strcmp(o.aliases[a], name) == 0;
        if (hit) {
            *out = o;
            return 0;
        }
    }
    return -1;
}

static void *opts_field_ptr(const opt_field *f, void *settings)
{
    return f->off1 ? (char *)settings + f->off1 - 1 : NULL;
}

/* The field's C type fits the option's kind: a table that does not is a
 * programming error, caught by every binary's first opts_init. */
static void opts_check_entry(const opt_spec *o)
{
    if (!opts_is_option(o)) {
        assert(o->kind == OPT_END || o->help || o->head);
        return;
    }
    assert(o->name && *o->name);
    opt_ctype t = o->to.type;
    for (int g = 0; g < 2; g++)
        assert(!o->given[g].off1 || o->given[g].type == OPT_C_BOOL);
    if (o->parse)
        return; /* a callback knows its field */
    switch (o->kind) {
    case OPT_FLAG: assert(t == OPT_C_BOOL || (!o->to.off1 && o->action)); break;
    case OPT_U64:
        assert(t == OPT_C_U64 || (t == OPT_C_U32 && o->max <= UINT32_MAX));
        assert(o->min <= o->max);
        break;
    case OPT_SECONDS: assert(t == OPT_C_DOUBLE); break;
    case OPT_STRING: assert(!o->to.off1 || t == OPT_C_CSTR || t == OPT_C_STR); break;
    case OPT_CHOICE: assert(o->choices && o->choices[0]); /* fall through */
    case OPT_HOSTPORT: assert(t == OPT_C_CSTR || t == OPT_C_STR); break;
    case OPT_CUSTOM: assert(!"an OPT_CUSTOM option needs .parse"); break;
    default: assert(!"not an option kind");
    }
    (void)t;
}

/* A string value into its field: borrowed, or a copy that must not be
 * empty (the master's ids, paths and addresses). */
int opts_store_string(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                          size_t errlen)
{
    void *p = opts_field_ptr(&o->to, settings);
    if (!p)
        return 0;
    if (o->to.type == OPT_C_CSTR) {
        *(const char **)p = arg;
        return 0;
    }
    assert(o->to.type == OPT_C_STR);
    if (!arg || !*arg) {
        errbuf_set(err, errlen, "%s: needs a non-empty value", flag);
        return -1;
    }
    char *copy = strdup(arg);
    if (!copy) {
        errbuf_set(err, errlen, "%s: out of memory", flag);
        return -1;
    }
    free(*(char **)p);
    *(char **)p = copy;
    return 0;
}

/* "a, b or c" of a NULL-terminated list. */
static void opts_join_choices(const char *const *c, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; c[i] && n < len; i++) {
        const char *sep = i == 0 ? "" : c[i + 1] ? ", " : " or ";
        int w = snprintf(buf + n, len - n, "%s%s", sep, c[i]);
        n += w > 0 ? (size_t)w : 0;
    }
}

static int opts_parse_choice(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                             size_t errlen)
{
    for (size_t i = 0; o->choices[i]; i++)
        if (arg && strcmp(arg, o->choices[i]) == 0)
            return opts_store_string(o, flag, arg, settings, err, errlen);
    char list[256];
    opts_join_choices(o->choices, list, sizeof list);
    text_shown shown;
    errbuf_set(err, errlen, "%s: %s is not %s", flag, text_show(arg, '\'', &shown), list);
    return -1;
}

/* The value alone, without the given flags: what a default sets too. */
static int opts_set_value(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                          size_t errlen)
{
    if (o->parse)
        return o->parse(o, flag, arg, settings, err, errlen);
    void *p = opts_field_ptr(&o->to, settings);
    switch (o->kind) {
    case OPT_FLAG:
        if (p)
            *(bool *)p = !o->negate;
        return 0;
    case OPT_U64: {
        uint64_t v;
        if (cli_parse_u64(flag, arg, o->min, o->max, o->sizes, &v, err, errlen) < 0)
            return -1;
        if (o->to.type == OPT_C_U32)
            *(uint32_t *)p = (uint32_t)v; /* the range keeps it below 2^32 (opts_check_entry) */
        else
            *(uint64_t *)p = v;
        return 0;
    }
    case OPT_SECONDS: return cli_parse_seconds(flag, arg, (double *)p, err, errlen);
    case OPT_STRING: return opts_store_string(o, flag, arg, settings, err, errlen);
    case OPT_CHOICE: return opts_parse_choice(o, flag, arg, settings, err, errlen);
    case OPT_HOSTPORT: {
        char host[256], why[256];
        uint16_t port;
        if (net_parse_hostport(arg, host, sizeof host, &port, o->min == 0, why, sizeof why) < 0) {
            errbuf_set(err, errlen, "%s: %s", flag, why);
            return -1;
        }
        return opts_store_string(o, flag, arg, settings, err, errlen);
    }
    default: assert(!"not an option kind"); return -1;
    }
}

int opts_apply(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err, size_t errlen)
{
    if (opts_set_value(o, flag, arg, settings, err, errlen) < 0)
        return -1;
    for (int g = 0; g < 2; g++) {
        bool *b = opts_field_ptr(&o->given[g], settings);
        if (b)
            *b = true;
    }
    return 0;
}

void opts_field_text(const opt_field *f, const void *settings, char *buf, size_t len)
{
    const void *p = f->off1 ? (const char *)settings + f->off1 - 1 : NULL;
    if (!p) {
        snprintf(buf, len, "(none)");
        return;
    }
    switch (f->type) {
    case OPT_C_BOOL: snprintf(buf, len, "%s", *(const bool *)p ? "true" : "false"); break;
    case OPT_C_U32: snprintf(buf, len, "%" PRIu32, *(const uint32_t *)p); break;
    case OPT_C_U64: snprintf(buf, len, "%" PRIu64, *(const uint64_t *)p); break;
    case OPT_C_DOUBLE: snprintf(buf, len, "%.17g", *(const double *)p); break;
    case OPT_C_FLOAT: snprintf(buf, len, "%.9g", (double)*(const float *)p); break;
    case OPT_C_CSTR:
    case OPT_C_STR: {
        const char *s = *(const char *const *)p;
        snprintf(buf, len, "%s", s ? s : "(null)");
        break;
    }
    default: {
        /* An enum or a struct: its bytes, enough to compare two. */
        size_t n = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < f->size && n + 3 < len; i++, n += 2)
            snprintf(buf + n, len - n, "%02x", ((const unsigned char *)p)[i]);
    }
    }
}

/* ---- a table ---------------------------------------------------------------- */

int opts_init(const opts_table *t, void *settings, char *err, size_t errlen)
{
    opt_spec o;
    for (size_t i = 0; opts_entry(t, i, &o); i++) {
        opts_check_entry(&o);
        if (!opts_is_option(&o))
            continue;
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", o.name);
        if (o.init) {
            if (o.init(&o, settings) < 0) {
                errbuf_set(err, errlen, "%s: out of memory", flag);
                return -1;
            }
        } else if (o.def && opts_set_value(&o, flag, o.def, settings, err, errlen) < 0) {
            return -1;
        }
    }
    return 0;
}

/* getopt_long's array: every long name (aliases too) with val 256 + its
 * index, so that the entry and the spelling used are both known. */
typedef struct opts_getopt {
    struct option lo[OPTS_MAX + 1];
    const opt_spec *entry[OPTS_MAX]; /* the table's entry of lo[i] */
    const char *names[OPTS_MAX];     /* lo[i].name: the candidates of a suggestion */
    size_t n;
    char shorts[16];
} opts_getopt;

static void opts_getopt_add(opts_getopt *g, size_t *n, const char *name, const opt_spec *e, bool arg)
{
    assert(*n < OPTS_MAX);
    g->lo[*n] = (struct option){name, arg ? required_argument : no_argument, NULL, 256 + (int)*n};
    g->entry[*n] = e;
    g->names[*n] = name;
    (*n)++;
}

static void opts_getopt_build(const opts_table *t, opts_getopt *g)
{
    size_t n = 0, s = 0;
    if (t->precise_errors)
        g->shorts[s++] = ':'; /* a missing value returns ':' */
    opt_spec o;
    for (size_t i = 0; opts_entry(t, i, &o); i++) {
        if (!opts_is_option(&o))
            continue;
        bool arg = o.kind != OPT_FLAG;
        opts_getopt_add(g, &n, o.name, &t->specs[i], arg);
        for (size_t a = 0; o.aliases && o.aliases[a]; a++)
            opts_getopt_add(g, &n, o.aliases[a], &t->specs[i], arg);
        if (o.letter) {
            assert(s + 2 < sizeof g->shorts);
            g->shorts[s++] = o.letter;
            if (arg)
                g->shorts[s++] = ':';
        }
    }
    g->shorts[s] = '\0';
    g->lo[n] = (struct option){NULL, 0, NULL, 0};
    g->n = n;
}

/* Whether the len bytes at name are one of the table's long names, whole. */
static bool opts_is_name(const opts_getopt *g, const char *name, size_t len)
{
    for (size_t i = 0; i < g->n; i++)
        if (strlen(g->names[i]) == len && memcmp(g->names[i], name, len) == 0)
            return true;
    return false;
}

/* arg ("--epoch", "--epoch=2") when its name is none of the table's
 * long names, whole: "unknown option --epoch: did you mean --epochs?"
 * into err and true, where a name is near enough to suggest (cli_nearest);
 * else false, and the caller words it. */
static bool opts_unknown_long(const opts_getopt *g, const char *arg, char *err, size_t errlen)
{
    if (arg[0] != '-' || arg[1] != '-')
        return false;
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    if (opts_is_name(g, name, len))
        return false;
    const char *near = cli_nearest(name, len, g->names, g->n);
    if (!near)
        return false;
    text_shown shown;
    errbuf_set(err, errlen, "unknown option --%s: did you mean --%s?", text_show_n(name, len, 0, &shown), near);
    return true;
}

/* getopt_long takes an unambiguous beginning of a long name for the name
 * ("--epoch 2" as --epochs): psbench takes whole names only, so that a
 * slip is said rather than read as another option, and a name added later
 * cannot change what an old command line means. The argument getopt
 * matched is argv[optind - 1], or the one before it when its value came
 * as the next argument. -1 with err for a beginning, else 0. */
static int opts_check_whole(const opts_getopt *g, int c, char **argv, char *err, size_t errlen)
{
    assert(c >= 256 && (size_t)(c - 256) < g->n);
    int at = optarg && optarg == argv[optind - 1] ? optind - 2 : optind - 1;
    const char *arg = argv[at];
    assert(arg[0] == '-' && arg[1] == '-'); /* only "--" arguments match a long name */
    size_t len = strcspn(arg + 2, "=");
    if (len == strlen(g->names[c - 256]))
        return 0;
    if (!opts_unknown_long(g, arg, err, errlen)) { /* a beginning is near its name: cannot happen */
        text_shown shown;
        errbuf_set(err, errlen, "unknown option %s (see --help)", text_show_n(arg, len + 2, '\'', &shown));
    }
    return -1;
}

/* What getopt_long could not match, in the table's wording; a long name
 * that is none of the table's, with the nearest one when there is one. */
static void opts_getopt_error(const opts_table *t, const opts_getopt *g, int o, char **argv, char *err,
                              size_t errlen)
{
    if (opts_unknown_long(g, argv[optind - 1], err, errlen))
        return;
    text_shown shown;
    const char *a = text_show(argv[optind - 1], 0, &shown);
    if (!t->precise_errors)
        errbuf_set(err, errlen, "unknown or incomplete option '%s' (see --help)", a);
    else if (o == ':')
        errbuf_set(err, errlen, "option %s needs a value", a);
    else if (optopt >= 256)
        errbuf_set(err, errlen, "option '%s' takes no value", a);
    else if (optopt)
        errbuf_set(err, errlen, "unknown option '-%c' (see --help)", optopt);
    else
        errbuf_set(err, errlen, "unknown option '%s' (see --help)", a);
}

static const opt_spec *opts_by_letter(const opts_table *t, int letter)
{
    for (size_t i = 0; !opts_at_end(&t->specs[i]); i++) {
        opt_spec o;
        opts_resolve(&t->specs[i], &o);
        if (opts_is_option(&o) && o.letter && o.letter == letter)
            return &t->specs[i];
    }
    return NULL;
}

int opts_parse(const opts_table *t, int argc, char **argv, void *settings, char *err, size_t errlen)
{
    opts_getopt g;
    opts_getopt_build(t, &g);
    cli_normalize_args(argc, argv);
    optind = 0; /* glibc: full re-initialization, so parsing can run again */
    opterr = 0;
    bool help = false, version = false;
    for (;;) {
        int c = getopt_long(argc, argv, g.shorts, g.lo, NULL);
        if (c == -1)
            break;
        const opt_spec *e = c >= 256 ? g.entry[c - 256] : opts_by_letter(t, c);
        if (!e) {
            opts_getopt_error(t, &g, c, argv, err, errlen);
            return -1;
        }
        if (c >= 256 && opts_check_whole(&g, c, argv, err, errlen) < 0)
            return -1;
        opt_spec o;
        opts_resolve(e, &o);
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", c >= 256 ? g.lo[c - 256].name : o.name);
        if (opts_apply(&o, flag, optarg, settings, err, errlen) < 0)
            return -1;
        if (o.action && t->stop_at_help)
            return o.action;
        help |= o.action == OPTS_HELP;
        version |= o.action == OPTS_VERSION;
    }
    if (help)
        return OPTS_HELP;
    if (version)
        return OPTS_VERSION;
    if (optind < argc) {
        text_shown shown;
        errbuf_set(err, errlen, "unexpected argument %s (see --help)", text_show(argv[optind], '\'', &shown));
        return -1;
    }
    return OPTS_OK;
}

bool opts_is_long_name(const opts_table *t, const char *name, size_t len, const char *const *more, size_t nmore,
                       const char **nearest)
{
    opts_getopt g;
    opts_getopt_build(t, &g);
    *nearest = NULL;
    if (opts_is_name(&g, name, len))
        return true;
    const char *cands[OPTS_MAX + 32];
    size_t n = 0;
    for (size_t i = 0; i < g.n; i++)
        cands[n++] = g.names[i];
    for (size_t i = 0; i < nmore && n < sizeof cands / sizeof *cands; i++)
        cands[n++] = more[i];
    *nearest = cli_nearest(name, len, cands, n);
    return false;
}

int opts_refuse_unknown(const opts_table *t, const char *arg, char *err, size_t errlen)
{
    assert(arg[0] == '-' && arg[1] != '\0');
    text_shown shown;
    const char *near = NULL;
    size_t len = strcspn(arg + 2, "=");
    if (arg[1] == '-')
        (void)opts_is_long_name(t, arg + 2, len, NULL, 0, &near);
    if (near)
        errbuf_set(err, errlen, "unknown option --%s: did you mean --%s?", text_show_n(arg + 2, len, 0, &shown), near);
    else
        errbuf_set(err, errlen, "unknown option %s", text_show(arg, '\'', &shown));
    return -1;
}

/* ---- a line that is not all the table's: opts_parse_args ------------------------ */

/* The table's option that arg names ("--name", "--name=v" with '_' for
 * '-', or "-x"), resolved into *o, with the value after '=' in *inline_v
 * (NULL: none) and the name as spelled, '-' for '_', in flag; false when
 * arg is none of them. */
static bool opts_match_arg(const opts_table *t, const char *arg, opt_spec *o, const char **inline_v, char *flag,
                           size_t flaglen)
{
    *inline_v = NULL;
    if (arg[0] != '-' || arg[1] == '\0')
        return false;
    if (arg[1] != '-') { /* "-x": a letter, alone */
        const opt_spec *e = arg[2] == '\0' ? opts_by_letter(t, arg[1]) : NULL;
        if (!e)
            return false;
        opts_resolve(e, o);
        snprintf(flag, flaglen, "--%s", o->name);
        return true;
    }
    size_t len = strcspn(arg + 2, "=");
    if (len == 0 || len + 3 > flaglen)
        return false;
    flag[0] = flag[1] = '-';
    for (size_t i = 0; i < len; i++)
        flag[2 + i] = arg[2 + i] == '_' ? '-' : arg[2 + i];
    flag[2 + len] = '\0';
    if (opts_find(t, flag + 2, o) < 0)
        return false;
    if (arg[2 + len] == '=')
        *inline_v = arg + 3 + len;
    return true;
}

int opts_parse_args(const opts_table *t, int argc, char **argv, void *settings, opts_other_fn other, char *err,
                    size_t errlen)
{
    bool rest = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        opt_spec o;
        char flag[80];
        if (rest || !opts_match_arg(t, arg, &o, &v, flag, sizeof flag)) {
            int rc = other(arg, settings, err, errlen);
            if (rc < 0)
                return -1;
            rest = rest || rc == OPTS_REST;
            continue;
        }
        text_shown shown;
        if (o.kind == OPT_FLAG && v) {
            errbuf_set(err, errlen, "option '%s' takes no value", text_show(arg, 0, &shown));
            return -1;
        }
        if (o.kind != OPT_FLAG && !v) {
            if (i + 1 >= argc) {
                errbuf_set(err, errlen, "--%s %s", o.name, o.missing ? o.missing : "needs a value");
                return -1;
            }
            v = argv[++i];
        }
        if (opts_apply(&o, flag, v, settings, err, errlen) < 0)
            return -1;
        if (o.action)
            return o.action;
    }
    return OPTS_OK;
}

int opts_parse_cli(const opts_table *t, int argc, char **argv, void *settings, char *err, size_t errlen)
{
    int rc = opts_parse(t, argc, argv, settings, err, errlen);
    if (rc == OPTS_HELP)
        opts_usage(t, stdout);
    else if (rc == OPTS_VERSION)
        opts_version(t, stdout);
    return rc;
}

/* ---- --help, --version, the echo ---------------------------------------------- */

/* "  HEAD   first line\n" and every further line at the column. */
static void opts_usage_entry(FILE *f, unsigned col, const char *head, const char *help)
{
    int n = fprintf(f, "  %s", head);
    size_t first = strcspn(help, "\n");
    if (first > 0)
        fprintf(f, "%*s%.*s", n < (int)col ? (int)col - n : 2, "", (int)first, help);
    fputc('\n', f);
    for (const char *p = help + first; *p == '\n';) {
        p++;
        size_t len = strcspn(p, "\n");
        if (len > 0)
            fprintf(f, "%*s%.*s", (int)col, "", (int)len, p);
        fputc('\n', f);
        p += len;
    }
}

void opts_usage(const opts_table *t, FILE *f)
{
    opt_spec o;
    for (size_t i = 0; opts_entry(t, i, &o); i++) {
        if (!o.help)
            continue;
        if (o.kind == OPT_TEXT && !o.head) {
            fputs(o.help, f);
            continue;
        }
        char head[160];
        if (o.head)
            snprintf(head, sizeof head, "%s", o.head);
        else
            snprintf(head, sizeof head, "--%s%s%s", o.name, o.meta ? " " : "", o.meta ? o.meta : "");
        opts_usage_entry(f, t->help_col, head, o.help);
    }
}

void opts_version(const opts_table *t, FILE *f)
{
    fprintf(f, "%s %s (wire protocol %u)\n", t->prog, PSBENCH_VERSION, FRAME_PROTOCOL_VERSION);
}

/* A field's own value in the echo. */
static json_t *opts_field_json(const opt_field *f, const void *settings)
{
    const void *p = (const char *)settings + f->off1 - 1;
    switch (f->type) {
    case OPT_C_BOOL: return json_boolean(*(const bool *)p);
    case OPT_C_U32: return json_integer((json_int_t) * (const uint32_t *)p);
    case OPT_C_U64: {
        /* Above INT64_MAX a JSON integer does not hold it in jansson: a string. */
        uint64_t v = *(const uint64_t *)p;
        if (v <= (uint64_t)INT64_MAX)
            return json_integer((json_int_t)v);
        char buf[32];
        snprintf(buf, sizeof buf, "%" PRIu64, v);
        return json_string(buf);
    }
    case OPT_C_DOUBLE: return json_real(*(const double *)p);
    case OPT_C_FLOAT: return json_real((double)*(const float *)p);
    case OPT_C_CSTR:
    case OPT_C_STR: {
        const char *s = *(const char *const *)p;
        return s ? json_string(s) : json_null();
    }
    default: assert(!"a field the echo cannot write: give the entry a to_json"); return NULL;
    }
}

json_t *opts_to_json(const opts_table *t, const void *settings)
{
    json_t *obj = json_object();
    opt_spec o;
    for (size_t i = 0; obj && opts_entry(t, i, &o); i++) {
        if (!opts_is_option(&o) || !o.json)
            continue;
        assert(o.to_json || o.to.off1);
        json_t *v = o.to_json ? o.to_json(&o, settings) : opts_field_json(&o.to, settings);
        if (json_object_set_new(obj, o.json, v) < 0) {
            json_decref(obj);
            obj = NULL;
        }
    }
    return obj;
}

/* ---- the options every binary shares -------------------------------------- */

static int opts_parse_log_level(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                size_t errlen)
{
    log_level *p = opts_field_ptr(&o->to, settings);
    assert(p && o->to.size == sizeof *p);
    if (log_level_parse(arg, p) < 0) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s is not error, warn, info or debug", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    return 0;
}

static int opts_parse_transport(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                                size_t errlen)
{
    psb_transport *p = opts_field_ptr(&o->to, settings);
    assert(p && o->to.size == sizeof *p);
    if (psb_transport_parse(arg, p) < 0) {
        text_shown shown;
        errbuf_set(err, errlen, "%s: %s is not a transport (auto, tcp or shm)", flag, text_show(arg, '\'', &shown));
        return -1;
    }
    return 0;
}

static int opts_init_transport(const opt_spec *o, void *settings)
{
    psb_transport *p = opts_field_ptr(&o->to, settings);
    assert(p && o->to.size == sizeof *p);
    *p = psb_transport_default();
    return 0;
}

const opt_spec opts_help = {.kind = OPT_FLAG, .name = "help", .letter = 'h', .action = OPTS_HELP};
const opt_spec opts_version_opt = {.kind = OPT_FLAG, .name = "version", .action = OPTS_VERSION};
const opt_spec opts_log_level = {.kind = OPT_CUSTOM, .name = "log-level", .meta = "LEVEL",
                                 .parse = opts_parse_log_level, .def = "info", .example = "debug"};
const opt_spec opts_token = {.kind = OPT_STRING, .name = "token", .meta = "T", .example = "s3cret"};
const opt_spec opts_token_file = {.kind = OPT_STRING, .name = "token-file", .meta = "FILE",
                                  .example = "/nonexistent/token"};
const opt_spec opts_transport = {.kind = OPT_CUSTOM, .name = "transport", .meta = "T",
                                 .parse = opts_parse_transport, .init = opts_init_transport, .example = "tcp"};
const opt_spec opts_connect_timeout = {.kind = OPT_SECONDS, .name = "connect-timeout", .meta = "SECONDS",
                                       .def = "30"};
const opt_spec opts_device = {.kind = OPT_STRING, .name = "device", .meta = "DEV", .example = "cuda:1"};
const opt_spec opts_follow = {.kind = OPT_FLAG, .name = "follow"};
const opt_spec opts_follow_idle = {.kind = OPT_SECONDS, .name = "follow-idle", .meta = "SECONDS", .def = "60"};

int opts_token_resolve(const char *flag, const char *file, char *buf, size_t buflen, const char **token,
                       const char **source, int *loose, char *err, size_t errlen)
{
    *token = NULL;
    *source = NULL;
    *loose = 0;
    if (flag) {
        *token = flag;
        *source = "--token";
    } else if (file) {
        /* cli_read_token_file checks the length itself, naming the file. */
        if (cli_read_token_file(file, buf, buflen, loose, err, errlen) < 0)
            return -1;
        *token = buf;
        *source = "--token-file";
        return 0;
    } else {
        const char *env = getenv("PSBENCH_TOKEN");
        if (!env || !*env)
            return 0;
        *token = env;
        *source = "PSBENCH_TOKEN";
    }
    return cli_check_token(*source, *token, err, errlen);
}
