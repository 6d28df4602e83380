/* softgpu streams and events: ordering, asynchrony, cross-stream waits,
 * legacy-stream synchronisation, event timing.  Host functions that block
 * on a gate make the interleavings deterministic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <cuda.h>
#include <pthread.h>

static CUcontext ctx;

static int setup(void **state) {
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return -1;
  return cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  int open;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->m, NULL);
  pthread_cond_init(&g->c, NULL);
  g->open = 0;
}
static void gate_open(gate *g) {
  pthread_mutex_lock(&g->m);
  g->open = 1;
  pthread_cond_broadcast(&g->c);
  pthread_mutex_unlock(&g->m);
}
static void gate_wait_fn(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->m);
  while (!g->open) pthread_cond_wait(&g->c, &g->m);
  pthread_mutex_unlock(&g->m);
}

/* An order log the host functions append to. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char order[64];
static int norder;

typedef struct {
  char tag;
} mark;
static void mark_fn(void *arg) {
  pthread_mutex_lock(&log_lock);
  if (norder < 63) order[norder++] = ((mark *)arg)->tag;
  order[norder] = 0;
  pthread_mutex_unlock(&log_lock);
}
static void log_reset(void) {
  pthread_mutex_lock(&log_lock);
  norder = 0;
  order[0] = 0;
  pthread_mutex_unlock(&log_lock);
}
static int log_len(void) {
  pthread_mutex_lock(&log_lock);
  int n = norder;
  pthread_mutex_unlock(&log_lock);
  return n;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}
static void sleep_fn(void *arg) { sleep_ms((int)(intptr_t)arg); }

static mark A = {'A'}, B = {'B'}, C = {'C'}, D = {'D'};

static void test_fifo_order(void **state) {
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  log_reset();
  assert_int_equal(cuLaunchHostFunc(s, sleep_fn, (void *)(intptr_t)20), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &A), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &B), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &C), CUDA_SUCCESS);
  /* The calls returned before the work ran. */
  assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuStreamQuery(s), CUDA_SUCCESS);
  assert_string_equal(order, "ABC");
  assert_int_equal(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &A), CUDA_ERROR_INVALID_HANDLE);
}

