"""Our forward's kernels on a timeline (torch.profiler's trace): for each layout, each kernel's start and end
in µs from the chunk table's start, median over separate forwards (synchronised one by one after a
warm-up), so that the overlap of the stages, which stage times from serial launches hide, shows, and
layouts with the same total length compare kernel by kernel (B = 1 against packed batches).
    python3 experiments/perf/tools/timeline.py [layout ...]
[--configs name,...] [--repeats N] [--no-trace]  (a layout: a token count or a bench.py layout name)
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench  # noqa: E402
from benchlib import layout  # noqa: E402

FIRST = "table_kernel"


def forwards(trace_path):
    """The trace's kernels as one list per forward [(name, start µs, end µs)], each starting at the table."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") == "kernel")
    runs = []
    for start, end, name in kernels:
        if short(name) == FIRST:
            runs.append([])
        if runs:
            runs[-1].append((name, start, end))
    return [[(n, s - run[0][1], e - run[0][1]) for n, s, e in run] for run in runs]


def short(name):
    """A kernel's name without its template arguments and parameters."""
    return name.removeprefix("void ").replace("(anonymous namespace)", "anon").split("<")[0].split("(")[0] \
        .split("::")[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layouts", nargs="*", default=["32768", "2x16K"])
    ap.add_argument("--configs", default="sparse-default")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-trace", action="store_true",
                    help="one warm-up forward, then --repeats forwards, without the profiler (for ncu)")
    args = ap.parse_args()
    lib = bench.sgdn_cuda.load_library()
    for T, label, lengths in [layout(x) for x in args.layouts]:
        inputs, _ = bench.layout_inputs(T, lengths)
        for name in args.configs.split(","):
            ours, calls = bench.ours_calls(lib, inputs, lengths, {**bench.CONFIGS, **bench.EXTRA_CONFIGS}[name])
            for _ in range(1 if args.no_trace else 3):
                calls[0]()
            torch.cuda.synchronize()
            if args.no_trace:
                for _ in range(args.repeats):
                    calls[0]()
                    torch.cuda.synchronize()
                del ours, calls
                continue
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.repeats):
                    calls[0]()
                    torch.cuda.synchronize()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trace.json")
                prof.export_chrome_trace(path)
                runs = forwards(path)
            shapes = {tuple(short(n) for n, _, _ in run) for run in runs}
            if not runs:
                raise SystemExit(f"{label} {name}: no {FIRST} in the profiler's trace")
            if len(shapes) != 1:
                raise SystemExit(f"{label} {name}: the forwards ran different kernels: {shapes}")
            ends = [max(end for _, _, end in run) for run in runs]
            print(f"{label} {name}: {len(runs)} forwards, last kernel ends at {statistics.median(ends):.1f} µs "
                  f"(min {min(ends):.1f}, max {max(ends):.1f})")
            for i, (kernel, _, _) in enumerate(runs[0]):
                start = statistics.median(run[i][1] for run in runs)
                end = statistics.median(run[i][2] for run in runs)
                print(f"  {short(kernel):32s} {start:8.1f} {end:8.1f}  ({end - start:7.1f})")
            del ours, calls


if __name__ == "__main__":
    with torch.inference_mode():
        main()
