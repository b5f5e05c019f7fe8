/* hostmem.h — this host's memory, as the kernel reports it: what an
 * embedding table must fit in. A server sends it with its register (the
 * master refuses tables that cannot fit, before any server allocates) and
 * a standalone server checks its own table against it at start.
 *
 * PSBENCH_TEST_MEM_BYTES (tests only) replaces both numbers, so that a
 * test can have a table refused without allocating anything large.
 */
#ifndef PSBENCH_HOSTMEM_H
#define PSBENCH_HOSTMEM_H

#include <stdint.h>

/* MemTotal and MemAvailable of /proc/meminfo, in bytes (sysinfo's total
 * and free RAM where /proc/meminfo cannot be read). Returns 0, or -1 when
 * neither can be read. */
int hostmem_read(uint64_t *total, uint64_t *available);

#endif
