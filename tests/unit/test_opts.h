/* test_opts.h — what shared/test_opts.c knows of each binary's settings; the
 * server's and the trainer's are in server/test_opts.c and
 * trainer/test_opts.c (their types share names: one file each). */
#ifndef PSBENCH_TEST_OPTS_H
#define PSBENCH_TEST_OPTS_H

#include "shared/opts.h"

#include <stddef.h>

typedef struct binary {
    const char *name;
    const opts_table *(*table)(void);
    size_t size;
    int (*init)(void *s);
    void (*fini)(void *s);
    /* What the table's fields do not show (a custom parser's fields). */
    void (*extra)(const void *s, char *buf, size_t len);
} binary;

extern const binary test_opts_server, test_opts_trainer;
/* Each binary's defaults, checked with cmocka's asserts. */
void test_opts_server_defaults(void);
void test_opts_trainer_defaults(void);

#endif
