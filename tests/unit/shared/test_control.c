/* test_control.c — control-plane messages (shared/control.c) and the
 * master's aggregation of streamed samples (master/aggregate.c): what a
 * node sends is what the master counts, exactly, per rank and combined.
 * Also the first answer of a master (ctl_recv_first) and what a peer that
 * is not psbench looks like (shared/peer.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "master/aggregate.h"
#include "shared/control.h"
#include "shared/metrics.h"
#include "shared/net.h"
#include "shared/peer.h"

static void test_roundtrip_and_partial(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:s, s:I}", "role", "trainer", "port", (json_int_t)4242);
    uint8_t *buf;
    size_t len;
    assert_int_equal(ctl_encode("register", "tok", body, &buf, &len), 0);
    json_decref(body);
    frame_decoder d;
    frame_decoder_init(&d, CTL_MAX_BODY);
    ctl_msg m;
    size_t used;
    for (size_t cut = 0; cut < len; cut++) /* every prefix: wait for more */
        assert_int_equal(ctl_decode(&d, buf, cut, &m, &used), FRAME_NEED_MORE);
    assert_int_equal(ctl_decode(&d, buf, len, &m, &used), FRAME_OK);
    assert_int_equal(used, len);
    assert_string_equal(m.type, "register");
    assert_string_equal(m.token, "tok");
    assert_string_equal(ctl_str(m.body, "role", ""), "trainer");
    assert_int_equal(ctl_int(m.body, "port", 0), 4242);
    assert_int_equal(ctl_int(m.body, "missing", -7), -7);
    ctl_msg_clear(&m);
    free(buf);
    frame_decoder_free(&d);
}

/* A token longer than CLI_TOKEN_MAX is said (token_too_long), not dropped
 * as if none had been sent; one of CLI_TOKEN_MAX bytes is kept whole. */
static void test_token_limit(void **state)
{
    (void)state;
    char tok[CLI_TOKEN_MAX + 2];
    for (size_t len = CLI_TOKEN_MAX; len <= CLI_TOKEN_MAX + 1; len++) {
        memset(tok, 't', len);
        tok[len] = '\0';
        uint8_t *buf;
        size_t n, used;
        assert_int_equal(ctl_encode("register", tok, NULL, &buf, &n), 0);
        frame_decoder d;
        frame_decoder_init(&d, CTL_MAX_BODY);
        ctl_msg m;
        assert_int_equal(ctl_decode(&d, buf, n, &m, &used), FRAME_OK);
        assert_int_equal(m.token_too_long, len > CLI_TOKEN_MAX);
        assert_string_equal(m.token, len > CLI_TOKEN_MAX ? "" : tok);
        ctl_msg_clear(&m);
        free(buf);
    }
    char err[200];
    assert_int_equal(cli_check_token("--token", tok, err, sizeof err), -1);
    assert_string_equal(err, "--token: the token is longer than 255 bytes (the most psbench takes)");
    tok[CLI_TOKEN_MAX] = '\0';
    assert_int_equal(cli_check_token("--token", tok, err, sizeof err), 0);
}

/* A decoder's max_header (the master's, before a node registers) refuses
 * a longer header at its length, before any of it arrives. */
static void test_header_limit(void **state)
{
    (void)state;
    json_t *body = json_pack("{s:s}", "role", "trainer");
    uint8_t *buf;
    size_t n, used;
    assert_int_equal(ctl_encode("register", "tok", body, &buf, &n), 0);
    json_decref(body);
    frame_decoder d;
    frame_decoder_init(&d, 1 << 20);
    d.max_header = 4;
    ctl_msg m;
    assert_int_equal(ctl_decode(&d, buf, FRAME_PREFIX_LEN, &m, &used), FRAME_TOO_LARGE);
    assert_non_null(strstr(d.err, "exceeds the limit of 4"));
    d.max_header = FRAME_HDR_MAX;
    d.max_payload = 2;
    assert_int_equal(ctl_decode(&d, buf, n, &m, &used), FRAME_TOO_LARGE);
    free(buf);
}

/* A frame whose payload is not a JSON object is malformed. */
static void test_bad_bodies(void **state)
{
    (void)state;
    const char *bodies[] = {"[1,2]", "{\"a\":", "not json", "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        frame_hdr h = {0};
        h.type = FT_OTHER;
        h.type_str = frame_str_c("metrics");
        h.payload = strlen(bodies[i]);
        h.has = FH_PAYLOAD;
        uint8_t buf[256];
        size_t hl = frame_encode_header(&h, buf, sizeof buf);
        memcpy(buf + hl, bodies[i], h.payload);
        frame_decoder d;
        frame_decoder_init(&d, CTL_MAX_BODY);
        ctl_msg m;
        size_t used;
        assert_int_equal(ctl_decode(&d, buf, hl + h.payload, &m, &used), FRAME_BAD);
        assert_true(strlen(d.err) > 0);
        frame_decoder_free(&d);
    }
}

