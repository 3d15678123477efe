#!/usr/bin/env bash
# One device call for issue 5: tensor-core parity tests first, then the FLA harness (bench.py), then the
# whole GPU test suite, the Python tests and the sanitizers on the small case. Each step has a time limit so
# that one hang cannot eat the call. Logs and results go to $OUT. Carry build-cuda/dist and .whl.
#   SGDN_STEPS="tc stages bench all py san" (default: all of them)
set -u
. "$(dirname "$0")/device_env.sh"
export SGDN_CUDA_LIB=$DIST/libsgdn_cuda_capi.so
STEPS=${SGDN_STEPS:-tc stages bench all py san}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; } 2>&1 | tee "$OUT/device.txt"
status=0
step() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if step tc; then
  timeout 150 "$DIST/sgdn_gpu_tests" "[tc]" > "$OUT/tc_tests.log" 2>&1; rc=$?; status=$((status | rc))
  grep -E "^tc |passed|failed|FAILED|CHECK|with expansion|<=|^  \(" "$OUT/tc_tests.log" | head -60; echo "tc tests rc=$rc"
fi
if step stages; then
  timeout 100 python3 experiments/perf/stages.py 4096 32768 131072 > "$OUT/stages.log" 2>&1; rc=$?; status=$((status | rc))
  grep -E "^T=|prepare|recurrence|outputs|scores|selection|total" "$OUT/stages.log" | paste - - - - - - - - | tr -s ' ' | head -20
fi
if step bench; then
  timeout ${BENCH_TIMEOUT:-240} python3 experiments/perf/bench.py --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  rc=$?; status=$((status | rc)); grep -v "^|" "$OUT/bench.log" | tail -25; echo "bench rc=$rc"
fi
if step all; then
  timeout 200 "$DIST/sgdn_gpu_tests" > "$OUT/gpu_tests.log" 2>&1; rc=$?; status=$((status | rc))
  tail -4 "$OUT/gpu_tests.log"; echo "all gpu tests rc=$rc"
fi
if step py; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider kernels/python/test_sgdn_cuda.py kernels/python/test_sgdn_cuda_library.py > "$OUT/python_tests.log" 2>&1
  rc=$?; status=$((status | rc)); tail -3 "$OUT/python_tests.log"; echo "python rc=$rc"
fi
if step san; then
  for tool in memcheck racecheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$DIST/sgdn_gpu_tests" "[small]" > "$OUT/sanitizer_$tool.log" 2>&1
    rc=$?; status=$((status | rc)); tail -2 "$OUT/sanitizer_$tool.log"; echo "$tool rc=$rc"
  done
fi
echo "overall status $status"
exit $status
