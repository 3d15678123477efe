"""Stage times of our forward (SGDN_CUDA_STAGE_TIMING=1, one synchronised run after a warm-up) at the Qwen
shape, bf16, B = 1, for dense and sparse-default. Also the target of `ncu` runs (one forward per config).
    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so python3 experiments/perf/stages.py [T or layout ...]
(a layout is one of bench.py's, e.g. 4x8K: its packed sequences). For the sparse configurations it also
prints each sequence's unit budgets (the events each head of a unit keeps: the recurrence's chain lengths).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def layout(arg):
    """A token count (one sequence) or a bench.py layout name such as 4x8K: (T, label, lengths)."""
    for T, name, lengths in bench.LAYOUTS:
        if arg == name:
            return T, name, lengths
    return int(arg), arg, [int(arg)]


def main():
    lib = bench.sgdn_cuda.load_library()
    for T, label, lengths in [layout(x) for x in sys.argv[1:]] or [layout("32768")]:
        inputs = bench.make_inputs(T, 7)
        for name, cfg in bench.CONFIGS.items():
            ours = bench.Ours(lib, inputs, lengths, cfg)
            ours()
            torch.cuda.synchronize()
            print(f"T={label} {name}:", file=sys.stderr, flush=True)
            os.environ["SGDN_CUDA_STAGE_TIMING"] = "1"
            ours()
            torch.cuda.synchronize()
            os.environ.pop("SGDN_CUDA_STAGE_TIMING")
            sys.stderr.flush()
            if cfg["selector"] != "dense":  # the recurrence's chains: events kept per head of each unit
                for s, row in enumerate(ours.budget.cpu().tolist()):
                    print(f"  sequence {s} unit budgets, largest first: {sorted(row, reverse=True)}", flush=True)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
