/* log.h — leveled logging to stderr for the psbench binaries.
 *
 * Libraries return errors; only the binaries that own the user call these.
 * Lines look like "psbench-server: warn: message".
 */
#ifndef PSBENCH_LOG_H
#define PSBENCH_LOG_H

#include <stddef.h>

typedef enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

void log_init(const char *progname, log_level level);
/* Parse "error|warn|info|debug"; returns 0, or -1 if unknown. */
int log_level_parse(const char *s, log_level *out);
log_level log_get_level(void);
const char *log_progname(void);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Format a one-line reason into a caller's error buffer (err may be NULL). */
void errbuf_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
