/* Integration test: the client core and libcudart.so.13 against a real
 * rgpu-server on a unix socket, with the server's fake driver
 * (librgpu_test_driver.so) so that it needs neither a GPU nor softgpu.
 * Skips when the server or the driver was not built. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "rgpu_calls.h"
#include "rgpu_client.h"
#include "rgpu_client_internal.h"
#include "rgpu_frame.h"
#include "rgpu_messages.h"

static char g_dir[64];
static char g_sock[100];
static char g_uri[300];
static pid_t g_server;

static int file_ok(const char *p) { return p && p[0] && access(p, R_OK) == 0; }

static int start_server(void **state) {
  if (!file_ok(RGPU_TEST_SERVER_BIN) || !file_ok(RGPU_TEST_DRIVER)) {
    fprintf(stderr, "skipping: rgpu-server or its test driver is not built\n");
    return 0;
  }
  snprintf(g_dir, sizeof g_dir, "/tmp/rgpu-cit-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_sock, sizeof g_sock, "%s/s.sock", g_dir);
  snprintf(g_uri, sizeof g_uri, "unix://%s", g_sock);
  g_server = fork();
  if (g_server == 0) {
    char log[300];
    snprintf(log, sizeof log, "%s/server.log", g_dir);
    if (!freopen(log, "w", stderr)) _exit(126);
    execl(RGPU_TEST_SERVER_BIN, RGPU_TEST_SERVER_BIN, "--listen", g_uri, "--device", "softgpu",
          "--softgpu-lib", RGPU_TEST_DRIVER, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok) return 0;
    usleep(10000);
  }
  fprintf(stderr, "rgpu-server did not start\n");
  return -1;
}

static int stop_server(void **state) {
  if (g_server > 0) {
    kill(g_server, SIGTERM);
    waitpid(g_server, NULL, 0);
    char log[300];
    snprintf(log, sizeof log, "%s/server.log", g_dir);
    unlink(log);
    unlink(g_sock);
    rmdir(g_dir);
  }
  return 0;
}

#define NEED_SERVER()                   \
  do {                                  \
    if (g_server <= 0) {                \
      skip();                           \
    }                                   \
  } while (0)

/* The environment's configuration, pointed at the test server. */
static rgpu_client_config core_config(void) {
  rgpu_client_config cfg;
  char err[512];
  assert_int_equal(rgpu_client_config_load(&cfg, NULL, NULL, err, sizeof err), 0);
  snprintf(cfg.server, sizeof cfg.server, "%s", g_uri);
  return cfg;
}

