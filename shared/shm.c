/* shm.c — sealed memfd segments, an arena of pages, descriptors over Unix
 * sockets (see shm.h). */
#include "shared/shm.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* statfs f_type values (linux/magic.h, spelled out: that header is not
 * everywhere the C library is). */
#define SHM_TMPFS_MAGIC 0x01021994u
#define SHM_HUGETLBFS_MAGIC 0x958458f6u
#define SHM_RAMFS_MAGIC 0x858458f6u

static uint64_t shm_page(void)
{
    return (uint64_t)sysconf(_SC_PAGESIZE);
}

int shm_seg_create(shm_seg *s, const char *name, uint64_t size, bool peers_read_only, char *err, size_t errlen)
{
    *s = SHM_SEG_NONE;
    uint64_t page = shm_page();
    size = (size + page - 1) / page * page;
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(err, errlen, "memfd_create: %s", strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        snprintf(err, errlen, "cannot size a shared segment to %llu bytes: %s", (unsigned long long)size,
                 strerror(errno));
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map a shared segment of %llu bytes: %s", (unsigned long long)size,
                 strerror(errno));
        close(fd);
        return -1;
    }
    /* The future-write seal only refuses mappings made after it: ours,
     * made before, stays writable. */
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | (peers_read_only ? F_SEAL_FUTURE_WRITE : 0) | F_SEAL_SEAL;
    if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
        snprintf(err, errlen, "cannot seal a shared segment: %s", strerror(errno));
        munmap(p, size);
        close(fd);
        return -1;
    }
    s->fd = fd;
    s->base = p;
    s->size = size;
    s->writable = true;
    return 0;
}

/* A file system's name for a message, from its statfs magic. */
static const char *shm_fs_name(unsigned long type, char *buf, size_t len)
{
    switch (type) {
    case SHM_HUGETLBFS_MAGIC:
        return "hugetlbfs";
    case SHM_RAMFS_MAGIC:
        return "ramfs";
    default:
        snprintf(buf, len, "a file system of type 0x%lx", type);
        return buf;
    }
}

int shm_fd_check_shmem(int fd, const char *what, char *err, size_t errlen)
{
    struct statfs sf;
    char buf[48];
    if (fstatfs(fd, &sf) < 0) {
        snprintf(err, errlen, "%s cannot be examined (fstatfs: %s)", what, strerror(errno));
        return -1;
    }
    /* The memfds of memfd_create without MFD_HUGETLB live in the kernel's
     * internal tmpfs: their pages are allocated (or read as zeros) on any
     * touch, whatever the peer does once they are sealed. Anything else,
     * hugetlbfs above all (sealable, mappable, and its pages taken from a
     * pool that may be empty at the first touch: SIGBUS), is refused. */
    if ((unsigned long)sf.f_type != SHM_TMPFS_MAGIC) {
        snprintf(err, errlen, "%s is on %s, not ordinary shared memory (a memfd without MFD_HUGETLB): its pages "
                 "could be missing when touched (SIGBUS)",
                 what, shm_fs_name((unsigned long)sf.f_type, buf, sizeof buf));
        return -1;
    }
    return 0;
}

int shm_seg_map_peer(shm_seg *s, int fd, uint64_t max, char *err, size_t errlen)
{
    *s = SHM_SEG_NONE;
    int seals = fcntl(fd, F_GET_SEALS);
    struct stat st;
    if (seals < 0) {
        snprintf(err, errlen, "the segment sent is not a memfd (%s)", strerror(errno));
        goto fail;
    }
    if (!(seals & F_SEAL_SHRINK)) {
        snprintf(err, errlen, "the segment sent is not sealed against shrinking (F_SEAL_SHRINK)");
        goto fail;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "the segment sent cannot be examined");
        goto fail;
    }
    if (shm_fd_check_shmem(fd, "the segment sent", err, errlen) < 0)
        goto fail;
    if (st.st_size <= 0 || (uint64_t)st.st_size > max) {
        snprintf(err, errlen, "the segment sent is %lld bytes (at most %llu taken)", (long long)st.st_size,
                 (unsigned long long)max);
        goto fail;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the segment sent: %s", strerror(errno));
        goto fail;
    }
    s->fd = fd;
    s->base = p;
    s->size = (uint64_t)st.st_size;
    s->writable = false;
    return 0;
fail:
    close(fd);
    return -1;
}

void shm_seg_close(shm_seg *s)
{
    if (s->base)
        munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    *s = SHM_SEG_NONE;
}

/* ---- transports ------------------------------------------------------------ */

int psb_transport_parse(const char *s, psb_transport *t)
{
    static const char *const names[] = {"auto", "tcp", "shm"};
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *t = (psb_transport)i;
            return 0;
        }
    return -1;
}

