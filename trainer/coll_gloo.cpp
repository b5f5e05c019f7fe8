/* coll_gloo.cpp — the gloo backend of coll.h: CPU collectives over TCP with
 * Debian's libgloo (the library behind PyTorch's CPU DDP). The project's
 * one C++ file, a thin extern "C" layer: rendezvous through the caller's
 * coll_store (a gloo::rendezvous::Store whose set/get call the C
 * callbacks), a full mesh of TCP pairs (gloo::rendezvous::Context on a
 * gloo::transport::tcp device), and Gloo's options-style allreduce,
 * allgather and allgatherv.
 *
 * No C++ exception leaves this file: each entry point catches everything
 * and turns it into a one-line reason. A failed collective also closes the
 * group's connections, so that the other members fail at once instead of
 * waiting out their timeout.
 *
 * What Gloo (0.0~git20220518) does on the network: every member binds
 * size-1 listening sockets, one per peer, on ephemeral ports of `host`'s
 * address, and publishes them under `prefix`/<rank> (with its host name
 * under `prefix`/rank_<rank>). For each pair the side whose address and
 * port compare higher connects to the other's port; once connected neither
 * side keeps a listening socket: a group holds size-1 TCP connections per
 * member and one epoll thread (the device's loop). The ports cannot be
 * fixed.
 */
#include "trainer/coll_impl.h"

#include "shared/half_elem.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

namespace {

/* The caller's store failed (its own words). */
struct StoreError : public gloo::IoException {
    explicit StoreError(const std::string &msg) : gloo::IoException(msg) {}
};

/* Our own checks before Gloo runs (the reason is complete as it is). */
struct SetupError : public std::runtime_error {
    explicit SetupError(const std::string &msg) : std::runtime_error(msg) {}
};

/* gloo::rendezvous::Store over a coll_store, every key under `prefix`/.
 * wait fetches each key (the C get waits until it exists, up to the store's
 * own deadline) and keeps the value for the get that follows, so that each
 * key travels once. */
class CStore final : public gloo::rendezvous::Store {
  public:
    CStore(const coll_store &store, const char *prefix)
        : store_(store), prefix_(prefix && *prefix ? std::string(prefix) + "/" : std::string())
    {
    }

    void set(const std::string &key, const std::vector<char> &data) override
    {
        const std::string k = prefix_ + key;
        char why[COLL_ERR_MAX] = "";
        if (store_.set(store_.ctx, k.c_str(), data.data(), data.size(), why, sizeof why) != 0)
            throw StoreError("store set '" + k + "': " + (why[0] ? why : "failed"));
    }

    std::vector<char> get(const std::string &key) override
    {
        auto it = fetched_.find(key);
        if (it == fetched_.end())
            return fetch(key);
        std::vector<char> v = std::move(it->second);
        fetched_.erase(it);
        return v;
    }

    void wait(const std::vector<std::string> &keys) override
    {
        for (const auto &key : keys)
            if (fetched_.find(key) == fetched_.end())
                fetched_.emplace(key, fetch(key));
    }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds & /* the store's own */) override
    {
        wait(keys);
    }

  private:
    std::vector<char> fetch(const std::string &key)
    {
        const std::string k = prefix_ + key;
        uint8_t *val = nullptr;
        size_t len = 0;
        char why[COLL_ERR_MAX] = "";
        if (store_.get(store_.ctx, k.c_str(), &val, &len, why, sizeof why) != 0)
            throw StoreError("store get '" + k + "': " + (why[0] ? why : "failed"));
        std::unique_ptr<uint8_t, decltype(&free)> owned(val, free);
        return std::vector<char>(reinterpret_cast<const char *>(val), reinterpret_cast<const char *>(val) + len);
    }

    const coll_store store_;
    const std::string prefix_;
    std::map<std::string, std::vector<char>> fetched_;
};

/* One member's state. A group of one has no device and no context: its
 * collectives are copies. */
struct GlooGroup {
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::chrono::milliseconds timeout{0};
    double timeout_s = 0;
    uint32_t tag = 0; /* one per collective, the same sequence on every member */
    std::vector<uint16_t> narrow; /* the fake NCCL's compressed allreduce: its narrow values */

    ~GlooGroup()
    {
        ctx.reset(); /* the pairs go before the device's loop */
        dev.reset();
    }
};

/* This Gloo prints ports in network byte order (port 34049 shows as
 * "[127.0.0.1]:389"); asked once, so that a fixed Gloo is left alone. */
