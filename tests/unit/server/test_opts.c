/* server/test_opts.c — psbench-server's settings for shared/test_opts.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "server/bounds.h"
#include "server/opts.h"
#include "shared/frame.h"
#include "tests/unit/test_opts.h"


static int server_init_args(void *s)
{
    char err[256];
    return server_args_init(s, err, sizeof err);
}

static void server_extra(const void *s, char *buf, size_t len)
{
    const server_args *a = s;
    snprintf(buf, len, "host=%s port=%u kind=%d part=%u/%u advertise=%s", a->cfg.host, a->cfg.port,
             (int)a->cfg.kind.id, a->cfg.kind.bu.part, a->cfg.kind.bu.parts, a->advertise ? a->advertise : "-");
}

const binary test_opts_server = {"psbench-server", server_opts, sizeof(server_args), server_init_args, NULL, server_extra};

void test_opts_server_defaults(void)
{
    unsetenv("PSBENCH_TRANSPORT");
    unsetenv("PSBENCH_SERVER_DEVICE");
    server_args s;
    char err[256];
    assert_int_equal(server_args_init(&s, err, sizeof err), 0);
    assert_string_equal(s.cfg.host, "0.0.0.0");
    assert_int_equal(s.cfg.port, 0);
    assert_int_equal(s.cfg.trainers, 0);
    assert_int_equal(s.cfg.kind.id, KIND_AVERAGE);
    assert_true(s.cfg.max_payload == FRAME_MAX_PAYLOAD_DEFAULT);
    assert_true(s.cfg.max_queued == 256ull << 20);
    assert_true(s.cfg.max_shm == SHM_SEG_DEFAULT_MAX);
    assert_true(s.cfg.gpu_share == 1ull << 30);
    assert_int_equal(s.open_pushes, BOUNDS_DEFAULT_PUSHES);
    assert_true(s.open_bytes == BOUNDS_DEFAULT_BYTES);
    assert_true(s.cfg.hello_timeout_s == 30 && s.connect_timeout_s == 30);
    assert_int_equal(s.cfg.kind.bu.in_features, 100);
    assert_int_equal(s.cfg.kind.bu.out_features, 30);
    assert_true(s.cfg.kind.bu.lr == 0.001f && s.cfg.kind.bu.momentum == 0.9f);
    assert_int_equal(s.cfg.kind.bu.part, 0);
    assert_int_equal(s.cfg.kind.bu.parts, 1);
    assert_true(s.cfg.kind.emb.num_embeddings == 300 && s.cfg.kind.emb.embedding_dim == 64);
    assert_true(s.cfg.kind.emb.lr == 0.05f);
    assert_string_equal(s.device, "cpu");
    assert_int_equal(s.log_level, LOG_INFO);
    assert_int_equal(s.cfg.transport, PSB_TRANSPORT_AUTO);
    assert_false(s.cfg.splice || s.standalone || s.bu_flags || s.emb_flags || s.cfg.open_flags);
    assert_null(s.cfg.token);
    assert_int_equal(s.cfg.listen_fd, -1);
    /* The environment's defaults. */
    setenv("PSBENCH_SERVER_DEVICE", "test", 1);
    setenv("PSBENCH_TRANSPORT", "tcp", 1);
    assert_int_equal(server_args_init(&s, err, sizeof err), 0);
    assert_string_equal(s.device, "test");
    assert_int_equal(s.cfg.transport, PSB_TRANSPORT_TCP);
    unsetenv("PSBENCH_SERVER_DEVICE");
    unsetenv("PSBENCH_TRANSPORT");
}
