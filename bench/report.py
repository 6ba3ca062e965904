"""docs/performance.md from a results dict: how to run, the machine, the targets with where
tensorlang stands against each (computed from the numbers, never written by hand), the
tables and the plots.  Regenerate with `python -m bench --doc` (or `tl bench --doc`)."""
from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from typing import Any, Iterable

from . import table

GRIEWANK_TARGET = 3.0    # time(derivative) / time(f) at the largest N (issue 14: N = 2000)
# f and gradient against JAX jit (issue 14): within JAX_TARGET at each of JAX_SIZES (a
# workload capped below them: at its largest N), geometric mean of the suite's ratios at most
# JAX_GEOMEAN_TARGET.  SUITE: the workloads issue 14 names; the others are listed too.
JAX_TARGET = 1.25
JAX_GEOMEAN_TARGET = 0.9
JAX_SIZES = (1000, 2000)
SUITE = ("qform", "qform_sum", "matfac", "masked", "nnmatfac", "conv", "deconv_loss",
         "logreg", "row_col", "nbody", "imgarap")
# Materialised Hessians vs jax.hessian (issue 14): (workload, N, speed-up at least), each
# measured at exactly that N (bench/tasks.py: a sweep size, or the derivative's `points`);
# and the memory of matfac's Hessian O(output) at its N.
HESSIAN_TARGETS = (("qform", 2000, 25.0), ("matfac", 200, 50.0), ("logreg", 400, 2.0))
HESSIAN_MEMORY = ("matfac", 200)
STARTUP_TARGET = 0.5
GRADIENT_KINDS = ("grad",)


def _tl(rec: dict[str, Any]) -> bool:
    return rec["system"] == "tensorlang"


def _by(data: dict[str, Any], system: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["workload"], r["N"]): r for r in data["records"] if r["system"] == system}


def _time(m: dict[str, Any] | None) -> float | None:
    return m.get("time") if m and m.get("status") == "ok" else None


