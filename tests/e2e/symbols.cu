// __device__ and __constant__ variables: cudaMemcpyToSymbol/FromSymbol,
// cudaGetSymbolAddress/Size, offsets, and a copy through the symbol address.
#include "rgpu_check.h"

__device__ int g_counter;
__device__ float g_table[16];
__constant__ float c_coef[4];
__device__ double g_init = 2.5;

__global__ void touch(float *out) {  // keeps the symbols referenced
  out[0] = c_coef[0] + g_table[0] + g_counter + (float)g_init;
}

int main() {
  float table[16], back[16];
  for (int i = 0; i < 16; i++) table[i] = i * 1.5f;
  CHECK(cudaMemcpyToSymbol(g_table, table, sizeof table));
  CHECK(cudaMemcpyFromSymbol(back, g_table, sizeof back));
  EXPECT(std::memcmp(table, back, sizeof table) == 0);
  // with an offset
  float three[3] = {-1, -2, -3};
  CHECK(cudaMemcpyToSymbol(g_table, three, sizeof three, 4 * sizeof(float)));
  CHECK(cudaMemcpyFromSymbol(back, g_table, sizeof back));
  EXPECT(back[3] == table[3] && back[4] == -1 && back[6] == -3 && back[7] == table[7]);
  float coef[4] = {0.5f, 1, 2, 4}, cback[4];
  CHECK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef));
  CHECK(cudaMemcpyFromSymbol(cback, c_coef, sizeof cback));
  EXPECT(std::memcmp(coef, cback, sizeof coef) == 0);
  int v = 41;
  CHECK(cudaMemcpyToSymbol(g_counter, &v, sizeof v));
  void *addr = nullptr;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress(&addr, g_counter));
  CHECK(cudaGetSymbolSize(&size, g_counter));
  EXPECT(addr != nullptr && size == sizeof(int));
  int got = 0;
  CHECK(cudaMemcpy(&got, addr, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == 41);
  CHECK(cudaGetSymbolSize(&size, g_table));
  EXPECT(size == sizeof table);
  // an initialised __device__ variable starts with its initializer
  double init = 0;
  CHECK(cudaMemcpyFromSymbol(&init, g_init, sizeof init));
  EXPECT(init == 2.5);
  // past the symbol's end is an error
  EXPECT_ERR(cudaMemcpyToSymbol(g_table, table, sizeof table, 8), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  pass("symbols");
  return 0;
}
