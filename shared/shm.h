/* shm.h — shared memory between the roles on one host (transport).
 *
 * Three things, each small:
 *
 * - A segment (shm_seg): a memfd (anonymous: nothing in /dev/shm to leak)
 *   mapped into this process. shm_seg_create makes one of a fixed size and
 *   seals it against shrinking and growing (F_SEAL_SHRINK: no peer can
 *   truncate the pages under another's mapping and raise SIGBUS), and, on
 *   request, against new writable mappings (F_SEAL_FUTURE_WRITE: peers map
 *   it read-only, whatever they ask). shm_seg_map_peer maps a segment a
 *   peer sent, read-only, after checking that it is one: a memfd of
 *   ordinary shared memory (not hugetlbfs: its pages can be missing at
 *   the first touch, SIGBUS) sealed against shrinking, of a size within
 *   the caller's bound.
 * - An arena (shm_arena): whole pages of one segment handed out and taken
 *   back (first fit, neighbours merged, a freed range's pages given back to
 *   the kernel). A server's result buffers and a trainer's pushes live in
 *   one: the peer then reads them where they are, and a frame names them by
 *   offset (`at`, docs/protocol.md).
 * - Descriptors over a Unix-domain socket (SCM_RIGHTS), and the abstract
 *   socket names a server listens on (no file; scoped to the network
 *   namespace, which is what "one host" means to a psbench role).
 *
 * Sizes are virtual: a segment's pages exist once written.
 */
#ifndef PSBENCH_SHM_H
#define PSBENCH_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "shared/ranges.h"

typedef struct shm_seg {
    int fd;         /* -1: none */
    uint8_t *base;  /* NULL: not mapped */
    uint64_t size;  /* bytes mapped (the memfd's size when it was mapped) */
    bool writable;  /* this process may write it (it made it) */
} shm_seg;

#define SHM_SEG_NONE ((shm_seg){.fd = -1})

/* A sealed memfd of `size` bytes (page multiple), mapped read-write here.
 * peers_read_only: seal it against writable mappings made from now on
 * (this one stays writable). 0, or -1 with err. */
int shm_seg_create(shm_seg *s, const char *name, uint64_t size, bool peers_read_only, char *err, size_t errlen);
/* Map read-only the segment `fd` a peer sent; takes fd (closed on
 * failure). Refused: not a memfd that can be sealed, not sealed against
 * shrinking, not ordinary shared memory (shm_fd_check_shmem), empty, or
 * larger than max. 0, or -1 with err. */
int shm_seg_map_peer(shm_seg *s, int fd, uint64_t max, char *err, size_t errlen);
/* fd is a file of ordinary shared memory (fstatfs: tmpfs, where memfds
 * live), whose pages cannot go missing under a mapping: the check every
 * descriptor a peer sent passes before this process maps it (a hugetlbfs
 * memfd seals and maps like one, then raises SIGBUS at the first touch
 * where the huge-page pool is empty). `what` names it in err ("the
 * segment sent"). 0, or -1 with err. */
int shm_fd_check_shmem(int fd, const char *what, char *err, size_t errlen);
/* Unmap and close; a no-op on SHM_SEG_NONE. Leaves SHM_SEG_NONE. */
void shm_seg_close(shm_seg *s);
/* [at, at + len) lies inside s (overflow-safe). */
static inline bool shm_seg_holds(const shm_seg *s, uint64_t at, uint64_t len)
{
    return s->base && at <= s->size && len <= s->size - at;
}

/* ---- which transport a role uses --------------------------------------- */

/* --transport: auto (shared memory with a server on this host, TCP
 * otherwise), tcp (never shared memory), shm (shared memory or a clear
 * error). */
typedef enum psb_transport { PSB_TRANSPORT_AUTO = 0, PSB_TRANSPORT_TCP, PSB_TRANSPORT_SHM } psb_transport;
/* 0, or -1 for a word that is none of the three. */
int psb_transport_parse(const char *s, psb_transport *t);
const char *psb_transport_name(psb_transport t);
/* The default: $PSBENCH_TRANSPORT when it names one (the test suites run
 * every binary over each transport this way), else auto. */
psb_transport psb_transport_default(void);

/* ---- an arena of pages over one segment ------------------------------- */

typedef struct shm_arena {
    shm_seg seg;
    ranges pages; /* the segment's pages handed out */
} shm_arena;

/* A writable segment of `size` bytes to hand out (peers map it read-only
 * when peers_read_only). 0, or -1 with err. */
int shm_arena_init(shm_arena *a, const char *name, uint64_t size, bool peers_read_only, char *err, size_t errlen);
void shm_arena_destroy(shm_arena *a);
/* Whole pages for `bytes`, page-aligned; NULL when none are left. */
void *shm_arena_alloc(shm_arena *a, size_t bytes);
/* Give back what shm_arena_alloc returned (its pages go back to the
 * kernel; a peer's mapping of them reads zeros). */
void shm_arena_free(shm_arena *a, void *p);
/* p (n bytes) lies in the arena's segment: its offset in *off. */
static inline bool shm_arena_owns(const shm_arena *a, const void *p, uint64_t n, uint64_t *off)
{
    const uint8_t *b = a->seg.base, *q = p;
    if (!b || q < b || (uint64_t)(q - b) > a->seg.size || n > a->seg.size - (uint64_t)(q - b))
        return false;
    *off = (uint64_t)(q - b);
    return true;
}

/* The largest segment a server takes by default (--max-shm), and so the
 * largest a trainer makes. */
#define SHM_SEG_DEFAULT_MAX (64ull << 30)
/* The virtual size for a process's arena: the host's memory, at most
 * SHM_SEG_DEFAULT_MAX, at least 64 MiB, and an eighth of an address-space limit (pages
 * exist only once written). */
uint64_t shm_default_size(void);

/* ---- descriptors over Unix-domain sockets ----------------------------- */

/* sendmsg of iov with fd (>= 0) attached to its first byte, MSG_NOSIGNAL. */
ssize_t shm_send_fd(int sock, const struct iovec *iov, int iovcnt, int fd);
/* recv into buf; descriptors that came with the bytes are appended to
 * fds[*nfds] up to maxfds (others are closed: none is ever left open
 * unaccounted). *ctrunc is set when the kernel dropped some. */
ssize_t shm_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int maxfds, bool *ctrunc);

/* Abstract-namespace Unix socket names: "psbench-<pid>-<random>" (no
 * leading NUL: shown as is, and what a probe answer carries). */
void shm_socket_name(char *buf, size_t len, const char *role);
/* A listening, nonblocking SOCK_STREAM socket on abstract `name`. */
int shm_listen(const char *name, int backlog, char *err, size_t errlen);
/* Connect to abstract `name` (blocking). -1 with err (ECONNREFUSED: not
 * on this host). */
int shm_connect(const char *name, char *err, size_t errlen);
/* "pid N (Unix socket)": who is at the other end of a Unix socket. */
void shm_peer_name(int fd, char *buf, size_t len);
/* A name a peer sent is one we would connect to: printable, no '/', at
 * most 100 bytes. */
bool shm_name_ok(const char *p, size_t n);

#endif
