"""The Python layer of sgdn without a GPU: FLA's signature, the conversions on the way to the op, the sparse
settings, the fake implementation's shapes, tracing, and no host synchronisation on the call path.

    python3 -m pytest -q python/tests
"""
import inspect

import pytest
import torch
from torch._subclasses import FakeTensorMode

import sgdn
from sgdn import _grad, _ops
from reference import packed_recurrence, reference_op


def have_library():
    try:
        sgdn.load_library()
        return True
    except (FileNotFoundError, OSError):
        return False


needs_library = pytest.mark.skipif(not have_library(), reason="needs libsgdn_cuda_capi.so (SGDN_CUDA_LIB)")


def inputs(T=40, H=2, HV=4, K=16, V=8, B=1, dtype=torch.float32, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = -torch.rand(B, T, HV, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    return tuple(x.to(device, dtype) for x in (q, k, v, g, beta))


class Recorder:
    """Stands in for the op: records each call's arguments and answers from the float64 recurrence."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return reference_op(*args, **kwargs)


@pytest.fixture
def op(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(_ops, "chunk_gdn_fwd", recorder)
    return recorder


def test_signature_is_flas():
    names = list(inspect.signature(sgdn.chunk_gated_delta_rule).parameters)
    assert names[:10] == ["q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state",
                          "use_qk_l2norm_in_kernel", "cu_seqlens"]
    params = inspect.signature(sgdn.chunk_gated_delta_rule).parameters
    assert params["output_final_state"].default is False and params["use_qk_l2norm_in_kernel"].default is False


def test_positional_scale_and_state_reach_the_op_and_two_values_return(op):
    q, k, v, g, beta = inputs()
    s0 = torch.randn(1, 4, 16, 8)
    out = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, 0.5, s0, True)
    assert len(out) == 2
    args, _ = op.calls[-1]
    assert args[7] == 0.5 and args[6] is s0 or torch.equal(args[6], s0)
    ref_o, ref_s = packed_recurrence(q, k, v, g, beta, 0.5, s0)
    assert torch.allclose(out[0].double(), ref_o, atol=1e-5) and torch.allclose(out[1].double(), ref_s, atol=1e-5)
    o, final = sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
    assert final is None and op.calls[-1][0][7] == 0.0  # scale None: the library's 1 / sqrt(K)


def test_dtypes_given_to_the_library(op):
    q, k, v, g, beta = inputs(dtype=torch.float16)
    o, _ = sgdn.chunk_gated_delta_rule(q, k, v, g.double(), beta)
    args, _ = op.calls[-1]
    assert [a.dtype for a in args[:5]] == [torch.float32] * 5  # fp16 -> float32, g -> float32
    assert args[10] == torch.float32 and o.dtype == torch.float16
    q, k, v, g, beta = inputs(dtype=torch.bfloat16)
    o, _ = sgdn.chunk_gated_delta_rule(q, k, v.float(), g, beta.float())
    args, _ = op.calls[-1]
    assert [a.dtype for a in args[:5]] == [torch.bfloat16] * 3 + [torch.float32, torch.bfloat16]
    assert args[10] == torch.bfloat16 and o.dtype == torch.bfloat16
    with pytest.raises(sgdn.SgdnCudaError, match="dtype"):
        sgdn.chunk_gated_delta_rule(q.to(torch.int32), k, v, g, beta)


def test_inputs_made_contiguous_and_cu_seqlens_int32(op):
    q, k, v, g, beta = inputs(T=30)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not qt.is_contiguous()
    cu = torch.tensor([0, 7, 30], dtype=torch.int64)
    o, final = sgdn.chunk_gated_delta_rule(qt, k, v, g, beta, cu_seqlens=cu, output_final_state=True)
    args, _ = op.calls[-1]
    assert args[0].is_contiguous() and args[5].dtype == torch.int32
    ref_o, ref_s = packed_recurrence(q, k, v, g, beta, None, None, cu)
    assert final.shape == (2, 4, 16, 8)
    assert torch.allclose(o.double(), ref_o, atol=1e-5) and torch.allclose(final.double(), ref_s, atol=1e-5)


def test_qk_l2norm_in_kernel(op):
    q, k, v, g, beta = inputs()
    q, k = 3 * q, 0.5 * k
    o, _ = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    args, _ = op.calls[-1]
    assert torch.allclose(args[0].norm(dim=-1), torch.ones(1, 40, 2), atol=1e-5)
    assert torch.allclose(args[1].norm(dim=-1), torch.ones(1, 40, 2), atol=1e-5)
    ref_o, _ = packed_recurrence(q, k, v, g, beta, l2norm=True)
    assert torch.allclose(o.double(), ref_o, atol=1e-5)
    sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
    assert torch.equal(op.calls[-1][0][0], q)  # not normalised unless asked


def test_sparse_keywords_and_config_blocks(op):
    q, k, v, g, beta = inputs()
    sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
    assert op.calls[-1][1] == {}  # the library's defaults
    with sgdn.config(selector="dense", solver="exact"):
        with sgdn.config(rho=0.5):
            assert sgdn.current_config() == {"selector": "dense", "solver": "exact", "rho": 0.5}
            sgdn.chunk_gated_delta_rule(q, k, v, g, beta, rho=0.7)
            assert op.calls[-1][1] == {"selector": "dense", "solver": "exact", "rho": 0.7}
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
        assert op.calls[-1][1] == {"selector": "dense", "solver": "exact"}
    with pytest.raises(RuntimeError):
        with sgdn.config(selector="dense"):
            raise RuntimeError("inside")
    assert sgdn.current_config() == {}
    with pytest.raises(TypeError, match="unexpected keyword argument 'rhoo'"):
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta, rhoo=0.5)
    with pytest.raises(TypeError, match="rhoo"):
        with sgdn.config(rhoo=0.5):
            pass


def fake_inputs(mode, T=100, B=1, dtype=torch.bfloat16, device="cuda"):
    with mode:
        q = torch.empty(B, T, 2, 64, device=device, dtype=dtype)
        k = torch.empty(B, T, 2, 64, device=device, dtype=dtype)
        v = torch.empty(B, T, 4, 32, device=device, dtype=dtype)
        g = torch.empty(B, T, 4, device=device, dtype=torch.float32)
        beta = torch.empty(B, T, 4, device=device, dtype=dtype)
    return q, k, v, g, beta


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fake_shapes(dtype):
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, B=3, dtype=dtype)
    with mode:
        o, final = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
        assert o.shape == (3, 100, 4, 32) and o.dtype == dtype and o.device.type == "cuda"
        assert final.shape == (3, 4, 64, 32) and final.dtype == torch.float32
        o, final = sgdn.chunk_gated_delta_rule(q, k, v, g, beta)
        assert final is None


@needs_library
def test_fake_event_shapes_bound_the_chunks_without_reading_cu_seqlens():
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, T=100)
    with mode:
        cu = torch.empty(4, dtype=torch.int32, device="cuda")  # 3 sequences, lengths unknown
        o, final, ev = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, output_final_state=True,
                                                   return_events=True, chunk=32, granularity="head")
        # at most (100 + 3 * 31) // 32 = 6 chunks in all (e.g. lengths 33, 33, 34)
        assert ev["mask"].shape == (6 * 4,) and ev["mask"].dtype == torch.uint8
        assert ev["score"].shape == (6 * 4,) and ev["score"].dtype == torch.float32
        assert ev["budget"].shape == (3, 4) and ev["chunk_offsets"].shape == (4,)
        assert final.shape == (3, 4, 64, 32)
        _, _, ev = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, return_events=True,
                                               granularity="pair")
        assert ev["budget"].shape == (3, 2)


def test_event_rows_bound_is_reached():
    assert _ops.event_rows(100, 3, 32) == 6 and _ops.event_rows(99, 3, 33) == 5
    for lengths in ([33, 33, 34], [1, 1, 98], [100], [64, 36]):
        need = sum((n + 31) // 32 for n in lengths)
        assert need <= _ops.event_rows(sum(lengths), len(lengths), 32)


@pytest.fixture
def no_host_reads(monkeypatch):
    """Every way to bring a tensor's values to the host fails."""
    def refuse(name):
        def method(self, *args, **kwargs):
            raise AssertionError(f"host read: Tensor.{name}")
        return method

    for name in ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))


