"""The `tl` command (SPEC 9): every subcommand, exit codes 0/1/2, located errors, no tracebacks.

Most checks call `cli.main(argv)` in-process (fast); a few run the real entry points as
subprocesses to check what a user sees (exit status, stderr, no traceback).
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROG = """\
def qform(N: size, x: R[N], A: R[N, N]) -> R:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]

def conv(N: size, K: size, x: R[N + K - 1], w: R[K]) -> R[N]:
    out[i:N] = sum k:K. w[k] * x[i + k]
    return out

def stats(N: size, x: R[N]) -> (R, R[N]):
    s = sum i:N. x[i]
    return (s, gen i:N. x[i] * s)

def masked(N: size, E: rel(N, N), A: R[N, N]) -> R:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2

def qform_grad = grad(qform, x)
"""

BAD_TYPES = """\
def f(N: size, x: R[N]) -> R:
    return sum i:N. x[i] * y_undefined

def g(N: size, x: R[N]) -> R:
    return sum i:N. x[i]

def h(x: R) -> R[3]:
    return x

def k(N: size, x: R[N]) -> R:
    return f(N, x) + g(N, x)
"""

WARN = """\
def shift(N: size, xs: R[N]) -> R:
    return sum i:N. xs[i + 2]
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, pathlib.Path]:
    d = tmp_path_factory.mktemp("cli")
    out = {}
    for name, text in [("prog.tl", PROG), ("bad.tl", BAD_TYPES), ("warn.tl", WARN),
                       ("syntax.tl", "def f(x: R) -> R:\n    return x +* 2\n")]:
        (d / name).write_text(text)
        out[name] = d / name
    rng = np.random.default_rng(3)
    x, A = rng.standard_normal(4), rng.standard_normal((4, 4))
    np.save(d / "x.npy", x)
    np.save(d / "A.npy", A)
    np.savez(d / "xA.npz", x=x, A=A)
    np.save(d / "A35.npy", np.zeros((3, 5)))
    np.save(d / "E.npy", np.eye(4, k=1, dtype=bool))
    out["dir"] = d
    return out


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def spawn(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorlang", *map(str, argv)], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


# -- tl run ------------------------------------------------------------------------------------


def test_run_with_arrays(capsys, files):
    d = files["dir"]
    x, A = np.load(d / "x.npy"), np.load(d / "A.npy")
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "qform", "--arg", f"x={d / 'x.npy'}",
                            "--arg", f"A={d / 'A.npy'}")
    assert code == 0 and float(out) == pytest.approx(x @ A @ x, rel=1e-12)
    # .npz entries by name, and an explicit size
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "qform", "--arg", "N=4",
                            "--arg", f"x={d / 'xA.npz'}", "--arg", f"A={d / 'xA.npz'}")
    assert code == 0 and float(out) == pytest.approx(x @ A @ x, rel=1e-12)


def test_run_random_out_and_time(capsys, files, tmp_path):
    code, out, err = run_main(capsys, "run", files["prog.tl"], "conv", "--random", "N=5",
                              "--random", "K=3", "--seed", "7", "--out", tmp_path / "r.npy",
                              "--time")
    assert code == 0 and "time:" in err and "run (numba)" in err
    saved = np.load(tmp_path / "r.npy")
    assert saved.shape == (5,)
    assert out.strip().startswith("[")
    # the same seed gives the same inputs, hence the same result
    code, out2, _ = run_main(capsys, "run", files["prog.tl"], "conv", "--random", "N=5",
                             "--random", "K=3", "--seed", "7")
    assert out2 == out
    # a pair result: one line per component, saved as .npz
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "stats", "--random", "N=3",
                            "--out", tmp_path / "s.npz")
    assert code == 0 and out.startswith("result.0 = ") and "result.1 =" in out
    with np.load(tmp_path / "s.npz") as z:
        assert sorted(z.keys()) == ["result.0", "result.1"] and z["result.1"].shape == (3,)
    code, _, err = run_main(capsys, "run", files["prog.tl"], "stats", "--random", "N=3",
                            "--out", tmp_path / "s.npy")
    assert code == 1 and "tuple" in err


def test_run_rand_values_and_relations(capsys, files):
    d = files["dir"]
    # '@rand' fills one input once the sizes are known from the others
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "qform", "--arg",
                            f"x={d / 'x.npy'}", "--arg", "A=@rand")
    assert code == 0 and np.isfinite(float(out))
    A = np.load(d / "A.npy")
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "masked", "--arg",
                            f"E={d / 'E.npy'}", "--arg", f"A={d / 'A.npy'}")
    want = sum(A[i, i + 1] ** 2 for i in range(3))
    assert code == 0 and float(out) == pytest.approx(want, rel=1e-12)
    code, out, _ = run_main(capsys, "run", files["prog.tl"], "masked", "--random", "N=6")
    assert code == 0 and float(out) >= 0


