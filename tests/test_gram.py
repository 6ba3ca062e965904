"""Weighted Gram products `X^T diag(d) X` (backends/gram.py, numba_rt.tl_gram): the rewrite
that factors row scalings out of a contraction's operands keeps the program's meaning (on
random programs, in the interpreter), lands in the form the code generator runs as syrk
exactly when both operands are one base scaled by rows, and the kernels agree with the
interpreter on the JIT engine (syrk), in plain Python and on the AOT engine (loops)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, assert_same, slow_params
from tensorlang import api
from tensorlang.backends import gram
from tensorlang.backends.codegen import plan_program
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret
from tensorlang.testing import weighted_gram_programs

numba = pytest.importorskip("numba")
numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")


def _grams(p: tssa.Program) -> list[str]:
    return [s.var for s in plan_program(p).stmts if s.gram is not None]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * scale)


@given(weighted_gram_programs())
def test_factoring_keeps_the_meaning_and_finds_every_weighted_gram(case):
    p, args, expected = case
    q = gram.factor_row_scalings(p)
    want = interpret(tssa.to_core(p), args)
    _close(interpret(tssa.to_core(q), args), want)
    forms = [s.gram for s in plan_program(p).stmts if s.gram is not None]
    assert bool(forms) == expected, (str(p), str(q))
    if expected:   # the operands' own statements are gone: only the base and w are N x K
        (g,) = forms
        assert {s.var for s in q.stmts if len(q.shapes[s.var]) == 2 and
                s.var not in q.output_vars() and not isinstance(s.rhs, tssa.Input)} <= \
            {g.base.var, g.scaled}, str(q)
    assert_same(numba_cpu.compile_program(p, jit=False)(args), want, atol=1e-9)


@given(weighted_gram_programs(rows=(0, 2, 40)))
def test_rewrite_is_idempotent(case):
    q = gram.factor_row_scalings(case.program)
    assert gram.factor_row_scalings(q) is q


# -- tl_gram against numpy ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tl_gram():
    from tensorlang.backends import numba_rt
    return numba_rt.tl_gram


@pytest.mark.parametrize("n, k", [(1, 1), (3, 31), (3, 32), (40, 33), (65, 200), (7, 500)])
@pytest.mark.parametrize("signs", ["positive", "negative", "mixed", "zeros"])
def test_tl_gram_agrees_with_numpy_in_every_layout(tl_gram, n, k, signs):
    rng = np.random.default_rng(n * 1000 + k)
    d = {"positive": rng.random(k) + 0.1, "negative": -rng.random(k) - 0.1,
         "mixed": rng.standard_normal(k), "zeros": np.where(rng.random(k) < 0.5, 0.0,
                                                             rng.standard_normal(k))}[signs]
    x = rng.standard_normal((n, k))
    want = (x * d) @ x.T
    for a in (x, np.asfortranarray(x), np.ascontiguousarray(x.T).T):
        c = tl_gram(a, d)
        assert c.shape == (n, n) and c.flags.c_contiguous
        assert np.array_equal(c, c.T)
        np.testing.assert_allclose(c, want, rtol=1e-10, atol=1e-12 * k)


def test_tl_gram_spreads_nan_like_the_product(tl_gram):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 40))
    d = rng.standard_normal(40)
    d[7] = np.nan
    assert np.isnan(tl_gram(x, d)).all()


# -- compiled kernels -------------------------------------------------------------------------

WGRAM = """
def wgram(N: size, K: size, X: R[K, N], d: R[K]) -> R[N, N]:
    G[i:N, j:N] = sum k:K. X[k, i] * X[k, j] * d[k]
    return G

def wgram_t(N: size, K: size, X: R[N, K], d: R[K], e: R[K]) -> R[N, N]:
    A[i:N, k:K] = X[i, k] * exp(d[k])
    B[i:N, k:K] = X[i, k] * e[k] - 2.0 * X[i, k]
    G[i:N, j:N] = sum k:K. A[i, k] * B[j, k]
    return G

def wgram4(N: size, L: size, K: size, X: R[K, N, L], d: R[K]) -> R[N, N, L, L]:
    G[a:N, c:N, b:L, e:L] = sum k:K. X[k, a, b] * X[k, c, e] * exp(d[k])
    return G
