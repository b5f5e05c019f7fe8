/* http.c — the master's HTTP API on libmicrohttpd (see http.h). */
#include "master/http.h"
#include "master/web_assets.h"

#include "shared/log.h"
#include "shared/net.h"

#include <assert.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NDOCS HTTP_NDOCS

/* Limits on what clients can make the master hold (issue 13: slow
 * consumers, floods; issue 19: a health check that gets through). MHD runs
 * one internal thread that polls every socket without blocking (epoll on
 * Linux): a client that reads or sends a byte at a time stalls neither
 * other clients nor the reactor, which meets this thread only in
 * http_publish's pointer swap.
 *  - HTTP_MAX_CONNS connections at once; beyond that MHD stops accepting
 *    and new ones wait in the listen backlog (128, net_listen).
 *  - HTTP_MAX_PER_IP of them from one address (http_accept refuses the
 *    rest: MHD closes them at once): one host's slow consumers or flood
 *    cannot take every slot and lock out Prometheus, the dashboard or a
 *    health check. Loopback (127.0.0.0/8, ::1) is not held to it: a local
 *    health probe shares its address with every local client, a local
 *    flood included, and only the total bounds them.
 *  - HTTP_REQUEST_TIMEOUT_S: a connection that makes no progress for that
 *    long before its request's headers are complete is closed — one that
 *    sends nothing, or half a request line, frees its slot within seconds.
 *  - HTTP_TIMEOUT_S: from then on (a request in, its answer being sent,
 *    then an idle keep-alive wait) a connection without progress either
 *    way for that long is closed: one whose client never reads its answer,
 *    an idle keep-alive one. (Idle timeouts: a byte now and then keeps a
 *    connection open; the per-address limit bounds those.)
 *  - HTTP_CONN_MEMORY: each connection's memory pool (request line,
 *    headers, write buffer; MHD's default, spelt out); a request whose
 *    headers do not fit is answered 431 or 414 and closed. Request bodies
 *    are never read (http_handler).
 * Documents are shared, not copied per request (struct http_server): the
 * master holds at most HTTP_MAX_CONNS x HTTP_CONN_MEMORY of pools plus one
 * copy of each published version some connection is still sending (one
 * for any number of clients, unless slow ones span several publishes; never
 * more than HTTP_MAX_CONNS). */
#define HTTP_MAX_CONNS 256u
#define HTTP_MAX_PER_IP 64u
#define HTTP_REQUEST_TIMEOUT_S 5u
#define HTTP_TIMEOUT_S 30u
#define HTTP_CONN_MEMORY ((size_t)32 * 1024)
/* Query parameters a request may carry (the API reads none). MHD parses
 * every one into a record in the connection's memory pool before any
 * handler runs; about 450 fill the pool, and MHD 0.9.75 then has no room
 * left even for its own 431 and closes the connection without a word. So
 * a request with more is answered here instead: http_uri sees the request
 * line first, empties the query before MHD parses it, and the handler
 * answers 414 with the reason. */
#define HTTP_MAX_QUERY_ARGS 64
#define HTTP_XSTR(x) HTTP_STR(x)
#define HTTP_STR(x) #x

/* One address's open connections, counted for HTTP_MAX_PER_IP: the family
 * (4 or 6) and the address bytes; conns 0 is a free entry. An IPv4 address
 * mapped into IPv6 counts as the IPv4 one. */
typedef struct http_peer {
    uint8_t key[17];
    unsigned conns;
} http_peer;

struct http_server {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    /* The published documents as ready-made responses, guarded by mu. This
     * table holds one reference to each; every connection sending one holds
     * another (MHD counts them), and the document is freed with its last
     * reference: N clients of the same snapshot share one copy, however
     * slowly they read. */
    struct MHD_Response *doc[NDOCS];
    unsigned code[NDOCS]; /* each one's status (published with it) */
    /* MHD's messages, at most one a second (a flood of refused connections
     * would otherwise write a line each); touched only by MHD's thread. */
    time_t log_second;
    unsigned long log_dropped;
    /* Open connections per address (not loopback's): at most one entry per
     * open connection, so HTTP_MAX_CONNS entries always suffice. Touched
     * only by MHD's thread (accept policy, connection notifications). */
    http_peer peers[HTTP_MAX_CONNS];
};

static const char *const doc_type[NDOCS] = {
    [HTTP_DOC_STATUS] = "application/json",
    [HTTP_DOC_NODES] = "application/json",
    [HTTP_DOC_METRICS] = "application/json",
    [HTTP_DOC_PROM] = "text/plain; version=0.0.4; charset=utf-8",
    [HTTP_DOC_CONFIG] = "application/json",
    [HTTP_DOC_HISTORY] = "application/json",
    [HTTP_DOC_HISTORY_LAST] = "application/json",
    [HTTP_DOC_TRACE_STEP] = "application/json",
};

