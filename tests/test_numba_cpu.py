"""The Numba CPU backend agrees with the interpreter, does the work the cost model counts, and
caches its kernels on disk (SPEC 8, docs/backends.md).

Numba compiles a kernel in seconds, so the CI profile compiles few distinct programs (they
are cached on disk between runs, in `$TENSORLANG_CACHE_DIR` or `~/.cache/tensorlang`); the
code generator itself is checked on many random programs in plain-Python mode
(`compile_program(p, jit=False)`), and the long sweeps are marked `slow`.
"""
from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import tokenize
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import (ATOL, EXAMPLES, ROOT, RTOL, WORKLOADS, NanEmpty, assert_same,
                           derived_random_case, to_program, workload_params)
from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.build import Builder
from tensorlang.semantics.cost import cost_def, cost_program
from tensorlang.syntax.errors import ShapeError, TLError
from tensorlang.semantics.interp import interpret
from tensorlang.testing import differentiable_programs, programs, random_args

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
compile_program = numba_cpu.compile_program
generated_source = numba_cpu.generated_source





def example(name: str) -> tuple[Any, tssa.Program]:
    w = WORKLOADS[name]
    fn = tl.load(str(EXAMPLES / w.file))[w.func]
    return w, fn.run_to("ssa")


# ---------------------------------------------------------------------------------------------
# Builtins: scalar implementations == the interpreter's numpy functions

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.7, -3.7, 30.0, -30.0, 800.0, -800.0,
           1e-300, -1e-300, np.inf, -np.inf, np.nan]

_CALLS = [f"{f}(x[i])" for f in (
    "exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "sigmoid", "softplus", "abs", "relu",
    "square", "recip", "step", "sign", "dtanh", "dsigmoid", "dtan")] + [
    "pow(x[i], 0.5)", "pow(x[i], -1.0)", "pow(x[i], 3.0)", "max(x[i], y[i])",
    "min(x[i], y[i])", "ge(x[i], y[i])", "gt(x[i], y[i])"] + [
    c for c in ("d2tanh(x[i])", "d2sigmoid(x[i])", "d2tan(x[i])",
                "sel_ge(x[i], y[i], y[i], x[i])", "keep_ge(x[i], y[i], y[i])",
                "keep_gt(x[i], y[i], y[i])") if c.split("(")[0] in ast.BUILTINS]


