"""SparseGDN: sparse Gated DeltaNet prefill on the GPU, as a drop-in for FLA's chunk_gated_delta_rule.

    import sgdn
    o, final_state = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
    o, _ = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, selector="dense", solver="exact")
    with sgdn.config(rho=0.5):
        o, _, events = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, return_events=True)
    sgdn.patch_transformers(model, selector="dense")  # a transformers Qwen3-Next / Qwen3.5 model

The library libsgdn_cuda_capi.so is $SGDN_CUDA_LIB, else the one installed in this package, else a source
checkout's build/kernels/ or build-cuda/kernels/.
"""
from __future__ import annotations

import contextlib

import torch

from . import _capi, _ops
from ._capi import SgdnCudaError, chunk_sparse_gdn, load_library
from ._hf import patch_transformers
from ._ops import SETTINGS

__all__ = ["SETTINGS", "SgdnCudaError", "chunk_gated_delta_rule", "chunk_sparse_gdn", "config", "current_config",
           "load_library", "patch_transformers"]
__version__ = "0.1.0"

# The settings of the innermost `config` block (process-wide); replaced, never mutated, so that a compiled
# graph's guards on it see every change.
_active: dict = {}


@contextlib.contextmanager
def config(**settings):
    """Sparse settings for the calls inside the block (nested blocks add to the outer ones; keywords of a
    call take precedence). Names as in SETTINGS; None restores the library's default."""
    global _active
    settings_of_call(settings)
    outer = _active
    _active = {**outer, **settings}
    try:
        yield _active
    finally:
        _active = outer


def current_config() -> dict:
    """The settings that a call without keywords takes now (empty: the library's defaults)."""
    return dict(_active)


def settings_of_call(sparse: dict) -> dict:
    for key in sparse:
        if key not in SETTINGS:
            raise TypeError(f"chunk_gated_delta_rule() got an unexpected keyword argument '{key}' "
                            f"(sparse settings: {', '.join(SETTINGS)})")
    return {**_active, **sparse}


def _l2norm(x):
    # As FLA's l2norm in its kernels: in float32, x / sqrt(sum x^2 + 1e-6).
    x32 = x.float()
    return x32 * torch.rsqrt((x32 * x32).sum(dim=-1, keepdim=True) + 1e-6)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, *, return_events=False, **sparse):
    """FLA's chunk_gated_delta_rule (the forward): q, k [B, T, H, K]; v [B, T, HV, V]; g (log decay, any float
    dtype) and beta [B, T, HV]; with cu_seqlens [N + 1] (int32 or int64), B = 1 and N sequences are packed
    along T. Returns (o, final_state): o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] float32 or
    None unless output_final_state. With return_events=True a third value: a dict of `mask` (uint8) and
    `score` (float32) of the events, flat, the block of sequence s at [chunk_offsets[s] HV,
    chunk_offsets[s + 1] HV) laid out [HV, N_s] (rows past the last are 0), `budget` [N, units] int32, and
    `chunk_offsets` [N + 1] (a device tensor).

    Inputs: bfloat16 and float32 go to the library as they are; float16 is converted to float32 (exactly;
    the library's float32 path), and o is returned in float16. k, v and beta are converted to q's dtype, g
    and initial_state to float32. Sparse settings (SETTINGS: selector=, rho=, solver=, ...) as keywords or
    from a `config` block; unset ones take the library's default (the project's default configuration,
    sparse). No host synchronisation in the forward. Backward: for the dense configuration (selector="dense",
    solver="exact") the forward is recomputed in float32 torch and differentiated (a correct, slow reference
    that reads cu_seqlens on the host); other configurations raise NotImplementedError."""
    settings = settings_of_call(sparse)
    out_dtype = q.dtype
    if q.dtype == torch.bfloat16:
        work = torch.bfloat16
    elif q.dtype in (torch.float16, torch.float32):
        work = torch.float32
    else:
        raise SgdnCudaError(1, f"q has dtype {q.dtype}; allowed: bfloat16, float16, float32")
    lib_out = out_dtype if out_dtype in _capi.INPUT_DTYPES else torch.float32
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    q, k, v, beta = (x.to(work).contiguous() for x in (q, k, v, beta))
    g = g.to(torch.float32).contiguous()
    if initial_state is not None:
        initial_state = initial_state.to(torch.float32).contiguous()
    if cu_seqlens is not None:
        cu_seqlens = cu_seqlens.to(torch.int32).contiguous()
    o, final_state, mask, score, budget, chunk_offsets = _ops.chunk_gdn_fwd(
        q, k, v, g, beta, cu_seqlens, initial_state, float(scale) if scale is not None else 0.0,
        bool(output_final_state), bool(return_events), lib_out, **settings)
    if o.dtype != out_dtype:
        o = o.to(out_dtype)
    final_state = final_state if output_final_state else None
    if not return_events:
        return o, final_state
    return o, final_state, {"mask": mask, "score": score, "budget": budget, "chunk_offsets": chunk_offsets}
