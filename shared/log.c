/* log.c — leveled logging to stderr (see log.h). */
#include "shared/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *log_prog = "psbench";
static log_level log_cur = LOG_INFO;
static const char *const log_names[] = {"error", "warn", "info", "debug"};

void log_init(const char *progname, log_level level)
{
    log_prog = progname;
    log_cur = level;
}

int log_level_parse(const char *s, log_level *out)
{
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (strcmp(s, log_names[i]) == 0) {
            *out = (log_level)i;
            return 0;
        }
    return -1;
}

log_level log_get_level(void) { return log_cur; }
const char *log_progname(void) { return log_prog; }

void log_msg(log_level level, const char *fmt, ...)
{
    if (level > log_cur)
        return;
    /* One fprintf per line so that lines of concurrent processes sharing a
     * terminal do not interleave mid-line. */
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (level == LOG_INFO)
        fprintf(stderr, "%s: %s\n", log_prog, line);
    else
        fprintf(stderr, "%s: %s: %s\n", log_prog, log_names[level], line);
}

void errbuf_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