static rgpu_client *connect_with(const rgpu_client_config *cfg) {
  char err[512];
  rgpu_client *c = NULL;
  int rc = rgpu_client_connect(cfg, &c, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  assert_int_equal(rc, 0);
  return c;
}

static rgpu_client *connect_core(int sync_every) {
  rgpu_client_config cfg = core_config();
  cfg.sync_every_call = sync_every;
  return connect_with(&cfg);
}

/* A client of the test server that batches as told: batch_us, batch_bytes
 * (0: every frame is written at once) and idle_sends (rgpu_client.h). */
static rgpu_client *connect_batching(int batch_us, size_t batch_bytes, int idle_sends) {
  rgpu_client_config cfg = core_config();
  cfg.batch_us = batch_us;
  cfg.batch_bytes = batch_bytes;
  cfg.idle_sends = idle_sends;
  return connect_with(&cfg);
}

/* Whether the client's fastest round trip so far is under
 * RGPU_CLIENT_NEAR_RTT_US: the client then counts the server as near. */
static int client_near(rgpu_client *c) {
  uint64_t floor_ns = rgpu_client_rtt_floor_ns(c);
  return floor_ns > 0 && floor_ns < RGPU_CLIENT_NEAR_RTT_US * 1000ull;
}

/* Empty pings, at most `tries`, until the client counts the server as
 * near; returns whether it does. */
static int ping_until_near(rgpu_client *c, int tries) {
  for (int i = 0; i < tries && !client_near(c); i++) {
    rgpu_msg_ping_req p0 = {.data = {NULL, 0}};
    assert_int_equal(rgpu_call_ping(c, -1, 0, &p0, NULL, NULL), 0);
  }
  return client_near(c);
}

static void test_core_hello_ping(void **state) {
  NEED_SERVER();
  rgpu_client *c = connect_core(0);
  assert_true(rgpu_client_session_id(c) != 0);
  assert_string_equal(rgpu_client_transport(c), "unix");
  /* PING echoes its tail, exercising the direct-read path. */
  char data[100000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 13);
  char back[sizeof data];
  memset(back, 0, sizeof back);
  rgpu_client_reply r = {.dst = back, .dst_cap = sizeof back};
  rgpu_msg_ping_req ping = {.data = {data, sizeof data}};
  int rc = rgpu_call_ping(c, -1, 0, &ping, NULL, &r);
  assert_int_equal(rc, 0);
  assert_int_equal(r.dst_len, sizeof data);
  assert_memory_equal(back, data, sizeof data);
  rgpu_client_counters ctr;
  rgpu_client_get_counters(c, &ctr);
  assert_true(ctr.round_trips >= 2); /* HELLO + PING */
  assert_true(ctr.bytes_sent > sizeof data);
  /* A local server is near: some empty ping comes back within 1 ms. */
  assert_true(ping_until_near(c, 20));
  rgpu_client_close(c);
}

static void test_core_async_error_latched(void **state) {
  NEED_SERVER();
  rgpu_client *c = connect_core(0);
  rgpu_msg_mem_free_req m = {.dptr = 0xdead0000};
  /* No reply asked: the failure must come back as an ASYNC_ERROR event. */
  assert_int_equal(rgpu_call_mem_free(c, 0, RGPU_CALL_ASYNC, &m, NULL, NULL), 0);
  uint32_t st = 0;
  assert_int_equal(rgpu_client_take_async_error(c, &st, NULL, NULL, 0), 0);
  /* A synchronizing request lets it arrive; it is latched, not the sync's. */
  assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
  char msg[256];
  assert_int_equal(rgpu_client_take_async_error(c, &st, NULL, msg, sizeof msg), 1);
  assert_true(st != 0);
  assert_int_equal(rgpu_client_take_async_error(c, &st, NULL, NULL, 0), 0);
  /* The same request with a reply gets the error as its own status. */
  rgpu_client_reply r = {0};
  int rc = rgpu_call_mem_free(c, 0, 0, &m, NULL, &r);
  assert_true(rc > 0);
  rgpu_client_close(c);
}

/* Background D2H replies (issue 6): queued without a wait, read into their
 * destinations by the next wait, which drains them; they add no round
 * trip.  A host callback the driver cannot run is refused cleanly. */
static void test_core_background_d2h(void **state) {
  NEED_SERVER();
  rgpu_client *c = connect_core(0);
  rgpu_msg_mem_alloc_req am = {.size = 4096};
  rgpu_msg_mem_alloc_rep ar;
  assert_int_equal(rgpu_call_mem_alloc(c, 0, 0, &am, &ar, NULL), 0);
  unsigned char src[4096], dst[3][1024];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7 + 1);
  memset(dst, 0, sizeof dst);
  rgpu_client_counters before, after;
  rgpu_client_get_counters(c, &before);
  rgpu_client_lock(c);
  rgpu_msg_memcpy_htod_req h = {.dst = ar.dptr, .stream = 0, .data = {src, sizeof src}};
  assert_int_equal(rgpu_send_memcpy_htod_locked(c, 0, &h, NULL), 0);
  for (int k = 0; k < 3; k++) {
    rgpu_msg_memcpy_dtoh_req d = {.src = ar.dptr + 1024u * (uint64_t)k, .size = 1024, .stream = 0};
    assert_int_equal(rgpu_send_memcpy_dtoh_background_locked(c, &d, dst[k], 1024, NULL), 0);
  }
  rgpu_client_unlock(c);
  assert_int_equal(rgpu_client_background_count(c), 3);
  rgpu_client_get_counters(c, &after);
  assert_int_equal(after.round_trips, before.round_trips);
  /* One synchronizing request, then the drain: every copy has landed. */
  rgpu_client_lock(c);
  uint64_t seq = 0, first = rgpu_client_next_seq_locked(c);
  rgpu_client_reply sr = {0};
  assert_int_equal(rgpu_send_ctx_sync_locked(c, 1, NULL, &seq), 0);
  assert_int_equal(rgpu_client_wait_locked(c, seq, first, &sr), 0);
  assert_int_equal(rgpu_client_drain_locked(c, RGPU_CLIENT_ALL_STREAMS, seq), 0);
  rgpu_client_unlock(c);
  assert_int_equal(rgpu_client_background_count(c), 0);
  for (int k = 0; k < 3; k++) assert_memory_equal(dst[k], src + 1024 * k, 1024);
  rgpu_client_get_counters(c, &after);
  assert_int_equal(after.round_trips, before.round_trips + 1);
  /* HOST_FUNC on a driver without cuLaunchHostFunc: an error reply. */
  rgpu_msg_host_func_req hm = {.stream = 0, .callback = 77};
  rgpu_client_reply hr = {0};
  int rc = rgpu_call_host_func(c, 0, 0, &hm, NULL, &hr);
  assert_int_equal(rc, CUDA_ERROR_NOT_SUPPORTED);
  /* A stray HOST_CALL_DONE is an async error, not a crash. */
  rgpu_msg_host_call_done_req dm = {.token = 12345};
  assert_int_equal(rgpu_send_host_call_done_now(c, &dm), 0);
  assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
  uint32_t st = 0;
  assert_int_equal(rgpu_client_take_async_error(c, &st, NULL, NULL, 0), 1);
  assert_int_equal(st, CUDA_ERROR_INVALID_VALUE);
  rgpu_client_close(c);
}

