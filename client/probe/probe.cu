// Measures CUDA 13 runtime error codes for launch-configuration and API edge
// cases on a real GPU, so rgpu's client can answer the same.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(int *p) { if (p) p[0] = 1; }
__global__ void ks(int *p) { extern __shared__ int s[]; s[threadIdx.x] = 1; if (p) p[0] = s[0]; }
#define R(label, expr) do { cudaError_t e_ = (expr); cudaError_t l_ = cudaGetLastError(); printf("%-28s ret=%d(%s) last=%d(%s)\n", label, (int)e_, cudaGetErrorName(e_), (int)l_, cudaGetErrorName(l_)); } while (0)
#define L(label, launch) do { launch; cudaError_t l_ = cudaGetLastError(); cudaError_t s_ = cudaDeviceSynchronize(); printf("%-28s last=%d(%s) sync=%d\n", label, (int)l_, cudaGetErrorName(l_), (int)s_); } while (0)
int main() {
  cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
  printf("dev %s shmem/blk %zu optin %zu maxgrid %d %d %d\n", p.name, p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
  L("grid0", (k<<<0, 1>>>(0)));
  L("block0", (k<<<1, dim3(0, 1, 1)>>>(0)));
  L("block2048", (k<<<1, 2048>>>(0)));
  L("block1025x", (k<<<1, dim3(1025, 1, 1)>>>(0)));
  L("blockz65", (k<<<1, dim3(1, 1, 65)>>>(0)));
  L("gridy65536", (k<<<dim3(1, 65536, 1), 1>>>(0)));
  L("shmem48k+1", (ks<<<1, 1, 49153>>>(0)));
  L("shmem_optin+1", (ks<<<1, 1, p.sharedMemPerBlockOptin + 1>>>(0)));
  cudaStream_t s; cudaStreamCreate(&s); cudaStreamDestroy(s);
  int *d; cudaMalloc(&d, 16);
  R("free_bad", cudaFree((void*)0x1234));
  R("free_twice_prep", cudaFree(d));
  R("free_twice", cudaFree(d));
  int h[4];
  cudaMalloc(&d, 16);
  R("memcpy_oob_h2d", cudaMemcpy(d + 2, h, 16, cudaMemcpyHostToDevice));
  R("memcpy_bad_dptr", cudaMemcpy((void*)0x1000, h, 16, cudaMemcpyHostToDevice));
  R("memcpy_kind_bad", cudaMemcpy(d, h, 16, (cudaMemcpyKind)7));
  R("memset_bad", cudaMemset((void*)0x1000, 0, 16));
  R("setdevice_bad", cudaSetDevice(99));
  R("malloc_huge", cudaMalloc((void**)&d, (size_t)1 << 50));
  cudaEvent_t e; cudaEventCreate(&e);
  R("event_query_unrec", cudaEventQuery(e));
  R("event_sync_unrec", cudaEventSynchronize(e));
  cudaEvent_t e2; cudaEventCreateWithFlags(&e2, cudaEventDisableTiming); cudaEventRecord(e2, 0); cudaEventRecord(e, 0); cudaDeviceSynchronize();
  float ms; R("elapsed_notiming", cudaEventElapsedTime(&ms, e, e2));
  cudaEvent_t e3; cudaEventCreate(&e3);
  R("elapsed_unrecorded", cudaEventElapsedTime(&ms, e, e3));
  R("stream_destroy_legacy", cudaStreamDestroy(cudaStreamLegacy));
  R("stream_destroy_null", cudaStreamDestroy(0));
  int v; R("attr_bad", cudaDeviceGetAttribute(&v, (cudaDeviceAttr)9999, 0));
  unsigned f; R("getflags", cudaGetDeviceFlags(&f)); printf("flags=0x%x\n", f);
  size_t lim; R("limit_stack", cudaDeviceGetLimit(&lim, cudaLimitStackSize)); printf("stack=%zu\n", lim);
  R("limit_printf", cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize)); printf("printf=%zu\n", lim);
  R("limit_heap", cudaDeviceGetLimit(&lim, cudaLimitMallocHeapSize)); printf("heap=%zu\n", lim);
  int lo, hi; cudaDeviceGetStreamPriorityRange(&lo, &hi); printf("prio %d %d\n", lo, hi);
  char bus[64]; cudaDeviceGetPCIBusId(bus, 64, 0); printf("pci %s\n", bus);
  cudaPointerAttributes pa; R("ptrattr_host", cudaPointerGetAttributes(&pa, h)); printf("type=%d dev=%d\n", (int)pa.type, pa.device);
  void *ph; cudaMallocHost(&ph, 64); R("ptrattr_pinned", cudaPointerGetAttributes(&pa, ph)); printf("type=%d dev=%d dptr=%p hptr=%p\n", (int)pa.type, pa.device, pa.devicePointer, pa.hostPointer);
  R("mallochost0", cudaMallocHost(&ph, 0)); printf("ph=%p\n", ph);
  R("malloc0", cudaMalloc((void**)&d, 0)); printf("d=%p\n", d);
  L("illegal_addr", (k<<<1, 1>>>((int*)0x10)));
  R("after_sticky_malloc", cudaMalloc((void**)&d, 16));
  R("after_sticky_getlast", cudaGetLastError());
  R("after_sticky_getlast2", cudaPeekAtLastError());
  R("reset", cudaDeviceReset());
  R("after_reset_malloc", cudaMalloc((void**)&d, 16));
  return 0;
}