def _status_word(ok: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measurable yet"}[ok]


# -- target 1: Griewank ratio ------------------------------------------------------------------

def griewank_rows(data: dict[str, Any]) -> list[list[str]]:
    """One row per (workload, derivative): tensorlang's time ratio at each N, the cost-model
    ratio at the largest N, and whether the ratio at the largest N is within the target (at
    small N a call is mostly its fixed cost, which f and the derivative both pay)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for rec in data["records"]:
        if _tl(rec):
            for key in rec["derivatives"]:
                groups[(rec["workload"], key)].append(rec)
    rows = []
    for (w, key), recs in groups.items():
        recs = sorted(recs, key=lambda r: r["N"])
        cells, last, wrong = [], None, False
        for rec in recs:
            m = rec["derivatives"][key]
            r = m.get("ratio")
            bad = m.get("check") == "mismatch" or rec["f"].get("check") == "mismatch"
            wrong = wrong or bad
            cells.append(f"{rec['N']}: " + (table.fmt_ratio(r) if r is not None
                                               else table.fmt_cell(m)) + (" (!)" if bad else ""))
            last = r
        cost_r, cost_n, star, cost_f = None, None, "", None
        for rec in recs:
            cost = rec.get("cost") or {}
            cf, cd = (cost.get("f") or {}).get("total"), (cost.get(key) or {}).get("total")
            if cf and cd is not None:
                cost_r, cost_n, cost_f = cd / cf, rec["N"], cf
                star = "*" if cost.get(key + "_message") else ""
        ok = None if last is None else last <= GRIEWANK_TARGET
        extra = " (materialised Hessian)" if key == "hessian" else ""
        out = recs[-1]["derivatives"][key].get("out_size")
        if ok is False and key != "hessian" and out and cost_f and \
                out > GRIEWANK_TARGET * cost_f:
            # SPEC 6 bounds a vjp's cost by 4 C(f) + |in| + |out|: writing the result alone
            # is more than 3 C(f) here, whatever the arithmetic costs
            extra += (f" (output-bound: the derivative writes {out:,} elements, C(f) = "
                      f"{cost_f:,.0f}; SPEC 6's + |in| term)")
        extra += "; **values disagree with the reference (!)**" if wrong else ""
        rows.append([w, recs[0]["derivatives"][key]["label"], ", ".join(cells),
                     f"{cost_r:.3g}{star} (N={cost_n})" if cost_r is not None else "-",
                     _status_word(ok) + extra])
    return rows


# -- target 2: f and gradient against JAX jit at N = 1000 and 2000 -----------------------------

def _disagree(data: dict[str, Any], workload: str, key: str | None, n: int) -> str:
    """A warning when tensorlang's value behind a time disagreed with the reference."""
    rec = _by(data, "tensorlang").get((workload, n))
    m = None if rec is None else (rec["f"] if key is None else rec["derivatives"].get(key))
    return "; **values disagree with the reference (!)**" if m and \
        m.get("check") == "mismatch" else ""


def largest_n(data: dict[str, Any], workload: str, system: str = "tensorlang") -> int | None:
    ns = [r["N"] for r in data["records"] if r["workload"] == workload and r["system"] == system]
    return max(ns) if ns else None


def common_sizes(data: dict[str, Any], workload: str, key: str | None,
                 a: str = "tensorlang", b: str = "jax") -> dict[int, tuple[float, float]]:
    """N -> (time a, time b) wherever both systems have a time."""
    ra, rb = _by(data, a), _by(data, b)
    out = {}
    for (w, n), rec in ra.items():
        if w != workload or (w, n) not in rb:
            continue
        ma = rec["f"] if key is None else rec["derivatives"].get(key)
        mb = rb[(w, n)]["f"] if key is None else rb[(w, n)]["derivatives"].get(key)
        ta, tb = _time(ma), _time(mb)
        if ta is not None and tb is not None:
            out[n] = (ta, tb)
    return out


def vs_jax_rows(data: dict[str, Any]) -> list[list[str]]:
    """A row per workload, f or gradient, and N in JAX_SIZES (a workload capped below them:
    its largest common N); the last cell says whether the ratio is within JAX_TARGET."""
    rows = []
    workloads = list(dict.fromkeys(r["workload"] for r in data["records"]))
    for w in workloads:
        keys: list[str | None] = [None]
        recs = [r for r in data["records"] if r["workload"] == w]
        keys += [k for k in recs[0]["derivatives"] if k in GRADIENT_KINDS]
        suite = "yes" if w in SUITE else ""
        for key in keys:
            what = "f" if key is None else recs[0]["derivatives"][key]["label"]
            common = common_sizes(data, w, key)
            ns = [n for n in JAX_SIZES if n in common] or ([max(common)] if common else [])
            if not ns:
                rows.append([w, suite, what, str(largest_n(data, w) or "-"), "-", "-", "-",
                             _status_word(None)])
            for n in ns:
                ttl, tjax = common[n]
                rows.append([w, suite, what, str(n), table.fmt_time(ttl), table.fmt_time(tjax),
                             f"{ttl / tjax:.3g}", _status_word(ttl <= JAX_TARGET * tjax)
                             + _disagree(data, w, key, n)])
    return rows


# -- target 3: Hessians vs jax.hessian ---------------------------------------------------------

def hessian_rows(data: dict[str, Any]) -> list[list[str]]:
    """One row per speed-up target, at exactly its N, and one for the memory target."""
    tl_recs, jax_recs = _by(data, "tensorlang"), _by(data, "jax")
    rows = []
    for w, n, target in HESSIAN_TARGETS:
        goal = f">= {target:g}x"
        ttl = _time((tl_recs.get((w, n)) or {}).get("derivatives", {}).get("hessian"))
        tjax = _time((jax_recs.get((w, n)) or {}).get("derivatives", {}).get("hessian"))
        if ttl is None or tjax is None:
            rows.append([w, str(n), goal, table.fmt_time(ttl) if ttl else "-",
                         table.fmt_time(tjax) if tjax else "-", "-", _status_word(None)])
            continue
        speedup = tjax / ttl
        rows.append([w, str(n), goal, table.fmt_time(ttl), table.fmt_time(tjax),
                     f"{speedup:.3g}x",
                     _status_word(speedup >= target) + _disagree(data, w, "hessian", n)])
    return rows


def hessian_memory_row(data: dict[str, Any]) -> list[str]:
    """matfac's Hessian at its N: the largest temporary array of the kernel against the
    output (and inputs), from the plan (`machine_model.kernel_arrays`), and the measured
    peak RSS growth of a call against the output's bytes."""
    w, n = HESSIAN_MEMORY
    m = (_by(data, "tensorlang").get((w, n)) or {}).get("derivatives", {}).get("hessian")
    arrays = (m or {}).get("arrays")
    if not arrays:
        return [w, str(n), "-", "-", "-", _status_word(None)]
    out_b, temp_b = 8 * arrays["output"], 8 * arrays["largest_temporary"]
    rss = m.get("peak_rss_delta")
    ok = arrays["largest_temporary"] <= arrays["output"] + arrays["inputs"]
    return [w, str(n), f"{_mib(temp_b)} ({arrays['temporary'] or 'none'})", _mib(out_b),
            _mib(rss) if rss is not None else "-", _status_word(ok)]


def _mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):.3g} MiB"


