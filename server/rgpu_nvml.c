/* The server's NVML, loaded at run time (see rgpu_nvml.h). */
#include "rgpu_nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "rgpu_log.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static rgpu_server_nvml g_nvml;
static int g_why = NVML_ERROR_UNINITIALIZED;
static int g_loaded;

static void load(void) {
  /* RGPU_SERVER_NVML_LIB lets a test or an unusual install name the
   * library; the default is the SONAME the driver package installs. */
  const char *path = getenv("RGPU_SERVER_NVML_LIB");
  if (!path || !*path) path = "libnvidia-ml.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    g_why = NVML_ERROR_LIBRARY_NOT_FOUND;
    RGPU_INFO("no NVML on this server (%s): NVML figures come from the server's own accounting",
              dlerror());
    return;
  }
  /* A server started with rgpu's facades preloaded (from inside `rgpu
   * run`) would get rgpu's own libnvidia-ml.so.1 here, which forwards to a
   * client session: refuse it rather than ask a server about itself.  Its
   * implementation lives in its dependency libcudart.so.13, which dlsym on
   * this handle searches too. */
  if (dlsym(lib, "rgpu_nvml_nvmlInit_v2")) {
    RGPU_WARN("%s is rgpu's own NVML facade, not NVIDIA's: NVML figures not served", path);
    g_why = NVML_ERROR_LIBRARY_NOT_FOUND;
    dlclose(lib);
    return;
  }
  int missing = 0;
#define RGPU_SERVER_NVML_REQ(name)                                   \
  g_nvml.name = (__typeof__(g_nvml.name))dlsym(lib, #name);          \
  if (!g_nvml.name) {                                                \
    RGPU_WARN("%s has no %s: NVML figures not served", path, #name); \
    missing = 1;                                                     \
  }
#define RGPU_SERVER_NVML_OPT(name) g_nvml.name = (__typeof__(g_nvml.name))dlsym(lib, #name);
  RGPU_SERVER_NVML_FUNCS(RGPU_SERVER_NVML_REQ)
  RGPU_SERVER_NVML_OPTIONAL_FUNCS(RGPU_SERVER_NVML_OPT)
#undef RGPU_SERVER_NVML_REQ
#undef RGPU_SERVER_NVML_OPT
  if (missing) {
    g_why = NVML_ERROR_FUNCTION_NOT_FOUND;
    dlclose(lib);
    return;
  }
  nvmlReturn_t r = g_nvml.nvmlInit_v2();
  if (r != NVML_SUCCESS) {
    g_why = (int)r;
    RGPU_WARN("nvmlInit_v2 failed: %s (%d)", g_nvml.nvmlErrorString(r), (int)r);
    dlclose(lib);
    return;
  }
  /* Kept loaded and initialized for the worker's life: the process is
   * one session and exits with it. */
  g_why = NVML_SUCCESS;
  g_loaded = 1;
}

const rgpu_server_nvml *rgpu_server_nvml_get(int *why) {
  pthread_once(&g_once, load);
  if (why) *why = g_why;
  return g_loaded ? &g_nvml : NULL;
}
