/* atomicfile.h — files written whole or not at all.
 *
 * results.json, the CSVs, a trainer's --params-out and --summary-json are
 * read by scripts after a run: a full disk, a quota or a crash part way
 * through must never leave a truncated file that looks like a result.
 * afile_write writes the bytes to a temporary file in the same directory
 * (PATH.tmp.PID, created exclusively, mode 0666 less the umask like any
 * new file), checks every write, fsyncs and closes it, and only then
 * renames it over PATH. On any error the temporary file is removed and PATH
 * is what it was before: the complete old file, or none. Errors name the
 * path and the errno by name and text ("cannot write out/results.json:
 * ENOSPC: No space left on device").
 */
#ifndef PSBENCH_ATOMICFILE_H
#define PSBENCH_ATOMICFILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* PATH := the len bytes at buf. 0, or -1 with err. */
int afile_write(const char *path, const void *buf, size_t len, char *err, size_t errlen);
/* PATH := doc dumped with jansson's flags, then a newline. 0, or -1 with err. */
int afile_write_json(const char *path, const json_t *doc, size_t flags, char *err, size_t errlen);
/* PATH := what was written to f, a stream made by open_memstream(text,
 * len) — a file built in memory and written whole. f is closed and *text
 * freed (and set to NULL) on every path; a stream that failed is "cannot
 * write PATH: out of memory". 0, or -1 with err. */
int afile_write_memstream(const char *path, FILE *f, char **text, size_t *len, char *err, size_t errlen);
/* An errno's symbolic name ("ENOSPC"), or "errno N" (buf) where the C
 * library has none. */
const char *afile_errname(int errnum, char *buf, size_t len);

#endif
