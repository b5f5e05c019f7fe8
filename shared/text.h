/* text.h — peer-supplied strings made safe to print.
 *
 * A node's host name, a failure's reason, an error message a server sends,
 * a metric name, an environment string: any of them reaches a log line or a
 * table, and none of them may forge a line (a newline followed by
 * "psbench-master: phase done") or drive the terminal (ESC sequences,
 * C1 controls, bidirectional overrides). Every such string is printed
 * through text_escape, the one helper for it: what is printable passes
 * unchanged, the rest is spelt out as C-like escapes, so that a reader still
 * sees what the peer sent.
 */
#ifndef PSBENCH_TEXT_H
#define PSBENCH_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Copy the n bytes at s into out (outlen bytes, always NUL-terminated when
 * outlen > 0), escaping: backslash as \\, newline, carriage return and tab
 * as \n, \r, \t, other C0 controls, DEL and bytes that are not UTF-8 as
 * \xHH, and the code points a terminal acts on — C1 controls
 * (U+0080..U+009F) and the bidirectional overrides and isolates
 * (U+202A..U+202E, U+2066..U+2069) — as \uHHHH. Valid UTF-8 otherwise
 * passes unchanged. An escape is never cut: when out is too small the copy
 * stops before the first character that does not fit. Returns the length
 * written. */
size_t text_escape_n(const char *s, size_t n, char *out, size_t outlen);
/* text_escape_n of a NUL-terminated string (NULL: ""). */
size_t text_escape(const char *s, char *out, size_t outlen);
/* Whether s (n bytes) needs no escape: text_escape_n would copy it as is. */
bool text_is_printable(const char *s, size_t n);

/* ---- values echoed in messages ------------------------------------------
 *
 * A refusal names the value it refuses, and a value can be anything the
 * user or a peer gave: a million-character sweep-file string, a path, a
 * frame's field. Every message that echoes a value shows it through
 * text_show: escaped as text_escape does (it cannot forge a line), and,
 * when longer than TEXT_SHOW_MAX characters (UTF-8 code points; a byte
 * that is not UTF-8 counts as one), cut there with an ellipsis and its
 * length said, so that the line stays one readable line:
 *     '--lr'                                   (short: as it is, quoted)
 *     "hhhhhhhh…" (1000000 characters)         (long: cut, its length)
 */
#define TEXT_SHOW_MAX 80
/* Room for any text_show result: TEXT_SHOW_MAX characters escaped (6 bytes
 * each at most), the quotes, the ellipsis and the length. */
#define TEXT_SHOW_LEN (TEXT_SHOW_MAX * 6 + 64)
typedef struct text_shown {
    char s[TEXT_SHOW_LEN];
} text_shown;
/* The n bytes at s as a message shows them, between two `quote`
 * characters (0: none), into b; returns b->s. */
const char *text_show_n(const char *s, size_t n, char quote, text_shown *b);
/* text_show_n of a NUL-terminated string (NULL: ""). */
const char *text_show(const char *s, char quote, text_shown *b);

/* Bytes as hex, for the binary values protocols carry as text (CUDA IPC
 * handles in a frame header, the rendezvous store's values in JSON).
 * text_hex: the n bytes at b as 2n lowercase digits and a NUL into out
 * (2n + 1 bytes). text_unhex: n bytes into out from the 2n digits at s
 * (either case); 0, or -1 at a character that is not a hex digit. */
void text_hex(const uint8_t *b, size_t n, char *out);
int text_unhex(const char *s, size_t n, uint8_t *out);

/* s as one CSV field on f (RFC 4180): as it is, or quoted, its quotes
 * doubled, where it holds a comma, a quote or a line break. */
void text_csv_field(FILE *f, const char *s);

#endif
