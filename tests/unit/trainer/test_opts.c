/* trainer/test_opts.c — psbench-trainer's settings for shared/test_opts.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "trainer/opts.h"
#include "tests/unit/test_opts.h"

static int trainer_init(void *s)
{
    char err[256];
    return trainer_args_init(s, err, sizeof err);
}

static void trainer_extra(const void *s, char *buf, size_t len)
{
    const trainer_args *a = s;
    snprintf(buf, len, "dev=%d:%d", (int)a->dev.kind, a->dev.index);
}

const binary test_opts_trainer = {"psbench-trainer", trainer_opts, sizeof(trainer_args), trainer_init, NULL,
                                  trainer_extra};

void test_opts_trainer_defaults(void)
{
    char err[256];
    trainer_args t;
    assert_int_equal(trainer_args_init(&t, err, sizeof err), 0);
    assert_int_equal(t.syn.buckets, 4);
    assert_true(t.syn.bucket_floats == 262144 && t.syn.batches == 100 && t.syn.warmup == 0);
    assert_int_equal(t.syn.sparse_cols, 16);
    assert_true(t.syn.rpc_timeout_s == 60 && t.connect_timeout_s == 30);
    assert_true(t.bu.in_features == 100 && t.bu.out_features == 30 && t.bu.batch_size == 20 && t.bu.seed == 0);
    assert_true(t.compute_nice == 10);
    assert_string_equal(t.device, "cpu");
    assert_true(t.dev.kind == DEVICE_CPU && t.dev.index == -1);
    assert_int_equal(t.transport, PSB_TRANSPORT_AUTO);
    assert_false(t.have_rank || t.bu_flags || t.syn.sparse);
    assert_null(t.servers);
    assert_null(t.master);
}