/* A stream buffered elsewhere (an evbuffer): ctl_read_stream looks at no
 * more than the message needs and says what to drain. */
typedef struct view_ctx {
    const uint8_t *p;
    size_t max_asked;
} view_ctx;

static const uint8_t *test_view(void *ctx, size_t n)
{
    view_ctx *v = ctx;
    if (n > v->max_asked)
        v->max_asked = n;
    return v->p;
}

static void test_read_stream(void **state)
{
    (void)state;
    uint8_t *a, *b;
    size_t la, lb;
    json_t *body = json_pack("{s:I}", "rank", (json_int_t)3);
    assert_int_equal(ctl_encode("assign", NULL, body, &a, &la), 0);
    json_decref(body);
    assert_int_equal(ctl_encode("stop", NULL, NULL, &b, &lb), 0);
    uint8_t *buf = malloc(la + lb);
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    frame_decoder d;
    frame_decoder_init(&d, CTL_MAX_BODY);
    ctl_msg m;
    size_t used;
    for (size_t avail = 0; avail < la; avail++) {
        view_ctx v = {buf, 0};
        assert_int_equal(ctl_read_stream(&d, avail, test_view, &v, &m, &used), FRAME_NEED_MORE);
        assert_true(v.max_asked <= avail);
    }
    view_ctx v = {buf, 0};
    assert_int_equal(ctl_read_stream(&d, la + lb, test_view, &v, &m, &used), FRAME_OK);
    assert_int_equal(used, la);
    assert_int_equal(v.max_asked, la); /* not the second message */
    assert_string_equal(m.type, "assign");
    assert_int_equal(ctl_int(m.body, "rank", -1), 3);
    ctl_msg_clear(&m);
    v = (view_ctx){buf + la, 0};
    assert_int_equal(ctl_read_stream(&d, lb, test_view, &v, &m, &used), FRAME_OK);
    assert_int_equal(used, lb);
    assert_string_equal(m.type, "stop");
    ctl_msg_clear(&m);
    /* A malformed prefix is seen as soon as it is there. */
    const uint8_t bad[] = {0, 0, 0, 0};
    v = (view_ctx){bad, 0};
    assert_int_equal(ctl_read_stream(&d, sizeof bad, test_view, &v, &m, &used), FRAME_BAD);
    assert_true(strlen(d.err) > 0);
    frame_decoder_free(&d);
    free(buf);
    free(a);
    free(b);
}

/* Samples recorded with reporting on are handed over once, then gone. */
static void test_take_samples(void **state)
{
    (void)state;
    metrics *m = metrics_new();
    stats *a = metrics_get(m, "batch_level_metric,batch_all");
    metrics_add(a, 1.0); /* before reporting: local only */
    metrics_enable_reporting(m);
    metrics_add(a, 2.0);
    metrics_add(a, 3.0);
    stats *b = metrics_get(m, "hook_future_metric,rpc_dense");
    metrics_add(b, 5.0);
    json_t *o = ctl_take_samples(m);
    assert_int_equal(json_array_size(json_object_get(o, "batch_level_metric,batch_all")), 2);
    assert_true(json_real_value(json_array_get(json_object_get(o, "batch_level_metric,batch_all"), 1)) == 3.0);
    assert_int_equal(json_array_size(json_object_get(o, "hook_future_metric,rpc_dense")), 1);
    json_decref(o);
    o = ctl_take_samples(m);
    assert_int_equal(json_object_size(o), 0);
    json_decref(o);
    assert_int_equal(a->count, 3); /* the local stats keep everything */
    metrics_free(m);
}

