/* launchenv.h — a rank's place in a launcher's world, read from the
 * environment the launcher set (torchrun, Kubeflow's PyTorchJob, Slurm's
 * srun, a Kubernetes Indexed Job or JobSet, Ray Train), and the rank-to-role
 * map of psbench-node (launch/main.c). psbench-node reads it; so does
 * scripts/psbench-slurm, through `psbench-node --print-hostnames`.
 *
 * Each value has one source, the first that is set, in this order: the
 * command line's flag, psbench's own PSBENCH_* variable, then the
 * launcher's variables:
 *
 *   value        flag            PSBENCH_*             launchers
 *   rank         --rank          PSBENCH_RANK          RANK, SLURM_PROCID, JOB_COMPLETION_INDEX
 *   world size   --world-size    PSBENCH_WORLD_SIZE    WORLD_SIZE, SLURM_NTASKS
 *   local rank   --local-rank    PSBENCH_LOCAL_RANK    LOCAL_RANK, SLURM_LOCALID
 *   master host  --master-addr   PSBENCH_MASTER_ADDR   MASTER_ADDR, the first host of
 *                                                      SLURM_STEP_NODELIST or SLURM_JOB_NODELIST
 *   control port --port          PSBENCH_PORT          MASTER_PORT + 1 (else 29500)
 *   HTTP port    --http-port     PSBENCH_HTTP_PORT     MASTER_PORT + 2 (else 8080)
 *
 * The ports are MASTER_PORT + 1 and + 2, never MASTER_PORT itself: torchrun
 * (and PyTorchJob's elastic mode) keeps its own TCPStore on MASTER_PORT on
 * rank 0's host. Each value remembers what gave it ("RANK",
 * "MASTER_PORT+1", "--rank", "default"): the start line and results.json
 * name them. The launcher's name is what its variables say: "torchrun"
 * (TORCHELASTIC_RUN_ID is set), "pytorch" (RANK or MASTER_ADDR without it:
 * PyTorchJob, Ray Train), "slurm", "kubernetes" (JOB_COMPLETION_INDEX), or
 * "psbench" when only flags and PSBENCH_* gave the place.
 *
 * The environment is an envp array ("NAME=VALUE", NULL-terminated), so that
 * the tests hand their own.
 */
#ifndef PSBENCH_LAUNCHENV_H
#define PSBENCH_LAUNCHENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds: a world of at most LAUNCH_MAX_WORLD ranks; a node list expanding
 * to at most LAUNCH_MAX_HOSTS names (a typo like n[1-999999999] is refused,
 * not expanded). */
#define LAUNCH_MAX_WORLD 65536u
#define LAUNCH_MAX_HOSTS 65536u
#define LAUNCH_DEFAULT_PORT 29500u
#define LAUNCH_DEFAULT_HTTP_PORT 8080u

typedef struct launch_num {
    bool set;
    uint32_t v;
    char from[48]; /* "RANK", "--rank", "MASTER_PORT+1", "default" */
} launch_num;

typedef struct launch_str {
    bool set;
    char v[256];
    char from[48];
} launch_str;

/* The command line's values (NULL: not given), as typed. */
typedef struct launch_flags {
    const char *rank, *world_size, *local_rank, *master_addr, *port, *http_port;
} launch_flags;

typedef struct launch_place {
    char launcher[16]; /* see above; "" when nothing gave a rank */
    launch_num rank, world, local_rank, port, http_port;
    launch_str master_addr;
} launch_place;

/* Read the place: flags first, then envp. A value that is set but malformed
 * (RANK=x, MASTER_PORT=70000, a node list that does not parse) is an error
 * naming its source, never skipped for the next source. Values that are
 * absent stay unset (the ports get their defaults). 0, or -1 with err. */
int launch_read(launch_place *p, const launch_flags *f, char *const *envp, char *err, size_t errlen);

/* The value of NAME in envp, or NULL. */
const char *launch_getenv(char *const *envp, const char *name);

/* ---- Slurm's host lists ------------------------------------------------ */

/* Called with each host of a list in order; return non-zero to stop. */
typedef int (*launch_host_fn)(const char *host, void *ctx);

/* Expand a Slurm host list as `scontrol show hostnames` does: comma-
 * separated items, each a name with bracketed ranges ("node[01-03,7]",
 * "a[1-2],b3", "rack[1-2]-n[1-2]"), zero padding kept (the width of the
 * range's first number). Returns the count of hosts, or -1 with err (an
 * empty list or item, unbalanced or nested brackets, a range that is not
 * N or N-M with N <= M, more than LAUNCH_MAX_HOSTS hosts, a host over 255
 * characters). fn may be NULL (a check). */
long launch_hostlist_expand(const char *list, launch_host_fn fn, void *ctx, char *err, size_t errlen);

/* The list's first host into out. 0, or -1 with err. */
int launch_hostlist_first(const char *list, char *out, size_t outlen, char *err, size_t errlen);

/* ---- the rank-to-role map ---------------------------------------------- */

typedef enum launch_role {
    LAUNCH_TRAINER = 0,
    LAUNCH_SERVER,
    LAUNCH_MASTER,
} launch_role;

/* The job's counts, as psbench-master takes them, and where the master is.
 * The map, PyTorch's RPC benchmark launcher's by default: ranks 0 .. T-1
 * the trainers (the CPU ones, then the CUDA ones), the next S the servers
 * (CPU, then CUDA), the last the master; master_first puts the master on
 * rank 0 and shifts the others up by one. */
typedef struct launch_map {
    uint32_t ntrainer, ncudatrainer, nserver, ncudaserver;
    bool master_first;
} launch_map;

/* The counts given (set: the flag was given) and the world size: each one
 * not given is derived, the trainers' count last. */
typedef struct launch_counts {
    bool ntrainer_set, nserver_set;
    uint32_t ntrainer, ncudatrainer, nserver, ncudaserver;
} launch_counts;

/* The map for a world of `world` ranks (0: unknown, then both counts must
 * be given): a count not given is derived from the world size (the servers
 * default to 1 when neither is given), and the world must be exactly
 * T + S + 1 with at least one trainer. 0, or -1 with err naming the sizes. */
int launch_map_make(launch_map *m, const launch_counts *c, uint32_t world, const char *world_from, char *err,
                    size_t errlen);

/* T + S + 1. */
uint32_t launch_map_world(const launch_map *m);

/* Rank r's role, its rank among that role's nodes, and whether it is one of
 * the CUDA ones. 0, or -1 when r is outside the world. */
int launch_map_role(const launch_map *m, uint32_t r, launch_role *role, uint32_t *role_rank, bool *cuda);

/* "trainer", "server", "master". */
const char *launch_role_name(launch_role role);

#endif
