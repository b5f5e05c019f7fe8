/* hostmem.c — this host's memory (see hostmem.h). */
#include "server/hostmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

int hostmem_read(uint64_t *total, uint64_t *available)
{
    const char *test = getenv("PSBENCH_TEST_MEM_BYTES");
    if (test && *test) {
        char *end;
        unsigned long long v = strtoull(test, &end, 10);
        if (*end == '\0' && v > 0) {
            *total = *available = v;
            return 0;
        }
    }
    uint64_t t = 0, a = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (f) {
        char line[128];
        while (fgets(line, sizeof line, f)) {
            uint64_t kib;
            if (sscanf(line, "MemTotal: %" SCNu64 " kB", &kib) == 1)
                t = kib * 1024;
            else if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1)
                a = kib * 1024;
        }
        fclose(f);
    }
    if (t == 0 || a == 0) {
        struct sysinfo si;
        if (sysinfo(&si) < 0)
            return -1;
        if (t == 0)
            t = (uint64_t)si.totalram * si.mem_unit;
        if (a == 0)
            a = (uint64_t)si.freeram * si.mem_unit;
    }
    *total = t;
    *available = a;
    return 0;
}