# -- target 4: start-up ------------------------------------------------------------------------

def startup_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for s in data.get("startup", []):
        if s.get("status") != "ok":
            rows.append([s["workload"], "-", "-", "-", "-", "-", "error: " + s.get("message", "")])
            continue
        fns = ", ".join(s["functions"]) + (f" (n/a: {', '.join(s['not_available'])})"
                                           if s["not_available"] else "")
        rows.append([s["workload"], f"{s['import']:.3f}", f"{s['pipeline_and_call']:.3f}",
                     f"{s['total']:.3f}", f"{s['cold_total']:.3f}", f"{s['process_wall']:.3f}",
                     _status_word(s["total"] < STARTUP_TARGET) + "; " + fns])
    return rows


# -- the page ----------------------------------------------------------------------------------

def overhead_text(data: dict[str, Any]) -> str:
    """The overhead row (bench/overhead.py) as a table, or why there is none."""
    rec = data.get("overhead")
    if not rec:
        return "Not measured in this run (`--overhead` or `--doc`)."
    rows = [[r["case"], f"{r['tensorlang_us']:.1f}", f"{r['jax_us']:.1f}", f"{r['ratio']:.2f}",
             _status_word(r["ratio"] <= rec["target"])] for r in rec["rows"]]
    return (f"Through the API (binding, memory check, kernel, result) against `jax.jit`, best "
            f"of {rec['rounds']} interleaved rounds of {rec['calls']} calls (load average "
            f"{rec.get('load_average')}).\n\n"
            + md_table(["case", "tensorlang us", "jax jit us", "ratio", "status"], rows))


def md_table(head: list[str], rows: Iterable[list[str]]) -> str:
    rows = list(rows)
    if not rows:
        return "_(no data)_"
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def _geomean_text(rows: list[list[str]]) -> str:
    """Geometric mean of tensorlang / JAX (`vs_jax_rows`) over the suite's rows and over all
    rows that have both times."""
    import math

    def mean(rs: list[float]) -> str:
        g = math.exp(sum(math.log(x) for x in rs) / len(rs))
        return f"{g:.3g} over {len(rs)} rows ({_status_word(g <= JAX_GEOMEAN_TARGET)})"

    every = [float(r[6]) for r in rows if r[6] not in ("-", "")]
    suite = [float(r[6]) for r in rows if r[6] not in ("-", "") and r[1]]
    if not every:
        return "no common measurements"
    return (f"tensorlang / JAX geometric mean (target <= {JAX_GEOMEAN_TARGET:g}): the suite "
            f"{mean(suite) if suite else '-'}; every workload {mean(every)}")


def _count(rows: list[list[str]], col: int = -1) -> str:
    tally: dict[str, int] = defaultdict(int)
    for r in rows:
        word = r[col].split(" (")[0].split(";")[0].replace("*", "")
        tally[word] += 1
    return ", ".join(f"{n} {w}" for w, n in sorted(tally.items())) or "no data"


