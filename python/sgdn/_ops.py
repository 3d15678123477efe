"""The forward pass as the torch.library custom op `sgdn::chunk_gdn_fwd`, with a fake implementation (output
shapes and dtypes only), so that torch.compile traces it as one node and CUDA graphs capture it.

The op takes its inputs as the library wants them (q, k, v, beta float32 or bfloat16 alike, g float32,
cu_seqlens int32, initial_state float32, all contiguous); sgdn.chunk_gated_delta_rule converts to that. It
never reads device memory on the host: the number of sequences is cu_seqlens.numel() - 1, the number of
tokens comes from the shapes, and the event buffers are sized for the most chunks those can make.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _capi

# The sparse settings (keywords of chunk_sparse_gdn and make_config): None keeps the library's default.
SETTINGS = ("chunk", "group", "solver", "block", "band", "selector", "rho", "score", "granularity", "seed", "tau",
            "min_per_head", "max_fraction", "skip_own_group", "tensor_cores")


def event_rows(total_tokens, num_seqs, chunk):
    """Chunks of all sequences together, at most: sum ceil(len_s / C) <= (T + S (C - 1)) // C for S sequences
    of T tokens in all (the bound is reached when every length leaves a remainder). Sizes the event buffers
    without reading cu_seqlens."""
    return (total_tokens + num_seqs * (chunk - 1)) // chunk


def layout(lib, settings):
    """(chunk, whether events are per value head rather than per head group) of these settings: what the
    event shapes depend on. Reads the library's defaults, no sizes (they may be symbolic when traced)."""
    config = _capi.make_config(lib, num_seqs=1, total_tokens=1, qk_heads=1, v_heads=1, key_dim=0, value_dim=0,
                               **settings)
    return config.chunk, bool(config.head_granularity)


def _settings(chunk, group, solver, block, band, selector, rho, score, granularity, seed, tau, min_per_head,
              max_fraction, skip_own_group, tensor_cores):
    values = (chunk, group, solver, block, band, selector, rho, score, granularity, seed, tau, min_per_head,
              max_fraction, skip_own_group, tensor_cores)
    return dict(zip(SETTINGS, values))


def _shapes(q, v, cu_seqlens, output_final_state, return_events, settings):
    """Output shapes of the op: o, final_state ([0] when not asked), mask, score ([0] when no events are
    asked), budget, chunk_offsets."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    num_seqs = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    state = (num_seqs, HV, K, V) if output_final_state else (0,)
    if not return_events:
        return (B, T, HV, V), state, (0,), (0, 0), (0,)
    chunk, per_head = layout(_capi.load_library(), settings)
    units = HV if per_head else H
    rows = event_rows(B * T, num_seqs, chunk) * HV
    return (B, T, HV, V), state, (rows,), (num_seqs, units), (num_seqs + 1,)


@torch.library.custom_op("sgdn::chunk_gdn_fwd", mutates_args=())
def chunk_gdn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  cu_seqlens: Optional[torch.Tensor], initial_state: Optional[torch.Tensor], scale: float,
                  output_final_state: bool, return_events: bool, output_dtype: torch.dtype,
                  chunk: Optional[int] = None, group: Optional[int] = None, solver: Optional[str] = None,
                  block: Optional[int] = None, band: Optional[int] = None, selector: Optional[str] = None,
                  rho: Optional[float] = None, score: Optional[str] = None, granularity: Optional[str] = None,
                  seed: Optional[int] = None, tau: Optional[float] = None, min_per_head: Optional[int] = None,
                  max_fraction: Optional[float] = None, skip_own_group: Optional[bool] = None,
                  tensor_cores: Optional[bool] = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns (o, final_state, event mask, event scores, budget, chunk_offsets); see the module's docstring
    and sgdn.chunk_gated_delta_rule. scale <= 0 means 1 / sqrt(K)."""
    settings = _settings(chunk, group, solver, block, band, selector, rho, score, granularity, seed, tau,
                         min_per_head, max_fraction, skip_own_group, tensor_cores)
    lib = _capi.load_library()
    B, T, H, K, HV, V = _capi.check_inputs(q, k, v, g, beta)
    device = q.device
    if cu_seqlens is None:
        num_seqs = B
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=device)
    else:
        _capi._require(B == 1, "with cu_seqlens the batch dimension must be 1 (sequences packed along T)")
        _capi._require(cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 2, "cu_seqlens must be [num_seqs + 1]")
        _capi._require(cu_seqlens.dtype == torch.int32 and cu_seqlens.device == device
                       and cu_seqlens.is_contiguous(), "cu_seqlens must be a contiguous int32 tensor beside q")
        num_seqs = cu_seqlens.numel() - 1
        cu = cu_seqlens
    _capi.check_inputs(q, k, v, g, beta, initial_state, num_seqs)
    _capi._require(output_dtype in _capi.INPUT_DTYPES, f"output_dtype {output_dtype}; allowed: float32, bfloat16")
    config = _capi.make_config(lib, num_seqs=num_seqs, total_tokens=B * T, qk_heads=H, v_heads=HV, key_dim=K,
                               value_dim=V, scale=scale if scale > 0 else None, input_dtype=q.dtype,
                               output_dtype=output_dtype, **settings)
    o_shape, state_shape, rows_shape, budget_shape, offsets_shape = _shapes(q, v, cu_seqlens, output_final_state,
                                                                            return_events, settings)
    o = torch.empty(o_shape, dtype=output_dtype, device=device)
    final_state = torch.empty(state_shape, dtype=torch.float32, device=device)
    # Zeros: the rows past the last sequence's chunks are not written by the library.
    mask = torch.zeros(rows_shape, dtype=torch.uint8, device=device)
    scores = torch.zeros(rows_shape, dtype=torch.float32, device=device)
    budget = torch.empty(budget_shape, dtype=torch.int32, device=device)
    _capi.launch(lib, config, q, k, v, g, beta, cu, initial_state, o,
                 final_state if output_final_state else None, mask if return_events else None,
                 scores if return_events else None, budget if return_events else None)
    chunk_offsets = torch.empty(offsets_shape, dtype=torch.int32, device=device)
    if return_events:
        # The running sum of ceil(len_s / C), on the device.
        n = torch.div(cu[1:] - cu[:-1] + (config.chunk - 1), config.chunk, rounding_mode="floor")
        chunk_offsets[:1].zero_()  # a kernel, not a copy from the host (which would synchronise)
        chunk_offsets[1:] = torch.cumsum(n, 0, dtype=torch.int32)
    return o, final_state, mask, scores, budget, chunk_offsets


