"""PNG plots of a results dict: per workload, time vs N (f solid, derivatives dashed) and the
Griewank ratio (derivative / f) vs N, one line per system; plus a summary of every workload's
Griewank ratio for each system.  matplotlib is optional (the `bench` extra)."""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

COLORS = {"numpy": "tab:blue", "tensorlang": "tab:red", "jax": "tab:green",
          "torch": "tab:orange"}
MARKERS = ["s", "^", "v", "D", "P", "X"]


def _series(data: dict[str, Any], workload: str) -> dict[tuple[str, str], list[tuple]]:
    """(system label, "f" or derivative key) -> [(N, time, ratio)] sorted by N."""
    out: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for rec in data["records"]:
        if rec["workload"] != workload:
            continue
        f = rec["f"]
        if f.get("status") == "ok":
            out[(rec["label"], "f")].append((rec["N"], f["time"], None))
        for key, m in rec["derivatives"].items():
            if m.get("status") == "ok":
                out[(rec["label"], key)].append((rec["N"], m["time"], m.get("ratio")))
    return {k: sorted(v) for k, v in out.items()}


def _color(label: str) -> str:
    return COLORS.get(label.split("[")[0], "tab:gray")


def _labels(data: dict[str, Any], workload: str) -> dict[str, str]:
    for rec in data["records"]:
        if rec["workload"] == workload:
            return {k: m["label"] for k, m in rec["derivatives"].items()}
    return {}


def plot_workload(plt: Any, data: dict[str, Any], workload: str, path: str) -> bool:
    series = _series(data, workload)
    if not series:
        return False
    dlabels = _labels(data, workload)
    markers = {k: MARKERS[i % len(MARKERS)] for i, k in enumerate(dlabels)}
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (label, key), pts in series.items():
        ns = [p[0] for p in pts]
        if key == "f":
            ax_t.plot(ns, [p[1] for p in pts], "-o", color=_color(label), label=f"{label} f")
            continue
        ax_t.plot(ns, [p[1] for p in pts], "--", marker=markers[key], color=_color(label),
                  label=f"{label} {dlabels[key]}")
        rp = [(n, r) for n, _, r in pts if r is not None]
        if rp:
            ax_r.plot([p[0] for p in rp], [p[1] for p in rp], "-", marker=markers[key],
                      color=_color(label), label=f"{label} {dlabels[key]}")
    ax_t.set(xscale="log", yscale="log", xlabel="N", ylabel="time per call (s)",
             title=f"{workload}: time")
    ax_r.axhline(3.0, color="black", lw=0.8, ls=":", label="target 3")
    ax_r.set(xscale="log", yscale="log", xlabel="N", ylabel="time(derivative) / time(f)",
             title=f"{workload}: Griewank ratio")
    for ax in (ax_t, ax_r):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def plot_summary(plt: Any, data: dict[str, Any], path: str) -> bool:
    """Griewank ratio at the largest N measured, per (workload, derivative) and system."""
    best: dict[tuple[str, str], dict[str, tuple[int, float]]] = defaultdict(dict)
    labels: dict[tuple[str, str], str] = {}
    for rec in data["records"]:
        for key, m in rec["derivatives"].items():
            r = m.get("ratio")
            if r is None:
                continue
            row = (rec["workload"], key)
            labels[row] = f"{rec['workload']} {m['label']}"
            prev = best[row].get(rec["label"])
            if prev is None or rec["N"] > prev[0]:
                best[row][rec["label"]] = (rec["N"], r)
    if not best:
        return False
    rows = list(best)
    systems = sorted({s for v in best.values() for s in v}, key=lambda s: list(COLORS).index(
        s.split("[")[0]) if s.split("[")[0] in COLORS else 99)
    fig, ax = plt.subplots(figsize=(12, 0.35 * len(rows) + 1.5))
    h = 0.8 / max(1, len(systems))
    for j, s in enumerate(systems):
        ys = [i + j * h for i in range(len(rows)) if s in best[rows[i]]]
        xs = [best[rows[i]][s][1] for i in range(len(rows)) if s in best[rows[i]]]
        ax.barh(ys, xs, height=h, color=_color(s), label=s)
    ax.axvline(3.0, color="black", lw=0.8, ls=":")
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(rows))])
    ax.set_yticklabels([labels[r] for r in rows], fontsize=7)
    ax.set(xscale="log", xlabel="time(derivative) / time(f) at the largest N measured",
           title="Griewank ratio (target <= 3)")
    ax.invert_yaxis()
    ax.legend(fontsize=7)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.subplots_adjust(left=0.2)  # room for the longest workload labels
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def make_plots(data: dict[str, Any], outdir: str) -> tuple[list[str], str]:
    """Draw every plot into `outdir`; ([paths], reason when there are none)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as err:  # noqa: BLE001 -- optional dependency
        return [], f"matplotlib not importable: {type(err).__name__}: {err}"
    os.makedirs(outdir, exist_ok=True)
    paths = []
    workloads = list(dict.fromkeys(r["workload"] for r in data["records"]))
    for w in workloads:
        path = os.path.join(outdir, f"{w}.png")
        if plot_workload(plt, data, w, path):
            paths.append(path)
    path = os.path.join(outdir, "griewank_summary.png")
    if plot_summary(plt, data, path):
        paths.append(path)
    return paths, "" if paths else "no successful measurements"
