"""SparseGDN's CUDA backend from PyTorch, through the C ABI of kernels/sgdn_cuda.h (ctypes, no build step).

    import sgdn_cuda
    o, final_state, events = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, cu_seqlens=..., selector="head_budget")

Tensors follow FLA's layout: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; with cu_seqlens, B = 1
and the sequences are packed along T. q, k, v and beta share one dtype (float32 or bfloat16), g is float32
(cast here if not). The library is found through $SGDN_CUDA_LIB, else next to the repository's build-cuda/.
Bad input raises SgdnCudaError with the library's status and message; nothing is sent to the GPU then.
"""
from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path

import torch

__all__ = ["SgdnCudaError", "chunk_sparse_gdn", "load_library", "make_config"]

ABI_VERSION = 3  # kernels/sgdn_cuda.h SGDN_CUDA_ABI_VERSION: the Config layout below
FLOAT32, BFLOAT16 = 0, 1
SCORES = {"none": 0, "update_norm": 1, "survival": 2}
SELECTORS = {"dense": 0, "random": 1, "stride": 2, "topk": 3, "head_budget": 4, "threshold": 5}
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


def load_library(path: str | None = None):
    """Loads libsgdn_cuda_capi.so once (path, $SGDN_CUDA_LIB, or ../../build-cuda/kernels/ from here)."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    candidates = [path, os.environ.get("SGDN_CUDA_LIB"),
                  str(Path(__file__).resolve().parents[2] / "build-cuda" / "kernels" / "libsgdn_cuda_capi.so")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            lib = ctypes.CDLL(candidate)
            break
    else:
        raise FileNotFoundError(f"libsgdn_cuda_capi.so not found (tried {[c for c in candidates if c]}); "
                                "set SGDN_CUDA_LIB")
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


def _check_strategy_names(solver, selector, score, granularity):
    _require(solver in ("exact", "block_adjacent"), f"solver '{solver}' has no GPU implementation; "
             "available: exact, block_adjacent")
    _require(selector in SELECTORS, f"selector '{selector}' is not known; allowed: {', '.join(SELECTORS)}")
    _require(score in SCORES, f"score '{score}' is not known; allowed: {', '.join(SCORES)}")
    _require(granularity in ("pair", "head"), f"granularity '{granularity}'; allowed: pair, head")


def make_config(lib, *, num_seqs, total_tokens, qk_heads, v_heads, key_dim, value_dim, chunk=64, group=1,
                solver="exact", block=16, band=1, selector="dense", rho=0.29, score="survival", granularity="pair",
                seed=0, tau=1.0, min_per_head=0, max_fraction=1.0, skip_own_group=False, scale=None,
                input_dtype=torch.bfloat16, output_dtype=torch.bfloat16, tensor_cores=True):
    """The C ABI's sgdn_cuda_config for these settings (names as in chunk_sparse_gdn). Unknown strategy names
    raise SgdnCudaError here; the numbers are checked by the library when the config is used. For callers that
    preallocate and call sgdn_cuda_forward themselves."""
    _check_strategy_names(solver, selector, score, granularity)
    config = Config()
    lib.sgdn_cuda_default_config(ctypes.byref(config))
    config.num_seqs, config.total_tokens = int(num_seqs), int(total_tokens)
    config.qk_heads, config.v_heads, config.key_dim, config.value_dim = qk_heads, v_heads, key_dim, value_dim
    config.chunk, config.group = chunk, group
    config.solver_block = block if solver == "block_adjacent" else chunk
    config.solver_band = band if solver == "block_adjacent" else -1
    config.score = SCORES[score]
    config.survival_skip_own_group = int(bool(skip_own_group))
    config.selector = SELECTORS[selector]
    config.head_granularity = 0 if granularity == "pair" else 1
    config.rho, config.tau, config.seed, config.min_per_head = float(rho), float(tau), int(seed), int(min_per_head)
    config.max_fraction = float(max_fraction)
    config.scale = float(scale) if scale is not None else 0.0
    config.input_dtype = BFLOAT16 if input_dtype == torch.bfloat16 else FLOAT32
    config.output_dtype = BFLOAT16 if output_dtype == torch.bfloat16 else FLOAT32
    config.tensor_cores = int(bool(tensor_cores))
    return config


def chunk_sparse_gdn(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=True,
                     cu_seqlens=None, chunk=64, group=1, solver="exact", block=16, band=1,
                     selector="dense", rho=0.29, score="survival", granularity="pair", seed=0, tau=1.0,
                     min_per_head=0, max_fraction=1.0, skip_own_group=False, output_dtype=None,
                     workspace=None, tensor_cores=True):
    """Sparse GDN prefill on the GPU (SPEC §3–§7). Returns (o, final_state or None, events) where events is a
    dict with `mask` and `score` (flat, per sequence [HV, N_s] blocks), `budget` [num_seqs, units] and
    `chunk_offsets` (the per-sequence chunk offsets that index them)."""
    lib = load_library()
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    for name, t in tensors.items():
        _require(isinstance(t, torch.Tensor), f"{name} is not a torch.Tensor")
        _require(t.is_cuda, f"{name} is not on a CUDA device")
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
    _require(q.dtype in (torch.float32, torch.bfloat16), f"q has dtype {q.dtype}; allowed: float32, bfloat16")
    for name in ("k", "v", "beta"):
        _require(tensors[name].dtype == q.dtype, f"{name} has dtype {tensors[name].dtype}, q has {q.dtype}")
    _require(g.dtype == torch.float32, f"g has dtype {g.dtype}; it must be float32")
    device = q.device
    for name, t in tensors.items():
        _require(t.device == device, f"{name} is on {t.device}, q on {device}")

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
    n_chunks = [math.ceil(n / chunk) for n in lengths] if chunk > 0 else [0] * num_seqs
    chunk_offsets = [0]
    for n in n_chunks:
        chunk_offsets.append(chunk_offsets[-1] + n)

    out_dtype = output_dtype or q.dtype
    _require(out_dtype in (torch.float32, torch.bfloat16), f"output_dtype {out_dtype}; allowed: float32, bfloat16")
    config = make_config(lib, num_seqs=num_seqs, total_tokens=B * T, qk_heads=H, v_heads=HV, key_dim=K, value_dim=V,
                         chunk=chunk, group=group, solver=solver, block=block, band=band, selector=selector, rho=rho,
                         score=score, granularity=granularity, seed=seed, tau=tau, min_per_head=min_per_head,
                         max_fraction=max_fraction, skip_own_group=skip_own_group, scale=scale,
                         input_dtype=q.dtype, output_dtype=out_dtype, tensor_cores=tensor_cores)

    size = ctypes.c_size_t(0)
    _check(lib, lib.sgdn_cuda_workspace_size(ctypes.byref(config), ctypes.byref(size)))
    if initial_state is not None:
        _require(initial_state.is_cuda and initial_state.is_contiguous() and initial_state.dtype == torch.float32
                 and tuple(initial_state.shape) == (num_seqs, HV, K, V),
                 f"initial_state must be a contiguous float32 CUDA tensor [{num_seqs}, {HV}, {K}, {V}]")
    units = H if granularity == "pair" else HV
    o = torch.empty((B, T, HV, V), dtype=out_dtype, device=device)
    final_state = torch.empty((num_seqs, HV, K, V), dtype=torch.float32, device=device) if output_final_state else None
    events = chunk_offsets[-1] * HV
    mask = torch.empty(max(events, 1), dtype=torch.uint8, device=device)
    scores = torch.empty(max(events, 1), dtype=torch.float32, device=device)
    budget = torch.empty((num_seqs, units), dtype=torch.int32, device=device)
    if workspace is None or workspace.numel() < size.value:
        workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device=device)
    t = Tensors(q=_ptr(q), k=_ptr(k), v=_ptr(v), g=_ptr(g), beta=_ptr(beta), cu_seqlens=_ptr(cu),
                initial_state=_ptr(initial_state), o=_ptr(o), final_state=_ptr(final_state),
                event_mask=_ptr(mask), event_score=_ptr(scores), budget=_ptr(budget))
    stream = torch.cuda.current_stream(device).cuda_stream
    with torch.cuda.device(device):
        _check(lib, lib.sgdn_cuda_forward(ctypes.byref(config), ctypes.byref(t), ctypes.c_void_p(workspace.data_ptr()),
                                          ctypes.c_size_t(workspace.numel()), ctypes.c_void_p(stream)))
    return o, final_state, {"mask": mask[:events], "score": scores[:events], "budget": budget,
                            "chunk_offsets": chunk_offsets}
