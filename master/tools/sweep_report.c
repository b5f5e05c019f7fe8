/* sweep_report.c — a sweep's report.html, one page that needs nothing else.
 *
 * The page is a skeleton around five things inlined from the master's
 * embedded web assets (web_assets.h: every file under web/ is compiled in,
 * so the report is the same whatever folder the binary runs from):
 *
 *   <style>   uPlot's CSS, the dashboard's style.css, the report's report.css
 *   <script>  uPlot (its MIT notice in a comment above it)
 *   <script type="application/json" id="psbench-sweep">  the sweep document
 *   <script>  timeline.js, a traced step's swimlanes (the dashboard's too)
 *   <script>  report.js, which reads the document and draws everything
 *
 * The document is jansson's compact dump with every '<' written \u003c: a
 * string holding "</script>" (a label, an error line) cannot end the
 * element early, and JSON.parse reads the escape back as '<'. The page's
 * Content-Security-Policy allows inline scripts and styles only, so a page
 * that tried to load anything from the network would fail loudly in the
 * browser instead of quietly depending on it.
 */
#include "master/tools/sweep_report.h"

#include "master/web_assets.h"
#include "shared/atomicfile.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REPORT_UPLOT_JS "/vendor/uplot/uPlot.iife.min.js"
#define REPORT_UPLOT_CSS "/vendor/uplot/uPlot.min.css"
#define REPORT_UPLOT_LICENSE "/vendor/uplot/LICENSE"

/* An embedded asset by its web path, or NULL with err naming it (a binary
 * built without web/ is broken, but it says so rather than crash). */
static const web_asset *report_asset(const char *name, const char *path, char *err, size_t len)
{
    const web_asset *a = web_asset_find(name);
    if (!a)
        snprintf(err, len, "cannot write %s: the embedded web asset %s is missing", path, name);
    return a;
}

/* Does the n bytes at s hold `needle` (ASCII, any case)? */
static bool report_contains(const unsigned char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (strncasecmp((const char *)s + i, needle, k) == 0)
            return true;
    return false;
}

/* An asset inlined inside <tag>...</tag>: refused if its text would end
 * the element early (never so for the vendored files; checked because a
 * browser would silently run half a script). */
static int report_inline(FILE *f, const web_asset *a, const char *open, const char *close, const char *path,
                         char *err, size_t len)
{
    assert(close[0] == '<' && close[1] == '/');
    if (report_contains(a->data, a->len, close)) {
        snprintf(err, len, "cannot write %s: %s holds \"%s\" and cannot be inlined", path, a->path, close);
        return -1;
    }
    fputs(open, f);
    fwrite(a->data, 1, a->len, f);
    fprintf(f, "%s\n", close);
    return 0;
}

/* uPlot's licence asks for its notice in every copy: an HTML comment above
 * the inlined library. */
static int report_license(FILE *f, const web_asset *a, const char *path, char *err, size_t len)
{
    if (report_contains(a->data, a->len, "--")) {
        snprintf(err, len, "cannot write %s: %s holds \"--\" and cannot be an HTML comment", path, a->path);
        return -1;
    }
    fputs("<!-- uPlot 1.6.32 (https://github.com/leeoniya/uPlot), inlined below:\n", f);
    fwrite(a->data, 1, a->len, f);
    fputs("\n-->\n", f);
    return 0;
}

/* The sweep document as the page's data island: '<' as \u003c (above). */
static int report_data(FILE *f, const json_t *sweep, const char *path, char *err, size_t len)
{
    char *s = json_dumps(sweep, JSON_COMPACT);
    if (!s) {
        snprintf(err, len, "cannot write %s: the sweep document cannot be dumped (out of memory?)", path);
        return -1;
    }
    fputs("<script type=\"application/json\" id=\"psbench-sweep\">", f);
    for (const char *p = s; *p; p++) {
        if (*p == '<')
            fputs("\\u003c", f);
        else
            fputc(*p, f);
    }
    fputs("</script>\n", f);
    free(s);
    return 0;
}

/* The whole page into f; 0, or -1 with err. */
static int report_page(FILE *f, const json_t *sweep, const char *path, char *err, size_t len)
{
    const web_asset *ujs = report_asset(REPORT_UPLOT_JS, path, err, len);
    const web_asset *ucss = ujs ? report_asset(REPORT_UPLOT_CSS, path, err, len) : NULL;
    const web_asset *lic = ucss ? report_asset(REPORT_UPLOT_LICENSE, path, err, len) : NULL;
    const web_asset *style = lic ? report_asset("/style.css", path, err, len) : NULL;
    const web_asset *rcss = style ? report_asset("/report.css", path, err, len) : NULL;
    const web_asset *tjs = rcss ? report_asset("/timeline.js", path, err, len) : NULL;
    const web_asset *rjs = tjs ? report_asset("/report.js", path, err, len) : NULL;
    if (!rjs)
        return -1;

    fputs("<!DOCTYPE html>\n"
          "<!-- psbench sweep report, written by psbench-master sweep (master/tools/sweep_report.c)\n"
          "     from the sweep's sweep.json, which is inlined below (id psbench-sweep).\n"
          "     Self-contained: no network; `psbench-master sweep --report DIR` writes it again. -->\n"
          "<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
          "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
          "form-action 'none'\">\n"
          "<title>psbench sweep</title>\n",
          f);
    if (report_inline(f, ucss, "<style>\n", "</style>", path, err, len) < 0 ||
        report_inline(f, style, "<style>\n", "</style>", path, err, len) < 0 ||
        report_inline(f, rcss, "<style>\n", "</style>", path, err, len) < 0)
        return -1;
    fputs("</head>\n<body>\n"
          "<header class=\"top\"><div class=\"brand\">psbench sweep</div>"
          "<span id=\"sweep-when\" class=\"facts\"></span></header>\n"
          "<main id=\"report\"><noscript>This report draws its tables and charts with JavaScript; "
          "the data is sweep.json, beside this file.</noscript></main>\n",
          f);
    if (report_license(f, lic, path, err, len) < 0 ||
        report_inline(f, ujs, "<script>\n", "</script>", path, err, len) < 0 ||
        report_data(f, sweep, path, err, len) < 0 ||
        report_inline(f, tjs, "<script>\n", "</script>", path, err, len) < 0 ||
        report_inline(f, rjs, "<script>\n", "</script>", path, err, len) < 0)
        return -1;
    fputs("</body>\n</html>\n", f);
    return 0;
}

int sweep_report_write(const char *path, const json_t *sweep, char *err, size_t len)
{
    assert(path && sweep && err && len > 0);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) {
        snprintf(err, len, "cannot write %s: out of memory", path);
        return -1;
    }
    if (report_page(f, sweep, path, err, len) < 0) {
        fclose(f);
        free(text);
        return -1;
    }
    return afile_write_memstream(path, f, &text, &n, err, len);
}
