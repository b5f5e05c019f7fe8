/* zcopy.c — zero-copy sends of large payloads (see zcopy.h). */
#include "server/zcopy.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Pipe capacity. Every pipe of a user counts against fs.pipe-user-pages-soft
 * (64 MiB by default, for all of that user's processes together): 256 KiB
 * leaves room for 256 connections, and moves a 4 MiB result in 16 steps at
 * the same cost as 1 MiB did in 4 (measured). Past the budget, new pipes
 * get 8 KiB, which is slower than copying: below ZCOPY_PIPE_MIN we copy. */
#define ZCOPY_PIPE_WANT (256 << 10)
#define ZCOPY_PIPE_MIN (64 << 10)

void zcopy_init(zcopy *z)
{
    z->pipe[0] = z->pipe[1] = -1;
    z->in_pipe = 0;
    z->cap = 0;
}

void zcopy_close(zcopy *z)
{
    if (z->pipe[0] >= 0) {
        close(z->pipe[0]);
        close(z->pipe[1]);
    }
    zcopy_init(z);
}

static int zcopy_open(zcopy *z)
{
    if (pipe2(z->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        z->pipe[0] = z->pipe[1] = -1;
        return -1;
    }
    /* Growing fails past the per-user pipe budget: keep what we got if it
     * is big enough to beat a copy. */
    int sz = fcntl(z->pipe[1], F_SETPIPE_SZ, ZCOPY_PIPE_WANT);
    if (sz < 0)
        sz = fcntl(z->pipe[1], F_GETPIPE_SZ);
    if (sz < ZCOPY_PIPE_MIN) {
        zcopy_close(z);
        errno = ENOBUFS; /* "the pipe budget (fs.pipe-user-pages-soft) is spent" */
        return -1;
    }
    z->cap = (uint64_t)sz;
    return 0;
}

static ssize_t zcopy_unsupported(zcopy *z, int err)
{
    zcopy_close(z);
    errno = err ? err : EINVAL;
    return ZCOPY_UNSUPPORTED;
}

ssize_t zcopy_send(zcopy *z, int fd, const uint8_t *data, uint64_t len, uint64_t done)
{
    assert(done + z->in_pipe <= len);
    if (z->pipe[0] < 0 && zcopy_open(z) < 0)
        return zcopy_unsupported(z, errno);
    uint64_t queued = done + z->in_pipe; /* in the socket or the pipe */
    /* Top the pipe up while it is less than half full: pages that start
     * mid-way take a slot each, so half the capacity always fits. */
    if (queued < len && z->in_pipe < z->cap / 2) {
        uint64_t want = len - queued, room = z->cap - z->in_pipe;
        struct iovec v = {(void *)(data + queued), (size_t)(want < room ? want : room)};
        ssize_t m = vmsplice(z->pipe[1], &v, 1, SPLICE_F_NONBLOCK);
        if (m > 0)
            z->in_pipe += (uint64_t)m;
        else if (m < 0 && errno == EINTR)
            return -1;
        else if (z->in_pipe == 0 || (m < 0 && errno != EAGAIN))
            return zcopy_unsupported(z, m < 0 ? errno : 0); /* an empty pipe that takes nothing */
    }
    assert(z->in_pipe > 0);
    /* MORE while the payload goes on, so that TCP sends full segments. */
    unsigned flags = SPLICE_F_NONBLOCK | (done + z->in_pipe < len ? SPLICE_F_MORE : 0);
    ssize_t w = splice(z->pipe[0], NULL, fd, NULL, (size_t)z->in_pipe, flags);
    if (w < 0) {
        /* The socket's own troubles end the connection as a writev's would;
         * anything else (this socket takes no spliced pages, no memory for
         * them now) is for copying to handle. */
        if (errno == EAGAIN || errno == EINTR || errno == EPIPE || errno == ECONNRESET ||
            errno == ENOTCONN || errno == ETIMEDOUT)
            return -1;
        return zcopy_unsupported(z, errno);
    }
    if (w == 0) { /* nothing moved yet the socket did not say EAGAIN */
        errno = EAGAIN;
        return -1;
    }
    assert((uint64_t)w <= z->in_pipe);
    z->in_pipe -= (uint64_t)w;
    return w;
}
