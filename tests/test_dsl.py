"""The Python builder API (`tensorlang.dsl`): the nodes it builds, compared with hand-built
ASTs and with the parser, and the programs it builds evaluated by the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlang.ir import ast
from tensorlang import dsl
from tensorlang.dsl import DSLError
from tensorlang.syntax.errors import TLError

V, L = ast.Affine.var, ast.Affine.lit
R = ast.REAL


def acc(name: str, *idx: ast.Affine) -> ast.Expr:
    return ast.Access(ast.Var(name), idx)


def parse_one(text: str) -> list:
    parser = pytest.importorskip("tensorlang.syntax.parser")
    return parser.parse_module(text)


def interpret(d: ast.Def, args: dict) -> object:
    interp = pytest.importorskip("tensorlang.semantics.interp")
    return interp.interpret(d, args)


SPEC_EXAMPLES = """
def qform(N: size, x: R[N], A: R[N, N]) -> R:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]

def conv(N: size, K: size, x: R[N + K - 1], w: R[K]) -> R[N]:
    out[i:N] = sum k:K. w[k] * x[i + k]
    return out

def masked(N: size, E: rel(N, N), A: R[N, N]) -> R:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2
"""


def build_qform() -> ast.Def:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    Am = dsl.param("A", dsl.R[N, N])
    y = dsl.bind("y", dsl.gen(N, lambda i: dsl.sum(N, lambda j: Am[i, j] * x[j])))
    return dsl.function("qform", [N, x, Am], dsl.sum(N, lambda i: x[i] * y[i]), ret=dsl.R)


def build_conv() -> ast.Def:
    N, K = dsl.sizes("N K")
    x = dsl.param("x", dsl.R[N + K - 1])
    w = dsl.param("w", dsl.R[K])
    out = dsl.bind("out", dsl.gen(N, lambda i: dsl.sum(K, lambda k: w[k] * x[i + k])))
    return dsl.function("conv", [N, K, x, w], out, ret=dsl.R[N])


def build_masked() -> ast.Def:
    N = dsl.size("N")
    E = dsl.param("E", dsl.rel(N, N))
    Am = dsl.param("A", dsl.R[N, N])
    body = dsl.sum(N, N, lambda i, j: (E(i, j) & (i != j)) * Am[i, j] ** 2)
    return dsl.function("masked", [N, E, Am], body, ret=dsl.R)


def test_spec_examples_match_hand_built_asts() -> None:
    N, K = V("N"), V("K")
    i, j, k = V("i"), V("j"), V("k")
    vec, mat = ast.tensor([N]), ast.tensor([N, N])
    qform = ast.Def(
        "qform", (ast.Param("N", ast.TSize()), ast.Param("x", vec), ast.Param("A", mat)), R,
        ast.Let("y", ast.Gen("i", N, ast.Sum("j", N, ast.Mul(acc("A", i, j), acc("x", j)))),
                ast.Sum("i", N, ast.Mul(acc("x", i), acc("y", i)))))
    assert build_qform() is qform
    conv = ast.Def(
        "conv", (ast.Param("N", ast.TSize()), ast.Param("K", ast.TSize()),
                 ast.Param("x", ast.tensor([N + K - 1])), ast.Param("w", ast.tensor([K]))),
        ast.tensor([N]),
        ast.Let("out", ast.Gen("i", N, ast.Sum("k", K, ast.Mul(acc("w", k), acc("x", i + k)))),
                ast.Var("out")))
    assert build_conv() is conv
    guard = ast.And(ast.RelCall("E", (i, j)), ast.Or(ast.Cmp("<", i, j), ast.Cmp("<", j, i)))
    masked = ast.Def(
        "masked",
        (ast.Param("N", ast.TSize()), ast.Param("E", ast.TRel((N, N))), ast.Param("A", mat)),
        R, ast.Sum("i", N, ast.Sum("j", N, ast.Iverson(guard, ast.Call("pow", (acc("A", i, j),),
                                                                   (2.0,))))))
    assert build_masked() is masked


def test_spec_examples_match_the_parser() -> None:
    parsed = parse_one(SPEC_EXAMPLES)
    assert [build_qform(), build_conv(), build_masked()] == parsed


def test_spec_examples_evaluate() -> None:
    rng = np.random.default_rng(0)
    n, k = 5, 3
    x, Am, w, xc = (rng.standard_normal(n), rng.standard_normal((n, n)),
                    rng.standard_normal(k), rng.standard_normal(n + k - 1))
    assert np.isclose(interpret(build_qform(), {"N": n, "x": x, "A": Am}), x @ Am @ x,
                      rtol=1e-12)
    want = np.array([sum(w[t] * xc[s + t] for t in range(k)) for s in range(n)])
    assert np.allclose(interpret(build_conv(), {"N": n, "K": k, "x": xc, "w": w}), want)
    E = rng.random((n, n)) < 0.5
    mask = E & ~np.eye(n, dtype=bool)
    assert np.isclose(interpret(build_masked(), {"N": n, "E": E, "A": Am}),
                      (Am[mask] ** 2).sum())


SUGAR = """
def t(N: size, a: R, b: R, x: R[N], p: (R, R[N])) -> R:
    return (a - b + -a + -3.0 + a / b + p.0 + (let z = a in z * 2) + [N >= 2] + x[N - 1]
            + a ** 0.5 + b * ([N > 1] * (a * b)) + abs(a) + max(a, b)
            + sum i:N. [(exists t:N. i == 2 * t) or i <= 1] * p.1[i])
