"""The timing harness: warm-up, calibrated repeats, median; peak memory; value checks; the
sweep over workloads, sizes and systems; the fresh-process start-up measurement.

Everything runs in one process, one measurement after another, so the ratios between systems
and between f and its derivative are taken under the same conditions.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .tasks import EXAMPLES, ROOT, Task

SCHEMA = "tensorlang-bench/1"
MIN_SAMPLE_S = 0.005     # a sample averages enough calls to last at least this long
MAX_NUMBER = 10_000      # calls per sample at most
RTOL = 1e-7              # value agreement: |got - want| <= RTOL * max|want| (per leaf)


# ---------------------------------------------------------------------------------------------
# Timing


@dataclass
class Timed:
    """A measurement being timed: its callable, the calls one sample averages, and the
    samples so far (seconds per call)."""
    fn: Callable[[], Any]
    number: int
    samples: list[float] = field(default_factory=list)

    @property
    def spent(self) -> float:
        return sum(self.samples) * self.number

    def summary(self) -> dict[str, Any]:
        """The Measure fields of the samples: the best (reported), the median, the spread."""
        best, med = min(self.samples), statistics.median(self.samples)
        return {"time": best, "median": med, "samples": len(self.samples),
                "number": self.number,
                "spread": (max(self.samples) - best) / best if best > 0 else 0.0}


def calibrate(fn: Callable[[], Any]) -> tuple[Any, float, Timed]:
    """Warm up once (the first call: compilation, tracing) and calibrate how many calls a
    sample averages (>= MIN_SAMPLE_S): (first result, first-call seconds, the Timed, whose
    first sample is the calibration call when that alone lasts long enough)."""
    t0 = time.perf_counter()
    value = fn()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    if one >= MIN_SAMPLE_S:
        return value, first, Timed(fn, 1, [one])
    return value, first, Timed(fn, min(MAX_NUMBER, max(1, math.ceil(MIN_SAMPLE_S /
                                                                     max(one, 1e-7)))))


def time_rounds(entries: Sequence[Timed], repeat: int, budget: float,
                guard: Callable[[], contextlib.AbstractContextManager[Any]] =
                contextlib.nullcontext) -> dict[int, BaseException]:
    """Up to `repeat` interleaved rounds: a round takes one sample of each entry in turn
    (forwards in even rounds, backwards in odd ones), so that load on a shared machine hits
    every system and every function alike; an entry leaves once it has a sample and its
    samples took `budget` seconds.  `guard()` wraps each sample (time and memory limits).
    The garbage collector is off during samples (as in `timeit`).  Returns the entries that
    failed (index -> exception); they leave too."""
    failed: dict[int, BaseException] = {}
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(repeat):
            order = range(len(entries)) if r % 2 == 0 else range(len(entries) - 1, -1, -1)
            todo = [k for k in order if k not in failed and
                    (not entries[k].samples or (len(entries[k].samples) < repeat and
                                                entries[k].spent < budget))]
            if not todo:
                break
            for k in todo:
                e = entries[k]
                try:
                    with guard():
                        t0 = time.perf_counter()
                        for _ in range(e.number):
                            e.fn()
                        e.samples.append((time.perf_counter() - t0) / e.number)
                except (MemoryError, MeasurementTimeout) as err:
                    failed[k] = err
    finally:
        if was_enabled:
            gc.enable()
    return failed


# ---------------------------------------------------------------------------------------------
# Memory


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 -- no way to read RSS: report 0
        return 0


class _RssSampler(threading.Thread):
    """Samples the RSS every `interval` seconds while a call runs (allocations made outside
    Python -- XLA, torch, compiled kernels -- are only visible this way)."""

    def __init__(self, interval: float = 0.0005) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = rss_bytes()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._halt.wait(self.interval)

    def finish(self) -> int:
        self._halt.set()
        self.join()
        return max(self.peak, rss_bytes())


def measure_memory(fn: Callable[[], Any]) -> tuple[int, int]:
    """(tracemalloc peak, sampled peak RSS increase) in bytes over one call of `fn`."""
    gc.collect()
    base = rss_bytes()
    sampler = _RssSampler()
    sampler.start()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        rss_peak = sampler.finish()
    return int(peak), max(0, int(rss_peak - base))


def vm_data() -> int | None:
    """Bytes of private writable memory of this process (what RLIMIT_DATA limits)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def available_memory() -> int:
    """MemAvailable from /proc/meminfo (0 when unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


@contextlib.contextmanager
def memory_guard(allowance: int | None) -> Iterator[None]:
    """Let the block allocate at most `allowance` more bytes: beyond, allocations fail with
    MemoryError instead of the machine running out of memory (a naive derivative in the
    interpreter can ask for tens of GB).  Uses RLIMIT_DATA; a no-op where unsupported."""
    data = vm_data() if allowance else None
    if data is None:
        yield
        return
    import resource

    old = resource.getrlimit(resource.RLIMIT_DATA)
    limit = data + allowance
    if old[1] != resource.RLIM_INFINITY:
        limit = min(limit, old[1])
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, old[1]))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, old)


class MeasurementTimeout(Exception):
    """A measurement ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `MeasurementTimeout` in the block after `seconds` (SIGALRM, main thread only; a
    call inside C or Rust code is interrupted when it returns to Python)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise MeasurementTimeout(f"over the {seconds:g} s limit (--timeout)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------
# Values


def to_numpy(value: Any) -> Any:
    """Any system's result as floats / float64 arrays / tuples of them."""
    if isinstance(value, (tuple, list)):
        return tuple(to_numpy(v) for v in value)
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu().numpy()
    arr = np.asarray(value, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def flatten(value: Any) -> list[Any]:
    """The leaves of nested tuples, in order: tensorlang returns an n-tuple as nested pairs
    (`(a, (b, c))`), the other systems as flat tuples."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten(v)]
    return [value]


def compare(got: Any, want: Any, rtol: float = RTOL) -> tuple[bool, float, str]:
    """(agrees, worst relative error, message).  Leaves are compared with a tolerance relative
    to the largest magnitude of the expected leaf; NaNs must sit at the same places."""
    g, w = flatten(to_numpy(got)), flatten(to_numpy(want))
    if len(g) != len(w):
        return False, math.inf, f"{len(g)} result(s), want {len(w)}"
    worst = 0.0
    for k, (a, b) in enumerate(zip(g, w)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False, math.inf, f"result {k}: shape {a.shape}, want {b.shape}"
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return False, math.inf, f"result {k}: NaNs at different places"
        fin = ~np.isnan(b)
        if not fin.any():
            continue
        scale = float(np.max(np.abs(b[fin])))
        err = float(np.max(np.abs(a[fin] - b[fin])))
        rel = err / scale if scale > 0 else err
        worst = max(worst, rel)
    ok = worst <= rtol
    return ok, worst, "" if ok else f"max relative error {worst:.2e}"


# ---------------------------------------------------------------------------------------------
# Measurements of one callable


def _is_not_yet(err: BaseException) -> bool:
    from tensorlang import NotYetSupported

    return isinstance(err, (NotYetSupported, NotImplementedError))


def prepare_measure(prepare: Callable[[], Callable[[], Any]], want: Any, memory: bool = True,
                    allowance: int | None = None,
                    timeout: float | None = None) -> tuple[dict[str, Any], Timed | None]:
    """Prepare, warm up, calibrate, check against `want` and measure memory: a Measure dict
    without its time, and the Timed to take samples of (None when the measurement failed:
    status "oom" beyond `allowance` bytes more than before, "timeout" beyond `timeout`
    seconds, "n/a" or "error")."""
    try:
        with memory_guard(allowance), time_limit(timeout):
            return _prepare(prepare, want, memory)
    except MemoryError as err:  # outside the calls themselves (e.g. comparing the result)
        return {"status": "oom", "time": None, "check": "unchecked",
                "message": f"MemoryError: {err}"}, None
    except MeasurementTimeout as err:
        return {"status": "timeout", "time": None, "check": "unchecked",
                "message": str(err)}, None


def _prepare(prepare: Callable[[], Callable[[], Any]], want: Any,
             memory: bool) -> tuple[dict[str, Any], Timed | None]:
    m: dict[str, Any] = {"status": "ok", "time": None, "median": None, "first_call": None,
                         "samples": 0, "number": 0, "spread": None, "peak_tracemalloc": None,
                         "peak_rss_delta": None, "check": "unchecked", "max_rel_err": None,
                         "value": None, "out_size": None, "message": ""}
    try:
        fn = prepare()
        value, m["first_call"], timed = calibrate(fn)
    except MemoryError as err:
        m["status"] = "oom"
        m["message"] = f"MemoryError (over the --mem-limit allowance): {err}"[:300]
        return m, None
    except MeasurementTimeout:
        raise
    except Exception as err:  # noqa: BLE001 -- one system's failure must not stop the suite
        m["status"] = "n/a" if _is_not_yet(err) else "error"
        m["message"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        return m, None
    try:  # a scalar result is kept, so that values can be compared across systems
        v = to_numpy(value)
        m["value"] = v if isinstance(v, float) and math.isfinite(v) else None
        m["out_size"] = sum(int(np.size(leaf)) for leaf in flatten(v))
    except Exception:  # noqa: BLE001 -- an unconvertible result is reported by the check
        pass
    if want is not None:
        try:
            ok, rel, msg = compare(value, want)
        except Exception as err:  # noqa: BLE001 -- an unconvertible result is a mismatch
            ok, rel, msg = False, math.inf, f"cannot compare: {type(err).__name__}: {err}"
        m["check"] = "ok" if ok else "mismatch"
        m["max_rel_err"] = rel if math.isfinite(rel) else None
        m["message"] = msg
    if memory:
        try:
            m["peak_tracemalloc"], m["peak_rss_delta"] = measure_memory(fn)
        except Exception as err:  # noqa: BLE001
            m["message"] = (m["message"] + f"; memory: {type(err).__name__}: {err}").strip("; ")
    return m, timed


def time_measures(measures: Sequence[tuple[dict[str, Any], Timed]], repeat: int,
                  budget: float, allowance: int | None = None,
                  timeout: float | None = None) -> None:
    """Time prepared measurements in interleaved rounds (`time_rounds`) and write their
    times into their Measure dicts: the best sample (the least disturbed by other load),
    with the median and spread beside it."""
    def guard() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(memory_guard(allowance))
        stack.enter_context(time_limit(timeout))
        return stack

    failed = time_rounds([t for _, t in measures], repeat, budget, guard)
    for k, (m, timed) in enumerate(measures):
        err = failed.get(k)
        if isinstance(err, MemoryError):
            m.update(status="oom", time=None,
                     message=f"MemoryError (over the --mem-limit allowance): {err}"[:300])
        elif err is not None:
            m.update(status="timeout", time=None, message=str(err))
        else:
            m.update(timed.summary())


def _skipped(cap: int | None) -> dict[str, Any]:
    return {"status": "skipped", "time": None, "message": f"N > {cap} (size cap)",
            "check": "unchecked"}


# ---------------------------------------------------------------------------------------------
# The sweep


@dataclass
class Config:
    sizes: list[int]
    repeat: int = 5
    budget: float = 2.0          # seconds of timing per measurement (after warm-up)
    seed: int = 0
    memory: bool = True
    backend: str | None = None   # tensorlang backend (None: the API's default)
    max_n: int | None = None     # an extra global cap
    mem_allowance: int | None = None  # bytes one measurement may allocate (None: no guard)
    timeout: float | None = 300.0     # seconds one measurement may take


@dataclass
class Suite:
    config: Config
    systems: list[Any]
    unavailable: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    cost_worker: Any = None      # bench.costs.CostWorker (None: no cost-model counts)
    load_average: dict[str, Any] = field(default_factory=dict)  # at the sweep's start, end


def make_inputs(task: Task, n: int, seed: int) -> tuple[dict[str, int], dict[str, Any]]:
    w = task.workload
    sizes = w.sizes(n)
    rng = np.random.default_rng([seed, n, sum(map(ord, task.name))])
    return sizes, w.inputs(sizes, rng)


def derivative_inputs(task: Task, args: dict[str, Any], f_ref: Any,
                      seed: int) -> dict[str, dict[str, Any]]:
    """The argument dict of each derivative: the inputs plus its tangents / cotangent."""
    rng = np.random.default_rng([seed, 1 + sum(map(ord, task.name))])
    return {d.key: {**args, **d.extras(args, f_ref, rng)} for d in task.derivs}


def run_point(suite: Suite, task: Task, n: int, progress: Callable[[str], None],
              only: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every system on one (workload, N); one record per system.  With `only`, f and just
    the derivatives with those keys (a derivative's own target size: `Deriv.points`)."""
    from . import systems_numpy

    cfg = suite.config
    sizes, args = make_inputs(task, n, cfg.seed)
    f_ref = task.workload.ref(args)
    dargs = derivative_inputs(task, args, f_ref, cfg.seed)
    derivs = [d for d in task.derivs if only is None or d.key in only]
    d_ref: dict[str, Any] = {}
    for d in derivs:
        hand = systems_numpy.DERIVATIVES.get((task.name, d.key))
        if hand is not None and task.fits(n, d):
            d_ref[d.key] = hand(dargs[d.key])
    records: list[dict[str, Any]] = []
    timed: list[tuple[dict[str, Any], Timed]] = []

    def prepared(m: tuple[dict[str, Any], Timed | None]) -> dict[str, Any]:
        if m[1] is not None:
            timed.append((m[0], m[1]))
        return m[0]

    for system in suite.systems:   # every system prepared and checked, then timed together
        rec: dict[str, Any] = {
            "workload": task.name, "system": system.name,
            "label": getattr(system, "label", system.name), "N": n, "sizes": sizes,
            "mem_method": system.mem_method, "cost": None, "derivatives": {}}
        rec["f"] = prepared(prepare_measure(lambda: system.forward(task, args), f_ref,
                                            cfg.memory, cfg.mem_allowance, cfg.timeout))
        for d in derivs:
            if not task.fits(n, d):
                m = _skipped(task.cap(d))
            else:
                m = prepared(prepare_measure(
                    lambda d=d: system.derivative(task, d, dargs[d.key]), d_ref.get(d.key),
                    cfg.memory, cfg.mem_allowance, cfg.timeout))
                arrays = getattr(system, "kernel_arrays", None)
                if arrays is not None and m.get("status") == "ok":
                    m["arrays"] = arrays(task, d, sizes)
            m["label"] = d.label
            rec["derivatives"][d.key] = m
        if system.name == "tensorlang" and suite.cost_worker is not None:
            rec["cost"] = _costs(suite.cost_worker, task, n, args, derivs)
        records.append(rec)
    time_measures(timed, cfg.repeat, cfg.budget, cfg.mem_allowance, cfg.timeout)
    timed.clear()   # (the callables hold the systems' compiled functions and their inputs)
    for rec in records:
        for m in rec["derivatives"].values():
            tf, td = rec["f"].get("time"), m.get("time")
            m["ratio"] = td / tf if tf and td else None
        progress(_progress_line(rec))
    return records


def _cost_args(args: dict[str, Any]) -> dict[str, Any]:
    """What the cost depends on: sizes and relations (not the real-valued inputs)."""
    return {k: v for k, v in args.items() if isinstance(v, (int, np.integer)) or
            (isinstance(v, np.ndarray) and v.dtype == np.bool_)}


def _costs(worker: Any, task: Task, n: int, args: dict[str, Any],
           derivs: Sequence[Any]) -> dict[str, Any]:
    """Exact cost-model counts of f and each derivative (None with a reason where n/a)."""
    out: dict[str, Any] = {}
    cargs = _cost_args(args)
    for key in [None, *(d.key for d in derivs if task.fits(n, d))]:
        c, msg = worker.cost(task.name, key, cargs)
        out[key or "f"] = c
        if msg:
            out[(key or "f") + "_message"] = msg
    for d in derivs:
        out.setdefault(d.key, None)
    return out


def _progress_line(rec: dict[str, Any]) -> str:
    from .table import fmt_cell

    parts = [f"f {fmt_cell(rec['f'])}"]
    parts += [f"{m['label']} {fmt_cell(m)}" for m in rec["derivatives"].values()]
    return f"{rec['workload']} N={rec['N']} {rec['label']}: " + "  ".join(parts)


def run_suite(suite: Suite, tasks: Sequence[Task], progress: Callable[[str], None],
              checkpoint: Callable[[Suite], None] | None = None) -> Suite:
    cfg = suite.config
    # The systems' modules (jax, torch: a million objects) are loaded by now; freezing them
    # out of the collector's view makes the collections between measurements cheap.
    gc.collect()
    gc.freeze()
    suite.load_average["start"] = load_average()
    points: list[tuple[Task, int, tuple[str, ...] | None]] = []
    for t in tasks:   # the sweep sizes, and between them the derivatives' target sizes
        extra = t.extra_points(list(cfg.sizes))
        points += sorted([(t, n, None) for n in cfg.sizes] +
                         [(t, n, keys) for n, keys in extra.items()], key=lambda q: q[1])
    for k, (task, n, only) in enumerate(points, 1):
        cap = min(c for c in (task.cap(), cfg.max_n, 10 ** 18) if c is not None)
        if n > cap:
            suite.skipped.append({"workload": task.name, "N": n, "cap": cap})
            progress(f"[{k}/{len(points)}] {task.name} N={n}: skipped (N > {cap})")
            continue
        progress(f"[{k}/{len(points)}] {task.name} N={n} ...")
        try:
            suite.records.extend(run_point(suite, task, n, lambda s: progress("    " + s),
                                           only))
        except Exception as err:  # noqa: BLE001 -- e.g. the reference itself failed
            suite.skipped.append({"workload": task.name, "N": n,
                                  "error": f"{type(err).__name__}: {err}"})
            progress(f"    {task.name} N={n}: failed: {type(err).__name__}: {err}")
        if checkpoint is not None:
            checkpoint(suite)
    suite.load_average["end"] = load_average()
    return suite


# ---------------------------------------------------------------------------------------------
# Start-up in a fresh process: import + load + pipeline + (cached) kernel load + first call

_STARTUP_CODE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import numpy as np
from bench.tasks import TASKS          # numpy and the input makers: not timed
task = TASKS[{name!r}]
w = task.workload
args = w.inputs(w.sizes({n}), np.random.default_rng(0))
f_ref = w.ref(args)
rng = np.random.default_rng(1)
dargs = {{d.tl_def: (d, {{**args, **d.extras(args, f_ref, rng)}}) for d in task.derivs if d.tl_def}}
t0 = time.perf_counter()
import tensorlang as tl
t1 = time.perf_counter()
m = tl.load({path!r})
f_params = [p.name for p in m[w.func].params]
todo = [(w.func, None, args)] + [(k, d, a) for k, (d, a) in dargs.items() if k in m]
done, na = [], []
for fname, d, a in todo:
    fn = m[fname]
    names = [p.name for p in fn.params]
    try:
        c = fn.compile({backend!r})
        c(**(d.def_args(names, f_params, a) if d else {{n: a[n] for n in names}}))
        done.append(fname)
    except tl.NotYetSupported:
        na.append(fname)
t2 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "pipeline_and_call": t2 - t1, "total": t2 - t0,
                  "functions": done, "not_available": na}}))
