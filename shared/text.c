/* text.c — escaping peer-supplied strings for logs and tables (see text.h). */
#include "shared/text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at s (at most n bytes) and its
 * code point; 0 when the bytes are not one (overlong forms, surrogates and
 * code points above U+10FFFF included). */
static size_t text_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* Code points a terminal acts on rather than shows. */
static int text_cp_active(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* The escape of the character at s (its byte length in *used) into esc;
 * returns the escape's length, or 0 when the character passes as is. */
static size_t text_escape_one(const unsigned char *s, size_t n, size_t *used, char esc[8])
{
    uint32_t cp;
    size_t len = text_utf8(s, n, &cp);
    if (len == 0) {
        *used = 1;
        snprintf(esc, 8, "\\x%02x", s[0]);
        return 4;
    }
    *used = len;
    switch (cp) {
    case '\\': memcpy(esc, "\\\\", 3); return 2;
    case '\n': memcpy(esc, "\\n", 3); return 2;
    case '\r': memcpy(esc, "\\r", 3); return 2;
    case '\t': memcpy(esc, "\\t", 3); return 2;
    default: break;
    }
    if (cp < 0x20 || cp == 0x7f) {
        snprintf(esc, 8, "\\x%02x", (unsigned)cp);
        return 4;
    }
    if (text_cp_active(cp)) {
        snprintf(esc, 8, "\\u%04x", (unsigned)cp);
        return 6;
    }
    return 0;
}

size_t text_escape_n(const char *s, size_t n, char *out, size_t outlen)
{
    if (outlen == 0)
        return 0;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, i = 0;
    while (i < n) {
        char esc[8];
        size_t used;
        size_t el = text_escape_one(p + i, n - i, &used, esc);
        const char *src = el ? esc : s + i;
        size_t sl = el ? el : used;
        if (sl >= outlen - o)
            break; /* never a cut escape or a cut UTF-8 sequence */
        memcpy(out + o, src, sl);
        o += sl;
        i += used;
    }
    out[o] = '\0';
    return o;
}

size_t text_escape(const char *s, char *out, size_t outlen)
{
    return text_escape_n(s ? s : "", s ? strlen(s) : 0, out, outlen);
}

bool text_is_printable(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        char esc[8];
        size_t used;
        if (text_escape_one(p + i, n - i, &used, esc))
            return false;
        i += used;
    }
    return true;
}

/* The byte length of the first `chars` characters of s (n bytes), and the
 * characters s has in all (*total): a valid UTF-8 sequence is one, any
 * other byte one. */
static size_t text_prefix(const char *s, size_t n, size_t chars, size_t *total)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, c = 0, cut = n;
    while (i < n) {
        if (c == chars)
            cut = i;
        uint32_t cp;
        size_t len = text_utf8(p + i, n - i, &cp);
        i += len ? len : 1;
        c++;
    }
    *total = c;
    return c > chars ? cut : n;
}

const char *text_show_n(const char *s, size_t n, char quote, text_shown *b)
{
    size_t total, keep = text_prefix(s, n, TEXT_SHOW_MAX, &total);
    size_t o = 0;
    if (quote)
        b->s[o++] = quote;
    /* Room kept for the closing quote, the ellipsis and the length: the
     * escaped characters take at most TEXT_SHOW_MAX * 6 bytes. */
    o += text_escape_n(s, keep, b->s + o, sizeof b->s - o - 48);
    if (keep < n)
        o += (size_t)snprintf(b->s + o, sizeof b->s - o, "\xe2\x80\xa6");
    if (quote)
        b->s[o++] = quote;
    b->s[o] = '\0';
    if (keep < n)
        snprintf(b->s + o, sizeof b->s - o, " (%zu characters)", total);
    return b->s;
}

const char *text_show(const char *s, char quote, text_shown *b)
{
    return text_show_n(s ? s : "", s ? strlen(s) : 0, quote, b);
}

void text_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int text_hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int text_unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = text_hexval(s[2 * i]), lo = text_hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void text_csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}
