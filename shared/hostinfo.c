/* hostinfo.c — what this process computes with (see hostinfo.h). */
#include "shared/hostinfo.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The extensions reported, as /proc/cpuinfo's "flags" spells them, in
 * order of age: those that decide which kernels BLAS and the fold run. */
static const char *const hostinfo_exts[] = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"};

/* The value of the first "key<spaces>: value" line of /proc/cpuinfo. */
static int hostinfo_cpuinfo(const char *key, char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[8192];
    size_t klen = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t' && line[klen] != ':'))
            continue;
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        v[strcspn(v, "\n")] = '\0';
        snprintf(buf, len, "%s", v);
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

void hostinfo_cpu_model(char *buf, size_t len)
{
    if (hostinfo_cpuinfo("model name", buf, len) == 0 && buf[0])
        return;
    struct utsname u;
    snprintf(buf, len, "%s", uname(&u) == 0 ? u.machine : "unknown");
}

/* " flag flag ... flag ": /proc/cpuinfo's flags between blanks, read once. */
static char hostinfo_flags[8192];
static pthread_once_t hostinfo_flags_once = PTHREAD_ONCE_INIT;

static void hostinfo_read_flags(void)
{
    if (hostinfo_cpuinfo("flags", hostinfo_flags + 1, sizeof hostinfo_flags - 2) != 0)
        return;
    hostinfo_flags[0] = ' ';
    size_t n = strlen(hostinfo_flags);
    hostinfo_flags[n] = ' ';
    hostinfo_flags[n + 1] = '\0';
}

bool hostinfo_cpu_has(const char *ext)
{
    /* /proc/cpuinfo's flags rather than __builtin_cpu_supports: it knows
     * every extension the kernel knows, whatever this compiler's age. */
    pthread_once(&hostinfo_flags_once, hostinfo_read_flags);
    char want[64];
    snprintf(want, sizeof want, " %s ", ext);
    return strstr(hostinfo_flags, want) != NULL;
}

#define HOSTINFO_STR_(x) #x
#define HOSTINFO_STR(x) HOSTINFO_STR_(x)

const char *hostinfo_compiler(void)
{
#if defined(__clang__)
    return "clang " HOSTINFO_STR(__clang_major__) "." HOSTINFO_STR(__clang_minor__) "." HOSTINFO_STR(
        __clang_patchlevel__);
#elif defined(__GNUC__)
    return "gcc " HOSTINFO_STR(__GNUC__) "." HOSTINFO_STR(__GNUC_MINOR__) "." HOSTINFO_STR(__GNUC_PATCHLEVEL__);
#else
    return "unknown";
#endif
}

static json_t *hostinfo_simd(void)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < sizeof hostinfo_exts / sizeof *hostinfo_exts; i++)
        if (hostinfo_cpu_has(hostinfo_exts[i]))
            json_array_append_new(a, json_string(hostinfo_exts[i]));
    return a;
}

static long long hostinfo_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (long long)pages * page : -1;
}

json_t *hostinfo_json(void)
{
    char host[256] = "", model[256];
    gethostname(host, sizeof host - 1);
    hostinfo_cpu_model(model, sizeof model);
    struct utsname u;
    if (uname(&u) != 0)
        memset(&u, 0, sizeof u);
    cpu_set_t set;
    int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
    return json_pack("{s:s, s:s, s:I, s:I, s:o, s:I, s:s, s:s, s:s, s:s}", "hostname", host, "cpu_model", model,
                     "cpus", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "cpus_allowed", (json_int_t)allowed, "simd",
                     hostinfo_simd(), "memory_bytes", (json_int_t)hostinfo_memory(), "kernel", u.release,
                     "machine", u.machine, "compiler", hostinfo_compiler(), "psbench_version", PSBENCH_VERSION);
}
