"""Linear-algebra boxes (SPEC 13): every example's value, gradient, jvp and Hessian-vector
product against JAX (jax.scipy.linalg / jnp.linalg) to rtol 1e-8, on the interpreter and
Numba, at several sizes; finite differences; errors that say what failed."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.semantics import boxes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from numpy_ref import LINALG_WORKLOADS  # noqa: E402

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402

EX = Path(__file__).resolve().parents[1] / "examples"
HL2P = 0.9189385332046727


def _chol_terms(S, v):
    L = jnp.linalg.cholesky(S)
    z = jsl.solve_triangular(L, v, lower=True)
    return 0.5 * z @ z + jnp.log(jnp.abs(jnp.diag(L))).sum() + v.shape[0] * HL2P


def jax_gp(X, y, ell, sf2, sn2):
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = sf2 * jnp.exp(-0.5 * d2 / (ell * ell)) + sn2 * jnp.eye(X.shape[0])
    return _chol_terms(K, y)


def _blr(L, X, y, lam_y, alpha):
    z = jsl.solve_triangular(L, X @ y, lower=True)
    n = y.shape[0]
    return (jnp.log(jnp.abs(jnp.diag(L))).sum()
            + 0.5 * (n * (2 * HL2P + jnp.log(lam_y)) + (y @ y - alpha * z @ z) / lam_y))


def jax_blr_chol(X, y, lam_y, lam_w):
    alpha = lam_w / lam_y
    L = jnp.linalg.cholesky(jnp.eye(X.shape[0]) + alpha * X @ X.T)
    return _blr(L, X, y, lam_y, alpha)


def jax_blr_lq(X, y, lam_y, lam_w):
    alpha = lam_w / lam_y
    B = jnp.concatenate([jnp.eye(X.shape[0]), jnp.sqrt(alpha) * X], axis=1)
    _, r = jnp.linalg.qr(B.T)
    return _blr(r.T, X, y, lam_y, alpha)


def jax_kalman(v, a, q, r, p0):
    T = v.shape[0]
    D = jnp.eye(T) - a * jnp.eye(T, k=-1)
    sd = jnp.where(jnp.arange(T) == 0, jnp.sqrt(p0), jnp.sqrt(q))
    G = jsl.solve_triangular(D, jnp.diag(sd), lower=True)
    return _chol_terms(G @ G.T + r * jnp.eye(T), v)


def jax_eigh(A, y):
    w, V = jnp.linalg.eigh(A)
    u = V.T @ y
    return 0.5 * (jnp.log(w).sum() + (u * u / w).sum()) + w.shape[0] * HL2P


# name -> (JAX function, its argument names, the differentiated ones)
CASES = {
    "gp_nlml": (jax_gp, ("X", "y", "ell", "sf2", "sn2"), ("ell", "sf2", "sn2")),
    "blr_chol": (jax_blr_chol, ("X", "y", "lam_y", "lam_w"), ("lam_y", "lam_w")),
    "blr_lq": (jax_blr_lq, ("X", "y", "lam_y", "lam_w"), ("lam_y", "lam_w")),
    "kalman_nll": (jax_kalman, ("obs", "a", "q", "r", "p0"), ("a", "q", "r")),
    "eigh_nll": (jax_eigh, ("A", "y"), ("A",)),
}
RTOL = 1e-8


def _close(a, b, rtol=RTOL):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(1.0, float(np.max(np.abs(b))))
    assert np.max(np.abs(a - b)) <= rtol * scale, (a, b)


def _leaves(v):
    """The components of a right-nested tuple (n-tuples nest to the right)."""
    if isinstance(v, tuple):
        return [v[0]] + _leaves(v[1])
    return [v]


def _setup(name, n, seed=0):
    w = LINALG_WORKLOADS[name]
    args = w.inputs(w.sizes(n), np.random.default_rng(seed + n))
    fn, names, wrt = CASES[name]
    f = tl.load(str(EX / w.file))[w.func]
    return w, f, args, fn, names, wrt


def _jax_args(args, names):
    return [jnp.asarray(args[k]) for k in names]


# CI: every example on the interpreter at n = 3; n = 7 (as much time again: the derivatives
# interpreted and JAX compiled at a new shape) with -m slow (docs/decisions.md, "CI time").
@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("n", [3, pytest.param(7, marks=pytest.mark.slow)])
def test_value_gradient_jvp_hvp_match_jax(name, n, backend):
    w, f, args, fn, names, wrt = _setup(name, n)
    jargs = _jax_args(args, names)
    pos = [names.index(x) for x in wrt]
    run = (lambda g: g.interpret) if backend == "interp" else (lambda g: g.compile("numba"))
    # value (and the numpy reference)
    _close(run(f)(**args), fn(*jargs))
    _close(run(f)(**args), w.ref(args))
    # gradient
    g = run(tl.grad(f, *wrt))(**args)
    gj = jax.grad(fn, argnums=tuple(pos))(*jargs)
    for mine, ref in zip(_leaves(g), gj):
        _close(mine, ref)
    # jvp with random tangents
    rng = np.random.default_rng(n)
    tans = {x: rng.standard_normal(np.shape(args[x])) for x in wrt}
    if name == "eigh_nll":
        tans["A"] = tans["A"] + tans["A"].T
    y, dy = run(tl.jvp(f, *wrt))(**args, **{f"d_{x}": t for x, t in tans.items()})
    jt = [jnp.asarray(tans[k]) if k in tans else jnp.zeros_like(a) for k, a in zip(names, jargs)]
    yj, dyj = jax.jvp(fn, tuple(jargs), tuple(jt))
    _close(y, yj)
    _close(dy, dyj)
    # Hessian-vector product (forward over reverse) in the first differentiated input
    x0 = wrt[0]
    v = tans[x0]
    hv = run(tl.hvp(f, x0))(**args, v=v)
    gfun = jax.grad(fn, argnums=pos[0])
    vt = [jnp.asarray(v) if k == x0 else jnp.zeros_like(a) for k, a in zip(names, jargs)]
    _, hvj = jax.jvp(gfun, tuple(jargs), tuple(vt))
    _close(hv, hvj, rtol=1e-7 if name == "eigh_nll" else RTOL)


def test_numba_value_and_gradient_of_gp():
    """Numba runs LAPACK between kernels (backends/box_stages.py); the full comparison of
    every example on Numba is the slow-marked case above (Numba compile time)."""
    w, f, args, fn, names, wrt = _setup("gp_nlml", 4)
    jargs = _jax_args(args, names)
    _close(f.compile("numba")(**args), fn(*jargs))
    gj = jax.grad(fn, argnums=tuple(names.index(x) for x in wrt))(*jargs)
    for mine, ref in zip(_leaves(tl.grad(f, *wrt).compile("numba")(**args)), gj):
        _close(mine, ref)


@pytest.mark.parametrize("fn", ["cholesky", "trisolve", "trisolve_t", "cholesky_inverse",
                                "lq", "eigh"])
def test_box_rules_against_finite_differences_and_dot_product(fn):
    """jvp vs central differences, and <vjp(dy), dx> == <dy, jvp(dx)>, for each box."""
    src = {
        "cholesky": "def f(N: size, A: R[N, N]) -> R[N, N]:\n    return cholesky(A)\n",
        "cholesky_inverse": "def f(N: size, A: R[N, N]) -> R[N, N]:\n"
                            "    return cholesky_inverse(cholesky(A))\n",
        "trisolve": "def f(N: size, M: size, A: R[N, N], B: R[N, M]) -> R[N, M]:\n"
                    "    return trisolve(cholesky(A), B)\n",
        "trisolve_t": "def f(N: size, M: size, A: R[N, N], B: R[N, M]) -> R[N, M]:\n"
                      "    return trisolve_t(cholesky(A), B)\n",
        "lq": "def f(N: size, M: size, B: R[N, M]) -> (R[N, N], R[N, M]):\n    return lq(B)\n",
        "eigh": "def f(N: size, A: R[N, N]) -> (R[N], R[N, N]):\n    return eigh(A)\n",
    }[fn]
    f = tl.parse(src).f
    rng = np.random.default_rng(3)
    n, m = 4, 6
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = (Q * np.array([1.0, 1.7, 2.6, 3.9])) @ Q.T
    args = {"A": A, "B": rng.standard_normal((n, m))}
    params = [p for p in ("A", "B") if p in src.split(")")[0]]
    args = {k: v for k, v in args.items() if k in params}
    tan = {}
    for k in params:
        t = rng.standard_normal(args[k].shape)
        tan[k] = t + t.T if (k == "A") else t
    y, dy = tl.jvp(f, *params).interpret(**args, **{f"d_{k}": t for k, t in tan.items()})
    h = 1e-6
    plus = f.interpret(**{k: args[k] + h * tan[k] for k in params})
    minus = f.interpret(**{k: args[k] - h * tan[k] for k in params})
    flat = lambda v: np.concatenate([np.ravel(x) for x in (v if isinstance(v, tuple) else (v,))])  # noqa: E731
    fd = (flat(plus) - flat(minus)) / (2 * h)
    assert np.allclose(flat(dy), fd, rtol=1e-5, atol=1e-6)
    cot = tuple(rng.standard_normal(np.shape(x)) for x in (y if isinstance(y, tuple) else (y,)))
    out = tl.vjp(f, *params).interpret(**args, d_y=cot if isinstance(y, tuple) else cot[0])
    grads = out[1:] if len(params) > 1 else (out[1],)
    grads = grads[0] if len(params) > 1 and isinstance(grads[0], tuple) else grads
    lhs = sum(float(np.vdot(g, tan[k])) for g, k in zip(grads, params))
    rhs = float(np.vdot(flat(cot), flat(dy)))
    assert abs(lhs - rhs) <= 1e-8 * max(1.0, abs(rhs))


def test_not_positive_definite_names_the_matrix_and_the_pivot():
    f = tl.load(str(EX / "linalg" / "gp_nlml.tl")).gp_nlml
    args = LINALG_WORKLOADS["gp_nlml"].inputs({"N": 5, "D": 3}, np.random.default_rng(0))
    args["sn2"] = -5.0
    for run in (f.interpret, f.compile("numba")):
        with pytest.raises(boxes.BoxError, match=r"cholesky\(K\).*not positive definite: pivot 0"):
            run(**args)


def test_singular_triangular_solve_says_so():
    f = tl.parse("def f(N: size, L: R[N, N], b: R[N]) -> R[N]:\n    return trisolve(L, b)\n").f
    L = np.tril(np.ones((3, 3)))
    L[1, 1] = 0.0
    with pytest.raises(boxes.BoxError, match=r"singular.*\[1, 1\] is 0"):
        f.interpret(L=L, b=np.ones(3))


def test_nan_input_is_an_error_not_a_nan():
    f = tl.parse("def f(N: size, A: R[N, N]) -> R[N, N]:\n    return cholesky(A)\n").f
    A = np.eye(3)
    A[0, 1] = np.nan
    with pytest.raises(boxes.BoxError, match="NaN"):
        f.interpret(A=A)


def test_box_under_gen_is_rejected_with_location():
    with pytest.raises(tl.TLError, match="whole matrices"):
        tl.parse("def f(N: size, A: R[N, N]) -> R[N]:\n"
                 "    return gen i:N. cholesky(A)[i, i]\n")


def test_batched_cholesky_and_solve():
    f = tl.parse("def f(B: size, N: size, A: R[B, N, N], y: R[B, N]) -> R[B, N]:\n"
                 "    return trisolve(cholesky(A), y)\n").f
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 4, 4))
    A = X @ X.transpose(0, 2, 1) + 4 * np.eye(4)
    y = rng.standard_normal((2, 4))
    want = np.stack([np.linalg.solve(np.linalg.cholesky(A[b]), y[b]) for b in range(2)])
    assert np.allclose(f.interpret(A=A, y=y), want)
    assert np.allclose(f.compile("numba")(A=A, y=y), want)


def test_prelude_is_in_scope_and_shadowable():
    m = tl.parse("def g(N: size, A: R[N, N]) -> R:\n    return logdet(A)\n")
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    assert np.isclose(m.g.interpret(A=A), np.log(np.linalg.det(A)))
    m2 = tl.parse("def sqnorm(N: size, x: R[N]) -> R:\n    return sum i:N. x[i]\n"
                  "def h(N: size, x: R[N]) -> R:\n    return sqnorm(x)\n")
    assert np.isclose(m2.h.interpret(x=np.array([1.0, 2.0])), 3.0)


def test_cost_entries():
    f = tl.parse("def f(N: size, A: R[N, N]) -> R[N, N]:\n    return cholesky(A)\n").f
    c = f.cost(N=12)
    assert (c.adds, c.muls, c.calls) == boxes.box_cost("cholesky", 0, [(12, 12)])
    assert boxes.box_cost("trisolve", 0, [(10, 10), (10, 4)]) == (200, 200, 40)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_backend_value_and_gradient(name):
    w, f, args, fn, names, wrt = _setup(name, 5)
    _close(f.compile("jax")(**args), f.interpret(**args))
    g = tl.grad(f, *wrt)
    for mine, ref in zip(_leaves(g.compile("jax")(**args)), _leaves(g.interpret(**args))):
        _close(mine, ref)


def test_cuda_backend_says_boxes_are_not_there():
    """Checked before anything touches a GPU (so also without one, and under
    NUMBA_ENABLE_CUDASIM=1)."""
    from tensorlang.backends import numba_cuda

    f = tl.load(str(EX / "linalg" / "gp_nlml.tl")).gp_nlml
    with pytest.raises(tl.TLError, match="CUDA backend has no linear-algebra boxes yet "
                                         r"\(cholesky, trisolve"):
        numba_cuda.compile_program(f.final_program())


def test_product_read_only_on_a_band_is_fused_not_a_blas_call():
    """A dense product of a box's output stays one BLAS call when it is needed in full; read
    only on its diagonal (through a masked copy too), the simplifier fuses it into the
    reader: n^2 operations, not n^3 (kalman's gradient reads `G Y^T` on its subdiagonal)."""
    from passes.simplify import box_split
    from tensorlang.ir.tssa import ContractRhs

    src = ("def diag(N: size, A: R[N, N], B: R[N, N]) -> R:\n"
           "    L = cholesky(A)\n"
           "    P[i:N, j:N] = sum k:N. L[i, k] * B[j, k]\n"
           "    Q[i:N, j:N] = [j <= i] * P[i, j]\n"
           "    return sum i:N. [i >= 1] * Q[i, i - 1]\n"
           "def full(N: size, A: R[N, N], B: R[N, N]) -> R[N, N]:\n"
           "    L = cholesky(A)\n"
           "    P[i:N, j:N] = sum k:N. L[i, k] * B[j, k]\n"
           "    return P\n")
    m = tl.parse(src)
    derived = {name: m[name].run_to("derive") for name in ("diag", "full")}
    products = {name: [s.var for s in p.stmts if isinstance(s.rhs, ContractRhs) and s.rhs.sdims
                       and len(s.rhs.dims) == 2] for name, p in derived.items()}
    assert products["diag"] and products["full"]
    assert not set(products["diag"]) & box_split.opaque(derived["diag"])
    assert set(products["full"]) <= box_split.opaque(derived["full"])
    final = api_final(m["diag"])
    assert not any(isinstance(s.rhs, ContractRhs) and len(s.rhs.dims) == 2 for s in final.stmts)
    A = np.eye(4) * 2 + 0.1
    B = np.arange(16.0).reshape(4, 4)
    np.testing.assert_allclose(m["diag"].compile("numba")(A=A, B=B),
                               m["diag"].interpret(A=A, B=B), rtol=1e-12)


def test_product_with_a_diagonal_or_outer_product_is_not_a_blas_call():
    """V diag(d) and V^T (x y^T) (eigh's adjoint) are n^2 work: left to the e-graph."""
    from passes.simplify import box_split
    from tensorlang.ir.tssa import ContractRhs

    src = ("def f(N: size, A: R[N, N], d: R[N], x: R[N]) -> R[N, N]:\n"
           "    V = eigh(A).1\n"
           "    Dg[i:N, j:N] = [i == j] * d[i]\n"
           "    O[i:N, j:N] = x[i] * d[j]\n"
           "    P[i:N, j:N] = sum k:N. V[i, k] * Dg[k, j]\n"
           "    Q[i:N, j:N] = sum k:N. V[k, i] * O[k, j]\n"
           "    return P + Q\n")
    f = tl.parse(src)["f"]
    derived = f.run_to("derive")
    products = [s.var for s in derived.stmts if isinstance(s.rhs, ContractRhs) and s.rhs.sdims]
    assert len(products) == 2 and not set(products) & box_split.opaque(derived)
    final = api_final(f)
    rng = np.random.default_rng(0)
    A, d, x = rng.standard_normal((5, 5)), rng.standard_normal(5), rng.standard_normal(5)
    assert not any(isinstance(s.rhs, ContractRhs) and len(s.rhs.dims) == 2
                   and len(s.rhs.sdims) == 1 and isinstance(s.rhs.pred, ast_true())
                   for s in final.stmts)
    np.testing.assert_allclose(f.compile("numba")(A=A, d=d, x=x), f.interpret(A=A, d=d, x=x),
                               rtol=1e-10, atol=1e-12)


def ast_true():
    from tensorlang.ir import ast

    return ast.PTrue


def api_final(fn):
    from tensorlang import api

    return api.final_program(fn)
