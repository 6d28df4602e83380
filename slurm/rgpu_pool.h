/* rgpu_pool: a pool of rgpu servers shared by the jobs of a scheduler
 * (issue 20), and the per-job tokens that give a job some of its GPUs.
 *
 * The pool file (one item per line, '#' starts a comment):
 *
 *     token-dir /var/lib/rgpu/pool          where job tokens are written
 *     ca /etc/rgpu/ca.pem                   optional: RGPU_CA for the jobs
 *     server gpu1 tls://gpu1:7000 gpus=4    name, URI, GPUs it lends
 *     server gpu2 tls://gpu2:7000 gpus=4
 *
 * Server NAME runs `rgpu-server --token-dir <token-dir>/NAME`: a job that
 * got k of its GPUs has a file `job-<job>.<step>` there (the token, its
 * expiry, gpus=k; server/rgpu_job_token.h), and the server accepts that
 * token until the file is removed or expires, then ends its sessions.
 * What a server has lent is the sum of gpus= over its live files, so the
 * token directory is the pool's whole state: no daemon, and a crashed
 * job's GPUs return when its token expires at the latest.  Allocation runs
 * under an flock of <token-dir>/.lock.  Pure file logic, no Slurm. */
#ifndef RGPU_POOL_H
#define RGPU_POOL_H

#include <stddef.h>
#include <stdint.h>

#define RGPU_POOL_MAX_SERVERS 64
#define RGPU_POOL_MAX_GPUS 64 /* one job */

typedef struct {
  char name[64];
  char uri[256];
  int gpus;
} rgpu_pool_server;

typedef struct {
  char token_dir[512];
  char ca[512]; /* "" = none */
  rgpu_pool_server servers[RGPU_POOL_MAX_SERVERS];
  int nservers;
} rgpu_pool;

/* Reads a pool file.  0, or -1 with the file, line and reason in err. */
int rgpu_pool_load(const char *path, rgpu_pool *p, char *err, size_t errlen);

/* GPUs of server i lent to live (unexpired at `now`) tokens; expired token
 * files are removed on the way.  -1 when its directory cannot be read. */
int rgpu_pool_used(const rgpu_pool *p, int i, int64_t now);

/* What a job got: one entry per GPU (a server appears once per GPU it lends
 * the job, most-free servers first, spread over as many servers as can). */
typedef struct {
  int n;
  int server[RGPU_POOL_MAX_GPUS]; /* index into pool.servers */
  char token[65];                 /* 32 random bytes, hex */
  char name[128];                 /* the token files' name: job-<job>.<step> */
  int64_t expires;
} rgpu_pool_grant;

/* Takes `gpus` GPUs for a job: under the pool lock, counts what every
 * server has lent, picks servers, mints a token and writes its file into
 * each chosen server's directory (mode 0640, group `gid` unless it is
 * (gid_t)-1), valid until `expires` (unix seconds).  0 and *g; -1 with a
 * sentence in err (not enough free GPUs: how many are free). */
int rgpu_pool_grant_gpus(const rgpu_pool *p, int gpus, const char *name, int64_t expires,
                         long gid, int64_t now, rgpu_pool_grant *g, char *err, size_t errlen);

/* Removes the grant's token files: the servers end its sessions and the
 * GPUs are free again.  Returns how many files were removed. */
int rgpu_pool_revoke(const rgpu_pool *p, const char *name);

/* Removes every token file of job `job` (any step): the job epilog's
 * sweep, for steps whose own exit hook never ran.  Returns the count. */
int rgpu_pool_revoke_job(const rgpu_pool *p, uint32_t job);

/* "uri,uri,..." for RGPU_SERVERS (one per GPU).  0, or -1 if cap is short. */
int rgpu_pool_grant_servers(const rgpu_pool *p, const rgpu_pool_grant *g, char *out, size_t cap);

#endif
