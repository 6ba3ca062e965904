"""The reference interpreter (SPEC 2.2) and the builtin table (SPEC 2.3)."""
from __future__ import annotations

import itertools
import random
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang.semantics import builtins
from tensorlang.syntax.errors import ShapeError, TLError
from tensorlang.semantics.interp import eval_expr, interpret
from scalar_reference import interpret_reference

V = ast.Affine.var
R = ast.REAL
SIZE = ast.TSize()


def aff(x: Any) -> ast.Affine:
    return V(x) if isinstance(x, str) else (x if isinstance(x, ast.Affine) else ast.Affine.lit(x))


def acc(name: str, *idx: Any) -> ast.Expr:
    return ast.Access(ast.Var(name), tuple(aff(i) for i in idx))


def call(fn: str, args: tuple[ast.Expr, ...], params: tuple[float, ...] = ()) -> ast.Expr:
    return ast.Call(fn, args, params)


def mk(params: list[tuple[str, ast.Type]], body: ast.Expr, name: str = "f") -> ast.Def:
    return ast.Def(name, tuple(ast.Param(n, t) for n, t in params), None, body)


def vec(n: Any) -> ast.Type:
    return ast.tensor([aff(n)])


def mat(n: Any, m: Any) -> ast.Type:
    return ast.tensor([aff(n), aff(m)])


