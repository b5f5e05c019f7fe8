/* test_text.c — escaping peer strings for logs and tables (shared/text.c):
 * what a terminal would act on is spelt out, printable UTF-8 passes, and
 * an escape is never cut. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shared/text.h"

static void check(const char *in, size_t n, const char *want)
{
    char out[256];
    size_t len = text_escape_n(in, n, out, sizeof out);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    assert_int_equal(text_is_printable(in, n), strcmp(in, want) == 0 && strlen(want) == n);
}

/* A literal with its length (it may hold a NUL). */
#define CHECK(lit, want) check(lit, sizeof lit - 1, want)

static void test_escapes(void **state)
{
    (void)state;
    CHECK("vm", "vm");
    CHECK("vm\npsbench-master: phase done\x1b[31m", "vm\\npsbench-master: phase done\\x1b[31m");
    CHECK("a\rb\tc\\d", "a\\rb\\tc\\\\d");
    CHECK("\x7f\x01", "\\x7f\\x01");
    CHECK("nul\0x", "nul\\x00x");
    /* UTF-8 passes; C1 controls and bidirectional overrides do not. */
    CHECK("caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac");
    CHECK("\xc2\x9b" "31m", "\\u009b31m");
    CHECK("x\xe2\x80\xaey", "x\\u202ey");
    CHECK("\xe2\x81\xa6", "\\u2066");
    /* Not UTF-8: a stray continuation byte, an overlong form, a surrogate,
     * a sequence cut short. */
    CHECK("\x80", "\\x80");
    CHECK("\xc0\xaf", "\\xc0\\xaf");
    CHECK("\xed\xa0\x80", "\\xed\\xa0\\x80");
    CHECK("\xe2\x82", "\\xe2\\x82");
}

static void test_never_cut(void **state)
{
    (void)state;
    char out[6];
    /* "ab" fits, "\n" (2) would leave no room for the NUL after "ab\n". */
    assert_int_equal(text_escape("ab\ncd", out, 5), 4);
    assert_string_equal(out, "ab\\n");
    assert_int_equal(text_escape("ab\ncd", out, 4), 2);
    assert_string_equal(out, "ab");
    assert_int_equal(text_escape("\xe2\x82\xac\xe2\x82\xac", out, sizeof out), 3);
    assert_string_equal(out, "\xe2\x82\xac");
    assert_int_equal(text_escape(NULL, out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(text_escape("x", out, 1), 0);
    assert_string_equal(out, "");
}

/* Hex both ways: every byte value round-trips, lowercase out, either
 * case in, anything else refused. */
static void test_hex(void **state)
{
    (void)state;
    uint8_t b[256], back[256];
    char s[513];
    for (int i = 0; i < 256; i++)
        b[i] = (uint8_t)i;
    text_hex(b, sizeof b, s);
    assert_int_equal(strlen(s), 512);
    assert_memory_equal(s, "000102", 6);
    assert_string_equal(s + 506, "fdfeff");
    assert_int_equal(text_unhex(s, sizeof back, back), 0);
    assert_memory_equal(back, b, sizeof b);
    assert_int_equal(text_unhex("ABcd", 2, back), 0);
    assert_int_equal(back[0], 0xab);
    assert_int_equal(back[1], 0xcd);
    assert_int_equal(text_unhex("0g", 1, back), -1);
    assert_int_equal(text_unhex("1 ", 1, back), -1);
}

/* A CSV field: as it is, or quoted with its quotes doubled (RFC 4180). */
static void csv_check(const char *in, const char *want)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    text_csv_field(f, in);
    fclose(f);
    assert_string_equal(buf, want);
    free(buf);
}

static void test_csv_field(void **state)
{
    (void)state;
    csv_check("", "");
    csv_check("rpc_hook", "rpc_hook");
    csv_check("a b=1", "a b=1");
    csv_check("a,b", "\"a,b\"");
    csv_check("say \"hi\"", "\"say \"\"hi\"\"\"");
    csv_check("two\nlines", "\"two\nlines\"");
    csv_check("cr\r", "\"cr\r\"");
}

/* text_show (issue 39): a short value as it is, quoted; a long one cut at
 * TEXT_SHOW_MAX characters with its length; escapes and UTF-8 never cut;
 * the result always one short line. */
static void test_show(void **state)
{
    (void)state;
    text_shown b;
    assert_string_equal(text_show("--lr", '\'', &b), "'--lr'");
    assert_string_equal(text_show("rpc_hook", 0, &b), "rpc_hook");
    assert_string_equal(text_show(NULL, '"', &b), "\"\"");
    assert_string_equal(text_show("a\nb", '\'', &b), "'a\\nb'");
    /* Exactly TEXT_SHOW_MAX characters: whole. */
    char exact[TEXT_SHOW_MAX + 1];
    memset(exact, 'x', TEXT_SHOW_MAX);
    exact[TEXT_SHOW_MAX] = '\0';
    assert_string_equal(text_show(exact, 0, &b), exact);
    /* A million: the first TEXT_SHOW_MAX, an ellipsis, the length. */
    size_t big = 1000000;
    char *h = malloc(big + 1);
    assert_non_null(h);
    memset(h, 'h', big);
    h[big] = '\0';
    char want[256];
    snprintf(want, sizeof want, "\"%.*s\xe2\x80\xa6\" (1000000 characters)", TEXT_SHOW_MAX, h);
    assert_string_equal(text_show(h, '"', &b), want);
    /* Characters, not bytes: 100 two-byte letters are cut after 80 of
     * them, a multi-byte letter never in half. */
    char e[201];
    for (int i = 0; i < 100; i++)
        memcpy(e + 2 * i, "\xc3\xa9", 2);
    e[200] = '\0';
    text_show(e, 0, &b);
    assert_int_equal(strlen(b.s), 2 * TEXT_SHOW_MAX + 3 + strlen(" (100 characters)"));
    assert_non_null(strstr(b.s, "\xe2\x80\xa6 (100 characters)"));
    /* Control bytes: each escaped, the line cut after 80 of them, never
     * past the buffer. */
    memset(h, '\x1b', big);
    text_show(h, '\'', &b);
    assert_null(strchr(b.s, '\x1b'));
    assert_true(strlen(b.s) < sizeof b.s);
    assert_non_null(strstr(b.s, "' (1000000 characters)"));
    assert_int_equal(strncmp(b.s, "'\\x1b", 5), 0);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_never_cut),
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_csv_field),
        cmocka_unit_test(test_show),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
