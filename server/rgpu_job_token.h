/* rgpu_job_token: tokens that a scheduler hands out per job (issue 20).
 *
 * `rgpu-server --token-dir DIR` accepts, besides --token-file's token, the
 * token of any file in DIR whose name does not start with '.', for as long
 * as the file is there and has not expired.  A scheduler plugin (the Slurm
 * SPANK plugin, slurm/rgpu_spank.c) writes one file per job and removes it
 * when the job ends; the listener then ends that token's sessions, so a
 * job's GPUs are freed even when its client crashed.  File format, one
 * item per line:
 *
 *     <token>              the first line, as in --token-file
 *     expires=<unix time>  optional: refused from this second on
 *     ...                  other key=value lines are the writer's (ignored)
 *
 * Files are written to a dot-name and renamed into place, so a reader never
 * sees half a file.  Pure file logic: no sockets, no processes. */
#ifndef RGPU_JOB_TOKEN_H
#define RGPU_JOB_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_auth.h"

#define RGPU_JOB_TOKEN_NAME_MAX 128

typedef struct {
  char token[RGPU_AUTH_TOKEN_MAX + 1];
  int64_t expires; /* unix seconds; 0 = never */
} rgpu_job_token;

/* Reads one token file.  Returns 0, or -1 with a sentence in err (missing,
 * not a regular file, writable by others, empty first line, bad expires=). */
int rgpu_job_token_read(const char *path, rgpu_job_token *out, char *err, size_t errlen);

/* Looks for the client's token (len bytes) among DIR's files that have not
 * expired at `now`.  Returns 1 and the file's name in name (cap bytes) when
 * one matches, 0 when none does, -1 when DIR cannot be read (err says why).
 * Each candidate is compared in constant time. */
int rgpu_job_token_find(const char *dir, const void *given, size_t len, int64_t now, char *name,
                        size_t cap, char *err, size_t errlen);

/* Whether the file `name` in DIR still holds a token valid at `now`: 1 yes;
 * 0 removed, unreadable or expired (why in err).  The listener asks this of
 * every session admitted with a job token, about once a second. */
int rgpu_job_token_still_valid(const char *dir, const char *name, int64_t now, char *err,
                               size_t errlen);

#endif
