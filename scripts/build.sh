#!/usr/bin/env bash
# Configures and builds rgpu into ./build (or $RGPU_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
build=${RGPU_BUILD_DIR:-build}
cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
