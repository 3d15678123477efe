#!/usr/bin/env bash
# The main job: a small ablation sweep on the CPU backend (experiments/configs/quickstart.ini), ending with
# the analysis table. Installs and builds what it needs first. Extra arguments go to `sgdn run`.
set -euo pipefail
cd "$(dirname "$0")/.."
experiments/setup.sh default
mkdir -p out
build/bin/sgdn run experiments/configs/quickstart.ini --out out/quickstart.h5 "$@"