const char *psb_transport_name(psb_transport t)
{
    return t == PSB_TRANSPORT_TCP ? "tcp" : t == PSB_TRANSPORT_SHM ? "shm" : "auto";
}

psb_transport psb_transport_default(void)
{
    psb_transport t = PSB_TRANSPORT_AUTO;
    const char *e = getenv("PSBENCH_TRANSPORT");
    if (e && *e)
        (void)psb_transport_parse(e, &t);
    return t;
}

/* ---- the arena ---------------------------------------------------------- */

int shm_arena_init(shm_arena *a, const char *name, uint64_t size, bool peers_read_only, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (shm_seg_create(&a->seg, name, size, peers_read_only, err, errlen) < 0)
        return -1;
    if (ranges_init(&a->pages, a->seg.size, shm_page()) < 0) {
        shm_seg_close(&a->seg);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void shm_arena_destroy(shm_arena *a)
{
    shm_seg_close(&a->seg);
    ranges_destroy(&a->pages);
    memset(a, 0, sizeof *a);
    a->seg = SHM_SEG_NONE;
}

void *shm_arena_alloc(shm_arena *a, size_t bytes)
{
    if (!a->seg.base)
        return NULL;
    uint64_t off = ranges_alloc(&a->pages, bytes);
    return off == RANGES_NONE ? NULL : a->seg.base + off;
}

void shm_arena_free(shm_arena *a, void *p)
{
    uint64_t off;
    if (!p)
        return;
    bool ours = shm_arena_owns(a, p, 0, &off);
    assert(ours);
    (void)ours;
    uint64_t len = ranges_free(&a->pages, off);
    assert(len > 0); /* p came from shm_arena_alloc */
    /* Its pages go back: memory a pool trimmed is memory returned. */
    if (len)
        (void)fallocate(a->seg.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

uint64_t shm_default_size(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    uint64_t mem = pages > 0 ? (uint64_t)pages * shm_page() : (64ull << 30);
    /* At most a server's default --max-shm, so that on any host a
     * trainer's segment is one a default server takes (and a server maps
     * at most 64 GiB of address space per trainer). */
    if (mem > SHM_SEG_DEFAULT_MAX)
        mem = SHM_SEG_DEFAULT_MAX;
    if (mem < (64ull << 20))
        mem = 64ull << 20;
    /* Under an address-space limit (ulimit -v) an eighth of it at most:
     * the rest is the process's own memory, and its peers' segments. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && mem > rl.rlim_cur / 8)
        mem = rl.rlim_cur / 8 / shm_page() * shm_page();
    return mem ? mem : shm_page();
}

/* ---- descriptors ----------------------------------------------------------- */

ssize_t shm_send_fd(int sock, const struct iovec *iov, int iovcnt, int fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {0};
    m.msg_iov = (struct iovec *)iov;
    m.msg_iovlen = (size_t)iovcnt;
    if (fd >= 0) {
        memset(&u, 0, sizeof u);
        m.msg_control = u.buf;
        m.msg_controllen = sizeof u.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    ssize_t r;
    do
        r = sendmsg(sock, &m, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    return r;
}

ssize_t shm_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int maxfds, bool *ctrunc)
{
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, len};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.buf;
    m.msg_controllen = sizeof u.buf;
    ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (r < 0)
        return r;
    if (m.msg_flags & MSG_CTRUNC)
        *ctrunc = true;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < n; k++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
            if (*nfds < maxfds)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return r;
}

/* ---- abstract socket names ------------------------------------------------- */

void shm_socket_name(char *buf, size_t len, const char *role)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (ufd >= 0) {
        uint64_t r;
        if (read(ufd, &r, sizeof r) == (ssize_t)sizeof r)
            x ^= r;
        close(ufd);
    }
    snprintf(buf, len, "psbench-%s-%d-%016llx", role, (int)getpid(), (unsigned long long)x);
}

void shm_peer_name(int fd, char *buf, size_t len)
{
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
        snprintf(buf, len, "pid %d (Unix socket)", (int)cr.pid);
    else
        snprintf(buf, len, "a Unix-socket peer");
}

bool shm_name_ok(const char *p, size_t n)
{
    if (n == 0 || n > 100)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e || p[i] == '/')
            return false;
    return true;
}

static socklen_t shm_addr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof sa->sun_path - 1)
        n = sizeof sa->sun_path - 1;
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int shm_listen(const char *name, int backlog, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    socklen_t sl = shm_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, backlog) < 0) {
        snprintf(err, errlen, "cannot listen on Unix socket @%s: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int shm_connect(const char *name, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    socklen_t sl = shm_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int r;
    do
        r = connect(fd, (struct sockaddr *)&sa, sl);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        snprintf(err, errlen, "Unix socket @%s: %s", name,
                 errno == ECONNREFUSED ? "not reachable from here (another host or network namespace)"
                                       : strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
