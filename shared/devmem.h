/* devmem.h — device memory as a type of its own: an address on a GPU is
 * never a host pointer, and the compiler says so.
 *
 * Inside a layer that knows where its memory is — the compute layer's
 * cbuf, the server device's devbuf — the memory kind is a tag beside the
 * pointer. At the boundaries between layers (shared/gpu/cugpu.h's allocations
 * and copies, a hook's bucket, the collectives, CUDA IPC) it is these
 * types instead: a function that takes device memory takes a devmem or a
 * devf32, and handing it a float * or a void * fails to compile (a struct
 * converts to nothing), as does handing a devmem where host memory is
 * expected. tests/unit/devmem_types.c proves it (ctest unit_devmem_types).
 *
 * Each is one pointer in a struct: passed and returned in a register, as
 * the pointer itself (no cost at run time). The address inside is reached
 * (.p) only where it goes to what takes raw device addresses — the CUDA
 * runtime, NCCL, cuBLAS, a kernel's launch — or, on the fake GPU, whose
 * device memory is host memory, where the host loops stand in for them.
 * A raw address becomes one only through devmem_of / devf32_of, where the
 * code knows it is device memory (an allocation's tag, a runtime's answer).
 */
#ifndef PSBENCH_DEVMEM_H
#define PSBENCH_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of device memory. */
typedef struct devmem {
    void *p;
} devmem;

/* float32 elements in device memory. */
typedef struct devf32 {
    float *p;
} devf32;

static inline devmem devmem_of(void *p)
{
    devmem m = {p};
    return m;
}
static inline devf32 devf32_of(float *p)
{
    devf32 a = {p};
    return a;
}
/* No memory (the NULL of each). */
static inline devmem devmem_none(void) { return devmem_of(NULL); }
static inline devf32 devf32_none(void) { return devf32_of(NULL); }
static inline bool devmem_is_none(devmem m) { return m.p == NULL; }
static inline bool devf32_is_none(devf32 a) { return a.p == NULL; }

/* `bytes` on from m; element i on from a. */
static inline devmem devmem_at(devmem m, size_t bytes) { return devmem_of((unsigned char *)m.p + bytes); }
static inline devf32 devf32_at(devf32 a, size_t i) { return devf32_of(a.p + i); }

/* The same memory, as bytes / as floats (m aligned for them). */
static inline devmem devf32_mem(devf32 a) { return devmem_of(a.p); }
static inline devf32 devmem_f32(devmem m) { return devf32_of((float *)m.p); }

/* b's offset in bytes from base (b inside the same allocation, at or
 * after base). */
static inline size_t devmem_offset(devmem base, devmem b)
{
    return (size_t)((const unsigned char *)b.p - (const unsigned char *)base.p);
}

#endif