def _nest(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"({items[0]}, {_nest(items[1:])})"


BUILTINS_TL = (f"def builtins(N: size, x: R[N], y: R[N]) -> {_nest(['R[N]'] * len(_CALLS))}:\n"
               f"    return {_nest([f'gen i:N. {c}' for c in _CALLS])}\n")


def _special_args() -> dict[str, Any]:
    xs = np.array([a for a in SPECIAL for _ in SPECIAL])
    ys = np.array([b for _ in SPECIAL for b in SPECIAL])
    return {"N": len(xs), "x": xs, "y": ys}


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal values, equal NaN positions and equal signs of zeros."""
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True, err_msg=what)
    zeros = want == 0
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), what


def test_builtins_match_the_interpreter_on_special_values():
    """Every `tl_<f>` of numba_rt (what kernels call), compiled by Numba, against the
    interpreter's numpy implementation on a grid of ordinary and special values.  (One plain
    `njit` function: much cheaper to compile than a kernel with a loop per builtin.)"""
    from numba import njit

    from tensorlang.semantics import builtins
    from tensorlang.backends import numba_rt
    from tensorlang.backends.scalar_builtins import FUNCS
    rows = [(name, (c,)) for name in sorted(FUNCS) if builtins.lookup(name).nparams
            for c in (0.5, -1.0, 3.0, 2.0, -0.5, 1.5, 0.0)]
    rows += [(name, ()) for name in sorted(FUNCS) if not builtins.lookup(name).nparams]
    lines = ["def run(xs, ys, out):", "    for k in range(xs.shape[0]):",
             "        x = xs[k]", "        y = ys[k]"]
    for r, (name, ps) in enumerate(rows):
        args = ["x", "y", "y", "x"][:builtins.lookup(name).arity] + [repr(c) for c in ps]
        lines.append(f"        out[{r}, k] = tl_{name}({', '.join(args)})")
    ns = {f"tl_{n}": getattr(numba_rt, f"tl_{n}") for n in FUNCS}
    exec("\n".join(lines), ns)
    a = _special_args()
    out = np.zeros((len(rows), a["N"]))
    njit(error_model="numpy")(ns["run"])(a["x"], a["y"], out)
    for r, (name, ps) in enumerate(rows):
        arity = builtins.lookup(name).arity
        want = builtins.apply(name, [a["x"], a["y"], a["y"], a["x"]][:arity], ps)
        _same_bits(out[r], np.broadcast_to(want, out[r].shape), f"{name}{ps}")


def test_builtins_in_a_kernel():
    """The kernel calls each builtin with its constant parameters (plain-Python mode: the
    Numba builtins themselves are checked above)."""
    fn = tl.parse(BUILTINS_TL)["builtins"]
    args = _special_args()
    got = compile_program(fn.run_to("ssa"), jit=False)(args)
    assert_same(got, interpret(fn.core(), args))


def test_every_builtin_has_a_scalar_implementation():
    from tensorlang.semantics import builtins
    from tensorlang.backends.scalar_builtins import FUNCS
    assert set(FUNCS) == set(builtins.BUILTIN_FUNCS)
    rng = np.random.default_rng(0)
    for name, f in FUNCS.items():   # plain Python on ordinary values
        spec = builtins.lookup(name)
        for _ in range(20):
            xs = [float(rng.uniform(0.1, 3.0)) for _ in range(spec.arity)]
            ps = [1.5] * spec.nparams
            want = float(builtins.apply(name, [np.float64(x) for x in xs], ps))
            assert f(*xs, *ps) == pytest.approx(want, rel=1e-12, abs=1e-300), name


# ---------------------------------------------------------------------------------------------
# Examples: equivalence and the work done


@pytest.mark.parametrize("name", workload_params())   # SLOW_WORKLOADS: -m slow
def test_example_agrees_with_the_interpreter(name):
    w, p = example(name)
    c = compile_program(p, instrument=True)
    core = tssa.to_core(p)
    for n in (0, 1, 2, 7):
        args = w.inputs(w.sizes(n), np.random.default_rng(n))
        assert_same(c(args), interpret(core, args))
        assert set(c.last_counts) == set(c.module.TL_COUNTED)


# Programs whose work grows as N^3: measured at smaller N.
CUBIC = {"qform2": (5, 20, 60)}


# SLOW_WORKLOADS, and the five whose large calls compile a kernel of their own (the others
# run test_example_agrees_with_the_interpreter's), with -m slow (docs/decisions.md, "CI time").
COUNTED_SLOW = {"attention", "gnn", "imgarap", "matfac", "upsample_loss"}


@pytest.mark.parametrize("name", workload_params(slow_if=COUNTED_SLOW.__contains__))
def test_counted_iterations_track_the_cost_model(name):
    """The innermost iterations the kernel executes stay within a small constant factor of
    the SPEC 3 cost, for N = 10 .. 1000: the loop nests visit only the points where the
    masks hold (a dense loop over a sparse mask, or a loop that the solver should have
    removed, would fail the first bound or make the ratio grow with N)."""
    w, p = example(name)
    c = compile_program(p, instrument=True)
    core = tssa.to_core(p)
    ratios = []
    for n in CUBIC.get(name, (10, 100, 1000)):
        args = w.inputs(w.sizes(n), np.random.default_rng(n))
        c(args)
        count = sum(c.last_counts.values())
        cost = cost_def(core, args).total
        assert count <= 2 * cost + 16, (n, count, cost, c.last_counts)
        assert cost <= 10 * count + 16, (n, count, cost)   # nothing is left uncounted
        ratios.append(count / max(cost, 1))
    # The ratio does not grow with N (it would for a dense loop over a sparse mask).
    assert ratios[-1] <= 1.5 * ratios[0] + 0.05, ratios


def test_sparse_relation_loops_are_proportional_to_nnz():
    w, p = example("masked")
    c = compile_program(p, instrument=True)
    n = 400
    args = w.inputs(w.sizes(n), np.random.default_rng(3))
    args["E"] = np.zeros((n, n), dtype=bool)
    args["E"][np.arange(n), (np.arange(n) * 7 + 1) % n] = True   # n entries, off-diagonal
    assert_same(c(args), interpret(tssa.to_core(p), args))
    assert sum(c.last_counts.values()) == n                     # not n * n


# ---------------------------------------------------------------------------------------------
# A program exercising the loop-nest features in one compilation

FEATURES_TL = """
def features(N: size, M: size, K: size, E: rel(N, M), F: rel(M, N, K), A: R[N, M],
             B: R[M, K], X: R[M, N, K], x: R[N], y: R[M]) -> (R[N], (R[M], (R[N], (R[N, K], (R[N, K], (R[N], (R[N], (R[N], (R[N, M], (R, (R[M], (R, R[N, N])))))))))))):
    spmv[i:N] = sum j:M. [E(i, j)] * A[i, j] * y[j]
    spmvt[j:M] = sum i:N. [E(i, j)] * A[i, j] * x[i]
    r3[i:N] = sum j:M, k:K. [F(j, i, k)] * X[j, i, k]
    mm[i:N, k:K] = sum j:M. A[i, j] * B[j, k]
    tc[i:N, k:K] = sum j:M. 2.0 * X[j, i, k] * B[j, k] * [i < N]
    stride[i:N] = x[2 * i] + x[2 * i + 1]
    quot[k:N] = sum i:N. [2 * i == k] * x[i]
    shift[i:N] = x[i - 1] - x[i + 1] + [exists t:N. i == 3 * t] * x[i]
    had[i:N, j:M] = [E(i, j)] * A[i, j] * 2.0
    diag = sum i:N, j:M. [i == j] * A[i, j]
    kern[k:M] = sum i:N, j:M. [2 * i + 3 * j == k] * A[i, j]
    sq = sum i:M. y[i] * y[i]
    band[i:N, j:N] = [i == j or i == j + 1] * x[i] + [j == i + 2] * x[j]
    return (spmv, (spmvt, (r3, (mm, (tc, (stride, (quot, (shift, (had, (diag, (kern, (sq, band))))))))))))
