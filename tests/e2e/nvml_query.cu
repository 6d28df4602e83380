// NVML beside the CUDA runtime, the way PyTorch uses it: libnvidia-ml.so.1
// opened by name with dlopen (no nvml.h needed: the few declarations are
// below, from NVIDIA's documented ABI).  Checks that NVML and CUDA describe
// the same devices: count, name, UUID, PCI location, compute capability,
// memory total; handles found by index, PCI bus id and UUID agree; error
// texts and argument errors; init/shutdown rules.  Figures a device may not
// have (temperature, power, utilization, fan) are printed as "present" or
// "not supported", which is the same natively and through rgpu on one GPU.
// Lines starting with "rgpu-stats:" hold what differs natively (process
// lists see different pids in containers).
//
//   nvml_query [--hold SECONDS] [--loop N]
//     --hold: keep the session open that long after the checks, for
//             `rgpu smi` to see
//     --loop: then call four getters of device 0 N times (a monitoring
//             loop: through rgpu they are served from the cached snapshot)
#include <dlfcn.h>
#include <unistd.h>

#include "rgpu_check.h"

typedef void *nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
       NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

static void *g_lib;
template <typename F> static F sym(const char *name) {
  void *p = dlsym(g_lib, name);
  if (!p) {
    std::fprintf(stderr, "FAIL libnvidia-ml.so.1 has no %s\n", name);
    std::exit(1);
  }
  return (F)p;
}

#define NV_OK(call)                                                                   \
  do {                                                                                \
    int r_ = (call);                                                                  \
    if (r_ != NVML_SUCCESS) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, r_, \
                   errstr(r_));                                                       \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

static const char *(*errstr)(int);

// "present" or "not supported"; anything else is a failure.
static const char *presence(int r, const char *what) {
  if (r == NVML_SUCCESS) return "present";
  if (r == NVML_ERROR_NOT_SUPPORTED) return "not supported";
  std::fprintf(stderr, "FAIL %s -> %d %s\n", what, r, errstr(r));
  std::exit(1);
}

