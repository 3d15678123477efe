#!/usr/bin/env bash
# `sgdn run --backend cuda` as a user runs it: the same config on both backends, the CUDA file read with
# h5py against SPEC §10, and the two compared run by run (fp32 inputs: 1e-4; bf16: 1e-2).
#   tests/gpu/program_cuda.sh SGDN_BINARY PYTHON WORKDIR        (exit 77 = skipped: no CUDA device)
set -euo pipefail
sgdn=$1 python=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
if ! nvidia-smi -L >/dev/null 2>&1; then echo "no CUDA device: skipped"; exit 77; fi
rm -rf "$work" && mkdir -p "$work"
cfg=$src/tests/configs/h5py_check.ini
"$sgdn" run "$cfg" --backend cpu --out "$work/cpu.h5" > "$work/cpu.txt"
"$sgdn" run "$cfg" --backend cuda --out "$work/cuda_fp32.h5" > "$work/cuda_fp32.txt"
"$sgdn" run "$cfg" --backend cuda --set run.precision=bfloat16 --out "$work/cuda_bf16.h5" > "$work/cuda_bf16.txt"
"$python" "$src/tests/h5py_check.py" "$work/cuda_fp32.h5"
"$python" "$src/tests/cross_backend_check.py" "$work/cpu.h5" "$work/cuda_fp32.h5" 1e-4
"$python" "$src/tests/cross_backend_check.py" "$work/cpu.h5" "$work/cuda_bf16.h5" 1e-2
cat "$work/cuda_fp32.txt"
