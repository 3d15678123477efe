#!/usr/bin/env bash
# The whole CPU test suite, on a fresh machine too: installs dependencies, builds, runs ctest in the
# Release build and again under AddressSanitizer + UndefinedBehaviorSanitizer. GPU tests (label `gpu`)
# are left out here; on a machine with a GPU run `ctest --preset gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
for preset in default sanitize; do
  echo "== $preset build"
  experiments/setup.sh "$preset"
  echo "== $preset tests"
  ctest --preset "$preset"
done