@pytest.mark.parametrize("events", [False, pytest.param(True, marks=needs_library)])
def test_no_host_sync_on_the_call_path(no_host_reads, events):
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, T=100, dtype=torch.float16)
    with mode:
        cu = torch.empty(3, dtype=torch.int64, device="cuda")
        s0 = torch.empty(2, 4, 64, 32, device="cuda", dtype=torch.bfloat16)
        out = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, s0, True, True, cu, return_events=events,
                                          selector="dense")
        assert out[0].shape == (1, 100, 4, 32)


@pytest.mark.parametrize("events", [False, pytest.param(True, marks=needs_library)])
def test_traced_as_one_op_by_export(events):
    class Layer(torch.nn.Module):
        def forward(self, q, k, v, g, beta, cu):
            out = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, None, True, True, cu, selector="dense",
                                              return_events=events)
            return (out[0] * 2, out[1]) + ((out[2]["mask"], out[2]["chunk_offsets"]) if events else ())

    mode = FakeTensorMode(allow_non_fake_inputs=False)
    q, k, v, g, beta = fake_inputs(mode, T=100)
    with mode:
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
    program = torch.export.export(Layer(), (q, k, v, g, beta, cu), strict=True)
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert sum("sgdn.chunk_gdn_fwd" in t for t in targets) == 1, targets


