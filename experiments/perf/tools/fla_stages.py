"""FLA's GDN forward kernel by kernel (torch.profiler, CUDA time per kernel, mean of 5 forwards after a
warm-up) at the Qwen shape, bf16, B = 1: which of its passes (KKᵀ, solve, WY, h recurrence, outputs) costs
what, to set per-stage targets for ours. Run with FLA_FLASH_QLA=0 and fla-core importable.
    python3 experiments/perf/tools/fla_stages.py [T ...]
"""
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench  # noqa: E402


def main():
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    repeats = 5
    for T in [int(x) for x in sys.argv[1:]] or [32768]:
        q, k, v, g, beta = bench.make_inputs(T, 7)

        def call():
            return chunk_gated_delta_rule(q, k, v, g, beta, scale=bench.K ** -0.5, output_final_state=True)
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                call()
            torch.cuda.synchronize()
        per_kernel = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per_kernel[e.name] += e.device_time / 1000 / repeats
        total = sum(per_kernel.values())
        print(f"T={T} FLA kernels (ms per forward), total {total:.3f}")
        for name, ms in sorted(per_kernel.items(), key=lambda x: -x[1]):
            print(f"  {ms:8.3f}  {name[:110]}")


if __name__ == "__main__":
    with torch.inference_mode():
        main()
