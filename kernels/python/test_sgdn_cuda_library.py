"""What the Python module takes from the library rather than keeping its own copy: the strategy names and the
default configuration. Needs libsgdn_cuda_capi.so (which loads without a GPU), not a device:

    SGDN_CUDA_LIB=build/kernels/libsgdn_cuda_capi.so python3 -m pytest -q kernels/python/test_sgdn_cuda_library.py
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sgdn_cuda  # noqa: E402

SIZES = dict(num_seqs=1, total_tokens=128, qk_heads=2, v_heads=4, key_dim=64, value_dim=64)


@pytest.fixture(scope="module")
def lib():
    try:
        return sgdn_cuda.load_library()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def name_of(lib, family, code):
    return sgdn_cuda.strategy_names(lib, family)[code]


def test_names_come_from_the_library(lib):
    selectors = sgdn_cuda.strategy_names(lib, sgdn_cuda.SELECTORS)
    assert selectors[0] == "dense" and selectors[4] == "head_budget"  # the C ABI's codes
    assert sgdn_cuda.strategy_names(lib, sgdn_cuda.SCORES)[:3] == ["none", "update_norm", "survival"]
    assert sgdn_cuda.strategy_names(lib, sgdn_cuda.GRANULARITIES) == ["pair", "head"]
    assert "block_adjacent" in sgdn_cuda.strategy_names(lib, sgdn_cuda.SOLVERS)
    assert lib.sgdn_cuda_strategy_name(sgdn_cuda.SELECTORS, len(selectors)) is None
    assert lib.sgdn_cuda_strategy_count(99) == 0


def test_unset_keywords_take_the_library_defaults(lib):
    config = sgdn_cuda.make_config(lib, **SIZES)
    default = sgdn_cuda.default_config(lib)
    for field, _ in sgdn_cuda.Config._fields_:
        if field not in SIZES and field not in ("input_dtype", "output_dtype"):
            assert getattr(config, field) == getattr(default, field), field
    # The project's default configuration, as the sgdn program runs it.
    assert (name_of(lib, sgdn_cuda.SELECTORS, config.selector), name_of(lib, sgdn_cuda.SCORES, config.score),
            name_of(lib, sgdn_cuda.GRANULARITIES, config.head_granularity)) == ("head_budget", "update_norm", "pair")
    assert (config.chunk, config.group, config.solver_block, config.solver_band) == (64, 1, 16, 1)
    assert (config.rho, config.seed, config.min_per_head, config.max_fraction) == (0.29, 0, 0, 1.0)


def test_keywords_set_the_config(lib):
    dense = sgdn_cuda.make_config(lib, selector="dense", solver="exact", chunk=32, **SIZES)
    assert name_of(lib, sgdn_cuda.SELECTORS, dense.selector) == "dense"
    assert (dense.chunk, dense.solver_block, dense.solver_band) == (32, 32, -1)
    head = sgdn_cuda.make_config(lib, granularity="head", score="survival", band=0, **SIZES)
    assert head.head_granularity == 1 and name_of(lib, sgdn_cuda.SCORES, head.score) == "survival"
    assert head.solver_band == 0
    with pytest.raises(sgdn_cuda.SgdnCudaError, match="selector 'oracle'.*available: dense"):
        sgdn_cuda.make_config(lib, selector="oracle", **SIZES)


def test_library_search_order(monkeypatch):
    monkeypatch.setenv("SGDN_CUDA_LIB", "/from/env.so")
    candidates = sgdn_cuda.library_candidates("/given.so")
    assert candidates[:2] == ["/given.so", "/from/env.so"]
    assert candidates[2].endswith(os.path.join("python", "sgdn", "libsgdn_cuda_capi.so"))  # pip install .
    assert candidates[3].endswith(os.path.join("build", "kernels", "libsgdn_cuda_capi.so"))
    assert candidates[4].endswith(os.path.join("build-cuda", "kernels", "libsgdn_cuda_capi.so"))
