/* cudaCreateChannelDesc: pure value construction, answered locally.
 * It returns a struct by value, so it cannot be one of the generated
 * int-returning stubs. */
#include <cuda_runtime_api.h>

__attribute__((visibility("default"))) struct cudaChannelFormatDesc cudaCreateChannelDesc(
    int x, int y, int z, int w, enum cudaChannelFormatKind f) {
  struct cudaChannelFormatDesc d;
  d.x = x;
  d.y = y;
  d.z = z;
  d.w = w;
  d.f = f;
  return d;
}
