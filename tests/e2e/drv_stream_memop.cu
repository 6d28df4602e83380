// rgpu-nvcc-flags: -lcuda
// Stream memory operations: one stream waits (cuStreamWaitValue32, GEQ)
// for a flag another stream writes (cuStreamWriteValue32) after its kernel
// produced the data, queued before the producer; 64-bit write and wait
// (EQ); a batch of two writes and a barrier (cuStreamBatchMemOp); AND and
// NOR waits already satisfied; an unaligned word refused.  Every result
// is read back and checked.
#include <cuda_runtime.h>
#include <vector>

#include "rgpu_drv_check.h"

__global__ void produce(int *data, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = base + i;
}

__global__ void consume(const int *data, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * data[i];
}

int main() {
  CUdevice dev;
  drv_setup(&dev);
  const int n = 4096;
  int *data, *out;
  CHECK(cudaMalloc(&data, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CUdeviceptr flag, word64, pair;
  CU_CHECK(cuMemAlloc(&flag, 4));
  CU_CHECK(cuMemAlloc(&word64, 8));
  CU_CHECK(cuMemAlloc(&pair, 8));
  CU_CHECK(cuMemsetD32(flag, 0, 1));
  CU_CHECK(cuMemsetD32(pair, 0, 2));

  CUstream waiter, producer;
  CU_CHECK(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
  // Both kernels run once before one waits for the other: with lazy
  // loading (CUDA 13's default) loading a kernel while another stream
  // waits on a flag only it will set deadlocks (CUDA's lazy-loading
  // notes; this program hung on the H100 without these launches).
  produce<<<n / 256, 256, 0, (cudaStream_t)producer>>>(data, n, 0);
  consume<<<n / 256, 256, 0, (cudaStream_t)producer>>>(data, out, n);
  CU_CHECK(cuStreamSynchronize(producer));
  // The consumer is queued first and waits for the flag.
  CU_CHECK(cuStreamWaitValue32(waiter, flag, 1, CU_STREAM_WAIT_VALUE_GEQ));
  consume<<<n / 256, 256, 0, (cudaStream_t)waiter>>>(data, out, n);
  CHECK(cudaGetLastError());
  produce<<<n / 256, 256, 0, (cudaStream_t)producer>>>(data, n, 100);
  CU_CHECK(cuStreamWriteValue32(producer, flag, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  CU_CHECK(cuStreamSynchronize(waiter));
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(h[i] == 2 * (100 + i));
  printf("wait for a flag another stream writes: out[4095] = %d\n", h[n - 1]);

  // 64 bits: write, then a wait that holds (EQ).
  const cuuint64_t big = 0x123456789abcdef0ull;
  CU_CHECK(cuStreamWriteValue64(producer, word64, big, 0));
  CU_CHECK(cuStreamWaitValue64(waiter, word64, big, CU_STREAM_WAIT_VALUE_EQ));
  CU_CHECK(cuStreamSynchronize(producer));
  CU_CHECK(cuStreamSynchronize(waiter));
  unsigned long long got64 = 0;
  CU_CHECK(cuMemcpyDtoH(&got64, word64, 8));
  EXPECT(got64 == big);
  printf("64-bit write and wait: 0x%llx\n", got64);

  // A batch: two writes and a barrier; then AND and NOR waits that hold.
  CUstreamBatchMemOpParams ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = pair;
  ops[0].writeValue.value = 7;
  ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[1].writeValue.address = pair + 4;
  ops[1].writeValue.value = 9;
  ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[2].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
  CU_CHECK(cuStreamBatchMemOp(producer, 3, ops, 0));
  CU_CHECK(cuStreamWaitValue32(producer, pair, 0x5, CU_STREAM_WAIT_VALUE_AND));
  CU_CHECK(cuStreamWaitValue32(producer, pair + 4, 0x6, CU_STREAM_WAIT_VALUE_NOR));
  CU_CHECK(cuStreamSynchronize(producer));
  unsigned got[2] = {0, 0};
  CU_CHECK(cuMemcpyDtoH(got, pair, 8));
  EXPECT(got[0] == 7 && got[1] == 9);
  printf("batch of two writes and a barrier: %u %u\n", got[0], got[1]);

  // An unaligned word.
  CUresult r = cuStreamWriteValue32(producer, flag + 1, 1, 0);
  printf("unaligned word: %s\n", cu_name(r));
  EXPECT(r == CUDA_ERROR_INVALID_VALUE);

  CU_CHECK(cuStreamDestroy(waiter));
  CU_CHECK(cuStreamDestroy(producer));
  CU_CHECK(cuMemFree(flag));
  CU_CHECK(cuMemFree(word64));
  CU_CHECK(cuMemFree(pair));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  printf("PASS drv_stream_memop\n");
  return 0;
}
