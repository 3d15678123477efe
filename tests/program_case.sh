# Sourced by the program-level test scripts (failure_modes.sh, program_cli.sh), which are called as
#   SCRIPT CASE SGDN PYTHON SOURCE_DIR WORK_DIR
# Sets case_name, sgdn, py, src, work (a fresh folder for the case, made the current one) and tiny (a small
# config), and defines die, which prints the case's captured output files and fails the case.
set -uo pipefail
case_name=$1 sgdn=$2 py=$3 src=$4 work=$5/$1
tiny=$src/tests/configs/tiny.ini
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

die() {
  echo "FAILED: $*"
  for f in ./*.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}
