/* diff_cost.c — what a change to training costs (master/tools/diff_int.h;
 * issue 43: a compressed run beside an fp32 run of the same job): each
 * trainer's loss per epoch in both runs with B-A, and the relative L2
 * distance ||B-A|| / ||A|| of the final parameters, exact, from the
 * params.bin files results.json's final_params names (shared/
 * paramsfile.h). A distance that cannot be given says why ("not
 * comparable: ..."), never nothing. */
#include "master/tools/diff_int.h"
#include "shared/paramsfile.h"
#include "shared/text.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A loss as results.json has it: a number, or "nan", "inf", "-inf"
 * (JSON has none of them); false for anything else (null: no loss). */
static bool cost_loss(json_t *v, double *x)
{
    if (json_is_number(v)) {
        *x = json_number_value(v);
        return true;
    }
    const char *s = json_string_value(v);
    if (!s)
        return false;
    *x = strcmp(s, "nan") == 0 ? NAN : strcmp(s, "inf") == 0 ? INFINITY : strcmp(s, "-inf") == 0 ? -INFINITY : 0;
    return strcmp(s, "nan") == 0 || strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0;
}

/* trainers[r].loss_per_epoch of a document, or NULL. */
static json_t *cost_losses(json_t *doc, size_t r)
{
    json_t *l = json_object_get(json_array_get(json_object_get(doc, "trainers"), r), "loss_per_epoch");
    return json_is_array(l) ? l : NULL;
}

static void cost_csv_num(FILE *csv, bool have, double v)
{
    if (have && isfinite(v))
        fprintf(csv, ",%.9g", v);
    else
        fputc(',', csv);
}

/* Every trainer's loss per epoch that both runs have: a line per epoch. */
static void cost_losses_table(FILE *out, FILE *csv, json_t *a, json_t *b)
{
    size_t na = json_array_size(json_object_get(a, "trainers")), nb = json_array_size(json_object_get(b, "trainers"));
    size_t n = na < nb ? na : nb, shown = 0;
    for (size_t r = 0; r < n; r++) {
        json_t *la = cost_losses(a, r), *lb = cost_losses(b, r);
        if (!la || !lb)
            continue;
        size_t ne = json_array_size(la) > json_array_size(lb) ? json_array_size(la) : json_array_size(lb);
        for (size_t e = 0; e < ne; e++) {
            double x = 0, y = 0;
            bool ha = cost_loss(json_array_get(la, e), &x), hb = cost_loss(json_array_get(lb, e), &y);
            if (shown++ == 0)
                fprintf(out, "%-7s  %5s  %14s  %14s  %14s\n", "trainer", "epoch", "A", "B", "B-A");
            char ca[32] = "-", cb[32] = "-", cd[32] = "-";
            if (ha)
                snprintf(ca, sizeof ca, "%.9g", x);
            if (hb)
                snprintf(cb, sizeof cb, "%.9g", y);
            if (ha && hb)
                snprintf(cd, sizeof cd, "%+.3g", y - x);
            fprintf(out, "%7zu  %5zu  %14s  %14s  %14s\n", r, e + 1, ca, cb, cd);
            if (csv) {
                fprintf(csv, "training,%zu,loss_epoch_%zu,mean", r, e + 1);
                cost_csv_num(csv, ha, x);
                cost_csv_num(csv, hb, y);
                cost_csv_num(csv, ha && hb, y - x);
                if (ha && hb && x != 0 && isfinite(x) && isfinite(y))
                    fprintf(csv, ",%.6g\n", 100.0 * (y - x) / fabs(x));
                else
                    fprintf(csv, ",\n");
            }
        }
    }
    if (shown == 0)
        fprintf(out, "loss per epoch: not comparable: %s\n",
                na == 0 || nb == 0 ? "a run has no trainers"
                                   : "no trainer of both runs reported one (a model "
                                     "without a loss: Synthetic)");
}

/* One side's final parameters: read from the file its final_params names,
 * beside its results.json, and checked against its digest. *v NULL with
 * why where there are none to compare. */
typedef struct cost_side {
    float *v;
    uint64_t n;
    double norm; /* NAN: not known */
} cost_side;

static void cost_side_load(const char *results, json_t *doc, cost_side *s, char *why, size_t len)
{
    memset(s, 0, sizeof *s);
    s->norm = NAN;
    json_t *fp = json_object_get(doc, "final_params");
    json_t *norm = json_object_get(fp, "l2_norm");
    if (json_is_number(norm))
        s->norm = json_number_value(norm);
    const char *slash = strrchr(results, '/');
    char dir[4200];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - results) : 1, slash ? results : ".");
    if (slash == results)
        snprintf(dir, sizeof dir, "/");
    if (paramsfile_of_results(dir, results, fp, &s->v, &s->n, why, len) == 0)
        s->norm = paramsfile_l2_norm(s->v, s->n);
}

void diff_training(FILE *out, FILE *csv, const char *const *files, json_t *a, json_t *b)
{
    fprintf(out, "\n== training: the loss per epoch (each trainer's mean), the final parameters (trainer 0's) ==\n");
    cost_losses_table(out, csv, a, b);
    cost_side sa, sb;
    char wa[1200] = "", wb[1200] = "";
    cost_side_load(files[0], a, &sa, wa, sizeof wa);
    cost_side_load(files[1], b, &sb, wb, sizeof wb);
    char na[32] = "-", nb[32] = "-";
    if (isfinite(sa.norm))
        snprintf(na, sizeof na, "%.9g", sa.norm);
    if (isfinite(sb.norm))
        snprintf(nb, sizeof nb, "%.9g", sb.norm);
    fprintf(out, "final parameters: ||A|| %s, ||B|| %s\n", na, nb);
    double d = NAN;
    if (!sa.v || !sb.v)
        fprintf(out, "relative distance ||B-A||/||A||: not comparable: %s\n", !sa.v ? wa : wb);
    else if (sa.n != sb.n)
        fprintf(out,
                "relative distance ||B-A||/||A||: not comparable: A has %llu parameters, B %llu (another "
                "model)\n",
                (unsigned long long)sa.n, (unsigned long long)sb.n);
    else
        fprintf(out, "relative distance ||B-A||/||A||: %.6g (%llu parameters)\n",
                d = paramsfile_rel_distance(sa.v, sb.v, sa.n), (unsigned long long)sa.n);
    if (csv) {
        fprintf(csv, "training,0,final_params,l2_norm");
        cost_csv_num(csv, isfinite(sa.norm), sa.norm);
        cost_csv_num(csv, isfinite(sb.norm), sb.norm);
        cost_csv_num(csv, isfinite(sa.norm) && isfinite(sb.norm), sb.norm - sa.norm);
        if (isfinite(sa.norm) && isfinite(sb.norm) && sa.norm != 0)
            fprintf(csv, ",%.6g\n", 100.0 * (sb.norm - sa.norm) / sa.norm);
        else
            fprintf(csv, ",\n");
        /* The distance in b_minus_a (it is B's from A); empty where not comparable. */
        fprintf(csv, "training,0,final_params,relative_l2_distance,,");
        cost_csv_num(csv, !isnan(d), d);
        fprintf(csv, ",\n");
    }
    free(sa.v);
    free(sb.v);
}
