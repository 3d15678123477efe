# Times one forward of the sgdn package at any head shape (the benchmark fixes the Qwen3.5 shape), with the
# library in $SGDN_CUDA_LIB: CUDA-graph replay, median of 20. Two libraries are compared by running it twice.
#   SHAPE=H,HV,K,V T=TOKENS CONFIG=default|dense NAME=label python3 experiments/perf/tools/shape_time.py
import os, statistics, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import sgdn

H, HV, K, V = map(int, os.environ.get("SHAPE", "2,4,128,128").split(","))
T = int(os.environ.get("T", "131072"))
torch.manual_seed(0)
dev = "cuda"
q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=dev), dim=-1).bfloat16()
k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=dev), dim=-1).bfloat16()
v = torch.randn(1, T, HV, V, device=dev).bfloat16()
A = torch.exp(torch.empty(HV, device=dev).uniform_(0, 2.77))
b = torch.log(torch.expm1(torch.exp(torch.empty(HV, device=dev).uniform_(-6.9, -2.3))))
g = (-A * torch.nn.functional.softplus(torch.randn(1, T, HV, device=dev) + b)).float()
beta = torch.sigmoid(1.5 * torch.randn(1, T, HV, device=dev)).bfloat16()
kw = {} if os.environ.get("CONFIG", "default") == "default" else dict(selector="dense", solver="exact")
run = lambda: sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, None, True, False, **kw)
for _ in range(3):
    out = run()
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    out = run()
for _ in range(3):
    graph.replay()
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); graph.replay(); e.record(); e.synchronize()
    times.append(s.elapsed_time(e))
o, st = out
print(f"{os.environ.get('NAME','?'):>8} H={H} HV={HV} T={T} {os.environ.get('CONFIG','default'):>7}: "
      f"{statistics.median(times):.3f} ms  |o|={o.float().norm().item():.6e} |S|={st.norm().item():.6e}", flush=True)
