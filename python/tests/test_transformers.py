"""sgdn.patch_transformers on a small randomly initialised Qwen3-Next model (2 layers: one Gated DeltaNet,
one attention). Without a GPU the op is replaced by the float64 recurrence (reference.reference_op), which
checks the routing and the conversions; with a GPU the kernels run (dense) and the logits are compared with
the model's own torch path."""
import pytest
import torch

import sgdn
from sgdn import _ops
from reference import reference_op

transformers = pytest.importorskip("transformers")


def tiny_qwen3_next(dtype=torch.float32, device="cpu", key_dim=16, value_dim=16):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(vocab_size=128, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                             shared_expert_intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                             num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                             linear_key_head_dim=key_dim, linear_value_head_dim=value_dim, num_experts=4,
                             num_experts_per_tok=2, layer_types=["linear_attention", "full_attention"])
    torch.manual_seed(0)
    return Qwen3NextForCausalLM(config).to(device=device, dtype=dtype).eval()


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_patch_routes_the_layers_prefill_through_sgdn(monkeypatch):
    calls = []

    def op(*args, **kwargs):
        calls.append(kwargs)
        return reference_op(*args, **kwargs)

    monkeypatch.setattr(_ops, "chunk_gdn_fwd", op)
    # Where CUDA is there, the model's own path may take FLA's Triton kernels (transformers uses them when FLA
    # is installed), which need the model on the GPU; the stand-in op runs on either device.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = tiny_qwen3_next(device=device)
    ids = torch.randint(0, 128, (2, 50), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        ref = model(ids).logits
        unpatch = sgdn.patch_transformers(model, selector="dense", solver="exact")
        try:
            ours = model(ids).logits
        finally:
            unpatch()
        assert calls == [{"selector": "dense", "solver": "exact"}]  # one GDN layer, one prefill call
        assert rel(ours, ref) < (1e-3 if device == "cuda" else 1e-4)  # FLA's own kernels on the GPU
        model(ids)
        assert len(calls) == 1  # unpatched: the model's own path again


def test_patch_refuses_unknown_settings_and_models_without_gdn():
    with pytest.raises(TypeError, match="rhoo"):
        sgdn.patch_transformers(tiny_qwen3_next(), rhoo=0.1)
    with pytest.raises(ValueError, match="no Gated DeltaNet layer"):
        sgdn.patch_transformers(torch.nn.Linear(2, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tiny_qwen3_next_on_the_kernels_matches_its_torch_path(dtype):
    # K = V = 128 in bf16: the library's tensor-core path; the model's fallback is torch's chunked recurrence.
    model = tiny_qwen3_next(dtype=dtype, device="cuda", key_dim=128, value_dim=128)
    ids = torch.randint(0, 128, (2, 150), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        unpatch = sgdn.patch_transformers(model, selector="dense", solver="exact")
        try:
            ours = model(ids).logits
        finally:
            unpatch()
        ref = model(ids).logits
    err = rel(ours, ref)
    print(f"\ntiny Qwen3-Next {dtype}: logits rel err {err:.3e}")
    assert err < (2e-2 if dtype == torch.bfloat16 else 1e-3)
