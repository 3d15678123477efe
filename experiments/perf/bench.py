"""Issue-5 harness: SparseGDN's CUDA backend beside FLA on one GPU, in one process, on the same bf16 inputs.

Qwen3.5 head shape (H = 16, HV = 32, K = V = 128), chunk 64. Layouts: B = 1 at T = 4K..128K, and packed
4 x 8K and 2 x 16K (cu_seqlens). Configurations:
  dense           exact solver, every event (score `none`: the dense selector reads no scores)
  sparse-default  block_adjacent band 1, update_norm score, head_budget rho = 0.29 (pair granularity), G = 1
Both sides are timed the same way: one CUDA graph per side holding one call per input set (2 rotating input
sets when T <= 8K, so the inputs are not served from the 60 MB L2), warm-up replays, then the median of
timed replays (CUDA events) divided by the calls in the graph. Timed: our whole C ABI forward (chunk table,
prepare, scores, selection, recurrence, outputs, final state) against FLA's chunk_gated_delta_rule
(output_final_state=True, FLA_FLASH_QLA=0).

Intermediates, FLA's h tensor (N x HV x K x V bf16) against our snapshots written ((kept events + 1) x K x V
per head, bf16 on the tensor-core path): the issue's comparison, `ours_bytes` / `fla_bytes`. Beside them,
everything else each side keeps while it runs: ours the U/W tensors (bf16, N x HV x 64 x (K + V)) and the
whole workspace the C ABI asks for (sized for the worst case, every event kept); FLA's the growth of the
allocated memory during one call, less its outputs o and final state (measured: its cumulative decays, A, w,
u, h and v_new).

    SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so python3 experiments/perf/bench.py [--out DIR] [--quick]
        [--layouts 1x32K,4x8K] [--configs sparse-default,sparse-G2] [--name BASE] [--out-dtype float32]
"""
import argparse
import ctypes
import datetime
import importlib.metadata
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("FLA_FLASH_QLA", "0")
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "python"))
import sgdn_cuda  # noqa: E402

H, HV, K, V, C = 16, 32, 128, 128, 64
LAYOUTS = [(4096, "1x4K", [4096]), (8192, "1x8K", [8192]), (16384, "1x16K", [16384]), (32768, "1x32K", [32768]),
           (65536, "1x64K", [65536]), (131072, "1x128K", [131072]), (32768, "4x8K", [8192] * 4),
           (32768, "2x16K", [16384] * 2)]
CONFIGS = {
    "dense": dict(solver="exact", selector="dense", score="none", group=1),
    "sparse-default": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, score="update_norm",
                           group=1),
    # The same budget with no unit above 40 % of its chunks: the recurrence's longest chain is 0.4 N events.
    "sparse-cap0.4": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, max_fraction=0.4,
                          score="update_norm", group=1),
}
# Run only when named with --configs: sparse-default with output windows of G = 2 and 4 chunks (SPEC §6).
EXTRA_CONFIGS = {f"sparse-G{G}": dict(CONFIGS["sparse-default"], group=G) for G in (2, 4)}
# ... and other bounds on the longest chain: head_budget capped at 0.5 and 0.67, topk (every unit 0.29 N).
EXTRA_CONFIGS.update({f"sparse-cap{f}": dict(CONFIGS["sparse-cap0.4"], max_fraction=f) for f in (0.5, 0.67)})
EXTRA_CONFIGS["sparse-topk"] = dict(CONFIGS["sparse-default"], selector="topk")


