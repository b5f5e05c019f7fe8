/* devfixture.h — the server's device under a unit test, written once
 * (issue 41): an event loop, a buffer pool, a device on it and, for the
 * tests of the kinds, metrics and a kind on that device. The tests' own
 * fixtures hold one as their first member and add what they watch.
 */
#ifndef PSBENCH_TESTS_DEVFIXTURE_H
#define PSBENCH_TESTS_DEVFIXTURE_H

#include <stddef.h>

#include <event2/event.h>

#include "server/bufpool.h"
#include "server/device.h"
#include "server/future.h"
#include "server/kinds.h"
#include "shared/devspec.h"
#include "shared/metrics.h"

typedef struct dev_fixture {
    struct event_base *base;
    bufpool pool;
    device *dev;
    metrics *m; /* with a kind (devfx_open_kind), else NULL */
    kind *k;    /* likewise */
} dev_fixture;

/* d zeroed, then a fresh event base, a pool of pool_bytes and the device
 * spec names on them; the test fails saying why where the device does not
 * start. The tests set the test and fake devices' delays
 * (PSBENCH_TEST_DEVICE_MAX_DELAY_US, PSBENCH_FAKE_GPU_DELAY_US) before. */
void devfx_open(dev_fixture *d, device_spec spec, size_t pool_bytes);

/* devfx_open, then metrics and the kind kc describes on the device. */
void devfx_open_kind(dev_fixture *d, device_spec spec, size_t pool_bytes, const kind_config *kc);

/* The futures layer's metrics, from d's metrics. */
futures_metrics devfx_futures_metrics(const dev_fixture *d);

/* The kind (if any), the device, then the pool, which must have every
 * buffer back, the metrics and the event base. */
void devfx_close(dev_fixture *d);

#endif
