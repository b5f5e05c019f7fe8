/* mparams.c — a run's final parameters (see mparams.h). */
#include "master/mparams.h"
#include "shared/b64.h"
#include "shared/log.h"
#include "shared/paramsfile.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where trainer 0's parameters stand this run. */
typedef enum {
    MP_WAITING = 0, /* none came yet */
    MP_COMING,      /* parts came, not the final one */
    MP_WHOLE,       /* every float came, its digest checked */
    MP_SUMMARY,     /* the final part came without data: too many to record, or none */
    MP_REFUSED,     /* a part was refused: the rest is dropped (said once) */
} mparams_state;

struct mparams {
    mparams_state state;
    float *v;        /* MP_COMING, MP_WHOLE: count floats (owned) */
    uint64_t count;  /* as the first part said */
    uint64_t got;    /* floats in so far */
    char sha256[65]; /* the trainer's digest ("" where it had none) */
    double l2_norm;
    char why[300]; /* MP_REFUSED: what was wrong */
    double t_part; /* when the last part came (master_now), 0: none yet */
    uint64_t max;  /* --params-max: the most parameters recorded (sent with data) */
};

json_t *mparams_assign_json(const master *m, uint32_t rank)
{
    if (!m->set.out_dir || rank != 0)
        return NULL;
    return json_pack("{s:I}", "max_count", (json_int_t)m->set.params_max);
}

static struct mparams *mparams_get(master *m)
{
    if (!m->params && (m->params = calloc(1, sizeof *m->params)) != NULL)
        m->params->max = m->set.params_max;
    return m->params;
}

