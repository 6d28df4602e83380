// CUDA user objects as graph programs use them to tie a resource's life to
// a graph: a buffer the graph's kernel writes is freed by the object's
// destructor only after the graph, its clone and the executable graph made
// from it are all gone, and the executable graph's last launch is done.
// The destructor runs on a thread of CUDA's (here: rgpu's), so the program
// waits for it on a flag.  Also the references' rules: a move, a release
// by the graph, bad counts and handles.
#include "rgpu_check.h"
#include <atomic>
#include <chrono>
#include <thread>

struct resource {
  float *dev;
  std::atomic<int> destroyed{0};
};

static void CUDART_CB destroy_resource(void *p) {
  resource *r = static_cast<resource *>(p);
  // Destructors may not call CUDA: the buffer is freed by main.
  r->destroyed.fetch_add(1);
}

__global__ void fill(float *p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + (float)i;
}

// Whether the destructor ran within ms milliseconds (a second where it
// must; a tenth where it must not).
static int destroyed_soon(resource &r, int ms = 1000) {
  for (int i = 0; i < ms && !r.destroyed.load(); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return r.destroyed.load();
}

int main() {
  const int n = 1 << 16;
  resource res;
  CHECK(cudaMalloc(&res.dev, n * sizeof(float)));

  cudaUserObject_t obj;
  CHECK(cudaUserObjectCreate(&obj, &res, destroy_resource, 1, cudaUserObjectNoDestructorSync));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  // The program's one reference moves to the graph.
  CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
  cudaGraphNode_t k;
  cudaKernelNodeParams kp = {};
  float v = 3.0f;
  int nn = n;
  void *args[] = {&res.dev, &nn, &v};
  kp.func = (void *)fill;
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));

  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaGraphLaunch(x, s));

  CHECK(cudaGraphDestroy(g));
  EXPECT(!destroyed_soon(res, 100));
  std::printf("graph destroyed: its clone and executable graph keep the object\n");
  CHECK(cudaGraphDestroy(clone));
  // The executable graph's launches may still run: the object stays until
  // the stream gets past them.
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(destroyed_soon(res) == 1);
  std::printf("executable graph destroyed and its launches done: destructor ran once\n");
  float h[4];
  CHECK(cudaMemcpy(h, res.dev + n - 4, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++) EXPECT(h[i] == 3.0f + (float)(n - 4 + i));
  std::printf("the graph's kernel wrote the buffer: %.0f %.0f %.0f %.0f\n", h[0], h[1], h[2], h[3]);

  // References held by the program and by a graph, released by each.
  resource res2;
  res2.dev = nullptr;
  cudaUserObject_t obj2;
  CHECK(cudaUserObjectCreate(&obj2, &res2, destroy_resource, 2, cudaUserObjectNoDestructorSync));
  cudaGraph_t g2;
  CHECK(cudaGraphCreate(&g2, 0));
  CHECK(cudaGraphRetainUserObject(g2, obj2, 3, 0));
  CHECK(cudaGraphReleaseUserObject(g2, obj2, 2));
  CHECK(cudaUserObjectRelease(obj2, 2));
  EXPECT(!destroyed_soon(res2, 100));
  CHECK(cudaUserObjectRetain(obj2, 1));
  CHECK(cudaGraphDestroy(g2));
  EXPECT(!destroyed_soon(res2, 100));
  CHECK(cudaUserObjectRelease(obj2, 1));
  EXPECT(destroyed_soon(res2) == 1);
  std::printf("program and graph references: destructor ran once, after the last\n");

  // Bad input.
  cudaUserObject_t bad;
  EXPECT_ERR(cudaUserObjectCreate(&bad, &res2, destroy_resource, 0, cudaUserObjectNoDestructorSync),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaUserObjectCreate(&bad, &res2, nullptr, 1, cudaUserObjectNoDestructorSync),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaUserObjectCreate(&bad, &res2, destroy_resource, 1, 0), cudaErrorInvalidValue);
  cudaGetLastError();
  std::printf("zero references, no destructor, no flag: refused\n");

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(res.dev));
  pass("graph_user_objects");
  return 0;
}
