"""Tests of data/capture/capture.py on tiny randomly initialised Qwen3-Next / Qwen3.5 models (no weights, no network).

    python3 -m pytest -q data/capture/test_capture.py        # skipped when torch, transformers or h5py is missing

1. The captured q, k, v, g, beta (and scale) reproduce the layer: SPEC §2's token recurrence in float64 on the
   captured inputs matches what the layer's chunked kernel returned.
2. The file the command line writes is schema 1 and loads in `sgdn run` (kind = file); the exact solver with the
   dense selector gives output error ~1e-7. Needs the sgdn binary: $SGDN_BIN or build/bin/sgdn (else skipped).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
h5py = pytest.importorskip("h5py")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import capture  # noqa: E402

T = 150  # three chunks of 64, the last one short
KINDS = ["qwen3_next", "qwen3_5", "qwen3_5_moe"]


def reference(q, k, v, g, beta, scale, initial_state=None):
    """SPEC §2 in float64: S~ = e^g S; S = S~ + beta k (v - S~^T k)^T; o = scale S^T q. Value head h reads q/k
    head h // r."""
    q, k, v, g, beta = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g, beta))
    B, Tn, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    heads = np.arange(HV) // (HV // H)
    o = np.zeros((B, Tn, HV, V))
    for b in range(B):
        S = np.zeros((HV, K, V)) if initial_state is None else np.array(initial_state[b], dtype=np.float64)
        qb, kb = q[b][:, heads], k[b][:, heads]  # [T, HV, K]
        for t in range(Tn):
            S *= np.exp(g[b, t])[:, None, None]
            pred = np.einsum("hk,hkv->hv", kb[t], S)
            S += beta[b, t][:, None, None] * kb[t][:, :, None] * (v[b, t] - pred)[:, None, :]
            o[b, t] = scale * np.einsum("hk,hkv->hv", qb[t], S)
    return o


def rel_err(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def tiny_model(kind, device="cpu"):
    try:
        model, config, _ = capture.build_model(None, kind, True, "float32", device)
    except (ImportError, AttributeError) as e:  # an older transformers without this architecture
        pytest.skip(f"transformers {transformers.__version__} has no {kind}: {e}")
    return model, config


def capture_all(model, token_ids, kernel="torch", layers=None):
    recs = []
    done = capture.run_capture(model, token_ids, layers, recs.append, keep_outputs=True, kernel=kernel,
                               stop_early=False)
    return recs, done


@pytest.mark.parametrize("kind", KINDS)
def test_captured_inputs_reproduce_the_layer_kernel(kind):
    model, config = tiny_model(kind)
    token_ids = np.random.default_rng(1).integers(0, config.vocab_size, size=(1, T))
    recs, done = capture_all(model, token_ids)
    gdn = list(capture.gdn_layers(model))
    assert done == gdn and len(gdn) >= 2
    H, HV = config.linear_num_key_heads, config.linear_num_value_heads
    K, V = config.linear_key_head_dim, config.linear_value_head_dim
    for rec in recs:
        assert rec.q.shape == (1, T, H, K) and rec.k.shape == (1, T, H, K)  # stored un-repeated (GVA)
        assert rec.v.shape == (1, T, HV, V) and rec.g.shape == (1, T, HV) and rec.beta.shape == (1, T, HV)
        assert all(x.dtype == np.float32 for x in (rec.q, rec.k, rec.v, rec.g, rec.beta))
        assert rec.scale == pytest.approx(K ** -0.5)
        assert (rec.g <= 0).all() and (rec.beta >= 0).all() and (rec.beta <= 1).all()
        # l2norm applied (x * rsqrt(|x|^2 + 1e-6): just under 1 where the tiny random model's |x| is small)
        norms = np.linalg.norm(np.concatenate([rec.q, rec.k], axis=2), axis=-1)
        assert norms.max() <= 1 + 1e-5 and np.median(norms) > 0.95
        assert rec.attrs["qk_l2norm_in_kernel"] == 1
        ref = reference(rec.q, rec.k, rec.v, rec.g, rec.beta, rec.scale, rec.initial_state)
        err = rel_err(rec.output, ref)
        print(f"{kind} layer {rec.layer}: kernel output vs float64 recurrence on the captured inputs: {err:.2e} "
              f"(g in [{rec.g.min():.3f}, {rec.g.max():.3f}])")
        assert err < 1e-4, f"{kind} layer {rec.layer}: relative error {err:.3e}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_capture_on_cuda_with_the_default_kernel(kind):
    """kernel = auto on the GPU: FLA's kernel when installed (TF32-level error), else transformers' PyTorch one."""
    model, config = tiny_model(kind, device="cuda")
    token_ids = np.random.default_rng(2).integers(0, config.vocab_size, size=(1, T))
    recs, _ = capture_all(model, token_ids, kernel="auto")
    for rec in recs:
        ref = reference(rec.q, rec.k, rec.v, rec.g, rec.beta, rec.scale, rec.initial_state)
        err = rel_err(rec.output, ref)
        fla = "fla" in rec.attrs["kernel"].lower()
        print(f"cuda {kind} layer {rec.layer} kernel {rec.attrs['kernel']}: {err:.2e}")
        assert err < (2e-2 if fla else 1e-4)


def test_gva_heads_repeated_before_the_call_are_stored_unrepeated():
    """Older transformers repeat q/k to HV heads before calling the kernel; the capture undoes it."""

    class FakeLayer:
        layer_idx, num_k_heads = 7, 2

    B, Tn, H, HV, K = 1, 5, 2, 4, 8
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, Tn, H, K, generator=gen), torch.randn(B, Tn, H, K, generator=gen)
    v = torch.randn(B, Tn, HV, K, generator=gen)
    g, beta = -torch.rand(B, Tn, HV, generator=gen), torch.rand(B, Tn, HV, generator=gen)
    cap = capture.Capturer.__new__(capture.Capturer)
    cap.keep_outputs = False
    rec = cap._record(FakeLayer(), (q.repeat_interleave(2, 2), k.repeat_interleave(2, 2), v),
                      dict(g=g, beta=beta, use_qk_l2norm_in_kernel=True), (v, None), reference)
    assert rec.q.shape == (B, Tn, H, K) and rec.attrs["qk_heads_deduplicated"] == 1
    np.testing.assert_allclose(rec.q, capture._l2norm(q).numpy(), rtol=0, atol=0)
    # heads that are not copies are kept as they are (H = HV)
    rec = cap._record(FakeLayer(), (torch.randn(B, Tn, HV, K), torch.randn(B, Tn, HV, K), v),
                      dict(g=g, beta=beta, use_qk_l2norm_in_kernel=True), (v, None), reference)
    assert rec.q.shape == (B, Tn, HV, K) and rec.attrs["qk_heads_deduplicated"] == 0


