/* devspec.h — what --device names, parsed once: a kind and, for a GPU, its
 * index. Each binary turns its --device string into a device_spec right
 * after its options are parsed; from there on the factories
 * (server/devices.c, trainer/computes.c) and everyone who asks "is this a
 * GPU?" switch on the kind, never on the spelling.
 *
 *   spelling   kind              index  who takes it
 *   cpu        DEVICE_CPU        -1     everyone (the default)
 *   cuda       DEVICE_CUDA       -1     not said: the server's GPU 0, the
 *                                       trainer's by rank (compute_place)
 *   cuda:N     DEVICE_CUDA       N      everyone; N in 0..255
 *   fake-cuda  DEVICE_FAKE_CUDA  -1     tests, every build: the cuda code
 *                                       on the fake GPU (shared/gpu/cugpu.h)
 *   staged     DEVICE_STAGED     -1     tests: the trainer's compute layer
 *                                       only (trainer/compute_staged.c)
 *   test       DEVICE_TEST       -1     tests: the server's test device
 *                                       (server/device_test.c)
 *
 * A zeroed device_spec is the cpu. devspec_name gives a spec back as it is
 * spelled above, for logs and what a binary publishes (the register's
 * "device", results.json): "cuda:N" with N in decimal, so "cuda:07" is
 * published as "cuda:7".
 */
#ifndef PSBENCH_DEVSPEC_H
#define PSBENCH_DEVSPEC_H

#include <stdbool.h>
#include <stddef.h>

typedef enum device_kind {
    DEVICE_CPU = 0,
    DEVICE_CUDA,
    DEVICE_FAKE_CUDA,
    DEVICE_STAGED,
    DEVICE_TEST,
} device_kind;

typedef struct device_spec {
    device_kind kind;
    int index; /* DEVICE_CUDA: the GPU, or -1 (plain "cuda"); every other kind: not used */
} device_spec;

/* Sets of kinds, for devspec_parse: what each place takes. */
#define DEVSPEC_KIND(k) (1u << (k))
#define DEVSPEC_SERVER                                                                                    \
    (DEVSPEC_KIND(DEVICE_CPU) | DEVSPEC_KIND(DEVICE_CUDA) | DEVSPEC_KIND(DEVICE_FAKE_CUDA) |              \
     DEVSPEC_KIND(DEVICE_TEST))
#define DEVSPEC_TRAINER (DEVSPEC_KIND(DEVICE_CPU) | DEVSPEC_KIND(DEVICE_CUDA) | DEVSPEC_KIND(DEVICE_FAKE_CUDA))
/* The trainer's compute layer (compute_new; PSBENCH_TRAINER_COMPUTE). */
#define DEVSPEC_COMPUTE (DEVSPEC_TRAINER | DEVSPEC_KIND(DEVICE_STAGED))
/* Every kind (the tests name the device they want). */
#define DEVSPEC_ALL (DEVSPEC_SERVER | DEVSPEC_COMPUTE)

/* The longest name devspec_name writes, with its NUL ("fake-cuda",
 * "cuda:255"). */
#define DEVSPEC_NAME_MAX 16

/* s as a device of one of `kinds`: 0, or -1 with a one-line reason naming
 * `opt` in err ("--device 'tpu' is not cpu, cuda or cuda:N (N: a GPU's
 * index, 0..255)"; the test devices are not listed, and a name of a kind
 * outside `kinds` is refused as an unknown one). */
int devspec_parse(const char *opt, const char *s, unsigned kinds, device_spec *out, char *err, size_t errlen);

/* d as spelled (see the top), in buf (DEVSPEC_NAME_MAX bytes); returns
 * buf. */
const char *devspec_name(device_spec d, char buf[DEVSPEC_NAME_MAX]);

/* Whether d computes through the cuda code: a GPU, or the fake one. */
static inline bool devspec_on_gpu(device_spec d) { return d.kind == DEVICE_CUDA || d.kind == DEVICE_FAKE_CUDA; }

/* Whether d's memory is host memory (everything but a real GPU: the fake
 * GPU's "device memory" is the host's). */
static inline bool devspec_host_memory(device_spec d) { return d.kind != DEVICE_CUDA; }

/* The GPU index a cuda spec names, -1 for plain "cuda" and every other
 * kind. */
static inline int devspec_cuda_index(device_spec d) { return d.kind == DEVICE_CUDA ? d.index : -1; }

/* The GPU a cuda spec runs on where nothing places it (the server; a
 * check before the rank is known): the one it names, GPU 0 for plain
 * "cuda". d must be a cuda spec. */
static inline int devspec_gpu(device_spec d) { return d.index < 0 ? 0 : d.index; }

#endif
