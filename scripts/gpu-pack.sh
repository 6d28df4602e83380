#!/usr/bin/env bash
# Prepares .gpu-pack/ for the GPU machine: the GPU machine has no Debian dev
# packages (cmocka, ngtcp2, ...), so rgpu is built here and its binaries, the
# e2e programs and the few shared libraries the GPU image lacks travel with
# the working tree (`carry: [".gpu-pack"]`).  scripts/gpu-e2e.sh uses the
# pack when it cannot build on the spot.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
rm -rf .gpu-pack
mkdir -p .gpu-pack/bin .gpu-pack/lib .gpu-pack/e2e .gpu-pack/syslib
cp build/bin/rgpu build/bin/rgpu-server .gpu-pack/bin/
for t in rgpu-transport-perf rgpu-netem rgpu-bench; do
  [ -x build/bin/$t ] && cp build/bin/$t .gpu-pack/bin/
done
cp -P build/lib/libcudart.so* .gpu-pack/lib/ 2>/dev/null || true
# The driver facade (libcuda.so.1): `rgpu run` preloads it for the driver API
# programs; only the client side ever loads it.
cp -P build/lib/libcuda.so.1 .gpu-pack/lib/ 2>/dev/null || true
cp build/lib/libsoftgpu.so .gpu-pack/lib/ 2>/dev/null || true
# The NVML facade: without it, `rgpu run` on the GPU host would leave the
# program the host's own NVML (nvml_query would pass without testing rgpu).
cp -P build/lib/libnvidia-ml.so* .gpu-pack/lib/ 2>/dev/null || true
# The cuBLAS facade: without it, `rgpu run` would leave the program NVIDIA's
# libcublas, whose static runtime cannot run on rgpu's driver facade.
cp -P build/lib/libcublas.so* .gpu-pack/lib/ 2>/dev/null || true
# The cuBLASLt facade, for the same reason (PyTorch's gemms go through it).
cp -P build/lib/libcublasLt.so* .gpu-pack/lib/ 2>/dev/null || true
# The cuDNN facade: cuDNN 9 carries its own runtime, which rgpu's driver facade cannot run.
cp -P build/lib/libcudnn.so* .gpu-pack/lib/ 2>/dev/null || true
find build/e2e -maxdepth 1 -type f -perm -u+x -exec cp {} .gpu-pack/e2e/ \;
# The modules the driver-API programs (drv_*) load from beside themselves.
cp build/e2e/*.ptx build/e2e/*.fatbin build/e2e/*.cubin .gpu-pack/e2e/ 2>/dev/null || true
cp -r tests/e2e .gpu-pack/e2e-src
# Benchmark workloads (scripts/gpu-bench.sh rebuilds them when nvcc is there).
[ -d build/bench ] && cp -r build/bench .gpu-pack/bench
# Libraries the Ubuntu GPU image does not have in these sonames.  oneDNN is
# not among them: only softgpu's plugin (librgpu_cudnn_dnnl.so, not packed)
# links it, and a GPU server never loads that.
for lib in $(ldd build/bin/rgpu-server build/bin/rgpu build/lib/libcudart.so.13 2>/dev/null |
             awk '/=>/ {print $3}' | grep -E 'ngtcp2|cmocka' | sort -u); do
  cp -L "$lib" .gpu-pack/syslib/
done
grep -qx '/.gpu-pack/' .git/info/exclude 2>/dev/null || echo '/.gpu-pack/' >> .git/info/exclude
du -sh .gpu-pack
