#!/usr/bin/env bash
# Every tracked C++ and CUDA source (.h .cpp .cu .cuh) must be formatted as the repository's .clang-format
# says; prints the files and lines that are not, and fails then. Fix with `clang-format -i FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
clang-format --version
clang-format --style=file --dry-run -Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
