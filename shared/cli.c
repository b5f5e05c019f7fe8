/* cli.c — strict command-line value parsing (see cli.h). */
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/text.h"
#include "shared/userpath.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- numbers -------------------------------------------------------------------- */

/* Every number a flag, a configuration file or a sweep file gives is
 * decimal, spelt one way: digits, for a real an optional sign, point and
 * exponent. strtoull and strtod accept more, each with a meaning no one
 * meant: leading blanks, "+5", "0x10" (16), "0x1p4", "inf", "nan". A
 * leading zero changes nothing ("010" is ten): psbench never reads octal. */
bool cli_is_decimal(const char *s, bool real)
{
    const char *p = s;
    if (!p)
        return false;
    if (real && (*p == '-' || *p == '+'))
        p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (real && *p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++;
    if (digits == 0)
        return false;
    if (real && (*p == 'e' || *p == 'E')) {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0';
}

const char *cli_float_problem(double x)
{
    if (x == 0 || isnan(x))
        return NULL; /* exactly zero stays zero; NaN is the range check's to refuse */
    float f = (float)x;
    if (isinf(f))
        return "it is infinite as a float, whose largest is 3.40282e+38";
    if (f == 0 || fpclassify(f) == FP_SUBNORMAL)
        return "it is 0 as a float, whose smallest normal number is 1.17549e-38";
    return NULL;
}

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, int sizes,
                  uint64_t *out, char *err, size_t errlen)
{
    char *end;
    text_shown shown;
    errno = 0;
    /* A digit first: strtoull would skip blanks and take a sign. */
    if (!s || !(*s >= '0' && *s <= '9'))
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        goto range;
    if (errno || end == s)
        goto bad;
    if (sizes && *end) {
        unsigned shift = 0;
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: goto bad;
        }
        if (v > (UINT64_MAX >> shift))
            goto range;
        v <<= shift;
        end++;
    }
    if (*end)
        goto bad;
    if (v < min || v > max)
        goto range;
    *out = v;
    return 0;
bad:
    snprintf(err, errlen, "%s: %s is not a %s", opt, text_show(s, '\'', &shown),
             sizes ? "size (a whole number, optionally with K, M or G)" : "whole number");
    return -1;
range:
    snprintf(err, errlen, "%s: %s is outside %llu..%llu", opt, text_show(s, 0, &shown), (unsigned long long)min,
             (unsigned long long)max);
    return -1;
}

