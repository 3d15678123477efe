"""Baseline timing of the correct-first CUDA backend (issue 4) beside FLA, for issue 5 to start from.
Qwen3.5 head shape (H = 16, HV = 32, K = V = 128), bf16 inputs, B = 1; CUDA events, median of repeats after
warm-up, workspace allocated once. Not the issue-5 harness: a first reading only.

    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so FLA_FLASH_QLA=0 python3 experiments/perf/bench_baseline.py
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "python"))
os.environ.setdefault("FLA_FLASH_QLA", "0")
import sgdn_cuda  # noqa: E402


def time_ms(fn, warmup=2, repeats=7):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    H, HV, K, V = 16, 32, 128, 128
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as exc:
        print("FLA not importable:", exc)
        chunk_gated_delta_rule = None
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for T in (int(x) for x in os.environ.get("BENCH_T", "4096,32768").split(",")):
        gen = torch.Generator(device="cuda").manual_seed(T)
        q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=gen), dim=-1).bfloat16()
        k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=gen), dim=-1).bfloat16()
        v = torch.randn(1, T, HV, V, device="cuda", generator=gen).bfloat16()
        a = torch.exp(torch.rand(HV, device="cuda", generator=gen) * 2.77)
        g = (-a * torch.nn.functional.softplus(torch.randn(1, T, HV, device="cuda", generator=gen) - 4.0)).float()
        beta = torch.sigmoid(1.5 * torch.randn(1, T, HV, device="cuda", generator=gen)).bfloat16()
        configs = {
            "dense": dict(solver="exact", selector="dense"),
            "sparse-default G=1": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, group=1),
            "sparse-default G=4": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, group=4),
        }
        dense_o = None
        for name, cfg in configs.items():
            out = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, **cfg)
            if name == "dense":
                dense_o = out[0]
            ms = time_ms(lambda: sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, **cfg))
            kept = out[2]["mask"].float().mean().item()
            if os.environ.get("BENCH_STAGES") == "1":  # one run with the library's stage timer on
                torch.cuda.synchronize()
                os.environ["SGDN_CUDA_STAGE_TIMING"] = "1"
                sys.stderr.flush()
                sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, **cfg)
                torch.cuda.synchronize()
                os.environ.pop("SGDN_CUDA_STAGE_TIMING")
            print(f"T={T} ours {name}: {ms:.3f} ms (kept {kept:.3f})")
        if chunk_gated_delta_rule is not None:
            fla = lambda: chunk_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, output_final_state=True)
            fo, _ = fla()
            ms = time_ms(fla)
            err = ((dense_o.float() - fo.float()).norm() / fo.float().norm()).item()
            print(f"T={T} FLA dense: {ms:.3f} ms; ours dense vs FLA rel {err:.3e}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