static void test_stream_properties(void **state) {
  CUstream s;
  unsigned flags = 99;
  int prio = 99;
  assert_int_equal(cuStreamCreate(&s, 7), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100), CUDA_SUCCESS);
  assert_int_equal(cuStreamGetPriority(s, &prio), CUDA_SUCCESS);
  assert_int_equal(prio, -5);
  assert_int_equal(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  assert_int_equal(flags, CU_STREAM_NON_BLOCKING);
  assert_int_equal(cuStreamGetFlags(NULL, &flags), CUDA_SUCCESS);
  assert_int_equal(flags, 0);
  assert_int_equal(cuStreamGetPriority(NULL, &prio), CUDA_SUCCESS);
  assert_int_equal(prio, 0);
  CUcontext c = NULL;
  assert_int_equal(cuStreamGetCtx(s, &c), CUDA_SUCCESS);
  assert_ptr_equal(c, ctx);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  /* Per-thread and legacy handles are accepted everywhere. */
  assert_int_equal(cuLaunchHostFunc(CU_STREAM_PER_THREAD, mark_fn, &A), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
  assert_int_equal(cuStreamQuery((CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
}

static void test_destroy_with_pending_work(void **state) {
  CUstream s;
  gate g;
  gate_init(&g);
  log_reset();
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, gate_wait_fn, &g), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &D), CUDA_SUCCESS);
  /* Returns at once; queued work still runs afterwards. */
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(log_len(), 0);
  gate_open(&g);
  for (int i = 0; i < 500 && log_len() == 0; i++) sleep_ms(2);
  assert_string_equal(order, "D");
}

static void test_events(void **state) {
  CUstream s;
  CUevent e1, e2, e3, never;
  float ms = -1;
  gate g;
  gate_init(&g);
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&e1, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&e2, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&never, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&e3, 0x100), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  /* A never-recorded event is complete but has no time. */
  assert_int_equal(cuEventQuery(never), CUDA_SUCCESS);
  assert_int_equal(cuEventSynchronize(never), CUDA_SUCCESS);
  assert_int_equal(cuEventElapsedTime(&ms, e1, never), CUDA_ERROR_INVALID_HANDLE);

  assert_int_equal(cuLaunchHostFunc(s, gate_wait_fn, &g), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(e1, s), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, sleep_fn, (void *)(intptr_t)30), CUDA_SUCCESS);
  assert_int_equal(cuEventRecordWithFlags(e2, s, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventRecordWithFlags(e2, s, 8), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuEventRecord(e3, s), CUDA_SUCCESS);
  assert_int_equal(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
  assert_int_equal(cuEventElapsedTime(&ms, e1, e2), CUDA_ERROR_NOT_READY);
  gate_open(&g);
  assert_int_equal(cuEventSynchronize(e2), CUDA_SUCCESS);
  assert_int_equal(cuEventQuery(e1), CUDA_SUCCESS);
  assert_int_equal(cuEventQuery(e2), CUDA_SUCCESS);
  assert_int_equal(cuEventElapsedTime(&ms, e1, e2), CUDA_SUCCESS);
  assert_true(ms >= 25.0f && ms < 2000.0f);
  float back = 0;
  assert_int_equal(cuEventElapsedTime(&back, e2, e1), CUDA_SUCCESS);
  assert_true(back < 0 && back == -ms);
  assert_int_equal(cuEventSynchronize(e3), CUDA_SUCCESS);
  assert_int_equal(cuEventElapsedTime(&ms, e1, e3), CUDA_ERROR_INVALID_HANDLE); /* timing disabled */
  assert_int_equal(cuEventElapsedTime(NULL, e1, e2), CUDA_ERROR_INVALID_VALUE);
  /* Timestamps follow stream order. */
  CUevent t[5];
  for (int i = 0; i < 5; i++) {
    assert_int_equal(cuEventCreate(&t[i], 0), CUDA_SUCCESS);
    assert_int_equal(cuEventRecord(t[i], s), CUDA_SUCCESS);
    assert_int_equal(cuLaunchHostFunc(s, sleep_fn, (void *)(intptr_t)1), CUDA_SUCCESS);
  }
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 1; i < 5; i++) {
    assert_int_equal(cuEventElapsedTime(&ms, t[i - 1], t[i]), CUDA_SUCCESS);
    assert_true(ms > 0);
    assert_int_equal(cuEventDestroy(t[i - 1]), CUDA_SUCCESS);
  }
  assert_int_equal(cuEventDestroy(t[4]), CUDA_SUCCESS);
  assert_int_equal(cuEventDestroy(e1), CUDA_SUCCESS);
  assert_int_equal(cuEventDestroy(e1), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuEventQuery(e1), CUDA_ERROR_INVALID_HANDLE);
  cuEventDestroy(e2);
  cuEventDestroy(e3);
  cuEventDestroy(never);
  cuStreamDestroy(s);
}