int cli_parse_real(const char *opt, const char *s, double *out, char *err, size_t errlen)
{
    text_shown shown;
    if (!cli_is_decimal(s, true)) {
        snprintf(err, errlen, "%s: %s is not a decimal number", opt, text_show(s, '\'', &shown));
        return -1;
    }
    errno = 0;
    double v = strtod(s, NULL);
    /* ERANGE: beyond a double (inf), or below its normal numbers (0 or a
     * subnormal): the number written is not the number read. */
    if (errno == ERANGE || !isfinite(v)) {
        snprintf(err, errlen, "%s: %s is %s", opt, text_show(s, 0, &shown),
                 isinf(v) || fabs(v) > 1 ? "too large for a number" : "too small for a number (it would be 0)");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_seconds(const char *opt, const char *s, double *out, char *err, size_t errlen)
{
    text_shown shown;
    double v;
    char why[256];
    if (cli_parse_real(opt, s, &v, why, sizeof why) < 0 || v <= 0) {
        snprintf(err, errlen, "%s: %s is not a positive number of seconds", opt, text_show(s, '\'', &shown));
        return -1;
    }
    if (v > CLI_MAX_SECONDS) {
        snprintf(err, errlen, "%s: %s s is more than the %.0f s allowed", opt, text_show(s, 0, &shown),
                 CLI_MAX_SECONDS);
        return -1;
    }
    /* Waits are counted in milliseconds (poll, connect): less than one
     * would be no wait at all, or none at all to the kernel. */
    if (v < CLI_MIN_SECONDS) {
        snprintf(err, errlen, "%s: %s s is less than the %g s psbench can wait (it counts milliseconds)", opt,
                 text_show(s, 0, &shown), CLI_MIN_SECONDS);
        return -1;
    }
    *out = v;
    return 0;
}

/* Levenshtein distance between a (alen bytes) and b, capped at CLI_NEAR_CAP
 * (anything that far is no slip); names are short (CLI_NEAR_MAX). */
#define CLI_NEAR_MAX 64
#define CLI_NEAR_CAP 100
static size_t cli_edit_distance(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen > CLI_NEAR_MAX || blen > CLI_NEAR_MAX)
        return CLI_NEAR_CAP;
    size_t row[CLI_NEAR_MAX + 1];
    for (size_t j = 0; j <= blen; j++)
        row[j] = j;
    for (size_t i = 1; i <= alen; i++) {
        size_t diag = row[0]; /* row[i-1][j-1] */
        row[0] = i;
        for (size_t j = 1; j <= blen; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[blen];
}

const char *cli_nearest(const char *word, size_t len, const char *const *cands, size_t n)
{
    /* A name the word begins is what an abbreviation meant ("--ep" is
     * --epochs, not --lr, two edits away): those first, the shortest. */
    const char *best = NULL;
    size_t best_d = CLI_NEAR_CAP;
    for (int pass = 0; pass < 2 && !best; pass++) {
        size_t slip = len <= 2 ? 1 : len / 3 > 2 ? len / 3 : 2; /* "x" is not a slip of "lr" */
        size_t near = pass == 0 ? CLI_NEAR_CAP - 1 : slip;
        for (size_t i = 0; i < n; i++) {
            if (pass == 0 && (len < 2 || strncmp(cands[i], word, len) != 0))
                continue;
            size_t d = cli_edit_distance(word, len, cands[i]);
            if (d <= near && d < best_d) {
                best = cands[i];
                best_d = d;
            }
        }
    }
    return best;
}

void cli_normalize_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (a[0] != '-' || a[1] != '-')
            continue;
        if (a[2] == '\0')
            break; /* "--" ends the options */
        for (char *p = a + 2; *p && *p != '='; p++)
            if (*p == '_')
                *p = '-';
    }
}

int cli_read_token_file(const char *path, char *buf, size_t len, int *loose, char *err, size_t errlen)
{
    *loose = 0;
    if (!path || !*path) {
        snprintf(err, errlen, "--token-file: needs a file name");
        return -1;
    }
    /* A regular file only: a FIFO would block the binary before it said
     * a word (userpath.h). */
    char why[256];
    int fd = userpath_open_read(path, why, sizeof why);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) {
            snprintf(why, sizeof why, "%s", strerror(errno));
            close(fd);
        }
        snprintf(err, errlen, "--token-file %s: %s", path, why);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
        *loose = 1;
    char line[4096];
    int rc = 0;
    if (!fgets(line, sizeof line, f)) {
        if (ferror(f))
            snprintf(err, errlen, "--token-file %s: %s", path, strerror(errno ? errno : EIO));
        else
            snprintf(err, errlen, "--token-file %s: the file is empty (the token is its first line)", path);
        rc = -1;
    } else {
        size_t n = strcspn(line, "\n");
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r' ||
                         line[n - 1] == '\v' || line[n - 1] == '\f'))
            n--;
        if (n == 0) {
            snprintf(err, errlen, "--token-file %s: the first line is empty (the token is the first line)", path);
            rc = -1;
        } else if (n > CLI_TOKEN_MAX || n >= len || (n == sizeof line - 1 && !strchr(line, '\n'))) {
            snprintf(err, errlen, "--token-file %s: the token is longer than %d bytes (the most psbench takes)",
                     path, len - 1 < CLI_TOKEN_MAX ? (int)(len - 1) : CLI_TOKEN_MAX);
            rc = -1;
        } else {
            memcpy(buf, line, n);
            buf[n] = '\0';
        }
    }
    fclose(f);
    return rc;
}

int cli_check_token(const char *source, const char *token, char *err, size_t errlen)
{
    if (token && strlen(token) > CLI_TOKEN_MAX) {
        snprintf(err, errlen, "%s: the token is longer than %d bytes (the most psbench takes)", source,
                 CLI_TOKEN_MAX);
        return -1;
    }
    return 0;
}

int cli_parse_device(const char *opt, const char *s, int *cuda_index, char *err, size_t errlen)
{
    device_spec d;
    if (devspec_parse(opt, s, DEVSPEC_KIND(DEVICE_CPU) | DEVSPEC_KIND(DEVICE_CUDA), &d, err, errlen) < 0)
        return -1;
    *cuda_index = d.kind == DEVICE_CPU ? -1 : devspec_gpu(d);
    return 0;
}

void cli_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned u = 0;
    uint64_t scale = 1;
    while (u + 1 < sizeof units / sizeof units[0] && n / scale >= 1024) {
        scale *= 1024;
        u++;
    }
    if (n % scale == 0)
        snprintf(buf, len, "%llu %s", (unsigned long long)(n / scale), units[u]);
    else
        snprintf(buf, len, "%.1f %s", (double)n / (double)scale, units[u]);
}
