/* opts.h — psbench-trainer's command line: its option table
 * (shared/opts.h) and the settings it fills. main.c parses into
 * trainer_args, then checks how the options fit together and runs. */
#ifndef PSBENCH_TRAINER_OPTS_H
#define PSBENCH_TRAINER_OPTS_H

#include "shared/cli.h"
#include "shared/devspec.h"
#include "shared/log.h"
#include "shared/opts.h"
#include "shared/shm.h"
#include "shared/tracejob.h"
#include "trainer/batch_update.h"
#include "trainer/synthetic.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct trainer_args {
    synthetic_config syn;      /* --model synthetic's (synthetic.h); syn.rank is --rank */
    batch_update_config bu;    /* --model batch-update's (batch_update.h) */
    bool have_rank;            /* --rank given */
    bool bu_flags;             /* a batch-update flag given */
    const char *servers;       /* --server LIST */
    const char *master;        /* --master HOST:PORT */
    const char *model;         /* --model */
    const char *compress;      /* --compress none|fp16|bf16 (standalone synthetic: its dense pushes' type) */
    const char *summary;       /* --summary-json FILE */
    const char *params_out;    /* --params-out FILE */
    const char *coll_host;     /* --collective-host HOST */
    const char *device;        /* --device (cpu) */
    device_spec dev;           /* --device, parsed once (shared/devspec.h) */
    const char *token;         /* --token, then the token opts_token_resolve chose */
    const char *token_file;    /* --token-file FILE */
    double connect_timeout_s;  /* --connect-timeout */
    bool follow;               /* --follow: job after job (shared/follow.h) */
    double follow_idle_s;      /* --follow-idle: exit after this long without a job */
    bool have_follow_idle;
    psb_transport transport;   /* --transport */
    uint64_t compute_nice;     /* --compute-nice */
    log_level log_level;       /* --log-level */
    trace_flags trace;         /* --trace, --trace-steps (parsed); capacity from trace_buffer */
    uint64_t trace_buffer;     /* --trace-buffer, 0: not given */
    char token_buf[CLI_TOKEN_MAX + 1]; /* --token-file's token */
} trainer_args;

/* The table (for main.c and the tests). */
const opts_table *trainer_opts(void);
/* args zeroed and every default set. 0, or -1 with err. */
int trainer_args_init(trainer_args *a, char *err, size_t errlen);

#endif
