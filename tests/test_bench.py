"""The benchmark suite (bench/): a smoke run of `bench.main` on one tiny workload with the JSON
schema and cross-system agreement checked; the hand-derived numpy derivatives against finite
differences; the JAX / PyTorch forward functions and AD wrappers against numpy (skipped when
not installed); mismatches reported, never silent; the GPU script's clean exit."""
from __future__ import annotations

import json
import math
import sys
import time

import numpy as np
import pytest

from examples_util import ROOT

sys.path.insert(0, str(ROOT))

import bench  # noqa: E402
from bench import runner, systems_numpy, table  # noqa: E402
from bench.tasks import TASKS  # noqa: E402

TINY = ["--sizes", "4", "--repeat", "1", "--budget", "0", "--threads", "0", "--no-plots"]
MEASURE_KEYS = {"status", "time", "median", "first_call", "samples", "number", "spread",
                "peak_tracemalloc", "peak_rss_delta", "check", "max_rel_err", "value",
                "out_size", "message"}


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001
        return False
    return True


HAVE_JAX = _importable("jax")
HAVE_TORCH = _importable("torch")


def _run(tmp_path, *words: str) -> tuple[int, dict]:
    code = bench.main([*TINY, *words, "--out", str(tmp_path)])  # later options win
    path = tmp_path / "results.json"
    return code, (json.loads(path.read_text()) if path.exists() else {})


# -- the smoke run -----------------------------------------------------------------------------

def test_main_smoke_schema_and_agreement(tmp_path, capsys):
    systems = ["numpy", "tensorlang"] + (["jax"] if HAVE_JAX else []) + \
        (["torch"] if HAVE_TORCH else [])
    code, data = _run(tmp_path, "qform", "--systems", ",".join(systems))
    out = capsys.readouterr()
    assert code == 0, out.err
    assert data["schema"] == runner.SCHEMA
    assert {"created", "machine", "config", "memory_methods", "records", "skipped",
            "startup"} <= set(data)
    assert data["config"]["sizes"] == [4] and data["config"]["names"] == ["qform"]
    assert data["machine"]["cpus"] >= 1
    assert set(data["machine"]["load_average"]) == {"start", "end"}
    recs = {r["system"]: r for r in data["records"]}
    assert set(recs) == set(systems)
    for rec in recs.values():
        assert rec["workload"] == "qform" and rec["N"] == 4 and rec["sizes"] == {"N": 4}
        assert MEASURE_KEYS <= set(rec["f"])
        assert set(rec["derivatives"]) == {"grad", "hessian"}
        for m in rec["derivatives"].values():
            assert {"label", "ratio", "status", "check"} <= set(m)
        # every system's f agrees with the numpy reference, and was timed
        assert rec["f"]["status"] == "ok" and rec["f"]["check"] == "ok"
        assert rec["f"]["time"] > 0 and rec["f"]["samples"] >= 1
    # the numpy column agrees with tensorlang, and both with the reference
    _, args = runner.make_inputs(TASKS["qform"], 4, seed=0)
    ref = TASKS["qform"].workload.ref(args)
    assert math.isclose(recs["numpy"]["f"]["value"], recs["tensorlang"]["f"]["value"],
                        rel_tol=1e-12)
    assert math.isclose(recs["tensorlang"]["f"]["value"], ref, rel_tol=1e-12)
    # numpy derivatives exist and are checked (against themselves: the reference)
    for key in ("grad", "hessian"):
        m = recs["numpy"]["derivatives"][key]
        assert m["status"] == "ok" and m["check"] == "ok" and m["ratio"] > 0
    # tensorlang: derivatives either run and agree, or are n/a (not yet implemented)
    for m in recs["tensorlang"]["derivatives"].values():
        assert m["status"] in ("ok", "n/a"), m["message"]
        if m["status"] == "ok":
            assert m["check"] == "ok", m["message"]
    cost = recs["tensorlang"]["cost"]
    assert cost["f"]["total"] == cost["f"]["adds"] + cost["f"]["muls"] + cost["f"]["calls"]
    assert cost["f"]["total"] > 0
    for name in ("jax", "torch"):
        if name in recs:
            for key, m in recs[name]["derivatives"].items():
                assert m["status"] == "ok" and m["check"] == "ok", (name, key, m["message"])
    # the terminal table
    assert "== qform - grad(x)" in out.out and "tensorlang[" in out.out
    assert "qform N=4" in out.err  # progress on stderr


