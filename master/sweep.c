/* sweep.c — `psbench-master sweep`: a matrix of jobs (see sweep.h). */
#include "master/sweep.h"

#include "master/sweep_report.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void sweep_usage(FILE *f)
{
    fputs("usage: psbench-master sweep [options] [job options]\n"
          "       psbench-master sweep --report DIR\n", f);
}

/* --report DIR: DIR/report.html again from DIR/sweep.json. */
static int sweep_rerender(const char *dir, FILE *err)
{
    char path[4096], msg[512];
    snprintf(path, sizeof path, "%s/sweep.json", dir);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) {
        fprintf(err, "psbench-master sweep: %s: %s\n", path, je.text);
        return 1;
    }
    snprintf(path, sizeof path, "%s/report.html", dir);
    int rc = sweep_report_write(path, doc, msg, sizeof msg);
    json_decref(doc);
    if (rc < 0) {
        fprintf(err, "psbench-master sweep: %s\n", msg);
        return 1;
    }
    return 0;
}

int sweep_main(int argc, char **argv, FILE *out, FILE *err)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            sweep_usage(out);
            return 0;
        }
        if (strcmp(argv[i], "--report") == 0 && i + 1 < argc)
            return sweep_rerender(argv[i + 1], err);
    }
    sweep_usage(err);
    return 2;
}
