/* validate.c — the master's checks of what nodes send (see validate.h). */
#include "master/validate.h"

#include "shared/net.h"
#include "shared/text.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- field helpers ------------------------------------------------------- */

/* What a JSON value is, for "got ..." in a reason. */
static const char *val_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "a whole number";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "true or false";
    default: return "null";
    }
}

/* body[key], when present, must be a whole number in [min, max]. */
static int val_int(json_t *body, const char *key, json_int_t min, json_int_t max, char *err, size_t errlen)
{
    json_t *v = json_object_get(body, key);
    if (!v)
        return 0;
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "%s must be a whole number in %lld..%lld, got %s", key, (long long)min,
                 (long long)max, val_kind(v));
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) {
        snprintf(err, errlen, "%s must be a whole number in %lld..%lld, got %lld", key, (long long)min,
                 (long long)max, (long long)x);
        return -1;
    }
    return 0;
}

/* body[key], when present, must be a string of 1..max bytes; printable
 * too when `printable` (a name or an address, not free text). */
static int val_str(json_t *body, const char *key, size_t max, bool printable, char *err, size_t errlen)
{
    json_t *v = json_object_get(body, key);
    if (!v)
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s must be a string, got %s", key, val_kind(v));
        return -1;
    }
    size_t n = json_string_length(v);
    if (n == 0 || n > max) {
        snprintf(err, errlen, "%s must have 1..%zu bytes, got %zu", key, max, n);
        return -1;
    }
    if (printable && !text_is_printable(json_string_value(v), n)) {
        text_shown shown;
        snprintf(err, errlen, "%s must be printable text, got %s", key,
                 text_show_n(json_string_value(v), n, '"', &shown));
        return -1;
    }
    return 0;
}

/* An address a node gives (listen_host, advertise): printable, no blank. */
static int val_host(json_t *body, const char *key, char *err, size_t errlen)
{
    if (val_str(body, key, VALIDATE_MAX_HOST, true, err, errlen) < 0)
        return -1;
    const char *s = json_string_value(json_object_get(body, key));
    char why[300];
    if (s && *s && net_parse_host(s, why, sizeof why) < 0) { /* empty: none, or a wildcard */
        snprintf(err, errlen, "%s must be a host name or address (\"%s\": %s)", key, key, why);
        return -1;
    }
    return 0;
}

/* ---- register ---------------------------------------------------------------- */

