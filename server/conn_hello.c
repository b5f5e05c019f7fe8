/* conn_hello.c — a trainer's `hello` (version, token, role, rank; the
 * transport it asks for: a redirect to the Unix socket, the segment it
 * hands over) answered with `welcome`, and CUDA IPC's `export` after it.
 */
#include "server/conn_int.h"
#include "server/members.h"
#include "server/server.h"
#include "server/xport.h"
#include "server/xport_ipc.h"
#include "shared/log.h"
#include "shared/text.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Compare without an early exit, so that timing does not leak the token. */
static bool conn_token_ok(const char *want, frame_str got)
{
    size_t n = strlen(want);
    unsigned diff = (unsigned)(n ^ got.n);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < got.n ? got.p[i] : 0);
    return diff == 0;
}

/* A hello's `dtype`: the type this trainer's dense pushes will be in
 * (docs/protocol.md, "Narrow pushes"). 0 with *t set, or -1 with the
 * reason (`unsupported`): a name that is no type; a narrow type that this
 * server's kind does not fold (batch-update, embedding) or that its
 * device does not take (every device does now: cpu, test and cuda have
 * device_fold_narrow_out; a device without it would be refused here). */
static int conn_hello_dtype(const server *s, frame_str name, int *t, char *msg, size_t len)
{
    *t = frame_dtype_type(name);
    if (*t < 0) {
        char esc[40];
        text_escape_n(name.p, name.n > 16 ? 16 : name.n, esc, sizeof esc);
        snprintf(msg, len, "hello dtype '%s' is not f32, f16 or bf16", esc);
        return -1;
    }
    if (*t == HALF_FP32)
        return 0;
    if (!s->kind->ops->narrow) {
        snprintf(msg, len, "server %u (kind %s) does not take %s pushes: only kinds average and average-batch do",
                 s->cfg.rank, s->kind->ops->name, frame_dtype_name(*t));
        return -1;
    }
    if (!device_takes_narrow(s->dev)) {
        snprintf(msg, len, "--compress %s: server %u's device (%s) does not take narrow pushes (--compress none)",
                 half_type_name((half_type)*t), s->cfg.rank, s->dev->ops->name);
        return -1;
    }
    return 0;
}

void conn_on_hello(conn *c, const frame_hdr *h)
{
    server *s = c->srv;
    char msg[256];
    if (h->payload) {
        conn_send_error(c, ERR_BAD_FRAME, "hello carries no payload", h);
        return;
    }
    if (c->hello_done) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello already done on this connection", h);
        return;
    }
    /* A field that is missing says so: "version 0" would send the user
     * looking for a peer that speaks protocol 0. */
    if (!(h->has & FH_VERSION)) {
        snprintf(msg, sizeof msg, "hello needs a version (this server speaks protocol %u)", FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (h->version != FRAME_PROTOCOL_VERSION) {
        snprintf(msg, sizeof msg, "protocol version %" PRIu64 " is not supported (this server speaks %u)",
                 h->version, FRAME_PROTOCOL_VERSION);
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    if (s->cfg.token && (!(h->has & FH_TOKEN) || !conn_token_ok(s->cfg.token, h->token))) {
        conn_send_error(c, ERR_AUTH, (h->has & FH_TOKEN) ? "wrong token" : "this server needs a token", h);
        return;
    }
    if (!(h->has & FH_ROLE)) {
        conn_send_error(c, ERR_UNSUPPORTED, "hello needs a role (\"trainer\")", h);
        return;
    }
    if (!frame_str_eq(h->role, "trainer")) {
        conn_send_error(c, ERR_UNSUPPORTED, "only role \"trainer\" may connect to a server", h);
        return;
    }
    if (!(h->has & FH_RANK)) {
        conn_send_error(c, ERR_BAD_FRAME, "hello needs a rank", h);
        return;
    }
    /* The narrow type it will push (before a redirect, so that a server
     * that cannot take it says so at once, on TCP). */
    int dtype = HALF_FP32;
    if ((h->has & FH_DTYPE) && conn_hello_dtype(s, h->dtype, &dtype, msg, sizeof msg) < 0) {
        conn_send_error(c, ERR_UNSUPPORTED, msg, h);
        return;
    }
    /* Each transport's part of the hello, in the registry's order: shm's
     * redirect of a TCP hello that asks for it, the segment it hands over. */
    for (size_t i = 0; i < xport_count; i++)
        if (xport_all[i]->hello && xport_all[i]->hello(c, h) < 0)
            return;
    uint32_t slot = members_join(&s->members, c, c->peer, h->rank, msg, sizeof msg);
    if (slot == MEMBERS_NO_SLOT) {
        conn_send_error(c, ERR_BAD_FRAME, msg, h);
        return;
    }
    c->hello_done = true;
    assert(s->nwaiting > 0);
    s->nwaiting--;
    evtimer_del(c->hello_ev);
    c->slot = slot;
    c->rank = h->rank;
    c->dtype = (half_type)dtype;

    /* What each transport offers (results are lent only to a trainer that
     * promises to read them before it pushes a later batch: zerocopy), and
     * its fields in the welcome. */
    bool reads_first = (h->has & FH_ZEROCOPY) && h->zerocopy == 1;
    frame_hdr w = {0};
    w.type = FT_WELCOME;
    w.version = FRAME_PROTOCOL_VERSION;
    w.server = s->cfg.rank;
    w.trainers = s->cfg.trainers;
    w.has = FH_VERSION | FH_SERVER | FH_TRAINERS;
    if (h->has & FH_DTYPE) { /* echoed: the trainer knows this server takes it */
        w.dtype = frame_str_c(frame_dtype_name(dtype));
        w.has |= FH_DTYPE;
    }
    for (size_t i = 0; i < xport_count; i++)
        if (xport_all[i]->welcome)
            xport_all[i]->welcome(c, reads_first, &w);
    uint8_t buf[256];
    size_t n = frame_encode_header(&w, buf, sizeof buf);
    assert(n > 0);
    bool sent = false;
    for (size_t i = 0; i < xport_count && !sent; i++)
        sent = xport_all[i]->send_welcome && xport_all[i]->send_welcome(c, buf, n);
    if (!sent)
        outq_push(&c->out, buf, n, NULL, 0);
    conn_want_flush(c);
    log_debug("trainer rank %" PRIu64 " joined from %s (slot %u, over %s%s)", c->rank, c->peer, slot, c->link->name,
              c->shm.seg.base ? ", its segment mapped" : "");
}

/* `export` (CUDA IPC): the trainer's GPU memory and event for the server's
 * shared GPU memory (xport_ipc.c decides). */
void conn_on_export(conn *c, const frame_hdr *h)
{
    char msg[400];
    uint8_t reply[512];
    size_t n = 0;
    frame_errcode code = ERR_BAD_FRAME;
    if (!c->hello_done)
        snprintf(msg, sizeof msg, "export before hello");
    else
        code = xport_ipc_export(c->srv, &c->ipc, c->link == &xport_shm, c->peer, c->rank, h, reply, sizeof reply, &n, msg,
                               sizeof msg);
    if (code != ERR_NONE) {
        conn_send_error(c, code, msg, h);
        conn_skip_payload(c);
        return;
    }
    outq_push(&c->out, reply, n, NULL, 0);
    conn_want_flush(c);
}
