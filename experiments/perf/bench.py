"""SparseGDN's CUDA backend beside FLA and FlashQLA on one GPU, in one process, on the same bf16 inputs.

Qwen3.5 head shape (H = 16, HV = 32, K = V = 128), chunk 64. Layouts (benchlib.LAYOUTS): one sequence of 2K to
128K tokens, packed batches 4 x 8K, 2 x 16K, 8 x 4K and 32 x 1K, and a ragged batch of five sequences
(cu_seqlens). Configurations: dense (exact solver, every event), sparse-default (the project's default) and
sparse-cap0.4 (its budget capped at 40 % of a unit's chunks); more with --configs.

Every side is timed the same way: one CUDA graph per side holding one call per input set (2 rotating input
sets when T <= 8K, so that the inputs are not served from L2), 3 warm-up replays, then the median of 20 timed
replays (CUDA events) divided by the calls in the graph. Timed: our whole C ABI forward (chunk table,
pre-pass, scores, selection, recurrence, outputs, final state); FLA's chunk_gated_delta_rule with
FLA_FLASH_QLA=0 (its own Triton kernels, not FlashQLA's); FlashQLA's chunk_gated_delta_rule with its
context parallelism (auto_cp, its default) and without it. All with output_final_state=True. FlashQLA
compiles its kernels on first use (about a minute, then 10-25 s for each new layout): each layout's calls
run once before the graph is captured, and that warm-up is not timed.

Several builds of our library run side by side with --lib NAME=PATH (repeatable), on the same inputs and
against the same FLA and FlashQLA times. Without --lib: the library sgdn_cuda.load_library() finds
($SGDN_CUDA_LIB, else the build folder). FLA and FlashQLA are optional: where one is not installed its
columns stay empty and a warning says so.

Results: results/<gpu>.json and .md (<gpu> from the card's name: h100, h200, ...), or <gpu>_subset where
--quick, --layouts, --configs or --out-dtype narrow or change the table.

    python3 experiments/perf/bench.py [--lib old=/path/libsgdn_cuda_capi.so --lib new=...] [--quick]
        [--layouts 1x32K,4x8K] [--configs sparse-default,sparse-G2] [--out DIR] [--name BASE]
        [--out-dtype float32] [--no-fla] [--no-qla]
"""
import argparse
import ctypes
import datetime
import importlib.metadata
import importlib.util
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings

# FLA 0.6 hands its forward to FlashQLA whenever flash_qla is installed, unless this is 0. The benchmark
# times FLA's own kernels, and FlashQLA on its own.
os.environ["FLA_FLASH_QLA"] = "0"
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "kernels", "python"))
import benchlib  # noqa: E402
import sgdn_cuda  # noqa: E402
from benchlib import C, CONFIGS, EXTRA_CONFIGS, HV, K, LAYOUTS, H, V  # noqa: E402,F401

REPEATS = 20
WARMUP = 3


