/* nvtx_inject.c — an NVTX injection library for the tests (issue 42): what
 * Nsight Systems is to NVTX, reduced to a text file, so that a test sees
 * the ranges shared/gpu/nvtx.c makes without a GPU or a profiler.
 *
 * NVTX 3 (header-only, in the program) loads the library named by
 * $NVTX_INJECTION64_PATH at its first call and calls its
 * InitializeInjectionNvtx2 with the program's export table
 * (nvtx3/nvtxDetail/nvtxInit.h); the library fills, in the core2 module's
 * function table, the calls it implements: here domains, registered
 * strings and start/end ranges (the rest stay NVTX's no-ops). Each is one
 * line in the file $PSB_NVTX_OUT (appended, flushed at once):
 *
 *   domain NAME
 *   start ID NAME CATEGORY PAYLOAD     (a registered name; PAYLOAD an int64, or -)
 *   end ID
 *
 * IDs count from 1. Any thread may call (a mutex orders the lines).
 */
#include <nvtx3/nvToolsExt.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t inject_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *inject_out;
static uint64_t inject_next_id = 1;

/* A domain or a registered string is its own name, copied (never freed:
 * NVTX has no call that gives a registered string back). */
static const char *inject_name(const void *handle) { return handle ? (const char *)handle : "(none)"; }

static void inject_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void inject_line(const char *fmt, ...)
{
    if (!inject_out)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(inject_out, fmt, ap);
    va_end(ap);
    fflush(inject_out);
}

static nvtxDomainHandle_t NVTX_API inject_domain_create(const char *name)
{
    pthread_mutex_lock(&inject_lock);
    inject_line("domain %s\n", name);
    pthread_mutex_unlock(&inject_lock);
    return (nvtxDomainHandle_t)strdup(name);
}

static nvtxStringHandle_t NVTX_API inject_register_string(nvtxDomainHandle_t domain, const char *s)
{
    (void)domain;
    return (nvtxStringHandle_t)strdup(s);
}

static nvtxRangeId_t NVTX_API inject_range_start(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a)
{
    (void)domain;
    const char *name = a->messageType == NVTX_MESSAGE_TYPE_REGISTERED ? inject_name(a->message.registered)
                       : a->messageType == NVTX_MESSAGE_TYPE_ASCII    ? a->message.ascii
                                                                      : "(other)";
    pthread_mutex_lock(&inject_lock);
    uint64_t id = inject_next_id++;
    if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64)
        inject_line("start %" PRIu64 " %s %" PRIu32 " %" PRId64 "\n", id, name, a->category, a->payload.llValue);
    else
        inject_line("start %" PRIu64 " %s %" PRIu32 " -\n", id, name, a->category);
    pthread_mutex_unlock(&inject_lock);
    return id;
}

static void NVTX_API inject_range_end(nvtxDomainHandle_t domain, nvtxRangeId_t id)
{
    (void)domain;
    pthread_mutex_lock(&inject_lock);
    inject_line("end %" PRIu64 "\n", (uint64_t)id);
    pthread_mutex_unlock(&inject_lock);
}

/* The entry point NVTX looks up by name. 1: attached; 0: NVTX goes on
 * with no-ops (no table, no file). */
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    const char *path = getenv("PSB_NVTX_OUT");
    if (!cb || !path || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table ||
        size <= NVTX_CBID_CORE2_DomainCreateA)
        return 0;
    if (!(inject_out = fopen(path, "a")))
        return 0;
    *table[NVTX_CBID_CORE2_DomainRangeStartEx] = (NvtxFunctionPointer)inject_range_start;
    *table[NVTX_CBID_CORE2_DomainRangeEnd] = (NvtxFunctionPointer)inject_range_end;
    *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)inject_register_string;
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)inject_domain_create;
    return 1;
}