def test_mismatch_is_reported_not_silent(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(systems_numpy.FORWARD, "skip_one", lambda a: 123.0)
    code, data = _run(tmp_path, "skip_one", "--systems", "numpy")
    out = capsys.readouterr()
    assert code == 1
    f = data["records"][0]["f"]
    assert f["check"] == "mismatch" and "relative error" in f["message"]
    assert "MISMATCH" in out.out and "!" in out.out


def test_unknown_workload_is_a_usage_error(tmp_path, capsys):
    assert bench.main(["no_such_workload", "--threads", "0", "--out", str(tmp_path)]) == 2
    assert "unknown workload" in capsys.readouterr().err


def test_size_caps_skip_and_report(tmp_path, capsys):
    """logreg's Hessian is capped at N = 400, its target size (issue 14): a sweep over 4 and
    401 measures it at 4, skips it at 401, and measures it (with f, without the gradient)
    at 400, which lies between the sweep's sizes."""
    code, data = _run(tmp_path, "logreg", "--systems", "numpy", "--sizes", "4,401")
    out = capsys.readouterr()
    assert code == 0
    hess = {r["N"]: r["derivatives"]["hessian"]["status"] for r in data["records"]}
    assert hess == {4: "ok", 400: "ok", 401: "skipped"}
    at = {r["N"]: r for r in data["records"]}
    assert set(at[400]["derivatives"]) == {"hessian"} and at[400]["f"]["status"] == "ok"
    assert "skip" in out.out


def test_hessian_targets_are_read_at_their_own_sizes():
    """The report's Hessian table (issue 14): each target at exactly its N; memory of
    matfac's Hessian from the kernel's arrays."""
    from bench import report

    def rec(system, w, n, t, arrays=None):
        h = {"status": "ok", "time": t, "check": "ok", "label": "hessian(x)"}
        if arrays:
            h["arrays"], h["peak_rss_delta"] = arrays, 8 << 20
        return {"system": system, "workload": w, "N": n, "f": {"status": "ok", "time": 1.0},
                "derivatives": {"hessian": h}}
    small = {"largest_temporary": 1000, "temporary": "v0", "output": 10 ** 6,
             "inputs": 1000}
    data = {"records": [
        rec("tensorlang", "qform", 2000, 1.0), rec("jax", "qform", 2000, 30.0),
        rec("tensorlang", "qform", 1000, 1.0), rec("jax", "qform", 1000, 1.0),
        rec("tensorlang", "matfac", 200, 1.0, small), rec("jax", "matfac", 200, 40.0),
        rec("tensorlang", "logreg", 400, 1.0), rec("jax", "logreg", 400, 2.5)]}
    rows = {r[0]: r for r in report.hessian_rows(data)}
    assert rows["qform"][1] == "2000" and rows["qform"][-1] == "met"
    assert rows["matfac"][-1] == "**not met**"       # 40x < 50x
    assert rows["logreg"][-1] == "met"
    assert report.hessian_memory_row(data)[-1] == "met"
    big = dict(small, largest_temporary=5 * 10 ** 7, temporary="v1")
    data["records"][4] = rec("tensorlang", "matfac", 200, 1.0, big)
    assert report.hessian_memory_row(data)[-1] == "**not met**"
    data["records"] = [r for r in data["records"] if r["workload"] != "logreg"]
    assert {r[0]: r for r in report.hessian_rows(data)}["logreg"][-1] == "not measurable yet"


def test_jax_rows_and_griewank_follow_issue_14():
    """f and gradient against JAX: a row at each of N = 1000 and 2000 (a capped workload at
    its largest N), met within 1.25x, the suite's geometric mean apart; the Griewank status
    is the ratio at the largest N."""
    from bench import report

    def rec(system, w, n, tf, tg):
        g = {"status": "ok", "time": tg, "check": "ok", "label": "grad(x)", "ratio": tg / tf}
        return {"system": system, "workload": w, "N": n, "f": {"status": "ok", "time": tf},
                "derivatives": {"grad": g}}
    data = {"records": [
        rec("tensorlang", "qform", 100, 1.0, 5.0), rec("jax", "qform", 100, 1.0, 1.0),
        rec("tensorlang", "qform", 1000, 1.2, 2.0), rec("jax", "qform", 1000, 1.0, 1.0),
        rec("tensorlang", "qform", 2000, 1.0, 2.9), rec("jax", "qform", 2000, 1.0, 2.0),
        rec("tensorlang", "attention", 300, 3.0, 3.0), rec("jax", "attention", 300, 1.0, 6.0)]}
    rows = {(r[0], r[2], r[3]): r for r in report.vs_jax_rows(data)}
    assert set(rows) == {("qform", "f", "1000"), ("qform", "grad(x)", "1000"),
                         ("qform", "f", "2000"), ("qform", "grad(x)", "2000"),
                         ("attention", "f", "300"), ("attention", "grad(x)", "300")}
    assert rows[("qform", "f", "1000")][-1] == "met"            # 1.2 <= 1.25
    assert rows[("qform", "grad(x)", "1000")][-1] == "**not met**"
    assert rows[("qform", "grad(x)", "2000")][-1] == "**not met**"   # 1.45
    assert rows[("qform", "f", "2000")][1] == "yes" and rows[("attention", "f", "300")][1] == ""
    text = report._geomean_text(report.vs_jax_rows(data))
    assert "the suite 1.37 over 4 rows (**not met**)" in text and "over 6 rows" in text
    g = {r[0]: r for r in report.griewank_rows(data)}
    assert g["qform"][-1] == "met"          # 2.9 at N = 2000, though 5 at N = 100
    assert g["attention"][-1] == "met"
    # a gradient whose output alone is more than 3 C(f) elements: said so (row_col)
    out = rec("tensorlang", "row_col", 2000, 1.0, 100.0)
    out["derivatives"]["grad"]["out_size"] = 2000 * 2000
    out["cost"] = {"f": {"total": 3999}, "grad": {"total": 1}}
    data["records"].append(out)
    g = {r[0]: r for r in report.griewank_rows(data)}
    assert g["row_col"][-1].startswith("**not met** (output-bound: the derivative writes "
                                       "4,000,000 elements, C(f) = 3,999")
    out["derivatives"]["grad"]["out_size"] = 3 * 3999
    assert "output-bound" not in {r[0]: r for r in report.griewank_rows(data)}["row_col"][-1]


def test_report_renders(tmp_path):
    from bench import report

    _, data = _run(tmp_path, "dead_code", "--systems", "numpy,tensorlang")
    text = report.render(data, str(tmp_path / "performance.md"), [])
    for heading in ("## How to run", "## The machine", "## Targets and where we stand",
                    "### 1. Griewank", "## Results", "#### dead_code - grad(x)"):
        assert heading in text


def test_overhead_row_measures_and_renders():
    """The per-call overhead row (bench/overhead.py): both systems agree on every case, the
    record has a ratio per case, and the report shows it."""
    pytest.importorskip("jax")
    from bench import overhead, report

    rec = overhead.run(rounds=1, calls=3)
    assert [r["case"] for r in rec["rows"]] == ["qform f", "qform grad", "masked f"]
    assert all(r["tensorlang_us"] > 0 and r["jax_us"] > 0 and r["ratio"] > 0
               for r in rec["rows"])
    text = report.overhead_text({"overhead": rec})
    assert "| qform grad |" in text and "jax jit us" in text
    assert "Not measured" in report.overhead_text({})


# -- the numpy column: hand-derived derivatives against finite differences ------------------

def _fd_directional(f, args: dict, name: str, direction: np.ndarray, eps: float = 1e-6):
    plus = {**args, name: args[name] + eps * direction}
    minus = {**args, name: args[name] - eps * direction}
    return (np.asarray(f(plus)) - np.asarray(f(minus))) / (2 * eps)


def _leaves(v) -> list[np.ndarray]:
    return [np.asarray(x) for x in v] if isinstance(v, tuple) else [np.asarray(v)]


@pytest.mark.parametrize("name", list(TASKS))
def test_numpy_forward_and_derivatives(name):
    task = TASKS[name]
    _, args = runner.make_inputs(task, 5, seed=3)
    ref = task.workload.ref(args)
    ok, _, msg = runner.compare(systems_numpy.FORWARD[name](args), ref, rtol=1e-12)
    assert ok, msg
    rng = np.random.default_rng(7)
    f = systems_numpy.FORWARD[name]
    for d in task.derivs:
        a = {**args, **d.extras(args, ref, rng)}
        out = systems_numpy.DERIVATIVES[(name, d.key)](a)
        if d.kind == "grad":
            # <grad, v> equals the directional derivative, input by input
            for w, g in zip(d.wrt, _leaves(out)):
                v = rng.uniform(-1, 1, np.shape(args[w]))
                assert np.isclose(np.sum(g * v), _fd_directional(f, args, w, v), rtol=1e-6)
        elif d.kind == "hessian":
            w = d.wrt[0]
            v = rng.uniform(-1, 1, np.shape(args[w]))
            grad = systems_numpy.DERIVATIVES[(name, "grad")]
            hv = np.tensordot(out, v, axes=v.ndim)
            assert np.allclose(hv, _fd_directional(grad, args, w, v), rtol=1e-6, atol=1e-7)
        elif d.kind == "hvp":
            grad = systems_numpy.DERIVATIVES[(name, "grad")]
            fd = _fd_directional(grad, args, d.wrt[0], a["v"])
            assert np.allclose(out, fd, rtol=1e-6, atol=1e-7)
        elif d.kind == "jvp":
            w = d.wrt[0]
            assert np.isclose(out[0], ref)
            assert np.isclose(out[1], _fd_directional(f, args, w, a["d_" + w]), rtol=1e-6)
        elif d.kind == "vjp":
            # dot-product test <d_y, J dx> == <J^T d_y, dx>
            w = d.wrt[0]
            dx = rng.uniform(-1, 1, np.shape(args[w]))
            assert np.allclose(out[0], ref)
            lhs = np.sum(a["d_y"] * _fd_directional(f, args, w, dx))
            assert np.isclose(lhs, np.sum(out[1] * dx), rtol=1e-6)
        elif d.kind == "jtjv":
            # <J^T J v, u> == <J v, J u> with both directional derivatives by differences
            u = {w: rng.uniform(-1, 1, np.shape(args[w])) for w in d.wrt}

            def jdir(dirs):
                eps = 1e-6
                p = {**args, **{w: args[w] + eps * dirs[w] for w in d.wrt}}
                m = {**args, **{w: args[w] - eps * dirs[w] for w in d.wrt}}
                return (f(p) - f(m)) / (2 * eps)
            jv = jdir({w: a["d_" + w] for w in d.wrt})
            lhs = sum(np.sum(o * u[w]) for o, w in zip(out, d.wrt))
            assert np.isclose(lhs, np.sum(jv * jdir(u)), rtol=1e-5)
        else:
            pytest.fail(f"untested derivative kind {d.kind}")


# -- JAX and PyTorch: forwards and AD wrappers against numpy ---------------------------------

def _framework_case(system, name):
    task = TASKS[name]
    _, args = runner.make_inputs(task, 5, seed=5)
    ref = task.workload.ref(args)
    ok, rel, msg = runner.compare(system.forward(task, args)(), ref)
    assert ok, f"{name} f: {msg}"
    rng = np.random.default_rng(9)
    for d in task.derivs:
        a = {**args, **d.extras(args, ref, rng)}
        want = systems_numpy.DERIVATIVES[(name, d.key)](a)
        ok, rel, msg = runner.compare(system.derivative(task, d, a)(), want)
        assert ok, f"{name} {d.label}: {msg}"


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize("name", list(TASKS))
def test_torch_agrees_with_numpy(name):
    from bench import systems_torch

    _framework_case(systems_torch.System(), name)


# One workload per derivative kind and per jax-specific construct (relations, eye, triu); the
# forward translations themselves are shared with torch, which is tested on every workload.
JAX_FAST = ("qform", "qform2", "conv", "nbody", "arap_residuals", "matfac", "masked", "embag",
            "upsample")


@pytest.mark.skipif(not HAVE_JAX, reason="jax not installed")
@pytest.mark.parametrize("name", [n if n in JAX_FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in TASKS])
def test_jax_agrees_with_numpy(name):
    from bench import systems_jax

    _framework_case(systems_jax.System(), name)


# -- harness pieces ----------------------------------------------------------------------------

def test_compare_detects_differences():
    assert runner.compare(1.0, 1.0 + 1e-12)[0]
    assert not runner.compare(1.0, 1.1)[0]
    assert not runner.compare((np.ones(3), 1.0), np.ones(3))[0]
    assert runner.compare((1.0, (np.ones(2), 2.0)), (1.0, np.ones(2), 2.0))[0]  # nested pairs
    assert not runner.compare(np.ones(3), np.ones(4))[0]
    assert not runner.compare(np.array([np.nan, 1.0]), np.array([1.0, 1.0]))[0]
    assert runner.compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))[0]


