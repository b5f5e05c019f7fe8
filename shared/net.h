/* net.h — small TCP helpers shared by the three binaries: address parsing,
 * listening and connecting sockets, socket options. */
#ifndef PSBENCH_NET_H
#define PSBENCH_NET_H

#include <stddef.h>
#include <stdint.h>

/* Split "HOST:PORT" (or "[v6]:PORT") into host and port. The port is
 * decimal digits only, 1..65535 (0 too, an ephemeral port, when
 * allow_zero); a value outside is named ("port 70000 is outside
 * 1..65535"). Returns 0 or -1 with err set (the caller adds the flag). */
int net_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port, int allow_zero,
                       char *err, size_t errlen);
/* Check every entry of "HOST:PORT[,HOST:PORT...]" as net_parse_hostport
 * does (port 0 refused: these are peers to connect to). 0, or -1 with
 * err naming the first bad entry. */
int net_check_hostport_list(const char *list, char *err, size_t errlen);
/* Whether s is a host alone (a name, an IPv4 or a bare IPv6 address), as
 * --advertise and a register's `advertise` take: no port, no characters a
 * name or address never has. Returns 0 or -1 with err set. */
int net_parse_host(const char *s, char *err, size_t errlen);

/* Bind and listen on host:port (nonblocking, SO_REUSEADDR). Returns the fd
 * or -1 with err set. *bound_port gets the real port (for port 0). */
int net_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port, char *err,
               size_t errlen);
/* net_listen on the address a flag gave (--listen, --http): a failure is
 * a bad value of that flag, said as one: "--listen 127.0.0.1:41310:
 * cannot listen there: Address already in use (another process has the
 * port: give another one, or port 0 for any free one)". The binaries exit
 * 2 with it, as for any bad value (docs/operations.md). */
int net_listen_flag(const char *flag, const char *host, uint16_t port, int backlog, uint16_t *bound_port,
                    char *err, size_t errlen);

/* Blocking connect with a timeout in milliseconds, retried until the
 * deadline while the peer refuses or its name does not resolve yet (it
 * may still be starting: a pod's DNS name comes with the pod). A name
 * the resolver refuses otherwise fails at once. Returns a
 * connected fd in blocking mode with TCP_NODELAY, or -1 with err set. */
int net_connect(const char *host, uint16_t port, int timeout_ms, char *err, size_t errlen);

/* Whether a listen host stays on this machine: 127.0.0.0/8, ::1 (also
 * ::ffff:127.x.y.z) or "localhost". Wildcards (0.0.0.0, ::), other
 * addresses and other names are not. */
int net_host_is_loopback(const char *host);

int net_set_nonblock(int fd, int on);
int net_set_nodelay(int fd);
/* TCP_USER_TIMEOUT: data unacknowledged for `seconds` (a peer whose host or
 * link went down) fails the connection with ETIMEDOUT, instead of after
 * the kernel's retries (about 15 minutes). */
int net_set_user_timeout(int fd, double seconds);
/* Describe the peer of fd as "host:port" into buf. */
void net_peer_name(int fd, char *buf, size_t len);
/* Raise the soft descriptor limit (RLIMIT_NOFILE) to the hard one, as
 * servers do: a process that holds a connection per peer should not stop
 * at a soft limit of 1024. *was and *now (may be NULL) get the soft limit
 * before and after. Returns 0, or -1 when it could not be read. */
int net_raise_fd_limit(unsigned long long *was, unsigned long long *now);

#endif