@chunk_gdn_fwd.register_fake
def _(q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state, return_events, output_dtype,
      chunk=None, group=None, solver=None, block=None, band=None, selector=None, rho=None, score=None,
      granularity=None, seed=None, tau=None, min_per_head=None, max_fraction=None, skip_own_group=None,
      tensor_cores=None):
    settings = _settings(chunk, group, solver, block, band, selector, rho, score, granularity, seed, tau,
                         min_per_head, max_fraction, skip_own_group, tensor_cores)
    o_shape, state_shape, rows_shape, budget_shape, offsets_shape = _shapes(q, v, cu_seqlens, output_final_state,
                                                                            return_events, settings)
    return (q.new_empty(o_shape, dtype=output_dtype), q.new_empty(state_shape, dtype=torch.float32),
            q.new_empty(rows_shape, dtype=torch.uint8), q.new_empty(rows_shape, dtype=torch.float32),
            q.new_empty(budget_shape, dtype=torch.int32), q.new_empty(offsets_shape, dtype=torch.int32))


def _setup_context(ctx, inputs, output):
    q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state = inputs[:9]
    ctx.scale, ctx.output_final_state, ctx.settings = scale, output_final_state, _settings(*inputs[11:])
    ctx.has_state = initial_state is not None
    ctx.save_for_backward(q, k, v, g, beta, cu_seqlens, initial_state)


def _backward(ctx, grad_o, grad_state, *grad_events):
    """The dense configuration's gradient (sgdn._grad: the forward recomputed in float32 torch, differentiated
    by autograd; reads cu_seqlens on the host). Other configurations raise NotImplementedError."""
    from . import _grad

    lib = _capi.load_library()
    config = _capi.make_config(lib, num_seqs=1, total_tokens=1, qk_heads=1, v_heads=1, key_dim=0, value_dim=0,
                               **ctx.settings)
    selector = _capi.strategy_names(lib, _capi.SELECTORS)[config.selector]
    if selector != "dense" or config.solver_band >= 0:
        raise NotImplementedError(
            "sgdn.chunk_gated_delta_rule: backward is not implemented for this configuration (selector "
            f"'{selector}', solver {'exact' if config.solver_band < 0 else 'block_adjacent'}); it is defined "
            "for the dense one only: selector='dense', solver='exact'")
    q, k, v, g, beta, cu_seqlens, initial_state = ctx.saved_tensors
    inputs = [x.detach().float().requires_grad_() for x in (q, k, v, g, beta)]
    state = initial_state.detach().float().requires_grad_() if ctx.has_state else None
    scale = ctx.scale if ctx.scale > 0 else q.shape[-1] ** -0.5
    with torch.enable_grad():
        o, final_state = _grad.packed_dense_recurrence(*inputs, scale, state, cu_seqlens, config.chunk)
        outputs, grads = [o], [grad_o.float()]
        if ctx.output_final_state:
            outputs.append(final_state)
            grads.append(grad_state.float())
        leaves = inputs + ([state] if ctx.has_state else [])
        found = torch.autograd.grad(outputs, leaves, grads, allow_unused=True)
    dq, dk, dv, dg, dbeta = (d.to(x.dtype) for d, x in zip(found[:5], (q, k, v, g, beta)))
    dstate = found[5] if ctx.has_state else None
    return (dq, dk, dv, dg, dbeta, None, dstate) + (None,) * (len(_OP_ARGS) - 7)


_OP_ARGS = ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "scale", "output_final_state",
            "return_events", "output_dtype") + SETTINGS
chunk_gdn_fwd.register_autograd(_backward, setup_context=_setup_context)
