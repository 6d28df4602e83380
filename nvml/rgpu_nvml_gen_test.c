/* The generator's output (gen_nvml.py from nvml.def): the export table,
 * the nvmlReturn_t texts, the struct layouts of NVIDIA's ABI, and the
 * NVML_QUERY reply decoding into a snapshot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "rgpu_nvml_snapshot.h"
#include "rgpu_nvml_types.h"

static const rgpu_nvml_export *find(const char *name) {
  for (size_t i = 0; i < rgpu_nvml_export_count; i++)
    if (!strcmp(rgpu_nvml_exports[i].name, name)) return &rgpu_nvml_exports[i];
  return NULL;
}

static void test_export_table(void **state) {
  (void)state;
  /* What PyTorch and nvidia-smi-like tools call is implemented. */
  static const char *const served[] = {
      "nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString",
      "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
      "nvmlSystemGetNVMLVersion", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
      "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByPciBusId",
      "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetIndex",
      "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMemoryInfo",
      "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature",
      "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetClockInfo",
      "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetComputeMode", "nvmlDeviceGetCudaComputeCapability",
      "nvmlDeviceGetP2PStatus", "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMinorNumber",
      "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetFanSpeed"};
  for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
    const rgpu_nvml_export *e = find(served[i]);
    if (!e) print_message("missing export %s\n", served[i]);
    assert_non_null(e);
    assert_int_equal(e->implemented, 1);
  }
  /* Listed but answered NOT_SUPPORTED. */
  /* Listed (PyTorch's c10 resolves these at load and asserts they exist)
   * but answered NOT_SUPPORTED. */
  static const char *const stubbed[] = {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemoteDeviceType",
                                        "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetGpuFabricInfoV"};
  for (size_t i = 0; i < sizeof stubbed / sizeof stubbed[0]; i++) {
    const rgpu_nvml_export *e = find(stubbed[i]);
    assert_non_null(e);
    assert_int_equal(e->implemented, 0);
  }
  assert_int_equal(find("nvmlDeviceGetComputeRunningProcesses")->implemented, 1);
  assert_null(find("nvmlNoSuchFunction"));
  /* Names are unique. */
  for (size_t i = 0; i < rgpu_nvml_export_count; i++)
    for (size_t j = i + 1; j < rgpu_nvml_export_count; j++)
      assert_string_not_equal(rgpu_nvml_exports[i].name, rgpu_nvml_exports[j].name);
}

