#!/usr/bin/env bash
# The whole CPU test suite, on a fresh machine too: installs dependencies, builds, runs ctest in the
# Release build and again under AddressSanitizer + UndefinedBehaviorSanitizer, and checks that every C++
# and CUDA source is formatted as .clang-format says. GPU tests (label `gpu`) are left out here; on a
# machine with a GPU run experiments/perf/gpu_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
for preset in default sanitize; do
  echo "== $preset build"
  experiments/setup.sh "$preset"
  echo "== $preset tests"
  ctest --preset "$preset"
done
echo "== format"
tests/check_format.sh
