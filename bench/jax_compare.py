"""Our derivatives on the jax backend against JAX's own AD, on the same engine (SPEC 14).

    python -m bench.jax_compare [NAME ...] [--sizes 10,100,1000] [--repeat 5] [--json PATH]

For every workload of the suite (bench/tasks.py) and each of its derivatives: the derivative
program tensorlang derives and simplifies, compiled by the jax backend, against
`jax.grad` / `jax.hessian` / `jax.jvp` / `jax.vjp` of the equivalent JAX function
(bench/forwards.py, as the "jax" column of `tl bench` builds it).  Both are jitted by XLA in
float64 on device-resident inputs and timed with `block_until_ready` (median of `--repeat`
runs after a warm-up that compiles); the values are checked against each other.  The ratio
is JAX's time over ours: above 1, ours is faster.  J^T J v is a jvp then a vjp in both (ours
passes the tangent through the host between the two programs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from . import forwards
from .tasks import TASKS, Deriv, Task


def _median_time(run: Callable[[], Any], repeat: int) -> float:
    run()                                   # compile (and warm up)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _flat(value: Any) -> np.ndarray:
    if isinstance(value, (tuple, list)):
        parts = [_flat(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(value, dtype=np.float64).ravel()


class Ours:
    """tensorlang's derivative programs on the jax backend."""

    def __init__(self) -> None:
        from .systems_tensorlang import System

        self.system = System("jax")

    def thunk(self, task: Task, d: Deriv, args: dict[str, Any]) -> tuple[Callable[[], Any], Any]:
        parts = self.system.parts(task, d)
        if d.kind != "jtjv":
            from tensorlang.backends import jax_backend

            fn = parts[0]
            mine = fn.bind(**{p.name: args[p.name] for p in fn.params})
            program = jax_backend.compile_program(fn.run_to(fn.default_stage()))
            return program.prepared(mine), program(mine)
        jvp, vjp = (p.compile("jax") for p in parts)
        names = [[p.name for p in f.params] for f in parts]

        def jtjv() -> Any:
            _, jv = jvp(**{n: args[n] for n in names[0]})
            return tuple(vjp(**{n: args[n] for n in names[1] if n != "d_y"}, d_y=jv)[1:])
        return jtjv, jtjv()

    def forward(self, task: Task, args: dict[str, Any]) -> Any:
        fn = self.system.function(task)
        return fn.compile("jax")(**{p.name: args[p.name] for p in fn.params})


class JaxAD:
    """JAX's AD of the forward function (bench/systems_jax.py)."""

    def __init__(self) -> None:
        from .systems_jax import System

        self.system = System()

    def thunk(self, task: Task, d: Deriv, args: dict[str, Any]) -> tuple[Callable[[], Any], Any]:
        run = self.system.derivative(task, d, args)
        return run, run()


def compare(tasks: Sequence[Task], sizes: Sequence[int], repeat: int,
            progress: Callable[[str], None]) -> list[dict[str, Any]]:
    ours, theirs = Ours(), JaxAD()
    rows: list[dict[str, Any]] = []
    for task in tasks:
        if task.name in forwards.DERIVED or task.name not in forwards.FORWARDS:
            continue
        for d in task.derivs:
            for n in sizes:
                if not task.fits(n, d):
                    continue
                w = task.workload
                rng = np.random.default_rng(n)
                args = w.inputs(w.sizes(n), rng)
                row: dict[str, Any] = {"workload": task.name, "derivative": d.label, "N": n}
                try:
                    fwd = ours.forward(task, args)
                    args = {**args, **d.extras(args, fwd, rng)}
                    run_ours, val_ours = ours.thunk(task, d, args)
                    run_jax, val_jax = theirs.thunk(task, d, args)
                    a, b = _flat(val_ours), _flat(val_jax)
                    row["check"] = ("ok" if a.shape == b.shape and np.allclose(
                        a, b, rtol=1e-6, atol=1e-9 * max(1.0, float(np.abs(b).max(initial=0))))
                        else "mismatch")
                    row["ours_s"] = _median_time(run_ours, repeat)
                    row["jax_s"] = _median_time(run_jax, repeat)
                    row["ratio"] = row["jax_s"] / row["ours_s"]
                except Exception as err:  # noqa: BLE001 -- one failure is one row, reported
                    row["error"] = f"{type(err).__name__}: {err}"[:200]
                progress(_line(row))
                rows.append(row)
    return rows


def _line(row: dict[str, Any]) -> str:
    head = f"{row['workload']:<12} {row['derivative']:<20} {row['N']:>6}"
    if "error" in row:
        return f"{head}  error: {row['error']}"
    return (f"{head} {row['ours_s'] * 1e3:>12.3f} {row['jax_s'] * 1e3:>12.3f} "
            f"{row['ratio']:>9.2f}  {row['check']}")


def render(rows: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'workload':<12} {'derivative':<20} {'N':>6} {'ours ms':>12} {'jax AD ms':>12} "
             f"{'jax/ours':>9}  check", "-" * 84]
    lines += [_line(r) for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jax_compare", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("names", nargs="*", help="workloads (default: all)")
    p.add_argument("--sizes", default="10,100,1000")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default=None, metavar="PATH")
    ns = p.parse_args(argv)
    unknown = [n for n in ns.names if n not in TASKS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}")
    tasks = [TASKS[n] for n in ns.names] if ns.names else list(TASKS.values())
    sizes = sorted({int(s) for s in ns.sizes.split(",") if s})
    rows = compare(tasks, sizes, max(1, ns.repeat),
                   lambda msg: print(msg, file=sys.stderr, flush=True))
    print(render(rows))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if "error" in r or r.get("check") == "mismatch"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
