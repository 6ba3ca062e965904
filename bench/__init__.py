"""The benchmark suite of SPEC 11: `tl bench [NAME ...] [--sizes 10,100,1000] [--repeat R]
[--quick] ...` (or `python -m bench ...`).

For every workload (examples/numpy_ref.py `WORKLOADS`, derivatives in `bench/tasks.py`) and
every size N: the time of f and of its derivatives for tensorlang (default backend), the
hand-written numpy version, and JAX / PyTorch when installed; the Griewank ratio
(derivative / f), tensorlang's cost-model counts, peak memory, and a check of every value
against the numpy reference.  Output: a table on stdout, `results.json` and PNG plots in
`plots/` of the results directory (`--out DIR`; by default a per-user directory, see
`bench.command.results_dir`, so that a run never overwrites the tracked `bench/results.json`),
progress on stderr; `--doc` regenerates docs/performance.md and writes to `bench/`.

This module stays light (no tensorlang, jax or torch import) so that `bench.tasks` can be
imported cheaply, e.g. by the start-up measurement's fresh processes.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

__all__ = ["main", "build_parser", "DEFAULT_SIZES"]

DEFAULT_SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 100)
DOC_SIZES = (10, 100, 1000, 2000)   # --doc: issue 14's targets are stated at 1000 and 2000
SYSTEMS = ("numpy", "tensorlang", "jax", "torch")
HERE = os.path.dirname(os.path.abspath(__file__))


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 10,100,1000, got {text!r}")
    if not sizes or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sorted(set(sizes))


def _systems(text: str) -> list[str]:
    names = [s for s in text.replace(" ", "").split(",") if s]
    bad = [s for s in names if s not in SYSTEMS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown system(s) {', '.join(bad) or text!r} "
                                         f"(systems: {', '.join(SYSTEMS)})")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tl bench", description="Time every SPEC 11 workload and its derivatives for "
        "tensorlang, numpy, JAX and PyTorch.")
    p.add_argument("names", metavar="NAME", nargs="*", help="workloads (default: all)")
    p.add_argument("--sizes", type=_sizes, default=None, metavar="N,N,...",
                   help=f"problem sizes (default {','.join(map(str, DEFAULT_SIZES))}, with "
                        f"--doc {','.join(map(str, DOC_SIZES))}; workloads with a size cap "
                        "stop below it)")
    p.add_argument("--repeat", type=int, default=None, metavar="R",
                   help="interleaved timing rounds (samples per measurement), the best reported "
                        "(default 5)")
    p.add_argument("--quick", action="store_true",
                   help=f"sizes {','.join(map(str, QUICK_SIZES))}, 3 samples, short budget")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="timing time per measurement after warm-up (default 2; quick 0.5)")
    p.add_argument("--systems", type=_systems, default=list(SYSTEMS), metavar="S,S,...",
                   help=f"systems to run (default all installed: {','.join(SYSTEMS)})")
    p.add_argument("--backend", choices=("interp", "numba", "cuda", "jax"), default=None,
                   help="tensorlang backend (default: the API's default backend)")
    p.add_argument("--max-n", type=int, default=None, help="skip sizes above this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, metavar="T",
                   help="threads for every system (BLAS, OpenMP, XLA, numba; default 1: the "
                        "machine is shared and oversubscribed thread pools wreck timings); "
                        "0 leaves the environment alone")
    p.add_argument("--mem-limit", type=float, default=None, metavar="GB",
                   help="memory one measurement may allocate before it fails as OOM "
                        "(default: half the available memory, at most 8; 0: no limit)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="limit of one measurement (warm-up included; default 300)")
    p.add_argument("--cost-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="limit of one cost-model count (default 60; then the count is taken "
                        "before the simplifier)")
    p.add_argument("--no-memory", action="store_true", help="skip peak-memory measurement")
    p.add_argument("--startup", action="store_true",
                   help="also time the whole pipeline + cached kernel load in fresh processes")
    p.add_argument("--overhead", action="store_true",
                   help="also time the per-call overhead at N = 1 against JAX jit "
                        "(bench/overhead.py)")
    p.add_argument("--checking", action="store_true",
                   help="only time checking against program size (1,000 to 10,000 "
                        "statements and terms, 100 to 1,000 chained defs; "
                        "bench/checking.py) and print the table")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where results.json and plots/ go (default: $TENSORLANG_BENCH_DIR, "
                        "else ~/.cache/tensorlang/bench; bench/ itself with --doc)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--doc", nargs="?", const=os.path.join(os.path.dirname(HERE), "docs",
                                                           "performance.md"),
                   default=None, metavar="PATH",
                   help="regenerate docs/performance.md (implies --startup and --overhead)")
    return p


def main(names: Sequence[str] = (), argv: Sequence[str] | None = None) -> int:
    """Entry point of `tl bench`: `names` are the command-line words after `bench` (workload
    names, and options when the CLI passes them through); `argv` more of them."""
    words = [*names, *(argv or [])]
    parser = build_parser()
    try:
        ns = parser.parse_args(words)
    except SystemExit as exc:  # usage error or --help
        return int(exc.code or 0)
    if ns.checking:  # single-process, front end only (issue 13)
        from . import checking

        data = checking.run(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        print(checking.describe(data))
        return 0 if all(data[f]["spread"] <= checking.LINEAR_SPREAD
                        for f in checking.FAMILIES) else 1
    if ns.threads > 0:
        pin_cores(ns.threads)
    if ns.threads > 0 and os.environ.get(THREADS_VAR) != str(ns.threads):
        env = thread_env(ns.threads)
        if not any(m in sys.modules for m in _THREADED_MODULES):
            os.environ.update(env)  # nothing has started a thread pool yet: set it here
        else:  # numpy (or torch...) is loaded with its own thread count: run in a child
            import subprocess

            root = os.path.dirname(HERE)
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
            cmd = [sys.executable, "-m", "bench", *words]
            return subprocess.run(cmd, env={**os.environ, **env, "PYTHONPATH": path}).returncode
    from . import command

    return command.run(ns, parser)


THREADS_VAR = "TL_BENCH_THREADS"
_THREADED_MODULES = ("numpy", "torch", "jax", "jaxlib", "numba", "scipy")


def thread_env(threads: int) -> dict[str, str]:
    """Environment that sizes every thread pool the systems use; read when they load."""
    env = {THREADS_VAR: str(threads)}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            env["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    return env


def pin_cores(threads: int) -> list[int]:
    """Keep this process (and the children it starts) on `threads` cores, the first of those
    it may use; returns them.  Thread-pool sizes alone do not bound a system: XLA's CPU
    runtime runs large fusions on a second thread even with one Eigen thread (1.5x more CPU
    time than wall time measured at N = 2000), so without this JAX used two cores while the
    others used one.  A no-op where the OS has no affinity call or allows fewer cores."""
    if not hasattr(os, "sched_setaffinity"):
        return []
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > threads:
        os.sched_setaffinity(0, allowed[:threads])
        return allowed[:threads]
    return allowed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
