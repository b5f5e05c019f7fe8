/* params_hash.h — a fingerprint of a model's parameters, to check that
 * trainers that should hold the same model do (after initialization, after
 * every synchronized step, at the end of a run).
 *
 * SHA-256 (OpenSSL libcrypto) of all parameters as little-endian float32,
 * in parameter order (model.h), with nothing in between: the same digest as
 * Python's hashlib.sha256(b"".join(t.detach().numpy().astype("<f4").tobytes()
 * for t in model.parameters())).
 */
#ifndef PSBENCH_PARAMS_HASH_H
#define PSBENCH_PARAMS_HASH_H

#include "trainer/model.h"

/* Write the digest as 64 lowercase hex digits and a NUL to hex. Returns 0,
 * or -1 if libcrypto fails or memory runs out (hex is then the empty
 * string). Parameters without a host view are read back first. */
int params_sha256(const dummy_model *m, char hex[65]);
/* The same digest of n floats. */
int params_sha256_floats(const float *v, uint64_t n, char hex[65]);

#endif
