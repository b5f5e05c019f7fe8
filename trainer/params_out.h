/* params_out.h — --params-out: a trainer's final parameters as a file of
 * raw little-endian float32 in parameter order (what params_hash.h
 * digests), for comparisons across runs and with references. */
#ifndef PSBENCH_PARAMS_OUT_H
#define PSBENCH_PARAMS_OUT_H

#include <stddef.h>
#include <stdint.h>

/* 0, or -1 with err. */
int params_write(const char *path, const float *v, uint64_t n, char *err, size_t errlen);

#endif
