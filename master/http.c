/* http.c — the master's HTTP API on libmicrohttpd (see http.h). */
#include "master/http.h"
#include "master/web_assets.h"

#include "shared/net.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DOC_STATUS, DOC_NODES, DOC_METRICS, DOC_PROM, NDOCS };

struct http_server {
    struct MHD_Daemon *d;
    pthread_mutex_t mu;
    char *doc[NDOCS]; /* guarded by mu */
};

static const char *const doc_type[NDOCS] = {
    "application/json", "application/json", "application/json",
    "text/plain; version=0.0.4; charset=utf-8",
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

/* Serve a copy of the current document, taken under the lock. */
static enum MHD_Result http_doc(http_server *h, struct MHD_Connection *c, int which)
{
    pthread_mutex_lock(&h->mu);
    char *copy = h->doc[which] ? strdup(h->doc[which]) : NULL;
    pthread_mutex_unlock(&h->mu);
    if (!copy)
        return http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no snapshot yet\n");
    return http_reply(c, MHD_HTTP_OK, doc_type[which], copy, strlen(copy), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size,
                                    void **state)
{
    http_server *h = cls;
    (void)version;
    (void)upload;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        *upload_size = 0; /* a body, if any, is ignored */
        return http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only API: GET or HEAD\n");
    }
    if (strcmp(url, "/healthz") == 0)
        return http_text(c, MHD_HTTP_OK, "ok");
    if (strcmp(url, "/api/v1/status") == 0)
        return http_doc(h, c, DOC_STATUS);
    if (strcmp(url, "/api/v1/nodes") == 0)
        return http_doc(h, c, DOC_NODES);
    if (strcmp(url, "/api/v1/metrics") == 0)
        return http_doc(h, c, DOC_METRICS);
    if (strcmp(url, "/metrics") == 0)
        return http_doc(h, c, DOC_PROM);
    /* Dashboard files: looked up by exact name in the compiled-in table. */
    const web_asset *a = web_asset_find(url);
    if (a)
        return http_reply(c, MHD_HTTP_OK, a->content_type, a->data, a->len, MHD_RESPMEM_PERSISTENT);
    return http_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

http_server *http_start(const char *host, uint16_t port, uint16_t *bound, char *err, size_t errlen)
{
    int fd = net_listen(host, port, 128, bound, err, errlen);
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
    h->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, http_handler, h,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
    if (!h->d) {
        close(fd);
        snprintf(err, errlen, "cannot serve HTTP on %s:%u", host, port);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    return h;
}

void http_publish(http_server *h, char *status_json, char *nodes_json, char *metrics_json, char *prometheus)
{
    char *in[NDOCS] = {status_json, nodes_json, metrics_json, prometheus};
    char *old[NDOCS] = {0};
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < NDOCS; i++)
        if (in[i]) {
            old[i] = h->doc[i];
            h->doc[i] = in[i];
        }
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < NDOCS; i++)
        free(old[i]);
}

void http_stop(http_server *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    for (int i = 0; i < NDOCS; i++)
        free(h->doc[i]);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
