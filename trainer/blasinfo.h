/* blasinfo.h — the BLAS a trainer computes with: library, version, the
 * kernels (the "core") it chose for this CPU, its thread count; and the
 * warning when it chose generic kernels on a CPU that has better.
 *
 * OpenBLAS picks its kernels at start from the CPU's identity; on a virtual
 * CPU that names itself only "Intel(R) Xeon(R) Processor" it may fall back
 * to a pre-AVX2 core (Prescott), and DummyModel's step then took 125 ms
 * where the same host type with Cooperlake kernels took 75 ms. Nothing else
 * would say so: the trainer reports it in its start line, in its register
 * (results.json, /api/v1/nodes) and warns once, naming OPENBLAS_CORETYPE. */
#ifndef PSBENCH_BLASINFO_H
#define PSBENCH_BLASINFO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* {"library": "OpenBLAS", "version": "0.3.21", "core": "Cooperlake",
 * "threads": 1, "config": openblas_get_config()'s whole line}: a new
 * object (the trainer adds "warning": blasinfo_generic_warning's text when
 * there is one). */
json_t *blasinfo_json(void);

/* One line for the start line: "OpenBLAS 0.3.21, Cooperlake kernels, 1
 * thread". */
void blasinfo_describe(char *buf, size_t len);

/* When `core` (OpenBLAS's name of the kernels it chose) has no AVX2
 * kernels and the CPU has AVX2: the warning naming OPENBLAS_CORETYPE and
 * the core to set, into buf; returns 1. Else 0 (buf untouched).
 * `coretype`: $OPENBLAS_CORETYPE (NULL when unset: then OpenBLAS did not
 * recognise the CPU). The CPU's extensions are given as a predicate so
 * that tests can pose any CPU. */
int blasinfo_generic_warning(const char *core, const char *coretype, bool (*cpu_has)(const char *ext), char *buf,
                             size_t len);

/* blasinfo_generic_warning for this process: OpenBLAS's core, the
 * environment's OPENBLAS_CORETYPE and this CPU. */
int blasinfo_warning(char *buf, size_t len);

#endif