def machine_text(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [f"- CPU: {m['cpu_model']}, {m['cpus']} logical CPUs (`nproc`: {m['cpus']}), "
             f"no GPU; memory {m['memory_bytes'] / (1 << 30):.0f} GB; {m['platform']}",
             f"- Python {m['python']}; " + "; ".join(f"{k} {v}" for k, v in m["systems"].items())]
    for k, v in m.get("unavailable", {}).items():
        lines.append(f"- not run: {k} ({v})")
    lscpu = _lscpu()
    if lscpu:
        lines.append("- `lscpu`: " + lscpu)
    lines.append("- The machine is shared with other work (2 cores): expect noise of tens of "
                 "percent between runs, more for calls under ~10 us.")
    load = m.get("load_average") or {}
    if load:
        lines.append("- Load average (1, 5, 15 min) at the sweep's start: "
                     f"{load.get('start')}; at its end: {load.get('end')}.")
    return "\n".join(lines)


def _lscpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    keep = ("Model name", "Thread(s) per core", "Core(s) per socket", "L2 cache", "L3 cache")
    parts = []
    for line in out.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in keep:
            parts.append(f"{k.strip()}: {v.strip()}")
    return "; ".join(parts)


def _caps_text() -> str:
    from .tasks import TASKS

    caps = []
    for t in TASKS.values():
        if t.max_n is not None:
            caps.append(f"{t.name} N <= {t.max_n}")
        caps += [f"{t.name} {d.label} N <= {d.max_n}" for d in t.derivs if d.max_n is not None]
    return "; ".join(caps) or "none"


def _threads_text(threads: int) -> str:
    if not threads:
        return "as the environment left them (`--threads 0`)."
    return (f"{threads} for every system (`--threads {threads}`, the default 1: "
            "OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS, `torch.set_num_threads`, XLA's "
            "`--xla_cpu_multi_thread_eigen=false`), and the process kept on that many cores "
            "(`os.sched_setaffinity`): XLA's CPU runtime runs large fusions on a second "
            "thread whatever its flags say. On this shared 2-core machine a "
            "2-thread OpenMP pool waiting for a descheduled thread made PyTorch calls up to "
            "500x slower at random; one thread each gives reproducible ratios. "
            "`--threads 2` measures both cores.")


def render(data: dict[str, Any], doc_path: str, plots: list[str]) -> str:
    cfg = data["config"]
    g_rows, j_rows, h_rows, s_rows = (griewank_rows(data), vs_jax_rows(data),
                                      hessian_rows(data), startup_rows(data))
    hm_row = hessian_memory_row(data)
    h_goal = ", ".join(f"{w} >= {t:g}x at N = {n}" for w, n, t in HESSIAN_TARGETS)
    backend = cfg.get("backend") or "interp"
    plot_links = [f"![{os.path.basename(p)[:-4]}]({os.path.relpath(p, os.path.dirname(doc_path))})"
                  for p in plots]
    d_status = defaultdict(int)
    for r in data["records"]:
        if _tl(r):
            for m in r["derivatives"].values():
                d_status[m.get("status", "?")] += 1
    d_all = sum(d_status.values())
    d_text = ", ".join(f"{n} {st}" for st, n in sorted(d_status.items())) or "none"
    parts = [
        "# Performance",
        "",
        f"_Generated by `python -m bench --doc` on {data['created']} "
        f"(sizes {','.join(map(str, cfg['sizes']))}, {cfg['repeat']} samples, "
        f"{data.get('elapsed_s', 0):.0f} s in all). Do not edit by hand: rerun the command; "
        "the numbers change as the backends land._",
        "",
        "## How to run",
        "",
        "```",
        "tl bench                                  # every workload at N = 10, 100, 1000",
        "tl bench qform logreg --sizes 10,100 --repeat 7",
        "tl bench --quick                          # N = 10, 100, 3 samples, short budget",
        "tl bench --doc                            # N = 10 .. 2000 + start-up, rewrites this page",
        "tl bench --checking                       # checking time per statement, 1,000 to 10,000",
        "python -m bench ...                       # the same without the tl entry point",
        "python bench/gpu.py                       # on a CUDA machine: equivalence + --backend cuda",
        "```",
        "",
        "`tl bench ...` and `python -m bench ...` are the same command.",
        "",
        "Options: `--systems numpy,tensorlang,jax,torch`, `--backend interp|numba|cuda`, "
        "`--budget S` (timing seconds per measurement), `--max-n`, `--no-memory`, `--startup`, "
        "`--overhead` (per-call cost at N = 1 against JAX jit, `bench/overhead.py`), "
        "`--out DIR`, `--no-plots`. JAX, PyTorch and matplotlib are optional "
        "(`pip install -e .[bench]`; PyTorch CPU: `pip install torch==2.13.0`): a system that "
        "does not import is left out and named on stderr and under the machine below. "
        "Output: the table on stdout, progress on stderr, `bench/results.json` "
        "(schema `tensorlang-bench/1`), PNGs in `bench/plots/`.",
        "",
        "## The machine",
        "",
        machine_text(data),
        "",
        "## Targets and where we stand",
        "",
        f"tensorlang ran on the **{backend}** backend. Its {d_all} derivative measurements: "
        f"{d_text} (n/a: the API raised `NotYetSupported`; skipped: above a size cap). A "
        "target with no measurement is 'not measurable yet' rather than failed.",
        "",
        f"- Griewank ratio <= {GRIEWANK_TARGET:g}: {_count(g_rows)} (workload x derivative).",
        f"- f and gradient within {JAX_TARGET:g}x of JAX jit at N = "
        f"{' and '.join(map(str, JAX_SIZES))}: the suite {_count([r for r in j_rows if r[1]])};"
        f" every workload {_count(j_rows)}; {_geomean_text(j_rows)}.",
        f"- Materialised Hessians vs jax.hessian ({h_goal}): {_count(h_rows)}; "
        f"memory of {HESSIAN_MEMORY[0]}'s Hessian O(output): {hm_row[-1]}.",
        f"- Pipeline + cached kernel load < {STARTUP_TARGET:g} s per example: "
        f"{_count(s_rows) if s_rows else 'not measured in this run'}.",
        "",
        f"### 1. Griewank ratio <= {GRIEWANK_TARGET:g} at the largest N",
        "",
        "Measured time ratio time(derivative) / time(f) of tensorlang, and the cost-model "
        "ratio C(derivative) / C(f) (exact, machine-independent; SPEC 6 bounds it by 3 for "
        "jvp and 4 + |in| + |out| / C for vjp). A materialised Hessian has an output N times "
        "larger than the gradient, so no constant bounds its ratio; it is listed for "
        "completeness. The status is the ratio at the largest N (issue 14: N = 2000); at "
        "N <= 100 a call is mostly its fixed cost of a few microseconds. "
        f"Summary: {_count(g_rows)}.",
        "",
        md_table(["workload", "derivative", "time ratio at N", "cost ratio", "status"], g_rows),
        "",
        f"### 2. f and gradient within {JAX_TARGET:g}x of JAX jit at N = "
        f"{' and '.join(map(str, JAX_SIZES))}",
        "",
        "At each of those N where both have a time (a workload capped below them: at its "
        "largest N). 'suite': the workloads issue 14 names (qform in both spellings, matfac "
        "and masked with 30% relations, nnmatfac, conv/deconv, logreg, row_col, nbody, "
        f"imgarap). Summary: the suite {_count([r for r in j_rows if r[1]])}; every workload "
        f"{_count(j_rows)}; {_geomean_text(j_rows)}.",
        "",
        md_table(["workload", "suite", "function", "N", "tensorlang", "JAX jit",
                  "tensorlang / JAX", "status"], j_rows),
        "",
        "### 3. Materialised Hessians vs jax.hessian",
        "",
        f"Targets (issue 14): {h_goal}, each at exactly that N (logreg's and matfac's "
        "Hessians are measured at their N between the sweep sizes and capped there; "
        "logreg's N is the number of features, with M = 2N rows; matfac's is m = N, K = 5). "
        f"Summary: {_count(h_rows)}.",
        "",
        md_table(["workload", "N", "target", "tensorlang", "jax.hessian (jit)", "speed-up",
                  "status"], h_rows),
        "",
        f"Memory of {HESSIAN_MEMORY[0]}'s Hessian, O(output) rather than O(M^4 K): the "
        "largest temporary array its kernel allocates (from the code generator's plan, "
        "`machine_model.kernel_arrays`; met when it is at most the output plus the inputs), "
        "the output, and the peak RSS growth measured over one call.",
        "",
        md_table(["workload", "N", "largest temporary", "output", "peak RSS growth",
                  "status"], [hm_row]),
        "",
        f"### 4. Whole pipeline + cached kernel load < {STARTUP_TARGET:g} s per example",
        "",
        "Each workload in a fresh `python` process (N = 10): `import tensorlang`, `tl.load`, "
        "compile f and the derived defs of its file for the backend, one call each. The "
        "process runs twice; the first fills the kernel cache (its total is 'cold'), the "
        "second is the measurement. Times in seconds; 'wall' is the whole process "
        "(interpreter start-up and numpy import included, which the target does not count). "
        f"Summary: {_count(s_rows)}." if s_rows else
        "Not measured in this run (`--startup` or `--doc`).",
        "",
        md_table(["workload", "import tensorlang (lazy)", "pipeline + calls", "total", "cold total", "wall",
                  "status; functions"], s_rows) if s_rows else "",
        "",
        "### 5. Per-call overhead at N = 1 <= 2x JAX jit",
        "",
        overhead_text(data),
        "",
        "## Results",
        "",
        table.legend() + ".",
        "",
        table.render(data, markdown=True),
        "",
        "## Plots",
        "",
        "Per workload: time per call vs N (f solid, derivatives dashed) and the Griewank ratio "
        "vs N, one line per system; the summary shows each system's ratio at its largest N.",
        "",
        *plot_links,
        "",
        "## Method",
        "",
        "- One process. At each (workload, N) every system's f and derivatives are first "
        "prepared, warmed up and checked; then they are timed together in interleaved rounds: "
        "a round takes one sample of each in turn (forwards, then backwards in the next "
        "round), so that load from other work hits every system and every function alike.",
        f"- Threads: {_threads_text(cfg.get('threads', 0))}",
        "- Each callable is called once to warm up (tracing, jit compilation, kernel load; "
        "recorded as `first_call` in results.json), once more to calibrate how many calls a "
        f"sample averages (a sample lasts >= {cfg.get('min_sample_s', 0.005) * 1e3:g} ms), then "
        f"gets one sample per round, up to {cfg['repeat']} rounds (fewer once its samples took "
        f"the {cfg['budget_s']:g} s budget, at least one); the best sample is reported (the "
        "least disturbed by other load; results.json keeps the median and spread too). The "
        "garbage collector is off during samples.",
        "- Before timing, every system's f value is checked against the numpy reference of "
        "examples/numpy_ref.py, and every derivative against the hand-derived numpy one "
        f"(relative error <= {cfg.get('rtol', 1e-7):g} of the largest magnitude); "
        "disagreements are marked in the table and listed under it.",
        "- numpy: hand-written vectorised forward functions and hand-derived derivatives "
        "(bench/systems_numpy.py, checked against finite differences by tests/test_bench.py). "
        "JAX: float64 (`jax_enable_x64`), everything under `jax.jit`, `block_until_ready`; "
        "`jax.grad`, `jax.hessian`, `jax.jvp`, `jax.vjp`, hvp = jvp of grad. PyTorch: CPU, "
        "float64, f under `no_grad`, gradients by `torch.autograd.grad` (which re-runs the "
        "forward), Hessians/jvp/hvp by `torch.func`. The JAX and PyTorch forward functions "
        "translate the .tl programs literally (bench/forwards.py), keeping the diagonal "
        "matrix of trace_diag and the dead product of dead_code; qform2 is |A x|^2 in every "
        "baseline (O(N^2)), which is what tensorlang's simplifier must reach.",
        "- tensorlang: `tl.load(examples/FILE)[func].compile(backend)`, derivatives from the "
        "derived defs of the example files (or `tl.vjp` / `tl.jvp` for conv and J^T J v); "
        "cost-model counts from `Function.cost(...)` on the program as it will run.",
        "- Peak memory: `t` = tracemalloc peak during one call (numpy and Python allocations: "
        "numpy and the interpreter); `r` = peak RSS increase sampled every 0.5 ms from "
        "/proc/self/statm during one call (allocations outside Python: XLA, torch, compiled "
        "kernels; coarse for calls shorter than a millisecond). Both are in results.json.",
        f"- Size caps (to stay within memory and a few minutes): {_caps_text()}. Each "
        "measurement may also allocate at most the --mem-limit allowance (RLIMIT_DATA; "
        "beyond it the point is OOM, not a dead machine) and take at most --timeout seconds; "
        "cost-model counts come from a worker process with its own time limit.",
        "",
    ]
    return "\n".join(parts)


def write(data: dict[str, Any], path: str, plots: list[str]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(data, path, plots))
