/* Background completion of waits: see rgpu_worker_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

/* Bounds the threads one session may hold; beyond it submit waits. */
#define RGPU_MAX_JOBS 64

int rgpu_jobs_enabled(const rgpu_worker *w) { return w->conn != NULL && w->drv_state == 1; }

int rgpu_worker_send(rgpu_worker *w, const struct iovec *iov, int n) {
  pthread_mutex_lock(&w->write_lock);
  int rc = w->write_failed ? RGPU_T_ECLOSED : rgpu_conn_writev_all(w->conn, iov, n);
  if (rc) w->write_failed = 1;
  pthread_mutex_unlock(&w->write_lock);
  return rc;
}

CUresult rgpu_worker_marker(rgpu_worker *w, CUstream s, CUevent *out) {
  CUresult r = w->drv.cuEventCreate(out, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) return r;
  r = w->drv.cuEventRecord(*out, s);
  if (r != CUDA_SUCCESS) {
    w->drv.cuEventDestroy(*out);
    *out = NULL;
  }
  return r;
}

static void job_done(rgpu_job *j) {
  rgpu_worker *w = j->w;
  pthread_mutex_lock(&w->jobs_lock);
  for (rgpu_job **pp = &w->jobs; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  w->njobs--;
  pthread_cond_broadcast(&w->jobs_cond);
  pthread_mutex_unlock(&w->jobs_lock);
  free(j->buf);
  free(j);
}

static void *job_main(void *arg) {
  rgpu_job *j = arg;
  rgpu_worker *w = j->w;
  const rgpu_driver *d = &w->drv;
  CUresult r = d->cuCtxSetCurrent(j->ctx);
  if (r == CUDA_SUCCESS) r = j->kind == RGPU_JOB_CTX_SYNC ? d->cuCtxSynchronize() : d->cuEventSynchronize(j->ev);
  if (j->own_ev && j->ev) d->cuEventDestroy(j->ev);
  if (j->kind != RGPU_JOB_RELEASE) {
    rgpu_buf out;
    rgpu_buf_init(&out);
    rgpu_worker_flush_output(w, &out);
    char msg[160] = "";
    const void *tail = NULL;
    size_t tail_len = 0;
    if (r == CUDA_SUCCESS) {
      tail = j->buf;
      tail_len = j->buf_len;
    } else {
      tail_len = (size_t)snprintf(msg, sizeof msg, "%s: %s", rgpu_op_name(j->opcode),
                                  rgpu_driver_error_name(d, r));
      tail = msg;
    }
    rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, j->opcode, (uint32_t)tail_len,
                        r == CUDA_SUCCESS ? 0u : (uint32_t)r, j->seq};
    uint8_t hdr[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr_encode(hdr, &h);
    rgpu_buf_put(&out, hdr, sizeof hdr);
    struct iovec iov[2] = {{out.data, out.len}, {(void *)tail, tail_len}};
    if (!out.err) rgpu_worker_send(w, iov, tail_len ? 2 : 1);
    rgpu_buf_free(&out);
  } else if (r != CUDA_SUCCESS) {
    /* The copy itself failed: report it like any unreplied failure. */
    RGPU_DEBUG("session=%llu async copy failed: %s", (unsigned long long)w->cfg.session_id,
               rgpu_driver_error_name(d, r));
  }
  job_done(j);
  return NULL;
}

int rgpu_jobs_submit(rgpu_worker *w, rgpu_job *j) {
  j->w = w;
  pthread_mutex_lock(&w->jobs_lock);
  while (w->njobs >= RGPU_MAX_JOBS) pthread_cond_wait(&w->jobs_cond, &w->jobs_lock);
  j->next = w->jobs;
  w->jobs = j;
  w->njobs++;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 256 << 10);
  int rc = pthread_create(&j->th, &a, job_main, j);
  pthread_attr_destroy(&a);
  if (rc) {
    w->jobs = j->next;
    w->njobs--;
  }
  pthread_mutex_unlock(&w->jobs_lock);
  return rc;
}

void rgpu_jobs_barrier(rgpu_worker *w, const void *ref) {
  pthread_mutex_lock(&w->jobs_lock);
  for (;;) {
    int busy = 0;
    for (rgpu_job *j = w->jobs; j && !busy; j = j->next) busy = ref == NULL || j->ref == ref;
    if (!busy) break;
    pthread_cond_wait(&w->jobs_cond, &w->jobs_lock);
  }
  pthread_mutex_unlock(&w->jobs_lock);
}
