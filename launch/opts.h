/* opts.h — psbench-node's command line: its own options (one declarative
 * table, shared/opts.h), and every other argument kept, in order, for the
 * master (psbench-node takes the master's job flags as they are). */
#ifndef PSBENCH_LAUNCH_OPTS_H
#define PSBENCH_LAUNCH_OPTS_H

#include "shared/launchenv.h"
#include "shared/opts.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct node_args {
    launch_flags place;            /* --rank, --world-size, ... as typed */
    uint64_t ntrainer, ncudatrainer, nserver, ncudaserver;
    bool ntrainer_set, nserver_set;
    const char *master_rank;       /* --master-rank: "last" or "0" */
    const char *device;            /* --device: the CUDA roles' */
    double connect_timeout_s;      /* --connect-timeout, handed on when given */
    bool connect_timeout_set;
    const char *token, *token_file;
    bool dry_run;
    const char *print_hostnames;   /* --print-hostnames LIST */
    /* The master's arguments: the ones psbench-node does not know, and the
     * ones it reads and hands on as well (the counts, the token). */
    int nmaster;
    char **master;
} node_args;

const opts_table *node_opts(void);

/* Parse argv into a (its defaults set first). OPTS_OK, OPTS_HELP or
 * OPTS_VERSION once printed, or -1 with a one-line reason in err. */
int node_args_parse(node_args *a, int argc, char **argv, char *err, size_t errlen);
/* What node_args_parse allocated (the master's argument list). */
void node_args_free(node_args *a);

#endif