static void test_core_batching(void **state) {
  NEED_SERVER();
  rgpu_client *c = connect_core(0);
  rgpu_client_counters before, after;
  rgpu_client_get_counters(c, &before);
  for (int i = 0; i < 200; i++) {
    rgpu_msg_event_create_req m = {.event = 1000 + (uint64_t)i, .flags = 0};
    assert_int_equal(rgpu_call_event_create(c, 0, RGPU_CALL_ASYNC, &m, NULL, NULL), 0);
  }
  assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
  rgpu_client_get_counters(c, &after);
  /* 200 creates + sync: far fewer writes than frames, one round trip. */
  assert_int_equal(after.round_trips - before.round_trips, 1);
  assert_true(after.frames_sent - before.frames_sent >= 201);
  assert_true(after.flushes - before.flushes < 50);
  assert_int_equal(rgpu_client_take_async_error(c, NULL, NULL, NULL, 0), 0);
  rgpu_client_close(c);
}

/* Queues requests without a pause for at least `ms` milliseconds and 1,000
 * pairs; returns how many pairs. */
static int queue_for_ms(rgpu_client *c, int ms, uint64_t first_event) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int n = 0;
  do {
    /* Created and destroyed: the test driver's events are few. */
    rgpu_msg_event_create_req m = {.event = first_event + (uint64_t)n, .flags = 0};
    assert_int_equal(rgpu_call_event_create(c, 0, RGPU_CALL_ASYNC, &m, NULL, NULL), 0);
    rgpu_msg_event_destroy_req d = {.event = first_event + (uint64_t)n};
    assert_int_equal(rgpu_call_event_destroy(c, 0, RGPU_CALL_ASYNC, &d, NULL, NULL), 0);
    n++;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (n < 1000 || (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
  return n;
}

/* The batch window: a program that keeps queueing has its queue sent
 * once the oldest request is batch_us old, before any synchronization
 * (else the GPU would start on a step's work only at its end); with a
 * long window nothing leaves early; waits are timed. */
static void test_core_batch_window(void **state) {
  NEED_SERVER();
  for (int pass = 0; pass < 2; pass++) {
    /* The window alone (idle sends: test_core_idle_sends). */
    rgpu_client *c = connect_batching(pass == 0 ? 500 : 10 * 1000 * 1000, 64u << 20, 0);
    rgpu_client_counters before, mid, after;
    rgpu_client_get_counters(c, &before);
    int n = queue_for_ms(c, 20, 5000);
    rgpu_client_get_counters(c, &mid);
    /* Sent on the way (not a timing test: a sanitizer build on a loaded
     * machine may run only a few windows' worth in 20 ms), or not at all. */
    if (pass == 0)
      assert_true(mid.flushes - before.flushes >= 2);
    else
      assert_int_equal(mid.flushes, before.flushes); /* all still queued */
    assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
    rgpu_client_get_counters(c, &after);
    assert_true(after.frames_sent - before.frames_sent >= 2 * (uint64_t)n + 1);
    assert_true(after.wait_ns > before.wait_ns);
    assert_int_equal(rgpu_client_take_async_error(c, NULL, NULL, NULL, 0), 0);
    rgpu_client_close(c);
  }
}

/* After a reply from a near server (this one is local) the next
 * idle_sends requests leave at once, as their own writes, and the ones
 * after them wait for the batch again; a far server's (or with
 * idle_sends 0) are batched from the first.  Near or far is the client's
 * fastest round trip, which a sanitizer build on a loaded 2-core machine
 * may never bring under 1 ms (CI): then the far behaviour is what is
 * checked. */
static void test_core_idle_sends(void **state) {
  NEED_SERVER();
  for (int pass = 0; pass < 2; pass++) {
    int idle_sends = pass == 0 ? 3 : 0;
    rgpu_client *c = connect_batching(10 * 1000 * 1000, 64u << 20, idle_sends);
    ping_until_near(c, 50);
    for (int round = 0; round < 3; round++) {
      /* A round trip: the server is idle after it. */
      assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
      int sends = client_near(c) ? idle_sends : 0;
      rgpu_client_counters before, mid;
      rgpu_client_get_counters(c, &before);
      for (int i = 0; i < 10; i++) {
        uint64_t ev = 7000 + (uint64_t)round * 100 + (uint64_t)i;
        rgpu_msg_event_create_req m = {.event = ev, .flags = 0};
        assert_int_equal(rgpu_call_event_create(c, 0, RGPU_CALL_ASYNC, &m, NULL, NULL), 0);
        rgpu_client_get_counters(c, &mid);
        /* Each of the first idle_sends went out alone; the rest wait. */
        uint64_t want = (uint64_t)(i < sends ? i + 1 : sends);
        assert_int_equal(mid.flushes - before.flushes, want);
      }
    }
    assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
    assert_int_equal(rgpu_client_take_async_error(c, NULL, NULL, NULL, 0), 0);
    rgpu_client_close(c);
  }
}

/* A careless program: many queued requests that each fail on the server,
 * no synchronization between them.  Each failure is an ASYNC_ERROR the
 * server writes back while the client is still writing; the client must
 * take them in meanwhile, or both block writing for ever.  The first
 * error is kept for the synchronization, as CUDA keeps it. */
static void test_core_error_flood(void **state) {
  NEED_SERVER();
  for (int batch = 0; batch < 2; batch++) {
    /* One long write of the whole flood, or the usual batches. */
    rgpu_client *c = batch ? connect_batching(10 * 1000 * 1000, 64u << 20, RGPU_CLIENT_DEFAULT_IDLE_SENDS)
                           : connect_batching(200, 0, RGPU_CLIENT_DEFAULT_IDLE_SENDS);
    enum { FLOOD = 90000 };
    for (int i = 0; i < FLOOD; i++) {
      rgpu_msg_event_destroy_req d = {.event = 900000 + (uint64_t)i}; /* never created */
      assert_int_equal(rgpu_call_event_destroy(c, 0, RGPU_CALL_ASYNC, &d, NULL, NULL), 0);
    }
    assert_int_equal(rgpu_call_ctx_sync(c, 0, 0, NULL, NULL, NULL), 0);
    uint32_t status = 0;
    char msg[256] = "";
    assert_int_equal(rgpu_client_take_async_error(c, &status, NULL, msg, sizeof msg), 1);
    assert_int_equal(status, CUDA_ERROR_INVALID_HANDLE);
    assert_non_null(strstr(msg, "event"));
    /* The errors a write took in stayed bounded (about 70 bytes each: 6 MiB
     * for the whole flood kept as bytes), and the first is what was
     * reported. */
    assert_true(rgpu_client_absorbed_peak_bytes(c) < (2u << 20));
    if (batch) assert_true(rgpu_client_async_errors_digested(c) > 0);
    /* The session still works. */
    rgpu_msg_event_create_req m = {.event = 7, .flags = 0};
    assert_int_equal(rgpu_call_event_create(c, 0, 0, &m, NULL, NULL), 0);
    rgpu_client_close(c);
  }
}

/* ---- libcudart.so.13 through dlopen ------------------------------------- */

typedef struct {
  void *h;
  cudaError_t (*GetDeviceCount)(int *);
  cudaError_t (*Malloc)(void **, size_t);
  cudaError_t (*Free)(void *);
  cudaError_t (*Memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
  cudaError_t (*Memset)(void *, int, size_t);
  cudaError_t (*GetLastError)(void);
  cudaError_t (*PeekAtLastError)(void);
  cudaError_t (*DeviceSynchronize)(void);
  cudaError_t (*StreamCreate)(cudaStream_t *);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
  cudaError_t (*EventCreate)(cudaEvent_t *);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventSynchronize)(cudaEvent_t);
  cudaError_t (*GetDeviceProperties)(struct cudaDeviceProp *, int);
  cudaError_t (*SetDevice)(int);
  const char *(*GetErrorString)(cudaError_t);
  cudaError_t (*IpcGetEventHandle)(void *, void *);
  cudaError_t (*MallocPitch)(void **, size_t *, size_t, size_t);
  cudaError_t (*Memcpy2D)(void *, size_t, const void *, size_t, size_t, size_t,
                          enum cudaMemcpyKind);
  cudaError_t (*Memset2D)(void *, size_t, int, size_t, size_t);
  cudaError_t (*HostRegister)(void *, size_t, unsigned);
  cudaError_t (*HostUnregister)(void *);
  cudaError_t (*PointerGetAttributes)(struct cudaPointerAttributes *, const void *);
} cudart_fns;

static void load_cudart(cudart_fns *f) {
  memset(f, 0, sizeof *f);
  f->h = dlopen(RGPU_TEST_CUDART, RTLD_NOW | RTLD_LOCAL);
  if (!f->h) fprintf(stderr, "dlopen: %s\n", dlerror());
  assert_non_null(f->h);
#define L(name) *(void **)&f->name = dlsym(f->h, "cuda" #name), assert_non_null(f->name)
  L(GetDeviceCount);
  L(Malloc);
  L(Free);
  L(Memcpy);
  L(Memset);
  L(GetLastError);
  L(PeekAtLastError);
  L(DeviceSynchronize);
  L(StreamCreate);
  L(StreamDestroy);
  L(StreamSynchronize);
  L(MemcpyAsync);
  L(EventCreate);
  L(EventRecord);
  L(EventSynchronize);
  L(GetDeviceProperties);
  L(SetDevice);
  L(GetErrorString);
  L(IpcGetEventHandle);
  L(MallocPitch);
  L(Memcpy2D);
  L(Memset2D);
  L(HostRegister);
  L(HostUnregister);
  L(PointerGetAttributes);
#undef L
}

/* Runs body in a child process (the library connects once per process)
 * and returns its exit status. */
static int in_child(void (*body)(void), const char *server) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    if (server)
      setenv("RGPU_SERVER", server, 1);
    else
      unsetenv("RGPU_SERVER");
    body();
    _exit(0);
  }
  int st;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #cond); \
      _exit(1);                                                      \
    }                                                                \
  } while (0)