def same(a: Any, b: Any) -> bool:
    """Equal structure, shapes, NaN patterns; values within rtol 1e-9."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(a, float) != isinstance(b, float):
        return False
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True))


# ---------------------------------------------------------------------------------------------
# Constructs


def test_qform_matches_numpy_and_returns_float() -> None:
    y = ast.Gen("i", V("N"), ast.Sum("j", V("N"), ast.Mul(acc("A", "i", "j"), acc("x", "j"))))
    d = mk([("N", SIZE), ("x", vec("N")), ("A", mat("N", "N"))],
           ast.Let("y", y, ast.Sum("i", V("N"), ast.Mul(acc("x", "i"), acc("y", "i")))))
    rng = np.random.default_rng(1)
    x, M = rng.standard_normal(7), rng.standard_normal((7, 7))
    out = interpret(d, {"N": 7, "x": x, "A": M})
    assert isinstance(out, float)
    assert out == pytest.approx(x @ M @ x, rel=1e-12)


def test_gen_stacks_and_results_are_fresh_c_order_arrays() -> None:
    # gen i:N, j:M. x[i] * 10 + j  (body independent of j in the first factor)
    body = ast.Gen("i", V("N"), ast.Gen("j", V("M"), ast.Add(
        ast.Mul(acc("x", "i"), ast.Const(10.0)), acc("y", "j"))))
    d = mk([("N", SIZE), ("M", SIZE), ("x", vec("N")), ("y", vec("M"))], body)
    x, y = np.arange(3.0), np.arange(4.0)
    out = interpret(d, {"N": 3, "M": 4, "x": x, "y": y})
    np.testing.assert_array_equal(out, 10 * x[:, None] + y[None, :])
    assert out.flags.c_contiguous and out.flags.writeable and out.dtype == np.float64
    const = interpret(mk([("N", SIZE)], ast.Gen("i", V("N"), ast.Const(2.5))), {"N": 3})
    np.testing.assert_array_equal(const, [2.5, 2.5, 2.5])
    const[0] = 0.0  # writable even though the body does not depend on i


def test_sum_adds_values_left_to_right() -> None:
    d = mk([("N", SIZE), ("x", vec("N"))], ast.Sum("i", V("N"), acc("x", "i")))
    x = np.array([1e16, 1.0, -1e16, 1.0])
    # Sequential: ((1e16 + 1) - 1e16) + 1 = 1 (pairwise summation would give 0 or 2).
    assert interpret(d, {"N": 4, "x": x}) == ((1e16 + 1.0) - 1e16) + 1.0
    inv = mk([("N", SIZE)], ast.Sum("i", V("N"), ast.Const(0.1)))
    assert interpret(inv, {"N": 3}) == (0.1 + 0.1) + 0.1


def test_call_pair_proj_let() -> None:
    pair = ast.Pair(call("exp", (ast.Var("s"),)), call("pow", (ast.Var("s"),), (3.0,)))
    body = ast.Let("p", pair,
                   ast.Add(ast.Proj(ast.Var("p"), 0), call("max", (ast.Proj(ast.Var("p"), 1),
                                                                   ast.Const(1.0)))))
    d = mk([("s", R)], body)
    assert interpret(d, {"s": 2.0}) == pytest.approx(np.exp(2.0) + 8.0)
    assert interpret(d, {"s": 0.5}) == pytest.approx(np.exp(0.5) + 1.0)


def test_let_bound_outside_binders_is_read_inside() -> None:
    # let t = gen i:N. x[i] * x[i] in gen i:N, j:N. t[i] + t[j]
    t = ast.Gen("i", V("N"), ast.Mul(acc("x", "i"), acc("x", "i")))
    body = ast.Let("t", t, ast.Gen("i", V("N"), ast.Gen("j", V("N"), ast.Add(acc("t", "i"),
                                                                    acc("t", "j")))))
    x = np.array([1.0, 2.0, 3.0])
    out = interpret(mk([("N", SIZE), ("x", vec("N"))], body), {"N": 3, "x": x})
    np.testing.assert_array_equal(out, (x**2)[:, None] + (x**2)[None, :])


def test_let_inside_binders_and_shadowing() -> None:
    # gen i:N. let x = x[i] * 2 in gen i:2. x + i   (inner i shadows the outer one)
    inner = ast.Gen("i", aff(2), ast.Add(ast.Var("x"), ast.Sum("k", aff(1), ast.Const(0.0))))
    body = ast.Gen("i", V("N"), ast.Let("x", ast.Mul(acc("x", "i"), ast.Const(2.0)), inner))
    x = np.array([1.0, 5.0])
    out = interpret(mk([("N", SIZE), ("x", vec("N"))], body), {"N": 2, "x": x})
    np.testing.assert_array_equal(out, [[2.0, 2.0], [10.0, 10.0]])
    # gen i:3. gen i:2. x[i]: the inner i is the one used
    sh = ast.Gen("i", aff(3), ast.Gen("i", aff(2), acc("x", "i")))
    out = interpret(mk([("x", vec(2))], sh), {"x": np.array([7.0, 8.0])})
    np.testing.assert_array_equal(out, [[7.0, 8.0]] * 3)


def test_exists_and_relations_predicates() -> None:
    # gen k:N. [exists t:N. k == 2*t] * 1   (k even)
    even = ast.Exists("t", V("N"), ast.Cmp("==", V("k"), V("t") * 2))
    d = mk([("N", SIZE)], ast.Gen("k", V("N"), ast.Iverson(even, ast.Const(1.0))))
    np.testing.assert_array_equal(interpret(d, {"N": 5}), [1, 0, 1, 0, 1])
    np.testing.assert_array_equal(interpret(d, {"N": 0}), np.zeros(0))
    # exists over an empty range is false, even with a true body
    ex0 = ast.Iverson(ast.Exists("t", aff(0), ast.PTrue()), ast.Const(1.0))
    assert interpret(mk([], ex0), {}) == 0.0
    ors = ast.Iverson(ast.Or(ast.Cmp("<", V("i"), aff(1)), ast.And(ast.Cmp("<=", aff(3), V("i")),
                                                                   ast.PTrue())), ast.Const(1.0))
    np.testing.assert_array_equal(interpret(mk([], ast.Gen("i", aff(5), ors)), {}),
                                  [1, 0, 0, 1, 1])


# ---------------------------------------------------------------------------------------------
# Zero extension


def test_zero_extension_full_access() -> None:
    # gen i:N+2. x[i - 1]
    d = mk([("N", SIZE), ("x", vec("N"))], ast.Gen("i", V("N") + 2, acc("x", V("i") - 1)))
    out = interpret(d, {"N": 3, "x": np.array([1.0, 2.0, 3.0])})
    np.testing.assert_array_equal(out, [0, 1, 2, 3, 0])
    # constant out-of-range index at top level
    assert interpret(mk([("x", vec(2))], acc("x", 5)), {"x": np.ones(2)}) == 0.0
    assert interpret(mk([("x", vec(2))], acc("x", -1)), {"x": np.ones(2)}) == 0.0


def test_zero_extension_partial_access_gives_zero_subtensor() -> None:
    # gen i:N+1. A[i]   (rows; the last one is a whole zero row)
    d = mk([("N", SIZE), ("A", mat("N", 2))], ast.Gen("i", V("N") + 1, acc("A", "i")))
    M = np.arange(6.0).reshape(3, 2) + 1
    np.testing.assert_array_equal(interpret(d, {"N": 3, "A": M}), np.vstack([M, [0, 0]]))
    top = mk([("A", mat(3, 2))], acc("A", 7))
    np.testing.assert_array_equal(interpret(top, {"A": M}), [0.0, 0.0])
    # an access of an empty tensor is zero
    d0 = mk([("N", SIZE), ("x", vec("N"))], ast.Gen("i", aff(2), acc("x", "i")))
    np.testing.assert_array_equal(interpret(d0, {"N": 0, "x": np.zeros(0)}), [0.0, 0.0])


def test_access_of_gen_and_scaled_indices() -> None:
    # (gen i:N. x[2*i])[j] for j in 0..N: odd and out-of-range reads are 0
    inner = ast.Gen("i", V("N"), acc("x", V("i") * 2))
    d = mk([("N", SIZE), ("x", vec("N"))],
           ast.Gen("j", V("N") + 1, ast.Access(inner, (V("j"),))))
    out = interpret(d, {"N": 4, "x": np.array([1.0, 2.0, 3.0, 4.0])})
    np.testing.assert_array_equal(out, [1.0, 3.0, 0.0, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# Iverson brackets


def test_iverson_does_not_leak_nan_or_inf() -> None:
    log0 = call("log", (ast.Const(0.0),))
    assert interpret(mk([], ast.Iverson(ast.PFalse(), log0)), {}) == 0.0
    assert interpret(mk([], ast.Iverson(ast.PTrue(), log0)), {}) == -np.inf
    # [false] * (log 0 - log 0) is 0, not nan
    nan = ast.Add(log0, ast.Mul(ast.Const(-1.0), log0))
    assert interpret(mk([], ast.Iverson(ast.PFalse(), nan)), {}) == 0.0
    # vectorised: gen i:N. [i > 0] * log(x[i]) with x[0] = 0 and x[1] < 0 masked below
    guard = ast.Cmp("<", aff(1), V("i"))
    d = mk([("N", SIZE), ("x", vec("N"))],
           ast.Gen("i", V("N"), ast.Iverson(guard, call("log", (acc("x", "i"),)))))
    out = interpret(d, {"N": 3, "x": np.array([0.0, -1.0, np.e])})
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0])
    # recip(0) = inf masked inside a sum
    s = ast.Sum("i", V("N"), ast.Iverson(ast.Cmp("<", aff(0), V("i")),
                                         call("recip", (acc("x", "i"),))))
    assert interpret(mk([("N", SIZE), ("x", vec("N"))], s),
                     {"N": 3, "x": np.array([0.0, 2.0, 4.0])}) == 0.75


def test_iverson_over_tensors_and_pairs() -> None:
    # [i == 1] * (row i, x[i]) over a tensor of pairs
    body = ast.Gen("i", aff(3), ast.Iverson(ast.Cmp("==", V("i"), aff(1)),
                                            ast.Pair(acc("A", "i"), acc("x", "i"))))
    M = np.arange(6.0).reshape(3, 2)
    out = interpret(mk([("A", mat(3, 2)), ("x", vec(3))], body),
                    {"A": M, "x": np.array([4.0, 5.0, 6.0])})
    np.testing.assert_array_equal(out[0], [[0, 0], [2, 3], [0, 0]])
    np.testing.assert_array_equal(out[1], [0, 5, 0])
    # an all-false bracket gives the zero of a tensor type without evaluating
    zero = interpret(mk([("A", mat(3, 2))],
                        ast.Iverson(ast.PFalse(), ast.Gen("j", aff(4), acc("A", 0)))),
                     {"A": M})
    np.testing.assert_array_equal(zero, np.zeros((4, 2)))


def test_all_false_bracket_short_circuits_expensive_body() -> None:
    # [N < 0] * sum i,j,k:N. x[i]*x[j]*x[k] at N = 400 would be 64M points if evaluated.
    n3 = ast.Sum("i", V("N"), ast.Sum("j", V("N"), ast.Sum("k", V("N"), ast.Mul(
        acc("x", "i"), ast.Mul(acc("x", "j"), acc("x", "k"))))))
    d = mk([("N", SIZE), ("x", vec("N"))], ast.Iverson(ast.Cmp("<", V("N"), aff(0)), n3))
    t = time.perf_counter()
    assert interpret(d, {"N": 400, "x": np.ones(400)}) == 0.0
    assert time.perf_counter() - t < 1.0


# ---------------------------------------------------------------------------------------------
# Sizes, pairs, relations, arguments


def test_empty_sizes() -> None:
    d = mk([("N", SIZE), ("M", SIZE), ("A", mat("N", "M"))],
           ast.Gen("i", V("N"), ast.Gen("j", V("M"), ast.Mul(acc("A", "i", "j"), ast.Const(2.0)))))
    assert interpret(d, {"N": 0, "M": 3, "A": np.zeros((0, 3))}).shape == (0, 3)
    assert interpret(d, {"N": 2, "M": 0, "A": np.zeros((2, 0))}).shape == (2, 0)
    s = mk([("N", SIZE), ("x", vec("N"))], ast.Sum("i", V("N"), call("log", (acc("x", "i"),))))
    assert interpret(s, {"N": 0, "x": np.zeros(0)}) == 0.0
    # a body that does not depend on the (empty) index is not evaluated: no nan from 0 * inf
    inv = mk([("N", SIZE)], ast.Sum("i", V("N"), call("log", (ast.Const(0.0),))))
    assert interpret(inv, {"N": 0}) == 0.0
    # a negative size expression is an empty range
    neg = mk([("N", SIZE)], ast.Gen("i", V("N") - 5, ast.Const(1.0)))
    assert interpret(neg, {"N": 2}).shape == (0,)


def test_pairs_and_tensor_of_pairs_are_struct_of_arrays() -> None:
    # q : [N](R, R) given as (q0, q1); return gen i:N. (q[i].1, q[i].0 * p.0)
    pt = ast.TPair(R, vec("N"))
    qt = ast.TArr(V("N"), ast.TPair(R, R))
    body = ast.Gen("i", V("N"), ast.Pair(
        ast.Proj(acc("q", "i"), 1), ast.Mul(ast.Proj(acc("q", "i"), 0), ast.Proj(ast.Var("p"), 0))))
    d = mk([("N", SIZE), ("p", pt), ("q", qt)], body)
    q = (np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    out = interpret(d, {"N": 2, "p": (10.0, np.zeros(2)), "q": q})
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_array_equal(out[0], [3.0, 4.0])
    np.testing.assert_array_equal(out[1], [10.0, 20.0])
    # a pair result with a scalar component is (float, array)
    res = interpret(mk([("N", SIZE), ("p", pt)], ast.Var("p")), {"N": 2, "p": (1, [1, 2])})
    assert isinstance(res[0], float) and res[1].dtype == np.float64
    # out-of-range access of a tensor of pairs reads a pair of zeros
    oob = mk([("N", SIZE), ("q", qt)], acc("q", 5))
    assert interpret(oob, {"N": 2, "q": q}) == (0.0, 0.0)


REL_PROG = mk([("N", SIZE), ("M", SIZE), ("E", ast.TRel((V("N"), V("M")))),
               ("A", mat("N", "M"))],
              ast.Gen("i", V("N") + 1, ast.Sum("j", V("M") + 1, ast.Iverson(
                  ast.RelCall("E", (V("i"), V("j"))),
                  ast.Add(acc("A", "i", "j"), ast.Const(1.0))))))


def test_relations_mask_and_coordinates_agree() -> None:
    A_ = np.arange(6.0).reshape(2, 3)
    mask = np.array([[True, False, True], [False, False, True]])
    coords = np.array([[0, 0], [0, 2], [1, 2]])
    want = [A_[0, 0] + 1 + A_[0, 2] + 1, A_[1, 2] + 1, 0.0]   # row N is outside: false
    for rel in (mask, coords, coords.tolist()):
        out = interpret(REL_PROG, {"N": 2, "M": 3, "E": rel, "A": A_})
        np.testing.assert_array_equal(out, want)
    empty = interpret(REL_PROG, {"N": 2, "M": 3, "E": np.zeros((0, 2), int), "A": A_})
    np.testing.assert_array_equal(empty, [0.0, 0.0, 0.0])


def test_relation_errors() -> None:
    base = {"N": 2, "M": 3, "A": np.zeros((2, 3))}
    with pytest.raises(ShapeError, match=r"'E'.*\(2, 3\).*\(3, 3\)"):
        interpret(REL_PROG, {**base, "E": np.zeros((3, 3), bool)})
    with pytest.raises(ShapeError, match=r"coordinate \(2, 0\) is outside"):
        interpret(REL_PROG, {**base, "E": np.array([[2, 0]])})
    with pytest.raises(ShapeError, match=r"'E'"):
        interpret(REL_PROG, {**base, "E": np.array([[0.5, 1.0]])})


def test_shape_errors_name_parameter_and_both_shapes() -> None:
    d = mk([("N", SIZE), ("x", vec("N")), ("A", mat("N", V("N") + 1))], ast.Const(0.0))
    with pytest.raises(ShapeError, match=r"'A'.*expected shape \(3, 4\).*got shape \(3, 3\)"):
        interpret(d, {"N": 3, "x": np.zeros(3), "A": np.zeros((3, 3))})
    with pytest.raises(ShapeError, match=r"'x'.*\(3,\).*\(2,\)"):
        interpret(d, {"N": 3, "x": np.zeros(2), "A": np.zeros((3, 4))})
    pair = mk([("p", ast.TPair(R, vec(2)))], ast.Const(0.0))
    with pytest.raises(ShapeError, match=r"'p\.1'.*\(2,\).*\(3,\)"):
        interpret(pair, {"p": (1.0, np.zeros(3))})
    with pytest.raises(ShapeError, match=r"'p'.*pair"):
        interpret(pair, {"p": 1.0})
    with pytest.raises(ShapeError, match=r"'s'.*\(\).*\(2,\)"):
        interpret(mk([("s", R)], ast.Var("s")), {"s": np.zeros(2)})


def test_missing_and_bad_arguments() -> None:
    d = mk([("N", SIZE), ("x", vec("N"))], ast.Const(0.0))
    with pytest.raises(TLError, match="missing argument 'x'"):
        interpret(d, {"N": 1})
    with pytest.raises(TLError, match="missing size argument 'N'"):
        interpret(d, {"x": np.zeros(1)})
    with pytest.raises(TLError, match="unexpected argument"):
        interpret(d, {"N": 1, "x": np.zeros(1), "y": 2.0})
    with pytest.raises(TLError, match="non-negative"):
        interpret(d, {"N": -1, "x": np.zeros(0)})
    with pytest.raises(TLError, match="integer"):
        interpret(d, {"N": 1.5, "x": np.zeros(1)})


def test_non_core_programs_are_rejected() -> None:
    tensor_add = mk([("x", vec(2))], ast.Add(ast.Var("x"), ast.Var("x")))
    with pytest.raises(TLError, match="scalar operands"):
        interpret(tensor_add, {"x": np.zeros(2)})
    with pytest.raises(TLError, match="inlined"):
        interpret(mk([], ast.DefCall("g", ())), {})
    with pytest.raises(TLError, match="unknown builtin"):
        interpret(mk([], call("frobnicate", (ast.Const(1.0),))), {})


def test_eval_expr_with_plain_mapping() -> None:
    e = ast.Sum("i", V("N"), ast.Iverson(ast.RelCall("F", (V("i"),)), acc("x", "i")))
    env = {"N": 3, "F": np.array([True, False, True]), "x": np.array([1.0, 2.0, 4.0])}
    assert eval_expr(e, env) == 5.0
    assert eval_expr(ast.Proj(ast.Var("p"), 1), {"p": (1.0, 2.0)}) == 2.0


# ---------------------------------------------------------------------------------------------
# Performance at realistic sizes


def test_realistic_programs_at_n200_are_fast() -> None:
    n, k = 200, 5
    rng = np.random.default_rng(2)
    x, M, w = rng.standard_normal(n + k - 1), rng.standard_normal((n, n)), rng.standard_normal(k)
    conv = mk([("N", SIZE), ("K", SIZE), ("x", vec(V("N") + V("K") - 1)), ("w", vec("K"))],
              ast.Gen("i", V("N"), ast.Sum("k", V("K"), ast.Mul(acc("w", "k"),
                                                                acc("x", V("i") + V("k"))))))
    triple = mk([("N", SIZE), ("K", SIZE), ("A", mat("N", "N")), ("w", vec("K"))],
                ast.Sum("i", V("N"), ast.Sum("j", V("N"), ast.Sum("k", V("K"), ast.Iverson(
                    ast.Cmp("<=", V("j") + V("k"), V("i")),
                    ast.Mul(acc("A", "i", V("j") + V("k")), acc("w", "k")))))))
    matmul = mk([("N", SIZE), ("A", mat("N", "N"))], ast.Gen("i", V("N"), ast.Gen(
        "j", V("N"), ast.Sum("k", V("N"), ast.Mul(acc("A", "i", "k"), acc("A", "k", "j"))))))
    t = time.perf_counter()
    got = interpret(conv, {"N": n, "K": k, "x": x, "w": w})
    np.testing.assert_allclose(got, np.correlate(x, w, mode="valid"), rtol=1e-12)
    tri = interpret(triple, {"N": n, "K": k, "A": M, "w": w})
    want = sum(M[i, j + kk] * w[kk] for i in range(n) for kk in range(k)
               for j in range(max(0, i - kk + 1)) if j + kk < n)
    assert tri == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(interpret(matmul, {"N": n, "A": M}), M @ M, rtol=1e-9)
    assert time.perf_counter() - t < 5.0


# ---------------------------------------------------------------------------------------------
# Random programs: vectorised interpreter vs the scalar reference


class ProgramGen:
    """Random well-typed core programs over a fixed parameter list (tests only)."""

    PARAMS: list[tuple[str, ast.Type]] = [
        ("N", SIZE), ("M", SIZE), ("s", R), ("x", vec("N")), ("y", vec(V("M") + 1)),
        ("A", mat("N", "M")), ("p", ast.TPair(R, vec("N"))),
        ("q", ast.TArr(V("M"), ast.TPair(R, R))),
        ("E", ast.TRel((V("N"), V("M")))), ("F", ast.TRel((V("N"),))),
    ]
    SIZES = [V("N"), V("M"), V("N") + 1, ast.Affine.lit(2)]
    FUNCS = ["exp", "log", "sin", "tanh", "sqrt", "sigmoid", "softplus", "abs", "relu",
             "square", "recip", "pow", "max", "min"]

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.count = 0

    def fresh(self, stem: str, taken: list[str]) -> str:
        if taken and self.rng.random() < 0.15:
            return self.rng.choice(taken)          # shadow an outer binder
        self.count += 1
        return f"{stem}{self.count}"

    def affine(self, idxs: list[str]) -> ast.Affine:
        """Mostly in-range reads (a bound index, maybe shifted), sometimes anything."""
        r = self.rng
        k = r.random()
        if idxs and k < 0.5:
            return V(r.choice(idxs))
        if idxs and k < 0.7:
            return V(r.choice(idxs)) + r.choice([-1, 1])
        if k < 0.85:
            return ast.Affine.lit(r.randint(0, 2))
        out = ast.Affine.lit(r.randint(-1, 2))
        for _ in range(r.randint(1, 2)):
            out = out + V(r.choice(idxs + ["N", "M"])) * r.choice([-1, 1, 2])
        return out

    def typ(self, depth: int = 0) -> ast.Type:
        r = self.rng.random()
        if r < 0.45 or depth > 1:
            return R
        if r < 0.75:
            return ast.TArr(self.rng.choice(self.SIZES), self.typ(depth + 1))
        return ast.TPair(self.typ(depth + 1), self.typ(depth + 1))

    def pred(self, idxs: list[str], budget: int) -> ast.Pred:
        r = self.rng
        k = r.randrange(7 if budget > 0 else 4)
        if k == 0:
            return r.choice([ast.PTrue(), ast.PFalse()])
        if k == 1:
            return ast.Cmp(r.choice(ast.Cmp.OPS), self.affine(idxs), self.affine(idxs))
        if k == 2:
            return ast.RelCall("E", (self.affine(idxs), self.affine(idxs)))
        if k == 3:
            return ast.RelCall("F", (self.affine(idxs),))
        if k == 4:
            return ast.And(self.pred(idxs, budget - 1), self.pred(idxs, budget - 1))
        if k == 5:
            return ast.Or(self.pred(idxs, budget - 1), self.pred(idxs, budget - 1))
        i = self.fresh("t", idxs)
        return ast.Exists(i, r.choice(self.SIZES), self.pred(idxs + [i], budget - 1))

    def leaf(self, t: ast.Type, scope: dict[str, ast.Type], idxs: list[str]) -> ast.Expr:
        r = self.rng
        have = [v for v, vt in scope.items() if vt is t]
        if have and r.random() < 0.4:
            return ast.Var(r.choice(have))
        if isinstance(t, ast.TReal):
            return r.choice([
                lambda: ast.Const(r.choice([0.0, 1.0, -1.5, 0.5, 2.0])),
                lambda: ast.Access(ast.Var("x"), (self.affine(idxs),)),
                lambda: ast.Access(ast.Var("y"), (self.affine(idxs),)),
                lambda: ast.Access(ast.Var("A"), (self.affine(idxs), self.affine(idxs))),
                lambda: ast.Proj(ast.Access(ast.Var("q"), (self.affine(idxs),)), r.randint(0, 1)),
                lambda: ast.Proj(ast.Var("p"), 0)])()
        if isinstance(t, ast.TArr):
            i = self.fresh("i", idxs)
            return ast.Gen(i, t.size, self.leaf(t.elem, scope, idxs + [i]))
        assert isinstance(t, ast.TPair)
        return ast.Pair(self.leaf(t.a, scope, idxs), self.leaf(t.b, scope, idxs))

    def expr(self, t: ast.Type, scope: dict[str, ast.Type], idxs: list[str],
             budget: int) -> ast.Expr:
        r = self.rng
        if budget <= 0:
            return self.leaf(t, scope, idxs)
        b = budget - 1
        opts = ["leaf", "iverson", "let", "proj", "access"]
        if isinstance(t, ast.TReal):
            opts += ["add", "mul", "call", "sum"] * 2
        elif isinstance(t, ast.TArr):
            opts += ["gen", "gen"]
        else:
            opts += ["pair"]
        k = r.choice(opts)
        if k == "leaf":
            return self.leaf(t, scope, idxs)
        if k == "iverson":
            return ast.Iverson(self.pred(idxs, 2), self.expr(t, scope, idxs, b))
        if k == "let":
            name = self.fresh("v", list(scope))
            vt = self.typ()
            value = self.expr(vt, scope, idxs, b)
            return ast.Let(name, value, self.expr(t, {**scope, name: vt}, idxs, b))
        if k == "proj":
            other = self.typ(1)
            k2 = r.randint(0, 1)
            pt = ast.TPair(t, other) if k2 == 0 else ast.TPair(other, t)
            return ast.Proj(self.expr(pt, scope, idxs, b), k2)
        if k == "access":
            dims = [r.choice(self.SIZES) for _ in range(r.randint(1, 2))]
            inner = self.expr(ast.tensor(dims, t), scope, idxs, b)
            return ast.Access(inner, tuple(self.affine(idxs) for _ in dims))
        if k in ("add", "mul"):
            cls = ast.Add if k == "add" else ast.Mul
            return cls(self.expr(R, scope, idxs, b), self.expr(R, scope, idxs, b))
        if k == "call":
            f = r.choice(self.FUNCS)
            arity, nparams = ast.BUILTINS[f]
            params = tuple(r.choice([2.0, 0.5, -1.0, 3.0]) for _ in range(nparams))
            return call(f, tuple(self.expr(R, scope, idxs, b) for _ in range(arity)), params)
        if k == "sum":
            i = self.fresh("j", idxs)
            return ast.Sum(i, r.choice(self.SIZES), self.expr(R, scope, idxs + [i], b))
        if k == "gen":
            assert isinstance(t, ast.TArr)
            i = self.fresh("i", idxs)
            return ast.Gen(i, t.size, self.expr(t.elem, scope, idxs + [i], b))
        assert isinstance(t, ast.TPair)
        return ast.Pair(self.expr(t.a, scope, idxs, b), self.expr(t.b, scope, idxs, b))

    def program(self, budget: int = 5) -> ast.Def:
        return mk(self.PARAMS, self.expr(self.typ(), {}, [], budget), "rand")

    def args(self, nprng: np.random.Generator) -> dict[str, Any]:
        n, m = int(nprng.integers(0, 4)), int(nprng.integers(0, 4))
        mask_e = nprng.random((n, m)) < 0.5
        mask_f = nprng.random(n) < 0.5
        return {"N": n, "M": m, "s": float(nprng.standard_normal()),
                "x": nprng.standard_normal(n), "y": nprng.standard_normal(m + 1),
                "A": nprng.standard_normal((n, m)),
                "p": (float(nprng.standard_normal()), nprng.standard_normal(n)),
                "q": (nprng.standard_normal(m), nprng.standard_normal(m)),
                "E": mask_e if nprng.random() < 0.5 else np.argwhere(mask_e),
                "F": mask_f if nprng.random() < 0.5 else np.argwhere(mask_f)}


def random_program(seed: int, budget: int = 5) -> tuple[ast.Def, dict[str, Any]]:
    gen = ProgramGen(random.Random(seed))
    return gen.program(budget), gen.args(np.random.default_rng(seed))


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=150)
def test_vectorised_matches_scalar_reference_on_random_programs(seed: int) -> None:
    d, args = random_program(seed)
    fast = interpret(d, args)
    slow = interpret_reference(d, args)
    assert same(fast, slow), f"{d.body}\nargs={args}\nvectorised={fast}\nreference={slow}"


def test_random_programs_from_tensorlang_testing_when_available() -> None:
    testing = pytest.importorskip("tensorlang.testing")
    @given(testing.programs())
    @settings(max_examples=40)
    def check(case: tuple[ast.Def, dict[str, Any]]) -> None:
        d, args = case
        assert same(interpret(d, args), interpret_reference(d, args)), str(d.body)

    check()


# ---------------------------------------------------------------------------------------------
# Builtins


def _sample(name: str) -> list[np.ndarray]:
    pts = np.array([-2.3, -0.7, -0.1, 0.2, 0.9, 1.7, 3.1])
    if name in ("log", "sqrt", "pow"):
        pts = np.abs(pts) + 0.1
    if name == "tan":
        pts = np.clip(pts, -1.2, 1.2)
    f = builtins.BUILTIN_FUNCS[name]
    # a and b never within a finite-difference step of each other (selections' kinks)
    return [pts, pts[::-1] * 0.8 + 0.05, np.sin(3 * pts) + 0.5, np.cos(2 * pts)][:f.arity]


@pytest.mark.parametrize("name", sorted(builtins.BUILTIN_FUNCS))
def test_builtin_derivatives_match_finite_differences(name: str) -> None:
    f = builtins.BUILTIN_FUNCS[name]
    for params in ([()] if f.nparams == 0 else [(2.0,), (0.5,), (-1.0,), (3.0,), (1.0,)]):
        args = _sample(name)
        for k in range(f.arity):
            h = 1e-6
            up = [a + h if j == k else a for j, a in enumerate(args)]
            dn = [a - h if j == k else a for j, a in enumerate(args)]
            fd = (f.fn(*up, *params) - f.fn(*dn, *params)) / (2 * h)
            np.testing.assert_allclose(f.derivs[k](*args, *params), fd, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}{params} d/darg{k}")


@pytest.mark.parametrize("name", sorted(builtins.BUILTIN_FUNCS))
def test_deriv_expr_agrees_with_numeric_derivative(name: str) -> None:
    f = builtins.BUILTIN_FUNCS[name]
    for params in ([()] if f.nparams == 0 else [(2.0,), (0.5,), (0.0,), (1.0,), (-2.0,)]):
        args = _sample(name)
        names = [f"a{j}" for j in range(f.arity)]
        for k in range(f.arity):
            e = builtins.deriv_expr(name, [acc(n, "i") for n in names], params, k)
            prog = ast.Gen("i", aff(len(args[0])), e)
            got = eval_expr(prog, dict(zip(names, args)))
            np.testing.assert_allclose(got, f.derivs[k](*args, *params), rtol=1e-12, atol=1e-300,
                                       err_msg=f"{name}{params} d/darg{k}: {e}")


@pytest.mark.parametrize("name", sorted(set(builtins.BUILTIN_FUNCS) - builtins.TOWER_END))
def test_builtin_derivatives_are_one_call_times_a_constant(name: str) -> None:
    """Every builtin but the tower's end (SPEC 6's cost bounds need it for jvp and vjp)."""
    f = builtins.BUILTIN_FUNCS[name]
    args = [ast.Var(f"a{j}") for j in range(f.arity)]
    for params in ([()] if f.nparams == 0 else [(2.0,), (0.5,), (0.0,), (1.0,), (-2.0,)]):
        for k in range(f.arity):
            e = builtins.deriv_expr(name, args, params, k)
            core = e.b if isinstance(e, ast.Mul) and isinstance(e.a, ast.Const) else e
            assert isinstance(core, (ast.Call, ast.Const)) or core in args, f"{name}: {e}"
            if isinstance(core, ast.Call):
                assert all(a in args for a in core.args) and core.fn in ast.BUILTINS


@pytest.mark.parametrize("name", sorted(builtins.TOWER_END))
def test_the_tower_ends_with_expressions_of_builtins(name: str) -> None:
    """d2tanh' etc. (third derivatives of user programs) may use a call twice."""
    e = builtins.deriv_expr(name, [ast.Var("a0")], (), 0)
    calls = [n for n in ast.walk(e) if isinstance(n, ast.Call)]
    assert calls and all(c.fn in ast.BUILTINS for c in calls)


