"""The per-call overhead row of the benchmark suite (issue 14): tensorlang against JAX jit at
N = 1, where a call is nothing but its fixed cost.

    python -m bench.overhead [--rounds R] [--calls C] [--json PATH]

Cases: `qform` f and gradient (examples/qform.tl) and `masked` f with its relation given as a
`tl.Relation` (examples/masked.tl), each called through the API (`m.qform(x=x, A=A)`:
binding, memory check, kernel, result) against the same function under `jax.jit` on
device-resident float64 inputs, `block_until_ready`.  Interleaved: round r times a batch of
C calls of every case before round r + 1 starts, so load on a shared machine hits all alike;
per case the best batch of the rounds is reported (the fixed cost, not the noise), as
microseconds per call and the ratio tensorlang / JAX (the target: at most 2).
`tl bench --overhead` (and `--doc`) stores the record under `"overhead"` in results.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from .runner import load_average
from .tasks import EXAMPLES

TARGET = 2.0   # tensorlang / JAX per call at N = 1 (issue 14)


def _cases() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (tensorlang call, JAX call), both warm (compiled) and checked to agree."""
    import jax
    import jax.numpy as jnp

    import tensorlang as tl

    jax.config.update("jax_enable_x64", True)
    qform = tl.load(str(EXAMPLES / "qform.tl"))
    masked = tl.load(str(EXAMPLES / "masked.tl"))
    grad = tl.grad(qform.qform, "x")
    x, A = np.array([0.5]), np.array([[2.0]])
    E = tl.Relation(np.ones((1, 1), dtype=bool))
    xj, Aj, Ej = jnp.asarray(x), jnp.asarray(A), jnp.asarray(np.zeros((1, 1), dtype=bool))

    def jq(x: Any, A: Any) -> Any:
        return x @ (A @ x)

    def jm(A: Any, M: Any) -> Any:
        return jnp.sum(jnp.where(M, A * A, 0.0))

    jf, jg, jmask = jax.jit(jq), jax.jit(jax.grad(jq)), jax.jit(jm)
    cases = {
        "qform f": (lambda: qform.qform(x=x, A=A), lambda: jf(xj, Aj).block_until_ready()),
        "qform grad": (lambda: grad(x=x, A=A), lambda: jg(xj, Aj).block_until_ready()),
        "masked f": (lambda: masked.masked(E=E, A=A), lambda: jmask(Aj, Ej).block_until_ready()),
    }
    for name, (ours, theirs) in cases.items():
        a, b = np.asarray(ours()), np.asarray(theirs())
        if not np.allclose(a, b, rtol=1e-12, atol=1e-12):
            raise AssertionError(f"overhead case {name}: tensorlang {a} != jax {b}")
    return cases


def run(rounds: int = 7, calls: int = 2000,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The overhead record (see the module docstring)."""
    cases = _cases()
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for name, pair in cases.items():
            for system, call in zip(("tensorlang", "jax"), pair):
                t0 = time.perf_counter()
                for _ in range(calls):
                    call()
                per = (time.perf_counter() - t0) / calls
                key = (name, system)
                best[key] = min(best.get(key, per), per)
    rows = []
    for name in cases:
        ours, theirs = best[(name, "tensorlang")], best[(name, "jax")]
        rows.append({"case": name, "tensorlang_us": ours * 1e6, "jax_us": theirs * 1e6,
                     "ratio": ours / theirs})
    rec = {"rounds": rounds, "calls": calls, "target": TARGET, "rows": rows,
           "load_average": load_average(), "numba_threads": os.environ.get("NUMBA_NUM_THREADS")}
    progress(describe(rec))
    return rec



def describe(rec: dict[str, Any]) -> str:
    lines = [f"per-call overhead at N = 1 (best of {rec['rounds']} interleaved rounds of "
             f"{rec['calls']} calls; load average {rec.get('load_average')}):",
             f"  {'case':<12} {'tensorlang us':>14} {'jax jit us':>11} {'ratio':>7}"]
    for r in rec["rows"]:
        lines.append(f"  {r['case']:<12} {r['tensorlang_us']:>14.1f} {r['jax_us']:>11.1f} "
                     f"{r['ratio']:>7.2f}{'' if r['ratio'] <= rec['target'] else '  > target'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default=None, metavar="PATH")
    ns = p.parse_args(argv)
    rec = run(max(1, ns.rounds), max(1, ns.calls))
    print(describe(rec))
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as fh:
            json.dump(rec, fh, indent=1)
    return 0 if all(r["ratio"] <= TARGET for r in rec["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