static enum MHD_Result http_reply(struct MHD_Connection *c, unsigned code, const char *type,
                                  const void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result http_text(struct MHD_Connection *c, unsigned code, const char *text)
{
    return http_reply(c, code, "text/plain; charset=utf-8", text, strlen(text), MHD_RESPMEM_PERSISTENT);
}

/* Serve the current document itself (no copy): queueing takes a reference
 * to the shared response, under the lock so that http_publish cannot drop
 * the table's reference in between. */
static enum MHD_Result http_doc(http_server *h, struct MHD_Connection *c, int which)
{
    pthread_mutex_lock(&h->mu);
    struct MHD_Response *r = h->doc[which];
    enum MHD_Result rc = r ? MHD_queue_response(c, h->code[which] ? h->code[which] : MHD_HTTP_OK, r) : MHD_NO;
    pthread_mutex_unlock(&h->mu);
    if (!r)
        return http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no snapshot yet\n");
    return rc;
}

/* A published document as a response that owns it (freed with the
 * response's last reference). NULL when out of memory (s is freed). */
static struct MHD_Response *http_doc_response(char *s, int which)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(s);
        return NULL;
    }
    if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, doc_type[which]) != MHD_YES ||
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") != MHD_YES) {
        MHD_destroy_response(r);
        return NULL;
    }
    return r;
}

/* MHD's error log, rate-limited: the first message of each second, then a
 * count of those dropped. */
static void http_log(void *cls, const char *fmt, va_list ap)
{
    http_server *h = cls;
    time_t now = time(NULL);
    if (now == h->log_second) {
        h->log_dropped++;
        return;
    }
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (h->log_dropped)
        log_warn("http: %s (%lu more HTTP message(s) not shown since the last one)", line, h->log_dropped);
    else
        log_warn("http: %s", line);
    h->log_second = now;
    h->log_dropped = 0;
}

/* ---- connections per address ------------------------------------------------ */

/* sa's key (http_peer); 1 if it is loopback (not counted), 0 if counted. */
static int http_peer_key(const struct sockaddr *sa, uint8_t key[17])
{
    memset(key, 0, 17);
    if (sa->sa_family == AF_INET) {
        const struct in_addr *a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        key[0] = 4;
        memcpy(key + 1, a, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            key[0] = 4;
            memcpy(key + 1, a->s6_addr + 12, 4);
        } else {
            if (IN6_IS_ADDR_LOOPBACK(a))
                return 1;
            key[0] = 6;
            memcpy(key + 1, a->s6_addr, 16);
        }
    } else {
        return 1; /* not an IP peer: nothing to count it by */
    }
    return key[0] == 4 && key[1] == 127;
}

/* The entry of key; with create, a free one made its own if there is none. */
static http_peer *http_peer_find(http_server *h, const uint8_t key[17], bool create)
{
    http_peer *free_entry = NULL;
    for (size_t i = 0; i < HTTP_MAX_CONNS; i++) {
        http_peer *p = &h->peers[i];
        if (p->conns == 0) {
            if (!free_entry)
                free_entry = p;
        } else if (memcmp(p->key, key, sizeof p->key) == 0) {
            return p;
        }
    }
    if (!create)
        return NULL;
    assert(free_entry); /* one entry per open connection at most */
    memcpy(free_entry->key, key, sizeof free_entry->key);
    return free_entry;
}

/* MHD's accept policy: an address at HTTP_MAX_PER_IP is refused. */
static enum MHD_Result http_accept(void *cls, const struct sockaddr *sa, socklen_t salen)
{
    http_server *h = cls;
    (void)salen;
    uint8_t key[17];
    if (http_peer_key(sa, key))
        return MHD_YES;
    const http_peer *p = http_peer_find(h, key, false);
    return p && p->conns >= HTTP_MAX_PER_IP ? MHD_NO : MHD_YES;
}

/* MHD's connection notifications: count connections per address (the
 * connection's socket context points at its entry). */
static void http_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe)
{
    http_server *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_peer *p = *socket_context;
        if (p) {
            assert(p->conns > 0);
            p->conns--;
            *socket_context = NULL;
        }
        return;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    uint8_t key[17];
    if (!ci || !ci->client_addr || http_peer_key(ci->client_addr, key))
        return;
    http_peer *p = http_peer_find(h, key, true);
    p->conns++;
    *socket_context = p;
}

/* ---- requests ------------------------------------------------------------------ */

/* A request's state (the handler's *state) when http_uri refused its query. */
static int http_query_refused;

/* MHD's URI callback: it runs with the request line, before MHD parses the
 * query (MHD_OPTION_URI_LOG_CALLBACK; libmicrohttpd's connection.c says as
 * much: "log callback before we modify URI *or* args"). Its result becomes
 * the request's state. A query with more than HTTP_MAX_QUERY_ARGS
 * parameters is cut to nothing where it starts, in MHD's own read buffer
 * (the string it hands us is that buffer: writable, though typed const),
 * so that MHD parses no parameter of it; the handler then refuses the
 * request (http_handler). */
