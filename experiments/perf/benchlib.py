"""The benchmark's pure-Python parts: layouts, configurations, command-line values, result file names and the
markdown table. No torch here, so that the CPU test suite checks them (tests/test_benchlib.py).
"""
import re

H, HV, K, V, C = 16, 32, 128, 128, 64

# (total tokens, name, sequence lengths). One sequence, packed batches (cu_seqlens), many short sequences
# as a serving stack sends them, and a ragged batch.
RAGGED = [3000, 500, 12000, 7000, 9268]
LAYOUTS = [(sum(lengths), name, lengths) for name, lengths in [
    ("1x2K", [2048]), ("1x4K", [4096]), ("1x8K", [8192]), ("1x16K", [16384]), ("1x32K", [32768]),
    ("1x64K", [65536]), ("1x128K", [131072]), ("4x8K", [8192] * 4), ("2x16K", [16384] * 2),
    ("32x1K", [1024] * 32), ("8x4K", [4096] * 8), ("ragged5", RAGGED)]]
QUICK_LAYOUTS = ["1x4K", "1x32K"]

CONFIGS = {
    "dense": dict(solver="exact", selector="dense", score="none", group=1),
    "sparse-default": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, score="update_norm",
                           group=1),
    # The same budget with no unit above 40 % of its chunks: the recurrence's longest chain is 0.4 N events.
    "sparse-cap0.4": dict(solver="block_adjacent", band=1, selector="head_budget", rho=0.29, max_fraction=0.4,
                          score="update_norm", group=1),
}
# Run only when named with --configs: output windows of G = 2 and 4 chunks (docs/math.md §6), other caps, topk.
EXTRA_CONFIGS = {f"sparse-G{G}": dict(CONFIGS["sparse-default"], group=G) for G in (2, 4)}
EXTRA_CONFIGS.update({f"sparse-cap{f}": dict(CONFIGS["sparse-cap0.4"], max_fraction=f) for f in (0.5, 0.67)})
EXTRA_CONFIGS["sparse-topk"] = dict(CONFIGS["sparse-default"], selector="topk")
# Per-head decisions with output windows of 4 chunks: the needle battery's best worst-construction accuracy
# among the GPU's strategies (experiments/results/needle_selectors_battery_cpu.md).
EXTRA_CONFIGS["sparse-head-G4"] = dict(CONFIGS["sparse-default"], granularity="head", group=4)


class UsageError(ValueError):
    """A command-line value the benchmark does not know; the message names what is allowed."""


def layout(arg):
    """A layout name (1x32K, 4x8K, ragged5, ...) or a token count (one sequence): (T, name, lengths)."""
    for T, name, lengths in LAYOUTS:
        if arg == name:
            return T, name, lengths
    if arg.isdigit() and int(arg) > 0:
        return int(arg), arg, [int(arg)]
    raise UsageError(f"unknown layout {arg}; known: {', '.join(l[1] for l in LAYOUTS)}, or a token count")


def choose_layouts(names=None, quick=False):
    """The layouts that comma-separated names choose, in the order named; all of them by default."""
    if names:
        return [layout(n) for n in names.split(",")]
    if quick:
        return [layout(n) for n in QUICK_LAYOUTS]
    return list(LAYOUTS)


def choose_configs(names=None):
    """{name: settings} for comma-separated configuration names; the three table configurations by default."""
    if not names:
        return dict(CONFIGS)
    known = dict(CONFIGS, **EXTRA_CONFIGS)
    unknown = [n for n in names.split(",") if n not in known]
    if unknown:
        raise UsageError(f"unknown configuration {unknown[0]}; known: {', '.join(known)}")
    return {n: known[n] for n in names.split(",")}


def parse_modules(values, lib_names):
    """`--module NAME=DIR` values as {name: dir}; every NAME must be one of the --lib names."""
    modules = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--module {value}: expected NAME=DIR")
        if name not in lib_names:
            raise UsageError(f"--module {value}: no --lib is named {name} (named: {', '.join(lib_names) or 'none'})")
        modules[name] = path
    return modules


def parse_libs(values):
    """`--lib NAME=PATH` values (repeatable) as [(name, path)], in order. A value without NAME= is named by its
    position (lib1, lib2, ...). Names must be distinct: they label the rows."""
    libs = []
    for i, value in enumerate(values or [], 1):
        name, sep, path = value.partition("=")
        if not sep:
            name, path = f"lib{i}", value
        if not name or not path:
            raise UsageError(f"--lib {value}: expected NAME=PATH")
        if any(name == n for n, _ in libs):
            raise UsageError(f"--lib {value}: the name {name} is given twice")
        libs.append((name, path))
    return libs


def gpu_model(device_name):
    """The GPU model for result file names: 'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200',
    'NVIDIA A100-SXM4-40GB' -> 'a100', 'NVIDIA GeForce RTX 4090' -> 'rtx4090'; else a lower-case slug."""
    name = device_name.lower().replace("nvidia", "").replace("geforce", "")
    match = re.search(r"\b(rtx\s*\d{4}|[a-z]{1,2}\d{2,4}[a-z]?)\b", name)
    if match:
        return re.sub(r"\s+", "", match.group(1))
    slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    return slug or "gpu"


def result_name(model, narrowed, name=None):
    """Base name of the result files: NAME if given, else the GPU model for the whole table, and
    <model>_subset for a run that narrows or changes it, so that such a run never replaces the table."""
    if name:
        return name
    return f"{model}_subset" if narrowed else model


