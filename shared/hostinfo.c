/* hostinfo.c — what this process computes with (see hostinfo.h). */
#include "shared/hostinfo.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
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

/* $PSBENCH_PROC_DIR/name, or /proc/name, opened for reading. */
static FILE *hostinfo_proc(const char *name)
{
    const char *dir = getenv("PSBENCH_PROC_DIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir && dir[0] ? dir : "/proc", name);
    return fopen(path, "r");
}

json_t *hostinfo_load(void)
{
    json_t *o = json_pack("{s:n, s:I, s:n, s:n}", "loadavg", "cpus", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
                          "cpu_ticks", "steal_ticks");
    if (!o)
        return NULL;
    FILE *f = hostinfo_proc("loadavg");
    double l[3];
    if (f && fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3)
        json_object_set_new(o, "loadavg", json_pack("[f, f, f]", l[0], l[1], l[2]));
    if (f)
        fclose(f);
    /* "cpu  user nice system idle iowait irq softirq steal ...": steal is
     * the eighth; guest and guest_nice (ninth, tenth) are already counted
     * in user and nice, so the total stops at steal. */
    f = hostinfo_proc("stat");
    unsigned long long v[8];
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                    &v[6], &v[7]) == 8) {
        unsigned long long total = 0;
        for (int i = 0; i < 8; i++)
            total += v[i];
        json_object_set_new(o, "cpu_ticks", json_integer((json_int_t)total));
        json_object_set_new(o, "steal_ticks", json_integer((json_int_t)v[7]));
    }
    if (f)
        fclose(f);
    return o;
}

double hostinfo_steal_share(const json_t *start, const json_t *end)
{
    const json_t *t0 = json_object_get(start, "cpu_ticks"), *t1 = json_object_get(end, "cpu_ticks");
    const json_t *s0 = json_object_get(start, "steal_ticks"), *s1 = json_object_get(end, "steal_ticks");
    if (!json_is_integer(t0) || !json_is_integer(t1) || !json_is_integer(s0) || !json_is_integer(s1))
        return NAN;
    json_int_t dt = json_integer_value(t1) - json_integer_value(t0);
    json_int_t ds = json_integer_value(s1) - json_integer_value(s0);
    return dt > 0 && ds >= 0 ? (double)ds / (double)dt : NAN;
}