def make_inputs(T, seed):
    """docs/math.md §9 `random`: unit-norm q, k; v ~ N(0,1); beta = sigmoid(1.5 n); g = -A_h softplus(x + b_h) with
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
        q = inputs[0]
        T = q.shape[1]
        self.lib = lib
        self.mod = lib.sgdn_module
        c = self.mod.make_config(lib, num_seqs=len(lengths), total_tokens=T, qk_heads=H, v_heads=HV, key_dim=K,
                                  value_dim=V, chunk=C, output_dtype=out_dtype, **cfg)
        self.config = c
        size = ctypes.c_size_t(0)
        self.mod._check(lib, lib.sgdn_cuda_workspace_size(ctypes.byref(c), ctypes.byref(size)))
        self.workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")
        self.cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")
        self.n_chunks = sum(math.ceil(n / C) for n in lengths)
        self.o = torch.empty((1, T, HV, V), dtype=out_dtype, device="cuda")
        self.final = torch.empty((len(lengths), HV, K, V), dtype=torch.float32, device="cuda")
        self.mask = torch.empty(self.n_chunks * HV, dtype=torch.uint8, device="cuda")
        self.score = torch.empty(self.n_chunks * HV, dtype=torch.float32, device="cuda")
        units = H if cfg.get("granularity", "pair") == "pair" else HV
        self.budget = torch.empty((len(lengths), units), dtype=torch.int32, device="cuda")
        self.tensors = []
        self.set_inputs(inputs)

    def set_inputs(self, inputs):
        q, k, v, g, beta = inputs
        p = lambda t: ctypes.c_void_p(t.data_ptr())
        self.tensors.append(self.mod.Tensors(
            q=p(q), k=p(k), v=p(v), g=p(g), beta=p(beta), cu_seqlens=p(self.cu), initial_state=None, o=p(self.o),
            final_state=p(self.final), event_mask=p(self.mask), event_score=p(self.score), budget=p(self.budget)))

    def __call__(self, which=0):
        stream = torch.cuda.current_stream().cuda_stream
        self.mod._check(self.lib, self.lib.sgdn_cuda_forward(
            ctypes.byref(self.config), ctypes.byref(self.tensors[which]), ctypes.c_void_p(self.workspace.data_ptr()),
            ctypes.c_size_t(self.workspace.numel()), ctypes.c_void_p(stream)))

    def intermediate_bytes(self):
        """(snapshots written, U/W, workspace asked for) in bytes, and the fraction of events kept."""
        kept = int(self.mask.sum().item())
        uw = self.n_chunks * HV * C * (K + V) * 2  # bf16 U and W
        snapshots = (kept + len(self.final) * HV) * K * V * 2  # bf16 snapshots (tensor-core path)
        return (snapshots, uw, self.workspace.numel()), kept / max(1, self.mask.numel())


def load_with_module(path, module_dir, name):
    """The library at `path` (None: the one this checkout's module finds), driven by the sgdn_cuda module of
    `module_dir` (None: this checkout's), which is kept on the library object as `sgdn_module`."""
    mod = sgdn_cuda
    if module_dir is not None:
        spec = importlib.util.spec_from_file_location(f"sgdn_cuda_{name}", os.path.join(module_dir, "sgdn_cuda.py"))
        if spec is None or not os.path.isfile(spec.origin):
            sys.exit(f"--module {name}={module_dir}: no sgdn_cuda.py there")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    lib = mod.load_library(path)
    lib.sgdn_module = mod
    return lib


def layout_inputs(T, lengths):
    """A layout's input sets (two, rotated in the timed graph, for T <= 8K; else one) and the int64
    cu_seqlens that FLA and FlashQLA take (None for one sequence)."""
    inputs = [make_inputs(T, 1000 * T + i) for i in range(2 if T <= 8192 else 1)]
    cu = (torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64, device="cuda")
          if len(lengths) > 1 else None)
    return inputs, cu


def named(layouts, configs):
    """The layouts and configurations that comma-separated names choose, as {name: (T, name, lengths)} and
    {name: settings}; exits naming the first unknown one."""
    try:
        return ({l[1]: l for l in benchlib.choose_layouts(layouts)}, benchlib.choose_configs(configs))
    except benchlib.UsageError as exc:
        sys.exit(str(exc))


def fla_forward(fla_fn, inputs, cu_seqlens, **kwargs):
    """FLA's (or FlashQLA's: the same signature) forward on one input set (q, k, v, g, beta)."""
    return fla_fn(*inputs, scale=K ** -0.5, output_final_state=True, cu_seqlens=cu_seqlens, **kwargs)


def ours_calls(lib, inputs, lengths, cfg, out_dtype=torch.bfloat16):
    """Our forward prepared on every input set, and one call per set (what time_graph takes)."""
    ours = Ours(lib, inputs[0], lengths, cfg, out_dtype)
    for extra in inputs[1:]:
        ours.set_inputs(extra)
    return ours, [lambda i=i: ours(i) for i in range(len(inputs))]


def time_graph(calls, warmup=WARMUP, repeats=REPEATS, plain=False):
    """Captures one graph holding every call in `calls` (one per input set); median ms per call, the spread,
    and whether the graph was captured. Every call runs once before the capture (compilation, caches, lazily
    built state). plain: times the calls as plain launches instead (also where capture fails, said on
    stderr)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in calls:
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
        except Exception as exc:
            print(f"graph capture failed ({exc}); timing plain launches with events", file=sys.stderr, flush=True)
            graph = None
            torch.cuda.synchronize()
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
    captured = graph is not None
    del graph
    return statistics.median(times) / len(calls), (max(times) - min(times)) / len(calls), captured


def working_bytes(call):
    """Allocation growth during one call, less what it returns (o and the final state): the memory a
    forward needs while it runs."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outputs = call()
    torch.cuda.synchronize()
    kept = sum(t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor))
    return torch.cuda.max_memory_allocated() - before - kept, outputs


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def version_of(dist, module):
    """An installed package's version (its distribution metadata, else the module's attribute)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return getattr(module, "__version__", "unknown")


def optional_imports(use_fla, use_qla):
    """FLA's and FlashQLA's forward functions, or None (with a warning) where not installed or not asked for."""
    fla_fn = qla_fn = None
    versions = {}
    if use_fla:
        try:
            import fla
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_fn
            versions["fla"] = version_of("fla-core", fla)
        except Exception as exc:  # not installed, or fails to import here
            warnings.warn(f"FLA is not importable ({exc}); its columns stay empty")
    if use_qla:
        try:
            import flash_qla
            qla_fn = flash_qla.chunk_gated_delta_rule
            versions["flash_qla"] = version_of("flash-qla", flash_qla)
            try:
                import tilelang
                versions["tilelang"] = version_of("tilelang", tilelang)
            except ImportError:
                pass
        except Exception as exc:  # not installed, or not for this GPU (it supports sm90, sm100, sm120)
            warnings.warn(f"FlashQLA is not importable ({exc}); its columns stay empty")
    return fla_fn, qla_fn, versions


def checkout_revision():
    """`git describe --always --dirty` of this checkout (what a library built from it was built from)."""
    try:
        out = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


class Reference:
    """FLA or FlashQLA on one layout: its time, working memory and output (for the error column)."""

    def __init__(self, label, fn, inputs, cu, **kwargs):
        self.ms = self.work = self.o = self.captured = None
        if fn is None:
            return
        calls = [lambda inp=inp: fla_forward(fn, inp, cu, **kwargs) for inp in inputs]
        try:
            start = time.time()
            calls[0]()  # compiles on first use (FlashQLA: JIT per layout); not timed
            torch.cuda.synchronize()
            print(f"  {label} warm-up {time.time() - start:.1f} s", file=sys.stderr, flush=True)
            self.ms, self.spread, self.captured = time_graph(calls)
            self.work, (o, _) = working_bytes(calls[0])
            self.o = o.clone()
        except Exception as exc:  # one failing reference leaves its columns empty, not the whole run
            warnings.warn(f"{label} failed ({exc}); its columns stay empty")
            self.ms = self.work = self.o = self.captured = None
            torch.cuda.synchronize()


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", action="append", metavar="NAME=PATH",
                    help="a build of libsgdn_cuda_capi.so to time (repeatable; default: the one sgdn_cuda finds)")
    ap.add_argument("--module", action="append", metavar="NAME=DIR",
                    help="for the library NAME, the sgdn_cuda.py in DIR that speaks its ABI (a build of another "
                         "checkout: its kernels/python); default: this checkout's module")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--quick", action="store_true", help="layouts " + ", ".join(benchlib.QUICK_LAYOUTS) + " only")
    ap.add_argument("--layouts", help="comma-separated layout names (default all: "
                    + ", ".join(l[1] for l in LAYOUTS) + ")")
    ap.add_argument("--configs", help="comma-separated configurations (default: " + ", ".join(CONFIGS)
                    + "; also " + ", ".join(EXTRA_CONFIGS) + ")")
    ap.add_argument("--out-dtype", choices=["bfloat16", "float32"], default="bfloat16",
                    help="our outputs' dtype (FLA's and FlashQLA's stay bf16)")
    ap.add_argument("--name", help="base name of the result files (default: the GPU model, e.g. h100)")
    ap.add_argument("--no-fla", action="store_true", help="do not time FLA")
    ap.add_argument("--no-qla", action="store_true", help="do not time FlashQLA")
    ap.add_argument("--no-qla-nocp", action="store_true",
                    help="time FlashQLA with its context parallelism only (each form compiles its own kernels)")
    args = ap.parse_args()
    try:
        libs_named = benchlib.parse_libs(args.lib)
        modules = benchlib.parse_modules(args.module, [name for name, _ in libs_named])
        layouts = benchlib.choose_layouts(args.layouts, args.quick)
        configs = benchlib.choose_configs(args.configs)
    except benchlib.UsageError as exc:
        sys.exit(str(exc))
    for name, path in libs_named:
        if not os.path.isfile(path):
            sys.exit(f"--lib {name}={path}: no such file")
    if libs_named:
        libs = [(name, load_with_module(path, modules.get(name), name)) for name, path in libs_named]
    else:
        libs = [("ours", load_with_module(None, None, "ours"))]
    fla_fn, qla_fn, versions = optional_imports(not args.no_fla, not args.no_qla)

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "?"
    model = benchlib.gpu_model(torch.cuda.get_device_name(0))
    meta = {
        "device": f"{props.name} ({props.multi_processor_count} SMs, {props.total_memory >> 20} MiB), driver {driver}",
        "gpu_model": model,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, **versions,
                     "FLA_FLASH_QLA": os.environ["FLA_FLASH_QLA"], "checkout": checkout_revision()},
        "libs": {name: os.path.abspath(lib._name) for name, lib in libs},
        "abi": {name: lib.sgdn_cuda_abi_version() for name, lib in libs},
        "method": f"CUDA-graph replay, median of {REPEATS} replays after {WARMUP} warm-up replays; 2 rotating "
                  "input sets for T <= 8K; every side warmed up (compiled) before its graph is captured",
        "shape": {"H": H, "HV": HV, "K": K, "V": V, "chunk": C, "dtype": "bfloat16", "ours_out_dtype": args.out_dtype},
        "configs": configs,
    }
    rows = []
    print(f"{'layout':>8} {'config':>15} {'lib':>8} {'ours ms':>8} {'FLA ms':>8} {'QLA ms':>8} {'QLA-noCP':>8} "
          f"{'vs FLA':>6} {'vs QLA':>6} {'kept':>5} {'rel vs FLA':>10}", flush=True)
    for T, lname, lengths in layouts:
        inputs, cu = layout_inputs(T, lengths)
        fla = Reference(f"{lname} FLA", fla_fn, inputs, cu)
        qla = Reference(f"{lname} FlashQLA", qla_fn, inputs, cu)
        qla_nocp = Reference(f"{lname} FlashQLA auto_cp=False", None if args.no_qla_nocp else qla_fn, inputs, cu,
                             auto_cp=False)
        qla_err = {name: float(f"{rel(ref.o, fla.o):.3e}") if ref.o is not None and fla.o is not None else None
                   for name, ref in (("qla", qla), ("qla_nocp", qla_nocp))}
        qla.o = qla_nocp.o = None  # only FLA's output stays, for the error column
        n_chunks = sum(math.ceil(n / C) for n in lengths)
        for cname, cfg in configs.items():
            for libname, lib in libs:
                ours, calls = ours_calls(lib, inputs, lengths, cfg, getattr(torch, args.out_dtype))
                ours_ms, ours_spread, ours_captured = time_graph(calls)
                ours(0)
                torch.cuda.synchronize()
                (snap_bytes, uw_bytes, ws_bytes), kept = ours.intermediate_bytes()
                err = rel(ours.o, fla.o) if fla.o is not None else None
                row = {"T": T, "layout": lname, "lengths": lengths, "config": cname, "lib": libname,
                       "ours_ms": round(ours_ms, 4), "ours_spread_ms": round(ours_spread, 4),
                       "fla_ms": fla.ms and round(fla.ms, 4), "qla_ms": qla.ms and round(qla.ms, 4),
                       "qla_nocp_ms": qla_nocp.ms and round(qla_nocp.ms, 4),
                       "speedup": benchlib.ratio(fla.ms, ours_ms), "speedup_vs_qla": benchlib.ratio(qla.ms, ours_ms),
                       "speedup_vs_qla_nocp": benchlib.ratio(qla_nocp.ms, ours_ms),
                       "ours_bytes": snap_bytes, "fla_bytes": n_chunks * HV * K * V * 2, "ours_uw_bytes": uw_bytes,
                       "ours_workspace_bytes": ws_bytes, "fla_work_bytes": fla.work, "qla_work_bytes": qla.work,
                       "qla_nocp_work_bytes": qla_nocp.work,
                       "rel_err_vs_fla": err if err is None else float(f"{err:.3e}"), "kept_fraction": round(kept, 4),
                       "qla_rel_err_vs_fla": qla_err["qla"], "qla_nocp_rel_err_vs_fla": qla_err["qla_nocp"],
                       "graph": {"ours": ours_captured, "fla": fla.captured, "qla": qla.captured,
                                 "qla_nocp": qla_nocp.captured}}
                rows.append(row)
                cell = lambda x, f: "-" if x is None else format(x, f)
                print(f"{lname:>8} {cname:>15} {libname:>8} {ours_ms:8.3f} {cell(fla.ms, '8.3f')} "
                      f"{cell(qla.ms, '8.3f')} {cell(qla_nocp.ms, '8.3f')} {cell(row['speedup'], '6.2f')} "
                      f"{cell(row['speedup_vs_qla'], '6.2f')} {kept:5.2f} {cell(err, '10.2e')}", flush=True)
                del ours, calls
                torch.cuda.empty_cache()
        del inputs, fla, qla, qla_nocp
        torch.cuda.empty_cache()

    narrowed = bool(args.quick or args.layouts or args.configs or args.out_dtype != "bfloat16")
    name = benchlib.result_name(model, narrowed, args.name)
    os.makedirs(args.out, exist_ok=True)
    command = ("python3 experiments/perf/bench.py " + " ".join(sys.argv[1:])).strip()
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(dict(meta, rows=rows, commands=[command]), f, indent=1)
    text = benchlib.markdown(meta, rows, [command])
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
