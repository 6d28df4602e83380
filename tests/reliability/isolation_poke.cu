// Cross-session isolation probe. "hold": allocates 1 MiB, fills it with 0xAB,
// prints the pointer and sleeps. "poke PTR": from another session, touches
// PTR with every pointer-taking call; each must fail, since PTR is not
// this session's memory.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__global__ void wr(unsigned char *p) { p[threadIdx.x] = 1; }
int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "hold")) {
    void *p; cudaMalloc(&p, 1 << 20); cudaMemset(p, 0xAB, 1 << 20); cudaDeviceSynchronize();
    printf("%p\n", p); fflush(stdout); sleep(atoi(argc > 2 ? argv[2] : "5"));
    unsigned char h[16]; cudaMemcpy(h, p, 16, cudaMemcpyDeviceToHost);
    printf("hold-after %s first=0x%02x\n", h[0] == 0xAB ? "intact" : "CHANGED", h[0]);
    return h[0] == 0xAB ? 0 : 1;
  }
  void *p = (void *)strtoull(argv[2], NULL, 16);
  unsigned char h[16] = {0}; int ok = 0, n = 0;
#define T(name, call) do { cudaError_t e = (call); cudaGetLastError(); n++; \
    if (e != cudaSuccess) ok++; printf("%-10s %s\n", name, cudaGetErrorName(e)); } while (0)
  T("D2H", cudaMemcpy(h, p, 16, cudaMemcpyDeviceToHost));
  T("H2D", cudaMemcpy(p, h, 16, cudaMemcpyHostToDevice));
  T("memset", cudaMemset(p, 0, 16));
  T("free", cudaFree(p));
  wr<<<1, 16>>>((unsigned char *)p); T("kernel", cudaDeviceSynchronize());
  printf("poke: %d/%d refused\n", ok, n);
  return ok == n ? 0 : 1;
}
