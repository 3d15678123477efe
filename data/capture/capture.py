#!/usr/bin/env python3
"""Capture real Gated DeltaNet activations from Hugging Face transformers into a SparseGDN workload file.

Hooks the GatedDeltaNet layers of Qwen3-Next (`qwen3_next`) and Qwen3.5 (`qwen3_5`, `qwen3_5_moe`), runs one
prompt through the model, and stores, for every chosen layer, exactly what the layer hands to its chunked
kernel (`chunk_gated_delta_rule`) as an HDF5 file in schema version 1 (docs/hdf5_schema.md):

    /                               attrs schema_version = 1, sgdn_version = "capture-0.1", created (UTC ISO 8601)
    /workloads/layerNN/inputs/q, k  [B, T, H, K]   float32, L2-normalised as the kernel does (eps 1e-6)
    /workloads/layerNN/inputs/v     [B, T, HV, V]  float32
    /workloads/layerNN/inputs/g     [B, T, HV]     float32, log decay (<= 0)
    /workloads/layerNN/inputs/beta  [B, T, HV]     float32
    /workloads/layerNN/inputs/initial_state [B, HV, K, V]  only when the kernel got one
    /workloads/layerNN/inputs attrs generator = "capture", scale, model, layer, token count, hashes, ...
    /capture/token_ids              [B, T] int64   the prompt's token ids

Then `sgdn run` with `[workload] kind = file, path = acts.h5` runs on the captured layers.

Usage:
    python3 data/capture/capture.py --model /path/to/Qwen3-Next --prompt-file prompt.txt \
        [--layers 0,4,8] [--max-tokens N] --out acts.h5
    python3 data/capture/capture.py --tiny qwen3_next --random-tokens 300 --out /tmp/tiny.h5   # no weights

The capture point is the call into the chunked kernel: the layer module's global `torch_chunk_gated_delta_rule`
(transformers >= 5) and, for older versions, the layer's `chunk_gated_delta_rule` attribute are wrapped while
the forward pass runs; a forward pre-hook on every GatedDeltaNet module says which layer is calling.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

CAPTURE_VERSION = "capture-0.1"
L2NORM_EPS = 1e-6  # transformers' l2norm (and FLA's) in the kernel: x * rsqrt(sum(x^2) + 1e-6)
KERNEL_GLOBALS = ("torch_chunk_gated_delta_rule", "chunk_gated_delta_rule")
TINY_KINDS = ("qwen3_next", "qwen3_5", "qwen3_5_moe")


class CaptureError(RuntimeError):
    pass


class _StopForward(Exception):
    """Raised inside the model once every requested layer is captured, to skip the rest of the forward pass."""


# ----------------------------------------------------------------------------------------------------------------
# The capture itself
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class LayerCapture:
    layer: int
    q: np.ndarray  # [B, T, H, K] float32, L2-normalised
    k: np.ndarray
    v: np.ndarray  # [B, T, HV, V]
    g: np.ndarray  # [B, T, HV]
    beta: np.ndarray
    scale: float
    initial_state: np.ndarray | None = None
    output: np.ndarray | None = None  # what the kernel returned, [B, T, HV, V] float32 (keep_outputs only)
    attrs: dict[str, Any] = field(default_factory=dict)


def is_gdn_module(module) -> bool:
    name = type(module).__name__
    return name.endswith("GatedDeltaNet") and hasattr(module, "layer_idx")


def gdn_layers(model) -> dict[int, Any]:
    """The GatedDeltaNet modules of `model`, by their layer index."""
    layers = {}
    for _, module in model.named_modules():
        if is_gdn_module(module):
            layers[int(module.layer_idx)] = module
    return dict(sorted(layers.items()))


def _unwrap(fn: Callable) -> Callable:
    seen = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        fn = fn.__wrapped__
    return fn


def _l2norm(x):
    import torch

    x = x.to(torch.float32)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2NORM_EPS)


def _to_numpy(x) -> np.ndarray:
    import torch

    return x.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def _pick(args, kwargs, position, names):
    if len(args) > position:
        return args[position]
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return None


class Capturer:
    """Wraps the chunked GDN kernel of every GatedDeltaNet layer of `model` while used as a context manager.

    sink(LayerCapture) is called once per captured layer call. kernel = "auto" runs what transformers chose (FLA
    when installed), except on CPU tensors where it runs transformers' PyTorch reference; "torch" always runs the
    PyTorch reference."""

    def __init__(self, model, layers: list[int] | None, sink: Callable[[LayerCapture], None],
                 keep_outputs: bool = False, kernel: str = "auto", stop_early: bool = True):
        self.model = model
        self.available = gdn_layers(model)
        if not self.available:
            raise CaptureError(f"no GatedDeltaNet layers found in {type(model).__name__} (looked for modules whose "
                               "class name ends in 'GatedDeltaNet' and that have a layer_idx)")
        if layers is None:
            layers = list(self.available)
        unknown = [i for i in layers if i not in self.available]
        if unknown:
            raise CaptureError(f"layers {unknown} are not GatedDeltaNet layers; the model's GatedDeltaNet layers "
                               f"are {list(self.available)}")
        self.wanted = sorted(set(layers))
        self.sink = sink
        self.keep_outputs = keep_outputs
        if kernel not in ("auto", "torch"):
            raise CaptureError(f"kernel must be auto or torch, got {kernel!r}")
        self.kernel = kernel
        self.stop_early = stop_early
        self.current: Any = None
        self.done: set[int] = set()
        self._in_kernel = False
        self._undo: list[Callable[[], None]] = []

    # -- patching --------------------------------------------------------------------------------------------
    def __enter__(self):
        import torch  # noqa: F401

        modules = {}
        for module in self.available.values():
            modules[type(module).__module__] = sys.modules[type(module).__module__]
        for mod in modules.values():
            torch_ref = getattr(mod, "torch_chunk_gated_delta_rule", None)
            torch_ref = _unwrap(torch_ref) if torch_ref is not None else None
            for name in KERNEL_GLOBALS:
                orig = getattr(mod, name, None)
                if callable(orig):
                    setattr(mod, name, self._wrap(orig, torch_ref))
                    self._undo.append(lambda mod=mod, name=name, orig=orig: setattr(mod, name, orig))
        for module in self.available.values():
            mod = sys.modules[type(module).__module__]
            torch_ref = getattr(mod, "torch_chunk_gated_delta_rule", None)
            torch_ref = _unwrap(torch_ref) if torch_ref is not None else None
            # transformers 4.x: the layer calls self.chunk_gated_delta_rule (an instance attribute)
            orig = module.__dict__.get("chunk_gated_delta_rule")
            if callable(orig):
                module.chunk_gated_delta_rule = self._wrap(orig, torch_ref)
                self._undo.append(lambda module=module, orig=orig: setattr(module, "chunk_gated_delta_rule", orig))
            pre = module.register_forward_pre_hook(lambda m, args: self._enter_layer(m))
            post = module.register_forward_hook(lambda m, args, out: self._leave_layer(m))
            self._undo.append(pre.remove)
            self._undo.append(post.remove)
        return self

    def __exit__(self, *exc):
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.current = None
        return exc[0] is _StopForward  # swallow the early stop

    def _enter_layer(self, module):
        self.current = module

    def _leave_layer(self, module):
        self.current = None

    def _wrap(self, orig: Callable, torch_ref: Callable | None) -> Callable:
        capturer = self

        def capturing_chunk_gated_delta_rule(*args, **kwargs):
            module = capturer.current
            if module is None or capturer._in_kernel:
                return orig(*args, **kwargs)
            q = _pick(args, kwargs, 0, ("query", "q"))
            impl = orig
            if torch_ref is not None and (capturer.kernel == "torch" or (q is not None and q.device.type == "cpu")):
                impl = torch_ref
            capturer._in_kernel = True
            try:
                result = impl(*args, **kwargs)
            finally:
                capturer._in_kernel = False
            layer = int(module.layer_idx)
            if layer in capturer.wanted and layer not in capturer.done:
                capturer.done.add(layer)
                capturer.sink(capturer._record(module, args, kwargs, result, impl))
                if capturer.stop_early and capturer.done >= set(capturer.wanted):
                    raise _StopForward()
            return result

        capturing_chunk_gated_delta_rule.__wrapped_original__ = orig
        return capturing_chunk_gated_delta_rule

    # -- recording -------------------------------------------------------------------------------------------
    def _record(self, module, args, kwargs, result, impl) -> LayerCapture:
        import torch

        q = _pick(args, kwargs, 0, ("query", "q"))
        k = _pick(args, kwargs, 1, ("key", "k"))
        v = _pick(args, kwargs, 2, ("value", "v"))
        g = _pick(args, kwargs, 3, ("g",))
        beta = _pick(args, kwargs, 4, ("beta",))
        if any(x is None for x in (q, k, v, g, beta)):
            raise CaptureError(f"layer {module.layer_idx}: could not find q, k, v, g, beta in the kernel call "
                               f"(positional {len(args)}, keywords {sorted(kwargs)})")
        if kwargs.get("cu_seqlens") is not None:
            raise CaptureError("packed variable-length batches (cu_seqlens) are not supported; capture one prompt")
        if kwargs.get("head_first"):
            raise CaptureError("head_first layout is not supported")
        use_l2 = bool(kwargs.get("use_qk_l2norm_in_kernel", False))
        initial_state = kwargs.get("initial_state")  # the layers pass it (and scale) by keyword
        B, T, Hq, K = q.shape
        HV = v.shape[2]
        scale = kwargs.get("scale")
        scale = float(scale) if scale is not None else float(K) ** -0.5

        model_dtype = str(q.dtype).replace("torch.", "")
        qn = _l2norm(q) if use_l2 else q.to(torch.float32)
        kn = _l2norm(k) if use_l2 else k.to(torch.float32)

        # GVA: the kernel repeats q/k heads to HV itself (transformers >= 5); older layers repeat before the call.
        # Store un-repeated [B, T, H, K] when the heads are repeat_interleave copies (value head h reads h // r).
        deduplicated = False
        Hk = int(getattr(module, "num_k_heads", Hq))
        if Hq == HV and Hk < HV and HV % Hk == 0:
            r = HV // Hk
            q5, k5 = q.reshape(B, T, Hk, r, K), k.reshape(B, T, Hk, r, K)
            if torch.equal(q5, q5[:, :, :, :1].expand_as(q5)) and torch.equal(k5, k5[:, :, :, :1].expand_as(k5)):
                qn = qn.reshape(B, T, Hk, r, K)[:, :, :, 0]
                kn = kn.reshape(B, T, Hk, r, K)[:, :, :, 0]
                deduplicated = True

        out = result[0] if isinstance(result, (tuple, list)) else result
        rec = LayerCapture(
            layer=int(module.layer_idx),
            q=_to_numpy(qn), k=_to_numpy(kn), v=_to_numpy(v), g=_to_numpy(g), beta=_to_numpy(beta),
            scale=scale,
            initial_state=_to_numpy(initial_state) if initial_state is not None else None,
            output=_to_numpy(out) if self.keep_outputs else None,
        )
        impl_name = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', getattr(impl, '__name__', '?'))}"
        rec.attrs = {
            "layer": rec.layer,
            "layer_class": type(module).__name__,
            "model_dtype": model_dtype,
            "g_dtype": str(g.dtype).replace("torch.", ""),
            "beta_dtype": str(beta.dtype).replace("torch.", ""),
            "kernel": impl_name,
            "qk_l2norm": ("applied: q and k are L2-normalised as the kernel does with use_qk_l2norm_in_kernel=True "
                          f"(x * rsqrt(sum(x^2) + {L2NORM_EPS:g}) in float32); do not normalise again")
                         if use_l2 else "not applied: the kernel was called with use_qk_l2norm_in_kernel=False",
            "qk_l2norm_in_kernel": int(use_l2),
            "qk_l2norm_eps": L2NORM_EPS if use_l2 else 0.0,
            "qk_heads_in_kernel_call": int(Hq),
            "qk_heads_deduplicated": int(deduplicated),
        }
        return rec


# ----------------------------------------------------------------------------------------------------------------
# The HDF5 file (schema 1)
# ----------------------------------------------------------------------------------------------------------------


def utc_now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class WorkloadFileWriter:
    """Writes workloads as they come to `path + '.tmp-<pid>'` and renames it to `path` in close()."""

    def __init__(self, path: str, common_attrs: dict[str, Any], compression: str | None = "gzip"):
        import h5py

        self.path = path
        self.tmp = f"{path}.tmp-{os.getpid()}"
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.file = h5py.File(self.tmp, "w")
        self.file.attrs["schema_version"] = np.int64(1)
        self.file.attrs["sgdn_version"] = CAPTURE_VERSION
        self.file.attrs["created"] = utc_now_iso()
        self.file.attrs["generator"] = "capture"
        self.common = dict(common_attrs)
        self.compression = compression
        self.ids: list[str] = []

    def _dataset(self, group, name, data):
        kw = {}
        if self.compression == "gzip" and data.size >= 1024:
            kw = dict(compression="gzip", compression_opts=4, shuffle=True, chunks=True)
        group.create_dataset(name, data=data, **kw)

    def add(self, rec: LayerCapture, workload_id: str | None = None) -> str:
        wid = workload_id or f"layer{rec.layer:02d}"
        if f"workloads/{wid}" in self.file:
            raise CaptureError(f"workload {wid} is written twice")
        inputs = self.file.create_group(f"workloads/{wid}/inputs")
        for name in ("q", "k", "v", "g", "beta"):
            self._dataset(inputs, name, np.ascontiguousarray(getattr(rec, name), dtype=np.float32))
        if rec.initial_state is not None:
            self._dataset(inputs, "initial_state", np.ascontiguousarray(rec.initial_state, dtype=np.float32))
        B, T, H, K = rec.q.shape
        HV, V = rec.v.shape[2], rec.v.shape[3]
        attrs: dict[str, Any] = {"generator": "capture"}
        attrs.update(self.common)
        attrs.update(rec.attrs)
        attrs.update({"scale": float(rec.scale), "tokens": int(T), "batch": int(B), "qk_heads": int(H),
                      "v_heads": int(HV), "key_dim": int(K), "value_dim": int(V)})
        beta_max = float(rec.beta.max()) if rec.beta.size else 0.0
        if beta_max > 1.0:
            attrs["allow_negative_eigenvalues"] = np.int64(1)
        for key, value in attrs.items():
            if isinstance(value, str):
                value = str(value)  # a plain str: h5py writes a variable-length UTF-8 string
            elif isinstance(value, (bool, np.bool_)):
                value = np.int64(value)
            elif isinstance(value, (int, np.integer)):
                value = np.int64(value)
            elif isinstance(value, (float, np.floating)):
                value = np.float64(value)
            else:
                value = json.dumps(value)
            inputs.attrs[key] = value
        self.ids.append(wid)
        self.file.flush()
        return wid

    def add_token_ids(self, token_ids: np.ndarray):
        self.file.create_dataset("capture/token_ids", data=np.asarray(token_ids, dtype=np.int64))

    def close(self):
        self.file.attrs["workloads"] = ",".join(self.ids)
        self.file.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        try:
            self.file.close()
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)


# ----------------------------------------------------------------------------------------------------------------
# Models and prompts
# ----------------------------------------------------------------------------------------------------------------


def tiny_config(kind: str, layers: int = 3, hidden: int = 64, qk_heads: int = 2, v_heads: int = 4,
                head_dim: int = 32, vocab: int = 512):
    """A small config of the real architecture (random weights, no download): layer 1 is full attention, the
    others GatedDeltaNet."""
    layer_types = ["full_attention" if i % 4 == 1 else "linear_attention" for i in range(layers)]
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, linear_num_key_heads=qk_heads, linear_num_value_heads=v_heads,
                  linear_key_head_dim=head_dim, linear_value_head_dim=head_dim, linear_conv_kernel_dim=4,
                  max_position_embeddings=4096, layer_types=layer_types)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
    if kind == "qwen3_next":
        from transformers import Qwen3NextConfig

        return Qwen3NextConfig(intermediate_size=128, decoder_sparse_step=1, **common, **moe)
    if kind == "qwen3_5":
        from transformers import Qwen3_5TextConfig

        return Qwen3_5TextConfig(intermediate_size=128, **common)
    if kind == "qwen3_5_moe":
        from transformers import Qwen3_5MoeTextConfig

        return Qwen3_5MoeTextConfig(**common, **moe)
    raise CaptureError(f"unknown tiny model {kind!r}; known: {', '.join(TINY_KINDS)}")


def init_decay_like_trained(model, seed: int = 0):
    """Random weights only: draws each GatedDeltaNet layer's decay parameters as SPEC §9's random workload does
    (per value head A log-uniform in [1, 16], softplus(dt_bias) log-uniform in [1e-3, 1e-1]), the range of
    trained Qwen3-Next-style layers, so heads range from short to long memory. transformers' own init
    (dt_bias = 1) makes every head forget within a few tokens."""
    import torch

    gen = torch.Generator().manual_seed(seed + 12345)
    with torch.no_grad():
        for module in gdn_layers(model).values():
            n = module.A_log.numel()
            log_a = torch.rand(n, generator=gen, dtype=torch.float64) * np.log(16.0)
            dt = torch.exp(np.log(1e-3) + torch.rand(n, generator=gen, dtype=torch.float64) * np.log(100.0))
            module.A_log.copy_(log_a.to(module.A_log.dtype))
            module.dt_bias.copy_(torch.log(torch.expm1(dt)).to(module.dt_bias.dtype))  # softplus^-1


def _torch_dtype(name: str):
    import torch

    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name == "auto":
        return "auto"
    if name not in table:
        raise CaptureError(f"--dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return table[name]


def build_model(model_path: str | None, tiny: str | None, random_init: bool, dtype: str = "auto",
                device: str = "cpu", device_map: str | None = None, seed: int = 0):
    """Returns (model, config, description). Random weights for `tiny` or `random_init` (config only)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    torch_dtype = _torch_dtype(dtype)
    if tiny or random_init:
        torch.manual_seed(seed)
        if tiny:
            config = tiny_config(tiny)
            name = f"tiny-{tiny} (random init)"
        else:
            config = AutoConfig.from_pretrained(model_path)
            name = f"{model_path} (config only, random init)"
        make_dtype = torch.float32 if torch_dtype == "auto" else torch_dtype
        model = None
        for cls in (AutoModelForCausalLM, AutoModel):
            try:
                try:
                    model = cls.from_config(config, dtype=make_dtype)
                except TypeError:  # transformers < 4.56 calls it torch_dtype
                    model = cls.from_config(config, torch_dtype=make_dtype)
                break
            except (ValueError, KeyError):
                continue
        if model is None:
            raise CaptureError(f"no transformers model class for config {type(config).__name__}")
        init_decay_like_trained(model, seed)
        model = model.to(device)
    else:
        config = AutoConfig.from_pretrained(model_path)
        kw: dict[str, Any] = {"dtype": torch_dtype}
        if device_map:
            kw["device_map"] = device_map
        model = None
        errors = []
        for cls in (AutoModelForCausalLM, getattr(transformers, "AutoModelForImageTextToText", None), AutoModel):
            if cls is None:
                continue
            try:
                model = cls.from_pretrained(model_path, **kw)
                break
            except (ValueError, KeyError) as e:  # config class not in this auto mapping
                errors.append(f"{cls.__name__}: {e}")
        if model is None:
            raise CaptureError("could not load the model:\n  " + "\n  ".join(errors))
        if not device_map:
            model = model.to(device)
        name = model_path
    model.eval()
    return model, config, name


