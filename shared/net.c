/* net.c — TCP helpers (see net.h). */
#include "shared/net.h"
#include "shared/text.h"
#include "shared/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int net_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port, int allow_zero,
                       char *err, size_t errlen)
{
    const char *colon;
    const char *h = s;
    text_shown shown; /* s as the messages show it: a value of any length, escaped and cut short */
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') {
            snprintf(err, errlen, "%s is not [IPV6]:PORT", text_show(s, '\'', &shown));
            return -1;
        }
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) {
            snprintf(err, errlen, "%s is not HOST:PORT", text_show(s, '\'', &shown));
            return -1;
        }
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen) {
        snprintf(err, errlen, "%s: missing or too long host", text_show(s, '\'', &shown));
        return -1;
    }
    /* Digits only: strtol would take " 80", "+80" or "-0", and a port of
     * 70000 must be named as such, not turned into another one. */
    const char *ps = colon + 1;
    size_t nd = strspn(ps, "0123456789");
    unsigned long p = 0;
    for (size_t i = 0; i < nd && p <= 65535; i++)
        p = p * 10 + (unsigned long)(ps[i] - '0');
    if (nd == 0 || ps[nd] != '\0') {
        snprintf(err, errlen, "%s: the port must be a number in %s..65535", text_show(s, '\'', &shown), allow_zero ? "0" : "1");
        return -1;
    }
    if (p > 65535 || (p == 0 && !allow_zero)) {
        snprintf(err, errlen, "%s: port %.*s%s is outside %s..65535", text_show(s, '\'', &shown), nd > 12 ? 12 : (int)nd, ps,
                 nd > 12 ? "..." : "", allow_zero ? "0" : "1");
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int net_check_hostport_list(const char *list, char *err, size_t errlen)
{
    const char *p = list;
    do {
        size_t len = strcspn(p, ",");
        char one[300], host[256];
        uint16_t port;
        if (len == 0 || len >= sizeof one) {
            text_shown shown;
            snprintf(err, errlen, "empty or too long address in %s", text_show(list, '\'', &shown));
            return -1;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        if (net_parse_hostport(one, host, sizeof host, &port, 0, err, errlen) < 0)
            return -1;
        p += len;
    } while (*p++ == ',');
    return 0;
}

int net_parse_host(const char *s, char *err, size_t errlen)
{
    size_t n = strlen(s);
    /* Checked before anything of s is printed: a host named in a message
     * must not carry a terminal's control characters. */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!(ch == '.' || ch == '-' || ch == '_' || ch == ':' || ch == '%' || (ch >= '0' && ch <= '9') ||
              ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z'))) {
            snprintf(err, errlen, "not a host name or address: character 0x%02x at position %zu", ch, i);
            return -1;
        }
    }
    if (n == 0 || n > 253) {
        text_shown shown;
        snprintf(err, errlen, "%s: a host has 1..253 characters", text_show(s, '\'', &shown));
        return -1;
    }
    struct in6_addr a6;
    if (strchr(s, ':') && inet_pton(AF_INET6, s, &a6) != 1) {
        /* Only an IPv6 address has a colon: "HOST:PORT" is a mistake here
         * (the port is the listener's). */
        text_shown shown;
        snprintf(err, errlen, "%s is not a host: give the name or address alone, without a port (an IPv6 "
                 "address without brackets)", text_show(s, '\'', &shown));
        return -1;
    }
    return 0;
}

int net_host_is_loopback(const char *host)
{
    if (!host)
        return 0;
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return 0;
}

static int net_resolve(const char *host, uint16_t port, int passive, struct addrinfo **res,
                       char *err, size_t errlen)
{
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, res);
    if (rc != 0) {
        text_shown shown;
        snprintf(err, errlen, "cannot resolve %s: %s", text_show(host, '\'', &shown), gai_strerror(rc));
        return -1;
    }
    return 0;
}

int net_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl);
}

int net_set_user_timeout(int fd, double seconds)
{
    unsigned ms = seconds <= 0 ? 0 : seconds >= 4e6 ? 4000000000u : (unsigned)(seconds * 1000.0);
    return setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

int net_set_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* net_listen's work: *why the errno of the last bind or listen that
 * failed (0 when the host did not resolve, err saying so). */
static int net_listen_why(const char *host, uint16_t port, int backlog, uint16_t *bound_port, int *why,
                          char *err, size_t errlen)
{
    struct addrinfo *res;
    *why = 0;
    if (net_resolve(host, port, 1, &res, err, errlen) < 0)
        return -1;
    int fd = -1;
    int saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        *why = saved;
        snprintf(err, errlen, "cannot listen on %s:%u: %s", host, port, strerror(saved));
        return -1;
    }
    net_set_nonblock(fd, 1);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

int net_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port, char *err,
               size_t errlen)
{
    int why;
    return net_listen_why(host, port, backlog, bound_port, &why, err, errlen);
}

