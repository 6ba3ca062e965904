"""The Python builder API (`tensorlang.dsl`) for the language extensions of SPEC 12: max/min
reductions, `where` with comparisons of values, real powers, tensor literals, quasi-affine
indices (`//`, `%`) and index arrays (`Z[...]`).

Each DSL-built def is the def the parser makes of the same `.tl` text (the same hash-consed
nodes, hence the same core program after elaboration); its values agree with numpy; its
gradients agree with numpy references and finite differences; misuse is a `DSLError` with a
clear message."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tensorlang as tl
import test_language_ext as language_ext
from examples_util import EXAMPLES
from tensorlang import dsl
from tensorlang.dsl import DSLError
from tensorlang.ir import ast
from tensorlang.syntax.parser import parse_module


def assert_same_program(built: ast.Def, source: str, earlier: list[ast.Def] = ()) -> None:
    """`built` is the parser's def of the same name in `source` (node for node), and both
    elaborate to the same core program."""
    parsed = {d.name: d for d in parse_module(source)}[built.name]
    assert built is parsed, f"\nDSL:    {built.body}\nparser: {parsed.body}"
    module = tl.parse(source)
    assert tl.from_def(built, earlier).core() == module[built.name].core()


def finite_difference(f: Callable[[np.ndarray], float], x: np.ndarray,
                      h: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        out[k] = (f(x + e) - f(x - e)) / (2 * h)
    return out


# -- the defs of SPEC 12 part A (tests/test_language_ext.py) -----------------------------------

PART_A = language_ext.SRC + """
def nested(a: R) -> R[2, 2]:
    return [[a, 1], [2.5, a * a]]

def unequal(N: size, M: size, x: R[N], E: rel(N, M)) -> R[N]:
    return gen i:N. where(x[i] != 1.0 or i >= 1 and not E(i, 0), x[i], 2 ** x[i])