static void test_wait_event_across_streams(void **state) {
  CUstream s1, s2;
  CUevent ev;
  gate g1, g2;
  gate_init(&g1);
  gate_init(&g2);
  log_reset();
  assert_int_equal(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s1, gate_wait_fn, &g1), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s1, mark_fn, &A), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(ev, s1), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(s2, ev, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(s2, ev, 5), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchHostFunc(s2, mark_fn, &B), CUDA_SUCCESS);
  /* Re-recording later does not extend the wait already queued. */
  assert_int_equal(cuLaunchHostFunc(s1, gate_wait_fn, &g2), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(ev, s1), CUDA_SUCCESS);
  sleep_ms(20);
  assert_int_equal(log_len(), 0);
  assert_int_equal(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  gate_open(&g1);
  assert_int_equal(cuStreamSynchronize(s2), CUDA_SUCCESS);
  assert_string_equal(order, "AB");
  assert_int_equal(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  gate_open(&g2);
  assert_int_equal(cuEventSynchronize(ev), CUDA_SUCCESS);
  cuEventDestroy(ev);
  cuStreamDestroy(s1);
  cuStreamDestroy(s2);
}

static void test_legacy_stream_sync(void **state) {
  CUstream blocking, nonblocking;
  gate g;
  gate_init(&g);
  log_reset();
  assert_int_equal(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(blocking, gate_wait_fn, &g), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(blocking, mark_fn, &A), CUDA_SUCCESS);
  /* The legacy stream waits for the blocking stream's earlier work... */
  assert_int_equal(cuLaunchHostFunc(NULL, mark_fn, &B), CUDA_SUCCESS);
  /* ...a non-blocking stream does not... */
  assert_int_equal(cuLaunchHostFunc(nonblocking, mark_fn, &C), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(nonblocking), CUDA_SUCCESS);
  assert_string_equal(order, "C");
  /* ...and later blocking-stream work waits for the legacy stream. */
  CUstream blocking2;
  assert_int_equal(cuStreamCreate(&blocking2, 0), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(blocking2, mark_fn, &D), CUDA_SUCCESS);
  sleep_ms(20);
  assert_string_equal(order, "C");
  gate_open(&g);
  /* Synchronising the legacy stream covers the blocking streams' work
   * queued before it. */
  assert_int_equal(cuStreamSynchronize(NULL), CUDA_SUCCESS);
  assert_true(strncmp(order, "CAB", 3) == 0);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_string_equal(order, "CABD");
  cuStreamDestroy(blocking);
  cuStreamDestroy(blocking2);
  cuStreamDestroy(nonblocking);
}

static void test_sync_copy_waits_for_streams(void **state) {
  /* A synchronous copy runs on the legacy stream, so it sees the results
   * of async work queued earlier on blocking streams. */
  CUstream s;
  CUdeviceptr d;
  gate g;
  gate_init(&g);
  unsigned v = 0;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&d, 64), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, gate_wait_fn, &g), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32Async(d, 0x01020304, 16, s), CUDA_SUCCESS);
  gate_open(&g);
  assert_int_equal(cuMemcpyDtoH(&v, d + 60, 4), CUDA_SUCCESS);
  assert_int_equal(v, 0x01020304);
  cuMemFree(d);
  cuStreamDestroy(s);
}

/* Freeing memory that queued work still uses waits for that work. */
static void test_free_waits_for_queued_work(void **state) {
  CUstream s;
  CUdeviceptr d;
  gate g;
  gate_init(&g);
  log_reset();
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, sleep_fn, (void *)(intptr_t)20), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32Async(d, 1, 1024, s), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, &A), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
  assert_string_equal(order, "A");
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS); /* no late fault */
  cuStreamDestroy(s);
}

static int cb_status = -1;
static CUstream cb_stream;
static void callback_fn(CUstream h, CUresult status, void *user) {
  cb_status = status;
  cb_stream = h;
  (void)user;
}

static void test_callback(void **state) {
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamAddCallback(s, callback_fn, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamAddCallback(s, callback_fn, NULL, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cb_status, CUDA_SUCCESS);
  assert_ptr_equal(cb_stream, s);
  cuStreamDestroy(s);
}

/* Two threads queue to their own streams and to a shared one at once. */
static void *submitter(void *arg) {
  cuCtxSetCurrent(ctx);
  CUstream s;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) return (void *)1;
  CUdeviceptr d;
  if (cuMemAlloc(&d, 4096)) return (void *)2;
  unsigned h[1024];
  for (int i = 0; i < 200; i++) {
    if (cuMemsetD32Async(d, (unsigned)i, 1024, s)) return (void *)3;
    if (cuStreamSynchronize(s)) return (void *)4;
    /* Legacy stream: s is non-blocking, hence the explicit sync above. */
    if (cuMemcpyDtoH(h, d, 4096) || h[0] != (unsigned)i) return (void *)5;
  }
  if (cuMemcpyDtoH(h, d, 4096) || h[1023] != 199) return (void *)6;
  cuMemFree(d);
  cuStreamDestroy(s);
  return NULL;
}

static void test_threads(void **state) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, submitter, NULL);
  for (int i = 0; i < 3; i++) {
    void *rc;
    pthread_join(t[i], &rc);
    assert_null(rc);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_order),          cmocka_unit_test(test_stream_properties),
      cmocka_unit_test(test_destroy_with_pending_work), cmocka_unit_test(test_events),
      cmocka_unit_test(test_wait_event_across_streams), cmocka_unit_test(test_legacy_stream_sync),
      cmocka_unit_test(test_sync_copy_waits_for_streams), cmocka_unit_test(test_free_waits_for_queued_work),
      cmocka_unit_test(test_callback),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