"""

FEATURE_SIZES = [dict(N=0, M=0, K=0), dict(N=1, M=2, K=0), dict(N=5, M=4, K=3),
                 dict(N=7, M=9, K=2)]


# CI: the generated code in plain Python; compiled by Numba (one large kernel, 23 s) with
# -m slow; CI compiles these loops in test_relation_loops, test_relation_storage and
# test_index_array_kernels (docs/decisions.md, "CI time").
@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["python", "numba"])
def test_loop_nest_features_agree_with_the_interpreter(jit):
    fn = tl.parse(FEATURES_TL)["features"]
    c = compile_program(fn.run_to("ssa"), instrument=True, jit=jit)
    for sizes in FEATURE_SIZES:
        for enc in ("bool", "coo"):
            args = random_args(fn.core(), sizes, np.random.default_rng(1), rel_encoding=enc)
            assert_same(c(args), interpret(fn.core(), args))


def test_generated_code_shape():
    fn = tl.parse(FEATURES_TL)["features"]
    src = generated_source(fn.run_to("ssa"))
    assert "prange(" in src
    assert "tl_matmul(" in src                     # mm is a BLAS call
    assert "rp0_E[" in src and "rc0_E[" in src     # spmv walks CSR rows of E
    assert "% 2 == 0" in src                        # quot: i = k / 2 when 2 | k
    assert "_exists" in src                         # an exists is a flag loop
    _, conv = example("conv")
    csrc = generated_source(conv)
    assert "for i0 in range(_chunk_lo, _chunk_hi):" in csrc and "prange(_pk" in csrc
    assert "tl_matmul" not in csrc
    assert "v_x[i0 + j0]" in csrc                  # proved in range: no guard
    _, trace = example("trace_diag")
    tsrc = generated_source(trace)
    # one loop over j0 (a sum's innermost loop: as blocks, and term by term when short,
    # accumulate.block_loop)
    assert re.findall(r"for j0 in|j0 = tl_nonneg\(", tsrc) in (
        ["for j0 in"], ["j0 = tl_nonneg(", "for j0 in"])
    assert "for j1" not in tsrc and "for i" not in tsrc
    assert "v_x[j0]" in tsrc                        # the diagonal: one loop, no matrix


# ---------------------------------------------------------------------------------------------
# Random programs


def _check_random(d: ast.Def, args: dict[str, Any], jit: bool) -> None:
    p = to_program(d)
    c = compile_program(p, instrument=True, jit=jit)
    want = interpret(d, args)
    assert_same(c(args), want, atol=1e-9)
    assert_same(c(args), interpret(tssa.to_core(p), args), atol=1e-9)
    assert all(v >= 0 for v in c.last_counts.values())


@given(programs())
def test_random_programs_python_mode(case):
    """The code generator on the full CI budget of random programs (plain Python)."""
    _check_random(*case, jit=False)


def _check_nan_empty(d: ast.Def, args: dict[str, Any], monkeypatch: Any) -> None:
    p = to_program(d)
    want = interpret(d, args)
    c = compile_program(p, jit=False)
    with monkeypatch.context() as m:
        m.setattr(np, "empty", NanEmpty())
        got = c(args)
    assert_same(got, want, atol=1e-9)


@given(programs())
def test_random_programs_unfilled_storage_is_never_read(case):
    """Arrays allocated without a zero fill are only read where written (random programs,
    `np.empty` returning nan)."""
    with pytest.MonkeyPatch.context() as mp:
        _check_nan_empty(*case, mp)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_examples_unfilled_storage_is_never_read(name, monkeypatch):
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    for n in (1, 5):
        _check_nan_empty(d, w.inputs(w.sizes(n), np.random.default_rng(n)), monkeypatch)


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_numba(case):
    _check_random(*case, jit=True)


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(max_size=8))
def test_random_programs_numba_sweep(case):
    _check_random(*case, jit=True)


# ---------------------------------------------------------------------------------------------
# Derived functions (passes/derive.py)

derive = pytest.importorskip("tensorlang.passes.derive")
DERIVED_KINDS = ("vjp", "jvp", "hessian")


def _derived_cases() -> list[tuple[str, str]]:
    return [(name, kind) for name in sorted(WORKLOADS) for kind in DERIVED_KINDS]


def _derived(name: str, kind: str) -> tuple[Any, tssa.Program] | None:
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    real = [q.name for q in d.params if isinstance(ast.scalar_of(q.type), ast.TReal)]
    if kind == "hessian" and d.ret != ast.REAL:
        return None
    return w, derive.derive(to_program(d), kind,
                            tuple(real[:1]) if kind == "hessian" else tuple(real))


def _derived_args(w: Any, p: tssa.Program, n: int) -> dict[str, Any]:
    base = w.inputs(w.sizes(n), np.random.default_rng(n))
    core = tssa.to_core(p)
    sizes = {q.name: base[q.name] for q in core.params if isinstance(q.type, ast.TSize)}
    extra = random_args(core, sizes, np.random.default_rng(n + 100))
    return {q.name: base.get(q.name, extra[q.name]) for q in core.params}


def _check_derived(name: str, kind: str, jit: bool) -> None:
    case = _derived(name, kind)
    if case is None:
        pytest.skip(f"{kind} needs a real-valued function")
    w, p = case
    c = compile_program(p, jit=jit)
    for n in (0, 1, 4):
        args = _derived_args(w, p, n)
        want = interpret(tssa.to_core(p), args)
        assert_same(c(args), want)
        if not jit:             # unfilled storage (np.empty) is never read
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(np, "empty", NanEmpty())
                got = c(args)
            assert_same(got, want)


@pytest.mark.parametrize("name,kind", workload_params(_derived_cases()))   # SLOW_WORKLOADS
def test_derived_examples_python_mode(name, kind):
    _check_derived(name, kind, jit=False)


@pytest.mark.parametrize("name,kind", [("qform", "hessian"), ("conv", "vjp"),
                                       ("masked", "vjp"), ("logreg", "jvp")])
def test_derived_examples_numba(name, kind):
    _check_derived(name, kind, jit=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,kind", _derived_cases())
def test_derived_examples_numba_sweep(name, kind):
    _check_derived(name, kind, jit=True)


@pytest.mark.slow
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(differentiable_programs(), st.sampled_from(["jvp", "vjp"]))
def test_derived_random_programs_python_mode(case, kind):
    p, core, a = derived_random_case(case, kind)
    assert_same(compile_program(p, jit=False)(a), interpret(core, a), atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Calling convention


def test_arguments_results_and_errors():
    fn = tl.parse(textwrap.dedent("""
        def f(N: size, x: R[N], s: R, p: ([N] (R, R))) -> (R[N], (R[N], (R, R[N]))):
            return (x, (x, (s * s, gen i:N. p[i].0 * p[i].1)))
        """))["f"]
    c = compile_program(fn.run_to("ssa"), jit=False)
    x = np.arange(3.0)
    args = {"N": 3, "x": x, "s": 2.0, "p": (np.ones(3), np.full(3, 2.0))}
    got = c(args)
    assert_same(got, interpret(fn.core(), args))
    assert got[0] is not x and got[0] is not got[1][0]      # results never alias
    assert_same(c(**args), got)
    with pytest.raises(ShapeError):
        c({"N": 4, "x": x, "s": 2.0, "p": (np.ones(3), np.ones(3))})
    with pytest.raises(TLError):
        c({"N": 3, "x": x})


def test_identifiers_in_generated_code_are_generated():
    """Names that are not plain identifiers (possible through the AST or DSL) never reach
    the code: the kernel still runs, and every name token of the source is one of ours."""
    bad = "x; import os\nos.system('echo pwned')"
    b = Builder([ast.Param("N", ast.TSize()), ast.Param(bad, ast.tensor([ast.Affine.var("N")])),
                      ast.Param("E r", ast.TRel((ast.Affine.var("N"), ast.Affine.var("N"))))])
    xv = b.input(bad)
    i, j = "i", "j"
    v = b.reduce([(i, "N")], [(j, "N")], (xv, [j]),
                 pred=ast.RelCall("E r", (ast.Affine.var(i), ast.Affine.var(j))))
    p = b.program(v, name="g(h)", ret=ast.tensor([ast.Affine.var("N")]))
    src = generated_source(p)
    names = {t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
             if t.type == tokenize.NAME}
    assert not any("pwned" in n or n == "os" for n in names)
    for line in src.splitlines():
        code = line.split("#", 1)[0]
        assert "pwned" not in code or code.lstrip().startswith("TL_ARGS")
    mask = np.random.default_rng(0).random((4, 4)) < 0.5
    args = {"N": 4, bad: np.arange(4.0), "E r": mask}
    want = interpret(tssa.to_core(p), args)
    assert_same(compile_program(p, jit=False)(args), want)


# ---------------------------------------------------------------------------------------------
# The disk cache: a second process loads the kernel instead of compiling it

_CACHE_SCRIPT = """
import json, sys
import numpy as np
import tensorlang as tl
from tensorlang.backends.numba_cpu import compile_program
fn = tl.load(sys.argv[1])["masked"]
c = compile_program(fn.run_to("ssa"))
rng = np.random.default_rng(0)
n = 3000
args = {"N": n, "E": rng.random((n, n)) < 0.3, "A": rng.uniform(-1, 1, (n, n))}
out = c(args)
print(json.dumps({"stats": c.cache_stats(), "value": float(out).hex(),
                  "path": str(c.path)}))
