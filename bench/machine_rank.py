"""How well the machine estimate (SPEC 16, backends/common/machine_model.py) ranks the
measured times of the suite.

    python -m bench.machine_rank [results.json] [--max-n N]

For every tensorlang measurement of a results file (`tl bench` writes one; default the
tracked bench/results.json): the estimated time of the program the Numba backend runs
(the forward function or the derivative, at the measurement's sizes and inputs) against the
measured median.  Prints each pair and Spearman's rank correlation; J^T J v rows (two
programs and a host round trip) are left out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np

from . import HERE, runner
from .tasks import TASKS


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(v: list[float]) -> np.ndarray:
        a = np.asarray(v, dtype=float)
        order = a.argsort(kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a), dtype=float)
        for value in np.unique(a):          # ties share their mean rank
            tie = a == value
            r[tie] = r[tie].mean()
        return r
    rx, ry = ranks(xs), ranks(ys)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def pairs(data: dict[str, Any], max_n: int | None = None) -> list[tuple[str, float, float]]:
    """(label, estimated seconds, measured seconds) for every tensorlang measurement."""
    from tensorlang.backends.common import machine_model

    from .systems_tensorlang import System

    system = System("numba")
    seed = data.get("config", {}).get("seed", 0)
    out: list[tuple[str, float, float]] = []
    for rec in data["records"]:
        if rec["system"] != "tensorlang" or rec["workload"] not in TASKS:
            continue
        task, n = TASKS[rec["workload"]], rec["N"]
        if max_n is not None and n > max_n:
            continue
        _, args = runner.make_inputs(task, n, seed)
        rows: list[tuple[str, Any, dict[str, Any]]] = []
        if rec["f"].get("time"):
            rows.append(("f", system.function(task), rec["f"]))
        for d in task.derivs:
            m = rec["derivatives"].get(d.key, {})
            if d.kind != "jtjv" and m.get("time"):
                rows.append((d.key, system.parts(task, d)[0], m))
        for key, fn, m in rows:
            program = fn.run_to(fn.default_stage())
            names = {p.name for p in program.params}
            est = machine_model.estimate(program, {k: v for k, v in args.items()
                                                   if k in names})
            out.append((f"{task.name} {key} N={n}", est.seconds, float(m["time"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.machine_rank")
    ap.add_argument("results", nargs="?", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--max-n", type=int, default=None)
    ns = ap.parse_args(argv)
    with open(ns.results) as f:
        data = json.load(f)
    got = pairs(data, ns.max_n)
    for label, est, measured in got:
        print(f"{label:<32} est {est * 1e3:10.4f} ms   measured {measured * 1e3:10.4f} ms")
    rho = spearman([g[1] for g in got], [g[2] for g in got])
    print(f"Spearman rank correlation over {len(got)} measurements: {rho:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
