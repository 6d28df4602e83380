/* NVML_QUERY in-process on softgpu (rgpu_handlers_nvml.c): what the reply
 * encodes for a device without NVML (softgpu's own figures, NOT_SUPPORTED
 * for what it has no figure of), and the session list, from this session
 * alone and from the server's session table (rgpu_metrics.h). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "rgpu_messages.h"
#include "rgpu_metrics.h"
#include "rgpu_nvml_figures.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_worker.h"

static char softgpu_lib[480];
static char test_driver[480];
static char test_nvml[480];

static harness *harness_new_on(const char *lib) { return harness_open(lib, 7, 0); }

static harness *harness_new(void) { return harness_new_on(softgpu_lib); }

static void hello(harness *t) {
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION, .client_pid = 4321,
                          .client_name = {"nvml-test", 9}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_HELLO, hello, &q, NULL, 0), 0);
}

static void mem_alloc(harness *t, uint64_t size) {
  rgpu_msg_mem_alloc_req q = {.size = size};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_ALLOC, mem_alloc, &q, NULL, 0), 0);
}

static uint32_t nvml_query(harness *t, uint32_t dev, rgpu_msg_nvml_query_rep *r) {
  rgpu_msg_nvml_query_req q = {.device = dev};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_NVML_QUERY, nvml_query, &q, NULL, 0);
  if (st == 0) assert_int_equal(rgpu_msg_nvml_query_rep_decode(t->p, t->h.length, r), 0);
  return st;
}

static uint32_t fig_status(const rgpu_msg_nvml_query_rep *r, int i) { return rgpu_array_u32(&r->fig_status, i); }
static uint64_t fig_value(const rgpu_msg_nvml_query_rep *r, int i) { return rgpu_array_u64(&r->fig_value, i); }

static int have_softgpu(void) {
  if (access(softgpu_lib, R_OK) == 0) return 1;
  print_message("skipped: %s not built\n", softgpu_lib);
  return 0;
}

/* Without a session table (an in-process worker): this session only. */
static void test_softgpu_figures(void **state) {
  (void)state;
  if (!have_softgpu()) skip();
  harness *t = harness_new();
  hello(t);
  rgpu_msg_nvml_query_rep r;
  assert_int_equal(nvml_query(t, 0, &r), 0);
  /* softgpu: not the server's NVML, and said so. */
  assert_int_equal(r.nvml_status, RGPU_NVML_ERROR_NOT_SUPPORTED);
  assert_int_equal(r.driver_version.len, 0);
  assert_true(r.cuda_driver_version >= 12000);
  assert_non_null(memmem(r.name.data, r.name.len, "softgpu", 7));
  assert_int_equal(r.uuid.len, 40); /* GPU-8-4-4-4-12 */
  assert_memory_equal(r.uuid.data, "GPU-", 4);
  assert_int_equal(r.pci_bus_id.len, 16);
  assert_memory_equal(r.pci_bus_id.data, "00000000:00:00.0", 16);
  assert_int_equal(r.fig_status.count, RGPU_NVML_FIG_COUNT);
  assert_int_equal(r.fig_value.count, RGPU_NVML_FIG_COUNT);
  assert_int_equal(fig_status(&r, RGPU_NVML_FIG_MEM_TOTAL), 0);
  uint64_t total = fig_value(&r, RGPU_NVML_FIG_MEM_TOTAL);
  assert_true(total >= (64u << 20));
  assert_int_equal(fig_value(&r, RGPU_NVML_FIG_MEM_USED), 0);
  assert_int_equal(fig_value(&r, RGPU_NVML_FIG_MEM_FREE), total);
  assert_int_equal(fig_status(&r, RGPU_NVML_FIG_CC_MAJOR), 0);
  assert_true(fig_value(&r, RGPU_NVML_FIG_CC_MAJOR) >= 7);
  /* No sensors on softgpu: not supported, and no value travels. */
  static const int none[] = {RGPU_NVML_FIG_TEMP_GPU, RGPU_NVML_FIG_POWER, RGPU_NVML_FIG_UTIL_GPU,
                             RGPU_NVML_FIG_FAN, RGPU_NVML_FIG_CLOCK_SM, RGPU_NVML_FIG_POWER_LIMIT};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    assert_int_equal(fig_status(&r, none[i]), RGPU_NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(fig_value(&r, none[i]), 0);
  }
  /* No context yet: the session does not use the device. */
  assert_int_equal(r.proc_pid.count, 0);

  mem_alloc(t, 3u << 20);
  assert_int_equal(nvml_query(t, 0, &r), 0);
  assert_int_equal(r.proc_pid.count, 1);
  assert_int_equal(r.proc_mem.count, 1);
  assert_int_equal(r.proc_name.count, 1);
  assert_int_equal(rgpu_array_u32(&r.proc_pid, 0), 4321);
  assert_int_equal(rgpu_array_u64(&r.proc_mem, 0), 3u << 20);
  assert_int_equal(rgpu_array_u64(&r.proc_session, 0), 7);
  rgpu_strlist_iter it;
  rgpu_strlist_iter_init(&it, &r.proc_name);
  const char *name;
  size_t len;
  assert_true(rgpu_strlist_next(&it, &name, &len));
  assert_int_equal(len, 9);
  assert_memory_equal(name, "nvml-test", 9);
  /* The device's memory in use is what the sessions hold. */
  assert_int_equal(fig_value(&r, RGPU_NVML_FIG_MEM_USED), 3u << 20);
  assert_int_equal(fig_value(&r, RGPU_NVML_FIG_MEM_FREE), total - (3u << 20));

  /* A device that does not exist is the client's error, with a reason. */
  assert_int_equal(nvml_query(t, 9, &r), CUDA_ERROR_INVALID_DEVICE);
  harness_free(t);
}

