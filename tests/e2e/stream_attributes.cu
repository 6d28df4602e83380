// Stream attributes as L2-persistence and latency-tuned programs set them:
// an access policy window, a synchronization policy, a priority changed
// after creation, and all of them copied to another stream.  Every value is
// read back (the GPU's driver answers through rgpu), and the streams still
// run work.
#include "rgpu_check.h"

__global__ void touch(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i * 2;
}

int main() {
  const int n = 1 << 18;
  int *d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s, t;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreate(&t));

  cudaStreamAttrValue v;
  std::memset(&v, 0, sizeof v);
  v.accessPolicyWindow.base_ptr = d;
  v.accessPolicyWindow.num_bytes = n * sizeof(int);
  v.accessPolicyWindow.hitRatio = 0.5f;
  v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
  cudaStreamAttrValue back;
  std::memset(&back, 0xff, sizeof back);
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
  EXPECT(back.accessPolicyWindow.base_ptr == d);
  EXPECT(back.accessPolicyWindow.num_bytes == n * sizeof(int));
  EXPECT(back.accessPolicyWindow.hitRatio > 0.49f && back.accessPolicyWindow.hitRatio < 0.51f);
  EXPECT(back.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting);
  EXPECT(back.accessPolicyWindow.missProp == cudaAccessPropertyStreaming);
  std::printf("access policy window reads back as set\n");

  std::memset(&v, 0, sizeof v);
  v.syncPolicy = cudaSyncPolicyBlockingSync;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v));
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &back));
  EXPECT(back.syncPolicy == cudaSyncPolicyBlockingSync);
  v.syncPolicy = (cudaSynchronizationPolicy)7;
  EXPECT_ERR(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v),
             cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  std::printf("synchronization policy: blocking sync; 7 refused\n");

  int least = 0, greatest = 0, prio = 99;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::memset(&v, 0, sizeof v);
  v.priority = greatest;
  CHECK(cudaStreamSetAttribute(s, cudaLaunchAttributePriority, &v));
  CHECK(cudaStreamGetAttribute(s, cudaLaunchAttributePriority, &back));
  CHECK(cudaStreamGetPriority(s, &prio));
  EXPECT(back.priority == greatest && prio == greatest);
  std::printf("priority set after creation: %d, as cudaStreamGetPriority says\n", prio);

  CHECK(cudaStreamCopyAttributes(t, s));
  CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeSynchronizationPolicy, &back));
  EXPECT(back.syncPolicy == cudaSyncPolicyBlockingSync);
  CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeAccessPolicyWindow, &back));
  EXPECT(back.accessPolicyWindow.base_ptr == d);
  std::printf("attributes copied to a second stream\n");

  touch<<<(n + 255) / 256, 256, 0, s>>>(d, n);
  touch<<<(n + 255) / 256, 256, 0, t>>>(d, n);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamSynchronize(t));
  int h[4];
  CHECK(cudaMemcpy(h, d + n - 4, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++) EXPECT(h[i] == (n - 4 + i) * 2);
  std::printf("both streams still run work\n");

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(t));
  CHECK(cudaFree(d));
  pass("stream_attributes");
  return 0;
}
