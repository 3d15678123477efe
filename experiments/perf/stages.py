"""Stage times of our forward (SGDN_CUDA_STAGE_TIMING=1, one synchronised run after a warm-up) at the Qwen
shape, bf16, B = 1, for dense and sparse-default. Also the target of `ncu` runs (one forward per config).
    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so python3 experiments/perf/stages.py [T ...]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    lib = bench.sgdn_cuda.load_library()
    for T in [int(x) for x in sys.argv[1:]] or [32768]:
        inputs = bench.make_inputs(T, 7)
        for name, cfg in bench.CONFIGS.items():
            ours = bench.Ours(lib, inputs, [T], cfg)
            ours()
            torch.cuda.synchronize()
            print(f"T={T} {name}:", file=sys.stderr, flush=True)
            os.environ["SGDN_CUDA_STAGE_TIMING"] = "1"
            ours()
            torch.cuda.synchronize()
            os.environ.pop("SGDN_CUDA_STAGE_TIMING")
            sys.stderr.flush()


if __name__ == "__main__":
    with torch.inference_mode():
        main()