/* A real GPU: the figures come from the server's NVML (here a fake
 * libnvidia-ml.so.1 with fixed figures, found by the device's UUID), each
 * with NVML's own status; name and compute capability stay CUDA's. */
static void test_server_nvml(void **state) {
  (void)state;
  harness *t = harness_new_on(test_driver);
  hello(t);
  rgpu_msg_nvml_query_rep r;
  assert_int_equal(nvml_query(t, 0, &r), 0);
  assert_int_equal(r.nvml_status, 0);
  assert_int_equal(r.driver_version.len, 10);
  assert_memory_equal(r.driver_version.data, "580.159.04", 10);
  assert_int_equal(r.nvml_version.len, 13);
  assert_int_equal(r.cuda_driver_version, 13000);
  assert_int_equal(r.name.len, 16);
  assert_memory_equal(r.name.data, "rgpu test driver", 16);
  assert_int_equal(r.uuid.len, 40);
  assert_memory_equal(r.uuid.data, "GPU-01020304-0506-0708-090a-0b0c0d0e0f10", 40);
  assert_int_equal(r.pci_bus_id.len, 16);
  assert_memory_equal(r.pci_bus_id.data, "00000000:1B:00.0", 16);
  static const struct {
    int fig;
    uint64_t v;
  } want[] = {
      {RGPU_NVML_FIG_MEM_TOTAL, 143771ull << 20}, {RGPU_NVML_FIG_MEM_USED, 1024ull << 20},
      {RGPU_NVML_FIG_MEM_FREE, 142747ull << 20},  {RGPU_NVML_FIG_MEM_RESERVED, 512ull << 20},
      {RGPU_NVML_FIG_UTIL_GPU, 55},               {RGPU_NVML_FIG_UTIL_MEM, 22},
      {RGPU_NVML_FIG_TEMP_GPU, 41},               {RGPU_NVML_FIG_POWER, 123456},
      {RGPU_NVML_FIG_POWER_LIMIT, 700000},        {RGPU_NVML_FIG_CLOCK_GRAPHICS, 990},
      {RGPU_NVML_FIG_CLOCK_MEM, 1600},            {RGPU_NVML_FIG_MAXCLOCK_SM, 1980},
      {RGPU_NVML_FIG_MAXCLOCK_VIDEO, 1755},       {RGPU_NVML_FIG_COMPUTE_MODE, 3},
      {RGPU_NVML_FIG_PERSISTENCE, 1},             {RGPU_NVML_FIG_PSTATE, 0},
      {RGPU_NVML_FIG_MINOR, 3},                   {RGPU_NVML_FIG_CC_MAJOR, 7},
      {RGPU_NVML_FIG_CC_MINOR, 5},                {RGPU_NVML_FIG_PCI_BUS, 0x1b},
      {RGPU_NVML_FIG_PCI_DEVICE_ID, 0x233510DE},  {RGPU_NVML_FIG_PCI_SUBSYSTEM_ID, 0x18A610DE},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    if (fig_status(&r, want[i].fig) || fig_value(&r, want[i].fig) != want[i].v)
      print_message("figure %d: status %u value %llu, want %llu\n", want[i].fig,
                    fig_status(&r, want[i].fig), (unsigned long long)fig_value(&r, want[i].fig),
                    (unsigned long long)want[i].v);
    assert_int_equal(fig_status(&r, want[i].fig), 0);
    assert_int_equal(fig_value(&r, want[i].fig), want[i].v);
  }
  /* NVML's own "not supported" travels as it is. */
  assert_int_equal(fig_status(&r, RGPU_NVML_FIG_FAN), RGPU_NVML_ERROR_NOT_SUPPORTED);
  harness_free(t);
}