static void test_aggregate(void **state)
{
    (void)state;
    aggregate a;
    assert_int_equal(agg_init(&a), 0);
    char err[128];
    json_t *r0 = json_pack("{s:[f,f,f]}", "batch_level_metric,batch_all", 1.0, 2.0, 3.0);
    json_t *r1 = json_pack("{s:[f]}", "batch_level_metric,batch_all", 10.0);
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 0, r0, err, sizeof err), 0);
    assert_int_equal(agg_add_report(&a, AGG_TRAINER, 1, r1, err, sizeof err), 0);
    size_t n;
    snap_stat *st = agg_snapshot(&a, true, &n);
    assert_int_equal(n, 3); /* rank 0, rank 1, all */
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (st[i].rank == 0) {
            assert_int_equal(st[i].s.count, 3);
            assert_true(st[i].s.mean == 2.0);
            seen |= 1;
        } else if (st[i].rank == 1) {
            assert_int_equal(st[i].s.count, 1);
            seen |= 2;
        } else {
            assert_int_equal(st[i].rank, -1);
            assert_int_equal(st[i].s.count, 4);
            assert_true(st[i].s.max == 10.0);
            assert_string_equal(st[i].role, "trainer");
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    free(st);
    /* Malformed reports are refused with a reason (the run then fails). */
    json_t *bad = json_pack("{s:[s]}", "x", "not a number");
    assert_int_equal(agg_add_report(&a, AGG_SERVER, 0, bad, err, sizeof err), -1);
    assert_true(strlen(err) > 0);
    json_t *bad2 = json_pack("{s:i}", "x", 1);
    assert_int_equal(agg_add_report(&a, AGG_SERVER, 0, bad2, err, sizeof err), -1);
    /* Reset: the warm-up's samples go, the metric names stay. */
    agg_reset(&a);
    st = agg_snapshot(&a, true, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].role, "trainer") == 0)
            assert_int_equal(st[i].s.count, 0);
    free(st);
    json_decref(r0);
    json_decref(r1);
    json_decref(bad);
    json_decref(bad2);
    agg_free(&a);
}

/* ---- first answers and peers that are not psbench ------------------------ */

static void test_peer_sniff(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t n;
        peer_kind want;
    } cases[] = {
        {"HTTP/1.1 400 Bad Request\r\n", 26, PEER_HTTP},
        {"HTTP/", 5, PEER_HTTP},
        {"HTT", 3, PEER_UNSURE},
        {"\x16\x03\x01\x02\x00", 5, PEER_TLS}, /* a handshake record */
        {"\x15\x03\x03\x00\x02\x02\x32", 7, PEER_TLS}, /* an alert */
        {"\x15", 1, PEER_UNSURE},
        {"\x15\x00", 2, PEER_OTHER},
        {"SSH-2.0-OpenSSH_9.2\r\n", 21, PEER_SSH},
        {"220 mail ESMTP\r\n", 16, PEER_OTHER},
        {"\x00\x00\x00\x00", 4, PEER_OTHER},     /* header length 0 */
        {"\x00\x01\x00\x01", 4, PEER_OTHER},     /* 65537 */
        {"\x00\x02", 2, PEER_OTHER},
        {"\x00\x01\x00\x00\x80", 5, PEER_PSBENCH}, /* 65536, a map */
        {"\x00\x00\x00\x05\x01", 5, PEER_OTHER},   /* not a map */
        {"\x00\x00\x00\x05\xde", 5, PEER_PSBENCH}, /* map16 */
        {"\x00\x00", 2, PEER_UNSURE},
        {"", 0, PEER_UNSURE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(peer_sniff((const uint8_t *)cases[i].bytes, cases[i].n), cases[i].want);
    /* Every prefix of a real control frame could be psbench. */
    uint8_t *buf;
    size_t len;
    assert_int_equal(ctl_encode("registered", NULL, NULL, &buf, &len), 0);
    for (size_t n = 1; n <= len; n++) {
        peer_kind k = peer_sniff(buf, n);
        assert_true(k == PEER_PSBENCH || k == PEER_UNSURE);
    }
    free(buf);
    char err[256];
    assert_true(peer_not_psbench("10.0.0.1:8080", "master", (const uint8_t *)"HTTP/1.0 200", 12, err, sizeof err));
    assert_string_equal(err, "10.0.0.1:8080 is not a psbench master (it answered like an HTTP server)");
    assert_true(peer_not_psbench("h:1", "server", (const uint8_t *)"\x16\x03", 2, err, sizeof err));
    assert_string_equal(err, "h:1 is not a psbench server (it answered with TLS)");
    assert_true(peer_not_psbench("h:1", "server", (const uint8_t *)"hello", 5, err, sizeof err));
    assert_string_equal(err, "h:1 is not a psbench server (it answered with bytes that are not psbench's protocol)");
    assert_false(peer_not_psbench("h:1", "server", (const uint8_t *)"\x00\x00\x00\x05\x81", 5, err, sizeof err));
}

/* A ctl_conn on one end of a socketpair, the "master" on the other. The
 * peer's name is no HOST:PORT, so a silent peer is not probed. */
static int first_answer(const void *bytes, size_t n, bool close_after, double timeout_s, ctl_msg *m, char *err,
                        size_t errlen)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ctl_conn c;
    memset(&c, 0, sizeof c);
    c.fd = sv[0];
    frame_decoder_init(&c.dec, CTL_MAX_BODY);
    snprintf(c.peer, sizeof c.peer, "the-peer");
    if (n)
        assert_int_equal(write(sv[1], bytes, n), (ssize_t)n);
    if (close_after)
        close(sv[1]);
    int rc = ctl_recv_first(&c, timeout_s, m, err, errlen);
    if (!close_after)
        close(sv[1]);
    ctl_close(&c);
    return rc;
}

