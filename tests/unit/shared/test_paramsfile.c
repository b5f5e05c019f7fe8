/* test_paramsfile.c — unit tests for shared/paramsfile (a run's final
 * parameters beside its results.json, issue 43) and shared/b64 (how they
 * travel in `params` parts): the file round-trips (values, count, digest:
 * the trainers' final_params_sha256 of the same floats), every damaged
 * file is refused with its reason (cut short, bytes beyond, a count that
 * does not match its bytes, a digest that does not match, another magic or
 * version, more than the bound), a results.json's final_params leads to
 * its file or says why not, the norm and the relative distance are exact
 * on known vectors, and base64 round-trips every length and refuses what
 * is not base64. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "shared/b64.h"
#include "shared/paramsfile.h"

static const float some[5] = {1.0f, -2.0f, 0.5f, 3.25f, -0.125f};

/* tmpdir/name written with the floats, their digest into hex. */
static const char *write_some(const char *name, char hex[65])
{
    char err[512];
    assert_int_equal(paramsfile_sha256(some, 5, hex), 0);
    const char *path = tmp_path(name);
    assert_int_equal(paramsfile_write(path, some, 5, hex, err, sizeof err), 0);
    return path;
}

static void test_round_trip(void **state)
{
    (void)state;
    char hex[65], got_hex[65], err[512];
    const char *path = write_some("p.bin", hex);
    /* The digest is the trainers': SHA-256 of the raw little-endian floats. */
    /* (Python: hashlib.sha256(struct.pack("<5f", *some)).hexdigest()) */
    assert_string_equal(hex, "5302f1cc11ca01627cab66e4c369680552b1a245336f8fe77d401da80d822c63");
    size_t len;
    char *bytes = slurp(path, &len);
    assert_non_null(bytes);
    assert_int_equal(len, PARAMSFILE_HEADER + 5 * 4);
    assert_memory_equal(bytes, "PSBPARAM", 8);
    uint32_t version, eb;
    uint64_t count;
    memcpy(&version, bytes + 8, 4);
    memcpy(&eb, bytes + 12, 4);
    memcpy(&count, bytes + 16, 8);
    assert_int_equal(version, 1);
    assert_int_equal(eb, 4);
    assert_int_equal(count, 5);
    assert_memory_equal(bytes + PARAMSFILE_HEADER, some, sizeof some);
    free(bytes);
    float *v;
    uint64_t n;
    assert_int_equal(paramsfile_read(path, PARAMSFILE_MAX_FLOATS, &v, &n, got_hex, err, sizeof err), 0);
    assert_int_equal(n, 5);
    assert_memory_equal(v, some, sizeof some);
    assert_string_equal(got_hex, hex);
    free(v);
}

/* The file at path with its bytes replaced by (bytes, len); read back: the
 * reason, which must hold `want`. */
static void refused(const char *name, const char *bytes, size_t len, uint64_t max, const char *want)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    float *v = (float *)1;
    uint64_t n = 7;
    char hex[65] = "x", err[512] = "";
    assert_int_equal(paramsfile_read(path, max, &v, &n, hex, err, sizeof err), -1);
    assert_null(v);
    assert_int_equal(n, 0);
    assert_contains(err, want);
    assert_contains(err, path);
}

static void test_damaged_files(void **state)
{
    (void)state;
    char hex[65];
    const char *path = write_some("good.bin", hex);
    size_t len;
    char *good = slurp(path, &len);
    assert_non_null(good);
    char *b = malloc(len + 8);
    assert_non_null(b);
    /* Cut short: the last float half there. */
    refused("cut.bin", good, len - 2, PARAMSFILE_MAX_FLOATS, "cut short");
    /* A header cut short. */
    refused("header.bin", good, 20, PARAMSFILE_MAX_FLOATS, "not a parameters file");
    /* Bytes beyond the parameters. */
    memcpy(b, good, len);
    memcpy(b + len, "\0\0\0\0", 4);
    refused("long.bin", b, len + 4, PARAMSFILE_MAX_FLOATS, "bytes beyond them");
    /* A count that is not the file's: 4 said, 5 there. */
    memcpy(b, good, len);
    uint64_t four = 4;
    memcpy(b + 16, &four, 8);
    refused("count.bin", b, len, PARAMSFILE_MAX_FLOATS, "for 4 parameters");
    /* One float changed: the digest no longer matches. */
    memcpy(b, good, len);
    b[PARAMSFILE_HEADER + 4] ^= 1;
    refused("flip.bin", b, len, PARAMSFILE_MAX_FLOATS, "its digest does not match its parameters");
    /* The digest changed. */
    memcpy(b, good, len);
    b[24] ^= 0x80;
    refused("sha.bin", b, len, PARAMSFILE_MAX_FLOATS, "its digest does not match its parameters");
    /* Another magic, another version. */
    memcpy(b, good, len);
    b[0] = 'X';
    refused("magic.bin", b, len, PARAMSFILE_MAX_FLOATS, "not a parameters file");
    memcpy(b, good, len);
    b[8] = 2;
    refused("version.bin", b, len, PARAMSFILE_MAX_FLOATS, "version 2");
    /* More than the reader's bound. */
    refused("big.bin", good, len, 4, "larger than 72 bytes");
    free(b);
    free(good);
}