/* With the server's session table (the slots the listener always opens):
 * every session using the device is listed, this one with its exact
 * memory, the others as their workers last counted. */
static void test_session_table(void **state) {
  (void)state;
  if (!have_softgpu()) skip();
  rgpu_metrics *m = NULL;
  char err[256];
  assert_int_equal(rgpu_metrics_open(NULL, &m, err, sizeof err), 0);
  assert_string_equal(rgpu_metrics_address(m), "");
  /* Another session (id 99) on device 0 with 5 MiB, and one (id 98) that
   * has not said HELLO yet: not a session, not listed. */
  int other = rgpu_metrics_session_begin(m, 99, "tcp");
  int pending = rgpu_metrics_session_begin(m, 98, "tcp");
  int self = rgpu_metrics_session_begin(m, 7, "unix");
  assert_true(other >= 0 && pending >= 0 && self >= 0);
  rgpu_metrics_enter_worker(m, other);
  rgpu_metrics_session_client(555, "other-prog", 10);
  rgpu_metrics_session_device(0);
  rgpu_metrics_request(RGPU_OP_MEM_ALLOC, 0, 1000, 40, 5u << 20);
  rgpu_metrics_enter_worker(m, self);

  harness *t = harness_new();
  hello(t);
  rgpu_msg_nvml_query_rep r;
  assert_int_equal(nvml_query(t, 0, &r), 0);
  /* This session has no context yet: only the other one. */
  assert_int_equal(r.proc_pid.count, 1);
  assert_int_equal(rgpu_array_u32(&r.proc_pid, 0), 555);
  assert_int_equal(rgpu_array_u64(&r.proc_mem, 0), 5u << 20);
  assert_int_equal(rgpu_array_u64(&r.proc_session, 0), 99);

  mem_alloc(t, 1u << 20);
  assert_int_equal(nvml_query(t, 0, &r), 0);
  assert_int_equal(r.proc_pid.count, 2);
  uint64_t sum = 0;
  int seen_self = 0;
  for (uint32_t i = 0; i < r.proc_pid.count; i++) {
    sum += rgpu_array_u64(&r.proc_mem, i);
    if (rgpu_array_u32(&r.proc_pid, i) == 4321) {
      seen_self = 1;
      assert_int_equal(rgpu_array_u64(&r.proc_mem, i), 1u << 20);
      assert_int_equal(rgpu_array_u64(&r.proc_session, i), 7);
    }
  }
  assert_true(seen_self);
  assert_int_equal(fig_value(&r, RGPU_NVML_FIG_MEM_USED), sum);
  assert_int_equal(sum, 6u << 20);
  harness_free(t);
  (void)pending;
}

int main(int argc, char **argv) {
  (void)argc;
  char self[900];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%.400s/../lib/libsoftgpu.so", self);
  snprintf(test_driver, sizeof test_driver, "%.400s/../lib/librgpu_test_driver.so", self);
  snprintf(test_nvml, sizeof test_nvml, "%.400s/../lib/librgpu_test_nvml.so", self);
  /* Read once, at the worker's first NVML load (test_server_nvml). */
  setenv("RGPU_SERVER_NVML_LIB", test_nvml, 1);
  (void)argv;
  /* In this order: the second test gives the process a session table. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softgpu_figures),
      cmocka_unit_test(test_server_nvml),
      cmocka_unit_test(test_session_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