"""


def build_sugar() -> ast.Def:
    N = dsl.size("N")
    a, b = dsl.param("a", dsl.R), dsl.param("b", dsl.R)
    x = dsl.param("x", dsl.R[N])
    p = dsl.param("p", (dsl.R, dsl.R[N]))
    even = lambda i: dsl.exists(N, lambda t: i == 2 * t) | (i <= 1)  # noqa: E731
    body = (a - b + -a + -3.0 + a / b + p.fst + dsl.let(a, lambda z: z * 2) + (N >= 2)
            + x[N - 1] + a ** 0.5 + b * ((N > 1) * (a * b)) + abs(a) + dsl.max(a, b)
            + dsl.sum(N, lambda i: even(i) * p.snd[i]))
    return dsl.function("t", [N, a, b, x, p], body, ret=dsl.R)


def test_sugar_matches_the_parser() -> None:
    d = build_sugar()
    assert parse_one(SUGAR)[0] is d
    body = d.body
    parts = []
    while isinstance(body, ast.Add):       # the sum chain nests to the left
        parts.append(body.b)
        body = body.a
    parts.append(body)
    a, b = ast.Var("a"), ast.Var("b")
    assert parts[-1] is a and parts[-2] is ast.Mul(ast.Const(-1.0), b)     # a - b
    assert parts[-4] is ast.Const(-3.0)                                   # literal -3.0
    assert parts[-5] is ast.Mul(a, ast.Call("recip", (b,), ()))              # a / b
    assert parts[-8] is ast.Iverson(ast.Cmp("<=", L(2), V("N")), ast.Const(1.0))  # [N >= 2]


def test_sugar_evaluates() -> None:
    n, a, b = 4, 0.7, -0.3
    x, p1 = np.arange(4.0), np.arange(4.0) + 10
    got = interpret(build_sugar(), {"N": n, "a": a, "b": b, "x": x, "p": (0.25, p1)})
    want = (a - b - a - 3.0 + a / b + 0.25 + 2 * a + 1 + x[n - 1] + a ** 0.5 + b * a * b
            + abs(a) + max(a, b) + p1[0] + p1[1] + p1[2])
    assert np.isclose(got, want, rtol=1e-12)


def test_operators_build_core_nodes() -> None:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    s = dsl.param("s", dsl.R)
    xs = x.node
    assert (s - 1).node is ast.Add(ast.Var("s"), ast.Mul(ast.Const(-1.0), ast.Const(1.0)))
    assert (2 - s).node is ast.Add(ast.Const(2.0), ast.Mul(ast.Const(-1.0), ast.Var("s")))
    assert (-s).node is ast.Mul(ast.Const(-1.0), ast.Var("s"))
    assert (-dsl.const(2)).node is ast.Const(-2.0)
    assert (1 / s).node is ast.Mul(ast.Const(1.0), ast.Call("recip", (ast.Var("s"),), ()))
    assert (s ** 3).node is ast.Call("pow", (ast.Var("s"),), (3.0,))
    assert np.float64(2.0) * s is not None and (np.float64(2.0) * s).node is \
        ast.Mul(ast.Const(2.0), ast.Var("s"))
    assert x[N - 1 - 0].node is ast.Access(xs, (V("N") - 1,))
    g = dsl.gen(N, lambda i: x[N - 1 - i] * (i < 2) + x[2 * i + 1] * (i > 0))
    body = g.node.body
    assert body.a is ast.Iverson(ast.Cmp("<", V("i"), L(2)), ast.Access(xs, (V("N") - 1 - V("i"),)))
    assert body.b is ast.Iverson(ast.Cmp("<", L(0), V("i")), ast.Access(xs, (V("i") * 2 + 1,)))
    ge = dsl.gen(N, lambda i: (i >= 1) * 1.0)
    assert ge.node.body is ast.Iverson(ast.Cmp("<=", L(1), V("i")), ast.Const(1.0))
    both = dsl.gen(N, lambda i: ((i < 2) * (i == 1)) * s)
    assert both.node.body is ast.Iverson(ast.And(ast.Cmp("<", V("i"), L(2)),
                                                 ast.Cmp("==", V("i"), L(1))), ast.Var("s"))
    assert dsl.iverson(dsl.true).node is ast.Iverson(ast.PTrue(), ast.Const(1.0))
    assert (dsl.false * x).node is ast.Iverson(ast.PFalse(), xs)
    pr = dsl.pair(s, x, 1.0)
    assert pr.node is ast.Pair(ast.Var("s"), ast.Pair(xs, ast.Const(1.0)))
    assert pr.snd.fst.node is ast.Proj(ast.Proj(pr.node, 1), 0)
    assert dsl.proj(pr, 0).node is ast.Proj(pr.node, 0)
    assert dsl.pow(s, 0.5).node is ast.Call("pow", (ast.Var("s"),), (0.5,))
    assert dsl.builtin("dtanh", s).node is ast.Call("dtanh", (ast.Var("s"),), ())
    for fn in ("exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "sigmoid", "softplus",
               "abs", "relu", "square", "recip"):
        assert getattr(dsl, fn)(s).node is ast.Call(fn, (ast.Var("s"),), ())
    assert dsl.min(s, 2).node is ast.Call("min", (ast.Var("s"), ast.Const(2.0)), ())
    assert repr(s + 1) == "s + 1.0"


def test_binder_names_follow_lambdas_and_never_capture() -> None:
    N = dsl.size("N")
    A_ = dsl.param("A", dsl.R[N, N])
    # Same names in sibling scopes stay; an inner binder of the same name renames the outer.
    e = dsl.sum(N, lambda i: A_[i, i]) + dsl.sum(N, lambda i: A_[i, 0])
    assert e.node.a.idx == "i" and e.node.b.idx == "i"
    nested = dsl.gen(N, lambda i: dsl.sum(N, lambda i2: A_[i, i2]))
    assert nested.node.idx == "i" and nested.node.body.idx == "i2"
    shadow = dsl.gen(N, lambda i: dsl.sum(N, lambda i: A_[i, i]))   # python shadows too
    assert shadow.node.idx == "i1" and shadow.node.body.idx == "i"
    # An expression built outside, reused under a binder of the same name: no capture.
    outer = dsl.gen(N, lambda i: dsl.let(A_[i, 0], lambda v: dsl.sum(N, lambda i: v * A_[i, 1])))
    inner_sum = outer.node.body.body
    assert outer.node.idx != inner_sum.idx
    assert inner_sum.body is ast.Mul(ast.Var("v"),
                                     ast.Access(ast.Var("A"), (V(inner_sum.idx), L(1))))
    assert outer.node.body.value is ast.Access(ast.Var("A"), (V(outer.node.idx), L(0)))
    # Unusable lambda names get defaults.
    assert dsl.gen(N, lambda _: 1.0).node.idx == "i"
    assert dsl.gen(N, lambda R: 1.0).node.idx == "i"
    # Building twice gives the same nodes (hash-consing).
    assert dsl.gen(N, lambda i: A_[i, i]).node is dsl.gen(N, lambda i: A_[i, i]).node


def test_binders_named_like_parameters_are_renamed() -> None:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    y = dsl.param("y", dsl.R)
    d = dsl.function("f", [N, x, y], dsl.sum(N, lambda y: x[y]))   # y is a parameter
    assert d.body.idx != "y" and d.body.body is ast.Access(ast.Var("x"), (V(d.body.idx),))
    typecheck = pytest.importorskip("tensorlang.check.typecheck")
    typecheck.check_module([d])


def test_statements_and_lets() -> None:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    # A statement read by the body becomes a let of the spine, in creation order.
    s = dsl.bind("s", dsl.sum(N, lambda i: x[i]))
    m = dsl.bind("m", s * s)
    d = dsl.function("f", [N, x], dsl.gen(N, lambda i: x[i] * m))
    assert isinstance(d.body, ast.Let) and d.body.name == "s"
    assert d.body.body.name == "m" and d.body.body.value is ast.Mul(ast.Var("s"), ast.Var("s"))
    assert d.ret is None
    # A statement made inside a binder that reads its index is a let inside that body.
    g = dsl.gen(N, lambda i: dsl.bind("t", x[i] * x[i]) + dsl.bind("u", s))
    d2 = dsl.function("g", [N, x], g)
    assert d2.body.name == "s" and d2.body.body.name == "u"          # hoisted
    inner = d2.body.body.body
    assert isinstance(inner, ast.Gen) and inner.body is ast.Let(
        "t", ast.Mul(ast.Access(ast.Var("x"), (V("i"),)), ast.Access(ast.Var("x"), (V("i"),))),
        ast.Add(ast.Var("t"), ast.Var("u")))
    # dsl.let with several values nests.
    e = dsl.let(1.0, 2.0, lambda a, b: a * b)
    assert e.node is ast.Let("a", ast.Const(1.0), ast.Let("b", ast.Const(2.0),
                                                     ast.Mul(ast.Var("a"), ast.Var("b"))))
    out = interpret(d, {"N": 3, "x": np.array([1.0, 2.0, 3.0])})
    assert np.allclose(out, np.array([1.0, 2.0, 3.0]) * 36)


def test_tensor_arithmetic_and_calls_need_elaboration() -> None:
    elaborate = pytest.importorskip("tensorlang.check.elaborate")
    N = dsl.size("N")
    x, y = dsl.param("x", dsl.R[N]), dsl.param("y", dsl.R[N])
    a = dsl.param("a", dsl.R)
    norm = dsl.function("norm2", [N, x], dsl.sum(N, lambda i: x[i] * x[i]), ret=dsl.R)
    d = dsl.function("f", [N, x, y, a], (x + a * y) - y * y + dsl.call(norm, N, x) * x)
    assert not elaborate.is_core(d)
    c = dsl.core(d, [norm])
    assert elaborate.is_core(c) and isinstance(c.ret, ast.TArr)
    xv, yv = np.array([1.0, -2.0, 0.5]), np.array([0.25, 3.0, -1.0])
    got = interpret(c, {"N": 3, "x": xv, "y": yv, "a": 2.0})
    assert np.allclose(got, xv + 2.0 * yv - yv * yv + (xv @ xv) * xv)
    call = dsl.call(norm, N + 1, x).node
    assert call is ast.DefCall("norm2", (ast.Add(ast.Var("N"), ast.Const(1.0)), ast.Var("x")))


def test_relations_pairs_and_exists_evaluate() -> None:
    N = dsl.size("N")
    E = dsl.param("E", dsl.rel(N, N))
    p = dsl.param("p", (dsl.R[N], dsl.R))
    out = dsl.gen(N, lambda i: dsl.pair(
        dsl.sum(N, lambda j: E(i, j) * p.fst[j]),
        dsl.exists(N, lambda t: i == 2 * t) * p.snd))
    d = dsl.function("f", [N, E, p], out, ret=dsl.array(N, (dsl.R, dsl.R)))
    Ev = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1]], dtype=bool)
    v = np.array([1.0, 2.0, 4.0])
    first, second = interpret(d, {"N": 3, "E": Ev, "p": (v, 3.0)})
    assert np.allclose(first, Ev @ v) and np.allclose(second, [3.0, 0.0, 3.0])
    coo = np.argwhere(Ev)
    again = interpret(d, {"N": 3, "E": coo, "p": (v, 3.0)})
    assert np.allclose(again[0], first)


def test_api_accepts_dsl_defs() -> None:
    tl = pytest.importorskip("tensorlang.api")
    f = tl.from_def(build_qform())
    x, Am = np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    assert np.isclose(f.interpret(N=2, x=x, A=Am), x @ Am @ x)


def test_errors() -> None:
    N = dsl.size("N")
    x = dsl.param("x", dsl.R[N])
    with pytest.raises(DSLError, match="not a value"):     # `//` only indexes
        dsl.gen(N, lambda i: x[i] * (i // 2))
    with pytest.raises(DSLError, match="must be an index expression.*i \\* i"):
        dsl.gen(N, lambda i: x[i * i])            # a product of indices is a value
    with pytest.raises(DSLError, match="must be an index expression"):
        dsl.gen(N, lambda i: x[i * 2.5])
    with pytest.raises(DSLError, match="truth value"):
        dsl.gen(N, lambda i: x[i] if i < 2 else 0.0)
    with pytest.raises(DSLError, match="truth value"):
        bool(x)
    with pytest.raises(DSLError, match="2 argument"):
        dsl.sum(N, N, lambda i: x[i])
    with pytest.raises(DSLError, match="index expression"):
        x[x[0]]
    with pytest.raises(DSLError, match="slices"):
        x[0:2]
    with pytest.raises(DSLError, match="not iterable"):
        list(x)
    with pytest.raises(DSLError, match="size"):
        dsl.gen(N, lambda i: dsl.sum(i, lambda j: x[j]))
    escaped: list = []
    dsl.gen(N, lambda i: escaped.append(x[i]) or 1.0)
    with pytest.raises(DSLError, match="outside"):
        dsl.function("f", [N, x], escaped[0])
    y = dsl.param("y", dsl.R)
    with pytest.raises(DSLError, match="y is not a parameter"):
        dsl.function("f", [N, x], x[0] * y)
    with pytest.raises(DSLError, match="given twice"):
        dsl.function("f", [N, x, x], x[0])
    with pytest.raises(DSLError, match="name of a parameter"):
        dsl.function("f", [N, x], dsl.bind("x", 1.0))
    with pytest.raises(DSLError, match="two different statements"):
        dsl.function("f", [N, x], dsl.bind("t", 1.0) + dsl.bind("t", 2.0))
    with pytest.raises(DSLError, match="reserved"):
        dsl.param("sum", dsl.R)
    with pytest.raises(DSLError, match="identifier"):
        dsl.size("2N")
    E = dsl.param("E", dsl.rel(N, N))
    with pytest.raises(DSLError, match="takes 2 indices"):
        E(0)
    with pytest.raises(DSLError, match="not a type"):
        dsl.param("z", float)
    with pytest.raises(DSLError, match="unknown builtin"):
        dsl.builtin("nope", x[0])
    assert issubclass(DSLError, TLError) and issubclass(DSLError, TypeError)
