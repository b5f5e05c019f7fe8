/* config.c — the master's run configuration as a whole (see config.h): its
 * lifetime, the command line (master/opts.c's table), the order of its
 * checks (config_resolve), the ids --help lists. The checks of the flags
 * are config_check.c, the configs/ files config_load.c, the JSON made of
 * it config_json.c, the passes it asks for config_passes.c. */
#include "master/config.h"
#include "master/opts.h"
#include "shared/cli.h"
#include "shared/userpath.h"

#include <stdlib.h>
#include <string.h>

/* ---- lifetime ------------------------------------------------------------ */

void config_free(run_config *c)
{
    if (!c)
        return;
    config_unload(c);
    json_decref(c->trainer_flags);
    c->trainer_flags = NULL;
    json_decref(c->set_flags);
    c->set_flags = NULL;
    char **s[] = {&c->trainer, &c->server, &c->data, &c->model, &c->backend, &c->data_config_path,
                  &c->model_config_path, &c->trainer_config_path, &c->server_config_path, &c->ddp_hook,
                  &c->rpc_pattern, &c->placement, &c->listen, &c->http, &c->out_dir, &c->token, &c->token_file,
                  &c->tables, &c->trace_steps};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        free(*s[i]);
        *s[i] = NULL;
    }
}

/* ---- the command line (master/opts.c's table) ----------------------------------- */

int config_init(run_config *c)
{
    memset(c, 0, sizeof *c);
    char err[256];
    if (opts_init(master_opts(), c, err, sizeof err) < 0) {
        config_free(c);
        return -1;
    }
    return 0;
}

void config_usage(FILE *f)
{
    opts_usage(master_opts(), f);
}

int config_parse_args(run_config *c, int argc, char **argv, char *err, size_t errlen)
{
    if (config_init(c) < 0) {
        errbuf_set(err, errlen, "out of memory");
        return -1;
    }
    int rc = opts_parse(master_opts(), argc, argv, c, err, errlen);
    if (rc != OPTS_OK)
        return rc;
    return master_opts_finish(c, err, errlen);
}

/* ---- the checks in order ------------------------------------------------------ */

int config_resolve(run_config *c, char *err, size_t errlen)
{
    if (config_check_flags(c, err, errlen) < 0 || config_load(c, err, errlen) < 0 ||
        config_check_fit(c, err, errlen) < 0)
        return -1;
    return 0;
}

/* ---- --help's ids --------------------------------------------------------------- */

/* The ids of one configuration file on f, wrapped under its flag; a file
 * that cannot be read says so (--help never fails on a file). */
static void config_file_ids(FILE *f, const char *flag, const char *path)
{
    json_t *root;
    json_error_t je;
    char why[256];
    (void)userpath_load_json(path, 0, &root, &je, why, sizeof why); /* a FIFO must not hang --help */
    fprintf(f, "  %-10s", flag);
    if (!json_is_object(root)) {
        fprintf(f, "(cannot read %s)\n", path);
        json_decref(root);
        return;
    }
    size_t col = 12, n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        size_t w = strlen(k) + (n ? 2 : 0);
        if (n && col + w > 80) {
            fprintf(f, ",\n%12s%s", "", k);
            col = 12 + strlen(k);
        } else {
            fprintf(f, "%s%s", n ? ", " : "", k);
            col += w;
        }
        n++;
    }
    fprintf(f, "%s\n", n ? "" : "none");
    json_decref(root);
}

void config_usage_ids(const run_config *c, FILE *f)
{
    fprintf(f, "\nConfiguration IDs (from the files --data-config-path etc. name, now):\n");
    config_file_ids(f, "--data", c->data_config_path);
    config_file_ids(f, "--model", c->model_config_path);
    config_file_ids(f, "--trainer", c->trainer_config_path);
    config_file_ids(f, "--server", c->server_config_path);
}

