"""SparseGDN's CUDA backend through the C ABI of kernels/sgdn_cuda.h (ctypes): the library, its configuration
and the low-level call chunk_sparse_gdn (kept for kernels/python/sgdn_cuda.py, which re-exports this module).

    o, final_state, events = chunk_sparse_gdn(q, k, v, g, beta, cu_seqlens=...)

Tensors follow FLA's layout: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; with cu_seqlens, B = 1
and the sequences are packed along T. q, k, v and beta share one dtype (float32 or bfloat16), g is float32.
Every strategy keyword left at None takes the library's default (sgdn_cuda_default_config: the project's
default configuration, the same as the sgdn program's), and the strategy names are the library's own
(sgdn_cuda_strategy_name). The library is found as library_candidates() says. Bad input raises
SgdnCudaError with the library's status and message; nothing is sent to the GPU then. The FLA-compatible
entry point without host synchronisation is sgdn.chunk_gated_delta_rule.
"""
from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path

import torch

__all__ = ["SgdnCudaError", "check_inputs", "chunk_sparse_gdn", "default_config", "launch", "library_candidates",
           "load_library", "make_config", "strategy_names"]

ABI_VERSION = 4  # kernels/sgdn_cuda.h SGDN_CUDA_ABI_VERSION: the Config layout and functions below
FLOAT32, BFLOAT16 = 0, 1
SOLVERS, SCORES, SELECTORS, GRANULARITIES = 0, 1, 2, 3  # sgdn_cuda_strategy_family
STATUS = {0: "ok", 1: "invalid argument", 2: "unsupported", 3: "workspace too small", 4: "CUDA error"}


class SgdnCudaError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"sgdn_cuda: {STATUS.get(status, status)}: {message}")
        self.status = status
        self.message = message


