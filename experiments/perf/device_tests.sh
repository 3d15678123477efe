#!/usr/bin/env bash
# GPU tests of the CUDA backend on the device machine, from a build carried in build-cuda/dist
# (see kernels/NOTES.md): Catch2 GPU tests, the Python ctypes tests (with FLA if .whl carries it), and
# compute-sanitizer memcheck + racecheck on the small case. Logs go to $OUT (or ./device-logs).
set -u
. "$(dirname "$0")/device_env.sh"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2; } 2>&1 | tee "$OUT/device.txt"
status=0
"$DIST/sgdn_gpu_tests" -d yes 2>&1 | tee "$OUT/gpu_tests.log"; status=$((status | ${PIPESTATUS[0]}))
if [ "${SGDN_SKIP_PY:-0}" != 1 ]; then
  SGDN_CUDA_LIB=$DIST/libsgdn_cuda_capi.so python3 -m pytest -q -s -p no:cacheprovider kernels/python/test_sgdn_cuda.py \
    kernels/python/test_sgdn_cuda_library.py \
    2>&1 | tee "$OUT/python_tests.log"; status=$((status | ${PIPESTATUS[0]}))
fi
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 "$DIST/sgdn_gpu_tests" "[small]" 2>&1 | tee "$OUT/sanitizer_$tool.log"
  status=$((status | ${PIPESTATUS[0]}))
done
if [ "${SGDN_BENCH:-0}" = 1 ]; then
  SGDN_CUDA_LIB=$DIST/libsgdn_cuda_capi.so timeout 240 python3 experiments/perf/bench.py --quick --out "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
echo "overall status $status" | tee -a "$OUT/device.txt"
exit $status