static void *http_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    const char *q = strchr(uri, '?');
    if (!q)
        return NULL;
    int args = 1;
    for (const char *p = q + 1; *p; p++)
        args += *p == '&' || *p == ';';
    if (args <= HTTP_MAX_QUERY_ARGS)
        return NULL;
    ((char *)q)[1] = '\0';
    return &http_query_refused;
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size,
                                    void **state)
{
    http_server *h = cls;
    (void)version;
    (void)upload;
    /* The request's headers are complete (this is the first call for it):
     * the short wait for them is over; answering gets the longer one. */
    if (!*state || *state == &http_query_refused)
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, HTTP_TIMEOUT_S);
    if (*state == &http_query_refused) {
        *upload_size = 0;
        return http_text(c, MHD_HTTP_URI_TOO_LONG,
                         "too many query parameters: at most " HTTP_XSTR(HTTP_MAX_QUERY_ARGS) " (this API reads none)\n");
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        *upload_size = 0; /* a body, if any, is ignored */
        return http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only API: GET or HEAD\n");
    }
    /* A GET or HEAD without a body is answered on MHD's second call, once
     * the request is complete: an answer queued on the first call (headers
     * only) makes MHD close the connection after it, so that every request
     * would cost a new connection; this way keep-alive works. One with a
     * body is answered at once, like any other method: its body is never
     * read, and MHD closes the connection after the answer. */
    static int headers_seen;
    if (!*state && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        *state = &headers_seen;
        return MHD_YES;
    }
    *upload_size = 0;
    if (strcmp(url, "/healthz") == 0)
        return http_text(c, MHD_HTTP_OK, "ok");
    if (strcmp(url, "/api/v1/status") == 0)
        return http_doc(h, c, HTTP_DOC_STATUS);
    if (strcmp(url, "/api/v1/nodes") == 0)
        return http_doc(h, c, HTTP_DOC_NODES);
    if (strcmp(url, "/api/v1/metrics") == 0)
        return http_doc(h, c, HTTP_DOC_METRICS);
    if (strcmp(url, "/api/v1/config") == 0)
        return http_doc(h, c, HTTP_DOC_CONFIG);
    if (strcmp(url, "/api/v1/history") == 0)
        return http_doc(h, c, HTTP_DOC_HISTORY);
    if (strcmp(url, "/api/v1/history/last") == 0)
        return http_doc(h, c, HTTP_DOC_HISTORY_LAST);
    if (strcmp(url, "/api/v1/trace/step") == 0)
        return http_doc(h, c, HTTP_DOC_TRACE_STEP);
    if (strcmp(url, "/metrics") == 0)
        return http_doc(h, c, HTTP_DOC_PROM);
    /* Dashboard files: looked up by exact name in the compiled-in table. */
    const web_asset *a = web_asset_find(url);
    if (a)
        return http_reply(c, MHD_HTTP_OK, a->content_type, a->data, a->len, MHD_RESPMEM_PERSISTENT);
    return http_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

http_server *http_start(const char *host, uint16_t port, uint16_t *bound, bool *bad_address, char *err,
                        size_t errlen)
{
    int fd = net_listen_flag("--http", host, port, 128, bound, err, errlen);
    *bad_address = fd < 0;
    if (fd < 0)
        return NULL;
    http_server *h = calloc(1, sizeof *h);
    if (!h) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    /* The socket comes from net_listen (MHD takes it over). */
    h->log_second = (time_t)-1;
    /* The logger first: MHD wants it before any option that may log. */
    /* The connection timeout is the one for a request's headers; the
     * handler lengthens it once they are in. */
    h->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, http_accept, h, http_handler, h,
                            MHD_OPTION_EXTERNAL_LOGGER, http_log, h, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, HTTP_REQUEST_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                            HTTP_MAX_CONNS, MHD_OPTION_NOTIFY_CONNECTION, http_connection, h,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY, MHD_OPTION_URI_LOG_CALLBACK,
                            http_uri, h, MHD_OPTION_END);
    if (!h->d) {
        close(fd);
        snprintf(err, errlen, "cannot serve HTTP on %s:%u", host, port);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    return h;
}

void http_publish(http_server *h, char *in[HTTP_NDOCS], const unsigned codes[HTTP_NDOCS])
{
    struct MHD_Response *fresh[NDOCS] = {0}, *old[NDOCS] = {0};
    /* Responses are made here, on the reactor's thread, outside the lock;
     * one that cannot be made (out of memory) keeps the previous document. */
    for (int i = 0; i < NDOCS; i++)
        fresh[i] = in[i] ? http_doc_response(in[i], i) : NULL;
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < NDOCS; i++)
        if (fresh[i]) {
            old[i] = h->doc[i];
            h->doc[i] = fresh[i];
            h->code[i] = codes ? codes[i] : 0;
        }
    pthread_mutex_unlock(&h->mu);
    /* Drop the table's reference: a document still being sent lives on
     * until its last connection is done with it. */
    for (int i = 0; i < NDOCS; i++)
        if (old[i])
            MHD_destroy_response(old[i]);
}

void http_stop(http_server *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d); /* closes every connection: their references go */
    for (int i = 0; i < NDOCS; i++)
        if (h->doc[i])
            MHD_destroy_response(h->doc[i]);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
