"""On a machine with a CUDA GPU: run the CUDA backend's equivalence tests, check every workload
on the CUDA backend against the interpreter, then run the benchmark suite with
`--backend cuda` (results in bench/gpu/).

    python bench/gpu.py [--sizes 10,100,1000] [--repeat R] [--skip-tests] [NAME ...]

Exits 0 with a message, doing nothing, when there is no usable GPU (numba.cuda unavailable,
or only the simulator `NUMBA_ENABLE_CUDASIM=1`) or when the CUDA backend is not available
(`Function.compile(backend="cuda")` raises `NotYetSupported`); exits 1 when a test, an
equivalence check or a benchmark value fails.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script: make `bench` and `tensorlang` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-9          # SPEC 8: all backends agree with the interpreter to 1e-9 in float64
EQUIV_N = 8


def gpu_status() -> tuple[bool, str]:
    """(usable, description): a real CUDA device visible to numba."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False, "NUMBA_ENABLE_CUDASIM=1 selects the CUDA simulator, not a GPU"
    try:
        from numba import cuda
    except Exception as err:  # noqa: BLE001 -- numba without CUDA support
        return False, f"numba.cuda does not import ({type(err).__name__}: {err})"
    try:
        if not cuda.is_available():
            return False, "no CUDA GPU (numba.cuda.is_available() is False)"
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        return True, f"{name} (compute capability {'.'.join(map(str, dev.compute_capability))})"
    except Exception as err:  # noqa: BLE001 -- driver problems
        return False, f"CUDA is not usable ({type(err).__name__}: {err})"


def backend_status() -> tuple[bool, str]:
    """Whether tensorlang's CUDA backend compiles a simple program."""
    import tensorlang as tl

    from bench.tasks import EXAMPLES

    try:
        tl.load(EXAMPLES / "qform.tl")["qform"].compile(backend="cuda")
    except tl.NotYetSupported as err:
        return False, f"the CUDA backend is not available: {err}"
    except tl.TLError as err:
        return False, f"the CUDA backend rejected qform: {err}"
    return True, "ok"


def run_cuda_tests() -> int:
    """pytest on the tests about CUDA (by name), on the real GPU (simulator off)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    cmd = [sys.executable, "-m", "pytest", "-q", "tests", "-k", "cuda"]
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if rc == 5:
        print("no CUDA tests were collected", flush=True)
        return 0
    return rc


def equivalence(names: Sequence[str], n: int = EQUIV_N) -> list[str]:
    """Every workload's f and derived defs: CUDA backend against the interpreter.  Returns the
    failures (n/a ones are reported, not failed)."""
    import tensorlang as tl

    from bench.runner import compare, derivative_inputs, make_inputs
    from bench.tasks import EXAMPLES, TASKS

    failures = []
    for name in names:
        task = TASKS[name]
        sizes, args = make_inputs(task, n, seed=0)
        dargs = derivative_inputs(task, args, task.workload.ref(args), seed=0)
        module = tl.load(EXAMPLES / task.workload.file)
        f = module[task.workload.func]
        todo: list[tuple[str, dict[str, Any]]] = [(f.name, {p.name: args[p.name]
                                                             for p in f.params})]
        todo += [(d.tl_def, d.def_args([p.name for p in module[d.tl_def].params],
                                       [p.name for p in f.params],
                                       dargs[d.key]))
                 for d in task.derivs if d.tl_def in module]
        for fname, kw in todo:
            fn = module[fname]
            try:
                want = fn.compile("interp")(**kw)
                got = fn.compile("cuda")(**kw)
            except tl.NotYetSupported as err:
                print(f"  {name}/{fname}: n/a ({str(err).splitlines()[0][:120]})")
                continue
            except Exception as err:  # noqa: BLE001 -- report and go on
                failures.append(f"{name}/{fname}: {type(err).__name__}: {err}")
                print(f"  {name}/{fname}: ERROR {type(err).__name__}: {err}")
                continue
            ok, rel, msg = compare(got, want, RTOL)
            print(f"  {name}/{fname}: {'ok' if ok else 'MISMATCH ' + msg} (rel {rel:.1e})")
            if not ok:
                failures.append(f"{name}/{fname}: {msg}")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gpu.py", description=__doc__.splitlines()[0])
    p.add_argument("names", metavar="NAME", nargs="*")
    p.add_argument("--sizes", default="10,100,1000")
    p.add_argument("--repeat", default="5")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "gpu"))
    ns = p.parse_args(argv)

    ok, what = gpu_status()
    if not ok:
        print(f"bench/gpu.py: {what}; nothing to do.")
        return 0
    print(f"GPU: {what}", flush=True)
    ok, what = backend_status()
    if not ok:
        print(f"bench/gpu.py: {what}; nothing to do.")
        return 0

    from bench.tasks import TASKS

    names = ns.names or list(TASKS)
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}")
    rc_tests = 0 if ns.skip_tests else run_cuda_tests()
    print(f"equivalence with the interpreter (N = {EQUIV_N}, rtol {RTOL:g}):", flush=True)
    failures = equivalence(names)
    import bench

    rc_bench = bench.main([*names, "--backend", "cuda", "--sizes", ns.sizes,
                           "--repeat", ns.repeat, "--out", ns.out])
    print(f"bench/gpu.py: tests {'ok' if rc_tests == 0 else 'FAILED'}, equivalence "
          f"{'ok' if not failures else f'{len(failures)} FAILED'}, benchmark "
          f"{'ok' if rc_bench == 0 else 'with failures'} (results in {ns.out})")
    return 0 if rc_tests == 0 and not failures and rc_bench == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
