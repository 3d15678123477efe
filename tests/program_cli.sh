#!/usr/bin/env bash
# The command line as users meet it, and the build each run records, one case per call.
#   tests/program_cli.sh CASE SGDN PYTHON SOURCE_DIR WORK_DIR
. "$(dirname "$0")/program_case.sh"
# call NAME ARGS...: runs sgdn with stdout in NAME.out.txt, stderr in NAME.err.txt, exit status in $rc
call() {
  local name=$1
  shift
  "$sgdn" "$@" > "$name.out.txt" 2> "$name.err.txt"
  rc=$?
}
expect() {  # NAME RC STREAM PATTERN: exit status RC, and STREAM (out|err) matches PATTERN
  [ "$rc" = "$2" ] || die "$1: exit $rc, expected $2"
  grep -qE -- "$4" "$1.$3.txt" || die "$1: std$3 does not say '$4'"
}

case $case_name in
version)
  call v --version
  expect v 0 out "^sgdn [0-9]+\.[0-9]+\.[0-9]+ \(revision [0-9a-f]+(-dirty)?|unknown"
  [ -s v.err.txt ] && die "--version wrote to stderr"
  ;;
help)
  call top --help
  expect top 0 out "usage:"
  for command in run list analyze keys; do
    call "$command" "$command" --help
    expect "$command" 0 out "usage: sgdn $command"
    [ -s "$command.err.txt" ] && die "sgdn $command --help wrote to stderr"
  done
  expect run 0 out "--reuse-runs"
  ;;
usage_errors)
  # One exit status (2) and the usage on stderr, stdout empty, for every usage error.
  call bare
  call unknown frobnicate
  call no_config run
  call no_file analyze
  call bad_option run "$tiny" --no-such-option
  call analyze_option analyze --no-such-option
  for name in bare unknown no_config no_file bad_option analyze_option; do
    expect "$name" 2 err "usage:"
    [ -s "$name.out.txt" ] && die "$name wrote to stdout"
  done
  # An error while working is 1, without the usage.
  call work_error analyze /nonexistent.h5
  expect work_error 1 err "sgdn: error: "
  grep -q "usage:" work_error.err.txt && die "a working error printed the usage"
  ;;
build_attributes)
  call make run "$tiny" --out x.h5
  [ "$rc" = 0 ] || die "the sweep failed"
  revision=$("$sgdn" --version | sed -E 's/.*\(revision ([^,]+),.*/\1/')
  "$py" - x.h5 "$revision" > attrs.txt 2>&1 << 'EOF' || die "build attributes"
import h5py, sys
f = h5py.File(sys.argv[1], "r")
for rid, r in f["runs"].items():
    a = r.attrs
    assert a["build_revision"] == sys.argv[2], (rid, a["build_revision"])
    assert int(a["build_dirty"]) == int(sys.argv[2].endswith("-dirty"))
    assert a["build_source"].startswith(sys.argv[2])
    assert a["build_compiler"] and a["build_host"] and int(a["build_threads"]) >= 1
    assert "build_gpu" not in a  # a cpu run
EOF
  ;;
analyze_formats)
  call make run "$tiny" --out x.h5
  [ "$rc" = 0 ] || die "the sweep failed"
  call table analyze x.h5
  call table_named analyze x.h5 --format table
  cmp -s table.out.txt table_named.out.txt || die "--format table differs from the default"
  call csv analyze --format=csv x.h5
  expect csv 0 out "^# configurations: Error, retention"
  expect csv 0 out "^solver,selector,rho,G,runs,output err,"
  call json analyze x.h5 --format json
  "$py" - json.out.txt > parsed.txt 2>&1 << 'EOF' || die "json"
import json, sys
tables = json.load(open(sys.argv[1]))["tables"]
configurations = next(t for t in tables if t["name"] == "configurations")
runs = configurations["columns"].index("runs")
assert len(configurations["rows"]) == 2, configurations["rows"]
assert all(row[runs] == 1 for row in configurations["rows"]), configurations["rows"]
EOF
  call bad analyze x.h5 --format xml
  expect bad 2 err "--format 'xml' is not known; allowed: table, csv, json"
  call missing analyze x.h5 --format
  expect missing 2 err "--format needs a value"
  ;;
analysis_dump_level)
  # dump.level = analysis: events, metrics and the workload's attributes only; analyze and plot.py read it.
  call lean run "$tiny" --set dump.level=analysis --set dump.states=true --out lean.h5
  [ "$rc" = 0 ] || die "the sweep failed"
  "$py" - lean.h5 > lean.txt 2>&1 << 'EOF' || die "what the lean file holds"
import h5py, sys
f = h5py.File(sys.argv[1], "r")
for wid, w in f["workloads"].items():
    assert "inputs" not in w and "exact" not in w, list(w)
    assert len(w.attrs["decay_scale_A"]) == 4, w.attrs["decay_scale_A"]
for rid, r in f["runs"].items():
    assert sorted(r) == ["events", "metrics"], sorted(r)
    assert r.attrs["written"] == "events/mask,events/score,events/budget,metrics", r.attrs["written"]
    assert "output_error" in r["metrics"].attrs
EOF
  call analyzed analyze lean.h5
  expect analyzed 0 out "head_budget"
  "$py" "$src/analysis/plot.py" lean.h5 > plot.txt 2>&1 || die "plot.py"
  [ -s lean_plots/event_mask.png ] && [ -s lean_plots/error_by_memory.png ] || die "plot.py wrote no figures to lean_plots/"
  ;;
other_build_runs_again)
  call make run "$tiny" --out x.h5
  # As if another build had made one run.
  "$py" - x.h5 << 'EOF' || die "h5py"
import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    r = f["runs"][sorted(f["runs"])[0]]
    r.attrs["build_source"] = "0000000"
EOF
  call listed list "$tiny" --out x.h5
  expect listed 0 out "other build"
  expect listed 0 out "2 runs, 1 done in x.h5"
  call reused run "$tiny" --out x.h5 --reuse-runs
  expect reused 0 err "0 runs done now, 2 found done"
  call again run "$tiny" --out x.h5
  expect again 0 err "1 runs in x.h5 were made by another build"
  expect again 0 err "1 runs done now, 1 found done"
  call listed_after list "$tiny" --out x.h5
  expect listed_after 0 out "2 runs, 2 done in x.h5"
  [ "$(grep -c '^r.*  done ' listed_after.out.txt)" = 2 ] || die "list does not show both runs done"
  ;;
*)
  die "unknown case $case_name"
  ;;
esac
echo "kept: $case_name"
