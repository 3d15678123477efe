#!/usr/bin/env python3
"""Opens an experiment file with h5py and checks names, shapes and dtypes against SPEC §10 (schema 2): every
dataset names its axes with dimension scales and has `units` and `description`; numbers, lists of numbers and
booleans are stored as numbers; xarray (through h5netcdf) opens a run's metrics with those names. The xarray
part runs where xarray and h5netcdf are installed (Debian: python3-xarray python3-h5netcdf)."""
import sys

import h5py
import numpy as np


def check(cond, what):
    if not cond:
        raise SystemExit(f"h5py_check: {what}")


def is_scale(d):
    return h5py.h5ds.is_scale(d.id)


def check_described(f):
    """Every dataset: a scale on every axis (the dataset's own group, named after the axis), units, description."""
    datasets = []
    f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
    check(datasets, "no datasets")
    for d in datasets:
        for attr in ("units", "description"):
            check(isinstance(d.attrs.get(attr), str) and d.attrs[attr], f"{d.name} lacks a string attr {attr}")
        if is_scale(d):
            check(d.ndim == 1 and np.array_equal(d[()], np.arange(d.shape[0])), f"scale {d.name} is not 0..n-1")
            continue
        for axis, dim in enumerate(d.dims):
            names = list(dim.keys())
            check(len(names) == 1 and names[0], f"{d.name} axis {axis} has no dimension scale ({names})")
            check(dim[0].parent == d.parent and dim[0].shape == (d.shape[axis],),
                  f"{d.name} axis {axis}: scale {dim[0].name} is not a scale of its group or has another length")
    return datasets


def check_numeric_attrs(run, inputs):
    for key, value in run.attrs.items():
        check(not (isinstance(value, str) and value in ("true", "false")), f"{run.name} attr {key} = '{value}'")
        if isinstance(value, str):
            words = value.split()
            numeric = all(w.lstrip("-").replace(".", "", 1).isdigit() for w in words)
            check(not (words and numeric), f"{run.name} attr {key} = '{value}' holds numbers as text")
    check(run.attrs["run.chunk"].dtype.kind == "i", "run.chunk is not an integer")
    check(run.attrs["run.reference"] in (0, 1), "run.reference is not 0/1")
    if "decay_scale_A" in inputs.attrs:
        check(isinstance(inputs.attrs["decay_scale_A"], np.ndarray) and inputs.attrs["decay_scale_A"].dtype.kind == "f",
              "decay_scale_A is not an array of numbers")


def check_xarray(path, rid):
    try:
        import xarray
    except ImportError:
        print("h5py_check: xarray not installed: the xarray check is skipped")
        return
    with xarray.open_dataset(path, engine="h5netcdf", group=f"runs/{rid}/metrics") as m:
        dims = set(m.dims)
        check(not any(d.startswith("phony_dim") for d in dims), f"xarray names the metrics' axes {dims}")
        check({"head", "bucket", "unit"} <= dims, f"xarray dims of the metrics: {dims}")
        check(m["output_error_per_head"].dims == ("head",), "output_error_per_head dims in xarray")
        check(m["output_error_per_head"].attrs["units"] == "1", "units in xarray")
        check(isinstance(m.attrs["output_error"], float), "scalar metrics as attributes in xarray")
        table = m["output_error_per_head"].to_dataframe()  # pandas, as docs/hdf5_schema.md shows
        check(list(table.index.names) == ["head"], f"pandas index {table.index.names}")


def main(path):
    with h5py.File(path, "r") as f:
        check(int(f.attrs["schema_version"]) == 2, "schema_version != 2")
        check_described(f)
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
            check([list(dim.keys())[0] for dim in q.dims] == ["batch", "token", "qk_head", "key"], "q's dims")
            check([list(dim.keys())[0] for dim in v.dims] == ["batch", "token", "head", "value"], "v's dims")
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
            check_numeric_attrs(r, f["workloads"][wid]["inputs"])
            check([list(dim.keys())[0] for dim in r["events/mask"].dims] == ["batch", "head", "chunk"],
                  "events/mask dims")
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
            reference = r.attrs.get("run.reference") == 1
            if reference and r.attrs.get("dump.level") != "analysis":
                check("exact" in f["workloads"][wid], f"run {rid} has run.reference but its workload no exact/o")
            if reference:
                keys.append("output_error")
                check(m["output_error_per_head"].shape == (HV,), "output_error_per_head")
            if "needle" in f["workloads"][wid]:
                keys.append("needle_accuracy")
                check(m["needle_correct"].dtype == np.int32, "needle_correct")
            for key in keys:
                check(np.isscalar(m.attrs[key]) and np.isfinite(m.attrs[key]), f"metrics attr {key}")
            if reference and r.attrs.get("run.state_error") == 1:
                check("state_error_per_chunk" in m, f"run {rid} has run.state_error but no state error")
                check(m["state_error_per_chunk"].shape == (N,), "state_error_per_chunk")
                check(m["state_error"].shape == (B, HV, N), "state_error")
        check_xarray(path, next(iter(f["runs"])))
    print(f"h5py_check: {path}: {len(shapes)} workloads, runs OK")


if __name__ == "__main__":
    main(sys.argv[1])
