"""sgdn.chunk_gated_delta_rule on the GPU: the float64 token recurrence, events, torch.compile, CUDA graphs,
opcheck, no host synchronisation, the dense backward. Needs a Hopper GPU and the library:

    SGDN_CUDA_LIB=build/kernels/libsgdn_cuda_capi.so python3 -m pytest -q python/tests
"""
import itertools

import pytest
import torch

import sgdn
from reference import packed_recurrence

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# Every event with the exact solver: the configuration whose outputs the token recurrence gives.
DENSE = dict(selector="dense", solver="exact")
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}


def inputs(lengths, H=2, HV=4, K=128, V=128, dtype=torch.bfloat16, seed=0, normalized=True):
    gen = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64)
    k = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64)
    if normalized:
        q, k = (torch.nn.functional.normalize(x, dim=-1) for x in (q, k))
    v = torch.randn(1, T, HV, V, generator=gen, dtype=torch.float64)
    g = -torch.nn.functional.softplus(torch.randn(1, T, HV, generator=gen, dtype=torch.float64) - 2)
    beta = torch.sigmoid(torch.randn(1, T, HV, generator=gen, dtype=torch.float64))
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32)
    q, k, v, beta = (x.to("cuda", dtype) for x in (q, k, v, beta))
    return q, k, v, g.cuda(), beta, cu.cuda()


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("l2norm", [False, True])
def test_ragged_gva_initial_state_matches_float64(dtype, l2norm):
    lengths = [100, 1, 64, 190]
    q, k, v, g, beta, cu = inputs(lengths, dtype=dtype, normalized=not l2norm, seed=len(lengths))
    s0 = 0.3 * torch.randn(len(lengths), 4, 128, 128, device="cuda")
    o, final = sgdn.chunk_gated_delta_rule(q, k, v, g.to(dtype), beta, None, s0, True, l2norm, cu.long(), **DENSE)
    assert o.dtype == dtype and final.dtype == torch.float32 and final.shape == s0.shape
    # g is given in the input dtype (as a model may): the reference takes the same rounded values.
    ref_o, ref_s = packed_recurrence(q, k, v, g.to(dtype), beta, None, s0, cu.cpu(), l2norm=l2norm)
    eo, es = rel(o, ref_o), rel(final, ref_s)
    print(f"\n{dtype} l2norm={l2norm} lengths {lengths}: rel err o {eo:.3e} state {es:.3e}")
    assert eo <= TOLERANCE[dtype] and es <= TOLERANCE[dtype]


def test_batched_and_scale():
    q, k, v, g, beta, _ = inputs([96 * 3], H=1, HV=2, K=64, V=64, dtype=torch.float32)
    q, k, v, g, beta = (x.view(3, 96, *x.shape[2:]) for x in (q, k, v, g, beta))
    o, final = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, 0.3, output_final_state=True, **DENSE)
    ref_o, ref_s = packed_recurrence(q, k, v, g, beta, 0.3)
    assert rel(o, ref_o) <= 1e-4 and rel(final, ref_s) <= 1e-4


def test_events_match_the_host_computed_ones():
    lengths = [100, 1, 64, 190]
    q, k, v, g, beta, cu = inputs(lengths, seed=7)
    o, _, ev = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, return_events=True)  # the default
    o_ref, _, ev_ref = sgdn.chunk_sparse_gdn(q, k, v, g, beta, cu_seqlens=cu, output_final_state=False)
    assert ev["chunk_offsets"].tolist() == ev_ref["chunk_offsets"]
    n = ev_ref["chunk_offsets"][-1] * 4
    assert torch.equal(ev["mask"][:n], ev_ref["mask"]) and torch.equal(ev["score"][:n], ev_ref["score"])
    assert bool((ev["mask"][n:] == 0).all()) and torch.equal(ev["budget"], ev_ref["budget"])
    assert torch.equal(o, o_ref)


def test_no_host_sync():
    q, k, v, g, beta, cu = inputs([100, 1, 64, 190])
    s0 = torch.zeros(4, 4, 128, 128, device="cuda")
    sgdn.load_library()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, s0, True, True, cu, return_events=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_opcheck():
    q, k, v, g, beta, cu = inputs([100, 28])
    args = (q, k, v, g.float(), beta, cu, None, 0.0, True, True, torch.bfloat16)  # the op takes g in float32
    torch.library.opcheck(torch.ops.sgdn.chunk_gdn_fwd.default, args, dict(DENSE))


