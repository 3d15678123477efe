#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (Hopper, sm_90a): builds the CUDA backend if needed, runs the GPU tests
# and the Python tests, then the benchmark (bench.py), which writes experiments/perf/results/<gpu>.json|md.
#
#   experiments/perf/gpu_check.sh [BUILD_DIR] [-- BENCH_ARGS...]
#
# BUILD_DIR (default build, the `default` preset's folder) is configured and built there if it lacks the
# library. With SGDN_CUDA_LIB set to a prebuilt libsgdn_cuda_capi.so nothing is built: the C++ GPU tests run
# only if BUILD_DIR holds them, and the Python tests and the benchmark use that library. BENCH_ARGS go to
# bench.py, e.g. `-- --quick` or `-- --lib old=/path/old.so --lib new=build/kernels/libsgdn_cuda_capi.so`.
# The Python side needs torch (with CUDA) and pytest; FLA (fla-core) and FlashQLA (flash-qla) are timed when
# installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then build=$1; shift; fi
[ "${1:-}" = "--" ] && shift
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

if [ -z "${SGDN_CUDA_LIB:-}" ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    if [ "$build" = build ]; then
      experiments/setup.sh default
    else
      cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    fi
  fi
  grep -q '^SGDN_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    { echo "gpu_check: $build is configured without the CUDA backend (nvcc not found?)" >&2; exit 1; }
  cmake --build "$build" --target sgdn_gpu_tests sgdn_cuda_capi sgdn_program
  export SGDN_CUDA_LIB=$PWD/$build/kernels/libsgdn_cuda_capi.so
fi
[ -f "$SGDN_CUDA_LIB" ] || { echo "gpu_check: no library at $SGDN_CUDA_LIB" >&2; exit 1; }
echo "== library: $SGDN_CUDA_LIB"

if [ -x "$build/tests/sgdn_gpu_tests" ]; then
  echo "== GPU tests (ctest label gpu)"
  ctest --test-dir "$build" -L gpu --output-on-failure
else
  echo "== GPU tests skipped: $build/tests/sgdn_gpu_tests is not built"
fi

echo "== Python tests"
FLA_FLASH_QLA=0 python3 -m pytest -q kernels/python/

echo "== benchmark"
python3 experiments/perf/bench.py "$@"
