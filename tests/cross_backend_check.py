#!/usr/bin/env python3
"""Compares the runs of one config on two backends (SPEC §12): each run of the second file against the run of
the first with the same configuration but the backend. Outputs must agree to TOL (relative L2) and event masks
must be equal wherever the scores are not tied."""
import sys

import h5py
import numpy as np

IGNORED = {"backend", "run.backend", "run.precision", "run.timing_repeats", "label", "written"}


def runs(f):
    out = {}
    for rid, r in f["runs"].items():
        key = tuple(sorted((k, str(v)) for k, v in r.attrs.items() if k not in IGNORED))
        out[key] = r
    return out


def main(cpu_path, gpu_path, tol):
    with h5py.File(cpu_path, "r") as fc, h5py.File(gpu_path, "r") as fg:
        cpu, gpu = runs(fc), runs(fg)
        if not gpu:
            raise SystemExit("cross_backend_check: no runs in " + gpu_path)
        worst = 0.0
        for key, rg in gpu.items():
            rc = cpu.get(key)
            if rc is None:
                raise SystemExit(f"cross_backend_check: no cpu run matches {dict(key)}")
            oc, og = rc["outputs/o"][()].astype(np.float64), rg["outputs/o"][()].astype(np.float64)
            err = np.linalg.norm(og - oc) / np.linalg.norm(oc)
            worst = max(worst, err)
            if not err <= tol:
                raise SystemExit(f"cross_backend_check: {rg.attrs['label']}: output error {err:.3e} > {tol}")
            mc, mg = rc["events/mask"][()], rg["events/mask"][()]
            sc = rc["events/score"][()]
            if not np.array_equal(mc, mg):
                # a differing event is acceptable only where its score ties another within float rounding
                diff = np.argwhere(mc != mg)
                for b, h, c in diff:
                    s = sc[b, h]
                    if np.sum(np.isclose(s, s[c], rtol=1e-5, atol=0)) < 2:
                        raise SystemExit(f"cross_backend_check: {rg.attrs['label']}: mask differs at "
                                         f"(b={b}, h={h}, chunk={c}) with an untied score")
        print(f"cross_backend_check: {len(gpu)} runs agree; worst output error {worst:.2e} (tol {tol})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