static void mparams_refuse(struct mparams *p, const node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mparams_refuse(struct mparams *p, const node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    free(p->v);
    p->v = NULL;
    p->state = MP_REFUSED;
    log_warn("trainer %u (%s) sent a bad params part: %s: its final parameters are not recorded", n->rank, n->host,
             p->why);
}

/* The part's fields, checked: 0, or -1 with what is wrong in why. */
static int mparams_fields(json_t *b, uint64_t *count, uint64_t *offset, const char **sha, double *norm, bool *final,
                          const char **data, size_t *dlen, char *why, size_t len)
{
    json_t *c = json_object_get(b, "count"), *o = json_object_get(b, "offset"), *s = json_object_get(b, "sha256");
    json_t *l = json_object_get(b, "l2_norm"), *f = json_object_get(b, "final"), *d = json_object_get(b, "data");
    if (!json_is_integer(c) || json_integer_value(c) < 0 || !json_is_integer(o) || json_integer_value(o) < 0) {
        snprintf(why, len, "count and offset must be whole numbers >= 0");
        return -1;
    }
    if (!(json_is_null(s) || (json_is_string(s) && json_string_length(s) == 64 &&
                              strspn(json_string_value(s), "0123456789abcdef") == 64))) {
        snprintf(why, len, "sha256 must be 64 lowercase hex digits or null");
        return -1;
    }
    if (!json_is_number(l) || !isfinite(json_number_value(l)) || json_number_value(l) < 0 || !json_is_boolean(f) ||
        (d && !json_is_string(d))) {
        snprintf(why, len, "l2_norm must be a number >= 0, final true or false, data (if any) a string");
        return -1;
    }
    *count = (uint64_t)json_integer_value(c);
    *offset = (uint64_t)json_integer_value(o);
    *sha = json_is_string(s) ? json_string_value(s) : "";
    *norm = json_number_value(l);
    *final = json_is_true(f);
    *data = d ? json_string_value(d) : NULL;
    *dlen = d ? json_string_length(d) : 0;
    return 0;
}

/* The first part: what the rest must agree with. */
static int mparams_first(struct mparams *p, const node *n, uint64_t count, const char *sha, double norm, bool data)
{
    p->count = count;
    snprintf(p->sha256, sizeof p->sha256, "%s", sha);
    p->l2_norm = norm;
    if (!data && count > 0 && count <= p->max) {
        mparams_refuse(p, n, "no data for %" PRIu64 " parameters (up to %" PRIu64 " are sent whole)", count,
                       p->max);
        return -1;
    }
    if (!data)
        return 0;
    if (count > p->max || count == 0) {
        mparams_refuse(p, n, "data for %" PRIu64 " parameters (0 < count <= %" PRIu64 " carry data)", count,
                       p->max);
        return -1;
    }
    /* One float of slack: a part's base64 may decode up to 2 bytes past
     * what it holds before its length is checked (mparams_on_params). */
    p->v = malloc((count + 1) * sizeof *p->v);
    if (!p->v) {
        mparams_refuse(p, n, "out of memory for %" PRIu64 " parameters", count);
        return -1;
    }
    p->state = MP_COMING;
    return 0;
}

/* The final part's checks: every float in, the digest theirs. */
static void mparams_final(struct mparams *p, const node *n)
{
    if (p->state != MP_COMING) {
        p->state = MP_SUMMARY;
        return;
    }
    char hex[65];
    if (p->got != p->count) {
        mparams_refuse(p, n, "final after %" PRIu64 " of %" PRIu64 " parameters", p->got, p->count);
    } else if (paramsfile_sha256(p->v, p->count, hex) < 0 || strcmp(hex, p->sha256) != 0) {
        mparams_refuse(p, n, "the parameters' digest is %s, not the %s sent", hex[0] ? hex : "not known",
                       p->sha256[0] ? p->sha256 : "null");
    } else {
        p->l2_norm = paramsfile_l2_norm(p->v, p->count); /* exact, from what came */
        p->state = MP_WHOLE;
    }
}

void mparams_on_params(master *m, node *n, ctl_msg *msg)
{
    if (n->role != AGG_TRAINER || n->rank != 0 || !m->set.out_dir) {
        log_warn("%s %u (%s) sent params it was not asked for: dropped", agg_role_name(n->role), n->rank, n->host);
        return;
    }
    struct mparams *p = mparams_get(m);
    if (!p) {
        log_warn("trainer 0's final parameters: out of memory: not recorded");
        return;
    }
    p->t_part = master_now();
    if (p->state == MP_REFUSED)
        return;
    uint64_t count, offset;
    const char *sha, *data;
    double norm;
    bool final;
    size_t dlen;
    char why[200];
    if (p->state == MP_WHOLE || p->state == MP_SUMMARY) {
        mparams_refuse(p, n, "a part after the final one");
        return;
    }
    if (mparams_fields(msg->body, &count, &offset, &sha, &norm, &final, &data, &dlen, why, sizeof why) < 0) {
        mparams_refuse(p, n, "%s", why);
        return;
    }
    if (p->state == MP_WAITING && mparams_first(p, n, count, sha, norm, data != NULL) < 0)
        return;
    if (count != p->count || strcmp(sha, p->sha256) != 0 || offset != p->got) {
        mparams_refuse(p, n,
                       "count %" PRIu64 ", offset %" PRIu64 ": %" PRIu64 " parameters and offset %" PRIu64
                       " expected (with the first part's digest)",
                       count, offset, p->count, p->got);
        return;
    }
    if ((data != NULL) != (p->state == MP_COMING)) {
        mparams_refuse(p, n, "data in some parts only");
        return;
    }
    if (data) {
        size_t room = (size_t)(p->count - p->got) * sizeof *p->v, bytes;
        if (dlen / 4 * 3 > room + 2 || b64_decode(data, dlen, (uint8_t *)(p->v + p->got), &bytes) < 0 ||
            bytes % 4 != 0 || bytes == 0 || bytes > room) {
            mparams_refuse(p, n, "data must be base64 of 1 to %" PRIu64 " whole float32s", p->count - p->got);
            return;
        }
        p->got += bytes / 4;
    }
    if (final)
        mparams_final(p, n);
}

bool mparams_coming(const master *m, double *since)
{
    const struct mparams *p = m->params;
    const node *t0 = m->set.ntrainer ? m->trainers[0] : NULL;
    if (!m->set.out_dir || !t0 || !t0->registered || !t0->bev)
        return false; /* not asked, or nobody left to send them */
    if (p && p->state != MP_WAITING && p->state != MP_COMING)
        return false;
    *since = p ? p->t_part : 0;
    return true;
}

/* results.json's final_params: the file and its figures, or why none. */
static json_t *mparams_json(const master *m, const struct mparams *p, bool written)
{
    json_t *o = json_pack("{s:i}", "trainer", 0);
    mparams_state st = p ? p->state : MP_WAITING;
    bool known = st == MP_WHOLE || st == MP_SUMMARY;
    json_object_set_new(o, "file", written ? json_string(MPARAMS_FILE) : json_null());
    json_object_set_new(o, "count", known ? json_integer((json_int_t)p->count) : json_null());
    json_object_set_new(o, "sha256", known && p->sha256[0] ? json_string(p->sha256) : json_null());
    json_object_set_new(o, "l2_norm", known && p->sha256[0] ? json_real(p->l2_norm) : json_null());
    char why[400] = "";
    if (st == MP_SUMMARY && !p->sha256[0])
        snprintf(why, sizeof why, "the model has no parameters");
    else if (st == MP_SUMMARY)
        snprintf(why, sizeof why,
                 "the model has %" PRIu64 " parameters, more than the %" PRIu64 " (%.3g MiB) this run records "
                 "(--params-max, at most %" PRIu64 "): their norm and digest only",
                 p->count, p->max, (double)p->max * 4 / (1 << 20), PARAMSFILE_MAX_FLOATS);
    else if (st == MP_REFUSED)
        snprintf(why, sizeof why, "trainer 0 sent a bad params part: %s", p->why);
    else if (st != MP_WHOLE)
        snprintf(why, sizeof why, "%s",
                 m->state == RUN_FAILED ? "the run failed: trainer 0 sent no final parameters"
                                        : "trainer 0's final parameters did not come before "
                                          "the run's files were written");
    json_object_set_new(o, "why", why[0] ? json_string(why) : json_null());
    return o;
}

int mparams_write(master *m, const char *dir, json_t *doc, char *err, size_t errlen)
{
    struct mparams *p = m->params;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, MPARAMS_FILE);
    bool whole = p && p->state == MP_WHOLE;
    if (whole && paramsfile_write(path, p->v, p->count, p->sha256, err, errlen) < 0)
        return -1;
    if (!whole && unlink(path) < 0 && errno != ENOENT) /* an earlier job's: it would pass for this run's */
        log_warn("cannot remove %s, an earlier job's: %s", path, strerror(errno));
    json_object_set_new(doc, "final_params", mparams_json(m, p, whole));
    /* A refused part was said when it came; a missing file is said now. */
    if (!whole && (!p || p->state == MP_WAITING || p->state == MP_COMING || p->state == MP_SUMMARY))
        log_info("no %s/%s: %s", dir, MPARAMS_FILE,
                 json_string_value(json_object_get(json_object_get(doc, "final_params"), "why")));
    return 0;
}

void mparams_next_run(master *m) { mparams_free(m); }

void mparams_free(master *m)
{
    if (m->params)
        free(m->params->v);
    free(m->params);
    m->params = NULL;
}
