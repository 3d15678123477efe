#!/usr/bin/env python3
"""Plots of SparseGDN experiment files (SPEC §8 metrics, §10 HDF5 schema).

    /usr/bin/python3 analysis/plot.py FILE.h5 [FILE2.h5 ...] [--out DIR]

Writes into DIR (default: FILE_plots/ next to the first file), skipping (with a note) any plot the files hold
no data for:
  error_vs_rho.png     output error against rho per selector; panels per solver x G, line style per workload kind
  error_vs_cost.png    output error against cost per selector: flops / dense, carried-state bytes / dense, and
                       GPU time / dense where cuda runs are present; each selector's points joined by budget,
                       the front of the cheapest error in grey
  event_mask.png       the event mask as a heads x chunks picture per selector configuration (one workload of
                       each kind, batch 0): which chunk wrote into which head's carried state
  event_score.png      the scores the selectors ranked, heads x chunks, with the kept events marked
  error_by_memory.png  output error per head, split into short- and long-memory heads by their decay
  needle_heatmap.png   needle accuracy over depth x length, one small panel per configuration
  budgets.png          retention per head group (the events each group received) per configuration
  state_error.png      mean relative state error after each chunk, one line per selector/rho, short- and
                       long-memory heads apart where the per-head state error is stored
  pareto.png           needle accuracy against run time relative to dense, every selector configuration,
                       with the Pareto front (most accuracy for the least time)
  battery.png          the needle battery (runs of at least two constructions): per shape, each configuration's
                       accuracy on every construction against the events it kept, a bar under its worst
                       construction, and the front of the worst-construction accuracy
  solver_cost.png      output error against work for the intra-chunk solvers (every event kept): the cost
                       model's flops relative to the exact dense run, one point per solver and band

Only h5py, numpy and matplotlib (Debian's python3-* packages) are used.
"""
import argparse
import io
import os
import sys
from collections import Counter, defaultdict

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.colors  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import PIL.Image  # noqa: E402  (matplotlib's own dependency)

KIND_STYLES = {"random": "-", "needle": "--", "file": ":"}
BUDGET_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
SCHEMA_VERSIONS = (1, 2)  # the experiment file versions this script reads (docs/hdf5_schema.md)
RHO_STYLES = ["-", "--", ":", "-."]
DENSE_COLOUR = "black"


# ----------------------------------------------------------------------------------------------- loading

def _plain(value):
    """An HDF5 attribute as a plain Python str / int / float."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.reshape(()).item()
    return value


def _is_scale(dataset):
    return h5py.h5ds.is_scale(dataset.id)


def _workload_attrs(workload):
    """The generator's parameters of a workload: on its group (schema 2), else on its inputs group."""
    attrs = {k: v for k, v in workload.attrs.items()}
    if "inputs" in workload:
        attrs.update({k: v for k, v in workload["inputs"].attrs.items() if k not in attrs})
    return attrs


def load_runs(path):
    """One dict per run: its attrs ('a'), metrics attrs ('m'), metrics datasets ('d'), the event mask and scores of
    batch 0 ('events', when written) and its workload's generator attributes ('w'), all read into memory."""
    if not os.path.isfile(path):
        raise SystemExit(f"plot.py: {path}: no such file")
    if not h5py.is_hdf5(path):
        raise SystemExit(f"plot.py: {path}: not an HDF5 file")
    runs = []
    try:
        with h5py.File(path, "r") as f:
            if "runs" not in f:
                raise SystemExit(f"plot.py: {path}: no /runs group (not a SparseGDN experiment file?)")
            version = _plain(f.attrs.get("schema_version", -1))
            if version not in SCHEMA_VERSIONS:
                raise SystemExit(f"plot.py: {path}: schema_version {version}; this script reads versions "
                                 f"{', '.join(map(str, SCHEMA_VERSIONS))}")
            workloads = {wid: _workload_attrs(w) for wid, w in f.get("workloads", {}).items()}
            for rid, group in f["runs"].items():
                metrics = group.get("metrics")
                if metrics is None:
                    continue
                events = group.get("events")
                a = {k: _plain(v) for k, v in group.attrs.items()}
                runs.append({
                    "file": path,
                    "id": rid,
                    "a": a,
                    "m": {k: _plain(v) for k, v in metrics.attrs.items()},
                    "d": {k: np.asarray(v[()]) for k, v in metrics.items()
                          if isinstance(v, h5py.Dataset) and not _is_scale(v)},
                    "events": ({k: np.asarray(events[k][0]) for k in ("mask", "score") if k in events}
                               if events is not None else {}),
                    "w": workloads.get(a.get("workload"), {}),
                })
    except OSError as err:
        raise SystemExit(f"plot.py: {path}: cannot read: {err}")
    return runs


# ----------------------------------------------------------------------------------------------- labels

def solver_label(run):
    a = run["a"]
    name = a.get("solver.name", "?")
    if name == "block_adjacent":
        return f"{name} (band {a.get('solver.band', '?')})"
    return name


def make_selector_labeller(runs):
    """Selector name, with score / granularity and any other selector parameter (min_per_head, max_fraction,
    ...; rho and tau are the budget) added only where runs of that selector differ in them."""
    shown_as_value = ("selector.score", "selector.granularity")
    budget_keys = ("selector.name", "selector.rho", "selector.tau")
    varying = defaultdict(lambda: defaultdict(set))
    for run in runs:
        a = run["a"]
        for key in a:
            if key.startswith("selector.") and key not in budget_keys:
                varying[a.get("selector.name", "?")][key].add(str(a.get(key)))

    def label(run):
        a = run["a"]
        name = a.get("selector.name", "?")
        keys = [k for k in shown_as_value if len(varying[name][k]) > 1]
        keys += sorted(k for k in varying[name] if k not in shown_as_value and len(varying[name][k]) > 1)
        extra = [str(a.get(k)) if k in shown_as_value else f"{k.split('.', 1)[1]}={a.get(k)}" for k in keys]
        return "/".join([name] + extra)
    return label


def budget_text(run):
    """'rho=0.29', 'tau=1.5' or '' (dense)."""
    a = run["a"]
    if "selector.rho" in a and a.get("selector.name") != "dense":
        return f"rho={a['selector.rho']:g}"
    if "selector.tau" in a:
        return f"tau={a['selector.tau']:g}"
    return ""


def is_dense(run):
    return run["a"].get("selector.name") == "dense"


def is_threshold(run):
    return "selector.tau" in run["a"] and "selector.rho" not in run["a"]


