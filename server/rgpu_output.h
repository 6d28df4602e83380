/* Device printf output of a session, on its way to the client.
 *
 * softgpu hands the text to a print handler (rgpu_device.c).  A real
 * driver writes it to the process's stdout at synchronization points, so
 * on a real GPU the worker's stdout is a pipe (rgpu_output_capture_start):
 * a reader thread moves what the driver writes into the session's pending
 * output, and every reply first takes what is already written
 * (rgpu_output_capture_drain), so the text reaches the client before the
 * reply to the synchronization that printed it, in the order a local GPU
 * prints it.  Without the capture the text went to rgpu-server's own
 * stdout, on the GPU machine. */
#ifndef RGPU_OUTPUT_H
#define RGPU_OUTPUT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_wire.h"

/* Device printf text waiting to go out as OUTPUT events (softgpu may call
 * its print handler from its own threads). */
typedef struct {
  pthread_mutex_t lock;
  rgpu_buf pending;
  uint64_t dropped; /* bytes beyond RGPU_OUTPUT_MAX, reported in a note */
  int capture_fd;   /* read end of the stdout pipe, -1 when not capturing */
  int saved_stdout; /* the worker's stdout before the capture */
  int reader_running;
  pthread_t reader;
} rgpu_worker_output;

/* Device printf text waiting to be sent beyond this is dropped (and the
 * client told so): a runaway kernel must not exhaust the worker's memory. */
#define RGPU_OUTPUT_MAX (16u << 20)

void rgpu_output_init(rgpu_worker_output *o);
/* Appends text (the lock held or not: takes it). */
void rgpu_output_append(rgpu_worker_output *o, const char *text, size_t len);
/* Makes fd 1 a pipe read by a thread of its own.  Returns 0, or -1 with
 * errno (the output then stays where it was: the server's stdout). */
int rgpu_output_capture_start(rgpu_worker_output *o);
/* Flushes stdio's stdout and reads what the pipe holds into pending.  The
 * caller holds o->lock. */
void rgpu_output_capture_drain(rgpu_worker_output *o);
/* Restores fd 1, stops the reader, keeps what it read. */
void rgpu_output_capture_stop(rgpu_worker_output *o);
void rgpu_output_free(rgpu_worker_output *o);

#endif
