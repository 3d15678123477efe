#!/usr/bin/env python3
"""A small copy of an experiment file for sharing: every run's attributes and metrics, the workload groups'
own attributes and needle truth, the file's schema attributes; no events, states, inputs (nor the attributes of
their group) or outputs.
sgdn analyze and analysis/plot.py read it like the full file.

    python3 analysis/metrics_only.py needle_gpu.h5 needle_gpu_metrics.h5
"""
import argparse
import os
import sys

import h5py


DIMENSION_SCALE_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST")


def copy_attrs(src, dst):
    for key, value in src.attrs.items():
        dst.attrs[key] = value


def copy_group(src_file, src_group, dst_parent, name):
    """Copies a group with its dimension scales attached again in the copy: HDF5's copy into another file keeps
    the scales' references pointing into the source file."""
    src_file.copy(src_group, dst_parent, name=name)
    dst_group = dst_parent[name]
    for key, source in src_group.items():
        if not isinstance(source, h5py.Dataset):
            continue
        target = dst_group[key]
        for attr in DIMENSION_SCALE_ATTRS:
            if attr in target.attrs:
                del target.attrs[attr]
    for key, source in src_group.items():
        if not isinstance(source, h5py.Dataset) or h5py.h5ds.is_scale(source.id):
            continue
        for axis, dim in enumerate(source.dims):
            for scale_name in dim.keys():
                if scale_name in dst_group and h5py.h5ds.is_scale(dst_group[scale_name].id):
                    dst_group[key].dims[axis].attach_scale(dst_group[scale_name])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("target")
    args = parser.parse_args()
    # The copy replaces the target: never let the target be the source, under any name (a symbolic or a hard
    # link, another path to it).
    if os.path.exists(args.target) and os.path.exists(args.source) and os.path.samefile(args.source, args.target):
        sys.exit(f"metrics_only.py: '{args.target}' is the source file '{args.source}'; "
                 "write the metrics-only copy to another file")
    if os.path.realpath(args.target) == os.path.realpath(args.source):
        sys.exit(f"metrics_only.py: '{args.target}' names the source file; write the copy to another file")
    try:
        src = h5py.File(args.source, "r")
    except OSError as e:
        sys.exit(f"metrics_only.py: cannot read '{args.source}' as HDF5: {e}")
    tmp = args.target + f".tmp-{os.getpid()}"
    try:
        copy(src, tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)  # nothing half-written left behind
        raise
    os.replace(tmp, args.target)  # nothing half-written under the target's name


def copy(src, tmp):
    with src, h5py.File(tmp, "w") as dst:
        copy_attrs(src, dst)
        for wid, w in src.get("workloads", {}).items():
            group = dst.create_group(f"workloads/{wid}")
            copy_attrs(w, group)
            for name in ("needle",):
                if name in w:
                    copy_group(src, w[name], group, name)
        for rid, r in src.get("runs", {}).items():
            group = dst.create_group(f"runs/{rid}")
            copy_attrs(r, group)
            group.attrs["written"] = "metrics"
            if "metrics" in r:
                copy_group(src, r["metrics"], group, "metrics")


if __name__ == "__main__":
    main()