def colour_map(labels):
    others = [lab for lab in sorted(labels) if lab != "dense"]
    # the default cycle repeats after 10 colours; tab20 keeps up to 20 labels apart
    cycle = (plt.rcParams["axes.prop_cycle"].by_key()["color"] if len(others) <= 10
             else [plt.get_cmap("tab20")(i) for i in range(20)])
    colours = {lab: cycle[i % len(cycle)] for i, lab in enumerate(others)}
    colours["dense"] = DENSE_COLOUR
    return colours


def panel_keys(runs):
    """(solver label, G) pairs present, sorted."""
    return sorted({(solver_label(r), int(r["a"].get("run.group", 1))) for r in runs})


def grid(n_rows, n_cols, width=4.2, height=3.4):
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width * n_cols, height * n_rows), squeeze=False)
    return fig, axes


def label_log_axis(ax):
    """On a log y axis spanning under two decades, label the minor ticks too (otherwise few or no labels show)."""
    lo, hi = ax.get_ylim()
    if lo > 0 and hi / lo < 100:
        # only the 2s, 3s and 5s of a decade: all nine crowd into each other near the decade's top
        def minor(value, _):
            leading = value / 10 ** np.floor(np.log10(value) + 1e-9)
            return f"{value:.2g}" if round(leading) in (2, 3, 5) and abs(leading - round(leading)) < 1e-6 else ""
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:.2g}"))
        ax.tick_params(axis="y", which="both", labelsize=7)


def finish_log_panel(ax, note, off_axis, lo, hi):
    """Log y axis with the shared limits, and a note naming the lines that fall outside them."""
    if off_axis:
        ax.text(0.01, 0.02, f"{note}: " + ", ".join(off_axis), transform=ax.transAxes, fontsize=7,
                va="bottom", bbox=dict(facecolor="white", alpha=0.8, lw=0))
    ax.set_yscale("log")
    if lo is not None:
        ax.set_ylim(lo, hi)
    label_log_axis(ax)


def log_range(sparse, dense):
    """y limits for a log axis: the sparse values, widened to take in dense references unless they lie more
    than a decade and a half below (dense with the exact solver is ~1e-7 and would flatten every line)."""
    sparse = np.asarray([v for v in sparse if np.isfinite(v) and v > 0])
    if sparse.size == 0:
        return None, None
    lo, hi = sparse.min(), sparse.max()
    near = [v for v in dense if np.isfinite(v) and v > 0 and v >= lo / 30]
    if near:
        lo, hi = min(lo, min(near)), max(hi, max(near))
    return lo / 1.5, hi * 1.5


def save(fig, out_dir, name):
    """A PNG of at most 256 colours (a plot has few; a third of the size of a true-colour one)."""
    path = os.path.join(out_dir, name)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    buffer.seek(0)
    with PIL.Image.open(buffer) as image:
        image.convert("RGB").quantize(256).save(path, optimize=True)
    print(path)


# ----------------------------------------------------------------------------------------------- plot 1