def test_time_rounds_interleave_and_respect_budget():
    calls: list[str] = []
    entries = []
    for name in "ab":
        value, _, t = runner.calibrate(lambda name=name: calls.append(name) or 42)
        assert value == 42 and t.number >= 1 and not t.samples
        entries.append(t)
    del calls[:]
    assert runner.time_rounds(entries, repeat=3, budget=10.0) == {}
    a, b = entries
    assert len(a.samples) == len(b.samples) == 3
    # one sample of each per round, the second round backwards: a b | b a | a b
    n = a.number
    m = b.number
    assert calls == ["a"] * n + ["b"] * m + ["b"] * m + ["a"] * n + ["a"] * n + ["b"] * m
    s = a.summary()
    assert s["time"] == min(a.samples) <= s["median"] and s["samples"] == 3
    # over budget after its first sample: an entry leaves after one round
    slow = runner.Timed(lambda: time.sleep(0.002), 1)
    assert runner.time_rounds([slow], repeat=5, budget=0.001) == {} and len(slow.samples) == 1


def test_time_rounds_report_an_entry_that_fails():
    def boom() -> None:
        raise MemoryError("over")

    ok, bad = runner.Timed(lambda: None, 1), runner.Timed(boom, 1)
    failed = runner.time_rounds([ok, bad], repeat=2, budget=10.0)
    assert list(failed) == [1] and isinstance(failed[1], MemoryError)
    assert len(ok.samples) == 2 and not bad.samples


