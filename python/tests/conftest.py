"""The tests import the package from this checkout (python/), so they run without `pip install .`; the
library is $SGDN_CUDA_LIB or a build of this checkout (sgdn._capi.library_candidates)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
