#!/usr/bin/env python3
"""Opens an experiment file with h5py and checks names, shapes and dtypes against SPEC §10 (schema 1)."""
import sys

import h5py
import numpy as np


def check(cond, what):
    if not cond:
        raise SystemExit(f"h5py_check: {what}")


def main(path):
    with h5py.File(path, "r") as f:
        check(int(f.attrs["schema_version"]) == 1, "schema_version != 1")
        check("sgdn_version" in f.attrs and "created" in f.attrs, "root attrs lack sgdn_version / created")
        shapes = {}
        for wid, w in f["workloads"].items():
            inp = w["inputs"]
            q, k, v, g, beta = (inp[n] for n in ("q", "k", "v", "g", "beta"))
            for d in (q, k, v, g, beta):
                check(d.dtype == np.float32, f"{d.name} is {d.dtype}, not float32")
            B, T, H, K = q.shape
            HV, V = v.shape[2], v.shape[3]
            check(k.shape == q.shape, f"{k.name} shape {k.shape}")
            check(v.shape == (B, T, HV, V) and HV % H == 0, f"{v.name} shape {v.shape}")
            check(g.shape == (B, T, HV) and beta.shape == (B, T, HV), "g / beta shapes")
            check(np.all(g[()] <= 0), "g > 0 stored")
            check(isinstance(inp.attrs["generator"], str), "inputs attrs lack the generator as a string")
            if "exact" in w:  # absent when a sweep runs without the reference (run.reference = false)
                o = w["exact/o"]
                check(o.dtype == np.float32 and o.shape == (B, T, HV, V), f"{o.name} {o.dtype} {o.shape}")
            shapes[wid] = (B, T, H, HV, K, V)
        check(len(f["runs"]) > 0, "no runs")
        for rid, r in f["runs"].items():
            wid = r.attrs["workload"]
            check(wid in shapes, f"run {rid} names unknown workload {wid}")
            B, T, H, HV, K, V = shapes[wid]
            C = int(r.attrs["run.chunk"])
            N = -(-T // C)
            units = H if r.attrs["selector.granularity"] == "pair" else HV
            for key in ("solver.name", "selector.name", "backend", "run.group", "written"):
                check(key in r.attrs, f"run {rid} lacks attr {key}")
            written = r.attrs["written"].split(",")
            if "outputs/o" in written:
                check(r["outputs/o"].dtype == np.float32 and r["outputs/o"].shape == (B, T, HV, V), "outputs/o")
            check(r["events/mask"].dtype == np.uint8 and r["events/mask"].shape == (B, HV, N), "events/mask")
            check(r["events/score"].dtype == np.float32 and r["events/score"].shape == (B, HV, N), "events/score")
            check(r["events/budget"].dtype == np.int32 and r["events/budget"].shape == (B, units), "events/budget")
            mask = r["events/mask"][()]
            check(set(np.unique(mask)) <= {0, 1}, "mask values")
            if units == H and HV > H:
                rr = HV // H
                check(np.all(mask.reshape(B, H, rr, N) == mask.reshape(B, H, rr, N)[:, :, :1, :]), "pair mask")
            check(np.all(r["events/budget"][()] == mask.reshape(B, units, -1, N).sum(axis=(2, 3)) //
                         (HV // units)), "budget != kept events")
            if "states/snapshots" in written:
                s, idx = r["states/snapshots"], r["states/snapshot_index"]
                check(s.dtype == np.float32 and s.shape[1:] == (K, V), "states/snapshots")
                check(idx.dtype == np.int32 and idx.shape == (s.shape[0], 3), "states/snapshot_index")
                check(s.shape[0] == int(mask.sum()) + B * HV, "one snapshot per selected event plus S0")
            m = r["metrics"]
            keys = ["retention", "flops_ratio"]
            # What the run's settings promise is there: the exact reference (run.reference) and, with it, the
            # state error (run.state_error), on either backend.
            reference = r.attrs.get("run.reference") == "true"
            if reference:
                check("exact" in f["workloads"][wid], f"run {rid} has run.reference but its workload no exact/o")
                keys.append("output_error")
                check(m["output_error_per_head"].shape == (HV,), "output_error_per_head")
            if "needle" in f["workloads"][wid]:
                keys.append("needle_accuracy")
                check(m["needle_correct"].dtype == np.int32, "needle_correct")
            for key in keys:
                check(np.isscalar(m.attrs[key]) and np.isfinite(m.attrs[key]), f"metrics attr {key}")
            if reference and r.attrs.get("run.state_error") == "true":
                check("state_error_per_chunk" in m, f"run {rid} has run.state_error but no state error")
                check(m["state_error_per_chunk"].shape == (N,), "state_error_per_chunk")
                check(m["state_error"].shape == (B, HV, N), "state_error")
    print(f"h5py_check: {path}: {len(shapes)} workloads, runs OK")


if __name__ == "__main__":
    main(sys.argv[1])
