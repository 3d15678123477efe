"""Sustained forwards against the board's power cap: for each layout, our forward (sparse-default unless
--configs says otherwise) and FLA's, each captured in a CUDA graph and replayed back to back for --seconds,
while nvidia-smi samples the SM clock, power draw and active clock-throttle reasons every 10 ms. Prints and
writes (JSON) per case: the replays' median time in the first 20 (what bench.py's short bursts see), in the
last 20 and over all of them, and the busy samples' median and lowest SM clock, median power (the instant
reading: nvidia-smi's power.draw averages over a second) and throttle reasons (0x4: the software power cap).
    python3 experiments/perf/tools/power_probe.py \\
        [--layouts 2x16K,1x32K] [--configs sparse-default] [--seconds 2] [--out power.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench  # noqa: E402

SMI_FIELDS = "timestamp,clocks.sm,power.draw.instant,clocks_throttle_reasons.active"
BUSY_WATTS = 200  # samples above this draw are counted as under load


def smi_device():
    """nvidia-smi's -i argument for the GPU torch runs on (its UUID), so that a host with several samples that
    one; none (every GPU) where torch gives no UUID or nvidia-smi does not take it (said on stderr)."""
    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    if uuid is not None:
        arg = ["-i", f"GPU-{uuid}"]
        if subprocess.run(["nvidia-smi", *arg, "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True).returncode == 0:
            return arg
    print("power_probe: nvidia-smi samples every GPU (no UUID for torch's device)", file=sys.stderr)
    return []


def parse_samples(lines):
    """nvidia-smi's CSV lines as (SM MHz, W, throttle reasons), skipping lines with a field it could not read."""
    samples = []
    for line in lines:
        fields = line.split(", ")
        try:
            samples.append((float(fields[1]), float(fields[2]), fields[3]))
        except (IndexError, ValueError):
            continue
    return samples


def sustained(fn, seconds, device):
    """Replays one captured call back to back for `seconds` while nvidia-smi (`device`: its -i argument)
    samples; the case's summary."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        fn()
    time.sleep(0.5)  # the previous case's draw settles
    log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe, which would fill and block a long run
    smi = subprocess.Popen(["nvidia-smi", *device, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits",
                            "-lms", "10"], stdout=log, text=True)
    time.sleep(0.3)
    events = []
    start = time.time()
    while time.time() - start < seconds:
        pair = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        pair[0].record()
        graph.replay()
        pair[1].record()
        events.append(pair)
        if len(events) % 200 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    time.sleep(0.2)
    smi.terminate()
    smi.wait()
    log.seek(0)
    busy = [x for x in parse_samples(log.read().splitlines()) if x[1] > BUSY_WATTS]
    log.close()
    ms = [a.elapsed_time(b) for a, b in events]
    clocks = [x[0] for x in busy]
    return {"replays": len(ms), "first20_ms": round(statistics.median(ms[:20]), 4),
            "last20_ms": round(statistics.median(ms[-20:]), 4), "median_ms": round(statistics.median(ms), 4),
            "sm_mhz_median": statistics.median(clocks) if clocks else None,
            "sm_mhz_min": min(clocks) if clocks else None,
            "power_w_median": statistics.median(x[1] for x in busy) if busy else None,
            "throttle_reasons": sorted({x[2] for x in busy}), "busy_samples": len(busy)}


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", default="2x16K,1x32K")
    ap.add_argument("--configs", default="sparse-default")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--out", help="JSON file to write")
    args = ap.parse_args()
    layouts, configs = bench.named(args.layouts, args.configs)
    if args.seconds <= 0:
        sys.exit(f"--seconds {args.seconds}: must be positive")
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    lib = bench.sgdn_cuda.load_library()
    device = smi_device()
    limits = subprocess.run(["nvidia-smi", *device, "--query-gpu=name,clocks.max.sm,power.limit",
                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"{limits}; {args.seconds} s of back-to-back replays per case", flush=True)
    rows = []
    for name, (T, _, lengths) in layouts.items():
        inputs, cu_fla = bench.layout_inputs(T, lengths)
        for config, cfg in configs.items():
            ours, calls = bench.ours_calls(lib, inputs[:1], lengths, cfg)
            rows.append(dict(layout=name, side="ours", config=config, **sustained(calls[0], args.seconds, device)))
            print(json.dumps(rows[-1]), flush=True)
            del ours, calls
        rows.append(dict(layout=name, side="fla", config="-", **sustained(
            lambda: bench.fla_forward(chunk_gated_delta_rule, inputs[0], cu_fla), args.seconds, device)))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": limits, "seconds": args.seconds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
