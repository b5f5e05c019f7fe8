/* coll_nccl_none.c — coll.h's NCCL entry points in builds without NCCL
 * (CMake found no CUDA toolkit or no NCCL): coll_nccl.c's stand-in. */
#include "trainer/coll_impl.h"

#include "shared/log.h"

coll *coll_nccl_new(uint32_t rank, uint32_t size, int cuda_device, const coll_store *store, const char *prefix,
                    double timeout_s, char *err, size_t errlen)
{
    errbuf_set(err, errlen, "this build has no NCCL (CUDA toolkit and NCCL were not found at build time)");
    return NULL;
}

bool coll_have_nccl(void) { return false; }
