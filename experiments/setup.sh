#!/usr/bin/env bash
# Installs what SparseGDN needs on a fresh Debian/Ubuntu machine (as root, or with sudo) and builds it.
#   experiments/setup.sh [PRESET]     PRESET: default (Release) or sanitize (ASan + UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"

packages=(build-essential cmake ninja-build libeigen3-dev libboost-program-options-dev libhdf5-dev catch2
          python3 python3-h5py python3-numpy python3-matplotlib python3-xarray python3-h5netcdf python3-pandas
          clang-format git)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# nvcc is optional: with it (CUDA 12.x/13.x at /usr/local/cuda) the CUDA backend is built too.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