static int uuid_format_ok(const char *u) {
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  if (std::strncmp(u, "GPU-", 4) || std::strlen(u) != 40) return 0;
  for (int i = 4; i < 40; i++) {
    int dash = i == 12 || i == 17 || i == 22 || i == 27;
    char c = u[i];
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  int hold_s = 0, loops = 0;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!std::strcmp(argv[a], "--hold")) hold_s = std::atoi(argv[a + 1]);
    if (!std::strcmp(argv[a], "--loop")) loops = std::atoi(argv[a + 1]);
  }
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  // A context and an allocation, so this process uses device 0.
  void *buf = nullptr;
  const size_t alloc_bytes = 8u << 20;
  CHECK(cudaMalloc(&buf, alloc_bytes));
  CHECK(cudaMemset(buf, 1, alloc_bytes));
  CHECK(cudaDeviceSynchronize());
  size_t cuda_free = 0, cuda_total = 0;
  CHECK(cudaMemGetInfo(&cuda_free, &cuda_total));

  g_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!g_lib) {
    std::fprintf(stderr, "FAIL dlopen libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  errstr = sym<const char *(*)(int)>("nvmlErrorString");
  auto init = sym<int (*)(void)>("nvmlInit_v2");
  auto shutdown = sym<int (*)(void)>("nvmlShutdown");
  auto count_v2 = sym<int (*)(unsigned *)>("nvmlDeviceGetCount_v2");
  auto by_index = sym<int (*)(unsigned, nvmlDevice_t *)>("nvmlDeviceGetHandleByIndex_v2");
  auto by_bus = sym<int (*)(const char *, nvmlDevice_t *)>("nvmlDeviceGetHandleByPciBusId_v2");
  auto by_uuid = sym<int (*)(const char *, nvmlDevice_t *)>("nvmlDeviceGetHandleByUUID");
  auto get_index = sym<int (*)(nvmlDevice_t, unsigned *)>("nvmlDeviceGetIndex");
  auto get_name = sym<int (*)(nvmlDevice_t, char *, unsigned)>("nvmlDeviceGetName");
  auto get_uuid = sym<int (*)(nvmlDevice_t, char *, unsigned)>("nvmlDeviceGetUUID");
  auto get_pci = sym<int (*)(nvmlDevice_t, nvmlPciInfo_t *)>("nvmlDeviceGetPciInfo_v3");
  auto get_mem = sym<int (*)(nvmlDevice_t, nvmlMemory_t *)>("nvmlDeviceGetMemoryInfo");
  auto get_cc = sym<int (*)(nvmlDevice_t, int *, int *)>("nvmlDeviceGetCudaComputeCapability");
  auto get_temp = sym<int (*)(nvmlDevice_t, int, unsigned *)>("nvmlDeviceGetTemperature");
  auto get_power = sym<int (*)(nvmlDevice_t, unsigned *)>("nvmlDeviceGetPowerUsage");
  auto get_util = sym<int (*)(nvmlDevice_t, nvmlUtilization_t *)>("nvmlDeviceGetUtilizationRates");
  auto get_fan = sym<int (*)(nvmlDevice_t, unsigned *)>("nvmlDeviceGetFanSpeed");
  auto get_procs = sym<int (*)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *)>(
      "nvmlDeviceGetComputeRunningProcesses_v3");
  auto nvlink = sym<int (*)(nvmlDevice_t, unsigned, int *)>("nvmlDeviceGetNvLinkState");
  auto cuda_ver = sym<int (*)(int *)>("nvmlSystemGetCudaDriverVersion_v2");
  auto drv_ver = sym<int (*)(char *, unsigned)>("nvmlSystemGetDriverVersion");

  // NVML's texts, which programs print.
  EXPECT(!std::strcmp(errstr(NVML_SUCCESS), "Success"));
  EXPECT(!std::strcmp(errstr(NVML_ERROR_UNINITIALIZED), "Uninitialized"));
  EXPECT(!std::strcmp(errstr(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument"));
  EXPECT(!std::strcmp(errstr(NVML_ERROR_NOT_SUPPORTED), "Not Supported"));
  std::printf("nvmlErrorString(NOT_SUPPORTED) = %s\n", errstr(NVML_ERROR_NOT_SUPPORTED));

  unsigned cnt = 0;
  EXPECT(count_v2(&cnt) == NVML_ERROR_UNINITIALIZED);
  NV_OK(init());
  NV_OK(count_v2(&cnt));
  EXPECT((int)cnt == n);
  std::printf("nvml device count %u matches cudaGetDeviceCount\n", cnt);

  int nv_cuda = 0, rt_drv = 0;
  NV_OK(cuda_ver(&nv_cuda));
  CHECK(cudaDriverGetVersion(&rt_drv));
  EXPECT(nv_cuda == rt_drv);
  char dv[96] = "";
  std::printf("driver version: %s\n", presence(drv_ver(dv, sizeof dv), "nvmlSystemGetDriverVersion"));

  nvmlDevice_t h = nullptr, h2 = nullptr;
  EXPECT(by_index(cnt, &h) == NVML_ERROR_INVALID_ARGUMENT);
  for (unsigned i = 0; i < cnt; i++) {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, (int)i));
    NV_OK(by_index(i, &h));
    unsigned idx = 99;
    NV_OK(get_index(h, &idx));
    EXPECT(idx == i);

    char name[96];
    NV_OK(get_name(h, name, sizeof name));
    EXPECT(!std::strcmp(name, p.name));
    EXPECT(get_name(h, name, 1) == NVML_ERROR_INSUFFICIENT_SIZE);
    std::printf("device %u name %s matches cudaGetDeviceProperties\n", i, p.name);

    char uuid[96], want[48];
    NV_OK(get_uuid(h, uuid, sizeof uuid));
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    std::snprintf(want, sizeof want,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    EXPECT(uuid_format_ok(uuid));
    EXPECT(!std::strcmp(uuid, want));
    NV_OK(by_uuid(uuid, &h2));
    EXPECT(h2 == h);
    std::printf("device %u uuid has the GPU-8-4-4-4-12 form, equals cudaDeviceProp.uuid, finds the device\n", i);

    nvmlPciInfo_t pci;
    std::memset(&pci, 0, sizeof pci);
    NV_OK(get_pci(h, &pci));
    EXPECT(pci.domain == (unsigned)p.pciDomainID && pci.bus == (unsigned)p.pciBusID &&
           pci.device == (unsigned)p.pciDeviceID);
    NV_OK(by_bus(pci.busId, &h2));
    EXPECT(h2 == h);
    NV_OK(by_bus(pci.busIdLegacy, &h2));
    EXPECT(h2 == h);
    // What PyTorch passes: the runtime's own bus id string.
    char rt_bus[32] = "";
    CHECK(cudaDeviceGetPCIBusId(rt_bus, sizeof rt_bus, (int)i));
    NV_OK(by_bus(rt_bus, &h2));
    EXPECT(h2 == h);
    std::printf("device %u bus id %s agrees with cudaDeviceProp and finds the device\n", i, pci.busId);

    int ma = 0, mi = 0;
    NV_OK(get_cc(h, &ma, &mi));
    EXPECT(ma == p.major && mi == p.minor);

    nvmlMemory_t m;
    NV_OK(get_mem(h, &m));
    EXPECT(m.total > 0 && m.used <= m.total && m.free <= m.total);
    if (i == 0) {
      // The same memory CUDA reports for the current device (within 2%:
      // what a driver keeps for itself may differ between the two views).
      double diff = (double)m.total - (double)cuda_total;
      EXPECT(diff < 0.02 * (double)cuda_total && -diff < 0.02 * (double)cuda_total);
      std::printf("device 0 memory total matches cudaMemGetInfo's\n");
    }

    unsigned v = 0;
    nvmlUtilization_t ut;
    std::printf("device %u temperature: %s\n", i, presence(get_temp(h, 0, &v), "temperature"));
    std::printf("device %u power: %s\n", i, presence(get_power(h, &v), "power"));
    std::printf("device %u utilization: %s\n", i, presence(get_util(h, &ut), "utilization"));
    std::printf("device %u fan: %s\n", i, presence(get_fan(h, &v), "fan"));
    EXPECT(get_temp(h, 77, &v) == NVML_ERROR_INVALID_ARGUMENT || get_temp(h, 77, &v) == NVML_ERROR_NOT_SUPPORTED);
  }

  // The running processes of device 0: this one among them (rgpu: its
  // session, with at least the memory it allocated).
  NV_OK(by_index(0, &h));
  nvmlProcessInfo_t procs[64];
  unsigned np = 64;
  int pr = get_procs(h, &np, procs);
  EXPECT(pr == NVML_SUCCESS);
  int self = 0;
  for (unsigned k = 0; k < np; k++)
    if (procs[k].pid == (unsigned)getpid() && procs[k].usedGpuMemory >= alloc_bytes) self = 1;
  std::printf("rgpu-stats: processes on device 0: %u, this one listed with its memory: %s\n", np,
              self ? "yes" : "no");
  // NVLink: rgpu offers no peer links (a stub: not supported, logged once);
  // a local H200 may have them, so only an rgpu-stats line.
  int link_state = 0;
  int lr = nvlink(h, 0, &link_state);
  lr = nvlink(h, 0, &link_state);
  std::printf("rgpu-stats: nvlink 0 state: %s\n",
              lr == NVML_SUCCESS ? "present" : lr == NVML_ERROR_NOT_SUPPORTED ? "not supported" : errstr(lr));

  for (int k = 0; k < loops; k++) {
    nvmlMemory_t m;
    nvmlUtilization_t ut;
    unsigned v = 0;
    char name[96];
    NV_OK(get_mem(h, &m));
    NV_OK(get_name(h, name, sizeof name));
    presence(get_temp(h, 0, &v), "temperature");
    presence(get_util(h, &ut), "utilization");
  }
  if (loops) std::printf("%d monitoring loops done\n", loops);

  if (hold_s > 0) {
    std::printf("holding the session for %d s, pid %d\n", hold_s, (int)getpid());
    std::fflush(stdout);
    sleep((unsigned)hold_s);
  }

  NV_OK(shutdown());
  EXPECT(count_v2(&cnt) == NVML_ERROR_UNINITIALIZED);
  EXPECT(shutdown() == NVML_ERROR_UNINITIALIZED);
  CHECK(cudaFree(buf));
  pass("nvml_query");
  return 0;
}
