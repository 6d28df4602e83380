/* libFuzzer target: arbitrary bytes as a stream of frames into the request
 * handler of one session, on the server's fake driver.
 *
 * Each input is one session: an authenticated HELLO is injected first so the
 * fuzzer spends its time in the handlers, then the input is cut into frames
 * (24-byte header + payload) as the worker's read loop would, stopping at
 * the first header the loop would reject.  The fake driver does no bounds
 * checks of its own, so any pointer or size the server forgets to validate
 * shows up as an AddressSanitizer report.
 *
 * An input whose first byte is odd instead goes, after the HELLO, as raw
 * bytes through a socketpair into the real session loop (buffered frame
 * reader, background waits, reply writes), with a thread draining the
 * replies. */
#include <pthread.h>
#include <sys/socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_worker.h"

static rgpu_worker_config cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  rgpu_log_set_level(RGPU_LOG_ERROR);
  cfg.device = RGPU_DEVICE_SOFTGPU;
  const char *lib = getenv("RGPU_FUZZ_DRIVER");
  if (lib) {
    snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s", lib);
  } else {
    char self[900];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s/../lib/librgpu_test_driver.so", self);
  }
  /* Keeps the fake driver's host allocations small and fast. */
  cfg.mem_quota = 16u << 20;
  cfg.max_payload = 1u << 20;
  cfg.session_id = 1;
  return 0;
}

typedef struct {
  int fd;
  const uint8_t *p;
  size_t n;
} feed;

static void *feeder(void *arg) {
  feed *f = arg;
  size_t off = 0;
  while (off < f->n) {
    ssize_t k = send(f->fd, f->p + off, f->n - off, MSG_NOSIGNAL);
    if (k <= 0) break;
    off += (size_t)k;
  }
  shutdown(f->fd, SHUT_WR);
  return NULL;
}

static void *drainer(void *arg) {
  int fd = *(int *)arg;
  char buf[65536];
  while (read(fd, buf, sizeof buf) > 0) {
  }
  return NULL;
}

static void serve_mode(const uint8_t *data, size_t size, const rgpu_buf *hello) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return;
  rgpu_conn *c = NULL;
  if (rgpu_conn_from_fd(sv[0], "unix", &c)) {
    close(sv[0]);
    close(sv[1]);
    return;
  }
  uint8_t *all = malloc(hello->len + size);
  memcpy(all, hello->data, hello->len);
  if (size) memcpy(all + hello->len, data, size);
  feed f = {sv[1], all, hello->len + size};
  int rfd = dup(sv[1]);
  pthread_t tf, td;
  pthread_create(&tf, NULL, feeder, &f);
  pthread_create(&td, NULL, drainer, &rfd);
  rgpu_worker *w = rgpu_worker_new(&cfg);
  if (w) rgpu_worker_serve(w, c);
  rgpu_worker_free(w);
  rgpu_conn_close(c); /* the drainer sees EOF */
  pthread_join(tf, NULL);
  pthread_join(td, NULL);
  close(rfd);
  close(sv[1]);
  free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && (data[0] & 1)) {
    rgpu_buf hello;
    rgpu_buf_init(&hello);
    rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION,
                            .caps = RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT};
    rgpu_buf fields;
    rgpu_buf_init(&fields);
    rgpu_msg_hello_req_encode(&fields, &q);
    rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, RGPU_OP_HELLO, (uint32_t)fields.len,
                        RGPU_REQ_NEED_REPLY, 1};
    uint8_t hdr[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr_encode(hdr, &h);
    rgpu_buf_put(&hello, hdr, sizeof hdr);
    rgpu_buf_put(&hello, fields.data, fields.len);
    serve_mode(data + 1, size - 1, &hello);
    rgpu_buf_free(&fields);
    rgpu_buf_free(&hello);
    return 0;
  }
  rgpu_worker *w = rgpu_worker_new(&cfg);
  if (!w) return 0;
  rgpu_buf out, hello;
  rgpu_buf_init(&out);
  rgpu_buf_init(&hello);
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION,
                          .caps = RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT};
  rgpu_msg_hello_req_encode(&hello, &q);
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, RGPU_OP_HELLO, (uint32_t)hello.len,
                      RGPU_REQ_NEED_REPLY, 1};
  int action = rgpu_worker_handle(w, &h, hello.data, hello.len, &out);
  size_t off = 0;
  while (action == RGPU_WORKER_CONTINUE && size - off >= RGPU_FRAME_HDR_SIZE) {
    if (rgpu_frame_hdr_decode(data + off, cfg.max_payload, &h)) break;
    off += RGPU_FRAME_HDR_SIZE;
    if (h.length > size - off) break;
    /* The payload in its own allocation, as the read loop has it, so that
     * ASan sees any read past its end. */
    uint8_t *p = malloc(h.length ? h.length : 1);
    if (!p) break;
    memcpy(p, data + off, h.length);
    off += h.length;
    rgpu_buf_reset(&out);
    action = rgpu_worker_handle(w, &h, p, h.length, &out);
    free(p);
  }
  rgpu_worker_free(w);
  rgpu_buf_free(&out);
  rgpu_buf_free(&hello);
  return 0;
}
