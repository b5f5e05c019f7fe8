/* http.h — the master's read-only HTTP API and dashboard (libmicrohttpd).
 *
 * Runs on libmicrohttpd's own thread. It serves the latest snapshot the
 * reactor published (documents rendered once per publish, swapped under a
 * mutex held only for the swap or to queue one; each document is shared by
 * reference by every connection sending it, never copied per request) and
 * the dashboard's files compiled into the binary. Connections, per-address
 * connections, idle time and per-connection memory are bounded (http.c).
 * It never touches the reactor's state, and no file-system path is ever
 * derived from a request.
 */
#ifndef PSBENCH_HTTP_H
#define PSBENCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct http_server http_server;

/* Listen on host:port, --http's (port 0: ephemeral; *bound gets it).
 * NULL with err; *bad_address is set when the address itself failed (in
 * use, not this host's: a bad value of --http, named in err). */
http_server *http_start(const char *host, uint16_t port, uint16_t *bound, bool *bad_address, char *err,
                        size_t errlen);
/* The documents the API serves, each a published snapshot. */
enum http_doc_id {
    HTTP_DOC_STATUS,  /* GET /api/v1/status */
    HTTP_DOC_NODES,   /* GET /api/v1/nodes */
    HTTP_DOC_METRICS, /* GET /api/v1/metrics */
    HTTP_DOC_PROM,    /* GET /metrics */
    HTTP_DOC_CONFIG,  /* GET /api/v1/config: the resolved configuration */
    HTTP_DOC_HISTORY, /* GET /api/v1/history: the charts' points so far (history.h) */
    HTTP_DOC_HISTORY_LAST, /* GET /api/v1/history/last: the newest of them (what the dashboard polls) */
    HTTP_DOC_TRACE_STEP,   /* GET /api/v1/trace/step: the latest traced step (master/trace_an.h) */
    HTTP_NDOCS
};
/* Replace the served documents; takes ownership of the malloc'd strings
 * in docs (indexed by http_doc_id; a NULL keeps the previous one), each
 * answered with its status in codes (NULL, or 0 in it: 200). */
void http_publish(http_server *h, char *docs[HTTP_NDOCS], const unsigned codes[HTTP_NDOCS]);
void http_stop(http_server *h);

#endif
