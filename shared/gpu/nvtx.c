/* nvtx.c — the trace's spans as NVTX ranges (see nvtx.h). */
#include "shared/gpu/nvtx.h"

#include <pthread.h>

atomic_bool trace_nvtx_enabled = false;

#if defined(PSBENCH_HAVE_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>

/* The domain and the span names, registered once (NVTX compares
 * registered strings by handle: cheaper per range than a copy). */
static nvtxDomainHandle_t nvtx_domain;
static nvtxStringHandle_t nvtx_names[TRACE_NSPANS];
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;

static void nvtx_init(void)
{
    nvtx_domain = nvtxDomainCreateA("psbench");
    for (int s = 0; s < TRACE_NSPANS; s++)
        nvtx_names[s] = nvtxDomainRegisterStringA(nvtx_domain, trace_span_name((trace_span)s));
}

bool trace_nvtx_available(void) { return true; }

void trace_nvtx_enable(bool on)
{
    if (on)
        pthread_once(&nvtx_once, nvtx_init);
    atomic_store_explicit(&trace_nvtx_enabled, on, memory_order_relaxed);
}

trace_nvtx_id trace_nvtx_start_slow(trace_span s, trace_ids ids)
{
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtx_names[s];
    a.category = (uint32_t)s + 1; /* 0 is NVTX's "none" */
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = ids.batch;
    nvtxRangeId_t id = nvtxDomainRangeStartEx(nvtx_domain, &a);
    /* NVTX gives 0 without a tool: no range to end. */
    return (trace_nvtx_id)id;
}

void trace_nvtx_end_slow(trace_nvtx_id id) { nvtxDomainRangeEnd(nvtx_domain, (nvtxRangeId_t)id); }

#else /* built without CUDA: no NVTX */

bool trace_nvtx_available(void) { return false; }

void trace_nvtx_enable(bool on) { (void)on; /* nothing to range: trace_nvtx_start stays a test */ }

trace_nvtx_id trace_nvtx_start_slow(trace_span s, trace_ids ids)
{
    (void)s;
    (void)ids;
    return 0;
}

void trace_nvtx_end_slow(trace_nvtx_id id) { (void)id; }

#endif
