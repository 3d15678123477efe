"""Measuring aid: what a packed batch would gain if one sequence's stages ran behind the other's.
2 x 16K as one packed call against two B = 1 calls of its halves on two streams, the second stream held back
by a spin kernel of d cycles (0: both at once), in one CUDA graph (and as plain launches, with and without
stream priorities). Median ms of 20 replays.
    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so python3 experiments/perf/pipeline_probe.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def timed(run, graph=True):
    return bench.time_graph([run], plain=not graph)[0]


def main():
    lib = bench.sgdn_cuda.load_library()
    T, half = 32768, 16384
    inputs = bench.make_inputs(T, 1000 * T)
    halves = [tuple(x[:, i * half:(i + 1) * half] for x in inputs) for i in range(2)]
    for x in halves[1]:
        assert x.is_contiguous()
    hi, lo = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)
    plain = [torch.cuda.Stream(), torch.cuda.Stream()]
    for name in ("sparse-default", "dense"):
        cfg = bench.CONFIGS[name]
        packed = bench.Ours(lib, inputs, [half, half], cfg)
        one = [bench.Ours(lib, h, [half], cfg) for h in halves]

        def pair(delay, streams):
            def run():
                cur = torch.cuda.current_stream()
                for s in streams:
                    s.wait_stream(cur)
                with torch.cuda.stream(streams[0]):
                    one[0]()
                with torch.cuda.stream(streams[1]):
                    if delay:
                        torch.cuda._sleep(delay)
                    one[1]()
                for s in streams:
                    cur.wait_stream(s)
            return run

        def sleep_only(delay):
            return lambda: torch.cuda._sleep(delay)

        print(f"{name}: packed {timed(packed):.4f}  one 16K {timed(one[0]):.4f}  "
              f"serial {timed(lambda: (one[0](), one[1]())):.4f}", flush=True)
        for delay in (0, 100_000, 200_000, 300_000, 350_000, 400_000, 500_000):
            row = [f"  delay {delay:>7} cycles (sleep alone {timed(sleep_only(delay)) if delay else 0:.4f} ms):"]
            row.append(f"graph {timed(pair(delay, plain)):.4f}")
            row.append(f"graph+prio {timed(pair(delay, [hi, lo])):.4f}")
            row.append(f"plain {timed(pair(delay, plain), graph=False):.4f}")
            row.append(f"plain+prio {timed(pair(delay, [hi, lo]), graph=False):.4f}")
            print(" ".join(row), flush=True)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