static void test_of_results(void **state)
{
    (void)state;
    char hex[65], why[1024];
    write_some("params.bin", hex);
    float *v;
    uint64_t n;
    json_t *fp = json_pack("{s:s, s:s}", "file", "params.bin", "sha256", hex);
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", fp, &v, &n, why, sizeof why), 0);
    assert_int_equal(n, 5);
    free(v);
    /* Another digest in results.json than the file's. */
    json_object_set_new(fp, "sha256", json_string("00000000000000000000000000000000000000000000000000000000000000ff"));
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", fp, &v, &n, why, sizeof why), -1);
    assert_null(v);
    assert_contains(why, "holds other parameters than R.json names");
    /* A name that leaves the folder. */
    json_object_set_new(fp, "file", json_string("../params.bin"));
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", fp, &v, &n, why, sizeof why), -1);
    assert_contains(why, "is not a file name beside it");
    /* No file: its why. */
    json_object_set_new(fp, "file", json_null());
    json_object_set_new(fp, "why", json_string("the model has no parameters"));
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", fp, &v, &n, why, sizeof why), -1);
    assert_contains(why, "R.json has no parameters file: the model has no parameters");
    json_decref(fp);
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", NULL, &v, &n, why, sizeof why), -1);
    assert_contains(why, "R.json has no final_params");
    /* A file that is not there. */
    fp = json_pack("{s:s, s:s}", "file", "gone.bin", "sha256", hex);
    assert_int_equal(paramsfile_of_results(tmpdir, "R.json", fp, &v, &n, why, sizeof why), -1);
    assert_contains(why, "gone.bin");
    json_decref(fp);
}

static void test_norm_and_distance(void **state)
{
    (void)state;
    const float a[2] = {3.0f, 4.0f}, b[2] = {3.0f, 4.5f}, z[2] = {0, 0};
    assert_true(paramsfile_l2_norm(a, 2) == 5.0);
    assert_true(paramsfile_rel_distance(a, a, 2) == 0.0);
    assert_true(fabs(paramsfile_rel_distance(a, b, 2) - 0.1) < 1e-15);
    assert_true(paramsfile_rel_distance(z, z, 2) == 0.0);
    assert_true(isinf(paramsfile_rel_distance(z, a, 2)));
}

static void test_b64(void **state)
{
    (void)state;
    /* RFC 4648's vectors. */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char out[16];
        uint8_t back[16];
        size_t n;
        b64_encode((const uint8_t *)plain[i], strlen(plain[i]), out);
        assert_string_equal(out, coded[i]);
        assert_int_equal(strlen(out), b64_encoded_len(strlen(plain[i])));
        assert_int_equal(b64_decode(out, strlen(out), back, &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(back, plain[i], n);
    }
    /* Every byte value, every length up to 64. */
    uint8_t all[256], back[256];
    char text[400];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    for (size_t len = 0; len <= 64; len++) {
        size_t n;
        b64_encode(all + len, len, text);
        assert_int_equal(b64_decode(text, strlen(text), back, &n), 0);
        assert_int_equal(n, len);
        assert_memory_equal(back, all + len, len);
    }
    static const char *const bad[] = {"Zg=", "Z===", "Zg=a", "Zm9v!A==", "Zh==", "Zm9=", "=Zm9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        assert_int_equal(b64_decode(bad[i], strlen(bad[i]), back, &n), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_damaged_files),
        cmocka_unit_test(test_of_results), cmocka_unit_test(test_norm_and_distance),
        cmocka_unit_test(test_b64),
    };
    return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
