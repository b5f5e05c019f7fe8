/* devfixture.c — see devfixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>

#include "devfixture.h"

void devfx_open(dev_fixture *d, device_spec spec, size_t pool_bytes)
{
    memset(d, 0, sizeof *d);
    d->base = event_base_new();
    assert_non_null(d->base);
    bufpool_init(&d->pool, pool_bytes);
    char err[512];
    d->dev = device_new(spec, d->base, &d->pool, err, sizeof err);
    if (!d->dev)
        fail_msg("device: %s", err);
}

void devfx_open_kind(dev_fixture *d, device_spec spec, size_t pool_bytes, const kind_config *kc)
{
    devfx_open(d, spec, pool_bytes);
    d->m = metrics_new();
    assert_non_null(d->m);
    char err[512];
    d->k = kind_new(kc, d->dev, &d->pool, d->m, err, sizeof err);
    if (!d->k)
        fail_msg("kind: %s", err);
}

futures_metrics devfx_futures_metrics(const dev_fixture *d)
{
    return (futures_metrics){.batch = metrics_get(d->m, "batch"),
                             .straggler = metrics_get(d->m, "straggler"),
                             .batch_from_header = metrics_get(d->m, "batch_from_header"),
                             .straggler_from_header = metrics_get(d->m, "straggler_from_header")};
}

void devfx_close(dev_fixture *d)
{
    kind_free(d->k);
    device_destroy(d->dev);
    assert_int_equal(d->pool.live, 0); /* every buffer came back */
    bufpool_destroy(&d->pool);
    if (d->m)
        metrics_free(d->m);
    event_base_free(d->base);
}
