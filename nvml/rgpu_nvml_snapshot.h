/* One device's NVML figures as the server reported them (NVML_QUERY),
 * decoded into plain memory.  Used by the NVML facade (cached per device)
 * and by `rgpu smi`; pure: no connection, no globals. */
#ifndef RGPU_NVML_SNAPSHOT_H
#define RGPU_NVML_SNAPSHOT_H

#include <stdint.h>

#include "rgpu_messages.h"
#include "rgpu_nvml_figures.h"
#include "rgpu_nvml_types.h"

/* Sessions kept per device; a longer list is cut (n_procs_total says how
 * long it was). */
#define RGPU_NVML_MAX_PROCS 64

typedef struct {
  uint32_t pid;       /* the client's pid (its machine, not the server's) */
  uint64_t mem;       /* bytes the session holds on the server */
  uint64_t session;   /* the server's session id */
  char name[32];      /* the client's program name from HELLO */
} rgpu_nvml_proc;

typedef struct {
  uint32_t nvml_status; /* NVML_SUCCESS: figures from the server's NVML */
  char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
  int cuda_driver_version;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
  uint32_t fig_status[RGPU_NVML_FIG_COUNT];
  uint64_t fig_value[RGPU_NVML_FIG_COUNT];
  uint32_t n_procs, n_procs_total;
  rgpu_nvml_proc procs[RGPU_NVML_MAX_PROCS];
} rgpu_nvml_snapshot;

/* Fills s from a decoded reply.  Figures the reply lacks (an older
 * server) read as NVML_ERROR_NOT_SUPPORTED; strings are cut to their
 * buffers.  Returns 0, or -1 when the reply is inconsistent (process
 * arrays of different lengths). */
int rgpu_nvml_snapshot_from_reply(rgpu_nvml_snapshot *s, const rgpu_msg_nvml_query_rep *r);

/* Figure i: its status, and its value in *v when the status is success. */
static inline nvmlReturn_t rgpu_nvml_fig(const rgpu_nvml_snapshot *s, int i, uint64_t *v) {
  if (i < 0 || i >= RGPU_NVML_FIG_COUNT) return NVML_ERROR_NOT_SUPPORTED;
  if (s->fig_status[i] == NVML_SUCCESS && v) *v = s->fig_value[i];
  return (nvmlReturn_t)s->fig_status[i];
}

#endif
