/* peer.h — naming a peer that does not speak psbench.
 *
 * A node that connects somewhere (a trainer or a server to its master, a
 * trainer to its servers) waits at most --connect-timeout for the peer's
 * first answer. When that answer is not psbench's protocol, or there is
 * none, this module writes the one line that says what the peer looks like:
 *
 *   127.0.0.1:8080 is not a psbench master (it answered like an HTTP server)
 *   ... (it answered with TLS)
 *   ... (it answered like an SSH server)
 *   ... (it answered with bytes that are not psbench's protocol)
 *   127.0.0.1:9 accepted the connection but did not answer within 30 s:
 *   is it a psbench master?
 *
 * A psbench frame starts with a u32 big-endian header length in 1..65536
 * (so its first byte is 0) and then a msgpack map. An HTTP server does not
 * answer such a frame (no request line ever ends): it waits for more, or
 * closes. So a peer that stays silent, or closes without a byte, is asked
 * once more on a second connection, "HEAD / HTTP/1.0", for at most
 * PEER_PROBE_MS: an answer that starts "HTTP/" names it an HTTP server.
 */
#ifndef PSBENCH_PEER_H
#define PSBENCH_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest the HTTP probe of a silent peer takes. */
#define PEER_PROBE_MS 2000

/* What a peer's first bytes look like. */
typedef enum peer_kind {
    PEER_UNSURE = 0, /* too few bytes to tell */
    PEER_PSBENCH,    /* the start of a psbench frame, as far as it goes */
    PEER_HTTP,       /* "HTTP/" */
    PEER_TLS,        /* a TLS record: 0x14..0x17, then 0x03 */
    PEER_SSH,        /* "SSH-" */
    PEER_OTHER,      /* anything else */
} peer_kind;

peer_kind peer_sniff(const uint8_t *p, size_t n);

/* err = "ADDR is not a psbench ROLE (it answered ...)" for the first bytes
 * p[0, n) the peer sent, when they are not the start of a psbench frame;
 * returns false (err untouched) when they could be. */
bool peer_not_psbench(const char *addr, const char *role, const uint8_t *p, size_t n, char *err, size_t errlen);

/* The peer at ADDR sent nothing: it stayed silent for waited_s seconds, or
 * (closed) closed the connection. Probes it for HTTP (above), then writes
 * the line into err. */
void peer_no_answer(const char *addr, const char *role, bool closed, double waited_s, char *err, size_t errlen);

#endif
