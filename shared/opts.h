/* opts.h — one declarative table of command-line options per binary.
 *
 * A binary declares its options once, as an array of opt_spec ended by
 * OPTS_END: each entry names the option (long name, aliases, a short
 * letter), its argument (none, a whole number in a range with optional
 * K/M/G, seconds, a string, one of a list, HOST:PORT, or a parse callback),
 * its default, its help text and where its value goes (a field of the
 * binary's settings struct, by offset: OPT_AT). From that one table come
 * getopt_long's array, the parsing with one-line errors naming the option
 * as it was spelled (shared/cli.c's wording), the range and choice checks,
 * the --help text, and the JSON echo of the parsed settings (the
 * master's "args:" line and results.json's "configuration"). Adding an
 * option is one entry and its field.
 *
 * The options every binary shares are declared once, below (opts_token,
 * opts_log_level, ...): a binary's entry takes one with .shared and adds
 * what differs per binary — where the value goes and the help text. The
 * token's precedence (--token, --token-file, $PSBENCH_TOKEN) is
 * opts_token_resolve, the one implementation.
 *
 * Help layout: an option's head ("--trainers N", or .head) is indented two
 * spaces and padded to the table's help column, or followed by two spaces
 * when it reaches it; the help's first line goes there, every further
 * line ('\n'-separated) starts at the column. A help whose first line is
 * empty puts the head on a line of its own. OPT_TEXT entries are printed
 * as they are (the usage lines, section titles, notes), or, with a .head,
 * laid out like an option (a line for an alias or a pair of options).
 */
#ifndef PSBENCH_OPTS_H
#define PSBENCH_OPTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum opt_kind {
    OPT_END = 0, /* ends a table */
    OPT_TEXT,    /* not an option: help text */
    OPT_FLAG,    /* no argument: the bool field becomes true (false with .negate) */
    OPT_U64,     /* a whole number in [min, max]; K/M/G (powers of 1024) with .sizes */
    OPT_SECONDS, /* a positive number of seconds, at most CLI_MAX_SECONDS */
    OPT_STRING,  /* a string: a const char * field borrows argv's, a char * field gets a
                  * copy and refuses an empty value; no field: accepted and ignored */
    OPT_CHOICE,  /* one of .choices, stored as OPT_STRING stores */
    OPT_HOSTPORT, /* HOST:PORT (port 0 too with .min == 0), stored as OPT_STRING stores */
    OPT_CUSTOM,  /* .parse does it all */
} opt_kind;

/* The C type of a field, found by OPT_AT from the field itself. */
typedef enum opt_ctype {
    OPT_C_NONE = 0,
    OPT_C_BOOL,
    OPT_C_U32,
    OPT_C_U64,
    OPT_C_DOUBLE,
    OPT_C_FLOAT,
    OPT_C_CSTR, /* const char *: borrowed */
    OPT_C_STR,  /* char *: owned (free()d by the binary) */
    OPT_C_OTHER,
} opt_ctype;

/* Where a value goes: off1 is the field's offset + 1 (0: nowhere). */
typedef struct opt_field {
    size_t off1;
    size_t size;
    opt_ctype type;
} opt_field;

#define OPT_CTYPE_OF(x)                                                                                          \
    _Generic((x), bool: OPT_C_BOOL, uint32_t: OPT_C_U32, uint64_t: OPT_C_U64, double: OPT_C_DOUBLE,               \
             float: OPT_C_FLOAT, const char *: OPT_C_CSTR, char *: OPT_C_STR, default: OPT_C_OTHER)
/* The field F (a member designator: "cfg.kind.bu.lr") of the settings type T. */
#define OPT_AT(T, F) {offsetof(T, F) + 1, sizeof(((T *)0)->F), OPT_CTYPE_OF(((T *)0)->F)}

typedef struct opt_spec opt_spec;

/* An OPT_CUSTOM option's parser (and any option's, overriding its kind's):
 * arg (NULL for an option without argument) into settings. `flag` is the
 * option as spelled ("--torch-seed" for --seed's alias). 0, or -1 with a
 * one-line reason naming flag in err. */
typedef int (*opt_parse_fn)(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                            size_t errlen);
/* A default computed when the settings are initialized (the environment's,
 * a folder's): instead of .def. 0, or -1 (out of memory). */
typedef int (*opt_init_fn)(const opt_spec *o, void *settings);
/* The value in the JSON echo, when the field's own is not it (new ref). */
typedef json_t *(*opt_json_fn)(const opt_spec *o, const void *settings);