int net_listen_flag(const char *flag, const char *host, uint16_t port, int backlog, uint16_t *bound_port,
                    char *err, size_t errlen)
{
    int why;
    char inner[512];
    int fd = net_listen_why(host, port, backlog, bound_port, &why, inner, sizeof inner);
    if (fd >= 0)
        return fd;
    bool v6 = strchr(host, ':') != NULL;
    const char *hint = why == EADDRINUSE ? " (another process has the port: give another one, or port 0 for any "
                                           "free one)"
                       : why == EADDRNOTAVAIL ? " (no interface of this host has that address)"
                       : why == EACCES        ? " (ports below 1024 need privileges: give a higher one)"
                                              : "";
    if (why)
        snprintf(err, errlen, v6 ? "%s [%s]:%u: cannot listen there: %s%s" : "%s %s:%u: cannot listen there: %s%s",
                 flag, host, port, strerror(why), hint);
    else /* the host did not resolve: inner names it */
        snprintf(err, errlen, "%s: %s", flag, inner);
    return -1;
}

/* One nonblocking connect attempt bounded by remaining_ms. */
static int net_try_connect(const struct addrinfo *ai, long long remaining_ms, int *err_out)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err_out = errno;
        return -1;
    }
    net_set_nonblock(fd, 1);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        *err_out = errno;
        close(fd);
        return -1;
    }
    struct pollfd pfd = {fd, POLLOUT, 0};
    int rc = poll(&pfd, 1, (int)(remaining_ms > 0 ? remaining_ms : 0));
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (rc <= 0) {
        *err_out = rc == 0 ? ETIMEDOUT : errno;
        close(fd);
        return -1;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
        *err_out = soerr;
        close(fd);
        return -1;
    }
    net_set_nonblock(fd, 0);
    net_set_nodelay(fd);
    return fd;
}

/* Whether a name that did not resolve may resolve later: no record yet
 * (a Kubernetes pod's name appears in its Service's DNS once the pod
 * runs; a launcher starts every rank at once) or no answer yet. */
static int net_resolve_may_come(int gai)
{
    return gai == EAI_NONAME || gai == EAI_AGAIN
#ifdef EAI_NODATA
           || gai == EAI_NODATA
#endif
        ;
}

int net_connect(const char *host, uint16_t port, int timeout_ms, char *err, size_t errlen)
{
    long long deadline = clock_now_ms() + timeout_ms;
    int e = ETIMEDOUT;
    int fd = -1;
    int gai = 0;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    for (;;) {
        /* Resolved again at every try: a peer may be starting where its
         * name is not known yet, as it may be starting where nothing
         * listens yet. */
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        gai = getaddrinfo(host, ps, &hints, &res);
        if (gai == 0) {
            for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
                fd = net_try_connect(ai, deadline - clock_now_ms(), &e);
            freeaddrinfo(res);
        } else if (!net_resolve_may_come(gai)) {
            break;
        }
        /* Retry only while the peer refuses or its name is not known
         * yet: it may still be starting. */
        if (fd >= 0 || (gai == 0 && e != ECONNREFUSED) || clock_now_ms() >= deadline)
            break;
        struct timespec ts = {0, (gai ? 200 : 50) * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    text_shown shown;
    if (fd < 0 && gai != 0)
        snprintf(err, errlen, "cannot resolve %s: %s%s", text_show(host, '\'', &shown), gai_strerror(gai),
                 net_resolve_may_come(gai) ? " (tried until the connect timeout)" : "");
    else if (fd < 0)
        snprintf(err, errlen, "cannot connect to %s:%u: %s", host, port, strerror(e));
    return fd;
}

void net_peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "?";
    unsigned p = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
            p = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
            p = ntohs(a->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%u", h, p);
}

int net_raise_fd_limit(unsigned long long *was, unsigned long long *now)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    if (was)
        *was = (unsigned long long)rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (now)
        *now = (unsigned long long)rl.rlim_cur;
    return 0;
}
