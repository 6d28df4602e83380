/* `rgpu smi` formatting (see rgpu_smi.h). */
#include "rgpu_smi.h"

#include <inttypes.h>
#include <string.h>

#define MIB (1024u * 1024u)

/* One cell: the figure formatted with fmt (and scaled by div), or N/A. */
static void cell(char *buf, size_t cap, const rgpu_nvml_snapshot *s, int fig, const char *fmt,
                 uint64_t div) {
  uint64_t v = 0;
  if (rgpu_nvml_fig(s, fig, &v) == NVML_SUCCESS)
    snprintf(buf, cap, fmt, v / div);
  else
    snprintf(buf, cap, "N/A");
}

static const char *k_rule =
    "+-----+----------------------------------+------------------+------+-----------------+-----------------------+------+\n";

void rgpu_smi_format(FILE *out, const rgpu_smi_view *v) {
  const rgpu_nvml_snapshot *first = NULL;
  for (unsigned int i = 0; i < v->ndev && !first; i++)
    if (!v->dev_failed || !v->dev_failed[i]) first = &v->devs[i];
  char cuda[32] = "N/A";
  if (first && first->cuda_driver_version > 0)
    snprintf(cuda, sizeof cuda, "%d.%d", first->cuda_driver_version / 1000,
             (first->cuda_driver_version % 1000) / 10);
  fprintf(out, "rgpu smi  %s (%s)\n", v->server ? v->server : "?",
          v->device_kind ? v->device_kind : "?");
  fprintf(out, "Driver Version: %s    CUDA Version: %s\n",
          first && first->driver_version[0] ? first->driver_version : "N/A", cuda);
  fputs(k_rule, out);
  fprintf(out, "| %-3s | %-32s | %-16s | %-4s | %-15s | %-21s | %-4s |\n", "GPU", "Name", "Bus-Id",
          "Temp", "Power (use/cap)", "Memory (used/total)", "Util");
  fputs(k_rule, out);
  if (v->ndev == 0) fprintf(out, "| %-110s |\n", "No GPUs on this server");
  for (unsigned int i = 0; i < v->ndev; i++) {
    const rgpu_nvml_snapshot *s = &v->devs[i];
    if (v->dev_failed && v->dev_failed[i]) {
      fprintf(out, "| %3u | %-104s |\n", i, "no answer from the server for this GPU");
      continue;
    }
    char temp[24], pw[24], cap[24], used[24], total[24], util[24], power[56], mem[56];
    cell(temp, sizeof temp, s, RGPU_NVML_FIG_TEMP_GPU, "%" PRIu64 "C", 1);
    cell(pw, sizeof pw, s, RGPU_NVML_FIG_POWER, "%" PRIu64 "W", 1000);
    cell(cap, sizeof cap, s, RGPU_NVML_FIG_POWER_LIMIT, "%" PRIu64 "W", 1000);
    cell(used, sizeof used, s, RGPU_NVML_FIG_MEM_USED, "%" PRIu64 "MiB", MIB);
    cell(total, sizeof total, s, RGPU_NVML_FIG_MEM_TOTAL, "%" PRIu64 "MiB", MIB);
    cell(util, sizeof util, s, RGPU_NVML_FIG_UTIL_GPU, "%" PRIu64 "%%", 1);
    snprintf(power, sizeof power, "%s / %s", pw, cap);
    snprintf(mem, sizeof mem, "%s / %s", used, total);
    fprintf(out, "| %3u | %-32.32s | %-16.16s | %4s | %15s | %21s | %4s |\n", i, s->name,
            s->bus_id[0] ? s->bus_id : "N/A", temp, power, mem, util);
  }
  fputs(k_rule, out);
  fprintf(out, "\nProcesses (rgpu sessions; PID on the client's machine)\n");
  fprintf(out, "| %-3s | %-10s | %-10s | %-32s | %-12s |\n", "GPU", "PID", "Session", "Name",
          "GPU Memory");
  int any = 0;
  for (unsigned int i = 0; i < v->ndev; i++) {
    if (v->dev_failed && v->dev_failed[i]) continue;
    const rgpu_nvml_snapshot *s = &v->devs[i];
    for (unsigned int k = 0; k < s->n_procs; k++) {
      const rgpu_nvml_proc *p = &s->procs[k];
      fprintf(out, "| %3u | %10u | %10" PRIu64 " | %-32.32s | %9" PRIu64 "MiB |\n", i, p->pid,
              p->session, p->name[0] ? p->name : "?", (p->mem + MIB - 1) / MIB);
      any = 1;
    }
    if (s->n_procs_total > s->n_procs)
      fprintf(out, "| %3u | ... and %u more sessions\n", i, s->n_procs_total - s->n_procs);
  }
  if (!any) fprintf(out, "No running processes found\n");
}
