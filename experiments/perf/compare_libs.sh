#!/usr/bin/env bash
# Times several builds of the C ABI library side by side against FLA in one device call (bench.py on each,
# same inputs and settings), so that a kernel change is judged against the build before it under the same
# conditions. Carry the libraries (any ignored folder, e.g. build-cuda/variants) with build-cuda/dist and .whl.
#   BENCH_ARGS="--layouts 1x32K --configs dense,sparse-default" experiments/perf/compare_libs.sh base.so new.so ...
# Writes $OUT/compare_<lib>.{json,md} and prints one line per (library, layout, configuration). With
# STAGES_T="32768 ..." also each library's stage times (stages.py, outputs launched after the recurrence).
set -u
. "$(dirname "$0")/device_env.sh"
status=0
for lib in "$@"; do
  name=compare_$(basename "$lib" .so)
  SGDN_CUDA_LIB=$(realpath "$lib") timeout ${BENCH_TIMEOUT:-200} python3 experiments/perf/bench.py --out "$OUT" \
    --name "$name" ${BENCH_ARGS:-} > "$OUT/$name.log" 2>&1 || status=1
  grep "^|" "$OUT/$name.md" 2>/dev/null | grep -v -e "---" -e "layout" | sed "s/^/$(basename "$lib") /"
  if [ -n "${STAGES_T:-}" ]; then
    SGDN_CUDA_LIB=$(realpath "$lib") SGDN_CUDA_SERIAL_OUTPUTS=1 timeout 100 python3 experiments/perf/stages.py \
      $STAGES_T > "$OUT/${name}_stages.log" 2>&1 || status=1
    grep -E "^T=|prepare|recurrence|outputs|total" "$OUT/${name}_stages.log" | tr -s ' ' | paste -d' ' - - - - - \
      | sed "s/sgdn_cuda stage //g; s/^/$(basename "$lib") /"
  fi
done
exit $status
