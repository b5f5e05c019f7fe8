/* zcopy.h — zero-copy sends of large payloads: vmsplice + splice.
 *
 * write() copies a payload into the socket's buffers, and on loopback the
 * reader then copies it out again. Splicing skips the first copy: vmsplice
 * puts references to the payload's pages into a pipe, splice moves them into
 * the socket, and the peer's read copies straight from those pages.
 *
 * The price is a rule for the caller: the payload's bytes must not change
 * until the peer has read them, which only the protocol can tell (the
 * server knows a trainer has read a result when that trainer pushes a later
 * batch: outq.h). Unmapping the memory is safe (munmap leaves the pages
 * alive while the kernel holds them); writing into it, or handing it to
 * malloc, is not. Once the peer has read the bytes, a retransmission of
 * them (on a real network) is a duplicate its TCP drops.
 *
 * One zcopy per connection; it sends one payload at a time.
 */
#ifndef PSBENCH_ZCOPY_H
#define PSBENCH_ZCOPY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Payloads smaller than this are cheaper to copy. */
#define ZCOPY_MIN (64u * 1024u)

typedef struct zcopy {
    int pipe[2];      /* -1 until the first payload */
    uint64_t in_pipe; /* bytes of the current payload waiting in the pipe */
    uint64_t cap;     /* the pipe's capacity */
} zcopy;

void zcopy_init(zcopy *z);
/* Close the pipe (what it held is dropped; the caller resends it from its
 * own count of bytes sent, or gives up the connection). */
void zcopy_close(zcopy *z);
/* Move more of data[0, len) into fd. `done` bytes of it are in the socket
 * already; more of it may wait in the pipe. Returns the bytes that entered
 * the socket (> 0); -1 with errno: EAGAIN when the socket is full, EINTR to
 * try again, or the socket's own error; or ZCOPY_UNSUPPORTED with errno
 * saying why splicing cannot work here (no pipe to be had, a kernel or
 * filter that refuses): the pipe is then closed, and the caller copies the
 * rest from `done`. */
ssize_t zcopy_send(zcopy *z, int fd, const uint8_t *data, uint64_t len, uint64_t done);

#define ZCOPY_UNSUPPORTED (-2)

#endif
