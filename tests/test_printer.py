"""The .tl printer: `to_tl` output parses back to the identical node; `to_unicode`."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from examples_util import EXAMPLE_FILES
from tensorlang.ir.ast import (
    BUILTINS, DERIVED_KINDS, Access, Add, Affine, And, Call, Cmp, Const, Def, DefCall,
    DerivedDef, Exists, Expr, Gen, IndexValue, Iverson, Let, Mul, Or, Pair, Param, PFalse, Proj,
    PTrue, RelCall, Sum, TArr, TPair, TReal, TRel, TSize, Var, map_fields, tensor,
)
from tensorlang.syntax.parser import (
    parse_affine, parse_expr, parse_module, parse_pred, parse_type,
)
from tensorlang.syntax.printer import to_tl, to_unicode
from tensorlang.testing import programs

a, b, c, x = (Var(n) for n in "abcx")
i, j, N = Affine.var("i"), Affine.var("j"), Affine.var("N")
P, Q = Cmp("<", i, j), Cmp("<=", j, N)
ONE, NEG = Const(1.0), Const(-1.0)


def roundtrip(e):
    return parse_expr(to_tl(e))


# ---------------------------------------------------------------------------------------------
# Exact output


@pytest.mark.parametrize("node, text", [
    (Mul(Iverson(P, a), b), "([i < j] * a) * b"),
    (Add(Sum("i", N, a), c), "(sum i:N. a) + c"),
    (Add(c, Sum("i", N, a)), "c + sum i:N. a"),
    (Mul(Sum("i", N, a), c), "(sum i:N. a) * c"),
    (Iverson(P, Mul(a, b)), "[i < j] * a * b"),
    (Mul(a, Iverson(P, Mul(b, c))), "a * [i < j] * b * c"),
    (Mul(Mul(a, Iverson(P, b)), c), "(a * [i < j] * b) * c"),
    (Mul(Iverson(P, ONE), b), "([i < j]) * b"),
    (Mul(a, Iverson(P, ONE)), "a * [i < j]"),
    (Iverson(P, ONE), "[i < j]"),
    (Iverson(P, Add(a, b)), "[i < j] * (a + b)"),
    (Add(a, Mul(NEG, b)), "a - b"),
    (Mul(NEG, a), "-a"),
    (Mul(NEG, Const(2.0)), "(-1.0) * 2.0"),
    (Const(-2.5), "(-2.5)"),
    (Mul(Const(-2.5), a), "(-2.5) * a"),
    (Mul(a, Mul(b, c)), "a * (b * c)"),
    (Mul(Mul(a, b), c), "a * b * c"),
    (Add(a, Add(b, c)), "a + (b + c)"),
    (Add(Mul(a, b), c), "a * b + c"),
    (Mul(Add(a, b), c), "(a + b) * c"),
    (Call("pow", (a,), (2.0,)), "a ** 2"),
    (Call("pow", (a,), (-0.5,)), "a ** -0.5"),
    (Call("pow", (Add(a, b),), (3.0,)), "(a + b) ** 3"),
    (Call("pow", (Const(-2.0),), (2.0,)), "(-2.0) ** 2"),
    (Mul(NEG, Call("pow", (a,), (2.0,))), "-a ** 2"),
    (Call("max", (a, b), ()), "max(a, b)"),
    (DefCall("f", (a, Sum("i", N, b))), "f(a, sum i:N. b)"),
    (Pair(a, Pair(b, c)), "(a, b, c)"),
    (Pair(Pair(a, b), c), "((a, b), c)"),
    (Proj(Proj(x, 0), 1), "x.0.1"),
    (Proj(Add(a, b), 0), "(a + b).0"),
    (Access(x, (i + j * 2 - 1, N - i)), "x[i + 2*j - 1, N - i]"),
    (Access(Access(x, (i,)), (j,)), "x[i][j]"),
    (Gen("i", N, Gen("j", N + 1, Access(x, (i, j)))), "gen i:N, j:N + 1. x[i, j]"),
    (Gen("i", N, Sum("j", N, a)), "gen i:N. sum j:N. a"),
    (Let("y", Sum("i", N, a), Add(Var("y"), b)), "let y = sum i:N. a in y + b"),
    (Add(Let("y", a, Var("y")), b), "(let y = a in y) + b"),
    (Iverson(And(P, Q), a), "[i < j and j <= N] * a"),
    (Iverson(Or(P, And(Q, P)), a), "[i < j or j <= N and i < j] * a"),
    (Iverson(And(Or(P, Q), P), a), "[(i < j or j <= N) and i < j] * a"),
    (Iverson(Or(P, Cmp("<", j, i)), a), "[i != j] * a"),
    (Iverson(And(Exists("t", N, Cmp("==", i, Affine.var("t") * 2)), P), a),
     "[(exists t:N. i == 2*t) and i < j] * a"),
    (Iverson(And(P, Exists("t", N, RelCall("E", (i, Affine.var("t"))))), a),
     "[i < j and exists t:N. E(i, t)] * a"),
    (Iverson(PTrue(), a), "[true] * a"),
    (Iverson(PFalse(), ONE), "[false]"),
])
def test_exact_text(node, text):
    assert to_tl(node) == text
    assert parse_expr(text) is node


@pytest.mark.parametrize("aff, text", [
    (i + j * 2 - 1, "i + 2*j - 1"), (-i, "-i"), (Affine.lit(0), "0"), (Affine.lit(-3), "-3"),
    (N - i * 3 + 4, "N - 3*i + 4"), (i * -2, "-2*i")])
def test_affine_text(aff, text):
    assert to_tl(aff) == text
    assert parse_affine(text) is aff


@pytest.mark.parametrize("t, text", [
    (TReal(), "R"), (tensor([N, N + 1]), "R[N, N + 1]"), (TPair(TReal(), tensor([N])),
                                                         "(R, R[N])"),
    (TPair(TReal(), TPair(TReal(), TReal())), "(R, R, R)"),
    (TArr(N, TPair(TReal(), TReal())), "[N] (R, R)"), (TSize(), "size"),
    (TRel((N, N)), "rel(N, N)"), (TRel(()), "rel()")])
def test_type_text(t, text):
    assert to_tl(t) == text
    assert parse_type(text) is t


def test_predicates_print():
    assert to_tl(Cmp("<=", i, j - 1)) == "i <= j - 1"
    assert parse_pred(to_tl(Exists("t", N, P))) is Exists("t", N, P)


def test_def_prints_statements_and_return():
    body = Let("y", Gen("i", N, Sum("j", N, Access(Var("A"), (i, j)))),
               Let("s", Add(a, Let("z", b, Var("z"))), Var("s")))
    d = Def("f", (Param("N", TSize()), Param("A", tensor([N, N])), Param("a", TReal()),
                  Param("b", TReal())), tensor([N]), body)
    text = to_tl(d)
    assert text == ("def f(N: size, A: R[N, N], a: R, b: R) -> R[N]:\n"
                    "    y[i:N] = sum j:N. A[i, j]\n"
                    "    s = a + let z = b in z\n"
                    "    return s\n")
    assert parse_module(text) == [d]
    no_ret = Def("g", (), None, ONE)
    assert to_tl(no_ret) == "def g():\n    return 1.0\n"
    assert parse_module(to_tl(no_ret))[0] is no_ret


@pytest.mark.parametrize("kind", DERIVED_KINDS)
def test_derived_defs_print(kind):
    dd = DerivedDef("h", kind, "f", ("x", "y"))
    assert to_tl(dd) == f"def h = {kind}(f, x, y)\n"
    assert to_tl(DerivedDef("h", kind, "f", ())) == f"def h = {kind}(f)\n"
    assert parse_module(to_tl([dd]))[0] is dd


def test_param_prints():
    assert to_tl(Param("x", tensor([N]))) == "x: R[N]"


def test_floats_round_trip_with_repr():
    for v in (0.1, 1 / 3, 1e-300, 5e-324, 1.7976931348623157e308, 1e16, 123456789.0, -0.1,
              math.inf, -math.inf, 2.0 ** 0.5):
        assert roundtrip(Const(v)) is Const(v)
        assert roundtrip(Call("pow", (a,), (v,))) is Call("pow", (a,), (v,))
    with pytest.raises(ValueError):
        to_tl(Const(math.nan))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_round_trip(path):
    defs = parse_module(path.read_text(), str(path))
    again = parse_module(to_tl(defs))
    assert len(again) == len(defs) and all(p is q for p, q in zip(again, defs))


def test_unicode():
    e = Sum("i", N, Iverson(And(Cmp("<=", i, j), Or(P, Cmp("<", j, i))),
                            Mul(a, Gen("j", N, b))))
    text = to_unicode(e)
    assert text == "Σ i:N. [i ≤ j ∧ i ≠ j]·a·⊞ j:N. b"
    assert to_unicode(Iverson(Exists("t", N, Or(P, Q)), ONE)) == "[∃ t:N. i < j ∨ j ≤ N]"
    (d,) = parse_module("def f(N: size, x: R[N]) -> R:\n    y = gen i:N. x[i]\n"
                        "    return sum i:N. y[i] * y[i]\n")
    assert to_unicode(d) == ("def f(N: size, x: R[N]) -> R:\n    y[i:N] = x[i]\n"
                             "    return Σ i:N. y[i]·y[i]\n")


# ---------------------------------------------------------------------------------------------
# Property: parse(to_tl(node)) is node, on random core nodes


_NAMES = st.sampled_from(["a", "b", "x", "y_1", "N", "i", "j", "_t", "R", "t_12", "ab"])
_IDX = st.sampled_from(["i", "j", "k", "N", "M", "i_1"])
_FNS = st.sampled_from(["f", "g2", "conv"])
_FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 1e300, math.inf]),
                    st.floats(allow_nan=False))

affines = st.builds(lambda terms, k: Affine(terms, k),
                    st.lists(st.tuples(_IDX, st.integers(-3, 3)), max_size=3),
                    st.integers(-4, 4))

preds = st.recursive(
    st.one_of(st.just(PTrue()), st.just(PFalse()),
              st.builds(Cmp, st.sampled_from(Cmp.OPS), affines, affines),
              st.builds(RelCall, st.sampled_from(["E", "F"]),
                        st.lists(affines, max_size=3).map(tuple))),
    lambda ch: st.one_of(st.builds(And, ch, ch), st.builds(Or, ch, ch),
                         st.builds(Exists, _IDX, affines, ch),
                         st.builds(lambda u, v: Or(Cmp("<", u, v), Cmp("<", v, u)),
                                   affines, affines)),
    max_leaves=6)

_UNARY = sorted(f for f, (n, p) in BUILTINS.items() if (n, p) == (1, 0))
_BINARY = sorted(f for f, (n, p) in BUILTINS.items() if (n, p) == (2, 0))


def _expr_children(ch):
    return st.one_of(
        st.builds(Add, ch, ch), st.builds(Mul, ch, ch),
        st.builds(lambda e: Mul(NEG, e), ch),
        st.builds(lambda e: Add(e, Mul(NEG, e)), ch),
        st.builds(lambda f, e: Call(f, (e,), ()), st.sampled_from(_UNARY), ch),
        st.builds(lambda f, e, g: Call(f, (e, g), ()), st.sampled_from(_BINARY), ch, ch),
        st.builds(lambda e, k: Call("pow", (e,), (k,)), ch, _FLOATS),
        st.builds(Pair, ch, ch), st.builds(Proj, ch, st.sampled_from([0, 1])),
        st.builds(Gen, _IDX, affines, ch), st.builds(Sum, _IDX, affines, ch),
        st.builds(Access, ch, st.lists(affines, min_size=1, max_size=3).map(tuple)),
        st.builds(Iverson, preds, ch), st.builds(lambda p: Iverson(p, ONE), preds),
        # products around brackets: the printer's most delicate parenthesisation
        st.builds(lambda p, e, f: Mul(Iverson(p, e), f), preds, ch, ch),
        st.builds(lambda p, e, f, g: Mul(Mul(e, Iverson(p, f)), g), preds, ch, ch, ch),
        st.builds(Let, _NAMES, ch, ch),
        st.builds(DefCall, _FNS, st.lists(ch, max_size=3).map(tuple)))


exprs = st.recursive(st.one_of(st.builds(Var, _NAMES), st.builds(Const, _FLOATS)),
                     _expr_children, max_leaves=14)

types = st.recursive(st.just(TReal()),
                     lambda ch: st.one_of(st.builds(TArr, affines, ch),
                                          st.builds(TPair, ch, ch)),
                     max_leaves=5)
param_types = st.one_of(types, st.just(TSize()),
                        st.builds(TRel, st.lists(affines, max_size=3).map(tuple)))


@st.composite
def defs(draw):
    params = tuple(Param(n, draw(param_types)) for n in draw(
        st.lists(_NAMES, max_size=4, unique=True)))
    ret = draw(st.one_of(st.none(), types))
    body = draw(exprs)
    for name, value in reversed(draw(st.lists(st.tuples(_NAMES, exprs), max_size=3))):
        body = Let(name, value, body)
    return Def(draw(_FNS), params, ret, body)


derived = st.builds(DerivedDef, _FNS, st.sampled_from(DERIVED_KINDS), _FNS,
                    st.lists(_NAMES, max_size=3).map(tuple))


@given(exprs)
def test_expr_round_trip(e):
    assert parse_expr(to_tl(e)) is e
    to_unicode(e)


@given(preds)
def test_pred_round_trip(p):
    assert parse_pred(to_tl(p)) is p


@given(affines)
def test_affine_round_trip(aff):
    assert parse_affine(to_tl(aff)) is aff


@given(param_types)
def test_type_round_trip(t):
    assert parse_type(to_tl(t)) is t


@given(st.lists(st.one_of(defs(), derived), max_size=3))
def test_module_round_trip(ds):
    again = parse_module(to_tl(ds))
    assert len(again) == len(ds) and all(p is q for p, q in zip(again, ds))
    to_unicode(ds)


def _surface(e):
    """`e` as the parser reads its printed text: an index value (SPEC 12) prints as its affine
    text, which parses as arithmetic on names (the checker folds it back to the value)."""
    if isinstance(e, IndexValue):
        return parse_expr(to_tl(e))
    return map_fields(e, lambda c: _surface(c) if isinstance(c, Expr) else c)


@given(programs())
def test_generated_programs_round_trip(program):
    d = program[0]
    (again,) = parse_module(to_tl(d))
    assert again is _surface(d)
    to_unicode(d)
