#!/usr/bin/env bash
# Two shards given the same experiment file, running at once, must together leave every run in it.
#   tests/shards_share_file.sh SGDN CONFIG WORKDIR
set -euo pipefail
sgdn=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$sgdn" list "$config" > "$work/list.txt"
want=$(tail -n 1 "$work/list.txt" | cut -d' ' -f1)
"$sgdn" run "$config" --shard 0/2 --out "$work/shared.h5" > "$work/s0.txt" 2>&1 &
p0=$!
"$sgdn" run "$config" --shard 1/2 --out "$work/shared.h5" > "$work/s1.txt" 2>&1 &
p1=$!
wait $p0 && wait $p1 || { cat "$work/s0.txt" "$work/s1.txt"; exit 1; }
# a rerun finds every run done
"$sgdn" run "$config" --out "$work/shared.h5" > "$work/again.txt" 2>&1
grep -q "0 runs done now, $want found done" "$work/again.txt" || { cat "$work/again.txt"; exit 1; }
echo "both shards' $want runs are in the shared file"
