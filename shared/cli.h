/* cli.h — strict parsing of command-line values with one-line errors (the
 * option tables, shared/opts.h, parse with these), the job token's checks
 * and the --device value. */
#ifndef PSBENCH_CLI_H
#define PSBENCH_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Numbers are decimal everywhere (flags, configuration and sweep files):
 * whether s is one as psbench spells it: digits only (real: an optional
 * sign, a decimal point, an exponent), nothing before or after. No
 * blanks, no hex ("0x10"), no "inf" or "nan"; a leading zero keeps the
 * decimal meaning ("010" is 10). */
bool cli_is_decimal(const char *s, bool real);
/* Why x, checked as a double, is not the same number as the float it is
 * used as (trainers and servers step in float): "it is 0 as a float ..."
 * for a non-zero x that rounds to 0 or to a subnormal (which the GPU and
 * flush-to-zero code read as 0), "it is infinite as a float ..."; NULL
 * when it is fine (0 itself too). */
const char *cli_float_problem(double x);

/* Parse a whole string as an unsigned integer in [min, max]. Accepts an
 * optional K/M/G suffix (powers of 1024) when `sizes` is set. Returns 0, or
 * -1 with a message naming `opt` in err. */
int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, int sizes,
                  uint64_t *out, char *err, size_t errlen);
/* A byte count for people, in the units cli_parse_u64 takes: "256 MiB",
 * "8 GiB", "23.4 GiB" (one decimal unless exact), "512 B". */
void cli_format_bytes(uint64_t n, char *buf, size_t len);
/* A decimal real (cli_is_decimal), finite and not below a double's
 * normal numbers (1e-400 would be read as 0): 0, or -1 with a message
 * naming `opt` in err. */
int cli_parse_real(const char *opt, const char *s, double *out, char *err, size_t errlen);
/* Parse a positive finite number of seconds, decimal, from CLI_MIN_SECONDS
 * to CLI_MAX_SECONDS. */
/* Longest duration any option takes (11.5 days): deadlines computed from
 * it stay far from overflowing a time_t. */
#define CLI_MAX_SECONDS 1e6
/* Shortest: waits are counted in milliseconds. */
#define CLI_MIN_SECONDS 0.001
int cli_parse_seconds(const char *opt, const char *s, double *out, char *err, size_t errlen);

/* The longest job token, in bytes: one limit for every binary and every
 * source of the token (--token, --token-file, $PSBENCH_TOKEN), checked
 * where the token is read, so that a token every node would be refused
 * with (the control plane carries at most this many bytes) never starts a
 * run. */
#define CLI_TOKEN_MAX 255

/* The job token from a file (--token-file FILE): its first line, trailing
 * whitespace (newline, CR, blanks) stripped, into buf (at least
 * CLI_TOKEN_MAX + 1 bytes). Returns 0, or -1 with a one-line reason naming
 * the file in err (unreadable, empty, longer than CLI_TOKEN_MAX bytes).
 * *loose is set when FILE is a regular file that group or others may read
 * (the caller warns, as ssh does for keys). The token itself never goes
 * into err. */
int cli_read_token_file(const char *path, char *buf, size_t len, int *loose, char *err, size_t errlen);
/* A token given as `source` ("--token", "PSBENCH_TOKEN"): 0, or -1 with a
 * one-line reason naming the source (never the token) when it is longer
 * than CLI_TOKEN_MAX bytes. */
int cli_check_token(const char *source, const char *token, char *err, size_t errlen);

/* A --device value: "cpu" (*cuda_index = -1), "cuda" (0) or "cuda:N"
 * (N in 0..255). Returns 0, or -1 with a message naming `opt` in err.
 * devspec_parse (shared/devspec.h) with the cpu and cuda kinds only; the
 * binaries use devspec_parse itself. */
int cli_parse_device(const char *opt, const char *s, int *cuda_index, char *err, size_t errlen);

/* Of the n names in cands, the one a mistyped `word` (len bytes, no
 * "--") most likely meant, for "did you mean --epochs?": a name word
 * begins, if any (word of 2 characters or more: "--ep" for --epochs, an
 * abbreviation psbench does not take), the shortest; else the fewest
 * one-character edits (insert, delete, replace; Levenshtein), near enough
 * to be a slip (1 for a word of 1 or 2 characters, else 2, or a third of
 * the word's length when that is more). Ties go to
 * the earlier name. NULL when none is near: a suggestion far from what
 * was typed would mislead. */
const char *cli_nearest(const char *word, size_t len, const char *const *cands, size_t n);

/* Rewrite "--long_name[=v]" to "--long-name[=v]" in place, so that every
 * long option accepts both spellings (the seed's launcher used '_'). */
void cli_normalize_args(int argc, char **argv);

#endif
