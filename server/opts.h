/* opts.h — psbench-server's command line: its option table (shared/opts.h)
 * and the settings it fills. main.c parses into server_args, then checks
 * how the options fit together and starts the server on args.cfg. */
#ifndef PSBENCH_SERVER_OPTS_H
#define PSBENCH_SERVER_OPTS_H

#include "server/server.h"
#include "shared/cli.h"
#include "shared/log.h"
#include "shared/opts.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct server_args {
    server_config cfg;         /* what the server runs with (server.h) */
    bool standalone;           /* --standalone */
    const char *master;        /* --master HOST:PORT, NULL */
    const char *advertise;     /* --advertise HOST, NULL */
    const char *device;        /* --device, else $PSBENCH_SERVER_DEVICE, else "cpu" */
    const char *token_file;    /* --token-file FILE, NULL */
    double connect_timeout_s;  /* --connect-timeout: keep trying the master */
    bool follow;               /* --follow: job after job (shared/follow.h) */
    double follow_idle_s;      /* --follow-idle: exit after this long without a job */
    bool have_follow_idle;
    log_level log_level;       /* --log-level */
    uint32_t open_pushes;      /* --max-open-pushes (bounds.h) */
    uint64_t open_bytes;       /* --max-open-bytes */
    float lr;                  /* --lr, for batch-update or embedding: applied once the kind is known */
    uint64_t seed;             /* --seed, likewise */
    bool have_lr, have_seed, have_rank;
    bool bu_flags, emb_flags;  /* a batch-update flag, an embedding flag was given */
    char token_buf[CLI_TOKEN_MAX + 1]; /* --token-file's token */
} server_args;

/* The table (for main.c and the tests). */
const opts_table *server_opts(void);
/* args zeroed and every default set (opts_init, and the kinds' own). 0, or
 * -1 with err. */
int server_args_init(server_args *a, char *err, size_t errlen);

#endif