def test_cells_and_memory_formatting():
    assert table.fmt_time(1.5e-6) == "1.5 us" and table.fmt_time(2.0) == "2 s"
    assert table.fmt_cell({"status": "n/a"}) == "n/a"
    assert table.fmt_cell({"status": "skipped"}) == "skip"
    assert table.fmt_bytes(2048) == "2 KB"
    peak, _ = runner.measure_memory(lambda: np.ones(1 << 17))
    assert peak >= 8 << 17  # tracemalloc sees numpy's 1 MiB buffer


def test_gpu_script_exits_cleanly_without_gpu_or_backend(capsys, monkeypatch):
    from bench import gpu

    ok, _ = gpu.gpu_status()
    if not ok:  # the test machines: no GPU, or only the simulator
        assert gpu.main([]) == 0
        assert "nothing to do" in capsys.readouterr().out
    monkeypatch.setattr(gpu, "gpu_status", lambda: (True, "fake GPU"))
    monkeypatch.setattr(gpu, "backend_status", lambda: (False, "no CUDA backend"))
    assert gpu.main([]) == 0
    assert "no CUDA backend; nothing to do" in capsys.readouterr().out


def test_cost_worker_counts_and_times_out():
    from bench.costs import CostWorker

    worker = CostWorker(timeout=120.0)
    try:
        c, msg = worker.cost("skip_one", None, {"N": 7})
        assert msg == "" and c["total"] == c["adds"] + c["muls"] + c["calls"] and c["stage"]
        tl_cost = __import__("tensorlang").load(ROOT / "examples" / "pathological.tl")
        assert c["total"] == tl_cost["skip_one"].cost(N=7).total
        worker.timeout = 0.0  # no time to answer: the worker is killed, the request fails
        c, msg = worker.cost("skip_one", None, {"N": 7})
        assert c is None and "over" in msg
    finally:
        worker.close()