struct opt_spec {
    opt_kind kind;
    const char *name;            /* long name without "--" */
    const char *const *aliases;  /* more long names (NULL-terminated), or NULL */
    char letter;                 /* short option ('h'), or 0 */
    const char *meta;            /* the argument in the help ("N"); NULL: none */
    const char *head;            /* help: replaces "--name META" ("--help, --version") */
    const char *help;            /* help lines; NULL: not shown. OPT_TEXT: the text */
    opt_field to;                /* where the value goes (OPT_AT) */
    opt_field given[2];          /* bool fields set true when the option is given */
    const char *def;             /* the default, parsed as from the command line when the
                                  * settings are initialized (NULL: the field's zero) */
    opt_init_fn init;            /* or a default computed then */
    uint64_t min, max;           /* OPT_U64's range (OPT_HOSTPORT: min 0 allows port 0) */
    bool sizes;                  /* OPT_U64: K/M/G suffixes */
    bool negate;                 /* OPT_FLAG: store false */
    const char *const *choices;  /* OPT_CHOICE's values, NULL-terminated */
    opt_parse_fn parse;          /* OPT_CUSTOM's parser (any kind: replaces its parse) */
    const char *json;            /* key in opts_to_json; NULL: not echoed */
    opt_json_fn to_json;         /* its value there, if not the field's */
    const char *example;         /* a value it accepts, for the tests (else derived) */
    int action;                  /* OPTS_HELP or OPTS_VERSION: what giving it asks for; or
                                  * OPTS_OWN and above, the table's own (opts_parse_args) */
    const char *missing;         /* opts_parse_args: the words after "--name" when its value
                                  * is missing ("needs a file name"); NULL: "needs a value" */
    const opt_spec *shared;      /* the shared option this entry is (below): its name,
                                  * argument, parse and default; the entry adds the rest */
};

#define OPTS_END {.kind = OPT_END}

/* What opts_parse returns besides an error (-1). OPTS_OWN and above: an
 * action a table gives its own meaning (opts_parse_args returns it). */
enum { OPTS_OK = 0, OPTS_HELP = 1, OPTS_VERSION = 2, OPTS_OWN = 3 };

typedef struct opts_table {
    const char *prog;       /* "psbench-server": --version's line */
    const opt_spec *specs;  /* ended by OPTS_END */
    unsigned help_col;      /* where the help's second column starts */
    bool stop_at_help;      /* --help or --version ends the parsing at once (server, trainer);
                             * else every option is parsed first, an error wins, and --help
                             * wins over --version (master) */
    bool precise_errors;    /* getopt's failures worded apiece: "option --x needs a value",
                             * "option '--local=1' takes no value", "unknown option '--x'"
                             * (master); else "unknown or incomplete option '--x'" */
} opts_table;

/* The most long names (options and aliases) one table holds. */
#define OPTS_MAX 128

/* Set every option's default in settings (.def parsed, .init called);
 * fields of options without one are left as they are. 0, or -1 with err. */
int opts_init(const opts_table *t, void *settings, char *err, size_t errlen);
/* Parse argv (its "--long_name" rewritten to "--long-name" in place,
 * cli_normalize_args) into settings, which opts_init prepared. Returns
 * OPTS_OK, OPTS_HELP, OPTS_VERSION, or -1 with a one-line reason in err. */
int opts_parse(const opts_table *t, int argc, char **argv, void *settings, char *err, size_t errlen);
/* opts_parse, and what it asks for done: the --help text or the version
 * printed on stdout. OPTS_OK to go on, OPTS_HELP or OPTS_VERSION once
 * printed (the binary exits 0), or -1 with err. */
int opts_parse_cli(const opts_table *t, int argc, char **argv, void *settings, char *err, size_t errlen);
/* Whether name (len bytes, without "--") is one of t's long names
 * (options and aliases), whole, as opts_parse takes them; if not,
 * *nearest is the one of them or of more[] (nmore names without "--", a
 * subcommand's own) that cli_nearest suggests, or NULL. For a subcommand
 * that hands the rest of its line to t's parser (psbench-master sweep):
 * "unknown option --order-see: did you mean --order-seed?" at once. */
bool opts_is_long_name(const opts_table *t, const char *name, size_t len, const char *const *more, size_t nmore,
                       const char **nearest);

/* For an opts_other_fn: arg, which looks like an option ("-x", "--name",
 * "--name=v") but is none of t's, refused in the words opts_parse uses:
 * "unknown option --epoch: did you mean --epochs?" where one of t's long
 * names is near, else "unknown option '-q'". Always -1, with err. */
int opts_refuse_unknown(const opts_table *t, const char *arg, char *err, size_t errlen);

/* opts_parse_args's callback: an argument that is none of the table's
 * options, as given. 0 to go on; OPTS_REST to have every later argument
 * handed here as it is, none of them taken as an option (a "--" that
 * ends the options); -1 with a one-line reason in err. */
