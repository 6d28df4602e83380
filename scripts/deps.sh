#!/usr/bin/env bash
# Installs what rgpu needs to build and test on a fresh Debian/Ubuntu machine.
# Idempotent; both README commands call it.
set -euo pipefail

need_sudo=""
[ "$(id -u)" -eq 0 ] || need_sudo="sudo"

pkgs=(build-essential cmake pkg-config python3 git
      libcmocka-dev libzstd-dev liblz4-dev
      libgnutls28-dev gnutls-bin libngtcp2-dev libngtcp2-crypto-gnutls-dev
      clang libclang-rt-dev python3-matplotlib libopenblas-dev libdnnl-dev
      slurm-wlm slurmctld slurmd libslurm-dev munge)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  $need_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $need_sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA 13 toolkit (nvcc, headers, libcudart.so.13 for the generators).
# Debian does not package CUDA 13; it must be installed in /usr/local/cuda.
nvcc_path=$(command -v nvcc || true)
[ -n "$nvcc_path" ] || nvcc_path=/usr/local/cuda/bin/nvcc
if [ ! -x "$nvcc_path" ]; then
  echo "deps: the CUDA 13 toolkit is required (nvcc not found on PATH or in /usr/local/cuda/bin)" >&2
  exit 1
fi
ver=$("$nvcc_path" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
if [ "${ver:-0}" -lt 13 ]; then
  echo "deps: nvcc $ver found; rgpu needs CUDA 13" >&2
  exit 1
fi
echo "deps: ok (nvcc $("$nvcc_path" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
