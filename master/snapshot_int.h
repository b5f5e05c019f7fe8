/* snapshot_int.h — what the master's two renderers of a snapshot share
 * (snapshot.c: the JSON documents; snapshot_prom.c: the Prometheus text):
 * the empty string for a missing one. */
#ifndef PSBENCH_MASTER_SNAPSHOT_INT_H
#define PSBENCH_MASTER_SNAPSHOT_INT_H

static inline const char *snapshot_str(const char *s)
{
    return s ? s : "";
}

#endif
