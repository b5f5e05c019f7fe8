/* userpath.c — the files a user names, opened and checked one way (see
 * userpath.h). */
#include "shared/userpath.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* Longest path handled (Linux's PATH_MAX). */
#define USERPATH_MAX 4096

const char *userpath_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

static void userpath_not_regular(mode_t mode, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s, not a regular file", userpath_kind(mode));
}

int userpath_open_read(const char *path, char *why, size_t whylen)
{
    /* stat first: a device is refused without being opened at all (an
     * open alone can have effects on some); fstat after the open is what
     * counts, should the name change in between. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        userpath_not_regular(st.st_mode, why, whylen);
        return -1;
    }
    /* O_NONBLOCK: should a FIFO take the name after all, the open returns
     * at once instead of waiting for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        userpath_not_regular(st.st_mode, why, whylen);
        close(fd);
        return -1;
    }
    /* A regular file never blocks; readers expect a plain descriptor. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* "larger than 256 MiB (the most psbench reads)". */
static void userpath_too_large(size_t max, char *why, size_t whylen)
{
    if (max % ((size_t)1 << 20) == 0)
        snprintf(why, whylen, "larger than %zu MiB (the most psbench reads of a file)", max >> 20);
    else
        snprintf(why, whylen, "larger than %zu bytes (the most psbench reads of a file)", max);
}

int userpath_read(const char *path, size_t max, char **buf, size_t *len, char *why, size_t whylen)
{
    *buf = NULL;
    *len = 0;
    int fd = userpath_open_read(path, why, whylen);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > max) {
        userpath_too_large(max, why, whylen);
        close(fd);
        return -1;
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, used = 0;
    char *b = malloc(cap + 1);
    if (!b) {
        snprintf(why, whylen, "%s", strerror(ENOMEM));
        close(fd);
        return -1;
    }
    for (;;) {
        if (used == cap) {
            /* Grown since its fstat (or a /proc-like size of 0): read on, to max + 1 at most. */
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = ncap > cap ? realloc(b, ncap + 1) : NULL;
            if (!nb) {
                if (ncap > cap)
                    snprintf(why, whylen, "%s", strerror(ENOMEM));
                else
                    userpath_too_large(max, why, whylen);
                free(b);
                close(fd);
                return -1;
            }
            b = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, b + used, cap - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, whylen, "%s", strerror(errno));
            free(b);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        used += (size_t)r;
        if (used > max) {
            userpath_too_large(max, why, whylen);
            free(b);
            close(fd);
            return -1;
        }
    }
    close(fd);
    b[used] = '\0';
    *buf = b;
    *len = used;
    return 0;
}

/* The first number of the JSON text buf (len bytes) that a double cannot
 * hold: jansson reads 1e-400 as 0 without a word (and an lr of 0, a
 * momentum of 0, is another setting than the one written). 0, or -1 with
 * je (line, column, text) set as jansson's own errors are. */
static int userpath_json_numbers(const char *buf, size_t len, json_error_t *je)
{
    bool in_string = false;
    int line = 1, col = 0;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        col++;
        if (c == '\n') {
            line++;
            col = 0;
            continue;
        }
        if (in_string) {
            if (c == '\\')
                i++, col++; /* an escaped character: never the string's end */
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            continue;
        }
        if (!(c == '-' || (c >= '0' && c <= '9')))
            continue;
        /* A number token: its characters, at most 64 of them checked (a
         * longer one is refused by jansson or is exact enough). */
        size_t n = strspn(buf + i, "0123456789+-.eE");
        char num[72];
        snprintf(num, sizeof num, "%.*s", (int)(n < 64 ? n : 64), buf + i);
        errno = 0;
        double v = strtod(num, NULL);
        if (errno == ERANGE && fabs(v) < 1) {
            je->line = line;
            je->column = col;
            je->position = (int)i;
            snprintf(je->text, sizeof je->text, "%s is too small for a number (it would be read as 0)", num);
            return -1;
        }
        i += n - 1;
        col += (int)n - 1;
    }
    return 0;
}

int userpath_load_json(const char *path, size_t flags, json_t **doc, json_error_t *je, char *why, size_t whylen)
{
    char *buf;
    size_t len;
    *doc = NULL;
    memset(je, 0, sizeof *je);
    if (userpath_read(path, USERPATH_READ_MAX, &buf, &len, why, whylen) < 0)
        return -1;
    *doc = userpath_json_numbers(buf, len, je) < 0 ? NULL : json_loadb(buf, len, flags, je);
    free(buf);
    if (!*doc) {
        snprintf(why, whylen, "%s", je->text);
        return -2;
    }
    return 0;
}

/* One part of a directory path: made, or there already as a directory. */
static int userpath_make_one(const char *part, char *why, size_t whylen)
{
    if (mkdir(part, 0755) == 0)
        return 0;
    int e = errno;
    struct stat st;
    if (stat(part, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        snprintf(why, whylen, "%s is %s, not a directory", part, userpath_kind(st.st_mode));
        return -1;
    }
    snprintf(why, whylen, "cannot create %s: %s", part, strerror(e));
    return -1;
}

int userpath_make_dir(const char *dir, char *why, size_t whylen)
{
    char path[USERPATH_MAX];
    if (!dir || !*dir) {
        snprintf(why, whylen, "needs a directory name");
        return -1;
    }
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(why, whylen, "%s", strerror(ENAMETOOLONG));
        return -1;
    }
    /* Like mkdir -p: every part in turn, from the first. */
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        if (p[-1] != '/') { /* "a//b", "a/": no empty part */
            *p = '\0';
            if (userpath_make_one(path, why, whylen) < 0)
                return -1;
        }
        if (end)
            break;
        *p = '/';
    }
    if (access(dir, W_OK | X_OK) < 0) {
        snprintf(why, whylen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int userpath_check_out_file(const char *path, char *why, size_t whylen)
{
    char dir[USERPATH_MAX];
    size_t n = path ? strlen(path) : 0;
    if (n == 0) {
        snprintf(why, whylen, "needs a file name");
        return -1;
    }
    if (n + 32 >= sizeof dir) { /* room for the probe's ".tmp.PID" */
        snprintf(why, whylen, "%s", strerror(ENAMETOOLONG));
        return -1;
    }
    if (path[n - 1] == '/') {
        snprintf(why, whylen, "%s names a directory: give a file name", path);
        return -1;
    }
    /* The directory: everything before the last '/', or "." */
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (userpath_make_dir(dir, why, whylen) < 0)
        return -1;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "%s is %s, not a regular file", path, userpath_kind(st.st_mode));
        return -1;
    }
    /* What afile_write does first, done now: a read-only file system, a
     * quota on files or a directory that refuses new names shows here. */
    char tmp[USERPATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(why, whylen, "cannot create a file in %s: %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(tmp);
    return 0;
}
