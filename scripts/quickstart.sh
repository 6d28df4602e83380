#!/usr/bin/env bash
# The main job: build rgpu, then run a real CUDA program (compiled by nvcc
# with -cudart shared, unmodified) through rgpu against a private local
# server on softgpu.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
echo "== rgpu info"
build/bin/rgpu info
echo "== rgpu run -- build/e2e/vecadd"
build/bin/rgpu run -- build/e2e/vecadd
echo "== rgpu run -- build/e2e/matmul_tiled 128"
RGPU_STATS=build/quickstart-stats.json build/bin/rgpu run -- build/e2e/matmul_tiled 128
echo "== stats: $(cat build/quickstart-stats.json)"
