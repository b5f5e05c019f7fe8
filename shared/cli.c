/* cli.c — strict command-line value parsing (see cli.h). */
#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/userpath.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, int sizes,
                  uint64_t *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (!s || *s == '\0' || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
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
    snprintf(err, errlen, "%s: '%s' is not a %s", opt, s ? s : "",
             sizes ? "size (a whole number, optionally with K, M or G)" : "whole number");
    return -1;
range:
    snprintf(err, errlen, "%s: %s is outside %llu..%llu", opt, s, (unsigned long long)min,
             (unsigned long long)max);
    return -1;
}

int cli_parse_seconds(const char *opt, const char *s, double *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v <= 0) {
        snprintf(err, errlen, "%s: '%s' is not a positive number of seconds", opt, s);
        return -1;
    }
    if (v > CLI_MAX_SECONDS) {
        snprintf(err, errlen, "%s: %s s is more than the %.0f s allowed", opt, s, CLI_MAX_SECONDS);
        return -1;
    }
    *out = v;
    return 0;
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