typedef int (*opts_other_fn)(const char *arg, void *settings, char *err, size_t errlen);
enum { OPTS_REST = 1 };
/* For a subcommand whose line is not all its own (psbench-master sweep:
 * the job's flags go to each point's master; psbench-master diff: its
 * two files): argv[1..argc-1] in order, each of t's options taken as
 * opts_parse takes it — whole long names or aliases, '_' for '-' too,
 * "--name=value" or "--name value" (the next argument, whatever it is),
 * "-x" for its letter — and applied into settings; every other argument,
 * in order and as given, goes to other(), which may take it, pass it on
 * or refuse it. No getopt: nothing is permuted, argv is not rewritten
 * (what is passed on is what the user wrote), and there is no "--"
 * unless other() makes one (OPTS_REST). An option with an .action ends
 * the parsing at once and the action is returned (OPTS_HELP, or the
 * table's own from OPTS_OWN). Else OPTS_OK, or -1 with a one-line reason
 * in err: "--name needs a value" (the option's own name; .missing words
 * it), "option '--name=v' takes no value", or the parser's or other()'s. */
int opts_parse_args(const opts_table *t, int argc, char **argv, void *settings, opts_other_fn other, char *err,
                    size_t errlen);

/* The --help text. */
void opts_usage(const opts_table *t, FILE *f);
/* "psbench-server 0.1.0 (wire protocol 1)" on f. */
void opts_version(const opts_table *t, FILE *f);
/* {key: value} of every option with a .json key, in the table's order:
 * numbers (a u64 above INT64_MAX as a string), strings or null, booleans,
 * or the entry's to_json. New reference; NULL without memory. */
json_t *opts_to_json(const opts_table *t, const void *settings);

/* The entry a table has for `name` (a long name or alias, no "--"), its
 * shared declaration resolved into *out. 0, or -1 if there is none. */
int opts_find(const opts_table *t, const char *name, opt_spec *out);
/* The i-th entry of a table, shared declaration resolved; false past the end. */
bool opts_entry(const opts_table *t, size_t i, opt_spec *out);
/* An option's argument parsed into settings as the command line would be
 * (flag as spelled). 0, or -1 with err. For the tests and opts_init. */
int opts_apply(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err, size_t errlen);
/* OPT_STRING's store, for a parser that checks a string first: arg into
 * the field (a const char * borrows it; a char * gets a copy, and an
 * empty arg is refused). 0, or -1 with err. */
int opts_store_string(const opt_spec *o, const char *flag, const char *arg, void *settings, char *err,
                      size_t errlen);
/* The field's value as text ("12", "1.5", "abc", "(null)", "true"):
 * the tests compare the binaries' shared options with it. */
void opts_field_text(const opt_field *f, const void *settings, char *buf, size_t len);

/* ---- the options every binary shares ------------------------------------ */

extern const opt_spec opts_help;            /* --help, -h */
extern const opt_spec opts_version_opt;     /* --version */
extern const opt_spec opts_log_level;       /* --log-level LEVEL: a log_level field */
extern const opt_spec opts_token;           /* --token T */
extern const opt_spec opts_token_file;      /* --token-file FILE */
extern const opt_spec opts_transport;       /* --transport T: a psb_transport field,
                                             * $PSBENCH_TRANSPORT its default */
extern const opt_spec opts_connect_timeout; /* --connect-timeout SECONDS (30) */
extern const opt_spec opts_device;          /* --device DEV, as given; each binary checks it
                                             * (its own .parse, or after parsing) */
extern const opt_spec opts_follow;          /* --follow: a node's job after job (shared/follow.h) */
extern const opt_spec opts_follow_idle;     /* --follow-idle SECONDS (60) */
/* Their help, the same for a server and a trainer. */
#define OPTS_FOLLOW_HELP                                                                                   \
    "with --master: take job after job from whatever\n"                                                    \
    "master listens there (a sweep's points, the runs of\n"                                                \
    "--runs): after a job, join again; while the master has\n"                                              \
    "no place for this node, or none listens, try again\n"                                                  \
    "every 0.5 s (each try, connecting and waiting for\n"                                                  \
    "the first answer, waits at most --connect-timeout,\n"                                                 \
    "and no longer than --follow-idle has left; a try no\n"                                                \
    "master answered is no job). Exit status: 0 once\n"                                                    \
    "--follow-idle passes without a job, or on SIGINT,\n"                                                  \
    "SIGTERM or SIGHUP while no job runs; non-zero only\n"                                                 \
    "when the master refuses it for good (a wrong token,\n"                                                \
    "a bad register) or a flag is wrong"
#define OPTS_FOLLOW_IDLE_HELP "with --follow: exit 0 after this long without a job\n(default 60)"

/* The job token, by the one precedence: --token's (flag), else the first
 * line of --token-file's file (into buf, CLI_TOKEN_MAX + 1 bytes at least;
 * *loose set when others may read it), else $PSBENCH_TOKEN's when set and
 * not empty, else NULL. *source: "--token", "--token-file" or
 * "PSBENCH_TOKEN" (NULL with no token). 0, or -1 with a one-line reason
 * (the file unreadable or empty, a token longer than CLI_TOKEN_MAX; never
 * the token itself). */
int opts_token_resolve(const char *flag, const char *file, char *buf, size_t buflen, const char **token,
                       const char **source, int *loose, char *err, size_t errlen);

#endif