class Config(ctypes.Structure):
    _fields_ = [
        ("num_seqs", ctypes.c_int64),
        ("total_tokens", ctypes.c_int64),
        ("qk_heads", ctypes.c_int32),
        ("v_heads", ctypes.c_int32),
        ("key_dim", ctypes.c_int32),
        ("value_dim", ctypes.c_int32),
        ("chunk", ctypes.c_int32),
        ("group", ctypes.c_int32),
        ("solver_block", ctypes.c_int32),
        ("solver_band", ctypes.c_int32),
        ("score", ctypes.c_int32),
        ("survival_skip_own_group", ctypes.c_int32),
        ("selector", ctypes.c_int32),
        ("head_granularity", ctypes.c_int32),
        ("rho", ctypes.c_double),
        ("tau", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("min_per_head", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("input_dtype", ctypes.c_int32),
        ("output_dtype", ctypes.c_int32),
        ("tensor_cores", ctypes.c_int32),
        ("max_fraction", ctypes.c_double),
    ]


class Tensors(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in (
        "q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "o", "final_state",
        "event_mask", "event_score", "budget")]


_lib = None


def library_candidates(path: str | None = None) -> list[str]:
    """Where load_library looks, in order: `path`, $SGDN_CUDA_LIB, the package folder (where `pip install`
    puts the library), then, in a source checkout, the repository's build/kernels/ (CMake preset `default`)
    and build-cuda/kernels/."""
    here = Path(__file__).resolve().parent
    root = here.parents[1]
    builds = [str(folder / "libsgdn_cuda_capi.so")
              for folder in (here, root / "build" / "kernels", root / "build-cuda" / "kernels")]
    return [c for c in [path, os.environ.get("SGDN_CUDA_LIB")] + builds if c]


def load_library(path: str | None = None):
    """Loads libsgdn_cuda_capi.so once, from the first of library_candidates(path) that exists."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    candidates = library_candidates(path)
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            lib = ctypes.CDLL(candidate)
            break
    else:
        raise FileNotFoundError(f"libsgdn_cuda_capi.so not found (tried {candidates}); set SGDN_CUDA_LIB")
    lib.sgdn_cuda_default_config.argtypes = [ctypes.POINTER(Config)]
    lib.sgdn_cuda_default_config.restype = None
    lib.sgdn_cuda_workspace_size.argtypes = [ctypes.POINTER(Config), ctypes.POINTER(ctypes.c_size_t)]
    lib.sgdn_cuda_workspace_size.restype = ctypes.c_int
    lib.sgdn_cuda_forward.argtypes = [ctypes.POINTER(Config), ctypes.POINTER(Tensors), ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_void_p]
    lib.sgdn_cuda_forward.restype = ctypes.c_int
    lib.sgdn_cuda_last_error.argtypes = []
    lib.sgdn_cuda_last_error.restype = ctypes.c_char_p
    lib.sgdn_cuda_abi_version.restype = ctypes.c_int
    if lib.sgdn_cuda_abi_version() != ABI_VERSION:
        raise RuntimeError(f"{lib._name} has ABI version {lib.sgdn_cuda_abi_version()}; this module speaks "
                           f"version {ABI_VERSION} (rebuild the library or update sgdn_cuda.py)")
    lib.sgdn_cuda_strategy_count.argtypes = [ctypes.c_int32]
    lib.sgdn_cuda_strategy_count.restype = ctypes.c_int32
    lib.sgdn_cuda_strategy_name.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.sgdn_cuda_strategy_name.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _check(lib, status: int):
    if status != 0:
        raise SgdnCudaError(status, lib.sgdn_cuda_last_error().decode())


def _require(condition: bool, message: str):
    if not condition:
        raise SgdnCudaError(1, message)


def _ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def strategy_names(lib, family: int) -> list[str]:
    """The library's strategy names of a family (SOLVERS, SCORES, SELECTORS, GRANULARITIES); a name's position
    is its code in sgdn_cuda_config."""
    return [lib.sgdn_cuda_strategy_name(family, code).decode() for code in range(lib.sgdn_cuda_strategy_count(family))]


def _code(lib, family: int, kind: str, name: str) -> int:
    names = strategy_names(lib, family)
    _require(name in names, f"{kind} '{name}' has no GPU implementation; available: {', '.join(names)}")
    return names.index(name)


def default_config(lib) -> Config:
    """The library's default sgdn_cuda_config: the project's default configuration, sizes left 0."""
    config = Config()
    lib.sgdn_cuda_default_config(ctypes.byref(config))
    return config


def make_config(lib, *, num_seqs, total_tokens, qk_heads, v_heads, key_dim, value_dim, chunk=None, group=None,
                solver=None, block=None, band=None, selector=None, rho=None, score=None, granularity=None,
                seed=None, tau=None, min_per_head=None, max_fraction=None, skip_own_group=None, scale=None,
                input_dtype=torch.bfloat16, output_dtype=torch.bfloat16, tensor_cores=None):
    """The C ABI's sgdn_cuda_config for these settings (names as in chunk_sparse_gdn); a setting left None keeps
    the library's default. Unknown strategy names raise SgdnCudaError here; the numbers are checked by the
    library when the config is used. For callers that preallocate and call sgdn_cuda_forward themselves."""
    config = default_config(lib)
    config.num_seqs, config.total_tokens = int(num_seqs), int(total_tokens)
    config.qk_heads, config.v_heads, config.key_dim, config.value_dim = qk_heads, v_heads, key_dim, value_dim
    if chunk is not None:
        config.chunk = int(chunk)
    if group is not None:
        config.group = int(group)
    # The C ABI's solvers: `exact` is a band < 0 (one block of the whole chunk), `block_adjacent` a band >= 0.
    if solver is None:
        solver = "exact" if config.solver_band < 0 else "block_adjacent"
    _code(lib, SOLVERS, "solver", solver)
    if solver == "exact":
        config.solver_block, config.solver_band = config.chunk, -1
    else:
        if block is not None:
            config.solver_block = int(block)
        if band is not None:
            config.solver_band = int(band)
        _require(config.solver_band >= 0, f"solver {solver} needs band >= 0, got {config.solver_band}")
    if score is not None:
        config.score = _code(lib, SCORES, "score", score)
    if selector is not None:
        config.selector = _code(lib, SELECTORS, "selector", selector)
    if granularity is not None:
        config.head_granularity = _code(lib, GRANULARITIES, "granularity", granularity)
    if skip_own_group is not None:
        config.survival_skip_own_group = int(bool(skip_own_group))
    if rho is not None:
        config.rho = float(rho)
    if tau is not None:
        config.tau = float(tau)
    if seed is not None:
        config.seed = int(seed)
    if min_per_head is not None:
        config.min_per_head = int(min_per_head)
    if max_fraction is not None:
        config.max_fraction = float(max_fraction)
    if tensor_cores is not None:
        config.tensor_cores = int(bool(tensor_cores))
    config.scale = float(scale) if scale is not None else 0.0
    config.input_dtype = BFLOAT16 if input_dtype == torch.bfloat16 else FLOAT32
    config.output_dtype = BFLOAT16 if output_dtype == torch.bfloat16 else FLOAT32
    return config


INPUT_DTYPES = (torch.float32, torch.bfloat16)  # of q, k, v, beta and o (sgdn_cuda_dtype)


def check_inputs(q, k, v, g, beta, initial_state=None, num_seqs=None):
    """The checks of the inputs before a call (placement, layout, shapes, dtypes); returns (B, T, H, K, HV, V).
    Shapes only, no values: nothing here reads device memory."""
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    for name, t in tensors.items():
        _require(isinstance(t, torch.Tensor), f"{name} is not a torch.Tensor")
        _require(t.device.type == "cuda", f"{name} is not on a CUDA device")
        _require(t.is_contiguous(), f"{name} is not contiguous (call .contiguous())")
    _require(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, "q, k, v must be [B, T, heads, dim]")
    _require(g.dim() == 3 and beta.dim() == 3, "g and beta must be [B, T, HV]")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    _require(tuple(k.shape) == (B, T, H, K), f"k has shape {tuple(k.shape)}, expected {(B, T, H, K)}")
    _require(tuple(v.shape[:2]) == (B, T), f"v has shape {tuple(v.shape)}, expected [{B}, {T}, HV, V]")
    _require(tuple(g.shape) == (B, T, HV) and tuple(beta.shape) == (B, T, HV),
             f"g and beta must be [{B}, {T}, {HV}], got {tuple(g.shape)} and {tuple(beta.shape)}")
    _require(HV % H == 0, f"HV = {HV} is not a multiple of H = {H}")
    _require(q.dtype in INPUT_DTYPES, f"q has dtype {q.dtype}; allowed: float32, bfloat16")
    for name in ("k", "v", "beta"):
        _require(tensors[name].dtype == q.dtype, f"{name} has dtype {tensors[name].dtype}, q has {q.dtype}")
    _require(g.dtype == torch.float32, f"g has dtype {g.dtype}; it must be float32")
    device = q.device
    for name, t in tensors.items():
        _require(t.device == device, f"{name} is on {t.device}, q on {device}")
    if initial_state is not None:
        _require(isinstance(initial_state, torch.Tensor) and initial_state.device == device
                 and initial_state.is_contiguous() and initial_state.dtype == torch.float32
                 and tuple(initial_state.shape) == (num_seqs, HV, K, V),
                 f"initial_state must be a contiguous float32 CUDA tensor [{num_seqs}, {HV}, {K}, {V}]")
    return B, T, H, K, HV, V


def launch(lib, config, q, k, v, g, beta, cu_seqlens, initial_state, o, final_state=None, mask=None, score=None,
           budget=None, workspace=None):
    """sgdn_cuda_forward on the current stream of q's device, into preallocated outputs (None: not written).
    The workspace is `workspace` when it is large enough, else allocated here. Asynchronous: no host sync."""
    size = ctypes.c_size_t(0)
    _check(lib, lib.sgdn_cuda_workspace_size(ctypes.byref(config), ctypes.byref(size)))
    device = q.device
    if workspace is None or workspace.numel() < size.value:
        workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device=device)
    t = Tensors(q=_ptr(q), k=_ptr(k), v=_ptr(v), g=_ptr(g), beta=_ptr(beta), cu_seqlens=_ptr(cu_seqlens),
                initial_state=_ptr(initial_state), o=_ptr(o), final_state=_ptr(final_state),
                event_mask=_ptr(mask), event_score=_ptr(score), budget=_ptr(budget))
    stream = torch.cuda.current_stream(device).cuda_stream
    with torch.cuda.device(device):
        _check(lib, lib.sgdn_cuda_forward(ctypes.byref(config), ctypes.byref(t), ctypes.c_void_p(workspace.data_ptr()),
                                          ctypes.c_size_t(workspace.numel()), ctypes.c_void_p(stream)))


def chunk_sparse_gdn(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=True,
                     cu_seqlens=None, chunk=None, group=None, solver=None, block=None, band=None,
                     selector=None, rho=None, score=None, granularity=None, seed=None, tau=None,
                     min_per_head=None, max_fraction=None, skip_own_group=None, output_dtype=None,
                     workspace=None, tensor_cores=None):
    """Sparse GDN prefill on the GPU (SPEC §3–§7). Returns (o, final_state or None, events) where events is a
    dict with `mask` and `score` (flat, per sequence [HV, N_s] blocks), `budget` [num_seqs, units] and
    `chunk_offsets` (the per-sequence chunk offsets that index them). Settings left None take the library's
    defaults (sgdn_cuda_default_config in kernels/sgdn_cuda.h: the project's default configuration).
    cu_seqlens is checked and read on the host (a sync); sgdn.chunk_gated_delta_rule does without."""
    lib = load_library()
    if g.is_floating_point():
        g = g.float()  # the library reads g as float32; any float dtype is accepted and cast here
    B, T, H, K, HV, V = check_inputs(q, k, v, g, beta)
    device = q.device
    if cu_seqlens is None:
        num_seqs = B
        lengths = [T] * B
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=device)
    else:
        _require(B == 1, "with cu_seqlens the batch dimension must be 1 (sequences packed along T)")
        cu_host = cu_seqlens.detach().to("cpu", torch.int64)
        _require(cu_host.dim() == 1 and cu_host.numel() >= 2, "cu_seqlens must be [num_seqs + 1]")
        _require(int(cu_host[0]) == 0 and int(cu_host[-1]) == T and bool((cu_host[1:] >= cu_host[:-1]).all()),
                 f"cu_seqlens must rise from 0 to T = {T}")
        num_seqs = cu_host.numel() - 1
        lengths = (cu_host[1:] - cu_host[:-1]).tolist()
        cu = cu_host.to(device=device, dtype=torch.int32).contiguous()
    check_inputs(q, k, v, g, beta, initial_state, num_seqs)

    out_dtype = output_dtype or q.dtype
    _require(out_dtype in INPUT_DTYPES, f"output_dtype {out_dtype}; allowed: float32, bfloat16")
    config = make_config(lib, num_seqs=num_seqs, total_tokens=B * T, qk_heads=H, v_heads=HV, key_dim=K, value_dim=V,
                         chunk=chunk, group=group, solver=solver, block=block, band=band, selector=selector, rho=rho,
                         score=score, granularity=granularity, seed=seed, tau=tau, min_per_head=min_per_head,
                         max_fraction=max_fraction, skip_own_group=skip_own_group, scale=scale,
                         input_dtype=q.dtype, output_dtype=out_dtype, tensor_cores=tensor_cores)
    n_chunks = [math.ceil(n / config.chunk) for n in lengths] if config.chunk > 0 else [0] * num_seqs
    chunk_offsets = [0]
    for n in n_chunks:
        chunk_offsets.append(chunk_offsets[-1] + n)

    units = HV if config.head_granularity else H
    o = torch.empty((B, T, HV, V), dtype=out_dtype, device=device)
    final_state = torch.empty((num_seqs, HV, K, V), dtype=torch.float32, device=device) if output_final_state else None
    events = chunk_offsets[-1] * HV
    mask = torch.empty(max(events, 1), dtype=torch.uint8, device=device)
    scores = torch.empty(max(events, 1), dtype=torch.float32, device=device)
    budget = torch.empty((num_seqs, units), dtype=torch.int32, device=device)
    launch(lib, config, q, k, v, g, beta, cu, initial_state, o, final_state, mask, scores, budget, workspace)
    return o, final_state, {"mask": mask[:events], "score": scores[:events], "budget": budget,
                            "chunk_offsets": chunk_offsets}
