#!/usr/bin/env bash
# The GPU needle suite (experiments/configs/needle_gpu.ini, or CONFIG=another .ini such as
# needle_cap_gpu.ini; its file names follow the config's) on the device machine, task by task (TASKS), so
# that a call cut off by its limit still leaves whole tasks. Each task's full file stays on the machine (its
# event masks and scores are too large to bring back); a metrics-only copy and the log go to $OUT. Merge,
# tabulate and plot them anywhere:
#   sgdn analyze needle_gpu_*_metrics.h5;  python3 analysis/plot.py needle_gpu_*_metrics.h5 --out figures
# Needs the sgdn program with CUDA in devprog/ (kernels/NOTES.md) and python3 with h5py.
set -u
OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT"
SGDN=${SGDN:-devprog/sgdn.sh}
TASKS=${TASKS:-single multikey multivalue multiquery}
WORK=${WORK:-/tmp/needle_gpu}
mkdir -p "$WORK"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } 2>&1 | tee -a "$OUT/needle_device.txt"
CONFIG=${CONFIG:-experiments/configs/needle_gpu.ini}
base=$(basename "${CONFIG%.ini}")
status=0
for task in $TASKS; do
  file=$WORK/${base}_$task.h5
  start=$(date +%s)
  "$SGDN" run "$CONFIG" --set workload.task=$task --out "$file" "$@" >"$OUT/needle_$task.log" 2>&1
  rc=$?; status=$((status | rc))
  echo "task $task: status $rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/needle_device.txt"
  if [ -f "$file" ]; then
    python3 analysis/metrics_only.py "$file" "$OUT/${base}_${task}_metrics.h5" || status=1
  fi
done
exit $status
