/* devspec_of.h — a unit test's device as --device spells it ("cpu",
 * "fake-cuda", "staged", ...), any kind (shared/devspec.h): the tests name
 * the device they run on, the factories take it parsed. */
#ifndef PSBENCH_TESTS_DEVSPEC_OF_H
#define PSBENCH_TESTS_DEVSPEC_OF_H

#include <stdio.h>
#include <stdlib.h>

#include "shared/devspec.h"

/* A name no device has is the test's own mistake: it stops there. */
static inline device_spec devspec_of(const char *s)
{
    device_spec d;
    char err[256];
    if (devspec_parse("device", s, DEVSPEC_ALL, &d, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return d;
}

#endif
