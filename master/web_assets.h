/* web_assets.h — the dashboard's files (web/), compiled into the master.
 *
 * The table is generated at build time by cmake/embed_web.cmake from every
 * file under web/; the HTTP server looks paths up here and nowhere else, so
 * no request ever reaches the file system.
 */
#ifndef PSBENCH_WEB_ASSETS_H
#define PSBENCH_WEB_ASSETS_H

#include <stddef.h>

typedef struct web_asset {
    const char *path;         /* "/index.html", "/vendor/uplot/uPlot.iife.min.js", ... */
    const char *content_type;
    const unsigned char *data;
    size_t len;
} web_asset;

extern const web_asset web_assets[];
extern const size_t web_assets_count;

/* Exact match; "/" is "/index.html". NULL when there is no such file. */
const web_asset *web_asset_find(const char *path);

#endif