bool gloo_swaps_ports()
{
    static const bool swaps = [] {
        struct sockaddr_in sin;
        memset(&sin, 0, sizeof sin);
        sin.sin_family = AF_INET;
        sin.sin_port = htons(0x0102);
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        try {
            const std::string s =
                gloo::transport::tcp::Address(reinterpret_cast<const struct sockaddr *>(&sin), sizeof sin).str();
            return s.find("]:513") != std::string::npos;
        } catch (...) {
            return false;
        }
    }();
    return swaps;
}

/* Every "]:<port>" in s with the port's bytes swapped back. */
std::string mend_ports(const std::string &s)
{
    std::string out;
    size_t i = 0;
    for (size_t at; (at = s.find("]:", i)) != std::string::npos;) {
        size_t d = at + 2, e = d;
        while (e < s.size() && e - d < 6 && isdigit((unsigned char)s[e]))
            e++;
        out.append(s, i, d - i);
        unsigned long port = e > d ? strtoul(s.substr(d, e - d).c_str(), nullptr, 10) : 0;
        if (e > d && port <= 0xffff)
            out += std::to_string(((port & 0xff) << 8) | (port >> 8));
        else
            out.append(s, d, e - d);
        i = e;
    }
    out.append(s, i, std::string::npos);
    return out;
}

/* Gloo's what() without the "[file:line] " in front, on one line, with
 * true port numbers. */
std::string clean_what(const char *what)
{
    std::string s = what ? what : "";
    while (!s.empty() && s[0] == '[') {
        size_t end = s.find("] ");
        if (end == std::string::npos)
            break;
        s.erase(0, end + 2);
    }
    std::replace(s.begin(), s.end(), '\n', ' ');
    std::replace(s.begin(), s.end(), '\r', ' ');
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    if (gloo_swaps_ports())
        s = mend_ports(s);
    return s.empty() ? std::string("no detail") : s;
}

bool says_timeout(const std::string &s)
{
    std::string lower(s);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return (char)tolower(ch); });
    return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

/* The one-line reason for exception `ep` in operation `op` ("init",
 * "allreduce", ...). */
void describe_exception(const char *op, std::exception_ptr ep, double timeout_s, char *err, size_t errlen)
{
    try {
        std::rethrow_exception(ep);
    } catch (const SetupError &e) {
        snprintf(err, errlen, "gloo %s: %s", op, e.what());
    } catch (const StoreError &e) {
        snprintf(err, errlen, "gloo %s: rendezvous failed: %s", op, e.what());
    } catch (const std::bad_alloc &) {
        snprintf(err, errlen, "gloo %s: out of memory", op);
    } catch (const std::exception &e) {
        const std::string what = clean_what(e.what());
        const bool init = strcmp(op, "init") == 0;
        if (says_timeout(what))
            snprintf(err, errlen, "gloo %s: timed out after %g s (--rpc-timeout) (%s)", op, timeout_s, what.c_str());
        else if (dynamic_cast<const gloo::IoException *>(&e))
            snprintf(err, errlen, "gloo %s: %s (%s)", op,
                     init ? "could not connect to every member" : "connection to a peer was lost", what.c_str());
        else
            snprintf(err, errlen, "gloo %s: %s", op, what.c_str());
    } catch (...) {
        snprintf(err, errlen, "gloo %s: unknown C++ exception", op);
    }
}

void describe(const char *op, std::exception_ptr ep, double timeout_s, char *err, size_t errlen) noexcept
{
    if (!err || errlen == 0)
        return;
    try {
        describe_exception(op, ep, timeout_s, err, errlen);
    } catch (...) { /* out of memory while wording it */
        snprintf(err, errlen, "gloo %s: failed (no memory left to say why)", op);
    }
}

/* After a failed collective: the reason into err, and every connection
 * closed so that the peers stop waiting on this member. Returns -1. */
int fail(GlooGroup *g, const char *op, std::exception_ptr ep, char *err, size_t errlen) noexcept
{
    describe(op, ep, g->timeout_s, err, errlen);
    if (g->ctx) {
        try {
            g->ctx->closeConnections();
        } catch (...) {
            /* closing is best effort; the group is dead either way */
        }
    }
    return -1;
}

/* The address Gloo's device binds to must resolve (its own lookup does not
 * check getaddrinfo's result). */
void check_host(const std::string &host)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = nullptr;
    int rv = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rv != 0)
        throw SetupError("cannot resolve host '" + host + "' (" + gai_strerror(rv) + ")");
    freeaddrinfo(res);
}