@pytest.mark.parametrize("name", sorted(builtins.INDICATOR_PARTIALS))
def test_select_call_is_the_directional_derivative_in_one_call(name: str) -> None:
    """`select_call` (max, min, selections) equals sum_k f_k' t_k for every set of live
    tangents, ties and NaN included, and is one call of a selection helper."""
    f = builtins.BUILTIN_FUNCS[name]
    vals = np.array([-1.0, 0.0, 0.0, 2.0, np.nan, 1.0])
    args = [vals, vals[::-1], np.arange(6.0) + 1, -np.arange(6.0) - 1][:f.arity]
    tans = [np.linspace(1, 2, 6), np.linspace(-3, -2, 6), np.full(6, 5.0), np.full(6, 7.0)]
    for live in itertools.product([False, True], repeat=f.arity):
        ts = [tans[k] if on else None for k, on in enumerate(live)]
        call = builtins.select_call(name, list(range(f.arity)), [k if on else None
                                                                 for k, on in enumerate(live)])
        want = sum((f.derivs[k](*args) * t for k, t in enumerate(ts) if t is not None),
                   np.zeros(6))
        if call is None:
            np.testing.assert_array_equal(want, 0.0)
            continue
        helper, slots = call
        assert helper in ("sel_ge", "keep_ge", "keep_gt")
        ops = [args[s] for s in slots[:2]] + [ts[s] for s in slots[2:]]
        np.testing.assert_array_equal(builtins.apply(helper, ops), want, err_msg=f"{live}")