def prompt_token_ids(args, model_path: str | None, vocab_size: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Token ids [1, T] and attributes saying where they came from."""
    info: dict[str, Any] = {}
    if args.token_ids:
        ids = [int(t) for t in args.token_ids.replace(",", " ").split()]
        info["prompt_source"] = "token ids given on the command line"
    elif args.random_tokens:
        rng = np.random.default_rng(args.seed)
        ids = rng.integers(0, vocab_size, size=args.random_tokens).tolist()
        info["prompt_source"] = f"random token ids (seed {args.seed})"
    else:
        if args.prompt_file:
            with open(args.prompt_file, "rb") as f:
                raw = f.read()
        elif args.prompt is not None:
            raw = args.prompt.encode("utf-8")
        else:
            raise CaptureError("give a prompt: --prompt-file, --prompt, --token-ids or --random-tokens")
        text = raw.decode("utf-8", errors="replace")
        info["prompt_sha256"] = hashlib.sha256(raw).hexdigest()
        info["prompt_chars"] = len(text)
        tokenizer = None
        tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
        has_tokenizer = bool(model_path) and os.path.isdir(model_path) and any(
            os.path.exists(os.path.join(model_path, f)) for f in tokenizer_files)
        if has_tokenizer and not args.byte_tokens:
            try:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(model_path)
            except Exception as e:  # noqa: BLE001 (no tokenizer files: fall back to bytes)
                print(f"capture: no tokenizer at {model_path} ({type(e).__name__}); using byte-level ids",
                      file=sys.stderr)
        ids = []
        if tokenizer is not None:
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            info["prompt_source"] = f"tokenizer {type(tokenizer).__name__}"
            if not ids and text:
                print("capture: the tokenizer gave no tokens; using byte-level ids", file=sys.stderr)
        if not ids:
            ids = [b % vocab_size for b in raw]
            info["prompt_source"] = "byte-level fallback (utf-8 bytes mod vocab size)"
    if args.max_tokens and len(ids) > args.max_tokens:
        ids = ids[: args.max_tokens]
    if not ids:
        raise CaptureError("the prompt has no tokens")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise CaptureError(f"token ids out of range [0, {vocab_size}): {bad[:5]}")
    arr = np.asarray([ids], dtype=np.int64)
    info["token_ids_sha256"] = hashlib.sha256(arr.tobytes()).hexdigest()
    return arr, info


def _vocab_size(config) -> int:
    for c in (config, getattr(config, "text_config", None)):
        if c is not None and getattr(c, "vocab_size", None):
            return int(c.vocab_size)
    raise CaptureError("the config has no vocab_size")


def run_capture(model, token_ids: np.ndarray, layers: list[int] | None, sink: Callable[[LayerCapture], None],
                keep_outputs: bool = False, kernel: str = "auto", stop_early: bool = True) -> list[int]:
    """Runs the prompt through `model`, calling sink for each captured layer; returns the captured layer ids."""
    import torch

    device = next(model.parameters()).device
    input_ids = torch.as_tensor(token_ids, dtype=torch.long, device=device)
    capturer = Capturer(model, layers, sink, keep_outputs=keep_outputs, kernel=kernel, stop_early=stop_early)
    with torch.no_grad(), capturer:
        model(input_ids=input_ids, use_cache=False)
    missing = sorted(set(capturer.wanted) - capturer.done)
    if missing:
        raise CaptureError(f"layers {missing} never called the chunked kernel (was a cache or the recurrent "
                           "decode path used?)")
    return sorted(capturer.done)


def parse_layers(text: str | None) -> list[int] | None:
    if not text or text == "all":
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("model")
    src.add_argument("--model", help="local model folder (config.json + weights), or a config for --random-init")
    src.add_argument("--random-init", "--config-only", dest="random_init", action="store_true",
                     help="build the model from --model's config with random weights (no weights are read)")
    src.add_argument("--tiny", choices=TINY_KINDS,
                     help="a small built-in config of this architecture with random weights (tests)")
    src.add_argument("--dtype", default="auto", help="auto (the checkpoint's), float32, bfloat16, float16")
    src.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, auto (cuda when available)")
    src.add_argument("--device-map", help="passed to from_pretrained (e.g. auto) for models larger than one GPU")
    src.add_argument("--kernel", default="auto", choices=("auto", "torch"),
                     help="auto: what transformers uses (FLA if installed; the PyTorch reference on CPU); "
                          "torch: always transformers' PyTorch reference")
    pr = p.add_argument_group("prompt")
    pr.add_argument("--prompt-file", help="a UTF-8 text file")
    pr.add_argument("--prompt", help="the prompt text itself")
    pr.add_argument("--token-ids", help="token ids, comma or space separated (no tokenizer needed)")
    pr.add_argument("--random-tokens", type=int, default=0, help="N random token ids (tests)")
    pr.add_argument("--byte-tokens", action="store_true", help="use UTF-8 bytes as ids even if a tokenizer exists")
    pr.add_argument("--max-tokens", type=int, default=0, help="truncate the prompt to N tokens")
    pr.add_argument("--seed", type=int, default=0, help="seed of --random-tokens and of random weights")
    out = p.add_argument_group("output")
    out.add_argument("--layers", help="GatedDeltaNet layer indices, e.g. 0,4,8 or 0-10 (default: all)")
    out.add_argument("--out", required=True, help="the HDF5 file to write")
    out.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    out.add_argument("--no-compression", action="store_true", help="store datasets uncompressed (default gzip)")
    args = p.parse_args(argv)

    if not args.tiny and not args.model:
        p.error("give --model PATH (or --tiny KIND for a random tiny model)")
    if os.path.exists(args.out) and not args.overwrite:
        p.error(f"{args.out} exists (use --overwrite)")

    import torch
    import transformers

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model, config, name = build_model(args.model, args.tiny, args.random_init, args.dtype, device,
                                          args.device_map, args.seed)
        token_ids, prompt_info = prompt_token_ids(args, None if (args.tiny or args.random_init) and not args.model
                                                  else args.model, _vocab_size(config))
        layers = parse_layers(args.layers)
        common = {
            "model": name,
            "model_type": str(getattr(config, "model_type", "?")),
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "capture_version": CAPTURE_VERSION,
            "device": str(device),
            "random_weights": int(bool(args.tiny or args.random_init)),
            **prompt_info,
        }
        writer = WorkloadFileWriter(args.out, common, None if args.no_compression else "gzip")
        try:
            writer.add_token_ids(token_ids)

            def sink(rec: LayerCapture):
                wid = writer.add(rec)
                print(f"capture: {wid}: q {list(rec.q.shape)} v {list(rec.v.shape)} scale {rec.scale:.6g} "
                      f"g in [{rec.g.min():.3g}, {rec.g.max():.3g}] beta in [{rec.beta.min():.3g}, "
                      f"{rec.beta.max():.3g}]", file=sys.stderr)

            done = run_capture(model, token_ids, layers, sink, kernel=args.kernel)
            writer.close()
        except BaseException:
            writer.abort()
            raise
    except CaptureError as e:
        print(f"capture: error: {e}", file=sys.stderr)
        return 2
    print(f"capture: wrote {len(done)} workloads ({token_ids.shape[1]} tokens, layers {done}) to {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