std::string this_host()
{
    char name[256];
    if (gethostname(name, sizeof name) != 0)
        throw SetupError(std::string("gethostname: ") + strerror(errno));
    name[sizeof name - 1] = '\0';
    return name;
}

void sum_f32(void *out, const void *a, const void *b, size_t n)
{
    float *o = static_cast<float *>(out);
    const float *x = static_cast<const float *>(a), *y = static_cast<const float *>(b);
    for (size_t i = 0; i < n; i++)
        o[i] = x[i] + y[i];
}

/* The narrow sums: gloo::float16's operator+ and PyTorch's c10::BFloat16
 * sum both add in float and round to nearest even; half.h rounds as
 * PyTorch's c10 conversions do, on any CPU. */
void sum_fp16(void *out, const void *a, const void *b, size_t n)
{
    half_sum_fp16(static_cast<psb_fp16 *>(out), static_cast<const psb_fp16 *>(a), static_cast<const psb_fp16 *>(b), n);
}

void sum_bf16(void *out, const void *a, const void *b, size_t n)
{
    half_sum_bf16(static_cast<psb_bf16 *>(out), static_cast<const psb_bf16 *>(a), static_cast<const psb_bf16 *>(b), n);
}

GlooGroup *group_of(coll *c) { return static_cast<GlooGroup *>(c->impl); }

int gloo_allreduce_sum_f32(coll *c, float *buf, size_t n, char *err, size_t errlen) noexcept
{
    GlooGroup *g = group_of(c);
    if (!g->ctx)
        return 0; /* the sum over one member */
    try {
        gloo::AllreduceOptions opts(g->ctx);
        opts.setOutput(buf, n); /* in place */
        opts.setReduceFunction(sum_f32);
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::allreduce(opts);
        return 0;
    } catch (...) {
        return fail(g, "allreduce", std::current_exception(), err, errlen);
    }
}

/* Gloo moves 2-byte elements (setOutput's element size is sizeof *buf)
 * and reduces them with the sum of t. */
int gloo_allreduce_sum_half(coll *c, uint16_t *buf, size_t n, half_type t, char *err, size_t errlen) noexcept
{
    GlooGroup *g = group_of(c);
    if (!g->ctx)
        return 0; /* the sum over one member */
    try {
        gloo::AllreduceOptions opts(g->ctx);
        opts.setOutput(buf, n); /* in place */
        opts.setReduceFunction(t == HALF_BF16 ? sum_bf16 : sum_fp16);
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::allreduce(opts);
        return 0;
    } catch (...) {
        return fail(g, "allreduce", std::current_exception(), err, errlen);
    }
}

int gloo_allgather(coll *c, const void *in, size_t bytes, void *out, char *err, size_t errlen) noexcept
{
    GlooGroup *g = group_of(c);
    char *o = static_cast<char *>(out);
    char *mine = o + (size_t)c->rank * bytes;
    if (!g->ctx) {
        memmove(o, in, bytes);
        return 0;
    }
    try {
        gloo::AllgatherOptions opts(g->ctx);
        if (in != mine) /* else in place */
            opts.setInput(const_cast<char *>(static_cast<const char *>(in)), bytes);
        opts.setOutput(o, bytes * c->size);
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::allgather(opts);
        return 0;
    } catch (...) {
        return fail(g, "allgather", std::current_exception(), err, errlen);
    }
}

int gloo_allgatherv(coll *c, const void *in, size_t bytes, const uint64_t *counts, uint64_t /* total */,
                    void *out, char *err, size_t errlen) noexcept
{
    GlooGroup *g = group_of(c);
    char *o = static_cast<char *>(out);
    if (!g->ctx) {
        memmove(o, in, bytes);
        return 0;
    }
    try {
        std::vector<size_t> elements(counts, counts + c->size);
        size_t offset = 0;
        for (uint32_t r = 0; r < c->rank; r++)
            offset += elements[r];
        gloo::AllgathervOptions opts(g->ctx);
        if (bytes > 0 && in != o + offset) /* else in place, or nothing of ours */
            opts.setInput(const_cast<char *>(static_cast<const char *>(in)), bytes);
        opts.setOutput(o, std::move(elements));
        opts.setTag(g->tag++);
        opts.setTimeout(g->timeout);
        gloo::allgatherv(opts);
        return 0;
    } catch (...) {
        return fail(g, "allgatherv", std::current_exception(), err, errlen);
    }
}

void gloo_destroy(coll *c) noexcept
{
    delete group_of(c); /* Gloo's destructors close quietly; nothing throws */
    c->impl = nullptr;
}