"""


# CI: every program on the AOT engine, wgram and wgram_t on the JIT too; wgram4 on the JIT
# (a third of the file's time, compiling) with -m slow (docs/decisions.md, "CI time").
@pytest.mark.parametrize("engine,name", slow_params(
    [(engine, name) for engine in ("jit", "aot") for name in ("wgram", "wgram_t", "wgram4")],
    lambda c: c == ("jit", "wgram4")))
def test_weighted_gram_kernels_agree_with_the_interpreter(name, engine):
    """User-written weighted Gram products (the base in either layout, a sum of scaled
    terms, two output axes per side in interleaved order) run as `tl_gram`."""
    f = tl.parse(WGRAM)[name]
    p = api.final_program(f)
    run = numba_cpu.compile_program(p, engine=engine)
    assert "tl_gram(" in run.source and "tl_matmul(" not in run.source
    rng = np.random.default_rng(7)
    for n, k in [(3, 40), (20, 64), (2, 5), (0, 3), (3, 0)]:
        shape = {"wgram": (k, n), "wgram_t": (n, k), "wgram4": (k, n, 2)}[name]
        args = {"X": rng.standard_normal(shape), "d": rng.standard_normal(k),
                "e": rng.standard_normal(k)}
        args = {q.name: args[q.name] for q in f.params if q.name in args}
        got = run(dict(args, N=n, K=k, **({"L": 2} if name == "wgram4" else {})))
        assert run.last_engine == engine
        _close(got, f.interpret(**args))


def test_logistic_hessian_is_one_syrk_without_n_by_m_temporaries():
    """The issue-14 workload: `X^T diag(s (1 - s)) X` from hessian(logreg) runs as one
    `tl_gram` call; no N x M array is allocated (main had three, and gemm)."""
    fn = tl.load(str(EXAMPLES / "logreg.tl"))["logreg_hess"]
    run = numba_cpu.compile_program(fn.final_program(), engine="jit")
    src = run.source
    assert src.count("tl_gram(") == 1 and "tl_matmul(v_X.reshape" in src
    kernel = src[src.index("def tl_kernel"):]
    assert "np.empty((max(0, n_N), max(0, n_M)))" not in kernel
    assert "np.empty((max(0, n_M), max(0, n_N)))" not in kernel
    rng = np.random.default_rng(2)
    for m, n in [(50, 40), (7, 3)]:
        args = {"X": rng.standard_normal((m, n)), "y": rng.choice([-1.0, 1.0], m),
                "w": 0.3 * rng.standard_normal(n)}
        _close(run(dict(args, M=m, N=n)), fn.interpret(**args))


def test_no_gram_when_one_side_reads_the_base_cropped():
    """`w[m, b] = X[m, b] * d[m]` over b < N - 1 against X[m, a] over a < N: not one base
    read the same way up to renaming, so not a Gram product (and the result is right)."""
    from tensorlang.ir import ast
    from tensorlang.ir.build import Builder

    n, k = ast.Affine.var("N"), ast.Affine.var("K")
    b = Builder([ast.Param("N", ast.TSize()), ast.Param("K", ast.TSize()),
                 ast.Param("X", ast.tensor([k, n])), ast.Param("d", ast.tensor([k]))])
    x, d = b.input("X"), b.input("d")
    w = b.contract([("m", k), ("b", n - 1)], [], (x, ["m", "b"]), (d, ["m"]))
    v = b.contract([("a", n), ("b", n - 1)], [("m", k)], (x, ["m", "a"]), (w, ["m", "b"]))
    p = b.program(v)
    assert gram.factor_row_scalings(p) is p and not _grams(p)
    rng = np.random.default_rng(0)
    args = {"N": 4, "K": 40, "X": rng.standard_normal((40, 4)), "d": rng.standard_normal(40)}
    _close(numba_cpu.compile_program(p, jit=False)(args), interpret(tssa.to_core(p), args))


def test_shared_terms_are_followed_once():
    """`v_{k+1} = v_k + 0.5 a v_k`, 30 times: the row factor is a DAG of 2^30 paths; the
    rewrite follows and emits each statement once (linear, not exponential)."""
    from tensorlang.ir import ast
    from tensorlang.ir.build import Builder

    n, k = ast.Affine.var("N"), ast.Affine.var("K")
    b = Builder([ast.Param("N", ast.TSize()), ast.Param("K", ast.TSize()),
                 ast.Param("X", ast.tensor([n, k])), ast.Param("a", ast.tensor([k]))])
    x, a = b.input("X"), b.input("a")
    v = x
    for _ in range(30):
        w = b.contract([("n", n), ("k", k)], [], (v, ["n", "k"]), (a, ["k"]), coeff=0.5)
        v = b.add([("n", n), ("k", k)], (v, ["n", "k"]), (w, ["n", "k"]))
    p = b.program(b.contract([("p", n), ("q", n)], [("s", k)], (x, ["p", "s"]),
                             (v, ["q", "s"])))
    q = gram.factor_row_scalings(p)
    assert _grams(p) and len(q.stmts) < 2 * len(p.stmts)
    rng = np.random.default_rng(0)
    args = {"N": 3, "K": 4, "X": rng.standard_normal((3, 4)), "a": rng.random(4)}
    _close(interpret(tssa.to_core(q), args), interpret(tssa.to_core(p), args))
