/* rgpu_spank: Slurm SPANK plugin that gives jobs remote GPUs from an rgpu
 * pool (issue 20).
 *
 *   srun --rgpu=2 ./app            sbatch --rgpu=1 job.sh
 *
 * plugstack.conf:
 *   required /usr/lib/rgpu/slurm/rgpu_spank.so pool=/etc/rgpu/pool.conf [group=rgpu] [max_hours=24]
 *
 * In the job step's slurmstepd (remote context, still root), after the
 * options are known, the plugin takes N GPUs from the pool (rgpu_pool.h:
 * servers with the most free GPUs first), mints a token that those servers
 * accept until the job's end time, and puts into the job's environment
 *
 *   RGPU_SERVER   the first server (the client uses one server today)
 *   RGPU_SERVERS  every server, comma-separated, one entry per GPU
 *   RGPU_TOKEN    the job's token
 *   RGPU_CA       the pool's CA, when the pool file names one
 *   RGPU_POOL_GRANT  the grant's name (job-<job>.<step>)
 *
 * When the step ends (slurm_spank_exit, whatever became of its tasks: a
 * client killed with SIGKILL included) the token files are removed and the
 * servers end the job's sessions within about a second.  The job epilog
 * sweeps whatever a crashed slurmstepd left behind, and the token expires
 * at the job's end time (plus a minute) in any case.
 *
 * Steps inside an allocation that already holds a grant (srun inside
 * `sbatch --rgpu`) inherit the environment and take nothing more. */
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "rgpu_pool.h"

SPANK_PLUGIN(rgpu, 1);

/* Resolved from the Slurm process the plugin is loaded into (slurmstepd
 * carries the whole Slurm API); without them the token's lifetime falls
 * back to max_hours.  Weak, so the plugin needs no libslurm of its own. */
#pragma weak slurm_load_job
#pragma weak slurm_free_job_info_msg

#define DEFAULT_POOL "/etc/rgpu/pool.conf"
/* After the job's end time Slurm still needs a moment to kill it. */
#define EXPIRY_SLACK_S 60

static int gpus_asked;        /* --rgpu=N; 0 = not asked */
static char grant_name[128];  /* set once this step holds a grant */
static rgpu_pool pool;

static int opt_rgpu(int val, const char *optarg, int remote) {
  (void)val;
  (void)remote;
  char *end;
  long n = optarg ? strtol(optarg, &end, 10) : -1;
  if (!optarg || end == optarg || *end || n < 1 || n > RGPU_POOL_MAX_GPUS) {
    slurm_error("rgpu: --rgpu=%s: expected a number of remote GPUs, 1 .. %d", optarg ? optarg : "",
                RGPU_POOL_MAX_GPUS);
    return -1;
  }
  gpus_asked = (int)n;
  return 0;
}

static struct spank_option rgpu_option = {
    "rgpu", "N",
    "Use N remote GPUs of the rgpu pool (sets RGPU_SERVER, RGPU_SERVERS, RGPU_TOKEN)", 1, 0,
    opt_rgpu};

typedef struct {
  const char *pool;
  long gid;      /* -1: leave the token files' group alone */
  int max_hours; /* token lifetime when the job's end time is unknown or unlimited */
} plugin_args;

static int parse_args(int ac, char **av, plugin_args *a) {
  a->pool = DEFAULT_POOL;
  a->gid = -1;
  a->max_hours = 24;
  for (int i = 0; i < ac; i++) {
    if (!strncmp(av[i], "pool=", 5)) {
      a->pool = av[i] + 5;
    } else if (!strncmp(av[i], "group=", 6)) {
      struct group *g = getgrnam(av[i] + 6);
      if (!g) {
        slurm_error("rgpu: plugstack argument %s: no such group", av[i]);
        return -1;
      }
      a->gid = (long)g->gr_gid;
    } else if (!strncmp(av[i], "max_hours=", 10)) {
      a->max_hours = atoi(av[i] + 10);
      if (a->max_hours < 1) {
        slurm_error("rgpu: plugstack argument %s: expected hours >= 1", av[i]);
        return -1;
      }
    } else {
      slurm_error("rgpu: unknown plugstack argument '%s' (pool=, group=, max_hours=)", av[i]);
      return -1;
    }
  }
  return 0;
}

/* The job's end time from slurmctld, for a job with a time limit; 0 when
 * unknown or unlimited. */
static int64_t job_end_time(uint32_t job) {
  if (!slurm_load_job || !slurm_free_job_info_msg) return 0;
  job_info_msg_t *m = NULL;
  if (slurm_load_job(&m, job, SHOW_DETAIL) != 0 || !m) return 0;
  int64_t end = 0;
  if (m->record_count > 0 && m->job_array[0].time_limit != INFINITE &&
      m->job_array[0].time_limit != NO_VAL)
    end = (int64_t)m->job_array[0].end_time;
  slurm_free_job_info_msg(m);
  return end;
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  /* Registered here rather than through a spank_options table so that
   * sbatch and salloc know --rgpu too; slurmd itself (the job epilog's
   * context) has no options. */
  spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR) return 0;
  if (spank_option_register(sp, &rgpu_option) != ESPANK_SUCCESS) {
    slurm_error("rgpu: cannot register --rgpu");
    return -1;
  }
  return 0;
}

