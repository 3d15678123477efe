#!/usr/bin/env bash
# Copies the GPU test binary, the C ABI library and the non-system shared libraries they need into
# build-cuda/dist (carried to the device machine; see kernels/NOTES.md), with REVISION: the checkout at
# staging (build first, so that it is the one they were built from).
set -eu
B=${1:-build-cuda}
rm -rf "$B/dist" && mkdir -p "$B/dist/lib"
cp "$B/tests/sgdn_gpu_tests" "$B/kernels/libsgdn_cuda_capi.so" "$B/dist/"
for lib in $(ldd "$B/tests/sgdn_gpu_tests" | awk '/=>/ {print $3}' | grep -E 'libcudart|libgomp|libhdf5|libsz|libaec|libboost'); do
  cp -L "$lib" "$B/dist/lib/"
done
# The checkout the binaries come from, for the results files (bench.py reads it).
git -C "$(dirname "$0")" describe --always --dirty > "$B/dist/REVISION" 2>/dev/null || echo unknown > "$B/dist/REVISION"
du -sh "$B/dist"