static void test_recv_first(void **state)
{
    (void)state;
    char err[256];
    ctl_msg m;
    uint8_t *buf;
    size_t len;
    /* The master's answers. */
    static const char *const ok[] = {"registered", "assign", "stop"};
    for (size_t i = 0; i < 3; i++) {
        json_t *body = json_pack("{s:i}", "rank", 3);
        assert_int_equal(ctl_encode(ok[i], NULL, body, &buf, &len), 0);
        json_decref(body);
        assert_int_equal(first_answer(buf, len, false, 1.0, &m, err, sizeof err), 1);
        assert_string_equal(m.type, ok[i]);
        assert_int_equal(ctl_int(m.body, "rank", -1), 3);
        ctl_msg_clear(&m);
        free(buf);
    }
    /* A psbench server's data port: an error frame, not a control message. */
    assert_int_equal(ctl_encode("error", NULL, NULL, &buf, &len), 0);
    assert_int_equal(first_answer(buf, len, true, 1.0, &m, err, sizeof err), -1);
    assert_string_equal(err, "the-peer is not a psbench master (it answered a psbench 'error' frame, as a server's "
                             "data port does)");
    free(buf);
    /* Other protocols, at once. */
    assert_int_equal(first_answer("HTTP/1.1 400 Bad Request\r\n\r\n", 28, true, 5.0, &m, err, sizeof err), -1);
    assert_string_equal(err, "the-peer is not a psbench master (it answered like an HTTP server)");
    assert_int_equal(first_answer("\x15\x03\x03\x00\x02\x02\x32", 7, false, 5.0, &m, err, sizeof err), -1);
    assert_string_equal(err, "the-peer is not a psbench master (it answered with TLS)");
    /* Silence, bounded; a close without a byte. */
    assert_int_equal(first_answer(NULL, 0, false, 0.2, &m, err, sizeof err), -1);
    assert_string_equal(err, "the-peer accepted the connection but did not answer within 0.2 s: is it a psbench "
                             "master?");
    assert_int_equal(first_answer(NULL, 0, true, 5.0, &m, err, sizeof err), -1);
    assert_string_equal(err, "the-peer closed the connection without answering: is it a psbench master?");
    /* A few bytes of something else, then silence. */
    assert_int_equal(first_answer("\x00\x00", 2, false, 0.2, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "did not answer within 0.2 s"));
}

/* A peer that reads nothing: with send_timeout_s, ctl_send fails once no
 * room comes within it (a cut link, where TCP's user timeout may never
 * fire), marking the connection lost; without, the same sends would
 * block. The messages before the buffer filled went out whole. */
static void test_send_bounded(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ctl_conn c;
    memset(&c, 0, sizeof c);
    c.fd = sv[0];
    c.send_timeout_s = 0.2;
    snprintf(c.peer, sizeof c.peer, "the-master");
    json_t *body = json_pack("{s:s%}", "pad", "0123456789abcdef0123456789abcdef0123456789abcdef", (size_t)48);
    char err[256] = "";
    int sent = 0, rc = 0;
    while (sent < 1000000 && (rc = ctl_send(&c, "metrics", NULL, body, err, sizeof err)) == 0)
        sent++;
    json_decref(body);
    assert_int_equal(rc, -1);
    assert_true(sent > 0);
    assert_true(c.lost);
    assert_string_equal(err, "master the-master: nothing could be sent for 0.2 s (is this host cut off from it?)");
    close(sv[1]);
    close(sv[0]);
}

/* A name that does not resolve (yet) is tried again until the connect
 * timeout, as a refusing peer is (a pod's DNS name comes with the pod);
 * ".invalid" never resolves (RFC 2606), whatever the resolver here. */
static void test_connect_name_not_yet(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(net_connect("psbench-test.invalid", 9, 300, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot resolve 'psbench-test.invalid': "));
    assert_non_null(strstr(err, "(tried until the connect timeout)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_bounded),
        cmocka_unit_test(test_connect_name_not_yet),
        cmocka_unit_test(test_roundtrip_and_partial),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_token_limit),
        cmocka_unit_test(test_header_limit),
        cmocka_unit_test(test_read_stream),
        cmocka_unit_test(test_take_samples),
        cmocka_unit_test(test_aggregate),
        cmocka_unit_test(test_peer_sniff),
        cmocka_unit_test(test_recv_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
