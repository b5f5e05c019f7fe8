/* userpath.h — the files a user names on a command line, opened and
 * checked the one safe way for every binary.
 *
 * Reading: a configuration file, a --token-file, a results.json given to
 * `diff` is opened without blocking and refused unless it is a regular
 * file. A FIFO opened the ordinary way blocks its reader until a writer
 * comes (for ever, with no word), and a directory or a device reads as an
 * empty or garbled file whose parse error names neither.
 *
 * Writing: --out, --params-out, --summary-json, diff's --csv are checked
 * before any work starts (a run of minutes must not end with "cannot
 * write"): the directory is made where missing (like mkdir -p), every part
 * of it must be a directory and the last one writable, a file of the
 * output's name must be a regular file (it is replaced whole, by rename:
 * shared/atomicfile.h), and a file must be creatable there (one is made
 * and removed). Errors are one line: the reason, with the path of the part
 * at fault where it is not the path itself; the caller adds the flag.
 */
#ifndef PSBENCH_USERPATH_H
#define PSBENCH_USERPATH_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

/* What a file of this mode is, in words: "a directory", "a FIFO (named
 * pipe)", "a character device", "a block device", "a socket", "a symbolic
 * link", "a regular file". */
const char *userpath_kind(mode_t mode);

/* Open path for reading: a descriptor (close-on-exec, blocking again once
 * open) on a regular file, or -1 with the reason in why ("a FIFO (named
 * pipe), not a regular file", "No such file or directory", ...). */
int userpath_open_read(const char *path, char *why, size_t whylen);

/* The most psbench reads of one file it is given: far above any
 * configuration, sweep.json or results.json it writes, far below what
 * would exhaust a host's memory. */
#define USERPATH_READ_MAX ((size_t)256 << 20)

/* The whole of path (opened by userpath_open_read: a regular file only,
 * never waited on), NUL-ended, into *buf (malloc'd; *len its length).
 * Refused when it holds more than max bytes (checked from its size first,
 * and while reading: a file that grows meanwhile). 0, or -1 with why
 * (*buf NULL). */
int userpath_read(const char *path, size_t max, char **buf, size_t *len, char *why, size_t whylen);

/* userpath_read (USERPATH_READ_MAX) and its bytes parsed as JSON
 * (jansson's load flags) into *doc. 0; -1 when the file cannot be read
 * (why); -2 when it is not JSON (je, and je->text in why). Every JSON
 * document psbench reads from a path the user names, or from a folder
 * the user names (a sweep's sweep.json, a point's results.json), is read
 * through this one. */
int userpath_load_json(const char *path, size_t flags, json_t **doc, json_error_t *je, char *why, size_t whylen);

/* Make directory dir and its missing parents (mode 0755 less the umask);
 * 0 when it is a directory this process can write files in, else -1 with
 * why ("results/x is a regular file, not a directory", "cannot create
 * out: Permission denied", "out: Read-only file system"). */
int userpath_make_dir(const char *dir, char *why, size_t whylen);

/* Check that path can be written as a whole new file now: its directory
 * made (userpath_make_dir), path absent or a regular file, a file
 * creatable beside it (PATH.tmp.PID made and removed: what atomicfile
 * writes first). 0, or -1 with why. */
int userpath_check_out_file(const char *path, char *why, size_t whylen);

#endif
