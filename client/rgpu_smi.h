/* `rgpu smi`: the nvidia-smi-like table of a server's GPUs and of the
 * sessions using them, from NVML_QUERY (nvml/rgpu_nvml_snapshot.h).
 * The formatting is pure (a view in, text out), so it is unit-tested
 * without a server (rgpu_smi_test.c). */
#ifndef RGPU_SMI_H
#define RGPU_SMI_H

#include <stdio.h>

#include "rgpu_nvml_snapshot.h"

typedef struct {
  const char *server;        /* the server's URI, as shown */
  const char *device_kind;   /* "softgpu", "cuda" (HELLO's answer) */
  unsigned int ndev;
  const rgpu_nvml_snapshot *devs; /* ndev entries */
  const int *dev_failed;     /* ndev flags: 1 = no answer for that device */
} rgpu_smi_view;

/* Writes the table: a header line (server, driver and CUDA versions), one
 * row per GPU (index, name, bus id, temperature, power, memory used/total,
 * utilization; "N/A" for what the server does not report), then one row
 * per session using a GPU (GPU, client pid, session id, program name,
 * memory), or "No running processes found". */
void rgpu_smi_format(FILE *out, const rgpu_smi_view *v);

#endif
