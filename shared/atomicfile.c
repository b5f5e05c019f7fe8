/* atomicfile.c — files written whole or not at all (see atomicfile.h). */
#include "shared/atomicfile.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *afile_errname(int errnum, char *buf, size_t len)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    const char *name = strerrorname_np(errnum);
    if (name)
        return name;
#endif
    snprintf(buf, len, "errno %d", errnum);
    return buf;
}

static void afile_error(const char *path, int errnum, char *err, size_t errlen)
{
    char num[32];
    snprintf(err, errlen, "cannot write %s: %s: %s", path, afile_errname(errnum, num, sizeof num),
             strerror(errnum));
}

/* Write all of buf to fd (a short write is retried: it is how a disk that
 * fills up part way shows first). 0, or an errno. */
static int afile_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO; /* cannot happen on a regular file; never loop on it */
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

int afile_write(const char *path, const void *buf, size_t len, char *err, size_t errlen)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        afile_error(path, ENAMETOOLONG, err, errlen);
        return -1;
    }
    /* A leftover of an earlier process with this pid: ours to replace.
     * O_EXCL then makes sure we write a file we created, never through a
     * link someone put there. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        afile_error(path, errno, err, errlen);
        return -1;
    }
    int e = afile_write_all(fd, buf, len);
    if (e == 0 && fsync(fd) < 0)
        e = errno;
    if (close(fd) < 0 && e == 0)
        e = errno;
    if (e == 0 && rename(tmp, path) < 0)
        e = errno;
    if (e != 0) {
        unlink(tmp);
        afile_error(path, e, err, errlen);
        return -1;
    }
    return 0;
}

int afile_write_memstream(const char *path, FILE *f, char **text, size_t *len, char *err, size_t errlen)
{
    bool ok = !ferror(f);
    if (fclose(f) != 0) /* sets *text and *len: read them after it */
        ok = false;
    int rc = -1;
    if (ok)
        rc = afile_write(path, *text, *len, err, errlen);
    else
        snprintf(err, errlen, "cannot write %s: out of memory", path);
    free(*text);
    *text = NULL;
    return rc;
}

int afile_write_json(const char *path, const json_t *doc, size_t flags, char *err, size_t errlen)
{
    char *s = doc ? json_dumps(doc, flags) : NULL;
    if (!s) {
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    size_t n = strlen(s);
    char *text = realloc(s, n + 2);
    if (!text) {
        free(s);
        snprintf(err, errlen, "cannot write %s: out of memory", path);
        return -1;
    }
    text[n] = '\n';
    text[n + 1] = '\0';
    int rc = afile_write(path, text, n + 1, err, errlen);
    free(text);
    return rc;
}