# -- the tensorlang column: what it times is what numpy computes -------------------------------

@pytest.mark.parametrize("name", list(TASKS))
def test_tensorlang_column_agrees_with_numpy(name):
    """The functions and derivatives the tensorlang column times (derived defs of the file,
    J^T J v as the file's def, relations bound once) against the numpy references, on the
    interpreter (every workload) -- the numba column runs the same Functions."""
    from bench import systems_tensorlang

    _framework_case(systems_tensorlang.System("interp"), name)


@pytest.mark.parametrize("name", ["arap_residuals", "qform_sum", "masked"])
def test_tensorlang_numba_column_agrees_with_numpy(name):
    from bench import systems_tensorlang

    _framework_case(systems_tensorlang.System("numba"), name)


def test_doc_sweep_reaches_the_target_sizes():
    """`--doc` sweeps N = 10 .. 2000 (qform's Hessian target is at 2000), and logreg's and
    matfac's Hessians are measured at their targets (400, 200) between those sizes."""
    from bench import command

    ns = bench.build_parser().parse_args(["--doc"])
    sizes = command.config_from(ns).sizes
    assert sizes == [10, 100, 1000, 2000]
    assert TASKS["logreg"].extra_points(sizes) == {400: ("hessian",)}
    assert TASKS["matfac"].extra_points(sizes) == {200: ("hessian",)}
    assert TASKS["qform"].extra_points(sizes) == {}
    assert TASKS["logreg"].extra_points([10, 100]) == {}


