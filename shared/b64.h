/* b64.h — base64 (RFC 4648, the standard alphabet, '=' padding) for the
 * one binary thing the control plane carries in its JSON bodies: a
 * trainer's final parameters (docs/protocol.md, `params`). */
#ifndef PSBENCH_B64_H
#define PSBENCH_B64_H

#include <stddef.h>
#include <stdint.h>

/* The characters b64_encode writes for n bytes (without the NUL). */
static inline size_t b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

/* n bytes of in as base64 into out (b64_encoded_len(n) + 1 bytes: NUL-ended). */
void b64_encode(const uint8_t *in, size_t n, char *out);

/* The len characters of in decoded into out (room for len / 4 * 3 bytes);
 * *n the bytes written. 0, or -1 when in is not base64: a length that is
 * not a multiple of 4, a character outside the alphabet, padding anywhere
 * but at the end, or padding bits that are not zero (one text per bytes). */
int b64_decode(const char *in, size_t len, uint8_t *out, size_t *n);

#endif
