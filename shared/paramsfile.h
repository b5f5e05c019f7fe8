/* paramsfile.h — a run's final parameters as a file beside its
 * results.json (issue 43: what compression costs, shown by
 * `psbench-master diff`), and the figures drawn from them.
 *
 * The file (docs/results.md, "The final parameters"), every integer
 * little-endian:
 *
 *   offset  bytes  what
 *        0      8  "PSBPARAM" (no NUL)
 *        8      4  u32 version: 1
 *       12      4  u32 bytes per element: 4 (float32)
 *       16      8  u64 count: the parameters
 *       24     32  SHA-256 of the data (the trainer's final_params_sha256)
 *       56  4 * count  the parameters, float32, in the order --params-out
 *                  writes them
 *
 * A reader checks all of it: the magic, the version, the element size,
 * that the file is exactly 56 + 4 * count bytes, and the digest.
 */
#ifndef PSBENCH_PARAMSFILE_H
#define PSBENCH_PARAMSFILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define PARAMSFILE_MAGIC "PSBPARAM"
#define PARAMSFILE_VERSION 1u
#define PARAMSFILE_HEADER 56u
/* The most parameters a run records (64 MiB of float32): a bigger model's
 * results.json holds their norm and digest, and says why there is no file. */
#define PARAMSFILE_MAX_FLOATS ((uint64_t)16 << 20)

/* SHA-256 of n floats as little-endian float32 (the trainers' digest),
 * 64 lowercase hex digits and a NUL. 0, or -1 (libcrypto failed; hex ""). */
int paramsfile_sha256(const float *v, uint64_t n, char hex[65]);

/* path written whole (shared/atomicfile.h) with n floats; hex their
 * digest (paramsfile_sha256's). 0, or -1 with err. */
int paramsfile_write(const char *path, const float *v, uint64_t n, const char hex[65], char *err, size_t errlen);

/* path read and checked (a regular file: shared/userpath.h), at most max
 * floats: *v (malloc'd), *n, hex the digest it holds. 0, or -1 with err
 * saying what is wrong ("not a parameters file", "cut short: 100 bytes
 * for 4 parameters", "its digest does not match its parameters"). */
int paramsfile_read(const char *path, uint64_t max, float **v, uint64_t *n, char hex[65], char *err, size_t errlen);

/* The parameters a results.json's final_params names (docs/results.md):
 * its file, a plain name in dir (the results.json's folder), read and
 * checked against final_params' sha256. 0 with *v (malloc'd) and *n; -1
 * with why where there are none to compare: no final_params, no file (its
 * `why`), a name that is not one, a file that cannot be read or holds
 * other parameters. what names the results in why ("A.json"). */
int paramsfile_of_results(const char *dir, const char *what, const json_t *final_params, float **v, uint64_t *n,
                          char *why, size_t whylen);

/* ||v||, summed in double. */
double paramsfile_l2_norm(const float *v, uint64_t n);

/* ||b - a|| / ||a||, in double: 0 where they are equal (a zero too), +inf
 * where a is all zero and b is not. */
double paramsfile_rel_distance(const float *a, const float *b, uint64_t n);

#endif
