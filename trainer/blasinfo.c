/* blasinfo.c — the trainer's BLAS, as OpenBLAS reports itself (see
 * blasinfo.h). */
#include "trainer/blasinfo.h"
#include "shared/hostinfo.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS's x86 cores whose kernels use no AVX2 (its generic fallbacks
 * and older CPUs'): on a CPU with AVX2 each means OpenBLAS did not
 * recognise the CPU. */
static const char *const blasinfo_pre_avx2[] = {
    "Generic", "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
    "Northwood", "Banias", "Athlon", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat", "Nano",
    "Sandybridge", "Bulldozer", "Piledriver", "Steamroller",
};

/* The library's name and version: the first two words of its config line
 * ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64"). */
static void blasinfo_name_version(char *name, size_t nlen, char *version, size_t vlen)
{
    const char *cfg = openblas_get_config();
    snprintf(name, nlen, "unknown");
    snprintf(version, vlen, "unknown");
    if (!cfg)
        return;
    char first[64] = "", second[64] = "";
    if (sscanf(cfg, "%63s %63s", first, second) >= 1)
        snprintf(name, nlen, "%s", first);
    if (second[0])
        snprintf(version, vlen, "%s", second);
}

json_t *blasinfo_json(void)
{
    char name[64], version[64];
    blasinfo_name_version(name, sizeof name, version, sizeof version);
    const char *core = openblas_get_corename();
    const char *cfg = openblas_get_config();
    return json_pack("{s:s, s:s, s:s, s:i, s:s}", "library", name, "version", version, "core",
                     core ? core : "unknown", "threads", openblas_get_num_threads(), "config", cfg ? cfg : "");
}

void blasinfo_describe(char *buf, size_t len)
{
    char name[64], version[64];
    blasinfo_name_version(name, sizeof name, version, sizeof version);
    const char *core = openblas_get_corename();
    int threads = openblas_get_num_threads();
    snprintf(buf, len, "%s %s, %s kernels, %d thread%s", name, version, core ? core : "unknown", threads,
             threads == 1 ? "" : "s");
}

int blasinfo_generic_warning(const char *core, const char *coretype, bool (*cpu_has)(const char *ext), char *buf,
                             size_t len)
{
    if (!core || !cpu_has("avx2"))
        return 0;
    int generic = 0;
    for (size_t i = 0; i < sizeof blasinfo_pre_avx2 / sizeof *blasinfo_pre_avx2; i++)
        generic |= strcasecmp(core, blasinfo_pre_avx2[i]) == 0;
    if (!generic)
        return 0;
    /* The newest core OpenBLAS 0.3.x has for what this CPU can do. */
    const char *want = cpu_has("avx512_bf16") ? "Cooperlake" : cpu_has("avx512f") ? "SkylakeX" : "Haswell";
    if (coretype && *coretype)
        snprintf(buf, len,
                 "OPENBLAS_CORETYPE=%s makes OpenBLAS run its '%s' kernels, which use no AVX2, on a CPU with AVX2: "
                 "matrix products may run far slower than this host can (OPENBLAS_CORETYPE=%s suits it)",
                 coretype, core, want);
    else
        snprintf(buf, len,
                 "OpenBLAS chose its generic '%s' kernels on a CPU with AVX2 (it did not recognise this CPU): "
                 "matrix products may run far slower than this host can; set OPENBLAS_CORETYPE=%s in the "
                 "trainers' environment to choose kernels",
                 core, want);
    return 1;
}

int blasinfo_warning(char *buf, size_t len)
{
    return blasinfo_generic_warning(openblas_get_corename(), getenv("OPENBLAS_CORETYPE"), hostinfo_cpu_has, buf, len);
}