static void test_return_texts(void **state) {
  (void)state;
  assert_string_equal(rgpu_nvml_return_text(NVML_SUCCESS), "Success");
  assert_string_equal(rgpu_nvml_return_text(NVML_ERROR_NOT_SUPPORTED), "Not Supported");
  assert_string_equal(rgpu_nvml_return_text(NVML_ERROR_UNINITIALIZED), "Uninitialized");
  assert_string_equal(rgpu_nvml_return_text(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
  assert_string_equal(rgpu_nvml_return_text(NVML_ERROR_UNKNOWN), "Unknown Error");
  assert_null(rgpu_nvml_return_text(4242));
  assert_string_equal(rgpu_nvml_return_name(3), "NVML_ERROR_NOT_SUPPORTED");
  assert_int_equal(NVML_ERROR_INSUFFICIENT_SIZE, 7);
  assert_int_equal(NVML_ERROR_DRIVER_NOT_LOADED, 9);
  assert_int_equal(NVML_ERROR_UNKNOWN, 999);
}

/* Sizes and offsets as NVIDIA's headers lay them out on x86-64. */
static void test_struct_layouts(void **state) {
  (void)state;
  assert_int_equal(sizeof(nvmlMemory_t), 24);
  assert_int_equal(offsetof(nvmlMemory_t, used), 16);
  assert_int_equal(sizeof(nvmlMemory_v2_t), 40);
  assert_int_equal(offsetof(nvmlMemory_v2_t, total), 8);
  assert_int_equal(offsetof(nvmlMemory_v2_t, used), 32);
  assert_int_equal(nvmlMemory_v2, 40u | (2u << 24));
  assert_int_equal(sizeof(nvmlPciInfo_t), 68);
  assert_int_equal(offsetof(nvmlPciInfo_t, domain), 16);
  assert_int_equal(offsetof(nvmlPciInfo_t, pciSubSystemId), 32);
  assert_int_equal(offsetof(nvmlPciInfo_t, busId), 36);
  assert_int_equal(sizeof(nvmlUtilization_t), 8);
  assert_int_equal(sizeof(nvmlProcessInfo_v1_t), 16);
  assert_int_equal(sizeof(nvmlProcessInfo_t), 24);
  assert_int_equal(offsetof(nvmlProcessInfo_t, gpuInstanceId), 16);
  assert_int_equal(sizeof(nvmlDevice_t), sizeof(void *));
}

static void test_snapshot_from_reply(void **state) {
  (void)state;
  uint32_t st[3] = {NVML_SUCCESS, NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED};
  uint64_t val[3] = {1u << 30, 1u << 29, 77};
  uint32_t pid[2] = {100, 200};
  uint64_t mem[2] = {4096, 8192};
  uint64_t sess[2] = {1, 2};
  const char *names[2] = {"vec\033[2Jadd", "a-name-much-longer-than-thirty-one-characters"};
  rgpu_msg_nvml_query_rep r = {
      .nvml_status = NVML_ERROR_NOT_SUPPORTED,
      .cuda_driver_version = 13000,
      .name = {"rgpu softgpu", 12},
      .uuid = {"GPU-01", 6},
      .pci_bus_id = {"00000000:00:00.0", 16},
      .fig_status = {st, 3},
      .fig_value = {val, 3},
      .proc_pid = {pid, 2},
      .proc_mem = {mem, 2},
      .proc_session = {sess, 2},
      .proc_name = {names, 2},
  };
  /* Through the wire codec, as the facade gets it. */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_nvml_query_rep_encode(&b, &r);
  rgpu_msg_nvml_query_rep d;
  assert_int_equal(rgpu_msg_nvml_query_rep_decode(b.data, b.len, &d), 0);
  rgpu_nvml_snapshot s;
  assert_int_equal(rgpu_nvml_snapshot_from_reply(&s, &d), 0);
  assert_string_equal(s.name, "rgpu softgpu");
  assert_string_equal(s.bus_id, "00000000:00:00.0");
  assert_int_equal(s.cuda_driver_version, 13000);
  uint64_t v = 0;
  assert_int_equal(rgpu_nvml_fig(&s, RGPU_NVML_FIG_MEM_TOTAL, &v), NVML_SUCCESS);
  assert_int_equal(v, 1u << 30);
  /* A status that is not success carries no value; figures past the
   * reply's (an older server) read as not supported. */
  assert_int_equal(rgpu_nvml_fig(&s, RGPU_NVML_FIG_MEM_USED, &v), NVML_ERROR_NOT_SUPPORTED);
  assert_int_equal(s.fig_value[RGPU_NVML_FIG_MEM_USED], 0);
  assert_int_equal(rgpu_nvml_fig(&s, RGPU_NVML_FIG_TEMP_GPU, &v), NVML_ERROR_NOT_SUPPORTED);
  assert_int_equal(s.n_procs, 2);
  assert_int_equal(s.procs[1].pid, 200);
  assert_int_equal(s.procs[1].mem, 8192);
  assert_string_equal(s.procs[0].name, "vec?[2Jadd"); /* no escape reaches a terminal */
  assert_int_equal(strlen(s.procs[1].name), 31);
  /* Process arrays of different lengths are refused. */
  d.proc_mem.count = 1;
  assert_int_equal(rgpu_nvml_snapshot_from_reply(&s, &d), -1);
  rgpu_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_export_table),
      cmocka_unit_test(test_return_texts),
      cmocka_unit_test(test_struct_layouts),
      cmocka_unit_test(test_snapshot_from_reply),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
