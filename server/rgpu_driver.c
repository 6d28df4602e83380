#include "rgpu_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Two levels so that the argument is macro-expanded first: cuMemAlloc
 * becomes the string "cuMemAlloc_v2", the symbol libcuda really exports. */
#define RGPU_STR2(x) #x
#define RGPU_STR(x) RGPU_STR2(x)

int rgpu_driver_load(rgpu_driver *d, const char *path, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  snprintf(d->path, sizeof d->path, "%s", path);
  dlerror();
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) {
    const char *e = dlerror();
    snprintf(err, errlen, "cannot load CUDA driver %s: %s", path, e ? e : "unknown error");
    return -1;
  }
  /* rgpu's own libcuda.so.1 (the client's driver facade, found first when
   * LD_LIBRARY_PATH names rgpu's build/lib) would turn the server into a
   * client of itself: refuse it by name. */
  if (dlsym(d->lib, "rgpu_drv_cuInit")) {
    snprintf(err, errlen,
             "%s is rgpu's own libcuda.so.1 (the client's driver facade), not NVIDIA's driver: "
             "remove rgpu's library folder from LD_LIBRARY_PATH for rgpu-server",
             path);
    d->lib = NULL;
    return -1;
  }
#define RGPU_RESOLVE(name)                                                              \
  do {                                                                                  \
    dlerror();                                                                          \
    *(void **)&d->name = dlsym(d->lib, RGPU_STR(name));                                 \
    if (!d->name) {                                                                     \
      const char *e = dlerror();                                                        \
      snprintf(err, errlen, "CUDA driver %s lacks %s: %s", path, RGPU_STR(name),        \
               e ? e : "symbol not found");                                             \
      dlclose(d->lib);                                                                  \
      d->lib = NULL;                                                                    \
      return -1;                                                                        \
    }                                                                                   \
  } while (0);
  RGPU_DRIVER_FUNCS(RGPU_RESOLVE)
#undef RGPU_RESOLVE
#define RGPU_RESOLVE_OPT(name) *(void **)&d->name = dlsym(d->lib, RGPU_STR(name));
  RGPU_DRIVER_OPTIONAL_FUNCS(RGPU_RESOLVE_OPT)
#undef RGPU_RESOLVE_OPT
  *(void **)&d->sgSetPrintHandler = dlsym(d->lib, "sgSetPrintHandler");
  *(void **)&d->sgIsSoftgpu = dlsym(d->lib, "sgIsSoftgpu");
  *(void **)&d->sgMemCheck = dlsym(d->lib, "sgMemCheck");
  *(void **)&d->cuModuleLoadDataEx = dlsym(d->lib, "cuModuleLoadDataEx");
  d->is_softgpu = d->sgIsSoftgpu ? d->sgIsSoftgpu() == 1 : 0;
  return 0;
}

void rgpu_driver_unload(rgpu_driver *d) {
  /* The driver may own threads (softgpu's stream workers, the real driver's
   * helpers) that outlive their last call; unloading the code under them
   * crashes at exit.  The worker process exits soon after, so keep it. */
  d->lib = NULL;
}

const char *rgpu_driver_error_name(const rgpu_driver *d, CUresult r) {
  const char *s = NULL;
  if (d && d->cuGetErrorName && d->cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_UNKNOWN";
}

void rgpu_server_lib_path(const char *env_name, const char *file, char *out, size_t cap) {
  const char *env = getenv(env_name);
  if (env && *env) {
    snprintf(out, cap, "%s", env);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(out, cap, "%s", file);
    return;
  }
  exe[n] = 0;
  /* An install's private directory (lib/rgpu), else the build tree's lib. */
  const char *dir = dirname(exe);
  snprintf(out, cap, "%s/../lib/rgpu/%s", dir, file);
  if (access(out, R_OK)) snprintf(out, cap, "%s/../lib/%s", dir, file);
}

void rgpu_driver_softgpu_path(const char *explicit_path, char *out, size_t cap) {
  if (explicit_path && *explicit_path) {
    snprintf(out, cap, "%s", explicit_path);
    return;
  }
  rgpu_server_lib_path("RGPU_SOFTGPU_LIB", "libsoftgpu.so", out, cap);
}

int rgpu_driver_probe_count(const char *path) {
  /* In a child, like the probe above: the listener never loads a driver. */
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    rgpu_driver d;
    char err[512];
    int count = 0;
    if (rgpu_driver_load(&d, path, err, sizeof err) || d.cuInit(0) != CUDA_SUCCESS ||
        d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 0)
      _exit(255);
    _exit(count > 254 ? 254 : count);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) == 255) return -1;
  return WEXITSTATUS(st);
}

int rgpu_driver_probe_cuda(void) {
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    /* Quiet: a machine without the driver is the normal softgpu case. */
    rgpu_driver d;
    char err[512];
    if (rgpu_driver_load(&d, "libcuda.so.1", err, sizeof err)) _exit(1);
    int count = 0;
    if (d.cuInit(0) != CUDA_SUCCESS) _exit(2);
    if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) _exit(3);
    _exit(d.is_softgpu ? 4 : 0);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return 0;
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

const char *rgpu_driver_fault_name(CUresult r) {
  switch ((int)r) {
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 717: return "CUDA_ERROR_INVALID_ADDRESS_SPACE";
    case 718: return "CUDA_ERROR_INVALID_PC";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    default: return NULL;
  }
}
