/* Several devices in one session (issue 19), on softgpu with three devices
 * and --devices 2,0: the session sees two devices renumbered from 0
 * (DRIVER_INFO, DEVICE_PROPS name the driver's devices 2 and 0), PEER_ACCESS
 * gives CUDA's answers and errors, MEMCPY_DTOD copies between two devices'
 * allocations, and a list naming a device the driver lacks fails the
 * session's first device call with a sentence naming it. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_handlers_test_harness.h"
#include "rgpu_worker_internal.h" /* the session's allocation table */

static char softgpu_lib[480];

static harness *open_with_devices(const int *devs, int n) {
  harness *t = calloc(1, sizeof *t);
  rgpu_worker_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.device = RGPU_DEVICE_SOFTGPU;
  snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s", softgpu_lib);
  cfg.session_id = 19;
  snprintf(cfg.peer, sizeof cfg.peer, "test");
  cfg.ndevices = n;
  for (int i = 0; i < n; i++) cfg.devices[i] = devs[i];
  t->w = rgpu_worker_new(&cfg);
  rgpu_buf_init(&t->out);
  harness_hello(t);
  return t;
}

static int softgpu_built(void) {
  if (access(softgpu_lib, R_OK) == 0) return 1;
  print_message("skipped: %s not built\n", softgpu_lib);
  return 0;
}

static void set_device(harness *t, uint32_t dev) {
  rgpu_msg_ctx_set_device_req q = {.device = dev};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CTX_SET_DEVICE, ctx_set_device, &q, NULL, 0), 0);
}

static uint32_t peer(harness *t, uint32_t dev, uint32_t p, uint32_t op, int32_t *value) {
  rgpu_msg_peer_access_req q = {.device = dev, .peer = p, .op = op};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_PEER_ACCESS, peer_access, &q, NULL, 0);
  if (st == 0 && value) {
    rgpu_msg_peer_access_rep r;
    assert_int_equal(rgpu_msg_peer_access_rep_decode(t->p, t->h.length, &r), 0);
    *value = r.value;
  }
  return st;
}

static void test_renumbered_devices(void **state) {
  (void)state;
  if (!softgpu_built()) skip();
  static const int devs[] = {2, 0};
  harness *t = open_with_devices(devs, 2);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_DRIVER_INFO, driver_info, NULL, NULL, 0), 0);
  rgpu_msg_driver_info_rep di;
  assert_int_equal(rgpu_msg_driver_info_rep_decode(t->p, t->h.length, &di), 0);
  assert_int_equal(di.device_count, 2);
  /* softgpu's UUID ends in the driver's ordinal. */
  for (uint32_t d = 0; d < 2; d++) {
    rgpu_msg_device_props_req q = {.device = d};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_DEVICE_PROPS, device_props, &q, NULL, 0), 0);
    rgpu_msg_device_props_rep r;
    assert_int_equal(rgpu_msg_device_props_rep_decode(t->p, t->h.length, &r), 0);
    assert_int_equal(r.uuid.len, 16);
    assert_int_equal(((const uint8_t *)r.uuid.data)[15], devs[d]);
  }
  rgpu_msg_device_props_req q = {.device = 2};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_DEVICE_PROPS, device_props, &q, NULL, 0),
                   CUDA_ERROR_INVALID_DEVICE);
  rgpu_msg_ctx_set_device_req sq = {.device = 2};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CTX_SET_DEVICE, ctx_set_device, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_DEVICE);
  harness_free(t);
}

static void test_peer_access(void **state) {
  (void)state;
  if (!softgpu_built()) skip();
  static const int devs[] = {2, 0};
  harness *t = open_with_devices(devs, 2);
  int32_t v = -1;
  assert_int_equal(peer(t, 0, 1, 0, &v), 0);
  assert_int_equal(v, 1);
  assert_int_equal(peer(t, 1, 1, 0, &v), 0);
  assert_int_equal(v, 0); /* a device is not its own peer */
  assert_int_equal(peer(t, 0, 2, 0, &v), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(peer(t, 0, 1, 7, &v), CUDA_ERROR_INVALID_VALUE);
  set_device(t, 1);
  assert_int_equal(peer(t, 0, 1, 1, NULL), 0);
  assert_int_equal(peer(t, 0, 1, 1, NULL), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  assert_int_equal(peer(t, 1, 0, 1, NULL), 0); /* the other direction is its own */
  assert_int_equal(peer(t, 0, 0, 1, NULL), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(peer(t, 0, 1, 2, NULL), 0);
  assert_int_equal(peer(t, 0, 1, 2, NULL), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

  /* The session's current device is still 1: an allocation lands there. */
  uint64_t on1 = harness_mem_alloc(t, 4096);
  set_device(t, 0);
  uint64_t on0 = harness_mem_alloc(t, 4096);
  uint8_t src[4096], back[4096];
  for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i * 37 + 1);
  harness_htod(t, on1, src, sizeof src);
  rgpu_msg_memcpy_dtod_req cq = {.dst = on0 + 10, .src = on1 + 3, .size = 4000};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOD, memcpy_dtod, &cq, NULL, 0), 0);
  harness_dtoh(t, on0 + 10, back, 4000);
  assert_memory_equal(back, src + 3, 4000);
  /* The allocation table knows each pointer's session device. */
  assert_int_equal(rgpu_alloc_table_lookup(&t->w->allocs, on1, 1)->device, 1);
  assert_int_equal(rgpu_alloc_table_lookup(&t->w->allocs, on0, 1)->device, 0);
  harness_free(t);
}

static void test_missing_device(void **state) {
  (void)state;
  if (!softgpu_built()) skip();
  static const int devs[] = {0, 5};
  harness *t = open_with_devices(devs, 2);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_DRIVER_INFO, driver_info, NULL, NULL, 0),
                   CUDA_ERROR_NO_DEVICE);
  assert_non_null(memmem(t->p, t->h.length, "device 5 does not exist (the driver has 3 devices)",
                         strlen("device 5 does not exist (the driver has 3 devices)")));
  harness_free(t);
}

int main(void) {
  char self[420];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%.400s/../lib/libsoftgpu.so", self);
  setenv("RGPU_SOFTGPU_DEVICES", "3", 1); /* read at softgpu's cuInit */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_renumbered_devices),
      cmocka_unit_test(test_peer_access),
      cmocka_unit_test(test_missing_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