int validate_register(json_t *body, char *err, size_t errlen)
{
    json_t *role = json_object_get(body, "role");
    const char *r = json_string_value(role);
    if (!r || (strcmp(r, "trainer") != 0 && strcmp(r, "server") != 0)) {
        snprintf(err, errlen, "role must be trainer or server");
        return -1;
    }
    bool server = strcmp(r, "server") == 0;
    /* host is free text for display (escaped where shown), of bounded size. */
    if (val_str(body, "host", VALIDATE_MAX_HOST, false, err, errlen) < 0 ||
        val_str(body, "device", VALIDATE_MAX_DEVICE, true, err, errlen) < 0 ||
        val_int(body, "pid", 0, INT32_MAX, err, errlen) < 0 ||
        val_int(body, "mem_total_bytes", 0, INT64_MAX, err, errlen) < 0 ||
        val_int(body, "mem_available_bytes", 0, INT64_MAX, err, errlen) < 0)
        return -1;
    json_t *w = json_object_get(body, "want_rank");
    if (w && !json_is_null(w) && val_int(body, "want_rank", 0, UINT32_MAX, err, errlen) < 0)
        return -1;
    json_t *clk = json_object_get(body, "clock");
    if (clk && !json_is_boolean(clk)) {
        snprintf(err, errlen, "clock must be true or false, got %s", val_kind(clk));
        return -1;
    }
    json_t *env = json_object_get(body, "environment");
    if (env && !json_is_object(env) && !json_is_null(env)) {
        snprintf(err, errlen, "environment must be an object, got %s", val_kind(env));
        return -1;
    }
    if (server) {
        json_t *port = json_object_get(body, "port");
        if (!port) {
            snprintf(err, errlen, "a server's register needs its data-plane port (\"port\" is missing)");
            return -1;
        }
        if (json_is_integer(port) && (json_integer_value(port) < 1 || json_integer_value(port) > 65535)) {
            snprintf(err, errlen, "port %lld is outside 1..65535", (long long)json_integer_value(port));
            return -1;
        }
        if (val_int(body, "port", 1, 65535, err, errlen) < 0 || val_host(body, "listen_host", err, errlen) < 0 ||
            val_host(body, "advertise", err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* ---- reports --------------------------------------------------------------------- */

int validate_metric_name(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    const char *comma = strchr(name, ',');
    text_shown shown;
    if (n == 0 || n > VALIDATE_MAX_NAME || !text_is_printable(name, n) || strchr(name, '"') || !comma ||
        comma == name || comma[1] == '\0') {
        snprintf(err, errlen,
                 "metric name %s is not \"TYPE,NAME\" of at most %d printable bytes (no quote, backslash or "
                 "control character)",
                 text_show(name, '"', &shown), VALIDATE_MAX_NAME);
        return -1;
    }
    return 0;
}

static int val_gpu_timed(json_t *body, char *err, size_t errlen)
{
    json_t *gpu = json_object_get(body, "gpu_timed");
    if (!gpu)
        return 0;
    if (!json_is_array(gpu) || json_array_size(gpu) > VALIDATE_MAX_GPU_TIMED) {
        snprintf(err, errlen, "gpu_timed must be a trainer's list of at most %d metric names",
                 VALIDATE_MAX_GPU_TIMED);
        return -1;
    }
    size_t i;
    json_t *k;
    json_array_foreach(gpu, i, k) {
        if (!json_is_string(k)) {
            snprintf(err, errlen, "gpu_timed must be a trainer's list of metric names, item %zu is %s", i,
                     val_kind(k));
            return -1;
        }
        char why[256];
        if (validate_metric_name(json_string_value(k), why, sizeof why) < 0) {
            snprintf(err, errlen, "gpu_timed: %s", why);
            return -1;
        }
    }
    return 0;
}

static int val_samples(json_t *body, char *err, size_t errlen)
{
    json_t *samples = json_object_get(body, "samples");
    if (!samples)
        return 0;
    if (!json_is_object(samples)) {
        snprintf(err, errlen, "samples must be an object (metric name: list of ms), got %s", val_kind(samples));
        return -1;
    }
    const char *key;
    json_t *arr;
    json_object_foreach(samples, key, arr) {
        char why[256];
        if (validate_metric_name(key, why, sizeof why) < 0) {
            snprintf(err, errlen, "samples: %s", why);
            return -1;
        }
        if (!json_is_array(arr)) {
            snprintf(err, errlen, "samples of \"%s\" must be a list of ms, got %s", key, val_kind(arr));
            return -1;
        }
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            double ms = json_number_value(v);
            if (!json_is_number(v) || !isfinite(ms) || ms < 0 || ms > VALIDATE_MAX_SAMPLE_MS) {
                char got[64];
                if (json_is_number(v))
                    snprintf(got, sizeof got, "%g", ms);
                else
                    snprintf(got, sizeof got, "%s", val_kind(v));
                snprintf(err, errlen, "a sample of \"%s\" must be a duration in [0, %g] ms, got %s", key,
                         VALIDATE_MAX_SAMPLE_MS, got);
                return -1;
            }
        }
    }
    return 0;
}

/* A counter of a report: a whole number >= 0 (the message keeps the words
 * the master has always used for it). */
static int val_counter(json_t *body, const char *key, char *err, size_t errlen)
{
    json_t *v = json_object_get(body, key);
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
        if (json_is_integer(v))
            snprintf(err, errlen, "%s: counters must be whole numbers >= 0, got %lld", key,
                     (long long)json_integer_value(v));
        else
            snprintf(err, errlen, "%s: counters must be whole numbers >= 0, got %s", key, val_kind(v));
        return -1;
    }
    return 0;
}

/* An embedding server's `calls`: {TYPE: {"frames", "bytes",
 * "payload_bytes"}}, whole numbers >= 0, TYPE printable. */
static int val_calls(json_t *body, char *err, size_t errlen)
{
    json_t *calls = json_object_get(body, "calls");
    if (!calls)
        return 0;
    bool ok = json_is_object(calls) && json_object_size(calls) <= 16;
    const char *type;
    json_t *v;
    json_object_foreach(calls, type, v) {
        const char *keys[] = {"frames", "bytes", "payload_bytes"};
        ok = ok && json_is_object(v) && strlen(type) <= 32 && text_is_printable(type, strlen(type));
        for (size_t k = 0; ok && k < sizeof keys / sizeof *keys; k++) {
            json_t *x = json_object_get(v, keys[k]);
            ok = json_is_integer(x) && json_integer_value(x) >= 0;
        }
    }
    if (!ok) {
        snprintf(err, errlen, "calls must map at most 16 message types to {frames, bytes, payload_bytes}, whole "
                 "numbers >= 0");
        return -1;
    }
    return 0;
}

static int val_initialising(json_t *body, char *err, size_t errlen)
{
    json_t *init = json_object_get(body, "initialising");
    if (!init)
        return 0;
    json_t *d = json_object_get(init, "done_bytes"), *t = json_object_get(init, "total_bytes");
    if (!json_is_integer(d) || !json_is_integer(t) || json_integer_value(t) <= 0 || json_integer_value(d) < 0 ||
        json_integer_value(d) > json_integer_value(t)) {
        snprintf(err, errlen, "initialising needs 0 <= done_bytes <= total_bytes");
        return -1;
    }
    return 0;
}

/* A number in [0, max], finite: "host.KEY must be ..." otherwise. */
static int val_host_num(json_t *host, const char *key, bool required, double max, char *err, size_t errlen)
{
    json_t *v = json_object_get(host, key);
    if (!v && !required)
        return 0;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0 ||
        json_number_value(v) > max) {
        snprintf(err, errlen, "host.%s must be a number in 0..%g, got %s", key, max, v ? val_kind(v) : "nothing");
        if (json_is_number(v))
            snprintf(err, errlen, "host.%s must be a number in 0..%g, got %g", key, max, json_number_value(v));
        return -1;
    }
    return 0;
}

/* A report's `host` (issue 38; docs/protocol.md): {"t", "cpu_s", "cpus",
 * and, all five or none, "cpu_ticks", "idle_ticks", "iowait_ticks",
 * "steal_ticks", "irq_ticks" (the idle, iowait, steal and irq ticks within
 * cpu_ticks), and optional "procs_running", "load1"}. */
static int val_host_state(json_t *body, char *err, size_t errlen)
{
    json_t *h = json_object_get(body, "host");
    if (!h)
        return 0; /* a node from before issue 38: its host's figures are not known */
    if (!json_is_object(h)) {
        snprintf(err, errlen, "host must be an object, got %s", val_kind(h));
        return -1;
    }
    if (val_host_num(h, "t", true, 1e12, err, errlen) < 0 || val_host_num(h, "cpu_s", true, 1e12, err, errlen) < 0 ||
        val_host_num(h, "load1", false, 1e9, err, errlen) < 0 || val_int(h, "cpus", 1, 1 << 20, err, errlen) < 0 ||
        val_int(h, "procs_running", 0, INT32_MAX, err, errlen) < 0)
        goto bad;
    if (!json_object_get(h, "cpus")) {
        snprintf(err, errlen, "cpus is missing");
        goto bad;
    }
    static const char *const ticks[] = {"cpu_ticks", "idle_ticks", "iowait_ticks", "steal_ticks", "irq_ticks"};
    size_t have = 0;
    json_int_t part = 0;
    for (size_t k = 0; k < sizeof ticks / sizeof *ticks; k++) {
        if (val_int(h, ticks[k], 0, INT64_MAX / 8, err, errlen) < 0)
            goto bad;
        json_t *v = json_object_get(h, ticks[k]);
        have += v != NULL;
        part += k ? json_integer_value(v) : 0;
    }
    if (have != 0 && have != sizeof ticks / sizeof *ticks) {
        snprintf(err, errlen, "host needs all of cpu_ticks, idle_ticks, iowait_ticks, steal_ticks, irq_ticks or none");
        return -1;
    }
    if (have && part > json_integer_value(json_object_get(h, "cpu_ticks"))) {
        snprintf(err, errlen, "host's idle, iowait, steal and irq ticks must add up to at most cpu_ticks");
        return -1;
    }
    return 0;
bad:
    {
        /* val_int names the bare key: say it is the host's. */
        char inner[300];
        snprintf(inner, sizeof inner, "%s", err);
        snprintf(err, errlen, "%s%s", strncmp(inner, "host.", 5) == 0 ? "" : "host.", inner);
    }
    return -1;
}

int validate_report(json_t *body, bool trainer, char *err, size_t errlen)
{
    if (val_host_state(body, err, errlen) < 0)
        return -1;
    if (val_counter(body, "bytes_in", err, errlen) < 0 || val_counter(body, "bytes_out", err, errlen) < 0 ||
        (trainer && val_counter(body, "batches_done", err, errlen) < 0))
        return -1;
    if (!trainer) {
        json_t *rt = json_object_get(body, "rows_touched");
        if (rt && (!json_is_integer(rt) || json_integer_value(rt) < 0)) {
            snprintf(err, errlen, "rows_touched must be a whole number >= 0");
            return -1;
        }
        if (val_initialising(body, err, errlen) < 0 || val_calls(body, err, errlen) < 0)
            return -1;
    } else if (val_gpu_timed(body, err, errlen) < 0) {
        return -1;
    }
    if (!trainer && json_object_get(body, "gpu_timed")) {
        snprintf(err, errlen, "gpu_timed must be a trainer's list of metric names");
        return -1;
    }
    return val_samples(body, err, errlen);
}

/* ---- pass_done ------------------------------------------------------------------ */

/* loss_per_epoch: null, or a list of numbers and "nan", "inf", "-inf". */
static int val_losses(json_t *body, char *err, size_t errlen)
{
    json_t *l = json_object_get(body, "loss_per_epoch");
    if (!l || json_is_null(l))
        return 0;
    if (!json_is_array(l)) {
        snprintf(err, errlen, "loss_per_epoch must be a list or null, got %s", val_kind(l));
        return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(l, i, v) {
        const char *s = json_string_value(v);
        if (!json_is_number(v) && !(s && (strcmp(s, "nan") == 0 || strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0))) {
            snprintf(err, errlen, "loss_per_epoch[%zu] must be a number, \"nan\", \"inf\" or \"-inf\"", i);
            return -1;
        }
    }
    return 0;
}

static int val_digest(json_t *body, char *err, size_t errlen)
{
    json_t *d = json_object_get(body, "final_params_sha256");
    if (!d || json_is_null(d))
        return 0;
    const char *s = json_string_value(d);
    bool ok = s && strlen(s) == 64;
    for (size_t i = 0; ok && i < 64; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
    if (!ok) {
        snprintf(err, errlen, "final_params_sha256 must be 64 lowercase hex digits or null");
        return -1;
    }
    return 0;
}

/* One layout of buckets: [{"floats", "sparse", "element_bytes" (optional:
 * 2 or 4, the headline's bytes per step count it), "parameters": [names]
 * or null}, ...]. */
static int val_layout(json_t *b, const char *key, char *err, size_t errlen)
{
    json_t *a = json_object_get(b, key);
    if (!json_is_array(a)) {
        snprintf(err, errlen, "buckets.%s must be a list of buckets", key);
        return -1;
    }
    size_t i;
    json_t *bk;
    json_array_foreach(a, i, bk) {
        json_t *p = json_object_get(bk, "parameters");
        bool ok = json_is_object(bk) && json_is_integer(json_object_get(bk, "floats")) &&
                  json_integer_value(json_object_get(bk, "floats")) >= 0 &&
                  json_is_boolean(json_object_get(bk, "sparse")) && (json_is_null(p) || json_is_array(p));
        json_t *eb = json_object_get(bk, "element_bytes");
        ok = ok && (!eb || (json_is_integer(eb) && (json_integer_value(eb) == 2 || json_integer_value(eb) == 4)));
        size_t j;
        json_t *name;
        json_array_foreach(p, j, name) {
            ok = ok && json_is_string(name) && json_string_length(name) <= VALIDATE_MAX_NAME &&
                 text_is_printable(json_string_value(name), json_string_length(name));
        }
        if (!ok) {
            snprintf(err, errlen,
                     "buckets.%s[%zu] must be {\"floats\": a whole number >= 0, \"sparse\": true or false, "
                     "\"element_bytes\": 2 or 4 (optional), \"parameters\": a list of printable names or null}",
                     key, i);
            return -1;
        }
    }
    return 0;
}

static int val_buckets(json_t *body, char *err, size_t errlen)
{
    json_t *b = json_object_get(body, "buckets");
    if (!b || json_is_null(b))
        return 0;
    if (!json_is_object(b)) {
        snprintf(err, errlen, "buckets must be an object or null, got %s", val_kind(b));
        return -1;
    }
    const char *layout = json_string_value(json_object_get(b, "layout"));
    json_t *first = json_object_get(b, "first_bucket_mb"), *cap = json_object_get(b, "bucket_cap_mb");
    if (!layout || strcmp(layout, "ddp") != 0) {
        snprintf(err, errlen, "buckets.layout must be \"ddp\"");
        return -1;
    }
    if (!json_is_number(first) || !(json_number_value(first) >= 0) || !json_is_number(cap) ||
        !(json_number_value(cap) > 0) || !isfinite(json_number_value(first)) || !isfinite(json_number_value(cap))) {
        snprintf(err, errlen, "buckets.first_bucket_mb must be a number >= 0 and buckets.bucket_cap_mb one > 0");
        return -1;
    }
    return val_layout(b, "first_iteration", err, errlen) < 0 ? -1 : val_layout(b, "rebuilt", err, errlen);
}

/* "powersgd" (optional; issue 43): an object whose figures the headline
 * reads: "bytes_per_step" and "bytes_per_compressed_step" numbers >= 0 or
 * null, "plain_steps" and "compressed_steps" whole numbers >= 0; the
 * state's parameters are kept as they come (results.json shows them). */
static int val_powersgd(json_t *body, char *err, size_t errlen)
{
    json_t *p = json_object_get(body, "powersgd");
    if (!p)
        return 0;
    bool ok = json_is_object(p);
    static const char *const nums[] = {"bytes_per_step", "bytes_per_compressed_step"};
    for (size_t i = 0; ok && i < 2; i++) {
        json_t *v = json_object_get(p, nums[i]);
        ok = json_is_null(v) || (json_is_number(v) && json_number_value(v) >= 0 && isfinite(json_number_value(v)));
    }
    ok = ok && val_int(p, "plain_steps", 0, INT64_MAX, err, errlen) == 0 &&
         val_int(p, "compressed_steps", 0, INT64_MAX, err, errlen) == 0;
    if (!ok) {
        snprintf(err, errlen, "powersgd must be an object with \"bytes_per_step\" and \"bytes_per_compressed_step\" "
                 "(numbers >= 0 or null), \"plain_steps\" and \"compressed_steps\" (whole numbers >= 0)");
        return -1;
    }
    return 0;
}

int validate_pass_results(json_t *body, char *err, size_t errlen)
{
    if (val_losses(body, err, errlen) < 0 || val_digest(body, err, errlen) < 0 ||
        val_int(body, "bags", 0, INT64_MAX, err, errlen) < 0 || val_int(body, "indices", 0, INT64_MAX, err, errlen) < 0 ||
        val_int(body, "epochs", 0, INT64_MAX, err, errlen) < 0 || val_str(body, "compress", 16, true, err, errlen) < 0 ||
        val_str(body, "comm_hook", 64, true, err, errlen) < 0 || val_powersgd(body, err, errlen) < 0)
        return -1;
    return val_buckets(body, err, errlen);
}

/* A link's transport, as the trainer names it (its transports' link
 * names: "shm", "tcp"; a test build's "loop"): a short word. */
static bool validate_transport_name(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
            return false;
    return true;
}

int validate_ready(json_t *body, char *err, size_t errlen)
{
    json_t *links = json_object_get(body, "links");
    if (!links || json_is_null(links))
        return 0;
    if (!json_is_array(links) || json_array_size(links) > 65536) {
        snprintf(err, errlen, "links must be a list of at most 65536 entries");
        return -1;
    }
    size_t i;
    json_t *l;
    json_array_foreach(links, i, l) {
        json_t *srv = json_object_get(l, "server"), *note = json_object_get(l, "note");
        json_t *ipc = json_object_get(l, "cuda_ipc"), *ipc_note = json_object_get(l, "cuda_ipc_note");
        json_t *ipc_ms = json_object_get(l, "cuda_ipc_open_ms");
        const char *addr = json_string_value(json_object_get(l, "address"));
        const char *tr = json_string_value(json_object_get(l, "transport"));
        bool ok = json_is_object(l) && json_is_integer(srv) && json_integer_value(srv) >= 0 &&
                  json_integer_value(srv) <= UINT32_MAX && addr && strlen(addr) <= 300 &&
                  text_is_printable(addr, strlen(addr)) && tr && validate_transport_name(tr) &&
                  (!note || json_is_null(note) ||
                   (json_is_string(note) && json_string_length(note) <= 300 &&
                    text_is_printable(json_string_value(note), json_string_length(note)))) &&
                  (!ipc || json_is_boolean(ipc)) &&
                  (!ipc_note || json_is_null(ipc_note) ||
                   (json_is_string(ipc_note) && json_string_length(ipc_note) <= 300 &&
                    text_is_printable(json_string_value(ipc_note), json_string_length(ipc_note)))) &&
                  (!ipc_ms || json_is_null(ipc_ms) ||
                   (json_is_number(ipc_ms) && json_number_value(ipc_ms) >= 0 && json_number_value(ipc_ms) <= 3.6e6));
        if (!ok) {
            snprintf(err, errlen,
                     "links[%zu] must be {\"server\": a rank, \"address\": printable text, \"transport\": a "
                     "transport's name (\"shm\", \"tcp\"; 1-16 of a-z 0-9 _), \"note\": printable text or null, "
                     "\"cuda_ipc\": true or false, \"cuda_ipc_note\": printable text or null, "
                     "\"cuda_ipc_open_ms\": 0 to 3600000 or null}",
                     i);
            return -1;
        }
    }
    return 0;
}

int validate_failed(json_t *body, char *err, size_t errlen)
{
    json_t *r = json_object_get(body, "reason");
    if (r && !json_is_string(r)) {
        snprintf(err, errlen, "reason must be a string, got %s", val_kind(r));
        return -1;
    }
    return 0;
}

int validate_clock_ack(json_t *body, char *err, size_t errlen)
{
    static const char *const keys[] = {"seq", "t0", "t1", "t2"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        /* Every reading is needed: a round trip without one is no sample. */
        if (!json_object_get(body, keys[i])) {
            snprintf(err, errlen, "%s is missing (a whole number in 0..%lld)", keys[i], (long long)INT64_MAX);
            return -1;
        }
        if (val_int(body, keys[i], 0, INT64_MAX, err, errlen) < 0)
            return -1;
    }
    return 0;
}
