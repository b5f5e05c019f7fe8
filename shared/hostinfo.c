/* hostinfo.c — what this process computes with (see hostinfo.h). */
#include "shared/hostinfo.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
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

/* This process's CPU seconds (user + system): getrusage, whose
 * microseconds are finer than /proc/self/stat's ticks. */
static double hostinfo_own_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

void hostinfo_sample_take(hostinfo_sample *s)
{
    memset(s, 0, sizeof *s);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    s->cpu_s = hostinfo_own_cpu_s();
    s->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    s->procs_running = -1;
    s->load1 = NAN;
    FILE *f = hostinfo_proc("loadavg");
    double l;
    if (f && fscanf(f, "%lf", &l) == 1 && l >= 0)
        s->load1 = l;
    if (f)
        fclose(f);
    f = hostinfo_proc("stat");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        unsigned long long v[8];
        long long pr;
        if (sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) == 8) {
            /* user nice system idle iowait irq softirq steal (guest and
             * guest_nice are in user and nice already). */
            s->total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
            s->idle = v[3];
            s->iowait = v[4];
            s->irq = v[5] + v[6];
            s->steal = v[7];
            s->ticks_ok = true;
        } else if (sscanf(line, "procs_running %lld", &pr) == 1 && pr >= 0) {
            s->procs_running = pr;
        }
    }
    fclose(f);
}

json_t *hostinfo_sample_json(const hostinfo_sample *s)
{
    json_t *o = json_pack("{s:f, s:f, s:I}", "t", s->t, "cpu_s", s->cpu_s, "cpus", (json_int_t)s->cpus);
    if (o && s->ticks_ok) {
        json_object_set_new(o, "cpu_ticks", json_integer((json_int_t)s->total));
        json_object_set_new(o, "idle_ticks", json_integer((json_int_t)s->idle));
        json_object_set_new(o, "iowait_ticks", json_integer((json_int_t)s->iowait));
        json_object_set_new(o, "steal_ticks", json_integer((json_int_t)s->steal));
        json_object_set_new(o, "irq_ticks", json_integer((json_int_t)s->irq));
    }
    if (o && s->procs_running >= 0)
        json_object_set_new(o, "procs_running", json_integer(s->procs_running));
    if (o && isfinite(s->load1))
        json_object_set_new(o, "load1", json_real(s->load1));
    return o;
}

static uint64_t hostinfo_u(const json_t *o, const char *key)
{
    return (uint64_t)json_integer_value(json_object_get(o, key));
}

void hostinfo_sample_from_json(const json_t *o, hostinfo_sample *s)
{
    memset(s, 0, sizeof *s);
    s->t = json_number_value(json_object_get(o, "t"));
    s->cpu_s = json_number_value(json_object_get(o, "cpu_s"));
    s->cpus = json_integer_value(json_object_get(o, "cpus"));
    s->ticks_ok = json_object_get(o, "cpu_ticks") != NULL;
    s->total = hostinfo_u(o, "cpu_ticks");
    s->idle = hostinfo_u(o, "idle_ticks");
    s->iowait = hostinfo_u(o, "iowait_ticks");
    s->steal = hostinfo_u(o, "steal_ticks");
    s->irq = hostinfo_u(o, "irq_ticks");
    const json_t *pr = json_object_get(o, "procs_running");
    s->procs_running = pr ? json_integer_value(pr) : -1;
    const json_t *l = json_object_get(o, "load1");
    s->load1 = l ? json_number_value(l) : NAN;
}

hostinfo_window hostinfo_window_of(const hostinfo_sample *a, const hostinfo_sample *b)
{
    hostinfo_window w = {b->t - a->t, NAN, NAN, NAN};
    if (a->ticks_ok && b->ticks_ok && b->total > a->total && b->idle >= a->idle && b->iowait >= a->iowait &&
        b->steal >= a->steal && b->irq >= a->irq) {
        double dt = (double)(b->total - a->total);
        /* Busy: every tick but idle, iowait and steal. irq and softirq
         * count: a process is charged for the softirq it runs in its own
         * context (a send over loopback TCP runs the receive there), so
         * leaving them out of the host's busy share while the job's own
         * CPU time holds them made the job look busier than the host
         * (Gloo over TCP: 0.9 against 0.47) and hid other processes. */
        double rest = (double)(b->idle - a->idle) + (double)(b->iowait - a->iowait) + (double)(b->steal - a->steal);
        w.steal = (double)(b->steal - a->steal) / dt;
        w.busy = rest <= dt ? (dt - rest) / dt : 0;
    }
    if (w.seconds > 0 && b->cpus > 0 && b->cpu_s >= a->cpu_s)
        w.own = (b->cpu_s - a->cpu_s) / (w.seconds * (double)b->cpus);
    return w;
}