def test_run_default_function_is_last_def(capsys, files, tmp_path):
    p = tmp_path / "two.tl"
    p.write_text("def a(x: R) -> R:\n    return x\n\ndef b(x: R) -> R:\n    return 2 * x\n")
    code, out, _ = run_main(capsys, "run", p, "--arg", "x=1.5")
    assert code == 0 and out.strip() == "3.0"


def test_run_program_errors(capsys, files):
    d = files["dir"]
    cases = [
        (["qform", "--arg", f"x={d / 'x.npy'}", "--arg", f"A={d / 'A35.npy'}"],
         "argument A of qform: expected shape (4, 4)"),
        (["qform", "--arg", f"x={d / 'x.npy'}"], "missing argument A"),
        (["qform", "--arg", "x=@rand", "--arg", "A=@rand"], "random inputs need every size"),
        (["nope"], "defines no function 'nope'"),
        (["qform", "--arg", "z=1"], "no parameter 'z'"),
        (["qform", "--arg", "x=hello"], "not a number"),
        (["qform", "--arg", f"x={d / 'missing.npy'}"], "no such file"),
        (["qform", "--random", "M=2"], "no parameter 'M'"),
    ]
    for argv, message in cases:
        code, out, err = run_main(capsys, "run", files["prog.tl"], *argv)
        assert code == 1, argv
        assert message in err, (argv, err)
        assert "Traceback" not in err


# -- tl check / show / cost --------------------------------------------------------------------


def test_check(capsys, files):
    code, out, err = run_main(capsys, "check", files["prog.tl"])
    assert code == 0 and err == ""
    assert "qform(N: size, x: R[N], A: R[N, N]) -> R" in out
    assert "qform_grad(N: size, x: R[N], A: R[N, N]) -> R[N] = grad(qform, x)" in out
    assert "ok, 5 functions, 0 warnings" in out
    code, out, err = run_main(capsys, "check", files["warn.tl"])
    assert code == 0 and f"{files['warn.tl']}:2:" in err and "warning" in err and "^" in err
    assert "1 warning" in out


def test_check_reports_every_error(capsys, files):
    code, out, err = run_main(capsys, "check", files["bad.tl"])
    assert code == 1
    assert f"{files['bad.tl']}:2:" in err and f"{files['bad.tl']}:7:" in err
    assert "2 errors" in err and "^" in err and "Traceback" not in err
    assert "unknown function f" not in err  # k uses f: its error would only repeat f's
    code, _, err = run_main(capsys, "check", files["syntax.tl"])
    assert code == 1 and f"{files['syntax.tl']}:2:" in err and "parse error" in err
    code, _, err = run_main(capsys, "check", files["dir"] / "missing.tl")
    assert code == 1 and "cannot read" in err


def test_show(capsys, files):
    code, out, _ = run_main(capsys, "show", files["prog.tl"], "conv")
    assert code == 0 and out.startswith("def conv(")
    code, uni, _ = run_main(capsys, "show", files["prog.tl"], "conv", "--unicode")
    assert code == 0 and uni != out
    code, letlifted, _ = run_main(capsys, "show", files["prog.tl"], "qform", "--stage", "letlift")
    assert code == 0 and "qform" in letlifted
    code, out, err = run_main(capsys, "show", files["prog.tl"], "qform_grad", "--stage", "ssa")
    assert code == 0 and out.startswith("def qform_grad(")


def test_cost(capsys, files):
    code, out, _ = run_main(capsys, "cost", files["prog.tl"], "qform", "N=10", "--stage", "source")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "cost of qform at stage source with N=10"
    assert lines[2].split() == ["total", "99", "110", "0", "209"]
    assert lines[3] == "per binding:"
    assert lines[4].split() == ["y", "90", "100", "0", "190"]
    assert lines[5].split() == ["return", "9", "10", "0", "19"]
    code, out, _ = run_main(capsys, "cost", files["prog.tl"], "qform", "N=10")
    assert code == 0 and "cost of qform at stage" in out
    code, out, _ = run_main(capsys, "cost", files["prog.tl"], "masked", "N=4",
                            f"E={files['dir'] / 'E.npy'}", "--stage", "parsed")
    assert code == 0 and out.splitlines()[2].split()[3] == "3"  # 3 live squares (pow calls)
    code, _, err = run_main(capsys, "cost", files["prog.tl"], "masked", "N=4")
    assert code == 1 and "missing relation E" in err
    code, _, err = run_main(capsys, "cost", files["prog.tl"], "qform")
    assert code == 1 and "cannot infer size N" in err


# -- tl prove / bench --------------------------------------------------------------------------


