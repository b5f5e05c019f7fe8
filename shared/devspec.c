/* devspec.c — --device's spellings and their kinds (see devspec.h). */
#include "shared/devspec.h"
#include "shared/text.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names without an index, by kind. */
static const char *const devspec_names[] = {
    [DEVICE_CPU] = "cpu",
    [DEVICE_CUDA] = "cuda",
    [DEVICE_FAKE_CUDA] = "fake-cuda",
    [DEVICE_STAGED] = "staged",
    [DEVICE_TEST] = "test",
};

#define DEVSPEC_MAX_INDEX 255

/* N of "cuda:N": a whole decimal number in 0..DEVSPEC_MAX_INDEX, read as
 * cli_parse_u64 reads one (digits only: no sign, no blanks, no hex). */
static bool devspec_index(const char *s, int *out)
{
    if (!(*s >= '0' && *s <= '9'))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > DEVSPEC_MAX_INDEX)
        return false;
    *out = (int)v;
    return true;
}

int devspec_parse(const char *opt, const char *s, unsigned kinds, device_spec *out, char *err, size_t errlen)
{
    device_spec d = {.kind = DEVICE_CPU, .index = -1};
    bool known = false;
    for (size_t k = 0; k < sizeof devspec_names / sizeof devspec_names[0]; k++) {
        if (strcmp(s, devspec_names[k]) == 0) {
            d.kind = (device_kind)k;
            known = true;
        }
    }
    if (!known && strncmp(s, "cuda:", 5) == 0 && devspec_index(s + 5, &d.index)) {
        d.kind = DEVICE_CUDA;
        known = true;
    }
    if (!known || !(kinds & DEVSPEC_KIND(d.kind))) {
        text_shown shown;
        snprintf(err, errlen, "%s %s is not cpu, cuda or cuda:N (N: a GPU's index, 0..%d)", opt,
                 text_show(s, '\'', &shown), DEVSPEC_MAX_INDEX);
        return -1;
    }
    *out = d;
    return 0;
}

const char *devspec_name(device_spec d, char buf[DEVSPEC_NAME_MAX])
{
    assert((size_t)d.kind < sizeof devspec_names / sizeof devspec_names[0]);
    if (d.kind == DEVICE_CUDA && d.index >= 0)
        snprintf(buf, DEVSPEC_NAME_MAX, "cuda:%d", d.index);
    else
        snprintf(buf, DEVSPEC_NAME_MAX, "%s", devspec_names[d.kind]);
    return buf;
}
