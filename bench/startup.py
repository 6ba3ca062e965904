"""The start-up section of the benchmark suite (issue 16, SPEC 15, docs/caching.md).

Measured in one run, in fresh processes, interleaved (round r times every warm command once
before round r + 1 starts, so load on a shared machine hits all of them alike):

  numpy          `python -c "import numpy"`: the unit of the ratios
  tl_run         warm `tl run examples/qform.tl qform_hess --random N=3` (derived Hessian)
  api_first      warm `import tensorlang; tl.load(...); first call` of the same function
  numba_floor    a process that imports Numba and calls one cached `@njit` function: the
                 part of a warm call that is Numba's own start-up, for reference
  redefine       in one process, after a first call: parse the same text again and call
                 (what the REPL does when a def is entered again unchanged)

then, each in a process with `TENSORLANG_CACHE_DIR` pointed at a fresh empty folder:

  cold           the first call of every derived function of every example (compilation
                 included), and the Hessian of a 50-term expression.

Warm processes run with Python's bytecode cache on (in a private folder, filled by the first
round's warm-up), as an installed package would.  Warm numbers are the best and the median
over the rounds; the ratios are of the best times (the least disturbed by other load on a
shared machine) to the best `numpy` time, and also given for the medians.  Each cold record
says which engine ran (the AOT image or Numba's JIT, docs/caching.md "Engines").  `run()`
returns the record `tl bench --startup` stores under `"startup_cache"` in results.json.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import numpy as np

from .runner import load_average
from .tasks import EXAMPLES, ROOT

HESSIAN_FILE = EXAMPLES / "qform.tl"
HESSIAN_FUNC = "qform_hess"
SIZES_FOR_COLD = 4           # every size parameter of the cold calls
LIMITS = {"warm_tl_run": 3.0, "warm_api_first_call": 2.0, "cold_first_call_s": 30.0,
          "terms50_hessian_s": 60.0}

_API_FIRST = """
import sys
import numpy as np
import tensorlang as tl
m = tl.load(sys.argv[1])
m.{func}(x=np.arange(3.0), A=np.eye(3))
"""

_REDEFINE = """
import sys, time, json
import numpy as np
import tensorlang as tl
text = open(sys.argv[1]).read()
tl.parse(text).{func}(x=np.arange(3.0), A=np.eye(3))
t0 = time.perf_counter()
tl.parse(text).{func}(x=np.arange(3.0), A=np.eye(3))
print(json.dumps(time.perf_counter() - t0))
"""

_COLD = """
import sys, time, json
import numpy as np
t0, c0 = time.perf_counter(), time.process_time()
import tensorlang as tl
from tensorlang import cli
m = tl.load(sys.argv[1])
fn = m[sys.argv[2]]
if len(sys.argv) > 3:        # inputs that must be well formed (SPD matrices)
    args = {{k: v[()] for k, v in np.load(sys.argv[3]).items()}}
else:
    args = cli.build_args(fn, {{}}, {{p.name: {n} for p in fn.params
                                  if tl.api.format_type(p.type) == "size"}}, 0)
t1, c1 = time.perf_counter(), time.process_time()
fn(**args)
t2, c2 = time.perf_counter(), time.process_time()
c = fn.compile("numba")._run
print(json.dumps({{"import_and_load": t1 - t0, "first_call": t2 - t1,
                  "first_call_cpu": c2 - c1, "engine": getattr(c, "last_engine", "staged")}}))
"""


_NUMBA_FLOOR = """
import numpy as np
from numba import njit


@njit(cache=True)
def total(a):
    return a.sum()


def run():
    total(np.ones(3))