def test_prove(capsys, monkeypatch):
    """The command's tables and exit codes, on a few real rules and one real pass (the whole
    catalogue runs in tests/test_catalogue.py and in CI's `tl prove`)."""
    from tensorlang.proofs import catalogue

    real_rules, real_passes = catalogue.check_all, catalogue.check_passes
    monkeypatch.setattr(catalogue, "check_all",
                        lambda k: real_rules(k, ["L1", "P8", "G4", "SSA-contract"]))
    monkeypatch.setattr(catalogue, "check_passes", lambda k: real_passes(k, ["letlift"]))
    monkeypatch.setattr(catalogue, "check_theorems", lambda k: [
        catalogue.TheoremRow("6.1 jvp bound", "rules", "random", k, True, 0.5, None)])
    code, out, _ = run_main(capsys, "prove", "--examples", "2")
    assert code == 0
    for word in ("L1", "P8", "G4", "SSA-contract", "letlift", "worst cost ratio", "6.1 jvp"):
        assert word in out

    bad = catalogue.RuleReport("L1", "letlift", 2, True, False, 2.0, None)
    monkeypatch.setattr(catalogue, "check_all", lambda k: [bad])
    monkeypatch.setattr(catalogue, "format_table", lambda reports: "TABLE")
    code, out, err = run_main(capsys, "prove", "--examples", "2")
    assert code == 1 and "1 check failed: L1" in err


def test_bench_passes_its_options_through(capsys):
    code, out, err = run_main(capsys, "bench", "--help")
    assert code == 0 and "--sizes" in out + err


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["run"], ["show", "f.tl"], ["run", "f.tl", "--arg", "x"],
                                  ["run", "f.tl", "--random", "N=-1"],
                                  ["show", "f.tl", "f", "--stage", "nope"], ["frobnicate"],
                                  ["run", "f.tl", "--backend", "gpu"]])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_internal_errors_are_one_line(capsys, monkeypatch, files):
    def boom(ns):
        raise RuntimeError("kaboom")
    monkeypatch.setattr(cli, "cmd_check", boom)
    code, _, err = run_main(capsys, "check", files["prog.tl"])
    assert code == 1 and err.startswith("tl: internal error: RuntimeError: kaboom")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# -- the real entry points ---------------------------------------------------------------------


def test_subprocess_run_and_errors(files):
    r = spawn("run", files["prog.tl"], "qform", "--random", "N=20", "--time")
    assert r.returncode == 0 and np.isfinite(float(r.stdout)) and "time:" in r.stderr
    r = spawn("check", files["syntax.tl"])
    assert r.returncode == 1 and f"{files['syntax.tl']}:2:" in r.stderr
    assert "^" in r.stderr and "Traceback" not in r.stderr
    r = spawn("run", files["prog.tl"], "qform", "--arg", f"A={files['dir'] / 'A35.npy'}",
              "--arg", f"x={files['dir'] / 'x.npy'}")
    assert r.returncode == 1 and "shape error" in r.stderr and "Traceback" not in r.stderr


def test_console_script(files):
    exe = pathlib.Path(sys.executable).parent / "tl"
    if not exe.exists():
        pytest.skip("the tl console script is not installed next to this interpreter")
    r = subprocess.run([str(exe), "cost", str(files["prog.tl"]), "qform", "N=3", "--stage",
                        "source"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[2].split() == ["total", "8", "12", "0",
                                                                        "20"]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "usage:" in r.stderr


def test_backends_agree_and_show_generated_code(capsys, files, tmp_path):
    outs = {}
    for backend in ("interp", "numba"):
        code, _, _ = run_main(capsys, "run", files["prog.tl"], "conv", "--random", "N=6",
                              "--random", "K=2", "--backend", backend,
                              "--out", tmp_path / f"{backend}.npy")
        assert code == 0
        outs[backend] = np.load(tmp_path / f"{backend}.npy")
    np.testing.assert_allclose(outs["numba"], outs["interp"], rtol=1e-9)
    code, out, _ = run_main(capsys, "show", files["prog.tl"], "conv", "--stage", "numba")
    assert code == 0 and "@njit" in out and "prange" in out
    code, _, err = run_main(capsys, "run", files["prog.tl"], "conv", "--random", "N=2",
                            "--random", "K=2", "--backend", "cuda")
    assert code == 1 and "needs a CUDA GPU" in err and "Traceback" not in err


def test_simplifier_failure_is_a_warning_in_every_process(capsys, cache_dir, monkeypatch,
                                                          tmp_path):
    """Outside strict mode a failing simplifier leaves the program as it was: `tl run` says so
    on stderr, the API's compiled function lists it, and the unsimplified program is never
    cached, so a warm process says it again."""
    from conftest import forget_in_process
    from tensorlang.passes.simplify import driver

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setenv("TENSORLANG_STRICT", "0")
    monkeypatch.setattr(driver, "attempt", broken)
    src = tmp_path / "f.tl"
    src.write_text("def f(N: size, x: R[N]) -> R:\n    return sum i:N. x[i] * x[i] + 0.0\n")
    for _ in range(2):
        code, out, err = run_main(capsys, "run", src, "f", "--random", "N=3")
        assert code == 0 and out.strip()
        assert "warning: f: the simplifier failed (full: RuntimeError: planted" in err
        assert "--stage simplified" in err
        forget_in_process()
    fn = tl.load(src)["f"]
    assert any("planted" in w for w in fn.compile("numba").warnings)
    assert fn.compile("interp").warnings == ()
