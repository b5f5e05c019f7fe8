/* sweep_report.c — TEMPORARY until the report lands. */
#include "master/sweep_report.h"
#include "shared/atomicfile.h"
#include <stdlib.h>
#include <string.h>
int sweep_report_write(const char *path, const json_t *sweep, char *err, size_t len)
{
    char *s = json_dumps(sweep, JSON_COMPACT);
    int rc = afile_write(path, s, s ? strlen(s) : 0, err, len);
    free(s);
    return rc;
}
