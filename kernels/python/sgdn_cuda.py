"""SparseGDN's CUDA backend from PyTorch through the C ABI (kernels/sgdn_cuda.h): the module of the Python
package `sgdn` (python/sgdn/_capi.py), importable from here without installing the package.

    import sgdn_cuda
    o, final_state, events = sgdn_cuda.chunk_sparse_gdn(q, k, v, g, beta, cu_seqlens=...)

The FLA-compatible call is sgdn.chunk_gated_delta_rule (python/sgdn/__init__.py).
"""
import os
import sys

_PACKAGE_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python")
if os.path.isdir(os.path.join(_PACKAGE_ROOT, "sgdn")) and _PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, _PACKAGE_ROOT)

from sgdn._capi import *  # noqa: E402,F401,F403
from sgdn._capi import (  # noqa: E402,F401
    ABI_VERSION, BFLOAT16, FLOAT32, GRANULARITIES, SCORES, SELECTORS, SOLVERS, STATUS, Config, Tensors,
    _check, check_inputs, launch, library_candidates)
