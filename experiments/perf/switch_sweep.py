"""Measuring aid: one of our measuring switches (an SGDN_CUDA_* environment variable that forward() reads on
each call) at several values side by side in one process, on the same inputs, with FLA in the same rounds.
Each round times FLA, then ours once per value (a graph captured per value, since the switch is read while
the graph is captured); the rounds interleave the values so that drift between them shows as spread, not as
a difference. Prints the median over rounds of each value's median, its ratio to FLA's, and writes JSON.

    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so python3 experiments/perf/switch_sweep.py \\
        --switch SGDN_CUDA_OUT_TAIL --values ,2,4 --layouts 1x16K,2x16K [--configs sparse-default] [--rounds 3]

An empty value unsets the switch (the default).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", required=True, help="the environment variable (SGDN_CUDA_...)")
    ap.add_argument("--values", required=True, help="comma-separated values; an empty one unsets it")
    ap.add_argument("--layouts", default="1x16K,1x32K,2x16K")
    ap.add_argument("--configs", default="sparse-default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="JSON file to write")
    args = ap.parse_args()
    if not args.switch.startswith("SGDN_CUDA_"):
        sys.exit(f"--switch {args.switch}: not one of ours (SGDN_CUDA_...)")
    layouts, configs = bench.named(args.layouts, args.configs)
    values = args.values.split(",")
    lib = bench.sgdn_cuda.load_library()
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def set_switch(value):
        if value:
            os.environ[args.switch] = value
        else:
            os.environ.pop(args.switch, None)

    rows = []
    print(f"{args.switch}: values {values}, {args.rounds} rounds, {torch.cuda.get_device_name(0)}", flush=True)
    for layout, (T, _, lengths) in layouts.items():
        inputs, cu_fla = bench.layout_inputs(T, lengths)
        fla_calls = [lambda x=x: bench.fla_forward(chunk_gated_delta_rule, x, cu_fla) for x in inputs]
        for cname, cfg in configs.items():
            ours, calls = bench.ours_calls(lib, inputs, lengths, cfg)
            fla_ms, ours_ms = [], {v: [] for v in values}
            for _ in range(args.rounds):
                fla_ms.append(bench.time_graph(fla_calls)[0])
                for v in values:
                    set_switch(v)
                    ours_ms[v].append(bench.time_graph(calls)[0])
                set_switch("")
            fla = statistics.median(fla_ms)
            for v in values:
                ms = statistics.median(ours_ms[v])
                row = {"layout": layout, "config": cname, "switch": args.switch, "value": v or "(unset)",
                       "ours_ms": round(ms, 4), "fla_ms": round(fla, 4), "speedup": round(fla / ms, 3),
                       "ours_rounds": [round(x, 4) for x in ours_ms[v]], "fla_rounds": [round(x, 4) for x in fla_ms]}
                rows.append(row)
                print(f"{layout:>7} {cname:>15} {row['value']:>8}: ours {ms:.4f} ms (rounds "
                      f"{', '.join(f'{x:.4f}' for x in ours_ms[v])}), FLA {fla:.4f}, {fla / ms:.3f}x", flush=True)
            del ours, calls
            torch.cuda.empty_cache()
        del inputs
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "switch": args.switch, "rounds": args.rounds,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
