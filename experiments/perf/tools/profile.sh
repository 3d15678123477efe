#!/usr/bin/env bash
# Nsight Compute profile of our forward's kernels in one forward of CONFIG (default dense; any bench.py
# configuration) at T tokens (default 32768), B = 1, Qwen shape: the details page (speed of light, memory,
# occupancy, warp states), the stall reasons per issued instruction, and per kernel the SASS lines with the
# most stall samples and with the most excess global sectors and shared-memory wavefronts, in one text file.
#   experiments/perf/tools/profile.sh [OUT_DIR]      (default experiments/perf/results/profile)
# KERNELS: a regex alternative of kernel names (default: every kernel of the forward). The first forward
# (warm-up) is skipped. Needs ncu (CUDA toolkit) and a built library that sgdn_cuda finds.
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:-experiments/perf/results/profile}
mkdir -p "$OUT"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
REP=/tmp/sgdn_profile
KERNELS=${KERNELS:-.}
# timeline.py --no-trace: one warm-up forward, then --repeats forwards, synchronised one by one.
FORWARD=(python3 experiments/perf/tools/timeline.py "${T:-32768}" --configs "${CONFIG:-dense}" --repeats 1 --no-trace)
# The kernels of one forward (half of those two forwards launch), so that the warm-up is skipped whole.
N=$("$NCU" --csv --metrics gpu__time_duration.sum -k regex:"$KERNELS" "${FORWARD[@]}" 2>/dev/null |
  grep -c '"gpu__time_duration.sum"')
N=$(( N / 2 ))
timeout 600 "$NCU" -f -o "$REP" --set full --import-source no -k regex:"$KERNELS" \
  --launch-skip "$N" --launch-count "$N" "${FORWARD[@]}" > /tmp/ncu_run.log 2>&1
echo "ncu rc=$?" > "$OUT/profile.txt"
tail -5 /tmp/ncu_run.log >> "$OUT/profile.txt"
"$NCU" -i "$REP.ncu-rep" --page details --print-units base >> "$OUT/profile.txt" 2>&1
# Why warps wait: cycles per issued instruction by stall reason, the largest first.
"$NCU" -i "$REP.ncu-rep" --page raw --print-units base 2>&1 |
  grep -E "Context [0-9]+, Stream|smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio" |
  awk '/Context/ {print substr($0, 1, 60); next} $NF + 0 >= 0.1 {print $1, $NF}' >> "$OUT/profile.txt"
for kernel in $("$NCU" -i "$REP.ncu-rep" --page raw --csv --metrics gpu__time_duration.sum 2>/dev/null |
    awk -F'","' 'NR > 2 {print $5}' | sed 's/[<(].*//' | sort -u); do
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
