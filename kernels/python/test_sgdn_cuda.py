"""The C ABI through ctypes (sgdn_cuda.py) against a float64 torch token recurrence and, if importable,
FLA's chunk_gated_delta_rule (E ≡ 1). Run on a GPU machine:

    SGDN_CUDA_LIB=build-cuda/kernels/libsgdn_cuda_capi.so FLA_FLASH_QLA=0 python3 -m pytest -q kernels/python/test_sgdn_cuda.py
"""
import itertools
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, os.pardir, os.pardir, "python", "tests"))
import sgdn_cuda  # noqa: E402
from reference import token_recurrence  # noqa: E402  (SPEC §2 in float64, shared with python/tests)

os.environ.setdefault("FLA_FLASH_QLA", "0")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# Every event with the exact solver: the configuration whose outputs the token recurrence gives to 1e-6
# (the library's default is sparse).
DENSE = dict(selector="dense", solver="exact")


def random_inputs(T, H, HV, K, V, dtype, seed, B=1):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64)
    a = torch.exp(torch.rand(HV, generator=gen, dtype=torch.float64) * torch.log(torch.tensor(16.0)))
    sp = torch.exp(torch.log(torch.tensor(1e-3)) + torch.rand(HV, generator=gen, dtype=torch.float64) * torch.log(torch.tensor(100.0)))
    bias = torch.log(torch.expm1(sp))
    g = -a * torch.nn.functional.softplus(torch.randn(B, T, HV, generator=gen, dtype=torch.float64) + bias)
    beta = torch.sigmoid(1.5 * torch.randn(B, T, HV, generator=gen, dtype=torch.float64))
    dev = "cuda"
    q, k, v, beta = (x.to(dev, dtype) for x in (q, k, v, beta))
    return q, k, v, g.to(dev, torch.float32), beta


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("T,H,HV,K,V", [(200, 2, 2, 64, 64), (130, 2, 4, 128, 128), (300, 1, 4, 128, 64)])
def test_dense_matches_float64(dtype, tol, T, H, HV, K, V):
    q, k, v, g, beta = random_inputs(T, H, HV, K, V, dtype, seed=T + HV)
    s0 = 0.3 * torch.randn(1, HV, K, V, device="cuda")
    o, final, events = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, initial_state=s0, group=2, **DENSE)
    ref_o, ref_s = token_recurrence(q, k, v, g, beta, K ** -0.5, s0)
    eo, es = rel(o, ref_o), rel(final, ref_s)
    print(f"\ndense {dtype} T={T} H={H} HV={HV} K={K} V={V}: rel err o {eo:.3e} state {es:.3e}")
    assert eo <= tol and es <= tol
    assert bool((events["mask"] == 1).all())


def test_dense_without_score_matches_float64():
    # The benchmark's dense configuration: no score (its kernel does not run; the selection writes every
    # event kept and zero scores), the tensor-core path (bf16, K = V = 128), a ragged last chunk, GVA, S0.
    T, H, HV = 200, 2, 4
    q, k, v, g, beta = random_inputs(T, H, HV, 128, 128, torch.bfloat16, seed=21)
    s0 = 0.3 * torch.randn(1, HV, 128, 128, device="cuda")
    o, final, events = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, initial_state=s0, score="none", **DENSE)
    ref_o, ref_s = token_recurrence(q, k, v, g, beta, 128 ** -0.5, s0)
    eo, es = rel(o, ref_o), rel(final, ref_s)
    print(f"\ndense without a score, bf16 tensor cores T={T}: rel err o {eo:.3e} state {es:.3e}")
    assert eo <= 1e-2 and es <= 1e-2
    n = (T + 63) // 64
    assert bool((events["mask"] == 1).all()) and bool((events["score"] == 0).all())
    assert events["budget"].tolist() == [[n] * H]


def test_varlen_matches_per_sequence():
    lengths = [100, 1, 64, 190]
    T = sum(lengths)
    q, k, v, g, beta = random_inputs(T, 2, 4, 128, 128, torch.bfloat16, seed=11)
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")
    o, final, _ = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, cu_seqlens=cu, **DENSE)
    worst = 0.0
    for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        ref_o, ref_s = token_recurrence(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], 128 ** -0.5)
        worst = max(worst, rel(o[:, a:b], ref_o), rel(final[i:i + 1], ref_s))
    print(f"\nvarlen bf16 lengths {lengths}: worst rel err {worst:.3e}")
    assert worst <= 1e-2