/* NCCL's stand-in on the fake GPU: its device memory is host memory
 * (shared/gpu/cugpu.h), so a fake-cuda trainer's device buckets are summed by
 * Gloo where they are, then scaled as coll.h says. Only here does a devf32
 * become a host pointer: the fake GPU's are. */
int gloo_fake_device_allreduce(coll *c, devf32 dbuf, size_t n, float scale, char *err, size_t errlen) noexcept
{
    float *host = dbuf.p;
    if (gloo_allreduce_sum_f32(c, host, n, err, errlen) != 0)
        return -1;
    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++)
            host[i] *= scale;
    return 0;
}

/* NCCL's compressed allreduce on the fake GPU, as coll_nccl.c runs it: the
 * bucket narrowed (trk_narrow_mul's per-element function) into a host
 * buffer of the group's, the narrow values summed by Gloo, widened back
 * (trk_widen's). */
int gloo_fake_device_compress(coll *c, devf32 dbuf, size_t n, half_type t, char *err, size_t errlen) noexcept
{
    GlooGroup *g = group_of(c);
    float *host = dbuf.p;
    const int bf = t == HALF_BF16;
    const float inv = 1.0f / (float)c->size;
    try {
        g->narrow.resize(n);
    } catch (...) {
        snprintf(err, errlen, "nccl (fake) allreduce: out of memory for %zu narrow values", n);
        return -1;
    }
    uint16_t *narrow = g->narrow.data();
    for (size_t i = 0; i < n; i++)
        narrow[i] = he_narrow_mul(bf, host[i], inv);
    if (gloo_allreduce_sum_half(c, narrow, n, t, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        host[i] = he_widen(bf, narrow[i]);
    return 0;
}

const coll_ops gloo_ops = {
    "gloo",
    gloo_allreduce_sum_f32,
    nullptr /* host buffers only */,
    gloo_allgather,
    gloo_allgatherv,
    gloo_destroy,
    gloo_allreduce_sum_half,
    nullptr /* host buffers only */,
};

const coll_ops fake_nccl_ops = {
    "nccl (the fake GPU's: Gloo)",
    gloo_allreduce_sum_f32,
    gloo_fake_device_allreduce,
    gloo_allgather,
    gloo_allgatherv,
    gloo_destroy,
    nullptr /* as NCCL's: narrow sums on device buckets only */,
    gloo_fake_device_compress,
};

coll *gloo_new(const coll_ops *ops, uint32_t rank, uint32_t size, const char *host, const coll_store *store,
               const char *prefix, double timeout_s, char *err, size_t errlen)
{
    if (coll_check_args(ops->name, rank, size, store, timeout_s, err, errlen) != 0)
        return nullptr;
    GlooGroup *g = nullptr;
    try {
        g = new GlooGroup();
        const auto timeout_ms = (long long)std::ceil(timeout_s * 1000.0);
        g->timeout = std::chrono::milliseconds(timeout_ms);
        g->timeout_s = timeout_s;
        if (size > 1) {
            coll_ignore_sigpipe();
            const std::string h = host && *host ? std::string(host) : this_host();
            check_host(h);
            g->dev = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr(h.c_str()));
            auto ctx = std::make_shared<gloo::rendezvous::Context>((int)rank, (int)size);
            /* A pair waits 5 times the context's timeout for its peer to
             * connect (pair.h, waitUntil): a fifth of ours bounds that by
             * ours. Collectives get the whole of it through their options. */
            ctx->setTimeout(std::chrono::milliseconds(std::max(1LL, (timeout_ms + 4) / 5)));
            CStore cstore(*store, prefix);
            ctx->connectFullMesh(cstore, g->dev);
            ctx->setTimeout(g->timeout);
            g->ctx = std::move(ctx);
        }
    } catch (...) {
        describe("init", std::current_exception(), timeout_s, err, errlen);
        delete g;
        return nullptr;
    }
    coll *c = coll_wrap(ops, g, rank, size, err, errlen);
    if (!c)
        delete g;
    return c;
}

} // namespace

extern "C" coll *coll_gloo_new(uint32_t rank, uint32_t size, const char *host, const coll_store *store,
                               const char *prefix, double timeout_s, char *err, size_t errlen)
{
    return gloo_new(&gloo_ops, rank, size, host, store, prefix, timeout_s, err, errlen);
}

extern "C" coll *coll_nccl_fake_new(uint32_t rank, uint32_t size, const char *host, const coll_store *store,
                                    const char *prefix, double timeout_s, char *err, size_t errlen)
{
    return gloo_new(&fake_nccl_ops, rank, size, host, store, prefix, timeout_s, err, errlen);
}