"""


def build_part_a() -> dict[str, ast.Def]:
    N, M = dsl.sizes("N M")
    A = dsl.param("A", dsl.R[N, M])
    x, y = dsl.param("x", dsl.R[N]), dsl.param("y", dsl.R[N])
    a = dsl.param("a", dsl.R)
    out = {}
    out["rowmax"] = dsl.function("rowmax", [N, M, A],
                                 dsl.gen(N, lambda i: dsl.max(M, lambda j: A[i, j])),
                                 ret=dsl.R[N])
    out["rowmin_loss"] = dsl.function(
        "rowmin_loss", [N, M, A],
        dsl.sum(N, lambda i: dsl.square(dsl.min(M, lambda j: A[i, j] * 2.0))), ret=dsl.R)
    x2 = dsl.param("x", dsl.R[2 * N])
    yp = dsl.bind("y", dsl.gen(N, lambda i: dsl.max(2, lambda k: x2[2 * i + k])))
    out["pool"] = dsl.function("pool", [N, x2], dsl.sum(N, lambda i: yp[i] * yp[i]), ret=dsl.R)
    m = dsl.bind("m", dsl.max(N, lambda j: x[j]))
    out["logsumexp"] = dsl.function(
        "logsumexp", [N, x], dsl.log(dsl.sum(N, lambda j: dsl.exp(x[j] - m))) + m, ret=dsl.R)
    out["piecewise"] = dsl.function(
        "piecewise", [N, x, a],
        dsl.sum(N, lambda i: dsl.where(x[i] > a, x[i] * x[i], 2.0 * x[i] - a)), ret=dsl.R)
    out["compound"] = dsl.function(
        "compound", [N, x, y],
        dsl.sum(N, lambda i: dsl.where((x[i] >= 0) & ~(y[i] < x[i]) | (i == 0),
                                       x[i] * y[i], y[i])), ret=dsl.R)
    out["equal"] = dsl.function(
        "equal", [N, x, y],
        dsl.sum(N, lambda i: dsl.where(x[i] == y[i], x[i], 3.0 * y[i])), ret=dsl.R)
    out["static_if"] = dsl.function(
        "static_if", [N, x], dsl.gen(N, lambda i: dsl.where(i < 2, x[i], -x[i])), ret=dsl.R[N])
    out["power"] = dsl.function(
        "power", [N, x, y], dsl.sum(N, lambda i: x[i] ** y[i] + dsl.pow(x[i], y[0])),
        ret=dsl.R)
    x3 = dsl.param("x", dsl.R[3])
    c = dsl.bind("c", [1.0, -2.0, 0.5])
    out["literal"] = dsl.function("literal", [x3], dsl.sum(3, lambda k: c[k] * x3[k] * x3[k]),
                                  ret=dsl.R)
    out["nested"] = dsl.function("nested", [a], dsl.literal([[a, 1], [2.5, a * a]]),
                                 ret=dsl.R[2, 2])
    E = dsl.param("E", dsl.rel(N, M))
    out["unequal"] = dsl.function(
        "unequal", [N, M, x, E],
        dsl.gen(N, lambda i: dsl.where((x[i] != 1.0) | (i >= 1) & ~E(i, 0), x[i],
                                       2 ** x[i])), ret=dsl.R[N])
    return out


@pytest.mark.parametrize("name", sorted(build_part_a()))
def test_part_a_defs_are_the_parsers(name: str) -> None:
    assert_same_program(build_part_a()[name], PART_A)


# CI: interpreted, but for this file's own two (nested, unequal); all compiled by Numba with
# -m slow.  The others are the parsed programs of test_language_ext (assert_same_program
# above), which CI compiles and checks against the interpreter there (docs/decisions.md,
# "CI time").
@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow)])
def test_part_a_values_agree_with_numpy(backend) -> None:
    own = {"nested", "unequal"}
    defs = {k: tl.from_def(d).compile("numba" if k in own else backend)
            for k, d in build_part_a().items()}
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 5))
    x, y = rng.uniform(0.5, 2.0, 6), rng.uniform(0.5, 2.0, 6)
    y[2] = x[2]                                              # a tie for `equal`
    a = 1.1
    assert np.allclose(defs["rowmax"](A=A), A.max(1))
    assert np.isclose(defs["rowmin_loss"](A=A), ((2 * A).min(1) ** 2).sum())
    assert np.isclose(defs["pool"](x=x), (x.reshape(3, 2).max(1) ** 2).sum())
    assert np.isclose(defs["logsumexp"](x=x), np.log(np.exp(x).sum()))
    assert np.isclose(defs["piecewise"](x=x, a=a),
                      np.where(x > a, x * x, 2 * x - a).sum())
    keep = (x >= 0) & ~(y < x) | (np.arange(6) == 0)
    assert np.isclose(defs["compound"](x=x, y=y), np.where(keep, x * y, y).sum())
    assert np.isclose(defs["equal"](x=x, y=y), np.where(x == y, x, 3 * y).sum())
    assert np.allclose(defs["static_if"](x=x), np.where(np.arange(6) < 2, x, -x))
    assert np.isclose(defs["power"](x=x, y=y), (x ** y + x ** y[0]).sum())
    assert np.isclose(defs["literal"](x=x[:3]), (np.array([1, -2, 0.5]) * x[:3] ** 2).sum())
    assert np.allclose(defs["nested"](a=3.0), [[3.0, 1.0], [2.5, 9.0]])
    E = np.zeros((6, 2), dtype=bool)
    E[3, 0] = True
    x[4] = 1.0
    keep = (x != 1.0) | (np.arange(6) >= 1) & ~E[:, 0]
    assert np.allclose(defs["unequal"](M=2, x=x, E=E), np.where(keep, x, 2 ** x))


def test_real_power_and_value_comparisons_build_the_parsers_nodes() -> None:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    s, t = dsl.param("s", dsl.R), dsl.param("t", dsl.R)
    sv, tv = ast.Var("s"), ast.Var("t")
    assert (s ** t).node is ast.Call("exp", (ast.Mul(tv, ast.Call("log", (sv,), ())),), ())
    assert (s ** -2).node is ast.Call("pow", (sv,), (-2.0,))
    assert (s ** dsl.const(3)).node is ast.Call("pow", (sv,), (3.0,))
    assert dsl.pow(s, t).node is (s ** t).node
    assert (2 ** s).node is ast.Call("exp", (ast.Mul(sv, ast.Call("log", (ast.Const(2.0),),
                                                                   ())),), ())
    # the right operand's class derives from nothing of the left's: `x[0] > s` stays `>`
    assert (x[0] > s).node is ast.CondCmp(">", x[0].node, sv, None, ast.Affine.var("s"))
    assert (s < x[0]).node is ast.CondCmp("<", sv, x[0].node, ast.Affine.var("s"), None)
    assert isinstance(s, dsl.Expr) and issubclass(dsl.Variable, dsl.Expr)
    assert repr((x[0] > 0) & ~(s <= t)) == "x[0] > 0 and not s <= t"


# -- max-pool and attention: the examples, with gradients --------------------------------------

def build_maxpool() -> ast.Def:
    H, W = dsl.sizes("H W")
    X = dsl.param("X", dsl.R[2 * H, 2 * W])
    P = dsl.bind("P", dsl.gen(H, W, lambda i, j: dsl.max(2, 2, lambda a, b:
                                                          X[2 * i + a, 2 * j + b])))
    return dsl.function("maxpool", [H, W, X], dsl.sum(H, W, lambda i, j: P[i, j] * P[i, j]),
                        ret=dsl.R)


def build_attention() -> ast.Def:
    N, D = dsl.sizes("N D")
    Q, K, V = (dsl.param(n, dsl.R[N, D]) for n in "QKV")
    S = dsl.bind("S", dsl.gen(N, N, lambda i, j: dsl.sum(D, lambda d: Q[i, d] * K[j, d])))
    m = dsl.bind("m", dsl.gen(N, lambda i: dsl.max(N, lambda j: S[i, j])))
    E = dsl.bind("E", dsl.gen(N, N, lambda i, j: dsl.exp(S[i, j] - m[i])))
    Z = dsl.bind("Z", dsl.gen(N, lambda i: dsl.sum(N, lambda j: E[i, j])))
    O = dsl.bind("O", dsl.gen(N, D, lambda i, d: dsl.sum(N, lambda j: E[i, j] * V[j, d])
                              / Z[i]))
    return dsl.function("attention", [N, D, Q, K, V],
                        dsl.sum(N, D, lambda i, d: O[i, d] * O[i, d]), ret=dsl.R)


def attention_numpy(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> float:
    S = Q @ K.T
    E = np.exp(S - S.max(1, keepdims=True))
    O = (E / E.sum(1, keepdims=True)) @ V
    return float((O * O).sum())


def test_maxpool_and_attention_are_the_examples() -> None:
    assert_same_program(build_maxpool(), (EXAMPLES / "maxpool.tl").read_text())
    assert_same_program(build_attention(), (EXAMPLES / "attention.tl").read_text())


def test_maxpool_gradient_agrees_with_numpy_ties_shared_equally() -> None:
    f = tl.from_def(build_maxpool())
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 6))
    P = X.reshape(2, 2, 3, 2).max(axis=(1, 3))
    assert np.isclose(f(X=X), (P * P).sum())
    g = tl.grad(f, "X")
    np.testing.assert_allclose(g.compile("numba")(X=X), finite_difference(
        lambda v: f.interpret(X=v), X), rtol=1e-6, atol=1e-8)
    # a tie: the block's cotangent 2 * max is shared equally between the two maximisers
    X[0, 0] = X[1, 1] = 5.0
    got = g.interpret(X=X)
    assert np.isclose(got[0, 0], 5.0) and np.isclose(got[1, 1], 5.0)
    assert got[0, 1] == 0.0 and got[1, 0] == 0.0


# CI: the function and its gradient interpreted; compiled by Numba (two kernels no other CI
# test compiles, 17 s) with -m slow (docs/decisions.md, "CI time").
@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow)])
def test_attention_gradient_agrees_with_finite_differences(backend) -> None:
    f = tl.from_def(build_attention())
    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((3, 2)) for _ in range(3))
    assert np.isclose(f.compile(backend)(Q=Q, K=K, V=V), attention_numpy(Q, K, V))
    gQ, (gK, gV) = tl.grad(f, "Q", "K", "V").compile(backend)(Q=Q, K=K, V=V)
    want = (finite_difference(lambda q: attention_numpy(q, K, V), Q),
            finite_difference(lambda k: attention_numpy(Q, k, V), K),
            finite_difference(lambda v: attention_numpy(Q, K, v), V))
    for got, w in zip((gQ, gK, gV), want):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-8)
    # vjp of the (tensor-valued) row maximum: the cotangent goes to the argmax of each row
    N = dsl.size("N")
    A = dsl.param("A", dsl.R[N, N])
    rowmax = tl.from_def(dsl.function("rowmax", [N, A],
                                      dsl.gen(N, lambda i: dsl.max(N, lambda j: A[i, j]))))
    Av = rng.standard_normal((3, 3))
    ct = np.array([1.0, -2.0, 0.5])
    value, d_A = tl.vjp(rowmax, "A").interpret(A=Av, d_y=ct)
    want = np.zeros((3, 3))
    want[np.arange(3), Av.argmax(1)] = ct
    np.testing.assert_allclose(value, Av.max(1))
    np.testing.assert_allclose(d_A, want)


def test_piecewise_huber_is_the_example_and_has_a_gradient() -> None:
    N, M = dsl.sizes("N M")
    X = dsl.param("X", dsl.R[N, M])
    w, y = dsl.param("w", dsl.R[M]), dsl.param("y", dsl.R[N])
    r = dsl.bind("r", dsl.gen(N, lambda i: dsl.sum(M, lambda j: X[i, j] * w[j]) - y[i]))
    a = dsl.bind("a", dsl.gen(N, lambda i: abs(r[i])))
    huber = dsl.function("huber", [N, M, X, w, y], dsl.sum(
        N, lambda i: dsl.where(a[i] <= 1.0, 0.5 * r[i] * r[i], a[i] - 0.5)), ret=dsl.R)
    assert_same_program(huber, (EXAMPLES / "piecewise.tl").read_text())
    rng = np.random.default_rng(3)
    Xv, wv, yv = rng.standard_normal((6, 3)), rng.standard_normal(3), rng.standard_normal(6)

    def ref(wv: np.ndarray) -> float:
        res = Xv @ wv - yv
        return float(np.where(abs(res) <= 1, 0.5 * res ** 2, abs(res) - 0.5).sum())

    f = tl.from_def(huber)
    assert np.isclose(f(X=Xv, w=wv, y=yv), ref(wv))
    np.testing.assert_allclose(tl.grad(f, "w").interpret(X=Xv, w=wv, y=yv),
                               finite_difference(ref, wv), rtol=1e-6, atol=1e-8)


# -- quasi-affine indices and index arrays (SPEC 12 part B) ------------------------------------

MIXED = """
def mixed(N: size, V: size, P: Z[N], x: R[V], y: R[N]) -> R:
    return sum i:N. (x[P[i]] * y[(i + 1) % N] + [i % 2 == 0] * y[i // 2] * x[P[N - 1 - i]]
                     + [i // 3 < 1] * sin(y[(i - 2) % N] * x[(i + 1) // 2]))
"""


def build_mixed() -> ast.Def:
    N, V = dsl.sizes("N V")
    P = dsl.param("P", dsl.Z[N])
    x, y = dsl.param("x", dsl.R[V]), dsl.param("y", dsl.R[N])
    body = dsl.sum(N, lambda i: (x[P[i]] * y[(i + 1) % N]
                                 + (i % 2 == 0) * (y[i // 2] * x[P[N - 1 - i]])
                                 + (i // 3 < 1) * dsl.sin(y[(i - 2) % N] * x[(i + 1) // 2])))
    return dsl.function("mixed", [N, V, P, x, y], body, ret=dsl.R)


def test_quasi_affine_indices_are_the_parsers() -> None:
    assert_same_program(build_mixed(), MIXED)
    f = tl.from_def(build_mixed())
    rng = np.random.default_rng(4)
    P, x, y = rng.integers(0, 4, 7), rng.standard_normal(4), rng.standard_normal(7)
    n, i = 7, np.arange(7)
    half = (i + 1) // 2
    want = (x[P] * y[(i + 1) % n] + np.where(i % 2 == 0, y[i // 2] * x[P[n - 1 - i]], 0.0)
            + np.where(i // 3 < 1, np.sin(y[(i - 2) % n] * x[np.minimum(half, 3)])
                       * (half < 4), 0.0)).sum()
    assert np.isclose(f(P=P, x=x, y=y), want)
    assert np.isclose(f.interpret(P=P, x=x, y=y), want)


STENCIL = (EXAMPLES / "stencil.tl").read_text()


def build_stencil() -> dict[str, ast.Def]:
    N, M = dsl.sizes("N M")
    u = dsl.param("u", dsl.R[N, M])
    out = dsl.bind("out", dsl.gen(N, M, lambda i, j: (
        u[(i + 1) % N, j] + u[(i - 1) % N, j] + u[i, (j + 1) % M] + u[i, (j - 1) % M]
        - 4 * u[i, j])))
    laplace = dsl.function("laplace", [N, M, u], out, ret=dsl.R[N, M])
    lap = dsl.bind("lap", dsl.call(laplace, N, M, u))
    dirichlet = dsl.function("dirichlet", [N, M, u],
                             -0.5 * dsl.sum(N, M, lambda i, j: u[i, j] * lap[i, j]), ret=dsl.R)
    x = dsl.param("x", dsl.R[N, M])
    s, t = dsl.param("s", dsl.R[2 * N, 2 * M]), dsl.param("t", dsl.R[2 * N, 2 * M])
    up = dsl.bind("up", dsl.gen(2 * N, 2 * M, lambda i, j: x[i // 2, j // 2] * s[i, j]))
    upsample = dsl.function("upsample", [N, M, x, s], up, ret=dsl.R[2 * N, 2 * M])
    up2 = dsl.bind("up", dsl.call(upsample, N, M, x, s))
    loss = dsl.function("upsample_loss", [N, M, x, s, t], dsl.sum(
        2 * N, 2 * M, lambda i, j: (up2[i, j] - t[i, j]) ** 2), ret=dsl.R)
    return {"laplace": laplace, "dirichlet": dirichlet, "upsample": upsample,
            "upsample_loss": loss}


# CI: interpreted; compiled by Numba with -m slow: the programs are stencil.tl's
# (assert_same_program), whose upsample_loss gradient CI compiles and checks against JAX in
# test_quasi_index (docs/decisions.md, "CI time").
@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow)])
def test_periodic_laplacian_and_upsampling_are_the_examples(backend) -> None:
    defs = build_stencil()
    assert_same_program(defs["laplace"], STENCIL)
    assert_same_program(defs["dirichlet"], STENCIL, [defs["laplace"]])
    assert_same_program(defs["upsample"], STENCIL)
    assert_same_program(defs["upsample_loss"], STENCIL, [defs["upsample"]])
    rng = np.random.default_rng(5)
    u = rng.standard_normal((4, 3))
    lap = (np.roll(u, -1, 0) + np.roll(u, 1, 0) + np.roll(u, -1, 1) + np.roll(u, 1, 1) - 4 * u)
    np.testing.assert_allclose(tl.from_def(defs["laplace"]).compile(backend)(u=u), lap)
    dirichlet = tl.from_def(defs["dirichlet"], [defs["laplace"]])
    assert np.isclose(dirichlet.compile(backend)(u=u), -0.5 * (u * lap).sum())
    np.testing.assert_allclose(tl.grad(dirichlet, "u").interpret(u=u), -lap, atol=1e-12)
    x, s, t = rng.standard_normal((3, 2)), rng.standard_normal((6, 4)), rng.standard_normal(
        (6, 4))
    rep = np.repeat(np.repeat(x, 2, 0), 2, 1)
    loss = tl.from_def(defs["upsample_loss"], [defs["upsample"]])
    assert np.isclose(loss.compile(backend)(x=x, s=s, t=t), ((s * rep - t) ** 2).sum())
    gx, gs = tl.grad(loss, "x", "s").compile(backend)(x=x, s=s, t=t)
    r = 2 * (s * rep - t)
    np.testing.assert_allclose(gs, r * rep, rtol=1e-10)
    np.testing.assert_allclose(gx, (r * s).reshape(3, 2, 2, 2).sum(axis=(1, 3)), rtol=1e-10)


EMBEDDING = (EXAMPLES / "embedding.tl").read_text()


def build_embag() -> ast.Def:
    B, K, V, D = dsl.sizes("B K V D")
    tok = dsl.param("tok", dsl.Z[B, K])
    E, w, y = dsl.param("E", dsl.R[V, D]), dsl.param("w", dsl.R[D]), dsl.param("y", dsl.R[B])
    h = dsl.bind("h", dsl.gen(B, D, lambda b, d: dsl.sum(K, lambda k: E[tok[b, k], d])))
    return dsl.function("embag", [B, K, V, D, tok, E, w, y], dsl.sum(
        B, lambda b: (dsl.sum(D, lambda d: h[b, d] * w[d]) - y[b]) ** 2), ret=dsl.R)


def build_gnn() -> ast.Def:
    V, M, D = dsl.sizes("V M D")
    src = dsl.param("src", dsl.index_array(M, V))
    dst = dsl.param("dst", dsl.index_array(M, V))
    X, W, T = (dsl.param("X", dsl.R[V, D]), dsl.param("W", dsl.R[D, D]),
               dsl.param("T", dsl.R[V, D]))
    msg = dsl.bind("msg", dsl.gen(M, D, lambda e, d: dsl.sum(D, lambda c: X[src[e], c]
                                                            * W[c, d])))
    h = dsl.bind("h", dsl.gen(V, D, lambda v, d: dsl.tanh(dsl.sum(
        M, lambda e: (dst[e] == v) * msg[e, d]))))
    return dsl.function("gnn", [V, M, D, src, dst, X, W, T], dsl.sum(
        V, D, lambda v, d: (h[v, d] - T[v, d]) ** 2), ret=dsl.R)


def test_index_array_layers_are_the_examples() -> None:
    assert_same_program(build_embag(), EMBEDDING)
    assert_same_program(build_gnn(), EMBEDDING)
    assert dsl.Z[3, 4] is ast.TIndex((ast.Affine.lit(3), ast.Affine.lit(4)), True)
    assert dsl.index_array(3) is dsl.Z[3]


# CI: interpreted; compiled by Numba with -m slow: embedding.tl's embag (the DSL builds the
# same program, test_index_array_layers_are_the_examples), whose gradient CI compiles in
# test_index_array_kernels and test_aot (docs/decisions.md, "CI time").
@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow)])
def test_embedding_bag_gradient_agrees_with_numpy(backend) -> None:
    f = tl.from_def(build_embag())
    rng = np.random.default_rng(6)
    tok = rng.integers(0, 4, (3, 5))
    E, w, y = rng.standard_normal((4, 2)), rng.standard_normal(2), rng.standard_normal(3)
    h = E[tok].sum(1)
    r = h @ w - y
    assert np.isclose(f.compile(backend)(tok=tok, E=E, w=w, y=y), (r ** 2).sum())
    gE, gw = tl.grad(f, "E", "w").compile(backend)(tok=tok, E=E, w=w, y=y)
    want_E = np.zeros_like(E)
    np.add.at(want_E, tok.ravel(), np.repeat(2 * r, 5)[:, None] * w[None, :])
    np.testing.assert_allclose(gE, want_E, rtol=1e-10)
    np.testing.assert_allclose(gw, 2 * r @ h, rtol=1e-10)
    # the vjp in E gathers through the inverse relation: d_E[v, d] sums the (b, k) reading v
    assert "tok(j0, j1, i0)] *" in tl.vjp(f, "E").show("simplified")


def test_gnn_gradient_agrees_with_finite_differences() -> None:
    f = tl.from_def(build_gnn())
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 4, 9), rng.integers(0, 4, 9)
    X, W, T = rng.standard_normal((4, 3)), rng.standard_normal((3, 3)), rng.standard_normal(
        (4, 3))

    def ref(X: np.ndarray, W: np.ndarray) -> float:
        agg = np.zeros_like(X)
        np.add.at(agg, dst, X[src] @ W)
        return float(((np.tanh(agg) - T) ** 2).sum())

    assert np.isclose(f(src=src, dst=dst, X=X, W=W, T=T), ref(X, W))
    gX, gW = tl.grad(f, "X", "W").interpret(src=src, dst=dst, X=X, W=W, T=T)
    np.testing.assert_allclose(gX, finite_difference(lambda v: ref(v, W), X), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(gW, finite_difference(lambda v: ref(X, v), W), rtol=1e-6,
                               atol=1e-8)


def test_out_of_range_index_array_entries_are_shape_errors() -> None:
    f = tl.from_def(build_embag())
    tok = np.array([[0, 1], [7, 2]])
    with pytest.raises(tl.ShapeError, match="tok"):
        f(tok=tok, E=np.zeros((4, 2)), w=np.zeros(2), y=np.zeros(2))


# -- misuse -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, build", [
    ("(2*i - N + 1) * x[i]", lambda i, N, x: (2 * i - N + 1) * x[i]),
    ("i * 2.0 + 2.0 * i + 0.5 * i", lambda i, N, x: i * 2.0 + 2.0 * i + 0.5 * i),
    ("x[i] ** i + i / 2 + 1.0 / N", lambda i, N, x: x[i] ** i + i / 2 + 1.0 / N),
    ("(i + 1.0) * x[i] + (i - 0.5) * x[i]", lambda i, N, x: (i + 1.0) * x[i] + (i - 0.5) * x[i]),
    ("i * i * x[i] + x[i] * i", lambda i, N, x: i * i * x[i] + x[i] * i),
    ("where(x[i] > i, 1.0, 0.0)", lambda i, N, x: dsl.where(x[i] > i, 1.0, 0.0)),
])
def test_indices_as_values_are_the_parsers(text, build) -> None:
    """An index met by a value is a value (SPEC 12): the DSL builds what the checker makes of
    the same text, affine parts folded into one `IndexValue`."""
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    built = tl.from_def(dsl.function("f", [N, x], dsl.sum(N, lambda i: build(i, N, x)),
                                     ret=dsl.R))
    parsed = tl.parse(f"def f(N: size, x: R[N]) -> R:\n    return sum i:N. {text}\n").f
    assert built.core() is parsed.core()
    v = np.linspace(0.5, 1.5, 4)
    assert built(x=v) == pytest.approx(parsed.interpret(x=v), rel=1e-12)


def test_misuse_is_a_clear_dsl_error() -> None:
    N, M = dsl.sizes("N M")
    x = dsl.param("x", dsl.R[N])
    P = dsl.param("P", dsl.Z[N])
    E = dsl.param("E", dsl.rel(N, N))
    for bad in (lambda i: x[i // 0], lambda i: x[i % -2]):
        with pytest.raises(DSLError, match=r"divisor of (//|%) must be a positive integer "
                                           r"constant or a size, not -?\d"):
            dsl.gen(N, bad)
    with pytest.raises(DSLError, match=r"divisor of // .* not the expression x\[i\] "
                                       r"\(indices are not values\)"):
        dsl.gen(N, lambda i: x[i // x[i]])
    with pytest.raises(DSLError, match="divisor of % .* not float 2.0"):
        dsl.gen(N, lambda i: x[i % 2.0])
    with pytest.raises(DSLError, match="not an index bound by gen"):
        dsl.gen(N, N, lambda i, j: x[i // j])
    with pytest.raises(DSLError, match="must be an index expression"):
        dsl.gen(N, lambda i: x[x[i]])                       # a real in an index
    with pytest.raises(DSLError, match="must be an index expression"):
        dsl.gen(N, lambda i: x[1.5])
    with pytest.raises(DSLError, match="index array P must be indexed"):
        x[P]
    with pytest.raises(DSLError, match="index array P takes 1 index, got 2"):
        P[0, 1]
    with pytest.raises(DSLError, match="index array P is not a value"):
        dsl.gen(N, lambda i: x[i] * P)
    with pytest.raises(DSLError, match="index-array entries are index operators"):
        dsl.gen(N, lambda i: x[i] * 1.0 + P[i] * 0.5)
    with pytest.raises(DSLError, match="multiplied by an integer or a value"):
        dsl.gen(N, lambda i: x[i * "2"])
    with pytest.raises(DSLError, match="a tensor dimension must be affine"):
        dsl.R[N // 2]
    with pytest.raises(DSLError, match="the range of gen must be affine"):
        dsl.gen(N // 2, lambda i: 1.0)
    with pytest.raises(DSLError, match="must be affine"):
        dsl.gen(N, lambda i: E(i, i % 2) * x[i])
    with pytest.raises(DSLError, match="non-empty list"):
        dsl.literal([])
    with pytest.raises(DSLError, match="compares values: it selects with dsl.where"):
        dsl.gen(N, lambda i: (x[i] > 0) * x[i])
    with pytest.raises(DSLError, match="compares values"):
        dsl.gen(N, lambda i: ~E(i, 0) * x[i])               # `not E(i, j)`: only a selection
    with pytest.raises(DSLError, match="truth value"):
        bool(x[0] > 0)
    with pytest.raises(DSLError, match="truth value"):
        dsl.gen(N, lambda i: x[i] if x[i] > 0 else 0.0)
    with pytest.raises(DSLError, match="expected a condition"):
        dsl.where(x[0], 1.0, 2.0)
    with pytest.raises(DSLError, match="uses //, % or an index array"):
        dsl.gen(N, lambda i: dsl.where(i % 2 == 0, x[i], 0.0))
    with pytest.raises(DSLError, match="two values .* or sizes and a function"):
        dsl.max(x[0])
    with pytest.raises(DSLError, match="max with 1 size\\(s\\) needs a function of 1"):
        dsl.max(N, lambda i, j: x[i])
    # a quasi-affine predicate guards an Iverson bracket (and its negation too)
    g = dsl.gen(N, lambda i: (i % 2 == 0) * x[i] + ~(i % 2 == 0) * -x[i])
    f = tl.from_def(dsl.function("alt", [N, x], g))
    np.testing.assert_allclose(f(x=np.arange(5.0)), [0.0, -1.0, 2.0, -3.0, 4.0])


# -- every generated program, rebuilt through the DSL ------------------------------------------

def _named(names: list[str], fn: Callable) -> Callable:
    """`fn` with parameters called `names` (the DSL names binders after them)."""
    import inspect

    def call(*args: object) -> object:
        return fn(*args)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    call.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n in names])
    return call


class Rebuild:
    """A def's surface nodes, rebuilt by calling the DSL (the DSL user's view of them)."""

    def __init__(self, d: ast.Def):
        self.objects = {p.name: dsl.param(p.name, p.type) for p in d.params}
        self.d = d

    def run(self) -> ast.Def:
        return dsl.function(self.d.name, [self.objects[p.name] for p in self.d.params],
                            self.expr(self.d.body, {}), ret=self.d.ret)

    def index(self, a: ast.Node, env: dict) -> dsl.Index:
        if isinstance(a, ast.QuasiAffine):
            out = self.index(a.base, env)
            for term, c in zip(a.terms, a.coeffs):
                if isinstance(term, ast.IndexDiv):
                    num = self.index(term.num, env)
                    den = self.index(term.den, env)
                    t = num // den if term.op == "//" else num % den
                else:
                    t = self.objects[term.name][tuple(self.index(x, env) for x in term.args)]
                out = out + t * c
            return out
        assert isinstance(a, ast.Affine)
        out = dsl.Index(ast.Affine.lit(a.const))
        for name, c in a.terms:
            out = out + (env[name] if name in env else dsl.Index(ast.Affine.var(name))) * c
        return out

    def binder(self, fn: Callable, e: ast.Node, env: dict, body: Callable) -> object:
        return fn(self.index(e.size, env),
                  _named([e.idx], lambda i: body(e.body, {**env, e.idx: i})))

    def pred(self, p: ast.Pred, env: dict) -> dsl.Pred:
        if isinstance(p, ast.PTrue):
            return dsl.true
        if isinstance(p, ast.PFalse):
            return dsl.false
        if isinstance(p, ast.Cmp):
            a, b = self.index(p.lhs, env), self.index(p.rhs, env)
            return {"<": a < b, "<=": a <= b, "==": a == b}[p.op]
        if isinstance(p, (ast.And, ast.Or)):
            a, b = self.pred(p.a, env), self.pred(p.b, env)
            return a & b if isinstance(p, ast.And) else a | b
        if isinstance(p, ast.RelCall):
            return self.objects[p.name](*(self.index(x, env) for x in p.args))
        assert isinstance(p, ast.Exists), p
        return self.binder(dsl.exists, p, env, self.pred)

    def expr(self, e: ast.Expr, env: dict) -> dsl.Expr:
        if isinstance(e, ast.Var):
            return env[e.name] if e.name in env else self.objects[e.name]
        if isinstance(e, ast.Const):
            return dsl.const(e.value)
        if isinstance(e, ast.IndexValue):
            return self.index(e.a, env).value()
        if isinstance(e, (ast.Add, ast.Mul)):
            a, b = self.expr(e.a, env), self.expr(e.b, env)
            return a + b if isinstance(e, ast.Add) else a * b
        if isinstance(e, ast.Call):
            return dsl.builtin(e.fn, *(self.expr(x, env) for x in e.args), params=e.params)
        if isinstance(e, ast.Pair):
            return dsl.pair(self.expr(e.a, env), self.expr(e.b, env))
        if isinstance(e, ast.Proj):
            return dsl.proj(self.expr(e.e, env), e.k)
        if isinstance(e, ast.Access):
            return self.expr(e.e, env)[tuple(self.index(a, env) for a in e.idx)]
        if isinstance(e, ast.Iverson):
            return dsl.iverson(self.pred(e.pred, env), self.expr(e.e, env))
        if isinstance(e, ast.Let):
            return dsl.let(self.expr(e.value, env),
                           _named([e.name], lambda v: self.expr(e.body, {**env, e.name: v})))
        fn = {ast.Gen: dsl.gen, ast.Sum: dsl.sum, ast.Max: dsl.max, ast.Min: dsl.min}[type(e)]
        return self.binder(fn, e, env, self.expr)


def test_every_generated_program_can_be_built_with_the_dsl() -> None:
    """The random programs of `tensorlang.testing` (max/min reductions, index-array parameters
    and their relation calls among them) rebuilt by DSL calls are the same nodes."""
    from hypothesis import given

    from tensorlang import testing

    seen: set[str] = set()

    @given(testing.programs())
    def check(case: tuple) -> None:
        d, _ = case
        assert Rebuild(d).run() == d
        for n in ast.walk(d.body):
            seen.add(type(n).__name__)

    check()
    assert {"Max", "Min"} & seen and "RelCall" in seen


def quasi_indices(names: list[str], arrays: dict[str, int]):
    """Random quasi-affine index expressions over index `names`, sizes N and M and the
    index arrays `arrays` (name: rank), as the parser's nodes."""
    from hypothesis import strategies as st

    leaf = st.one_of(st.sampled_from(names + ["N", "M"]).map(ast.Affine.var),
                     st.integers(-3, 3).map(ast.Affine.lit))

    def grow(sub):
        den = st.one_of(st.integers(1, 4).map(ast.Affine.lit),
                        st.sampled_from(["N", "M"]).map(ast.Affine.var))
        div = st.builds(lambda op, a, d: ast.quasi_term(ast.IndexDiv(op, a, d)),
                        st.sampled_from(["//", "%"]), sub, den)
        read = st.sampled_from(sorted(arrays)).flatmap(lambda a: st.lists(
            sub, min_size=arrays[a], max_size=arrays[a]).map(
                lambda args: ast.quasi_term(ast.IndexRead(a, tuple(args)))))
        add = st.builds(ast.quasi_add, sub, sub)
        scale = st.builds(ast.quasi_scale, sub, st.integers(-2, 3))
        return st.one_of(div, read, add, scale)

    return st.recursive(leaf, grow, max_leaves=6)


def test_random_quasi_affine_indices_are_the_parsers() -> None:
    """`x[q]` and `[q < r]` built from DSL index arithmetic (`+ - * // %`, index-array reads)
    are the nodes the parser makes of their printed text."""
    from hypothesis import given

    from tensorlang.syntax.parser import parse_expr
    from tensorlang.syntax.printer import to_tl

    N, M = dsl.sizes("N M")
    d = ast.Def("f", (ast.Param("N", ast.TSize()), ast.Param("M", ast.TSize()),
                      ast.Param("P", ast.TIndex((ast.Affine.var("N"),), True)),
                      ast.Param("Q", ast.TIndex((ast.Affine.var("N"), ast.Affine.var("M")),
                                                True))), None, ast.Const(0.0))
    rebuild = Rebuild(d)
    x = dsl.param("x", dsl.R[N])
    env = {"i": dsl.Index(ast.Affine.var("i")), "j": dsl.Index(ast.Affine.var("j"))}

    @given(quasi_indices(["i", "j"], {"P": 1, "Q": 2}),
           quasi_indices(["i", "j"], {"P": 1, "Q": 2}))
    def check(q: ast.Node, r: ast.Node) -> None:
        read = ast.Access(ast.Var("x"), (q,))
        assert x[rebuild.index(q, env)].node is parse_expr(to_tl(read)) is read
        guard = ast.Iverson(ast.Cmp("<", q, r), ast.Const(1.0))
        built = dsl.iverson(rebuild.index(q, env) < rebuild.index(r, env))
        assert built.node is parse_expr(to_tl(guard)) is guard

    check()


def test_conditions_under_renamed_binders_lets_and_statements() -> None:
    N = dsl.size("N")
    x, y = dsl.param("x", dsl.R[N]), dsl.param("y", dsl.R)
    # a binder named like a parameter is renamed in both readings of `y < 2`
    d = dsl.function("f", [N, x, y], dsl.sum(N, lambda y: dsl.where(y < 2, x[y], 0.0)))
    assert_same_program(d, "def f(N: size, x: R[N], y: R):\n"
                           "    return sum y1:N. if y1 < 2 then x[y1] else 0.0\n")
    # a let variable compared with a value; a statement made inside a condition
    t = dsl.bind("t", dsl.sum(N, lambda i: x[i]))
    body = dsl.let(x[0], lambda v: dsl.where((v > 0) & (t <= y), v, t))
    d = dsl.function("g", [N, x, y], body)
    assert_same_program(d, "def g(N: size, x: R[N], y: R):\n"
                           "    t = sum i:N. x[i]\n"
                           "    return let v = x[0] in if v > 0 and t <= y then v else t\n")
    f = tl.from_def(d)
    for xv, yv in ((np.array([1.0, 2.0]), 5.0), (np.array([1.0, 2.0]), 1.0),
                   (np.array([-1.0, 2.0]), 5.0)):
        want = xv[0] if xv[0] > 0 and xv.sum() <= yv else xv.sum()
        assert np.isclose(f(x=xv, y=yv), want)


def test_lists_are_literals_and_index_arrays_are_relations() -> None:
    N, V = dsl.sizes("N V")
    x = dsl.param("x", dsl.R[2])
    P = dsl.param("P", dsl.index_array(N, V))
    z = dsl.param("z", dsl.R[V])
    d = dsl.function("f", [x], [1.0, 2.0] + x * [3, -1.5])
    assert_same_program(d, "def f(x: R[2]):\n    return [1.0, 2.0] + x * [3, -1.5]\n")
    np.testing.assert_allclose(tl.from_def(d)(x=np.array([1.0, 2.0])), [4.0, -1.0])
    g = dsl.function("g", [N, V, P, z], dsl.gen(N, lambda i: dsl.sum(
        V, lambda v: P(i, v) * z[v])))
    assert_same_program(g, "def g(N: size, V: size, P: Z[N] in V, z: R[V]):\n"
                           "    return gen i:N. sum v:V. [P(i, v)] * z[v]\n")
    np.testing.assert_allclose(tl.from_def(g)(P=np.array([2, 0]), z=np.array([1.0, 2, 3])),
                               [3.0, 1.0])
    Q = dsl.param("Q", dsl.Z[N])
    with pytest.raises(DSLError, match="needs its declared range"):
        Q(0, 1)
