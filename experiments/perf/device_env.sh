# Sourced by the device scripts (device_bench.sh, device_tests.sh, compare_libs.sh, profile.sh): $OUT created
# (default ./device-logs), the carried build's libraries (build-cuda/dist/lib) on the loader path, FLA on its
# native Triton path, and the carried FLA wheel (.whl/, if any) installed into /tmp/site, on PYTHONPATH.
OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT"
DIST=$PWD/build-cuda/dist
export LD_LIBRARY_PATH=$DIST/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FLA_FLASH_QLA=0 PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