"""


def test_kernel_cache_is_shared_between_processes(tmp_path):
    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT))

    def run(threads: int) -> dict:
        import json
        proc = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT,
                               str(EXAMPLES / "masked.tl")],
                              env=dict(env, NUMBA_NUM_THREADS=str(threads)),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run(2)
    second = run(1)
    assert first["stats"] == {"hits": 0, "misses": 1}
    assert second["stats"] == {"hits": 1, "misses": 0}     # loaded, not compiled
    assert first["path"] == second["path"] and first["path"].startswith(str(tmp_path))
    folder = tmp_path / "cache" / "kernels" / "numba_cpu"
    assert first["path"].startswith(str(folder))
    assert pathlib.Path(first["path"]).with_suffix(".meta.json").exists()
    # The chunked parallel reduction does not depend on the number of threads.
    assert first["value"] == second["value"]


def test_cache_key_follows_the_program_text():
    _, p = example("qform")
    _, q = example("qform2")
    a = compile_program(p)
    assert compile_program(p) is a                 # in-process memo
    assert compile_program(q).key != a.key
    assert compile_program(p, instrument=True).key != a.key
    assert a.path is not None
    hash_line, rest = a.path.read_text().split("\n", 1)
    assert hash_line.startswith("# tensorlang-sha256: ")       # checked before each import
    assert rest.startswith("# Generated by tensorlang") and rest == a.source


def test_cache_dir_falls_back_when_not_writable(tmp_path, monkeypatch):
    from tensorlang import cache
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(cache.CacheWarning, match="private temporary cache"):
        root = cache.root()
    assert root.is_dir() and not str(root).startswith(str(blocker))
    assert oct(root.stat().st_mode & 0o777) == oct(0o700)
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.root() == tmp_path / "mine"


# ---------------------------------------------------------------------------------------------
# Threads (issue 14): the parallel grain and BLAS's threads


@given(programs())
def test_cost_bound_bounds_the_exact_cost(case):
    """The engine choice's bound from the sizes alone ("auto" runs a call under it on the
    image without building relation masks) is at least the exact SPEC 3 cost, whatever the
    relations hold (random programs; relations full as well as random)."""
    d, args = case
    p = to_program(d)
    sizes = {q.name: int(args[q.name]) for q in p.params if isinstance(q.type, ast.TSize)}
    bound = numba_cpu.cost_bound(p, sizes)
    assert bound >= cost_program(p, args).total
    full = {**args, **{q.name: np.ones(tuple(int(a.evaluate(sizes)) for a in q.type.sizes),
                                       dtype=bool)
                       for q in p.params if isinstance(q.type, ast.TRel)}}
    assert bound >= cost_program(p, full).total


def test_thread_policy_follows_the_work():
    from tensorlang.backends import numba_rt

    grain = numba_rt.PARALLEL_GRAIN
    assert numba_rt.threads_for(0) == 1 and numba_rt.threads_for(2 * grain - 1) == 1
    assert numba_rt.threads_for(100 * grain) == numba_rt.most_threads()
    _, p = example("qform")
    assert numba_cpu.kernel_work(p, {"N": 10}) == 10 * 10 + 10     # gemv, then a dot
    blas = numba_rt.blas_threads()
    if blas is not None:                 # BLAS's own count is back after a kernel
        _, default = blas
        with numba_rt.BlasThreads(1):
            pass
        assert numba_rt.blas_threads()[1] == default


def test_results_do_not_depend_on_the_threads():
    """A kernel over the grain runs on several threads, below it on one: the same bits."""
    from tensorlang.backends import numba_rt

    fn = tl.parse("def s(N: size, x: R[N]) -> R:\n    return sum i:N. x[i] * x[i]\n")["s"]
    c = compile_program(fn.final_program())
    x = np.random.default_rng(0).standard_normal(2 * numba_rt.PARALLEL_GRAIN + 7)
    big = c({"N": len(x), "x": x})
    assert [kind for kind, _ in c.module.TL_ARGS] == ["size", "input", "consts"]
    numba_rt.use_threads(1)
    one = c.kernel(len(x), x, c.constants)[0]
    assert big == one and big == pytest.approx(float(x @ x), rel=1e-12)