def plot_error_vs_rho(runs, out_dir, sel_label):
    runs = [r for r in runs if "output_error" in r["m"]]
    if not runs:
        print("plot.py: no output_error metrics: skipping error_vs_rho.png")
        return
    solvers = sorted({solver_label(r) for r in runs})
    groups = sorted({int(r["a"].get("run.group", 1)) for r in runs})
    kinds = sorted({r["a"].get("workload.kind", "?") for r in runs})
    colours = colour_map({sel_label(r) for r in runs})
    any_threshold = any(is_threshold(r) for r in runs)
    rhos = sorted({float(r["a"]["selector.rho"]) for r in runs if "selector.rho" in r["a"] and not is_dense(r)})
    # the shared y range follows the sparse runs; a dense reference far below it is named, not drawn
    lo, hi = log_range([r["m"]["output_error"] for r in runs if not is_dense(r)],
                       [r["m"]["output_error"] for r in runs if is_dense(r)])
    fig, axes = plt.subplots(len(solvers), len(groups), figsize=(5.0 * len(groups), 3.8 * len(solvers)),
                             squeeze=False, sharey=True)
    for i, solver in enumerate(solvers):
        for j, group in enumerate(groups):
            ax = axes[i][j]
            here = [r for r in runs if solver_label(r) == solver and int(r["a"].get("run.group", 1)) == group]
            off_axis = []
            for kind in kinds:
                style = KIND_STYLES.get(kind, "-.")
                of_kind = [r for r in here if r["a"].get("workload.kind", "?") == kind]
                dense = [r["m"]["output_error"] for r in of_kind if is_dense(r)]
                if dense:
                    err = float(np.mean(dense))
                    if lo is None or lo <= err <= hi:
                        ax.axhline(err, color=DENSE_COLOUR, ls=style, lw=1.0, alpha=0.7)
                        ax.annotate(f"dense ({kind}) {err:.2g}", xy=(0.99, err),
                                    xycoords=("axes fraction", "data"), xytext=(0, 2), textcoords="offset points",
                                    ha="right", va="bottom", fontsize=7)
                    else:
                        off_axis.append(f"dense ({kind}) {err:.2g}")
                by_sel = defaultdict(lambda: defaultdict(list))
                thresholds = defaultdict(lambda: defaultdict(list))  # selector -> tau -> (retention, error)
                for r in of_kind:
                    if is_dense(r):
                        continue
                    if is_threshold(r):
                        thresholds[sel_label(r)][float(r["a"]["selector.tau"])].append(
                            (r["m"].get("retention", np.nan), r["m"]["output_error"]))
                    elif "selector.rho" in r["a"]:
                        by_sel[sel_label(r)][float(r["a"]["selector.rho"])].append(r["m"]["output_error"])
                for lab, points in sorted(by_sel.items()):
                    xs = sorted(points)
                    ax.plot(xs, [np.mean(points[x]) for x in xs], ls=style, marker="o", ms=4, color=colours[lab],
                            label=lab)
                for lab, by_tau in sorted(thresholds.items()):
                    # one point per tau: mean measured retention (x) and mean error (y) over the workloads
                    pts = sorted((np.mean([p[0] for p in v]), np.mean([p[1] for p in v]), tau)
                                 for tau, v in by_tau.items())
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=style, marker="^", ms=6,
                            color=colours[lab], label=f"{lab} (tau, at measured retention)")
                    for x, y, tau in pts:
                        ax.annotate(f"tau={tau:g}", (x, y), xytext=(3, 3), textcoords="offset points", fontsize=7,
                                    color=colours[lab])
            finish_log_panel(ax, "off axis", off_axis, lo, hi)
            if 0 < len(rhos) <= 8 and not any_threshold:
                ax.set_xticks(rhos)
            ax.set_title(f"{solver}, G={group}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(solvers) - 1:
                ax.set_xlabel("rho; threshold runs: measured retention" if any_threshold else "rho")
            if j == 0:
                ax.set_ylabel("output error (relative)")
    handles, labels = [], []
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(plt.Line2D([], [], color=h.get_color(), marker=h.get_marker(), ls="-"))
                labels.append(lab)
    for kind in kinds:
        handles.append(plt.Line2D([], [], color="grey", ls=KIND_STYLES.get(kind, "-.")))
        labels.append(f"workload: {kind}")
    if any(is_dense(r) for r in runs):
        handles.append(plt.Line2D([], [], color=DENSE_COLOUR, lw=1.0))
        labels.append("dense (reference)")
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle("Output error ||O - O_exact|| / ||O_exact|| against rho (mean over workloads of each kind)")
    fig.tight_layout()
    save(fig, out_dir, "error_vs_rho.png")


# ----------------------------------------------------------------------------------------------- plot 2

def plot_needle_heatmap(runs, out_dir, sel_label):
    runs = [r for r in runs if r["a"].get("workload.kind") == "needle"
            and "needle_depths" in r["d"] and "needle_accuracy_by_depth" in r["d"]]
    if not runs:
        print("plot.py: no needle runs with needle_depths / needle_accuracy_by_depth: skipping needle_heatmap.png")
        return

    def config(r):  # dense first, then selectors by name and budget
        return (0 if is_dense(r) else 1, sel_label(r), budget_text(r))
    configs = sorted({config(r) for r in runs})
    several_tasks = len({r["a"].get("workload.task") for r in runs}) > 1

    def row_of(r):  # one row of panels per solver x G (x task when several: they differ too much to average)
        return (solver_label(r), int(r["a"].get("run.group", 1)),
                str(r["a"].get("workload.task", "?")) if several_tasks else "")
    rows = sorted({row_of(r) for r in runs})
    # every panel uses the same depth x length grid so that axes line up; missing cells stay grey
    cells = defaultdict(list)  # (config, row, depth, length) -> accuracies
    for r in runs:
        row = row_of(r)
        length = int(r["a"].get("workload.tokens", -1))
        for depth, acc in zip(r["d"]["needle_depths"].ravel(), r["d"]["needle_accuracy_by_depth"].ravel()):
            cells[(config(r), row, float(depth), length)].append(float(acc))
    depths = sorted({k[2] for k in cells})
    lengths = sorted({k[3] for k in cells})
    panel_w = max(1.3, 0.6 * len(lengths) + 0.4)
    panel_h = max(0.9, 0.38 * len(depths) + 0.5)
    # many configurations wrap onto further bands of panels (each band: every row, up to 9 configurations)
    bands = -(-len(configs) // 9)
    per_band = -(-len(configs) // bands)
    # a thin spacer row between bands keeps one band's tick labels off the next band's titles
    stride = len(rows) + 1
    ratios = ([1.0] * len(rows) + [0.45]) * bands
    fig, axes = plt.subplots(stride * bands - 1, per_band, squeeze=False, sharex=True, sharey=True,
                             gridspec_kw={"height_ratios": ratios[:-1]},
                             figsize=(1.6 + panel_w * per_band, 1.2 + (panel_h + 0.45) * len(rows) * bands))
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("lightgrey")
    image = None
    for band in range(1, bands):
        for ax in axes[band * stride - 1]:
            ax.set_visible(False)
    for j in range(len(configs), bands * per_band):  # the last band's empty places
        for i in range(len(rows)):
            axes[(bands - 1) * stride + i][j % per_band].set_visible(False)
    for i, row in enumerate(rows):
        for j, cfg in enumerate(configs):
            band, col = divmod(j, per_band)
            ax = axes[band * stride + i][col]
            values = np.full((len(depths), len(lengths)), np.nan)
            for (c, rw, d, t), accs in cells.items():
                if c == cfg and rw == row:
                    values[depths.index(d), lengths.index(t)] = np.mean(accs)
            image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
            for (y, x), v in np.ndenumerate(values):
                if np.isfinite(v):
                    ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=8,
                            color="black" if v > 0.5 else "white")
            ax.set_xticks(range(len(lengths)))
            ax.set_xticklabels([str(t) for t in lengths], fontsize=7, rotation=45 if len(lengths) > 4 else 0)
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_yticks(range(len(depths)))
            ax.set_yticklabels([f"{d:g}%" for d in depths], fontsize=7)
            if i == 0:
                # a long selector label (score, parameters) breaks at its '/' so that panels do not overlap
                name = cfg[1] if len(cfg[1]) <= 22 else cfg[1].replace("/", "/\n")
                ax.set_title(f"{name}\n{cfg[2]}".rstrip(), fontsize=8)
            if col == 0:
                ax.set_ylabel(f"{row[0]}\nG={row[1]}{chr(10) + 'task ' + row[2] if row[2] else ''}\n\ndepth", fontsize=8, rotation=0, ha="right", va="center")
            if i == len(rows) - 1:
                ax.set_xlabel("tokens", fontsize=8)
    fig.subplots_adjust(top=1.0 - 1.0 / fig.get_figheight())  # room for the title, not a band's worth
    fig.colorbar(image, ax=[ax for ax in axes.ravel() if ax.get_visible()], shrink=0.9, label="needle accuracy")
    fig.suptitle("Needle accuracy by queried depth x length (cell = mean over runs; grey = no run)", fontsize=10,
                 y=1.0 - 0.3 / fig.get_figheight())
    save(fig, out_dir, "needle_heatmap.png")


# ----------------------------------------------------------------------------------------------- plot 3

def plot_budgets(runs, out_dir, sel_label):
    runs = [r for r in runs if "retention_per_unit" in r["d"] and not is_dense(r)]
    if not runs:
        print("plot.py: no sparse runs with retention_per_unit: skipping budgets.png")
        return
    # A row per (workload kind, selector, budget); split by solver / G only where they change the budgets.
    coarse = defaultdict(lambda: defaultdict(list))
    for r in runs:
        key = (r["a"].get("workload.kind", "?"), sel_label(r), budget_text(r),
               str(r["a"].get("selector.granularity", "")))
        fine = (solver_label(r), int(r["a"].get("run.group", 1)))
        coarse[key][fine].append(np.asarray(r["d"]["retention_per_unit"], dtype=float).ravel())

    def mean_vec(vectors):
        width = max(len(v) for v in vectors)
        padded = np.full((len(vectors), width), np.nan)
        for i, v in enumerate(vectors):
            padded[i, :len(v)] = v
        return np.nanmean(padded, axis=0) if len(vectors) > 1 else padded[0]

    labels, vectors, granularities = [], [], set()
    for key in sorted(coarse):
        kind, sel, budget, gran = key
        granularities.add(gran)
        per_fine = {fine: mean_vec(v) for fine, v in sorted(coarse[key].items())}
        vecs = list(per_fine.values())
        same = all(len(v) == len(vecs[0]) and np.allclose(v, vecs[0], equal_nan=True) for v in vecs)
        if same:
            labels.append(f"{kind} | {sel} {budget}")
            vectors.append(vecs[0])
        else:
            for (solver, group), v in per_fine.items():
                labels.append(f"{kind} | {sel} {budget} | {solver} G={group}")
                vectors.append(v)
    width = max(len(v) for v in vectors)
    table = np.full((len(vectors), width), np.nan)
    for i, v in enumerate(vectors):
        table[i, :len(v)] = v
    fig, ax = plt.subplots(figsize=(max(7.0, 3.5 + 0.8 * width), max(2.6, 1.4 + 0.38 * len(labels))))
    image = ax.imshow(table, cmap="magma", vmin=0.0, vmax=1.0, aspect="auto")
    for (y, x), v in np.ndenumerate(table):
        if np.isfinite(v):
            ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=8, color="black" if v > 0.5 else "white")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xticks(range(width))
    unit = "head group (qk head)" if granularities == {"pair"} else (
        "value head" if granularities == {"head"} else "head group / head (by granularity)")
    ax.set_xlabel(f"{unit}, in head order")
    fig.colorbar(image, ax=ax, label="fraction of chunks kept")
    ax.set_title("Events each head group received\n(dense omitted: 1 everywhere)", fontsize=10)
    fig.tight_layout()
    save(fig, out_dir, "budgets.png")


# ----------------------------------------------------------------------------------------------- plot 4

def plot_state_error(runs, out_dir, sel_label):
    runs = [r for r in runs if "state_error_per_chunk" in r["d"]]
    if not runs:
        print("plot.py: no state_error_per_chunk datasets: skipping state_error.png")
        return

    def by_memory(r):
        """(heads, curve) per memory class: short- and long-memory heads apart where the per-head state error and
        the heads' decays are stored (fast-forgetting heads recover from a dropped event within a chunk or two,
        slow ones carry the error on), else all heads together."""
        per_head = r["d"].get("state_error")
        memory = memory_tokens(r["w"])
        if per_head is None or per_head.ndim != 3 or memory is None or len(memory) != per_head.shape[1]:
            return [("all heads", np.asarray(r["d"]["state_error_per_chunk"], dtype=float).ravel())]
        long_memory = memory >= int(r["a"].get("run.chunk", 64))
        out = []
        for name, chosen in (("short-memory heads", ~long_memory), ("long-memory heads", long_memory)):
            if chosen.any():
                out.append((f"{name} ({int(chosen.sum())})", per_head[:, chosen, :].astype(float).mean(axis=(0, 1))))
        return out

    def curve_key(r):  # one line per selector configuration, dense first
        return (0 if is_dense(r) else 1, sel_label(r), budget_text(r))

    # mean curve per (row, solver, G, configuration); rows: workload kind, length, memory class of the heads
    collected = defaultdict(list)
    for r in runs:
        for heads, curve in by_memory(r):
            row = (r["a"].get("workload.kind", "?"), int(r["a"].get("workload.tokens", -1)), heads)
            collected[(row, solver_label(r), int(r["a"].get("run.group", 1)), curve_key(r))].append(curve)
    curves = {}
    for key, arrays in collected.items():
        n = min(len(a) for a in arrays)
        curves[key] = np.mean([a[:n] for a in arrays], axis=0)
    row_keys = sorted({k[0] for k in curves})
    several_lengths = len({t for _, t, _ in row_keys}) > 1
    # panel columns: solver x G, with the G values of a solver merged when their curves are identical
    # (the states do not depend on G in SPEC §6; only the outputs do)
    columns = []  # (solver, [G values])
    for solver in sorted({k[1] for k in curves}):
        groups = sorted({k[2] for k in curves if k[1] == solver})
        first = {(k[0], k[3]): v for k, v in curves.items() if k[1] == solver and k[2] == groups[0]}
        same = all(((k[0], k[3]) in first and len(first[(k[0], k[3])]) == len(v)
                    and np.allclose(first[(k[0], k[3])], v, rtol=1e-6, atol=0))
                   for k, v in curves.items() if k[1] == solver)
        columns.extend([(solver, groups)] if same else [(solver, [g]) for g in groups])

    colours = colour_map({sel_label(r) for r in runs})
    budgets = sorted({budget_text(r) for r in runs if budget_text(r)})
    budget_style = {b: RHO_STYLES[i % len(RHO_STYLES)] for i, b in enumerate(budgets)}
    lo, hi = log_range(np.concatenate([v for k, v in curves.items() if k[3][0] == 1] or [np.array([])]),
                       np.concatenate([v for k, v in curves.items() if k[3][0] == 0] or [np.array([])]))
    fig, axes = plt.subplots(len(row_keys), len(columns), squeeze=False, sharey=True,
                             figsize=(4.8 * len(columns), 3.4 * len(row_keys)))
    for i, rk in enumerate(row_keys):
        for j, (solver, groups) in enumerate(columns):
            ax = axes[i][j]
            off_axis = []
            here = {k[3]: v for k, v in curves.items() if k[0] == rk and k[1] == solver and k[2] == groups[0]}
            for (dense, sel, budget), y in sorted(here.items()):
                label = f"{sel} {budget}".strip()
                finite = y[np.isfinite(y) & (y > 0)]
                if dense == 0 and lo is not None and (finite.size == 0 or finite.max() < lo):
                    off_axis.append(f"{label}: max {finite.max():.2g}" if finite.size else f"{label}: 0")
                    continue
                ax.plot(np.arange(len(y)), np.where(y > 0, y, np.nan), color=colours[sel],
                        ls=budget_style.get(budget, "-"), lw=1.2, label=label)
            finish_log_panel(ax, "below axis", off_axis, lo, hi)
            kind, tokens, heads = rk
            g_text = ",".join(str(g) for g in groups)
            ax.set_title(f"{kind}{f' T={tokens}' if several_lengths else ''}, {heads} | {solver}, G={g_text}",
                         fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(row_keys) - 1:
                ax.set_xlabel("chunk index")
            if j == 0:
                ax.set_ylabel("mean ||S_hat - S||_F / ||S||_F")
    handles, labels = [], []
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle("State error after each chunk (mean over batch and the heads of the row: memory 1/|g| under or over "
                 "one chunk; G values merged where identical)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.2 / fig.get_figheight()))
    save(fig, out_dir, "state_error.png")


# ----------------------------------------------------------------------------------------------- main

# ----------------------------------------------------------------------------------------------- plot 5

def plot_pareto(runs, out_dir, sel_label):
    """Needle accuracy against time: each configuration's mean accuracy over the needle workloads, and its mean
    run time divided by the dense run's on the same workload (the backend's own seconds metric)."""
    runs = [r for r in runs if r["a"].get("workload.kind") == "needle" and "needle_accuracy" in r["m"]
            and "seconds" in r["m"]]
    dense_time = {}
    for r in runs:
        if is_dense(r):
            dense_time[(r["a"].get("workload"), solver_label(r), r["a"].get("run.backend"))] = r["m"]["seconds"]
    points = defaultdict(lambda: [[], []])
    for r in runs:
        base = dense_time.get((r["a"].get("workload"), solver_label(r), r["a"].get("run.backend")))
        if not base:
            continue
        key = ("dense" if is_dense(r) else sel_label(r), budget_text(r), int(r["a"].get("run.group", 1)),
               solver_label(r))
        points[key][0].append(r["m"]["seconds"] / base)
        points[key][1].append(r["m"]["needle_accuracy"])
    if len(points) < 2:
        print("plot.py: fewer than two needle configurations with a dense run to compare: skipping pareto.png")
        return
    items = sorted((np.mean(t), np.mean(acc), key) for key, (t, acc) in points.items())
    front, best = [], -1.0
    for t, acc, key in items:  # sorted by time: a point is on the front if it beats every faster one
        if acc > best:
            front.append((t, acc))
            best = acc
    # Colour: selector; marker: budget; hollow: G > 1. No text at the points (it overlapped): the legend says it.
    colours = colour_map({k[0] for k in points})
    markers = budget_markers(k[1] for k in points)
    fig, ax = plt.subplots(figsize=(9, 6))
    for t, acc, key in items:
        hollow = key[2] > 1
        ax.scatter(t, acc, s=40, zorder=3, marker=markers.get(key[1], "o"), edgecolors=colours[key[0]],
                   facecolors="none" if hollow else colours[key[0]])
    ax.plot([p[0] for p in front], [p[1] for p in front], color="grey", lw=1, ls="--", zorder=2, label="Pareto front")
    legend_for(ax, colours, markers, any(k[2] > 1 for k in points))
    ax.set_xlabel("run time / dense run time on the same workload (mean)")
    ax.set_ylabel("needle accuracy (mean over needle workloads)")
    ax.set_ylim(-0.03, 1.05)
    ax.grid(alpha=0.3)
    ax.set_title("Needle accuracy against time, every selector configuration", fontsize=10)
    save(fig, out_dir, "pareto.png")


# ----------------------------------------------------------------------------------------------- plot 5b

# Workload keys that are not part of a needle construction: the shape, the seed and what names a file (as in
# analysis/battery_table.cpp).
NOT_CONSTRUCTION = {"workload.kind", "workload.batch", "workload.tokens", "workload.qk_heads", "workload.v_heads",
                    "workload.key_dim", "workload.value_dim", "workload.seed", "workload.path", "workload.id"}
SHAPE_KEYS = ("workload.tokens", "workload.qk_heads", "workload.v_heads", "workload.key_dim", "workload.value_dim")


def plot_battery(runs, out_dir, sel_label):
    """The needle battery: per shape, each configuration's accuracy on every construction (colour) against the
    events it kept, a bar under its worst construction, and the front of the worst (the best worst-construction
    accuracy for at most that many events kept)."""
    runs = [r for r in runs if "needle_accuracy" in r["m"] and np.isfinite(float(r["m"]["needle_accuracy"]))
            and "retention" in r["m"]]
    values_of = defaultdict(set)
    for r in runs:
        for key, value in r["a"].items():
            if key.startswith("workload.") and key not in NOT_CONSTRUCTION:
                values_of[key].add(str(value))
    varying = sorted(k for k, v in values_of.items() if len(v) > 1)

    def construction(r):  # the run's variant, else the workload keys that differ between runs
        if "variant" in r["a"]:
            return str(r["a"]["variant"])
        return " ".join(f"{k[9:]}={r['a'].get(k)}" for k in varying) or "default"

    def shape(r):
        a = r["a"]
        return tuple(int(a.get(k, 0)) for k in SHAPE_KEYS)

    several_solvers = len({solver_label(r) for r in runs}) > 1

    def configuration(r):
        label = "dense" if is_dense(r) else " ".join(x for x in (sel_label(r), budget_text(r)) if x)
        group = int(r["a"].get("run.group", 1))
        return label + (f" G={group}" if group > 1 else "") + (f" {solver_label(r)}" if several_solvers else "")

    constructions = {construction(r) for r in runs}
    if len(constructions) < 2:
        print("plot.py: needle runs of fewer than two constructions: skipping battery.png")
        return
    cells = defaultdict(lambda: [[], []])  # (shape, configuration, construction) -> accuracies, kept
    for r in runs:
        cell = cells[(shape(r), configuration(r), construction(r))]
        cell[0].append(float(r["m"]["needle_accuracy"]))
        cell[1].append(float(r["m"]["retention"]))
    overall = defaultdict(list)
    for (_, _, c), (acc, _) in cells.items():
        overall[c].extend(acc)
    # colours from the easiest construction to the hardest (mean accuracy over every run), as the table's columns
    order = sorted(constructions, key=lambda c: (-np.mean(overall[c]), c))
    cmap = plt.get_cmap("tab10" if len(order) <= 10 else "tab20")
    colours = {c: cmap(i % cmap.N) for i, c in enumerate(order)}
    configurations = sorted({k[1] for k in cells}, key=lambda c: (c != "dense", c))
    markers = {c: BUDGET_MARKERS[i % len(BUDGET_MARKERS)] for i, c in enumerate(configurations)}
    shapes = sorted({k[0] for k in cells})
    n_cols = min(len(shapes), 2)
    n_rows = -(-len(shapes) // n_cols)
    fig, axes = grid(n_rows, n_cols, width=7.4, height=5.2)
    for ax in axes.ravel()[len(shapes):]:
        ax.set_visible(False)
    for ax, sh in zip(axes.ravel(), shapes):
        points = {}  # configuration -> (kept, {construction: accuracy})
        for (s, cfg, c), (acc, kept) in cells.items():
            if s == sh:
                points.setdefault(cfg, [[], {}])
                points[cfg][0].extend(kept)
                points[cfg][1][c] = np.mean(acc)
        # x is logarithmic (most configurations keep a few tenths, dense keeps all). In a configuration's column,
        # constructions of equal accuracy sit side by side; columns of configurations that keep about as much
        # are set apart so that they do not overlap.
        kept_of = {cfg: np.mean(k) for cfg, (k, _) in points.items()}
        step = 0.0045  # decades between two points of one accuracy
        width = {cfg: step * max(Counter(round(a, 3) for a in by_c.values()).values()) for cfg, (_, by_c) in
                 points.items()}
        clusters = []
        for cfg in sorted(points, key=lambda c: kept_of[c]):
            if clusters and np.log10(kept_of[cfg] / kept_of[clusters[-1][-1]]) < 0.03:
                clusters[-1].append(cfg)
            else:
                clusters.append([cfg])
        log_x = {}
        for cluster in clusters:
            cluster.sort(key=configurations.index)
            total = sum(width[c] for c in cluster) + 0.04 * (len(cluster) - 1)
            left = np.mean([np.log10(kept_of[c]) for c in cluster]) - total / 2
            for cfg in cluster:
                log_x[cfg] = left + width[cfg] / 2
                left += width[cfg] + 0.04
        worst = {}
        for cfg, (_, by_c) in points.items():
            by_level = defaultdict(list)
            for c in sorted(by_c, key=order.index):
                by_level[round(by_c[c], 3)].append(c)
            for level, names in by_level.items():
                for i, c in enumerate(names):
                    x = 10 ** (log_x[cfg] + (i - (len(names) - 1) / 2) * step)
                    ax.scatter(x, by_c[c], s=30, marker=markers[cfg], color=colours[c], edgecolors="none",
                               zorder=3)
            low = min(by_c.values())
            worst[cfg] = (kept_of[cfg], low)
            half = width[cfg] / 2 + step
            ax.plot([10 ** (log_x[cfg] - half), 10 ** (log_x[cfg] + half)], [low - 0.03] * 2, color="black",
                    lw=1.6, zorder=4, solid_capstyle="butt")
        front, best = [], -1.0
        for kept, acc in sorted(worst.values()):
            if acc > best:
                front.append((kept, acc))
                best = acc
        if front:
            ax.step([p[0] for p in front] + [1.0], [p[1] for p in front] + [front[-1][1]], where="post",
                    color="grey", lw=1, ls="--", zorder=2)
        ax.set_xscale("log")
        lo = min(kept_of.values())
        ax.set_xlim(lo / 1.35, 1.35)
        ticks = [t for t in (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0) if lo / 1.35 <= t <= 1.35]
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylim(-0.06, 1.05)
        ax.grid(alpha=0.3)
        ax.set_xlabel("fraction of events kept (log scale; mean over the constructions)", fontsize=8)
        ax.set_ylabel("needle accuracy (mean over seeds)", fontsize=8)
        ax.set_title("T={} H={} HV={} K={} V={}".format(*sh), fontsize=9)
    handles = [plt.Line2D([], [], color=colours[c], marker="o", ls="", ms=6) for c in order]
    labels = list(order)
    handles.append(plt.Line2D([], [], ls=""))
    labels.append("")
    for cfg in configurations:
        handles.append(plt.Line2D([], [], color="dimgrey", marker=markers[cfg], ls="", ms=6))
        labels.append(cfg)
    handles.append(plt.Line2D([], [], color="black", lw=2))
    labels.append("worst construction (bar under it)")
    handles.append(plt.Line2D([], [], color="grey", lw=1, ls="--"))
    labels.append("front of the worst")
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               title="construction (colour, easiest first)\nconfiguration (marker)", title_fontsize=8)
    fig.suptitle("Needle battery: accuracy per construction against events kept", fontsize=10)
    fig.tight_layout()
    save(fig, out_dir, "battery.png")


# ----------------------------------------------------------------------------------------------- plot 6

def plot_solver_cost(runs, out_dir, sel_label):
    """Error against work for the solvers (SPEC §4): dense-selector runs only, so the solver is all that differs."""
    runs = [r for r in runs if is_dense(r) and "output_error" in r["m"] and "flops_ratio" in r["m"]
            and np.isfinite(r["m"]["flops_ratio"])]
    solvers = {solver_label(r) for r in runs}
    if len(solvers) < 2:
        print("plot.py: fewer than two solvers among the dense runs: skipping solver_cost.png")
        return
    points = defaultdict(lambda: [[], []])
    for r in runs:
        key = (solver_label(r), str(r["a"].get("workload.kind", "?")))
        points[key][0].append(r["m"]["flops_ratio"])
        points[key][1].append(r["m"]["output_error"])
    kinds = sorted({k[1] for k in points})
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4.2), squeeze=False)
    colours = colour_map(solvers)
    for ax, kind in zip(axes[0], kinds):
        for (solver, k), (flops, errors) in sorted(points.items()):
            if k != kind:
                continue
            x, y = float(np.mean(flops)), max(float(np.mean(errors)), 1e-16)
            ax.scatter(x, y, color=colours[solver], s=40, zorder=3)
            ax.annotate(solver, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.set_yscale("log")
        ax.margins(x=0.2)  # room for the labels of the outermost points
        label_log_axis(ax)
        ax.set_xlabel("flops / exact dense flops (cost model)")
        ax.set_ylabel("output error (relative)")
        ax.set_title(f"workload: {kind}", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle("Intra-chunk solvers: error against work (every event kept)", fontsize=10)
    save(fig, out_dir, "solver_cost.png")


# ----------------------------------------------------------------------------------------------- shared legends

def budget_markers(budgets):
    """A marker per budget text ('rho=0.1', 'tau=1.5'; '' for dense)."""
    names = sorted(set(budgets))
    return {b: BUDGET_MARKERS[i % len(BUDGET_MARKERS)] for i, b in enumerate(names)}


def legend_for(ax, colours, markers, hollow_means_grouped, loc="center left", outside=True):
    """One legend that names colours (selectors), markers (budgets) and hollow markers (G > 1) once each."""
    handles, labels = [], []
    for name, colour in colours.items():
        handles.append(plt.Line2D([], [], color=colour, marker="o", ls="", ms=6))
        labels.append(name)
    for budget, marker in markers.items():
        if budget:
            handles.append(plt.Line2D([], [], color="grey", marker=marker, ls="", ms=6))
            labels.append(budget)
    if hollow_means_grouped:
        handles.append(plt.Line2D([], [], color="grey", marker="o", ls="", ms=6, markerfacecolor="none"))
        labels.append("hollow: G > 1")
    for h, lab in zip(*ax.get_legend_handles_labels()):
        handles.append(h)
        labels.append(lab)
    if outside:
        ax.figure.legend(handles, labels, loc=loc, bbox_to_anchor=(1.0, 0.5), fontsize=8)
    else:
        ax.legend(handles, labels, loc=loc, fontsize=7)


# ----------------------------------------------------------------------------------------------- plot 7

def plot_error_vs_cost(runs, out_dir, sel_label):
    """Output error against cost, per selector: flops / dense (cost model), carried-state bytes / dense and, where
    cuda runs are present, GPU time / the dense run's on the same workload. Mean over workloads of a kind."""
    runs = [r for r in runs if "output_error" in r["m"]]
    if not runs:
        print("plot.py: no output_error metrics: skipping error_vs_cost.png")
        return
    dense_seconds = {}
    for r in runs:
        if is_dense(r) and r["a"].get("run.backend") == "cuda" and "seconds" in r["m"]:
            dense_seconds[(r["a"].get("workload"), solver_label(r), r["a"].get("run.group"))] = r["m"]["seconds"]

    def costs(r):
        m = r["m"]
        flops = m.get("flops_ratio", np.nan)
        states = (m["state_bytes"] / m["dense_state_bytes"]
                  if m.get("dense_state_bytes") else np.nan)
        base = dense_seconds.get((r["a"].get("workload"), solver_label(r), r["a"].get("run.group")))
        gpu = m["seconds"] / base if base and r["a"].get("run.backend") == "cuda" else np.nan
        return {"flops": flops, "states": states, "gpu": gpu}

    measures = [("flops", "flops / dense flops (cost model)"), ("states", "carried-state bytes / dense")]
    if dense_seconds:
        measures.append(("gpu", "GPU time / dense GPU time"))
    # one point per (kind, solver, selector, budget, G): mean error and mean cost over workloads
    points = defaultdict(lambda: defaultdict(list))
    for r in runs:
        key = (r["a"].get("workload.kind", "?"), solver_label(r), "dense" if is_dense(r) else sel_label(r),
               budget_text(r), int(r["a"].get("run.group", 1)))
        points[key]["error"].append(r["m"]["output_error"])
        for name, value in costs(r).items():
            points[key][name].append(value)
    rows = sorted({(k[0], k[1]) for k in points})
    colours = colour_map({k[2] for k in points})
    markers = budget_markers(k[3] for k in points)
    grouped = any(k[4] > 1 for k in points)
    fig, axes = plt.subplots(len(rows), len(measures), squeeze=False,
                             figsize=(4.6 * len(measures), 3.5 * len(rows)))
    for i, (kind, solver) in enumerate(rows):
        here = {k: v for k, v in points.items() if (k[0], k[1]) == (kind, solver)}
        for j, (measure, xlabel) in enumerate(measures):
            ax = axes[i][j]
            xy = []
            lines = defaultdict(list)
            for key, values in sorted(here.items()):
                x = float(np.nanmean(values[measure])) if np.any(np.isfinite(values[measure])) else np.nan
                y = float(np.mean(values["error"]))
                if not (np.isfinite(x) and np.isfinite(y) and y > 0):
                    continue
                xy.append((x, y))
                lines[(key[2], key[4])].append((x, y))
                ax.scatter(x, y, s=36, zorder=3, marker=markers[key[3]], edgecolors=colours[key[2]],
                           facecolors="none" if key[4] > 1 else colours[key[2]])
            for (selector, _), pts in lines.items():  # a selector's budgets, joined by cost
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colours[selector], lw=0.8, alpha=0.6)
            front, best = [], np.inf
            for x, y in sorted(xy):  # the least error for at most this cost
                if y < best:
                    front.append((x, y))
                    best = y
            if len(front) > 1:
                ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="grey", ls="--",
                        lw=1, zorder=2, label="front (least error for the cost)" if i == 0 and j == 0 else None)
            ax.set_yscale("log")
            label_log_axis(ax)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{kind} | {solver}", fontsize=9)
            ax.set_xlabel(xlabel, fontsize=9)
            if j == 0:
                ax.set_ylabel("output error (relative)")
    legend_for(axes[0][0], colours, markers, grouped)
    fig.suptitle("Output error against cost per selector (mean over workloads; lines join a selector's budgets)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.25 / fig.get_figheight()))
    save(fig, out_dir, "error_vs_cost.png")


# ----------------------------------------------------------------------------------------------- plots 8, 9

def event_panels(runs, sel_label):
    """The runs drawn as heads x chunks pictures: for each workload kind its first workload and the first solver
    and G, one run per sparse selector configuration; returns [(kind, [(title, run)])]."""
    runs = [r for r in runs if r["events"].get("mask") is not None and not is_dense(r)]
    out = []
    for kind in sorted({r["a"].get("workload.kind", "?") for r in runs}):
        of_kind = [r for r in runs if r["a"].get("workload.kind", "?") == kind]
        workload = sorted({r["a"].get("workload") for r in of_kind})[0]
        solver = sorted({solver_label(r) for r in of_kind})[0]
        group = sorted({int(r["a"].get("run.group", 1)) for r in of_kind})[0]
        chosen = {}
        for r in of_kind:
            if (r["a"].get("workload"), solver_label(r), int(r["a"].get("run.group", 1))) == (workload, solver, group):
                chosen.setdefault((sel_label(r), budget_text(r)), r)
        if chosen:
            out.append((f"{kind} workload {workload}, {solver}, G={group}, batch 0",
                        [(f"{sel} {budget}".strip(), r) for (sel, budget), r in sorted(chosen.items())]))
    return out


def plot_events(runs, out_dir, sel_label, what):
    """what = 'mask': the event mask; 'score': the scores (log colour), the kept events outlined."""
    sections = event_panels(runs, sel_label)
    if not sections:
        print(f"plot.py: no event masks (events/ not written): skipping event_{what}.png")
        return
    columns = 4
    n_rows = sum(-(-len(panels) // columns) for _, panels in sections)
    heads = max(r["events"]["mask"].shape[0] for _, panels in sections for _, r in panels)
    chunks = max(r["events"]["mask"].shape[1] for _, panels in sections for _, r in panels)
    panel_w = min(4.5, max(2.4, 0.09 * chunks))
    panel_h = max(1.0, 0.16 * heads + 0.7)
    fig, axes = plt.subplots(n_rows, columns, squeeze=False, figsize=(panel_w * columns + 1.2, (panel_h + 0.35) * n_rows + 0.6))
    row = 0
    image = None
    if what == "score":
        scores = np.concatenate([r["events"]["score"].ravel() for _, p in sections for _, r in p
                                 if "score" in r["events"]])
        positive = scores[np.isfinite(scores) & (scores > 0)]
        # a log scale where the scores span decades, linear otherwise (a log bar over one decade has no labels)
        wide = positive.size and positive.max() / positive.min() > 100
        norm = (matplotlib.colors.LogNorm(positive.min(), positive.max()) if wide
                else matplotlib.colors.Normalize(positive.min(), positive.max()) if positive.size else None)
    for heading, panels in sections:
        rows_here = -(-len(panels) // columns)
        for k in range(rows_here * columns):
            ax = axes[row + k // columns][k % columns]
            if k >= len(panels):
                ax.set_visible(False)
                continue
            title, r = panels[k]
            mask = r["events"]["mask"]
            if what == "mask":
                image = ax.imshow(mask, cmap="Greys", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            else:
                score = r["events"].get("score")
                if score is None:
                    ax.set_visible(False)
                    continue
                image = ax.imshow(np.where(score > 0, score, np.nan), cmap="viridis", norm=norm, aspect="auto",
                                  interpolation="nearest")
                kept_h, kept_c = np.nonzero(mask)
                ax.scatter(kept_c, kept_h, s=9, marker="s", facecolors="none", edgecolors="red", linewidths=0.7)
            kept = mask.mean()
            ax.set_title(f"{title} ({100 * kept:.0f}% kept)", fontsize=8)
            ax.tick_params(labelsize=7)
            if k % columns == 0:
                ax.set_ylabel("value head", fontsize=8)
            if k // columns == rows_here - 1:
                ax.set_xlabel("chunk", fontsize=8)
        axes[row][0].annotate(heading, xy=(0, 1), xycoords="axes fraction", xytext=(0, 22),
                              textcoords="offset points", fontsize=9, fontweight="bold", va="bottom")
        row += rows_here
    fig.subplots_adjust(hspace=0.75, wspace=0.25, top=1.0 - 0.9 / fig.get_figheight(),
                        right=0.9 if what == "score" else 0.97)
    if what == "mask":
        fig.suptitle("Event mask: black where the chunk wrote into the head's carried state", fontsize=10)
    else:
        cax = fig.add_axes([0.925, 0.2, 0.012, 0.6])  # beside the panels, never over them
        fig.colorbar(image, cax=cax, label="event score" + (" (log scale)" if wide else ""))
        fig.suptitle("Event scores, heads x chunks (red squares: the events kept; a selector that ignores "
                     "scores shows the default score)", fontsize=10)
    save(fig, out_dir, f"event_{what}.png")


# ----------------------------------------------------------------------------------------------- plot 10

def memory_tokens(workload):
    """Each value head's memory length in tokens, 1 / |g| at the typical decay g = -A softplus(b); a head without
    decay (A = 0, the needle's retrieval heads) remembers the whole sequence (inf). None when unknown."""
    a = workload.get("decay_scale_A")
    b = workload.get("decay_softplus_b")
    if a is None or b is None:
        return None
    if isinstance(a, str):  # schema 1: space-separated text
        a, b = (np.array([float(x) for x in v.split()]) for v in (a, b))
    rate = np.atleast_1d(np.asarray(a, dtype=float)) * np.atleast_1d(np.asarray(b, dtype=float))
    with np.errstate(divide="ignore"):
        return np.where(rate > 0, 1.0 / rate, np.inf)


def plot_error_by_memory(runs, out_dir, sel_label):
    """Output error per head, split by memory length: short-memory heads (1/|g| under one chunk) forget within a
    chunk what a dropped event would have written; long-memory heads carry it into the chunks that follow."""
    rows = []
    for r in runs:
        per_head = r["d"].get("output_error_per_head")
        memory = memory_tokens(r["w"])
        if per_head is None or memory is None or len(memory) != len(per_head):
            continue
        long_memory = memory >= int(r["a"].get("run.chunk", 64))
        rows.append((r, np.asarray(per_head, dtype=float), long_memory))
    if not rows:
        print("plot.py: no output_error_per_head with the heads' decays: skipping error_by_memory.png")
        return
    panels = sorted({(r["a"].get("workload.kind", "?"), solver_label(r)) for r, _, _ in rows})
    configs = sorted({(0 if is_dense(r) else 1, "dense" if is_dense(r) else sel_label(r), budget_text(r))
                      for r, _, _ in rows})
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, figsize=(max(7.0, 0.55 * len(configs) + 2.5),
                                                                      3.2 * len(panels)))
    for i, (kind, solver) in enumerate(panels):
        ax = axes[i][0]
        n_short = n_long = 0
        for split, colour, offset in (("short", "tab:orange", -0.18), ("long", "tab:blue", 0.18)):
            means = []
            for cfg in configs:
                values = []
                for r, errors, long_memory in rows:
                    if (r["a"].get("workload.kind", "?"), solver_label(r)) != (kind, solver):
                        continue
                    if (0 if is_dense(r) else 1, "dense" if is_dense(r) else sel_label(r), budget_text(r)) != cfg:
                        continue
                    chosen = long_memory if split == "long" else ~long_memory
                    values.extend(errors[chosen])
                    if split == "long":
                        n_long = max(n_long, int(long_memory.sum()))
                    else:
                        n_short = max(n_short, int((~long_memory).sum()))
                means.append(np.mean(values) if values else np.nan)
            ax.bar(np.arange(len(configs)) + offset, means, width=0.36, color=colour,
                   label=f"{split}-memory heads" + (" (1/|g| >= C)" if split == "long" else " (1/|g| < C)"))
        ax.set_yscale("log")
        label_log_axis(ax)
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels([f"{c[1]}\n{c[2]}".strip() for c in configs], fontsize=7, rotation=45, ha="right",
                           rotation_mode="anchor")
        ax.set_ylabel("output error per head\n(mean over heads, runs)", fontsize=8)
        ax.set_title(f"{kind} | {solver} (up to {n_short} short- and {n_long} long-memory heads per workload)",
                     fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle("Output error of short- and long-memory heads (memory 1/|g| at the head's typical decay, "
                 "against the chunk size C)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.2 / fig.get_figheight()))
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", ncol=2, fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    save(fig, out_dir, "error_by_memory.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="experiment files written by `sgdn run`")
    parser.add_argument("--out", help="directory for the PNGs (created if missing; default: FILE_plots/ next to "
                                      "the first file)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = os.path.splitext(args.files[0])[0] + "_plots"
    runs = []
    for path in args.files:
        runs.extend(load_runs(path))
    if not runs:
        raise SystemExit(f"plot.py: {', '.join(args.files)}: no runs with metrics")
    os.makedirs(args.out, exist_ok=True)
    sel_label = make_selector_labeller(runs)
    plot_error_vs_rho(runs, args.out, sel_label)
    plot_error_vs_cost(runs, args.out, sel_label)
    plot_events(runs, args.out, sel_label, "mask")
    plot_events(runs, args.out, sel_label, "score")
    plot_error_by_memory(runs, args.out, sel_label)
    plot_needle_heatmap(runs, args.out, sel_label)
    plot_budgets(runs, args.out, sel_label)
    plot_state_error(runs, args.out, sel_label)
    plot_pareto(runs, args.out, sel_label)
    plot_battery(runs, args.out, sel_label)
    plot_solver_cost(runs, args.out, sel_label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
