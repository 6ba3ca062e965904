"""`tl bench` once its arguments are parsed: pick workloads and systems, run the sweep,
write results.json (in `results_dir`), print the table, draw the plots, and (with --doc) the performance page."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from . import runner, table
from .tasks import TASKS, Task

QUICK_BUDGET = 0.5
RESULTS_VAR = "TENSORLANG_BENCH_DIR"


def results_dir(ns: argparse.Namespace) -> str:
    """Where results.json and plots/ go: `--out`; with `--doc` the tracked bench/ (the page
    shows those plots); else $TENSORLANG_BENCH_DIR or the user's cache directory, so that a
    quick run never overwrites the results recorded in the repository."""
    if ns.out:
        return ns.out
    if ns.doc:
        from . import HERE

        return HERE
    if os.environ.get(RESULTS_VAR):
        return os.environ[RESULTS_VAR]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tensorlang", "bench")


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def select_tasks(names: list[str], parser: argparse.ArgumentParser) -> list[Task]:
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)} "
                     f"(workloads: {', '.join(TASKS)})")
    return [TASKS[n] for n in names] if names else list(TASKS.values())


def make_systems(wanted: list[str], backend: str | None) -> tuple[list[Any], dict[str, str]]:
    """The systems to run, in table order; optional ones that do not import are reported."""
    from . import systems_jax, systems_numpy, systems_tensorlang, systems_torch

    systems: list[Any] = []
    unavailable: dict[str, str] = {}
    for name in wanted:
        if name == "numpy":
            systems.append(systems_numpy.System())
        elif name == "tensorlang":
            systems.append(systems_tensorlang.System(backend))
        else:
            mod = systems_jax if name == "jax" else systems_torch
            ok, why = mod.available()
            if not ok:
                unavailable[name] = why
                continue
            try:
                systems.append(mod.System())
            except Exception as err:  # noqa: BLE001 -- e.g. a broken install
                unavailable[name] = f"{type(err).__name__}: {err}"
    return systems, unavailable


def config_from(ns: argparse.Namespace) -> runner.Config:
    from . import DEFAULT_SIZES, DOC_SIZES, QUICK_SIZES

    sizes = ns.sizes or list(QUICK_SIZES if ns.quick else DOC_SIZES if ns.doc else DEFAULT_SIZES)
    repeat = ns.repeat if ns.repeat is not None else (3 if ns.quick else 5)
    budget = ns.budget if ns.budget is not None else (QUICK_BUDGET if ns.quick else 2.0)
    if ns.mem_limit is None:
        allowance = min(8 << 30, runner.available_memory() // 2) or None
    else:
        allowance = int(ns.mem_limit * (1 << 30)) or None
    return runner.Config(sizes=sizes, repeat=max(1, repeat), budget=max(0.0, budget),
                         seed=ns.seed, memory=not ns.no_memory, backend=ns.backend,
                         max_n=ns.max_n, mem_allowance=allowance,
                         timeout=ns.timeout if ns.timeout > 0 else None)


def run(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        tasks = select_tasks(list(ns.names), parser)
    except SystemExit as exc:
        return int(exc.code or 2)
    cfg = config_from(ns)
    systems, unavailable = make_systems(list(ns.systems), ns.backend)
    for name, why in unavailable.items():
        progress(f"{name}: not run ({why})")
    suite = runner.Suite(cfg, systems, unavailable)
    if any(s.name == "tensorlang" for s in systems):
        from .costs import CostWorker

        suite.cost_worker = CostWorker(ns.cost_timeout, cfg.mem_allowance)
    out_dir = results_dir(ns)
    os.makedirs(out_dir, exist_ok=True)
    out_json = os.path.join(out_dir, "results.json")
    t0 = time.perf_counter()

    def checkpoint(s: runner.Suite) -> None:
        # Partial results survive a crash in results.json.tmp (git-ignored), which the final
        # atomic write of results.json replaces.
        runner.write_json(runner.to_json(s, names=ns.names), out_json + ".tmp", atomic=False)

    try:
        runner.run_suite(suite, tasks, progress, checkpoint)
    finally:
        if suite.cost_worker is not None:
            suite.cost_worker.close()
    startup: list[dict[str, Any]] = []
    if ns.startup or ns.doc:
        backend = next((s.backend for s in systems if hasattr(s, "backend")), "interp")
        startup = runner.startup_all(tasks, backend, progress)
    data = runner.to_json(suite, startup, ns.names)
    if ns.startup or ns.doc:
        from . import startup as startup_cache   # warm/cold start-up ratios (issue 16)

        data["startup_cache"] = startup_cache.run(progress=progress)
        progress(startup_cache.describe(data["startup_cache"]))
    if ns.overhead or ns.doc:
        from . import overhead   # the per-call cost at N = 1 against JAX jit (issue 14)

        try:
            data["overhead"] = overhead.run(progress=progress)
        except ImportError as err:
            progress(f"overhead: not run ({err})")
    data["elapsed_s"] = time.perf_counter() - t0
    runner.write_json(data, out_json)
    print(table.render(data))
    print(table.legend())
    progress(f"results: {out_json} ({data['elapsed_s']:.0f} s)")
    plots: list[str] = []
    if not ns.no_plots:
        from . import plots as plotting

        plots, why = plotting.make_plots(data, os.path.join(out_dir, "plots"))
        progress(f"plots: {len(plots)} PNG in {os.path.join(out_dir, 'plots')}"
                 if plots else f"plots: none ({why})")
    if ns.doc:
        from . import report

        report.write(data, ns.doc, plots)
        progress(f"wrote {ns.doc}")
    return summary_code(data)


def summary_code(data: dict[str, Any]) -> int:
    """1 when any value disagreed with the reference or any system failed, else 0."""
    bad = []
    for rec in data["records"]:
        for tag, m in [("f", rec["f"]), *rec["derivatives"].items()]:
            if m.get("check") == "mismatch" or m.get("status") == "error":
                bad.append(f"{rec['workload']} N={rec['N']} {rec['label']} {tag}")
    bad += [f"{s['workload']} N={s['N']}" for s in data.get("skipped", []) if "error" in s]
    if bad:
        progress(f"{len(bad)} measurement(s) failed or disagree with the reference: "
                 + "; ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""))
        return 1
    return 0