static void body_cudart_memory(void) {
  cudart_fns f;
  load_cudart(&f);
  int n = -1;
  CHECK(f.GetDeviceCount(&n) == cudaSuccess && n == 1);
  struct cudaDeviceProp p;
  CHECK(f.GetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(p.maxThreadsPerBlock > 0 && p.name[0]);
  CHECK(f.SetDevice(5) == cudaErrorInvalidDevice);
  CHECK(f.GetLastError() == cudaErrorInvalidDevice);
  CHECK(f.GetLastError() == cudaSuccess);
  /* 9 MiB crosses the 4 MiB chunking in both directions. */
  size_t N = 9u << 20;
  unsigned char *h = malloc(N), *h2 = malloc(N);
  CHECK(h && h2);
  for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 31 + 7);
  void *d = NULL;
  CHECK(f.Malloc(&d, N) == cudaSuccess && d);
  CHECK(f.Memcpy(d, h, N, cudaMemcpyHostToDevice) == cudaSuccess);
  memset(h2, 0, N);
  CHECK(f.Memcpy(h2, d, N, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(memcmp(h, h2, N) == 0);
  CHECK(f.Memset((char *)d + 100, 0xab, 50) == cudaSuccess);
  CHECK(f.Memcpy(h2, d, 200, cudaMemcpyDefault) == cudaSuccess);
  CHECK(h2[99] == h[99] && h2[100] == 0xab && h2[149] == 0xab && h2[150] == h[150]);
  /* Local checks: wild pointers fail at once, with the last error set. */
  CHECK(f.Memcpy((char *)d + N - 4, h, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(f.PeekAtLastError() == cudaErrorInvalidValue);
  CHECK(f.GetLastError() == cudaErrorInvalidValue);
  CHECK(f.Free((void *)0x1234) == cudaErrorInvalidValue);
  CHECK(f.GetLastError() == cudaErrorInvalidValue);
  /* Streams and events, including the special handles. */
  cudaStream_t s;
  CHECK(f.StreamCreate(&s) == cudaSuccess);
  CHECK(f.MemcpyAsync(d, h, 1 << 20, cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(f.MemcpyAsync(h2, d, 1 << 20, cudaMemcpyDeviceToHost, cudaStreamPerThread) ==
        cudaSuccess);
  CHECK(f.MemcpyAsync(h2, d, 16, cudaMemcpyDeviceToHost, cudaStreamLegacy) == cudaSuccess);
  cudaEvent_t e;
  CHECK(f.EventCreate(&e) == cudaSuccess);
  CHECK(f.EventRecord(e, s) == cudaSuccess);
  CHECK(f.EventSynchronize(e) == cudaSuccess);
  CHECK(f.StreamSynchronize(s) == cudaSuccess);
  CHECK(f.StreamSynchronize(NULL) == cudaSuccess);
  CHECK(f.StreamDestroy(s) == cudaSuccess);
  CHECK(f.StreamDestroy(cudaStreamLegacy) == cudaErrorInvalidResourceHandle);
  CHECK(f.GetLastError() == cudaErrorInvalidResourceHandle);
  CHECK(f.Free(d) == cudaSuccess);
  CHECK(f.DeviceSynchronize() == cudaSuccess);
  /* Unsupported functions say so. */
  CHECK(f.IpcGetEventHandle(NULL, NULL) == cudaErrorNotSupported);
  CHECK(f.GetLastError() == cudaErrorNotSupported);
  CHECK(strcmp(f.GetErrorString(cudaErrorInvalidValue), "invalid argument") == 0);
  /* Pitched memory: 100 rows of 300 bytes in a 512-byte pitch. */
  void *pd = NULL;
  size_t pitch = 0;
  CHECK(f.MallocPitch(&pd, &pitch, 300, 100) == cudaSuccess && pitch == 512);
  CHECK(f.Memset2D(pd, pitch, 0x11, 512, 100) == cudaSuccess);
  CHECK(f.Memcpy2D(pd, pitch, h, 300, 300, 100, cudaMemcpyHostToDevice) == cudaSuccess);
  memset(h2, 0, 512 * 100);
  CHECK(f.Memcpy2D(h2, 400, pd, pitch, 300, 100, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int r = 0; r < 100; r++) {
    CHECK(memcmp(h2 + r * 400, h + r * 300, 300) == 0);
    CHECK(h2[r * 400 + 300] == 0);
  }
  CHECK(f.Memcpy(h2, pd, 512, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(h2[299] == h[299] && h2[300] == 0x11 && h2[511] == 0x11);
  CHECK(f.Memcpy2D(pd, pitch, h, 300, 600, 2, cudaMemcpyHostToDevice) == cudaErrorInvalidPitchValue);
  CHECK(f.Memcpy2D(pd, pitch, h, 300, 300, 101, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  f.GetLastError();
  CHECK(f.Free(pd) == cudaSuccess);
  /* Registered host memory is tracked, not mapped. */
  CHECK(f.HostRegister(h, 4096, 0) == cudaSuccess);
  struct cudaPointerAttributes pa;
  CHECK(f.PointerGetAttributes(&pa, h + 10) == cudaSuccess && pa.type == cudaMemoryTypeHost);
  CHECK(f.HostRegister(h, 4096, 0) == cudaErrorHostMemoryAlreadyRegistered);
  CHECK(f.HostRegister(h2, 4096, cudaHostRegisterMapped) == cudaErrorNotSupported);
  CHECK(f.HostUnregister(h) == cudaSuccess);
  CHECK(f.HostUnregister(h) == cudaErrorHostMemoryNotRegistered);
  f.GetLastError();
  free(h);
  free(h2);
}

static void test_cudart_memory(void **state) {
  NEED_SERVER();
  if (!file_ok(RGPU_TEST_CUDART)) skip();
  assert_int_equal(in_child(body_cudart_memory, g_uri), 0);
}

static void body_no_server(void) {
  cudart_fns f;
  load_cudart(&f);
  int n = 7;
  CHECK(f.GetDeviceCount(&n) == cudaErrorNoDevice);
  CHECK(n == 0);
  void *d = NULL;
  CHECK(f.Malloc(&d, 16) == cudaErrorNoDevice);
  CHECK(f.GetLastError() == cudaErrorNoDevice);
}

/* The round trips rgpu_stats_json reports so far. */
static long stats_round_trips(void *h) {
  int (*stats)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "rgpu_stats_json");
  char js[4096];
  if (!stats || stats(js, sizeof js) < 0) return -1;
  const char *p = strstr(js, "\"round_trips\":");
  return p ? strtol(p + strlen("\"round_trips\":"), NULL, 10) : -1;
}

/* A synchronous upload of 32 MiB from page-locked memory near the server
 * goes a chunk at a time, each confirmed (rgpu_cudart_op.c, copy_htod):
 * the bytes arrive, and the confirmations are flow control, not round
 * trips: the copy and the copy back cost two. */
static void body_cudart_pinned_upload(void) {
  cudart_fns f;
  load_cudart(&f);
  cudaError_t (*malloc_host)(void **, size_t) =
      (cudaError_t (*)(void **, size_t))dlsym(f.h, "cudaMallocHost");
  cudaError_t (*free_host)(void *) = (cudaError_t (*)(void *))dlsym(f.h, "cudaFreeHost");
  CHECK(malloc_host && free_host);
  size_t N = 32u << 20;
  unsigned char *h = NULL;
  CHECK(malloc_host((void **)&h, N) == cudaSuccess && h);
  for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 29 + 3);
  void *d = NULL;
  CHECK(f.Malloc(&d, N) == cudaSuccess && d);
  CHECK(f.DeviceSynchronize() == cudaSuccess);
  long before = stats_round_trips(f.h);
  CHECK(before >= 0);
  CHECK(f.Memcpy(d, h, N, cudaMemcpyHostToDevice) == cudaSuccess);
  unsigned char *back = malloc(N);
  CHECK(back);
  CHECK(f.Memcpy(back, d, N, cudaMemcpyDeviceToHost) == cudaSuccess);
  long after = stats_round_trips(f.h);
  CHECK(memcmp(back, h, N) == 0);
  if (after - before > 2) fprintf(stderr, "round trips: %ld\n", after - before);
  CHECK(after - before <= 2);
  CHECK(f.Free(d) == cudaSuccess);
  CHECK(free_host(h) == cudaSuccess);
  free(back);
}

static void test_cudart_pinned_upload(void **state) {
  NEED_SERVER();
  if (!file_ok(RGPU_TEST_CUDART)) skip();
  assert_int_equal(in_child(body_cudart_pinned_upload, g_uri), 0);
}

static void test_cudart_unreachable(void **state) {
  if (!file_ok(RGPU_TEST_CUDART)) skip();
  /* Refused, and unset: both fail cleanly with cudaErrorNoDevice. */
  assert_int_equal(in_child(body_no_server, "unix:///tmp/rgpu-no-such-server.sock"), 0);
  assert_int_equal(in_child(body_no_server, NULL), 0);
  assert_int_equal(in_child(body_no_server, "bogus://x"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_hello_ping),
      cmocka_unit_test(test_core_async_error_latched),
      cmocka_unit_test(test_core_background_d2h),
      cmocka_unit_test(test_core_batching),
      cmocka_unit_test(test_core_batch_window),
      cmocka_unit_test(test_core_idle_sends),
      cmocka_unit_test(test_core_error_flood),
      cmocka_unit_test(test_cudart_memory),
      cmocka_unit_test(test_cudart_pinned_upload),
      cmocka_unit_test(test_cudart_unreachable),
  };
  return cmocka_run_group_tests(tests, start_server, stop_server);
}