def test_deriv_expr_let_binds_a_repeated_complex_argument() -> None:
    arg = call("exp", (ast.Var("z"),))
    e = builtins.deriv_expr("d2sigmoid", [arg], (), 0)   # dsigmoid (1 - 6 dsigmoid)
    assert isinstance(e, ast.Let) and e.value is arg
    assert eval_expr(e, {"z": 0.3}) == pytest.approx(
        builtins.BUILTIN_FUNCS["d2sigmoid"].derivs[0](np.exp(0.3)))
    simple = builtins.deriv_expr("d2sigmoid", [ast.Var("z")], (), 0)
    assert not isinstance(simple, ast.Let)


def test_builtin_conventions_and_stability() -> None:
    fn = {n: f.fn for n, f in builtins.BUILTIN_FUNCS.items()}
    d = {n: f.derivs for n, f in builtins.BUILTIN_FUNCS.items()}
    zero = np.array([0.0])
    assert d["relu"][0](zero)[0] == 0.0 and d["abs"][0](zero)[0] == 0.0
    one, two = np.array([1.0]), np.array([2.0])
    assert (d["max"][0](one, one)[0], d["max"][1](one, one)[0]) == (1.0, 0.0)
    assert (d["min"][0](one, one)[0], d["min"][1](one, one)[0]) == (1.0, 0.0)
    assert (d["max"][0](one, two)[0], d["max"][1](one, two)[0]) == (0.0, 1.0)
    assert (d["min"][0](one, two)[0], d["min"][1](one, two)[0]) == (1.0, 0.0)
    big = np.array([-800.0, 800.0])
    with np.errstate(over="raise", invalid="raise"):   # stable forms do not overflow
        np.testing.assert_array_equal(fn["sigmoid"](big), [0.0, 1.0])
        np.testing.assert_array_equal(fn["softplus"](big), [0.0, 800.0])
        np.testing.assert_array_equal(d["sigmoid"][0](big), [0.0, 0.0])
        np.testing.assert_array_equal(d["tanh"][0](big), [0.0, 0.0])
    assert fn["softplus"](np.array([-40.0]))[0] == pytest.approx(np.exp(-40.0), rel=1e-12)
    assert d["sigmoid"][0](np.array([40.0]))[0] == pytest.approx(np.exp(-40.0), rel=1e-9)
    assert d["tanh"][0](np.array([20.0]))[0] == pytest.approx(4 * np.exp(-40.0), rel=1e-9)
    assert d["pow"][0](zero, 0.0)[0] == 0.0
    assert set(builtins.EXTRA_BUILTINS) == {"step", "sign", "ge", "gt", "dtanh", "dsigmoid", "dtan",
                                            "d2tanh", "d2sigmoid", "d2tan", "sel_ge", "keep_ge",
                                            "keep_gt"}
    assert all(builtins.BUILTIN_FUNCS[n].arity == a and builtins.BUILTIN_FUNCS[n].nparams == p
               for n, (a, p) in ast.BUILTINS.items())


def test_long_statement_chains_do_not_recurse_deeply() -> None:
    n = 3000
    body: ast.Expr = ast.Var(f"v{n}")
    for k in reversed(range(1, n + 1)):
        body = ast.Let(f"v{k}", ast.Add(ast.Var(f"v{k - 1}"), ast.Const(1.0)), body)
    d = mk([("v0", R)], body)
    assert interpret(d, {"v0": 0.5}) == n + 0.5
    assert interpret_reference(d, {"v0": 0.5}) == n + 0.5


def test_sum_of_negative_zeros_is_positive_zero_like_a_loop_from_zero() -> None:
    # recip(sum j:2. -1 * 0) = recip(0.0 + -0.0 + -0.0) = recip(+0.0) = +inf
    s = ast.Sum("j", aff(2), ast.Mul(ast.Const(-1.0), acc("x", "j")))
    d = mk([("x", vec(2))], call("recip", (s,)))
    assert interpret(d, {"x": np.zeros(2)}) == np.inf
    assert interpret_reference(d, {"x": np.zeros(2)}) == np.inf
