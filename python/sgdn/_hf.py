"""Running the Gated DeltaNet layers of a transformers model (Qwen3-Next, Qwen3.5) on SparseGDN's kernels."""
from __future__ import annotations

import functools
import sys

import torch

# Keywords that transformers passes to its chunk function and that FLA's signature has no use for here.
_IGNORED = ("chunk_size", "head_first")


def _layer_call(sparse, query, key, value, g, beta, scale=None, initial_state=None, output_final_state=False,
                use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    """A GDN layer's chunk call as transformers makes it, with FLA's names; the attention kwargs that the
    model passes along (position ids, masks, ...) are not for the kernel."""
    from . import chunk_gated_delta_rule

    return chunk_gated_delta_rule(query, key, value, g, beta, scale, initial_state, output_final_state,
                                  use_qk_l2norm_in_kernel, cu_seqlens, **sparse)


def _is_gdn_layer(module) -> bool:
    return type(module).__name__.endswith("GatedDeltaNet")


def patch_transformers(model: torch.nn.Module, **sparse):
    """Makes the prefill of every Gated DeltaNet layer of `model` (modules whose class name ends with
    GatedDeltaNet: Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet) call sgdn.chunk_gated_delta_rule with these
    sparse settings (none: the library's default, sparse; selector="dense", solver="exact" for the dense
    recurrence). Single-token decoding keeps the model's own recurrent step.

    Layers that hold their chunk function as the attribute `chunk_gated_delta_rule` get it replaced on the
    instance. Where the layer's module calls the function `torch_chunk_gated_delta_rule` by its global name
    (transformers 5.x), that global is replaced, so every model of that class in the process runs on the
    kernels, with the settings of the last patch. Returns a function that undoes the patch."""
    from . import settings_of_call

    settings_of_call(sparse)  # unknown names fail here, not in the middle of a forward
    call = functools.partial(_layer_call, dict(sparse))
    undo = []
    layers = [m for m in model.modules() if _is_gdn_layer(m)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Gated DeltaNet layer (a module named *GatedDeltaNet)")
    for layer in layers:
        if hasattr(layer, "chunk_gated_delta_rule"):
            had = "chunk_gated_delta_rule" in vars(layer)
            before = vars(layer).get("chunk_gated_delta_rule")
            layer.chunk_gated_delta_rule = call
            undo.append(functools.partial(_restore_attribute, layer, had, before))
            continue
        module = sys.modules[type(layer).__module__]
        if not hasattr(module, "torch_chunk_gated_delta_rule"):
            raise ValueError(f"{type(layer).__name__}: neither a chunk_gated_delta_rule attribute nor a "
                             f"torch_chunk_gated_delta_rule function in {module.__name__}")
        before = module.torch_chunk_gated_delta_rule
        if getattr(before, "_sgdn_original", None) is not None:
            before = before._sgdn_original

        def replacement(*args, **kwargs):
            return call(*args, **kwargs)

        replacement._sgdn_original = before
        module.torch_chunk_gated_delta_rule = replacement
        undo.append(functools.partial(setattr, module, "torch_chunk_gated_delta_rule", before))

    def unpatch():
        for step in reversed(undo):
            step()

    return unpatch


def _restore_attribute(layer, had, before):
    if had:
        layer.chunk_gated_delta_rule = before
    else:
        del layer.chunk_gated_delta_rule