/* In srun, salloc and sbatch themselves (before anything is allocated):
 * refuse at once, with the reason and a failing exit status, a request the
 * pool cannot meet, so that the user is not left with a launch failure
 * that only slurmd's log explains.  sbatch and salloc may wait in the queue,
 * so only the pool's size counts there; srun launches now, so what is free
 * counts too.  A pool file this host cannot read leaves the decision to
 * the step (the token directory may live on the nodes only).  The step
 * still takes the GPUs under the pool's lock: this is a check, not a
 * reservation. */
static int check_before_launch(int ac, char **av, spank_context_t ctx) {
  const char *held = getenv("RGPU_POOL_GRANT");
  if (held && *held) return 0; /* inside an allocation that holds GPUs */
  plugin_args a;
  char err[700];
  if (parse_args(ac, av, &a) || rgpu_pool_load(a.pool, &pool, err, sizeof err)) return 0;
  int total = 0, freegpus = 0, readable = 1;
  int64_t now = (int64_t)time(NULL);
  for (int i = 0; i < pool.nservers; i++) {
    total += pool.servers[i].gpus;
    int used = ctx == S_CTX_LOCAL ? rgpu_pool_used(&pool, i, now) : 0;
    if (used < 0) readable = 0;
    else if (used < pool.servers[i].gpus) freegpus += pool.servers[i].gpus - used;
  }
  if (gpus_asked > total) {
    slurm_error("rgpu: %d remote GPUs asked, the pool has %d", gpus_asked, total);
    return -1;
  }
  if (ctx == S_CTX_LOCAL && readable && gpus_asked > freegpus) {
    slurm_error("rgpu: %d remote GPUs asked, %d free of %d in the pool", gpus_asked, freegpus,
                total);
    return -1;
  }
  return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
  spank_context_t ctx = spank_context();
  if (gpus_asked && (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR))
    return check_before_launch(ac, av, ctx);
  if (ctx != S_CTX_REMOTE || gpus_asked == 0) return 0;
  char held[128];
  if (spank_getenv(sp, "RGPU_POOL_GRANT", held, sizeof held) == ESPANK_SUCCESS && held[0])
    return 0; /* the enclosing batch step holds the GPUs */
  plugin_args a;
  if (parse_args(ac, av, &a)) return -1;
  char err[700];
  if (rgpu_pool_load(a.pool, &pool, err, sizeof err)) {
    slurm_error("rgpu: %s", err);
    return -1;
  }
  uint32_t job = 0, step = 0;
  spank_get_item(sp, S_JOB_ID, &job);
  spank_get_item(sp, S_JOB_STEPID, &step);
  char name[128];
  snprintf(name, sizeof name, "job-%u.%u", job, step);
  int64_t now = (int64_t)time(NULL);
  int64_t end = job_end_time(job);
  int64_t expires = end > now ? end + EXPIRY_SLACK_S : now + (int64_t)a.max_hours * 3600;
  rgpu_pool_grant g;
  if (rgpu_pool_grant_gpus(&pool, gpus_asked, name, expires, a.gid, now, &g, err, sizeof err)) {
    slurm_error("rgpu: job %u: %s", job, err);
    return -1;
  }
  snprintf(grant_name, sizeof grant_name, "%s", g.name);
  char servers[RGPU_POOL_MAX_GPUS * 260];
  int bad = rgpu_pool_grant_servers(&pool, &g, servers, sizeof servers) != 0;
  bad |= spank_setenv(sp, "RGPU_SERVER", pool.servers[g.server[0]].uri, 1) != ESPANK_SUCCESS;
  bad |= spank_setenv(sp, "RGPU_SERVERS", servers, 1) != ESPANK_SUCCESS;
  bad |= spank_setenv(sp, "RGPU_TOKEN", g.token, 1) != ESPANK_SUCCESS;
  bad |= spank_setenv(sp, "RGPU_POOL_GRANT", g.name, 1) != ESPANK_SUCCESS;
  if (pool.ca[0]) bad |= spank_setenv(sp, "RGPU_CA", pool.ca, 1) != ESPANK_SUCCESS;
  explicit_bzero(g.token, sizeof g.token);
  if (bad) {
    slurm_error("rgpu: job %u: cannot set the job's environment", job);
    rgpu_pool_revoke(&pool, grant_name);
    grant_name[0] = 0;
    return -1;
  }
  slurm_info("rgpu: job %u step %u: %d remote GPU%s on %s (token %s, expires %lld)", job, step,
             gpus_asked, gpus_asked == 1 ? "" : "s", servers, grant_name, (long long)expires);
  return 0;
}

/* The step is over, however its tasks ended: its GPUs go back. */
int slurm_spank_exit(spank_t sp, int ac, char **av) {
  (void)sp;
  (void)ac;
  (void)av;
  if (spank_context() != S_CTX_REMOTE || !grant_name[0]) return 0;
  int n = rgpu_pool_revoke(&pool, grant_name);
  slurm_info("rgpu: %s revoked (%d token file%s removed)", grant_name, n, n == 1 ? "" : "s");
  grant_name[0] = 0;
  return 0;
}

/* The job is over: whatever a step could not remove (its slurmstepd died)
 * goes now. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av) {
  plugin_args a;
  if (parse_args(ac, av, &a)) return 0;
  uint32_t job = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || !job) return 0;
  rgpu_pool p;
  char err[700];
  if (rgpu_pool_load(a.pool, &p, err, sizeof err)) return 0; /* no pool on this node */
  int n = rgpu_pool_revoke_job(&p, job);
  if (n) slurm_info("rgpu: job %u epilog removed %d token file%s", job, n, n == 1 ? "" : "s");
  return 0;
}