@needs_library
def test_backward_of_a_sparse_configuration_is_a_clear_error():
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, T=64, device="cpu")  # the autograd engine wants a real device
    with mode:
        q.requires_grad_(True)
        o, _ = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, selector="dense")  # banded solver: approximate
        with pytest.raises(NotImplementedError, match="backward is not implemented for this configuration"):
            o.sum().backward()


@needs_library
def test_backward_of_the_dense_configuration_gives_every_gradient():
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, T=100, device="cpu", dtype=torch.float16)
    with mode:
        s0 = torch.empty(1, 4, 64, 32, dtype=torch.bfloat16)
        leaves = [x.requires_grad_(True) for x in (q, k, v, g, beta, s0)]
        o, final = sgdn.chunk_gated_delta_rule(q, k, v, g, beta, None, s0, True, True, selector="dense",
                                               solver="exact")
        grads = torch.autograd.grad((o.float().sum(), final.sum()), leaves)
    assert [(d.shape, d.dtype) for d in grads] == [(x.shape, x.dtype) for x in leaves]


def test_reference_backward_matches_the_token_recurrence():
    gen = torch.Generator().manual_seed(0)
    T, H, HV, K, V = 150, 2, 4, 16, 8
    q, k = torch.randn(1, T, H, K, generator=gen), torch.randn(1, T, H, K, generator=gen)
    v = torch.randn(1, T, HV, V, generator=gen)
    k = torch.nn.functional.normalize(k, dim=-1)
    g, beta = -torch.rand(1, T, HV, generator=gen), torch.rand(1, T, HV, generator=gen)
    s0 = torch.randn(3, HV, K, V, generator=gen)
    cu = torch.tensor([0, 70, 71, 150])
    ours = [x.double().requires_grad_() for x in (q, k, v, g, beta, s0)]
    ref = [x.double().requires_grad_() for x in (q, k, v, g, beta, s0)]
    o, S = _grad.packed_dense_recurrence(*ours[:5], 0.3, ours[5], cu, chunk=32)
    ro, rS = packed_recurrence(*ref[:5], 0.3, ref[5], cu)
    assert torch.allclose(o, ro, atol=1e-12) and torch.allclose(S, rS, atol=1e-12)
    wo, wS = torch.randn_like(ro), torch.randn_like(rS)
    mine = torch.autograd.grad((o * wo).sum() + (S * wS).sum(), ours)
    theirs = torch.autograd.grad((ro * wo).sum() + (rS * wS).sum(), ref)
    for a, b in zip(mine, theirs):
        assert torch.allclose(a, b, atol=1e-11)


@needs_library
def test_op_schema_and_unknown_names_fail_in_the_fake():
    schema = str(torch.ops.sgdn.chunk_gdn_fwd.default._schema)
    assert schema.startswith("sgdn::chunk_gdn_fwd(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta")
    mode = FakeTensorMode()
    q, k, v, g, beta = fake_inputs(mode, T=64)
    with mode, pytest.raises(sgdn.SgdnCudaError, match="selector 'nope'"):
        sgdn.chunk_gated_delta_rule(q, k, v, g, beta, return_events=True, selector="nope")