def test_layer_that_is_not_gated_deltanet_is_an_error():
    model, config = tiny_model("qwen3_next")
    with pytest.raises(capture.CaptureError, match="not GatedDeltaNet layers"):
        capture.run_capture(model, np.zeros((1, 8), np.int64), [1], lambda rec: None)


def sgdn_binary():
    """$SGDN_BIN, else build/bin/sgdn or build-cuda/bin/sgdn, if it exists and runs here (`sgdn keys`)."""
    candidates = [os.environ["SGDN_BIN"]] if os.environ.get("SGDN_BIN") else [
        os.path.join(REPO, d, "bin", "sgdn") for d in ("build", "build-cuda")]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            try:
                if subprocess.run([path, "keys"], capture_output=True, timeout=60).returncode == 0:
                    return path
            except OSError:
                pass
    return None


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_command_line_file_is_schema_1_and_loads_in_sgdn(kind, tmp_path):
    out = tmp_path / "acts.h5"
    cmd = [sys.executable, os.path.join(HERE, "capture.py"), "--tiny", kind, "--device", "cpu",
           "--random-tokens", str(T), "--seed", "3", "--layers", "0,2", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and not list(tmp_path.glob("*.tmp-*"))
    with h5py.File(out, "r") as f:
        assert int(f.attrs["schema_version"]) == 1 and f.attrs["sgdn_version"] and f.attrs["created"]
        assert sorted(f["workloads"]) == ["layer00", "layer02"]
        assert f["capture/token_ids"].shape == (1, T)
        for wid in f["workloads"]:
            inputs = f[f"workloads/{wid}/inputs"]
            for name in ("q", "k", "v", "g", "beta"):
                assert inputs[name].dtype == np.float32 and inputs[name].shape[:2] == (1, T)
            a = inputs.attrs
            assert a["generator"] == "capture" and int(a["layer"]) == int(wid[5:]) and int(a["tokens"]) == T
            assert float(a["scale"]) == pytest.approx(32 ** -0.5)
            assert "L2-normalised" in a["qk_l2norm"] and a["transformers_version"] == transformers.__version__
            assert a["model_dtype"] == "float32" and len(a["token_ids_sha256"]) == 64

    sgdn = sgdn_binary()
    if sgdn is None:
        pytest.skip("no runnable sgdn binary (set SGDN_BIN, or build build/bin/sgdn)")
    ini = tmp_path / "capture.ini"
    ini.write_text(f"[workload]\nkind = file\npath = {out}\n[run]\nbackend = cpu\nprecision = float32\n"
                   "chunk = 64\n[solver]\nname = exact\n[selector]\nname = dense\n")
    res = tmp_path / "run.h5"
    proc = subprocess.run([sgdn, "run", str(ini), "--out", str(res)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with h5py.File(res, "r") as f:
        errors = {f[f"runs/{r}"].attrs["workload"]: float(f[f"runs/{r}/metrics"].attrs["output_error"])
                  for r in f["runs"]}
    print(f"sgdn exact+dense float32 on captured {kind}: output error {errors}")
    assert len(errors) == 2 and all(e < 1e-5 for e in errors.values()), errors


def test_capture_leaves_the_model_output_unchanged():
    model, config = tiny_model("qwen3_5")
    ids = torch.as_tensor(np.random.default_rng(4).integers(0, config.vocab_size, size=(1, 70)))
    with torch.no_grad():
        before = model(input_ids=ids, use_cache=False).logits
    capture_all(model, ids.numpy())
    with torch.no_grad():
        after = model(input_ids=ids, use_cache=False).logits
    recs = []
    with torch.no_grad():
        capturer = capture.Capturer(model, None, recs.append, stop_early=False)
        with capturer:
            during = model(input_ids=ids, use_cache=False).logits
    assert len(recs) == 2
    assert torch.equal(before, after) and torch.equal(before, during)
