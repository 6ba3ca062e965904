"""The REPL (SPEC 9): `Repl.handle` line by line, and `tl repl` driven through a pipe."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tensorlang import repl as repl_mod
from tensorlang.repl import Repl

ROOT = pathlib.Path(__file__).resolve().parent.parent

QFORM = [
    "def qform(N: size, x: R[N], A: R[N, N]) -> R:",
    "    y = gen i:N. sum j:N. A[i, j] * x[j]",
    "    return sum i:N. x[i] * y[i]",
    "",
]


def feed(r: Repl, *lines: str) -> list[str]:
    return [r.handle(line) for line in lines]


@pytest.fixture
def r() -> Repl:
    session = Repl(seed=1)
    outs = feed(session, *QFORM)
    assert outs[:3] == ["", "", ""]
    assert outs[3] == "defined qform(N: size, x: R[N], A: R[N, N]) -> R"
    return session


def test_multiline_def_and_prompt():
    s = Repl()
    assert s.prompt == "tl> "
    s.handle(QFORM[0])
    assert s.prompt == "... " and s.pending is not None
    s.handle(QFORM[1])
    s.handle(QFORM[2])
    assert s.handle("").startswith("defined qform(")
    assert s.prompt == "tl> " and "qform" in s.module
    # a one-line derived def completes at once
    assert s.handle("def g = grad(qform, x)") == \
        "defined g(N: size, x: R[N], A: R[N, N]) -> R[N] = grad(qform, x)"
    # end of input completes a definition still being typed
    s.handle("def one(x: R) -> R:")
    s.handle("    return x")
    assert s.finish() == "defined one(x: R) -> R"


def test_set_and_evaluate(r):
    assert r.handle(":set N = 3") == "N : int = 3"
    assert r.handle(":set x = rand(N)") == "x : R[N]"
    assert r.handle(":set A = rand(N, N)") == "A : R[N, N]"
    assert r.handle(":set B = rand(2, 3)") == "B : R[2, 3]"
    x, A = r.values["x"].value, r.values["A"].value
    assert x.shape == (3,) and A.shape == (3, 3)
    assert float(r.handle("qform(N, x, A)")) == pytest.approx(x @ A @ x, rel=1e-12)
    assert float(r.handle("sum i:N. x[i]")) == pytest.approx(x.sum(), rel=1e-12)
    assert float(r.handle("N * 2.0")) == 6.0  # an integer is a real where used as a value
    out = r.handle("gen i:N. x[i] * 2")
    np.testing.assert_allclose(np.array(out.strip("[]").split(), dtype=float), 2 * x,
                               rtol=1e-6)
    assert r.handle(":set a = 2.5") == "a : R = 2.5"
    assert r.handle(":set y = gen i:N. a * x[i]") == "y : R[N]"
    np.testing.assert_allclose(r.values["y"].value, 2.5 * x, rtol=1e-12)
    # rebinding a size keeps the values made with the old one at their shapes
    assert r.handle(":set N = 5") == "N : int = 5"
    assert r.handle(":type x") == "R[3]"
    assert r.handle(":set z = rand()").startswith("z : R = ")


def test_load_values(r, tmp_path):
    v = np.arange(4.0)
    np.save(tmp_path / "v.npy", v)
    np.save(tmp_path / "m.npy", np.eye(4, dtype=bool))
    assert r.handle(f':set v = load("{tmp_path / "v.npy"}")') == "v : R[4]"
    assert float(r.handle("sum i:4. v[i]")) == 6.0
    assert r.handle(f":set E = load('{tmp_path / 'm.npy'}')") == "E : rel(4, 4)"
    assert float(r.handle("sum i:4, j:4. [E(i, j)] * v[j]")) == 6.0
    assert "no such file" in r.handle(':set w = load("nope.npy")')


def test_type_show_cost_vars_help(r):
    assert r.handle(":type qform") == "qform(N: size, x: R[N], A: R[N, N]) -> R"
    r.handle(":set N = 2")
    assert r.handle(":type gen i:N. (1.0, 2.0)") == "[N] (R, R)"
    assert r.handle(":type 1.0 + 2.0") == "R"
    assert r.handle(":show qform").startswith("def qform(")
    assert r.handle(":show qform letlift").startswith("def qform(")
    assert r.handle(":show qform parsed unicode") != r.handle(":show qform")
    cost = r.handle(":cost qform N=10 stage=source").splitlines()
    assert cost[0] == "cost of qform at stage source with N=10"
    assert cost[2].split() == ["total", "99", "110", "0", "209"]
    assert "per binding:" in cost
    listing = r.handle(":vars")
    assert "N : int = 2" in listing and "qform(N: size" in listing
    assert ":load FILE" in r.handle(":help")


def test_errors_print_and_session_goes_on(r):
    out = r.handle("1.0 +")
    assert out.startswith("<repl>:1:") and "parse error" in out and "^" in out
    out = r.handle("sum i:3. q[i]")
    assert "<repl>:1:" in out and "q" in out
    assert "unknown command :frob" in r.handle(":frob")
    assert "no function named 'nope'" in r.handle(":show nope")
    assert "unknown stage" in r.handle(":show qform nope")
    assert "'M' is not an integer or a bound size" in r.handle(":set x = rand(M)")
    assert ":set needs NAME = VALUE" in r.handle(":set 3 = 4")
    assert feed(r, "def bad(x: R) -> R[3]:", "    return x") == ["", ""]
    assert "type error: bad is declared to return R[3]" in r.handle("")
    assert "bad" not in r.module  # a failed definition leaves the session as it was
    assert "qform" in r.module
    assert r.handle("def g = grad(qform, x)").startswith("defined g(")
    assert r.handle(":show g ssa").startswith("def g(")
    assert float(r.handle("2.0 * 3.0")) == 6.0


def test_redefinition_replaces(r):
    r.handle("def f(x: R) -> R:")
    r.handle("    return x")
    r.handle("")
    r.handle("def f(x: R) -> R:")
    r.handle("    return 3 * x")
    assert r.handle("") == "defined f(x: R) -> R"
    assert float(r.handle("f(2.0)")) == 6.0


def test_load_file_and_quit(tmp_path):
    p = tmp_path / "lib.tl"
    p.write_text("def double(x: R) -> R:\n    return 2 * x\n\ndef dd = grad(double, x)\n")
    s = Repl()
    out = s.handle(f":load {p}")
    assert out.splitlines() == [f"loaded from {p}: double(x: R) -> R",
                                f"loaded from {p}: dd(x: R) -> R = grad(double, x)"]
    assert float(s.handle("double(4.0)")) == 8.0
    assert "cannot read" in s.handle(":load nope.tl")
    bad = tmp_path / "bad.tl"
    bad.write_text("def f(x: R) -> R:\n    return x +* 1\n")
    assert s.handle(f":load {bad}").startswith(f"{bad}:2:")
    assert s.handle(":quit") == "" and s.done


def test_completion(r):
    from prompt_toolkit.document import Document

    r.handle(":set xs = 2.0")
    words = r.completions()
    for w in ("qform", "xs", ":load", ":cost", "exp", "sigmoid", "gen", "letlift"):
        assert w in words
    comp = repl_mod.make_completer(r)
    got = [c.text for c in comp.get_completions(Document("1 + qf"), None)]
    assert got == ["qform"]
    got = [c.text for c in comp.get_completions(Document(":lo"), None)]
    assert got == [":load"]


def test_history_file_tolerates_read_only_home(tmp_path, monkeypatch):
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    monkeypatch.setenv("TL_HISTORY_FILE", str(tmp_path / "hist"))
    h = repl_mod.make_history()
    assert isinstance(h, FileHistory)
    h.store_string(":help")
    assert ":help" in (tmp_path / "hist").read_text()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        monkeypatch.setenv("TL_HISTORY_FILE", str(ro / "hist"))
        if os.access(ro, os.W_OK):  # root ignores permissions: the fallback is still safe
            repl_mod.make_history().store_string("x")
        else:
            assert isinstance(repl_mod.make_history(), InMemoryHistory)
    finally:
        ro.chmod(0o700)


def test_piped_session(tmp_path):
    p = tmp_path / "q.tl"
    p.write_text("\n".join(QFORM))
    script = "\n".join([
        ":set N = 3",
        ":set x = rand(N)",
        ":set A = rand(N, N)",
        "qform(N, x, A) - qform(N, x, A)",
        "def twice(x: R) -> R:",
        "    return 2 * x",
        "",
        "twice(1.5)",
        "1.0 +",
        ":type twice",
        ":quit",
        "twice(1.0)",  # not reached
    ]) + "\n"
    r = subprocess.run([sys.executable, "-m", "tensorlang", "repl", str(p)], input=script,
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 1, r.stderr  # the session goes on after "1.0 +", then exits 1
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"loaded from {p}: qform(N: size, x: R[N], A: R[N, N]) -> R"
    assert lines[1:4] == ["N : int = 3", "x : R[N]", "A : R[N, N]"]
    assert lines[4] == "0.0"
    assert lines[5] == "defined twice(x: R) -> R"
    assert lines[6] == "3.0"
    assert lines[7].startswith("<repl>:1:") and "parse error" in lines[7]
    assert lines[-1] == "twice(x: R) -> R"
    assert "2.0" not in lines


def test_redefining_an_unchanged_def_does_no_work(r, monkeypatch):
    """SPEC 15: entering a def again unchanged is instant: no pipeline stage runs (no
    derivation, no simplifier), and the new module's functions find the compiled kernels
    of the old one."""
    from tensorlang import pipeline

    x, a = np.arange(3.0), np.eye(3)
    ran: list[str] = []
    original = pipeline.run_to
    spy = (lambda *args, **kw: (ran.append(args[1]), original(*args, **kw))[1])
    first_q = r.module["qform"](x=x, A=a)
    monkeypatch.setattr(pipeline, "run_to", spy)
    assert feed(r, *QFORM)[3] == "defined qform(N: size, x: R[N], A: R[N, N]) -> R"
    assert r.module["qform"](x=x, A=a) == first_q
    assert set(ran) <= {"parsed"}   # (the elaborated def itself: no stage runs)
    monkeypatch.setattr(pipeline, "run_to", original)
    assert r.handle("def h = hessian(qform, x)").startswith("defined h(")
    first = r.module["h"](x=x, A=a)
    monkeypatch.setattr(pipeline, "run_to", spy)
    assert r.handle("def h = hessian(qform, x)").startswith("defined h(")
    np.testing.assert_array_equal(r.module["h"](x=x, A=a), first)
    assert set(ran) <= {"parsed"}
