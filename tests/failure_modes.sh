#!/usr/bin/env bash
# The promises of docs/failure_modes.md, one case per call: bad input, a full disk, concurrent runs, what
# killed runs leave.
#   tests/failure_modes.sh CASE SGDN PYTHON SOURCE_DIR WORK_DIR
# Exit 0: kept; 77: cannot be tried here (the full-disk cases need root to mount a small tmpfs); else broken.
. "$(dirname "$0")/program_case.sh"
# run NAME ARGS...: runs sgdn, output in NAME.txt, exit status in $rc
run() {
  local name=$1
  shift
  "$sgdn" "$@" > "$name.txt" 2>&1
  rc=$?
}
expect_rc() { [ "$rc" = "$1" ] || die "$2: exit $rc, expected $1"; }
expect_text() { grep -qiE -- "$2" "$1.txt" || die "$1.txt does not say '$2'"; }
h5() { "$py" - "$@"; }
# A tmpfs of the given size at ./disk, unmounted when the case ends; exit 77 where mounting is not possible.
small_disk() {
  mkdir -p disk
  if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o "size=$1" tmpfs disk 2> /dev/null; then
    echo "cannot mount a tmpfs here (needs root): skipped"
    exit 77
  fi
  trap 'cd "$work" && umount "$work/disk"' EXIT
}
no_leftovers() {  # no temporary file, lock file or empty parts folder next to $1
  local left
  left=$(ls -d "$1".tmp-* "$1".lock "$1".parts/*.tmp-* 2> /dev/null)
  [ -z "$left" ] || die "left behind: $left"
  if [ -d "$1.parts" ] && [ -z "$(ls -A "$1.parts")" ]; then die "left an empty $1.parts/"; fi
}

case $case_name in
metrics_only_same_file)
  run make run "$tiny" --out x.h5
  expect_rc 0 "the sweep"
  sum=$(md5sum < x.h5)
  ln x.h5 hard.h5 && ln -s x.h5 soft.h5 || die "cannot make links"
  for target in x.h5 hard.h5 soft.h5 ./x.h5; do
    "$py" "$src/analysis/metrics_only.py" x.h5 "$target" > copy.txt 2>&1 && die "metrics_only.py x.h5 $target succeeded"
    expect_text copy "source file"
    [ "$(md5sum < x.h5)" = "$sum" ] || die "metrics_only.py x.h5 $target changed x.h5"
  done
  ;;
full_disk_part)
  small_disk 2M
  run full run "$src/tests/configs/full_disk.ini" --out disk/x.h5
  expect_rc 1 "a part write on a full disk"
  expect_text full "no space left on device"
  expect_text full "disk/x.h5"
  no_leftovers disk/x.h5  # the finished parts stay, for the rerun
  ;;
full_disk_merge)
  run first run "$src/tests/configs/full_disk.ini" --set selector.name=dense --set run.group=1 --out x.h5
  expect_rc 0 "the first run"
  # Room for the parts and a copy of x.h5, not for the merged file: the disk fills during the merge.
  small_disk 7000k
  cp x.h5 disk/x.h5
  run grown run "$src/tests/configs/full_disk.ini" --out disk/x.h5
  expect_rc 1 "a merge on a full disk"
  expect_text grown "no space left on device"
  expect_text grown "disk/x.h5"
  cmp -s x.h5 disk/x.h5 || die "the merge changed the existing disk/x.h5"
  no_leftovers disk/x.h5
  ;;
same_command_twice)
  for attempt in 1 2 3; do
    rm -rf x.h5*
    "$sgdn" run "$src/tests/configs/full_disk.ini" --out x.h5 > a.txt 2>&1 &
    pa=$!
    "$sgdn" run "$src/tests/configs/full_disk.ini" --out x.h5 > b.txt 2>&1
    rb=$?
    wait $pa
    ra=$?
    [ "$ra" = 0 ] && [ "$rb" = 0 ] || die "attempt $attempt: exits $ra and $rb"
    run again run "$src/tests/configs/full_disk.ini" --out x.h5
    expect_text again "0 runs done now, 4 found done"
    no_leftovers x.h5
  done
  ;;
merge_lock_held)
  "$py" -c "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); time.sleep(60)" \
    x.h5.lock > /dev/null 2>&1 &
  holder=$!
  sleep 0.5
  start=$(date +%s)
  run wait run "$tiny" --out x.h5 --lock-wait 1
  took=$(($(date +%s) - start))
  kill $holder
  expect_rc 1 "a run while another process holds the lock"
  expect_text wait "waiting for .*x.h5.lock"
  expect_text wait "gave up waiting .*--lock-wait"
  [ "$took" -lt 30 ] || die "waited $took s"
  ;;
schema_version)
  run make run "$tiny" --out x.h5
  expect_rc 0 "the sweep"
  cp x.h5 v9.h5 && cp x.h5 v0.h5
  h5 v9.h5 v0.h5 << 'EOF' || die "h5py"
import h5py, sys
with h5py.File(sys.argv[1], "a") as f: f.attrs["schema_version"] = 9
with h5py.File(sys.argv[2], "a") as f: del f.attrs["schema_version"]
EOF
  run v9 analyze v9.h5
  expect_rc 1 "analyze of a schema-9 file"
  expect_text v9 "schema_version 9"
  # A file of the previous version is read, and not written into.
  cp x.h5 v1.h5
  h5 v1.h5 << 'EOF' || die "h5py"
import h5py, sys
with h5py.File(sys.argv[1], "a") as f: f.attrs["schema_version"] = 1
EOF
  run v1 analyze v1.h5
  expect_rc 0 "analyze of a schema-1 file"
  run into_v1 run "$tiny" --set selector.name=topk --out v1.h5
  expect_rc 1 "a run into a schema-1 file"
  expect_text into_v1 "schema_version 1"
  run v0 analyze v0.h5
  expect_rc 1 "analyze of an unmarked file"
  expect_text v0 "no schema_version"
  sum=$(md5sum < v9.h5)
  run into_v9 run "$tiny" --set selector.name=topk --out v9.h5
  expect_rc 1 "a run into a schema-9 file"
  expect_text into_v9 "schema_version 9"
  [ "$(md5sum < v9.h5)" = "$sum" ] || die "the run changed v9.h5"
  ;;
analyze_counts_each_run_once)
  run make run "$tiny" --out x.h5
  "$sgdn" analyze x.h5 > once.txt 2> /dev/null || die "analyze x.h5"
  "$sgdn" analyze x.h5 x.h5 > twice.txt 2> twice_err.txt || die "analyze x.h5 x.h5"
  cmp -s once.txt twice.txt || die "analyze x.h5 x.h5 differs from analyze x.h5"
  expect_text twice_err "2 runs appear in more than one file.*counted once"
  ;;
rows_split_by_hidden_keys)
  "$sgdn" list "$src/tests/configs/chunks.ini" > list.txt 2>&1 || die "list"
  [ "$(head -n 2 list.txt | cut -d' ' -f5- | sort -u | wc -l)" = 2 ] || die "list gives the two runs one label"
  expect_text list "run.chunk=32"
  run make run "$src/tests/configs/chunks.ini" --out x.h5
  expect_rc 0 "the sweep"
  expect_text make "run.chunk=64 .* left"
  "$sgdn" analyze x.h5 > table.txt 2>&1 || die "analyze"
  [ "$(grep -c '| dense' table.txt)" = 2 ] || die "analyze puts both chunk sizes in one row"
  expect_text table "run.chunk=32 .*\| 1 "
  ;;
analyze_missing_metrics)
  run make run "$tiny" --out x.h5
  expect_rc 0 "the sweep"
  h5 x.h5 << 'EOF' || die "h5py"
import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    for rid, r in f["runs"].items():
        if r.attrs["selector.name"] == "dense":
            for key in ("output_error", "retention", "state_bytes"):
                del r["metrics"].attrs[key]
EOF
  "$sgdn" analyze x.h5 > table.txt 2> warnings.txt || die "analyze"
  expect_text warnings "1 of 2 runs lack metrics/output_error"
  expect_text warnings "lack metrics/retention"
  expect_text warnings "lack metrics/state_bytes"
  grep -q "nan" table.txt && die "the table shows nan"
  row=$(grep '| dense' table.txt)
  [ "$(echo "$row" | awk -F'|' '{gsub(/ /, "", $7); gsub(/ /, "", $9); gsub(/ /, "", $12); print $7 $9 $12}')" = "---" ] ||
    die "missing metrics shown as numbers: $row"
  ;;
one_exact_reference)
  # head_budget's error measured first-pass (full.h5) and in a grown sweep that reads the stored reference.
  run full run "$tiny" --out full.h5
  run first run "$tiny" --set selector.name=dense --out grown.h5
  run grown run "$tiny" --out grown.h5
  expect_rc 0 "the grown sweep"
  h5 full.h5 grown.h5 > compare.txt 2>&1 << 'EOF' || die "the error metrics differ"
import h5py, sys
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a["runs"]) == sorted(b["runs"])
for rid in a["runs"]:
    for key in ("output_error", "final_state_error"):
        x, y = a[f"runs/{rid}/metrics"].attrs[key], b[f"runs/{rid}/metrics"].attrs[key]
        assert x == y, (rid, key, x, y)
EOF
  ;;
out_is_workload_input)
  run make run "$tiny" --out in.h5
  sum=$(md5sum < in.h5)
  run self run "$tiny" --set workload.kind=file --set workload.path=in.h5 --out ./in.h5
  expect_rc 1 "--out equal to the workload's input"
  expect_text self "is the input file of workload.path"
  [ "$(md5sum < in.h5)" = "$sum" ] || die "in.h5 changed"
  ;;
zero_runs)
  run shard run "$tiny" --shard 5/8 --out z.h5
  expect_rc 0 "a shard without runs"
  expect_text shard "no runs in shard 5/8"
  [ -e z.h5 ] && die "z.h5 written"
  h5 empty.h5 << 'EOF' || die "h5py"
import h5py, sys
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["schema_version"] = 1
    f.create_group("workloads")
EOF
  run empty run "$tiny" --set workload.kind=file --set workload.path=empty.h5 --out e.h5
  expect_rc 0 "an input file without workloads"
  expect_text empty "no runs"
  ;;
memory_estimate)
  run huge run "$tiny" --set workload.tokens=1000000000000 --out huge.h5
  expect_rc 1 "a run larger than memory"
  expect_text huge "needs about .* of memory.*lower workload.tokens"
  [ -e huge.h5 ] || [ -e huge.h5.parts ] && die "huge.h5 written"
  ;;
set_sweep)
  run list list "$tiny" --set sweep.selector.rho=0.1,0.2 --set selector.name=head_budget
  expect_rc 0 "--set sweep.selector.rho"
  expect_text list "^2 runs"
  expect_text list "rho=0.1 "
  expect_text list "rho=0.2 "
  ;;
leftovers)
  run make run "$tiny" --out x.h5
  expect_rc 0 "the sweep"
  no_leftovers x.h5  # no lock file after a run
  # What killed runs leave: a merge's copy, a part's temporary file; a temporary file still being written
  # (locked by its writer) stays.
  head -c 100000 /dev/zero > x.h5.tmp-Ab12Cd
  mkdir -p x.h5.parts && echo partial > x.h5.parts/run-rdeadbeef.h5.tmp-Xy34Zw
  echo live > x.h5.tmp-Live01
  "$py" -c "import fcntl, sys, time; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(30)" \
    x.h5.tmp-Live01 > /dev/null 2>&1 &
  writer=$!
  sleep 0.5
  run again run "$tiny" --out x.h5
  kill $writer
  expect_rc 0 "the rerun"
  expect_text again "removed .*x.h5.tmp-Ab12Cd"
  [ -e x.h5.tmp-Live01 ] || die "removed a temporary file that its writer still holds"
  rm x.h5.tmp-Live01
  no_leftovers x.h5
  [ -e x.h5.parts ] && die "x.h5.parts/ left"
  # A run that fails after validation (its input file is broken) leaves no parts folder.
  h5 bad.h5 << 'EOF' || die "h5py"
import h5py, numpy, sys
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["schema_version"] = 1
    f.create_dataset("workloads/w0/inputs/q", data=numpy.zeros((2, 3), numpy.float32))
EOF
  run bad run "$tiny" --set workload.kind=file --set workload.path=bad.h5 --out y.h5
  expect_rc 1 "a broken input file"
  [ -e y.h5.parts ] && die "y.h5.parts/ left after a failed run"
  no_leftovers y.h5
  ;;
*)
  die "unknown case $case_name"
  ;;
esac
echo "kept: $case_name"
