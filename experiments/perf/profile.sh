#!/usr/bin/env bash
# Nsight Compute profile of our three tensor-core stages (prepare, recurrence, outputs) in one dense forward
# at T (default 32768), B = 1, Qwen shape, on the device machine: the details page (speed of light, memory,
# occupancy, warp states) and the recurrence's SASS lines with the most stall samples, in one text file,
# $OUT/profile.txt. Carry build-cuda/dist.
set -u
. "$(dirname "$0")/device_env.sh"
export SGDN_CUDA_LIB=$DIST/libsgdn_cuda_capi.so
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
REP=/tmp/sgdn_profile
# stages.py runs each configuration twice (warm-up, then timed): skip the warm-up's three kernels.
# KERNELS="prepare_tc" (a regex alternative of the three names) profiles fewer of them; SKIP=3 skips three
# forwards instead of one (dense warm-up and timed, sparse-default warm-up: the sparse-default forward).
KERNELS=${KERNELS:-prepare_tc|recurrence_tc|output_tc}
N=$(echo "$KERNELS" | tr '|' '\n' | wc -l)
timeout 240 "$NCU" -f -o "$REP" --set full --import-source no -k regex:"$KERNELS" \
  --launch-skip "$((N * ${SKIP:-1}))" --launch-count "$N" python3 experiments/perf/stages.py "${T:-32768}" > /tmp/ncu_run.log 2>&1
echo "ncu rc=$?" > "$OUT/profile.txt"
tail -5 /tmp/ncu_run.log >> "$OUT/profile.txt"
"$NCU" -i "$REP.ncu-rep" --page details --print-units base >> "$OUT/profile.txt" 2>&1
# Why warps wait: cycles per issued instruction by stall reason, the largest first.
"$NCU" -i "$REP.ncu-rep" --page raw --print-units base 2>&1 |
  grep -E "Context [0-9]+, Stream|smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio" |
  awk '/Context/ {print substr($0, 1, 60); next} $NF + 0 >= 0.1 {print $1, $NF}' >> "$OUT/profile.txt"
for kernel in $(echo "$KERNELS" | tr '|' ' '); do
  "$NCU" -i "$REP.ncu-rep" --page source --csv --print-source sass -k regex:$kernel > /tmp/src_$kernel.csv 2>&1
  python3 - /tmp/src_$kernel.csv $kernel >> "$OUT/profile.txt" <<'PY'
import csv, sys
path, kernel = sys.argv[1], sys.argv[2]
rows = list(csv.reader(open(path, errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
if head is None:
    print(f"\n{kernel}: no source table"); print("".join(open(path, errors="replace").readlines()[:5])); sys.exit()
cols = rows[head]
src = cols.index("Source")
stall = next((i for i, c in enumerate(cols) if "Stall Sampling (All" in c), None)
if stall is None:
    print(f"\n{kernel}: no stall-sampling column"); sys.exit()
detail = [i for i, c in enumerate(cols) if c.startswith("stall_") or "Warp Stall" in c]
body = [r for r in rows[head + 1:] if len(r) == len(cols)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[stall]) for r in body) or 1
print(f"\n{kernel}: {len(body)} SASS lines, {total:.0f} stall samples; top 45 (samples, %, line):")
for r in sorted(body, key=lambda r: -num(r[stall]))[:45]:
    print(f"{num(r[stall]):8.0f} {100 * num(r[stall]) / total:5.1f}%  {r[0]:>6} {r[src][:90]}")
# Where the excess memory traffic comes from: the lines with the most excessive sectors / wavefronts.
for key in ("Sectors Global Excessive", "Wavefronts Shared Excessive"):
    col = next((i for i, c in enumerate(cols) if key in c), None)
    if col is None:
        continue
    excess = sum(num(r[col]) for r in body) or 1
    print(f"\n{kernel}: {cols[col]} {excess:.0f}; top 12 lines:")
    for r in sorted(body, key=lambda r: -num(r[col]))[:12]:
        print(f"{num(r[col]):10.0f} {100 * num(r[col]) / excess:5.1f}%  {r[0]:>6} {r[src][:90]}")
PY
done
