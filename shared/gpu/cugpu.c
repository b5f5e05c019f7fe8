/* cugpu.c — what every implementation of cugpu.h shares: the check of the
 * memory an IPC handle opened against the size the peer claims for it.
 *
 * A peer's handle names an allocation; the size that comes with it (a
 * trainer's `segment` in its export, a server's in its answer) is only the
 * peer's word, and every later offset (`dev`) is checked against that
 * word. So the word is checked once, against the object the driver
 * opened, before anything reads or writes through it: a claim larger than
 * the allocation would have kernels read past it — an illegal address
 * that fails the stream, or another process's memory.
 */
#include "shared/gpu/cugpu.h"

#include <inttypes.h>
#include <stdio.h>

int cugpu_ipc_check_range(cugpu *g, uintptr_t opened, uintptr_t base, uint64_t size, uint64_t claim)
{
    /* A handle names a whole allocation, and opening it gives that
     * allocation's base: an opened pointer inside some other range is not
     * memory the peer exported as such. */
    if (base != opened) {
        snprintf(g->err, sizeof g->err,
                 "the IPC handle opened at 0x%" PRIxPTR ", inside an allocation at 0x%" PRIxPTR " of %" PRIu64
                 " bytes, not at its start",
                 opened, base, size);
        return -1;
    }
    if (claim > size) {
        snprintf(g->err, sizeof g->err, "the exported allocation holds %" PRIu64 " bytes, %" PRIu64 " claimed", size,
                 claim);
        return -1;
    }
    return 0;
}