"""


def measure_startup(task: Task, backend: str, n: int = 10, runs: int = 2,
                    timeout: float = 120.0) -> dict[str, Any]:
    """Run the whole pipeline in `runs` fresh processes; the first fills the kernel cache, the
    last is the measurement ("cached kernel load")."""
    code = _STARTUP_CODE.format(root=str(ROOT), name=task.name, n=n,
                                path=str(EXAMPLES / task.workload.file), backend=backend)
    results = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, cwd=str(ROOT))
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return {"workload": task.name, "status": "error", "message": tail[:300]}
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["process_wall"] = wall
        results.append(r)
    last, first = results[-1], results[0]
    return {"workload": task.name, "file": task.workload.file, "status": "ok", "N": n,
            "backend": backend, "cold_total": first["total"], **last}


def startup_all(tasks: Iterable[Task], backend: str,
                progress: Callable[[str], None]) -> list[dict[str, Any]]:
    out = []
    for task in tasks:
        try:
            r = measure_startup(task, backend)
        except (subprocess.TimeoutExpired, OSError, ValueError) as err:
            r = {"workload": task.name, "status": "error", "message": str(err)[:300]}
        if r["status"] == "ok":
            progress(f"start-up {task.name}: {r['total']:.3f} s in process "
                     f"({r['process_wall']:.3f} s wall)")
        else:
            progress(f"start-up {task.name}: error: {r['message']}")
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------
# Results file


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the machine), if known."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def machine_info(suite: Suite) -> dict[str, Any]:
    import platform

    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    mem = 0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu or platform.processor(),
            "memory_bytes": mem, "platform": platform.platform(),
            "python": platform.python_version(),
            "systems": {s.name: s.version() for s in suite.systems},
            "load_average": dict(suite.load_average),
            "unavailable": dict(suite.unavailable)}


def to_json(suite: Suite, startup: list[dict[str, Any]] | None = None,
            names: Sequence[str] = ()) -> dict[str, Any]:
    cfg = suite.config
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(suite),
        "config": {"names": list(names), "sizes": cfg.sizes, "repeat": cfg.repeat,
                   "budget_s": cfg.budget, "seed": cfg.seed, "memory": cfg.memory,
                   "backend": next((s.backend for s in suite.systems
                                    if hasattr(s, "backend")), cfg.backend),
                   "rtol": RTOL, "min_sample_s": MIN_SAMPLE_S,
                   "threads": int(os.environ.get("TL_BENCH_THREADS", "0") or 0),
                   "mem_allowance_bytes": cfg.mem_allowance},
        "memory_methods": {getattr(s, "label", s.name): s.mem_method for s in suite.systems},
        "records": suite.records,
        "skipped": suite.skipped,
        "startup": startup or [],
    }


def write_json(data: dict[str, Any], path: str, atomic: bool = True) -> None:
    """Write `path`; atomically (through `path`.tmp) unless told not to."""
    tmp = path + ".tmp" if atomic else path
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, default=_json_default)
        fh.write("\n")
    if atomic:
        os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
