/* `rgpu smi`'s table from fixed snapshots: what it prints for a GPU with
 * every figure (as from a real NVML), for softgpu (N/A where it has no
 * figure), for sessions and for a device without an answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_smi.h"

static void set_fig(rgpu_nvml_snapshot *s, int fig, uint64_t v) {
  s->fig_status[fig] = NVML_SUCCESS;
  s->fig_value[fig] = v;
}

static void blank(rgpu_nvml_snapshot *s) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < RGPU_NVML_FIG_COUNT; i++) s->fig_status[i] = NVML_ERROR_NOT_SUPPORTED;
}

/* Formats v into a heap string (caller frees). */
static char *format(const rgpu_smi_view *v) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  rgpu_smi_format(f, v);
  fclose(f);
  return text;
}

static int has(const char *text, const char *needle) {
  if (strstr(text, needle)) return 1;
  print_message("output lacks '%s':\n%s\n", needle, text);
  return 0;
}

static void test_real_gpu_row(void **state) {
  (void)state;
  rgpu_nvml_snapshot s;
  blank(&s);
  snprintf(s.name, sizeof s.name, "NVIDIA H200");
  snprintf(s.bus_id, sizeof s.bus_id, "00000000:1B:00.0");
  snprintf(s.driver_version, sizeof s.driver_version, "580.159.04");
  s.cuda_driver_version = 13000;
  set_fig(&s, RGPU_NVML_FIG_TEMP_GPU, 34);
  set_fig(&s, RGPU_NVML_FIG_POWER, 121500);       /* mW */
  set_fig(&s, RGPU_NVML_FIG_POWER_LIMIT, 700000);
  set_fig(&s, RGPU_NVML_FIG_MEM_USED, 1024ull << 20);
  set_fig(&s, RGPU_NVML_FIG_MEM_TOTAL, 143771ull << 20);
  set_fig(&s, RGPU_NVML_FIG_UTIL_GPU, 87);
  int failed = 0;
  rgpu_smi_view v = {.server = "tcp://gpu:7000", .device_kind = "cuda", .ndev = 1, .devs = &s,
                     .dev_failed = &failed};
  char *t = format(&v);
  assert_true(has(t, "rgpu smi  tcp://gpu:7000 (cuda)"));
  assert_true(has(t, "Driver Version: 580.159.04    CUDA Version: 13.0"));
  assert_true(has(t, "|   0 | NVIDIA H200"));
  assert_true(has(t, "| 00000000:1B:00.0 |"));
  assert_true(has(t, "|  34C |"));
  assert_true(has(t, "121W / 700W"));
  assert_true(has(t, "1024MiB / 143771MiB"));
  assert_true(has(t, "|  87% |"));
  assert_true(has(t, "No running processes found"));
  free(t);
}

static void test_softgpu_and_sessions(void **state) {
  (void)state;
  rgpu_nvml_snapshot s[2];
  blank(&s[0]);
  blank(&s[1]);
  snprintf(s[0].name, sizeof s[0].name, "rgpu softgpu (CPU, sm_75)");
  snprintf(s[0].bus_id, sizeof s[0].bus_id, "00000000:00:00.0");
  s[0].cuda_driver_version = 12080;
  set_fig(&s[0], RGPU_NVML_FIG_MEM_USED, 8ull << 20);
  set_fig(&s[0], RGPU_NVML_FIG_MEM_TOTAL, 4096ull << 20);
  s[0].n_procs = s[0].n_procs_total = 2;
  s[0].procs[0] = (rgpu_nvml_proc){.pid = 4242, .mem = 8ull << 20, .session = 3, .name = "vecadd"};
  s[0].procs[1] = (rgpu_nvml_proc){.pid = 77, .mem = 1, .session = 9, .name = ""};
  int failed[2] = {0, 1};
  rgpu_smi_view v = {.server = "unix:///tmp/x", .device_kind = "softgpu", .ndev = 2, .devs = s,
                     .dev_failed = failed};
  char *t = format(&v);
  assert_true(has(t, "Driver Version: N/A    CUDA Version: 12.8"));
  assert_true(has(t, "rgpu softgpu (CPU, sm_75)"));
  /* softgpu has no sensors: N/A, never a number. */
  assert_true(has(t, "|  N/A |"));
  assert_true(has(t, "N/A / N/A"));
  assert_true(has(t, "8MiB / 4096MiB"));
  assert_true(has(t, "|   1 | no answer from the server for this GPU"));
  assert_true(has(t, "|   0 |       4242 |          3 | vecadd"));
  assert_true(has(t, "8MiB |"));
  /* One byte still shows as 1 MiB, and a nameless session as '?'. */
  assert_true(has(t, "|         77 |          9 | ?"));
  assert_true(has(t, "        1MiB |"));
  assert_null(strstr(t, "No running processes found"));
  free(t);
}

static void test_no_gpus(void **state) {
  (void)state;
  rgpu_smi_view v = {.server = "tcp://x:1", .device_kind = "softgpu", .ndev = 0};
  char *t = format(&v);
  assert_true(has(t, "No GPUs on this server"));
  assert_true(has(t, "Driver Version: N/A    CUDA Version: N/A"));
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_gpu_row),
      cmocka_unit_test(test_softgpu_and_sessions),
      cmocka_unit_test(test_no_gpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
