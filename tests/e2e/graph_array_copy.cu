// Copies between device memory and CUDA arrays inside a captured CUDA graph
// (issue 14): cudaMemcpy2DToArrayAsync and cudaMemcpy2DFromArrayAsync from
// and to device buffers, with a kernel that samples the array through a
// texture object in between.  The graph is launched three times with new
// input each time, so every launch must copy again; then the same copies as
// explicitly added memcpy nodes.  Every result checked.
#include <vector>

#include "rgpu_check.h"

__global__ void sample_double(cudaTextureObject_t t, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = 2.0f * tex2D<float>(t, x + 0.5f, y + 0.5f);
}

int main() {
  const int w = 64, h = 32;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &fd, w, h));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t tex;
  CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));

  float *dsrc, *dout, *dback;
  size_t spitch;
  CHECK(cudaMallocPitch(&dsrc, &spitch, w * sizeof(float), h));
  CHECK(cudaMalloc(&dout, w * h * sizeof(float)));
  CHECK(cudaMalloc(&dback, w * h * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpy2DToArrayAsync(arr, 0, 0, dsrc, spitch, w * sizeof(float), h,
                                 cudaMemcpyDeviceToDevice, s));
  sample_double<<<dim3((w + 31) / 32, h), 32, 0, s>>>(tex, dout, w, h);
  CHECK(cudaMemcpy2DFromArrayAsync(dback, w * sizeof(float), arr, 0, 0, w * sizeof(float), h,
                                   cudaMemcpyDeviceToDevice, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t nnodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nnodes));
  EXPECT(nnodes == 3);
  cudaGraphNode_t nodes[3];
  CHECK(cudaGraphGetNodes(g, nodes, &nnodes));
  int copies = 0;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(n, &t));
    copies += t == cudaGraphNodeTypeMemcpy;
  }
  EXPECT(copies == 2);
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));

  std::vector<float> in(w * h), out(w * h), back(w * h);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < w * h; i++) in[i] = (float)(i % 97) + 100.0f * round;
    CHECK(cudaMemcpy2D(dsrc, spitch, in.data(), w * sizeof(float), w * sizeof(float), h,
                       cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(back.data(), dback, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < w * h; i++) {
      EXPECT(back[i] == in[i]);
      EXPECT(out[i] == 2.0f * in[i]);
    }
    printf("launch %d: array copies and texture ok\n", round);
  }

  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));

  // The same copies as explicitly added memcpy nodes (3D parameters):
  // device buffer -> array -> another device buffer, read back.
  cudaGraph_t g2;
  CHECK(cudaGraphCreate(&g2, 0));
  cudaMemcpy3DParms to = {};
  to.srcPtr = make_cudaPitchedPtr(dsrc, spitch, w, h);
  to.dstArray = arr;
  to.extent = make_cudaExtent(w, h, 1);
  to.kind = cudaMemcpyDeviceToDevice;
  cudaMemcpy3DParms from = {};
  from.srcArray = arr;
  from.dstPtr = make_cudaPitchedPtr(dback, w * sizeof(float), w, h);
  from.extent = make_cudaExtent(w, h, 1);
  from.kind = cudaMemcpyDeviceToDevice;
  cudaGraphNode_t n_to, n_from;
  CHECK(cudaGraphAddMemcpyNode(&n_to, g2, nullptr, 0, &to));
  CHECK(cudaGraphAddMemcpyNode(&n_from, g2, &n_to, 1, &from));
  cudaMemcpy3DParms got = {};
  CHECK(cudaGraphMemcpyNodeGetParams(n_from, &got));
  EXPECT(got.srcArray == arr && got.extent.width == (size_t)w);
  CHECK(cudaGraphInstantiate(&ge, g2, 0));
  for (int i = 0; i < w * h; i++) in[i] = (float)(i % 13) - 6.0f;
  CHECK(cudaMemcpy2D(dsrc, spitch, in.data(), w * sizeof(float), w * sizeof(float), h,
                     cudaMemcpyHostToDevice));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(back.data(), dback, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; i++) EXPECT(back[i] == in[i]);
  printf("explicit memcpy nodes with an array: ok\n");
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaDestroyTextureObject(tex));
  CHECK(cudaFreeArray(arr));
  CHECK(cudaFree(dsrc));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dback));
  CHECK(cudaStreamDestroy(s));
  pass("graph_array_copy");
  return 0;
}