"""


def terms50_source(terms: int = 50) -> str:
    """A real function of `x: R[N]` whose body is a sum of `terms` different terms (builtins
    of `x[i]` and of `x[i] * x[j]`), and its materialised Hessian."""
    fns = ("sin", "cos", "tanh", "sigmoid", "softplus", "exp")
    parts = []
    for k in range(terms):
        fn, a = fns[k % len(fns)], round(0.1 + 0.01 * k, 4)
        arg = f"{a} * x[i] * x[j]" if k % 2 else f"{a} * x[i]"
        parts.append(f"{round(0.5 + 0.02 * k, 4)} * {fn}({arg})")
    return (f"def terms{terms}(N: size, x: R[N]) -> R:\n"
            f"    return sum i:N. sum j:N. {' + '.join(parts)}\n\n"
            f"def terms{terms}_hess = hessian(terms{terms}, x)\n")


def _env(cache_dir: str, pycache: str | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, TENSORLANG_CACHE_DIR=cache_dir, PYTHONPATH=path)
    env.pop("TENSORLANG_ENGINE", None)
    if pycache is not None:   # bytecode cached, as for an installed package
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def _wall(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, str]:
    return _timed(cmd, env, timeout)[0], _timed.last_stdout


def _timed(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of running `cmd`.  CPU time
    is what load on a shared machine disturbs least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {tail[:300]}")   # cmd[2] is a script
    _timed.last_stdout = proc.stdout
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


_timed.last_stdout = ""


def _derived() -> list[tuple[str, str, str]]:
    """(example file, derived function, the function it differentiates)."""
    import re

    out = []
    for path in sorted(EXAMPLES.rglob("*.tl")):
        for m in re.finditer(r"^def\s+(\w+)\s*=\s*(?:grad|jvp|vjp|hvp|hessian|jacobian)"
                             r"\(\s*(\w+)", path.read_text(encoding="utf-8"), re.M):
            out.append((str(path.relative_to(EXAMPLES)), m.group(1), m.group(2)))
    return out


def _inputs_file(tmp: str, file: str, base: str, k: int) -> list[str]:
    """For a linear-algebra example, its workload's well-formed inputs (random matrices are
    not positive definite) saved to an .npz the cold call reads; [] for the others."""
    from .linalg import _refs

    for w in _refs().LINALG_WORKLOADS.values():
        if w.file == file and w.func == base:
            path = os.path.join(tmp, f"inputs{k}.npz")
            np.savez(path, **w.inputs(w.sizes(SIZES_FOR_COLD), np.random.default_rng(0)))
            return [path]
    return []


def run(rounds: int = 5, progress: Callable[[str], None] = lambda s: None,
        cold: bool = True, timeout: float = 900.0) -> dict[str, Any]:
    """The start-up record (see the module docstring)."""
    py = sys.executable
    tl_cmd = [py, "-m", "tensorlang.cli", "run", str(HESSIAN_FILE), HESSIAN_FUNC,
              "--random", "N=3"]
    warm: dict[str, list[str]] = {
        "numpy": [py, "-c", "import numpy"],
        "tl_run": tl_cmd,
        "api_first": [py, "-c", _API_FIRST.format(func=HESSIAN_FUNC), str(HESSIAN_FILE)],
    }
    out: dict[str, Any] = {"rounds": rounds, "limits": LIMITS, "load_average": load_average()}
    with tempfile.TemporaryDirectory(prefix="tl-bench-startup-") as tmp:
        env = _env(os.path.join(tmp, "warm"), os.path.join(tmp, "pycache"))
        with open(os.path.join(tmp, "numba_floor.py"), "w", encoding="utf-8") as fh:
            fh.write(_NUMBA_FLOOR)
        # Numba's own fixed cost: import, CPU target set-up, load of one cached function
        warm["numba_floor"] = [py, "-c", f"import sys; sys.path.insert(0, {tmp!r}); "
                               "import numba_floor; numba_floor.run()"]
        for cmd in warm.values():      # fill the caches (not measured)
            _wall(cmd, env, timeout)
        times: dict[str, list[float]] = {k: [] for k in [*warm, "redefine"]}
        cpu: dict[str, list[float]] = {k: [] for k in warm}
        for r in range(rounds):
            for name, cmd in warm.items():
                wall, used = _timed(cmd, env, timeout)
                times[name].append(wall)
                cpu[name].append(used)
            _, text = _wall([py, "-c", _REDEFINE.format(func=HESSIAN_FUNC),
                             str(HESSIAN_FILE)], env, timeout)
            times["redefine"].append(float(json.loads(text.strip().splitlines()[-1])))
            progress(f"start-up round {r + 1}/{rounds}: " +
                     ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()))
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        out["warm_s"] = best
        out["warm_median_s"] = med
        out["warm_samples_s"] = times

        def ratios(t: dict[str, float]) -> dict[str, float]:
            return {"warm_tl_run": t["tl_run"] / t["numpy"],
                    "warm_api_first_call": t["api_first"] / t["numpy"],
                    "numba_floor": t["numba_floor"] / t["numpy"]}

        out["ratios"] = ratios(best)
        out["ratios_of_medians"] = ratios(med)
        best_cpu = {k: min(v) for k, v in cpu.items()}
        out["warm_cpu_s"] = best_cpu
        out["warm_cpu_samples_s"] = cpu
        out["ratios_of_cpu"] = ratios(best_cpu)
        if cold:
            out["cold"] = _cold(tmp, timeout, progress)
    out["load_average_after"] = load_average()
    return out


def _cold(tmp: str, timeout: float, progress: Callable[[str], None],
          only: Sequence[str] = ()) -> list[dict[str, Any]]:
    jobs = [(str(EXAMPLES / f), fn, base) for f, fn, base in _derived()
            if not only or fn in only]
    t50 = os.path.join(tmp, "terms50.tl")
    with open(t50, "w", encoding="utf-8") as fh:
        fh.write(terms50_source())
    if not only or "terms50_hess" in only:
        jobs.append((t50, "terms50_hess", "terms50"))
    records = []
    for k, (path, fn, base) in enumerate(jobs):
        env = _env(os.path.join(tmp, f"cold{k}"))
        cmd = [sys.executable, "-c", _COLD.format(n=SIZES_FOR_COLD), path, fn,
               *_inputs_file(tmp, os.path.relpath(path, EXAMPLES), base, k)]
        rec: dict[str, Any] = {"file": os.path.basename(path), "function": fn}
        try:
            wall, used = _timed(cmd, env, timeout)
            text = _timed.last_stdout
            rec.update(json.loads(text.strip().splitlines()[-1]), process_wall=wall,
                       process_cpu=used, status="ok")
            progress(f"cold first call {rec['file']} {fn}: {rec['first_call']:.1f} s "
                     f"({wall:.1f} s process, {used:.1f} s CPU with its children, "
                     f"{rec['engine']})")
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            rec.update(status="error", message=str(err)[:300])
            progress(f"cold first call {rec['file']} {fn}: {rec['message']}")
        records.append(rec)
    return records



def describe(rec: dict[str, Any]) -> str:
    """The record as a few lines of text (for the progress output and docs)."""
    lines = [f"start-up (best of {rec['rounds']} interleaved rounds; load average "
             f"{rec.get('load_average')} before, {rec.get('load_average_after')} after):"]
    w, r = rec["warm_s"], rec["ratios"]
    lines.append(f"  python -c 'import numpy'        {w['numpy']:.3f} s")
    lines.append(f"  warm tl run (derived Hessian)   {w['tl_run']:.3f} s  = "
                 f"{r['warm_tl_run']:.2f} x numpy (limit {LIMITS['warm_tl_run']})")
    lines.append(f"  warm import+load+first call     {w['api_first']:.3f} s  = "
                 f"{r['warm_api_first_call']:.2f} x numpy (limit "
                 f"{LIMITS['warm_api_first_call']})")
    lines.append(f"  Numba floor (one cached njit)   {w['numba_floor']:.3f} s  = "
                 f"{r['numba_floor']:.2f} x numpy")
    lines.append(f"  REPL redefinition (unchanged)   {w['redefine']:.4f} s")
    for what, key in (("medians", "ratios_of_medians"), ("CPU times", "ratios_of_cpu")):
        rm = rec.get(key)
        if rm:
            lines.append(f"  (ratios of {what}: tl run {rm['warm_tl_run']:.2f}, api "
                         f"{rm['warm_api_first_call']:.2f}, Numba floor "
                         f"{rm['numba_floor']:.2f})")
    for c in rec.get("cold", []):
        if c["status"] == "ok":
            lines.append(f"  cold first call {c['file']:>16} {c['function']:<16} "
                         f"{c['first_call']:7.1f} s wall, {c.get('first_call_cpu', 0):7.1f} s "
                         f"CPU ({c.get('process_cpu', 0):.1f} s process with gcc)  "
                         f"({c.get('engine')})")
        else:
            lines.append(f"  cold first call {c['file']:>16} {c['function']:<16} "
                         f"error: {c['message']}")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--cold-only" in sys.argv:   # the cold calls named after it ("all": every one)
        names = sys.argv[sys.argv.index("--cold-only") + 1].split(",")
        with tempfile.TemporaryDirectory(prefix="tl-bench-startup-") as folder:
            cold = _cold(folder, 3600.0, lambda s: print(s, file=sys.stderr, flush=True),
                         () if names == ["all"] else names)
        print(json.dumps(cold, indent=1))
    else:
        rec = run(progress=lambda s: print(s, file=sys.stderr, flush=True),
                  cold="--no-cold" not in sys.argv)
        print(describe(rec))
        print(json.dumps(rec, indent=1))
