// Managed memory as tutorials and simulations use it: cudaMallocManaged
// buffers written on the host, changed by kernels, read back after a
// synchronization; a loop of launch / synchronize / host update; a linked
// structure whose pointers live in managed memory and are followed on the
// device; a stream synchronization instead of a device one; copies to and
// from managed memory; prefetches and advice, read back with
// cudaMemRangeGetAttribute(s); pointer attributes.
#include "rgpu_check.h"

struct node {
  int value;
  node *next;
};

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void add_one(int *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += 1;
}

__global__ void walk(const node *head, int *sum) {
  int s = 0;
  for (const node *p = head; p; p = p->next) s += p->value;
  *sum = s;
}

int main() {
  int managed = 0;
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  EXPECT(managed == 1);

  // The classic: two managed arrays, initialised on the host.
  const int N = 1 << 20;
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMallocManaged(&x, N * sizeof(float)));
  CHECK(cudaMallocManaged(&y, N * sizeof(float)));
  for (int i = 0; i < N; i++) {
    x[i] = 1.0f;
    y[i] = (float)(i % 100);
  }
  saxpy<<<(N + 255) / 256, 256>>>(N, 2.0f, x, y);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  double max_err = 0;
  for (int i = 0; i < N; i++) {
    double err = y[i] - (2.0 + (i % 100));
    if (err < 0) err = -err;
    if (err > max_err) max_err = err;
  }
  EXPECT(max_err == 0);
  std::printf("saxpy on %d managed floats: max error %g\n", N, max_err);

  // Launch, synchronize, change on the host, again: each round sees the
  // other side's writes.
  const int M = 5000;
  int *v = nullptr;
  CHECK(cudaMallocManaged(&v, M * sizeof(int)));
  for (int i = 0; i < M; i++) v[i] = i;
  for (int round = 0; round < 4; round++) {
    add_one<<<(M + 127) / 128, 128>>>(v, M);
    add_one<<<(M + 127) / 128, 128>>>(v, M);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < M; i++) {
      EXPECT(v[i] == i + 2 * (round + 1) + 10 * round);
      v[i] += 10;
    }
  }
  std::printf("4 rounds of launch, synchronize and host update\n");

  // A linked list in managed memory, followed on the device.
  node *nodes = nullptr;
  int *sum = nullptr;
  CHECK(cudaMallocManaged(&nodes, 64 * sizeof(node)));
  CHECK(cudaMallocManaged(&sum, sizeof(int)));
  int want = 0;
  for (int i = 0; i < 64; i++) {
    nodes[i].value = i * 3 + 1;
    nodes[i].next = i + 1 < 64 ? &nodes[(i * 7 + 7) % 64 == 0 ? 63 : i + 1] : nullptr;
  }
  for (const node *p = nodes; p; p = p->next) want += p->value;
  *sum = -1;
  walk<<<1, 1>>>(nodes, sum);
  CHECK(cudaDeviceSynchronize());
  EXPECT(*sum == want);
  std::printf("linked list in managed memory: sum %d\n", *sum);

  // A stream of its own, synchronized by itself.
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  add_one<<<(M + 127) / 128, 128, 0, st>>>(v, M);
  CHECK(cudaStreamSynchronize(st));
  for (int i = 0; i < M; i++) EXPECT(v[i] == i + 8 + 40 + 1);
  std::printf("stream synchronization brings the results back\n");

  // Copies from and into managed memory.
  int host[16], *dev = nullptr;
  CHECK(cudaMemcpy(host, v + 100, sizeof host, cudaMemcpyDefault));
  for (int i = 0; i < 16; i++) EXPECT(host[i] == v[100 + i]);
  CHECK(cudaMalloc(&dev, sizeof host));
  for (int i = 0; i < 16; i++) host[i] = -i;
  CHECK(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, dev, sizeof host, cudaMemcpyDeviceToDevice));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 16; i++) EXPECT(v[i] == -i);
  std::printf("copies to and from managed memory\n");

  // Prefetch and advice.
  cudaMemLocation on_dev = {cudaMemLocationTypeDevice, 0};
  cudaMemLocation on_host = {cudaMemLocationTypeHost, 0};
  CHECK(cudaMemAdvise(x, N * sizeof(float), cudaMemAdviseSetReadMostly, on_dev));
  CHECK(cudaMemPrefetchAsync(y, N * sizeof(float), on_dev, 0, 0));
  saxpy<<<(N + 255) / 256, 256>>>(N, -2.0f, x, y);
  CHECK(cudaMemPrefetchAsync(y, N * sizeof(float), on_host, 0, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; i++) EXPECT(y[i] == (float)(i % 100));
  std::printf("prefetch to the device and back, read-mostly advice\n");

  // What the advice and prefetches say when read back: a range's value
  // is what all its pages agree on.  x's first half gets device 0 as its
  // preferred location, then everything of x says accessed by device 0.
  size_t half = N / 2 * sizeof(float);
  CHECK(cudaMemAdvise(x, half, cudaMemAdviseSetPreferredLocation, on_dev));
  CHECK(cudaMemAdvise(x, N * sizeof(float), cudaMemAdviseSetAccessedBy, on_dev));
  int rm = -9, pref_all = -9, pref_half = -9, last_pf = -9, acc[3] = {-9, -9, -9};
  CHECK(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, x, N * sizeof(float)));
  CHECK(cudaMemRangeGetAttribute(&pref_half, 4, cudaMemRangeAttributePreferredLocation, x, half));
  CHECK(cudaMemRangeGetAttribute(&pref_all, 4, cudaMemRangeAttributePreferredLocation, x,
                                 N * sizeof(float)));
  CHECK(cudaMemRangeGetAttribute(acc, sizeof acc, cudaMemRangeAttributeAccessedBy, x,
                                 N * sizeof(float)));
  CHECK(cudaMemRangeGetAttribute(&last_pf, 4, cudaMemRangeAttributeLastPrefetchLocation, y,
                                 N * sizeof(float)));
  std::printf("range attributes: read mostly %d, preferred (first half) %d, preferred (all) %d, "
              "accessed by {%d, %d, %d}, y last prefetched to %d\n",
              rm, pref_half, pref_all, acc[0], acc[1], acc[2], last_pf);
  EXPECT(rm == 1 && pref_half == 0 && pref_all == cudaInvalidDeviceId && acc[0] == 0 &&
         acc[1] == cudaInvalidDeviceId && acc[2] == cudaInvalidDeviceId &&
         last_pf == cudaCpuDeviceId);
  CHECK(cudaMemAdvise(x, N * sizeof(float), cudaMemAdviseUnsetReadMostly, on_dev));
  int type = -9, id = -9, pf_type = -9;
  void *outs[4] = {&rm, &type, &id, &pf_type};
  size_t sizes[4] = {4, 4, 4, 4};
  cudaMemRangeAttribute which[4] = {
      cudaMemRangeAttributeReadMostly, cudaMemRangeAttributePreferredLocationType,
      cudaMemRangeAttributePreferredLocationId, cudaMemRangeAttributeLastPrefetchLocationType};
  CHECK(cudaMemRangeGetAttributes(outs, sizes, which, 4, x, half));
  std::printf("range attributes (several at once): read mostly %d, preferred type %d id %d, "
              "x never prefetched: type %d\n", rm, type, id, pf_type);
  EXPECT(rm == 0 && type == cudaMemLocationTypeDevice && id == 0 &&
         pf_type == cudaMemLocationTypeInvalid);
  EXPECT_ERR(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, dev, 64),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemRangeGetAttribute(&rm, 8, cudaMemRangeAttributeReadMostly, x, 64),
             cudaErrorInvalidValue);
  cudaGetLastError();
  std::printf("range attributes of plain device memory, or with the wrong size: refused\n");

  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, v + 10));
  EXPECT(pa.type == cudaMemoryTypeManaged && pa.devicePointer == v + 10 && pa.hostPointer == v + 10);
  // Zero bytes: success natively (CUDA 13.0 on the H200), as for cudaMalloc.
  int *none = v;
  CHECK(cudaMallocManaged(&none, 0));
  CHECK(cudaFree(none));
  EXPECT_ERR(cudaMallocManaged(&v, 64, 7), cudaErrorInvalidValue);
  cudaGetLastError();
  std::printf("pointer attributes say managed\n");

  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFree(dev));
  CHECK(cudaFree(nodes));
  CHECK(cudaFree(sum));
  CHECK(cudaFree(v));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));

  // A reset takes a live managed allocation with it; managed memory made
  // after it works as before.
  int *old = nullptr, *fresh = nullptr;
  CHECK(cudaMallocManaged(&old, 4096));
  old[0] = 1;
  CHECK(cudaDeviceReset());
  CHECK(cudaMallocManaged(&fresh, M * sizeof(int)));
  for (int i = 0; i < M; i++) fresh[i] = 7 * i;
  add_one<<<(M + 127) / 128, 128>>>(fresh, M);
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < M; i++) EXPECT(fresh[i] == 7 * i + 1);
  CHECK(cudaFree(fresh));
  std::printf("managed memory after a device reset\n");
  pass("managed_memory");
  return 0;
}
