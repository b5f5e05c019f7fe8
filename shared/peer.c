/* peer.c — naming a peer that does not speak psbench (see peer.h). */
#include "shared/peer.h"
#include "shared/clock.h"
#include "shared/net.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether p[0, n) starts like `lit`, as far as p goes (n may be short). */
static bool peer_prefix(const uint8_t *p, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return memcmp(p, lit, n < l ? n : l) == 0;
}

peer_kind peer_sniff(const uint8_t *p, size_t n)
{
    if (n == 0)
        return PEER_UNSURE;
    if (peer_prefix(p, n, "HTTP/"))
        return n >= 5 ? PEER_HTTP : PEER_UNSURE;
    if (peer_prefix(p, n, "SSH-"))
        return n >= 4 ? PEER_SSH : PEER_UNSURE;
    if (p[0] >= 0x14 && p[0] <= 0x17) /* TLS record types: change_cipher_spec .. application_data */
        return n < 2 ? PEER_UNSURE : p[1] == 0x03 ? PEER_TLS : PEER_OTHER;
    /* psbench: u32 big-endian header length in 1..65536, then a map
     * (fixmap 0x80..0x8f, map16 0xde, map32 0xdf). */
    if (p[0] != 0 || (n >= 2 && p[1] > 1))
        return PEER_OTHER;
    if (n < 4)
        return PEER_UNSURE;
    uint32_t h = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    if (h < 1 || h > 65536)
        return PEER_OTHER;
    if (n >= 5 && !((p[4] >= 0x80 && p[4] <= 0x8f) || p[4] == 0xde || p[4] == 0xdf))
        return PEER_OTHER;
    return PEER_PSBENCH;
}

bool peer_not_psbench(const char *addr, const char *role, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    const char *what;
    switch (peer_sniff(p, n)) {
    case PEER_HTTP:
        what = "like an HTTP server";
        break;
    case PEER_TLS:
        what = "with TLS";
        break;
    case PEER_SSH:
        what = "like an SSH server";
        break;
    case PEER_OTHER:
        what = "with bytes that are not psbench's protocol";
        break;
    default:
        return false;
    }
    snprintf(err, errlen, "%s is not a psbench %s (it answered %s)", addr, role, what);
    return true;
}

/* Ask ADDR "HEAD / HTTP/1.0" on a connection of its own and wait up to
 * PEER_PROBE_MS (in all) for an answer: whether it starts with "HTTP/". */
static bool peer_answers_http(const char *addr)
{
    char host[256], why[256];
    uint16_t port;
    if (net_parse_hostport(addr, host, sizeof host, &port, 0, why, sizeof why) < 0)
        return false;
    long long deadline = clock_now_ms() + PEER_PROBE_MS;
    int fd = net_connect(host, port, PEER_PROBE_MS / 2, why, sizeof why);
    if (fd < 0)
        return false;
    static const char req[] = "HEAD / HTTP/1.0\r\n\r\n";
    bool http = false;
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        uint8_t got[5];
        size_t n = 0;
        while (n < sizeof got) {
            long long left = deadline - clock_now_ms();
            struct pollfd pfd = {fd, POLLIN, 0};
            if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
                break;
            ssize_t r = recv(fd, got + n, sizeof got - n, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            n += (size_t)r;
        }
        http = n == sizeof got && memcmp(got, "HTTP/", 5) == 0;
    }
    close(fd);
    return http;
}

void peer_no_answer(const char *addr, const char *role, bool closed, double waited_s, char *err, size_t errlen)
{
    if (peer_answers_http(addr))
        snprintf(err, errlen, "%s is not a psbench %s (it answered like an HTTP server)", addr, role);
    else if (closed)
        snprintf(err, errlen, "%s closed the connection without answering: is it a psbench %s?", addr, role);
    else /* to the hundredth: a wait cut to what a follower had left reads "2 s", not "1.99769 s" */
        snprintf(err, errlen, "%s accepted the connection but did not answer within %g s: is it a psbench %s?",
                 addr, round(waited_s * 100) / 100, role);
}