def test_startup_calls_every_def_of_the_file_including_j_t_j_v():
    """The start-up row calls f and the file's derived defs; a J^T J v def (arap_gn) takes
    its directions positionally (`Deriv.def_args`): it once failed with KeyError 'dU'."""
    from bench.tasks import TASKS

    rec = runner.measure_startup(TASKS["arap_residuals"], "interp", n=3, runs=1)
    assert rec["status"] == "ok", rec
    assert rec["functions"] == ["arap_residuals", "arap_gn"]
    d = TASKS["arap_residuals"].derivs[0]
    got = d.def_args(["W", "H", "U", "V", "T", "dU", "dV", "dT"], ["W", "H", "U", "V", "T"],
                     {"W": 1, "H": 2, "U": 3, "V": 4, "T": 5, "d_U": 6, "d_V": 7, "d_T": 8})
    assert got == {"W": 1, "H": 2, "U": 3, "V": 4, "T": 5, "dU": 6, "dV": 7, "dT": 8}
    with pytest.raises(ValueError, match="one direction per input"):
        d.def_args(["W", "U"], ["W", "H", "U", "V", "T"], {})


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no affinity")
def test_one_thread_keeps_the_process_on_one_core():
    """`--threads 1` pins the process: thread-pool flags alone leave XLA a second thread."""
    import subprocess

    code = ("import os, bench; got = bench.pin_cores(1); "
            "print(len(os.sched_getaffinity(0)), got == sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["1", "True"]