def test_torch_compile_fullgraph():
    q, k, v, g, beta, cu = inputs([100, 1, 64, 190], seed=3)

    def layer(q, k, v, g, beta, cu):
        o, s = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, None, True, True, cu, selector="dense",
                                           solver="exact")
        return o.float() * 2, s

    eager = layer(q, k, v, g, beta, cu)
    compiled = torch.compile(layer, fullgraph=True)(q, k, v, g, beta, cu)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_cuda_graph_capture_and_replay():
    q, k, v, g, beta, cu = inputs([100, 1, 64, 190], seed=4)
    static = [x.clone() for x in (q, k, v, g, beta, cu)]

    def run():
        return sgdn.chunk_gated_delta_rule(*static[:5], None, None, True, False, static[5], **DENSE)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_o, out_s = run()
    q2, k2, v2, g2, beta2, _ = inputs([100, 1, 64, 190], seed=5)
    cu2 = torch.tensor([0, 50, 200, 300, 355], dtype=torch.int32, device="cuda")  # other lengths, same count
    for dst, src in zip(static, (q2, k2, v2, g2, beta2, cu2)):
        dst.copy_(src)
    graph.replay()
    ref_o, ref_s = sgdn.chunk_gated_delta_rule(q2, k2, v2, g2, beta2, None, None, True, False, cu2, **DENSE)
    assert torch.equal(out_o, ref_o) and torch.equal(out_s, ref_s)


def test_backward_of_a_sparse_configuration_is_a_clear_error():
    q, k, v, g, beta, cu = inputs([64])
    q.requires_grad_(True)
    o, _ = sgdn.chunk_gated_delta_rule(q, k, v, g, beta)  # the library's default: sparse
    with pytest.raises(NotImplementedError, match="backward is not implemented for this configuration"):
        o.float().sum().backward()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dense_backward_matches_float64_autograd(dtype):
    lengths = [100, 1, 64, 90]
    q, k, v, g, beta, cu = inputs(lengths, K=64, V=64, dtype=dtype, normalized=False, seed=9)
    s0 = 0.3 * torch.randn(len(lengths), 4, 64, 64, device="cuda")
    ours = [x.clone().requires_grad_() for x in (q, k, v, g, beta, s0)]
    ref = [x.detach().double().requires_grad_() for x in (q, k, v, g, beta, s0)]
    o, final = sgdn.chunk_gated_delta_rule(*ours[:5], None, ours[5], True, True, cu, **DENSE)
    ro, rs = packed_recurrence(*ref[:5], None, ref[5], cu.cpu(), l2norm=True)
    wo, ws = torch.randn_like(ro), torch.randn_like(rs)
    mine = torch.autograd.grad((o.double() * wo).sum() + (final.double() * ws).sum(), ours)
    theirs = torch.autograd.grad((ro * wo).sum() + (rs * ws).sum(), ref)
    errors = [rel(a, b) for a, b in zip(mine, theirs)]
    print(f"\nbackward {dtype}: rel err dq dk dv dg dbeta ds0 " + " ".join(f"{e:.2e}" for e in errors))
    assert all(e <= 1e-2 for e in errors)  # gradients in float32 from inputs in `dtype`, rounded to it


def test_bad_input_raises_with_message():
    q, k, v, g, beta, cu = inputs([64], K=96 + 8)
    with pytest.raises(sgdn.SgdnCudaError, match="key_dim"):
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
    q, k, v, g, beta, cu = inputs([64])
    with pytest.raises(sgdn.SgdnCudaError, match="CUDA"):
        sgdn.chunk_gated_delta_rule(q.cpu(), k, v, g, beta)
    with pytest.raises(sgdn.SgdnCudaError, match="batch dimension must be 1"):
        sgdn.chunk_gated_delta_rule(q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1),
                                    g.expand(2, -1, -1), beta.expand(2, -1, -1), cu_seqlens=cu)
    with pytest.raises(sgdn.SgdnCudaError, match="initial_state"):
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, torch.zeros(2, 4, 128, 128, device="cuda"))