def test_sparse_head_budget_runs_and_keeps_budget():
    q, k, v, g, beta = random_inputs(64 * 20, 2, 4, 128, 128, torch.bfloat16, seed=5)
    o, final, ev = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, selector="head_budget", rho=0.29,
                                              solver="block_adjacent", band=1, group=2)
    assert torch.isfinite(o.float()).all()
    n = 20
    assert int(ev["budget"].sum()) == round(0.29 * n * 2)
    # pair granularity: the r = 2 heads of a group share the mask
    mask = ev["mask"].view(4, n)
    assert torch.equal(mask[0], mask[1]) and torch.equal(mask[2], mask[3])


def test_head_budget_max_fraction_caps_each_group():
    q, k, v, g, beta = random_inputs(64 * 20, 2, 4, 128, 128, torch.bfloat16, seed=5)
    # The first group's values 10x larger: its update_norm scores lead, so uncapped it takes the whole budget.
    v[:, :, :2] *= 10
    n, args = 20, dict(selector="head_budget", rho=0.29, score="update_norm", solver="block_adjacent", band=1)
    _, _, free = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, **args)
    _, _, capped = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, max_fraction=0.3, **args)
    # budget round(0.29 * 20 * 2) = 12 either way; with the cap no group keeps more than round(0.3 * 20) = 6
    assert int(free["budget"].sum()) == int(capped["budget"].sum()) == round(0.29 * n * 2)
    assert int(free["budget"].max()) > round(0.3 * n)  # the cap has something to do
    assert int(capped["budget"].max()) <= round(0.3 * n)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="max_fraction"):
        sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, max_fraction=0.2, **args)


def test_fla_parity_dense():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"FLA not importable: {exc}")
    T, H, HV, K, V = 512, 2, 4, 128, 128
    q, k, v, g, beta = random_inputs(T, H, HV, K, V, torch.bfloat16, seed=3)
    ours, ours_s, _ = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, **DENSE)
    fla_o, fla_s = chunk_gated_delta_rule(q, k, v, g, beta, scale=K ** -0.5, output_final_state=True)
    ref_o, ref_s = token_recurrence(q, k, v, g, beta, K ** -0.5)
    e_ours, e_fla, e_between = rel(ours, ref_o), rel(fla_o, ref_o), rel(ours, fla_o)
    print(f"\nFLA parity T={T} bf16: ours vs f64 {e_ours:.3e}, FLA vs f64 {e_fla:.3e}, ours vs FLA {e_between:.3e}, "
          f"state ours {rel(ours_s, ref_s):.3e} FLA {rel(fla_s, ref_s):.3e}")
    assert e_ours <= 1e-2 and e_between <= 2e-2


def test_bad_input_raises_with_message():
    q, k, v, g, beta = random_inputs(64, 2, 4, 64, 64, torch.float32, seed=1)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="dtype"):
        sgdn_cuda.chunk_sparse_gdn(q.double(), k, v, g, beta)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="contiguous"):
        sgdn_cuda.chunk_sparse_gdn(q.transpose(1, 2), k, v, g, beta)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="multiple"):
        sgdn_cuda.chunk_sparse_gdn(q[:, :, :, :].repeat(1, 1, 3, 1)[:, :, :3].contiguous(),
                                   k.repeat(1, 1, 3, 1)[:, :, :3].contiguous(), v, g, beta)
    qq, kk, vv, gg, bb = random_inputs(64, 2, 4, 96 + 8, 64, torch.float32, seed=1)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="key_dim"):
        sgdn_cuda.chunk_sparse_gdn(qq, kk, vv, gg, bb)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="cuda|CUDA"):
        sgdn_cuda.chunk_sparse_gdn(q.cpu(), k, v, g, beta)
    # Misaligned pointer straight through the C ABI: a view that starts 4 bytes in.
    flat = torch.empty(q.numel() + 1, device="cuda")
    q_off = flat[1:].view_as(q)
    q_off.copy_(q)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="aligned"):
        sgdn_cuda.chunk_sparse_gdn(q_off, k, v, g, beta)
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="solver"):
        sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, solver="neumann")
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="chunk"):
        sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, chunk=128)
