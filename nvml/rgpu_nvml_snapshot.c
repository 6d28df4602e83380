/* NVML_QUERY reply -> rgpu_nvml_snapshot (see rgpu_nvml_snapshot.h). */
#include "rgpu_nvml_snapshot.h"

#include <string.h>

static void copy_str(char *dst, size_t cap, const rgpu_bytes *b) {
  rgpu_str_copy(dst, cap, b->data, b->len < cap - 1 ? b->len : cap - 1);
}

int rgpu_nvml_snapshot_from_reply(rgpu_nvml_snapshot *s, const rgpu_msg_nvml_query_rep *r) {
  memset(s, 0, sizeof *s);
  uint32_t np = r->proc_pid.count;
  if (r->proc_mem.count != np || r->proc_session.count != np || r->proc_name.count != np)
    return -1;
  s->nvml_status = r->nvml_status;
  copy_str(s->driver_version, sizeof s->driver_version, &r->driver_version);
  copy_str(s->nvml_version, sizeof s->nvml_version, &r->nvml_version);
  s->cuda_driver_version = r->cuda_driver_version;
  copy_str(s->name, sizeof s->name, &r->name);
  copy_str(s->uuid, sizeof s->uuid, &r->uuid);
  copy_str(s->bus_id, sizeof s->bus_id, &r->pci_bus_id);
  for (uint32_t i = 0; i < RGPU_NVML_FIG_COUNT; i++) {
    int have = i < r->fig_status.count && i < r->fig_value.count;
    s->fig_status[i] = have ? rgpu_array_u32(&r->fig_status, i) : NVML_ERROR_NOT_SUPPORTED;
    s->fig_value[i] = have && s->fig_status[i] == NVML_SUCCESS ? rgpu_array_u64(&r->fig_value, i) : 0;
  }
  s->n_procs_total = np;
  rgpu_strlist_iter it;
  rgpu_strlist_iter_init(&it, &r->proc_name);
  for (uint32_t i = 0; i < np && i < RGPU_NVML_MAX_PROCS; i++) {
    rgpu_nvml_proc *p = &s->procs[s->n_procs++];
    p->pid = rgpu_array_u32(&r->proc_pid, i);
    p->mem = rgpu_array_u64(&r->proc_mem, i);
    p->session = rgpu_array_u64(&r->proc_session, i);
    const char *name = NULL;
    size_t len = 0;
    if (rgpu_strlist_next(&it, &name, &len)) {
      rgpu_bytes b = {name, len};
      copy_str(p->name, sizeof p->name, &b);
      /* Another client chose this name: keep it to printable ASCII, so a
       * table that shows it cannot be driven by terminal escapes. */
      for (char *c = p->name; *c; c++)
        if (*c < 0x20 || *c > 0x7e) *c = '?';
    }
  }
  return 0;
}