def make_inputs(T, seed):
    """SPEC §9 `random`: unit-norm q, k; v ~ N(0,1); beta = sigmoid(1.5 n); g = -A_h softplus(x + b_h) with
    A_h log-uniform in [1, 16] and softplus(b_h) log-uniform in [1e-3, 1e-1] per value head."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=gen), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=gen), dim=-1).bfloat16()
    v = torch.randn(1, T, HV, V, device="cuda", generator=gen).bfloat16()
    a = torch.exp(torch.rand(HV, device="cuda", generator=gen) * math.log(16.0))
    sp = torch.exp(math.log(1e-3) + torch.rand(HV, device="cuda", generator=gen) * math.log(100.0))
    b = torch.log(torch.expm1(sp))  # softplus(b) = sp
    g = (-a * torch.nn.functional.softplus(torch.randn(1, T, HV, device="cuda", generator=gen) + b)).float()
    beta = torch.sigmoid(1.5 * torch.randn(1, T, HV, device="cuda", generator=gen)).bfloat16()
    return q, k, v, g.contiguous(), beta


class Ours:
    """One preallocated call of the C ABI (no allocation or host sync inside, so it can be graph-captured)."""

    def __init__(self, lib, inputs, lengths, cfg, out_dtype=torch.bfloat16):
        q, k, v, g, beta = inputs
        T = q.shape[1]
        self.lib = lib
        c = sgdn_cuda.make_config(lib, num_seqs=len(lengths), total_tokens=T, qk_heads=H, v_heads=HV, key_dim=K,
                                  value_dim=V, chunk=C, output_dtype=out_dtype, **cfg)
        self.config = c
        size = ctypes.c_size_t(0)
        sgdn_cuda._check(lib, lib.sgdn_cuda_workspace_size(ctypes.byref(c), ctypes.byref(size)))
        self.workspace = torch.empty(size.value, dtype=torch.uint8, device="cuda")
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        self.cu = torch.tensor(cu, dtype=torch.int32, device="cuda")
        self.n_chunks = sum(math.ceil(n / C) for n in lengths)
        self.o = torch.empty((1, T, HV, V), dtype=out_dtype, device="cuda")
        self.final = torch.empty((len(lengths), HV, K, V), dtype=torch.float32, device="cuda")
        self.mask = torch.empty(self.n_chunks * HV, dtype=torch.uint8, device="cuda")
        self.score = torch.empty(self.n_chunks * HV, dtype=torch.float32, device="cuda")
        self.budget = torch.empty((len(lengths), H), dtype=torch.int32, device="cuda")
        self.tensors = []
        self.set_inputs(inputs)

    def set_inputs(self, inputs):
        q, k, v, g, beta = inputs
        p = lambda t: ctypes.c_void_p(t.data_ptr())
        self.tensors.append(sgdn_cuda.Tensors(
            q=p(q), k=p(k), v=p(v), g=p(g), beta=p(beta), cu_seqlens=p(self.cu), initial_state=None, o=p(self.o),
            final_state=p(self.final), event_mask=p(self.mask), event_score=p(self.score), budget=p(self.budget)))

    def __call__(self, which=0):
        stream = torch.cuda.current_stream().cuda_stream
        sgdn_cuda._check(self.lib, self.lib.sgdn_cuda_forward(
            ctypes.byref(self.config), ctypes.byref(self.tensors[which]), ctypes.c_void_p(self.workspace.data_ptr()),
            ctypes.c_size_t(self.workspace.numel()), ctypes.c_void_p(stream)))

    def intermediate_bytes(self):
        """(snapshots written, U/W, workspace asked for) in bytes, and the fraction of events kept."""
        kept = int(self.mask.sum().item())
        uw = self.n_chunks * HV * C * (K + V) * 2  # bf16 U and W
        snapshots = (kept + len(self.final) * HV) * K * V * 2  # bf16 snapshots (tensor-core path)
        return (snapshots, uw, self.workspace.numel()), kept / max(1, self.mask.numel())


def layout_inputs(T, lengths):
    """A layout's input sets (two, rotated in the timed graph, for T <= 8K; else one) and FLA's cu_seqlens
    (int64; None for one sequence)."""
    inputs = [make_inputs(T, 1000 * T + i) for i in range(2 if T <= 8192 else 1)]
    cu_fla = (torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64, device="cuda")
              if len(lengths) > 1 else None)
    return inputs, cu_fla


def named(layouts, configs):
    """The layouts and configurations that comma-separated names choose, as {name: (T, name, lengths)} and
    {name: settings}, in the order named; exits naming the first unknown one (the measuring aids' arguments)."""
    known_layouts = {l[1]: l for l in LAYOUTS}
    known_configs = dict(CONFIGS, **EXTRA_CONFIGS)
    for name in layouts.split(","):
        if name not in known_layouts:
            sys.exit(f"unknown layout {name}; known: {', '.join(known_layouts)}")
    for name in configs.split(","):
        if name not in known_configs:
            sys.exit(f"unknown configuration {name}; known: {', '.join(known_configs)}")
    return ({n: known_layouts[n] for n in layouts.split(",")}, {n: known_configs[n] for n in configs.split(",")})


def fla_forward(fla_fn, inputs, cu_seqlens):
    """FLA's forward on one input set (q, k, v, g, beta), as the harness times it."""
    return fla_fn(*inputs, scale=K ** -0.5, output_final_state=True, cu_seqlens=cu_seqlens)


def ours_calls(lib, inputs, lengths, cfg, out_dtype=torch.bfloat16):
    """Our forward prepared on every input set, and one call per set (what time_graph takes)."""
    ours = Ours(lib, inputs[0], lengths, cfg, out_dtype)
    for extra in inputs[1:]:
        ours.set_inputs(extra)
    return ours, [lambda i=i: ours(i) for i in range(len(inputs))]


def time_graph(calls, warmup=3, repeats=20, plain=False, settle=0.0):
    """Captures one graph holding every call in `calls` (one per input set); median ms per call, and the
    spread. plain: times the calls as plain launches instead (also where capture fails). settle: seconds
    the device stays idle before the warm-up replays, so that each side starts from the same power state
    (our forwards draw near the board's cap; see power_probe.py)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:  # warm-up outside the graph (compilation, caches)
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    def run():
        for fn in calls:
            fn()
    graph = None
    if not plain:
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            run = graph.replay
        except Exception as exc:  # fall back to plain launches timed by events (reported on stderr)
            print(f"graph capture failed ({exc}); timing plain launches with events", file=sys.stderr, flush=True)
            graph = None
            torch.cuda.synchronize()
    if settle > 0:
        time.sleep(settle)
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    del graph
    return statistics.median(times) / len(calls), (max(times) - min(times)) / len(calls)


def fla_version(fla):
    """The installed fla-core's version (its distribution metadata; the module's own attribute otherwise)."""
    try:
        return importlib.metadata.version("fla-core")
    except importlib.metadata.PackageNotFoundError:
        return getattr(fla, "__version__", "unknown")


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def sgdn_revision(lib):
    """The checkout the loaded C ABI library was staged from: SGDN_REV if set, else the REVISION file that
    stage_dist.sh writes beside the library (`git describe --always --dirty` when it ran; build before staging,
    so that the two agree), else "unknown"."""
    if os.environ.get("SGDN_REV"):
        return os.environ["SGDN_REV"]
    path = os.path.join(os.path.dirname(os.path.abspath(lib._name)), "REVISION")
    try:
        with open(path) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--quick", action="store_true", help="T = 4K and 32K only")
    ap.add_argument("--layouts", help="comma-separated layout names to run (e.g. 1x32K,4x8K); default all")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds of idle device before each side's timed replays (default 0: as it finds it)")
    ap.add_argument("--out-dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="our output's dtype (FLA's stays bf16; float32 runs are a subset, never h200)")
    ap.add_argument("--name", help="base name of the result files in --out (default: h200 for the whole table, "
                    "h200_subset when --quick, --layouts, --configs, --out-dtype or --settle narrow or change it, so "
                    "such a run never replaces it)")
    ap.add_argument("--configs", help="comma-separated configurations (default: " + ", ".join(CONFIGS) +
                    "; also " + ", ".join(EXTRA_CONFIGS) + ")")
    args = ap.parse_args()
    lib = sgdn_cuda.load_library()
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    import fla
    import triton

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "?"
    meta = {
        "device": f"{props.name} ({props.multi_processor_count} SMs, {props.total_memory >> 20} MiB), driver {driver}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                     "fla": fla_version(fla), "FLA_FLASH_QLA": os.environ.get("FLA_FLASH_QLA"),
                     "sgdn": sgdn_revision(lib), "sgdn_abi": lib.sgdn_cuda_abi_version()},
        "method": "CUDA-graph replay, median of %d replays after 3 warm-up replays; 2 rotating input sets for T <= 8K"
                  % args.repeats + ("; %g s idle before each side" % args.settle if args.settle > 0 else ""),
        "shape": {"H": H, "HV": HV, "K": K, "V": V, "chunk": C, "dtype": "bfloat16", "ours_out_dtype": args.out_dtype},
        "configs": None,  # filled in below with those run
    }
    rows = []
    chosen = args.layouts.split(",") if args.layouts else ["1x4K", "1x32K"] if args.quick else None
    unknown = set(chosen or []) - {l[1] for l in LAYOUTS}
    if unknown:
        sys.exit(f"unknown layout(s) {', '.join(sorted(unknown))}; known: {', '.join(l[1] for l in LAYOUTS)}")
    layouts = [l for l in LAYOUTS if chosen is None or l[1] in chosen]
    known = dict(CONFIGS, **EXTRA_CONFIGS)
    unknown = set(args.configs.split(",") if args.configs else []) - known.keys()
    if unknown:
        sys.exit(f"unknown configuration(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    configs = {c: known[c] for c in args.configs.split(",")} if args.configs else CONFIGS
    meta["configs"] = configs
    print(f"{'layout':>7} {'config':>15} {'ours ms':>9} {'FLA ms':>8} {'speedup':>7} {'snap MiB':>9} "
          f"{'h MiB':>8} {'work MiB':>9} {'FLA work':>9} {'kept':>5} {'rel vs FLA':>10}", flush=True)
    for T, name, lengths in layouts:
        inputs, cu_fla = layout_inputs(T, lengths)
        fla_calls = []
        fla_out = {}
        for i, (q, k, v, g, beta) in enumerate(inputs):
            def fla_call(i=i, q=q, k=k, v=v, g=g, beta=beta):
                fla_out[i] = fla_forward(chunk_gated_delta_rule, (q, k, v, g, beta), cu_fla)
            fla_calls.append(fla_call)
        fla_ms, fla_spread = time_graph(fla_calls, repeats=args.repeats, settle=args.settle)
        fla_call = fla_calls[0]
        fla_out.clear()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fla_call()
        torch.cuda.synchronize()
        fla_o, fla_final = fla_out[0]
        fla_work_bytes = (torch.cuda.max_memory_allocated() - before - fla_o.numel() * fla_o.element_size()
                          - fla_final.numel() * fla_final.element_size())
        fla_o = fla_o.clone()
        n_chunks = sum(math.ceil(n / C) for n in lengths)
        fla_bytes = n_chunks * HV * K * V * 2
        fla_out.clear()
        for cname, cfg in configs.items():
            ours, calls = ours_calls(lib, inputs, lengths, cfg, getattr(torch, args.out_dtype))
            ours_ms, ours_spread = time_graph(calls, repeats=args.repeats, settle=args.settle)
            ours(0)
            torch.cuda.synchronize()
            err = rel(ours.o, fla_o)
            (nbytes, uw_bytes, ws_bytes), kept = ours.intermediate_bytes()
            row = {"T": T, "layout": name, "config": cname, "ours_ms": round(ours_ms, 4), "fla_ms": round(fla_ms, 4),
                   "speedup": round(fla_ms / ours_ms, 3), "ours_bytes": nbytes, "fla_bytes": fla_bytes,
                   "ours_uw_bytes": uw_bytes, "ours_workspace_bytes": ws_bytes, "fla_work_bytes": fla_work_bytes,
                   "rel_err_vs_fla": float(f"{err:.3e}"), "kept_fraction": round(kept, 4),
                   "ours_spread_ms": round(ours_spread, 4), "fla_spread_ms": round(fla_spread, 4)}
            rows.append(row)
            print(f"{name:>7} {cname:>15} {ours_ms:9.3f} {fla_ms:8.3f} {fla_ms / ours_ms:7.2f} {nbytes / 2**20:9.0f} "
                  f"{fla_bytes / 2**20:8.0f} {ws_bytes / 2**20:9.0f} {fla_work_bytes / 2**20:9.0f} {kept:5.2f} "
                  f"{err:10.2e}", flush=True)
            del ours, calls
            torch.cuda.empty_cache()
        del inputs, fla_o
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    result = dict(meta, rows=rows)
    narrowed = args.quick or args.layouts or args.configs or args.out_dtype != "bfloat16" or args.settle > 0
    name = args.name or ("h200_subset" if narrowed else "h200")
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    cmd = ("SGDN_CUDA_LIB=build-cuda/dist/libsgdn_cuda_capi.so FLA_FLASH_QLA=0 "
           "python3 experiments/perf/bench.py" + (" --quick" if args.quick else "")
           + (f" --layouts {args.layouts}" if args.layouts else "") + (f" --configs {args.configs}" if args.configs else "")
           + (f" --out-dtype {args.out_dtype}" if args.out_dtype != "bfloat16" else "")
           + (f" --settle {args.settle:g}" if args.settle > 0 else "")
           + (f" --name {args.name}" if args.name else ""))
    lines = [f"# SparseGDN vs FLA on {meta['device']}", "",
             f"{meta['date']}; " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
             f"Method: {meta['method']}. H = {H}, HV = {HV}, K = V = {K}, "
             + ("bf16 in/out" if args.out_dtype == "bfloat16" else "bf16 in, our output float32 (FLA's bf16)")
             + ", chunk 64. "
             "sparse-default: block_adjacent band 1, update_norm, head_budget rho 0.29 (pair), G = 1. "
             "Intermediates (MiB): our snapshots written (bf16) against FLA's h tensor, and their ratio; then our "
             "U/W (bf16), the whole workspace our C ABI asks for (worst case), and FLA's measured working memory "
             "(allocation growth during one call, less o and the final state). "
             "rel err: our output against FLA's (for sparse rows this is the approximation error of sparsity).", "",
             "| T | layout | config | ours ms | FLA ms | speedup | snapshots | FLA h | ratio | U/W | workspace | "
             "FLA working | kept | rel err vs FLA |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    mib = lambda b: f"{b / 2**20:.0f}"
    for r in rows:
        lines.append(f"| {r['T']} | {r['layout']} | {r['config']} | {r['ours_ms']:.3f} | {r['fla_ms']:.3f} | "
                     f"{r['speedup']:.2f} | {mib(r['ours_bytes'])} | {mib(r['fla_bytes'])} | "
                     f"{r['ours_bytes'] / r['fla_bytes']:.2f} | {mib(r['ours_uw_bytes'])} | "
                     f"{mib(r['ours_workspace_bytes'])} | {mib(r['fla_work_bytes'])} | "
                     f"{r['kept_fraction']:.2f} | {r['rel_err_vs_fla']:.2e} |")
    lines += ["", "Command (device machine, repo root, build-cuda/dist and .whl carried):", "", "    " + cmd, ""]
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
