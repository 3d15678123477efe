#!/usr/bin/env python3
"""Prints the README's speed table (one row per layout: dense / sparse / capped) from a bench.py results file.

    python3 experiments/perf/readme_table.py experiments/perf/results/h200.json
"""
import json
import sys


def mib(x):
    return round(x / 2**20)


def layout_name(layout):
    n, t = layout.split("x")
    return f"{n} x {t}" + (" packed" if n != "1" else "")


def main(path):
    rows = json.load(open(path))["rows"]
    by_layout = {}
    for r in rows:
        by_layout.setdefault(r["layout"], {})[r["config"]] = r
    print("| layout | config | ours ms | FLA ms | speedup | snapshots MiB | FLA h MiB | U/W MiB | workspace MiB "
          "| FLA working MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layout, configs in by_layout.items():
        cfg = [configs[c] for c in ("dense", "sparse-default", "sparse-cap0.4") if c in configs]
        first = cfg[0]
        names = " / ".join({"dense": "dense", "sparse-default": "sparse", "sparse-cap0.4": "capped"}[c["config"]]
                           for c in cfg)
        print(f"| {layout_name(layout)} | {names} | {' / '.join('%.3f' % c['ours_ms'] for c in cfg)} "
              f"| {first['fla_ms']:.3f} | {' / '.join('%.2f' % c['speedup'] for c in cfg)} "
              f"| {' / '.join(str(mib(c['ours_bytes'])) for c in cfg)} | {mib(first['fla_bytes'])} "
              f"| {mib(first['ours_uw_bytes'])} | {mib(first['ours_workspace_bytes'])} "
              f"| {mib(first['fla_work_bytes'])} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/perf/results/h200.json")