def ratio(numerator, denominator):
    """numerator / denominator rounded to 3 places, or None where either is missing."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return round(numerator / denominator, 3)


def _cell(value, fmt):
    return "" if value is None else format(value, fmt)


def _mib(value):
    return "" if value is None else f"{value / 2**20:.0f}"


TABLE_HEADER = ("| layout | config | lib | ours ms | FLA ms | FlashQLA ms | FlashQLA no-CP ms | vs FLA | vs FlashQLA | "
                "snapshots MiB | FLA h MiB | workspace MiB | FLA working MiB | FlashQLA working MiB | kept | "
                "rel err vs FLA |")


def table_lines(rows):
    """The markdown table of result rows (missing values as empty cells)."""
    lines = [TABLE_HEADER, "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"]
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['config']} | {r['lib']} | {_cell(r['ours_ms'], '.3f')} | "
            f"{_cell(r.get('fla_ms'), '.3f')} | {_cell(r.get('qla_ms'), '.3f')} | {_cell(r.get('qla_nocp_ms'), '.3f')} | "
            f"{_cell(r.get('speedup'), '.2f')} | {_cell(r.get('speedup_vs_qla'), '.2f')} | {_mib(r.get('ours_bytes'))} | "
            f"{_mib(r.get('fla_bytes'))} | {_mib(r.get('ours_workspace_bytes'))} | {_mib(r.get('fla_work_bytes'))} | "
            f"{_mib(r.get('qla_work_bytes'))} | {_cell(r.get('kept_fraction'), '.2f')} | "
            f"{_cell(r.get('rel_err_vs_fla'), '.2e')} |")
    return lines


def markdown(meta, rows, commands):
    """The results file's markdown: the card, versions, method, the table and the commands that made it."""
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    libs = "; ".join(f"{name}: {path}" for name, path in meta["libs"].items())
    return "\n".join([
        f"# SparseGDN beside FLA and FlashQLA on {meta['device']}", "",
        f"{meta['date']}; {versions}", "",
        f"Libraries: {libs}.", "",
        f"Method: {meta['method']}. H = {H}, HV = {HV}, K = V = {K}, chunk {C}, bf16 inputs; our outputs "
        f"{meta['shape']['ours_out_dtype']}. FLA with FLA_FLASH_QLA=0 (its own Triton kernels); FlashQLA with its "
        "context parallelism (auto_cp, its default) and without it (no-CP). sparse-default: block_adjacent band 1, "
        "update_norm, head_budget rho 0.29 (pair), G = 1; sparse-cap0.4: the same with max_fraction 0.4. "
        "vs FLA, vs FlashQLA: their time over ours (above 1: ours faster). Memory (MiB): our snapshots written "
        "against FLA's h tensor; the workspace our C ABI asks for (sized for every event kept); FLA's and "
        "FlashQLA's working memory (allocation growth during one call, less its outputs). rel err: our output "
        "against FLA's (for sparse rows, the approximation error of sparsity).", "",
        *table_lines(rows), "",
        "Command:" if len(commands) == 1 else "Commands (one results file from their runs, merged):", "",
        *("    " + c for c in commands), ""])


def merge_results(results, lib=None):
    """One results file from several runs of bench.py on one card (e.g. single sequences and packed batches
    run separately): their rows in order (only library `lib`'s, if given), the first run's description, every
    run's command and date."""
    if not results:
        raise UsageError("merge: no results files given")
    devices = {r["device"] for r in results}
    if len(devices) > 1:
        raise UsageError("merge: results from different cards: " + "; ".join(sorted(devices)))
    merged = dict(results[0])
    merged["rows"] = [row for r in results for row in r["rows"] if lib is None or row["lib"] == lib]
    if lib is not None:
        if not merged["rows"]:
            raise UsageError(f"merge: no rows of the library {lib}")
        merged["libs"] = {lib: merged["libs"][lib]} if lib in merged.get("libs", {}) else merged.get("libs", {})
    merged["commands"] = [c for r in results for c in r.get("commands", [])]
    merged["date"] = " .. ".join(sorted({r["date"] for r in results}))
    keys = [(row["layout"], row["config"], row["lib"]) for row in merged["rows"]]
    if len(set(keys)) != len(keys):
        raise UsageError("merge: a (layout, configuration, library) row appears in more than one file")
    return merged


def main(argv):
    """`benchlib.py merge [--lib NAME] OUT_BASE A.json B.json ...`: writes OUT_BASE.json and OUT_BASE.md."""
    import json

    lib = None
    if len(argv) > 2 and argv[1] == "--lib":
        lib = argv[2]
        argv = argv[:1] + argv[3:]
    if len(argv) < 3 or argv[0] != "merge":
        raise SystemExit("usage: benchlib.py merge [--lib NAME] OUT_BASE RESULTS.json [RESULTS.json ...]")
    results = []
    for path in argv[2:]:
        with open(path) as f:
            results.append(json.load(f))
    try:
        merged = merge_results(results, lib)
    except UsageError as exc:
        raise SystemExit(str(exc))
    with open(argv[1] + ".json", "w") as f:
        json.dump(merged, f, indent=1)
    with open(argv[1] + ".md", "w") as f:
        f.write(markdown(merged, merged["rows"], merged["commands"]))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
