/* sweep_report.h — a sweep's report.html: one self-contained page.
 *
 * Written from the sweep document (sweep.h's sweep.json, version 1): the
 * page needs no network (uPlot and the page's script are inlined, the
 * document too), so it can be mailed or archived with the sweep folder. */
#ifndef PSBENCH_SWEEP_REPORT_H
#define PSBENCH_SWEEP_REPORT_H

#include <jansson.h>
#include <stddef.h>

/* Write the report of `sweep` to `path` (whole or not at all: an atomic
 * replace). 0, or -1 with a line naming the path and the errno in err. */
int sweep_report_write(const char *path, const json_t *sweep, char *err, size_t len);

#endif
