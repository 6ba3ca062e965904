"""The exact cost model of SPEC 3, pinned on hand-computed counts."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang.semantics.cost import Cost, cost_def, cost_expr
from scalar_reference import cost_scalar_reference
from tensorlang.syntax.errors import TLError
from tensorlang.semantics.interp import bind_args
from test_interp import R, SIZE, V, acc, aff, call, mat, mk, random_program, vec

ZERO = ast.Const(0.0)
FALSE, TRUE = ast.PFalse(), ast.PTrue()


def counts(c: Cost) -> tuple[int, int, int]:
    assert c.total == c.adds + c.muls + c.calls
    return (c.adds, c.muls, c.calls)


def cost_of(e: ast.Expr, **sizes: int) -> tuple[int, int, int]:
    return counts(cost_expr(e, sizes))


def qform() -> ast.Def:
    y = ast.Gen("i", V("N"), ast.Sum("j", V("N"), ast.Mul(acc("A", "i", "j"), acc("x", "j"))))
    return mk([("N", SIZE), ("x", vec("N")), ("A", mat("N", "N"))],
              ast.Let("y", y, ast.Sum("i", V("N"), ast.Mul(acc("x", "i"), acc("y", "i")))), "qform")


def qform_inline() -> ast.Expr:
    """sum i. x[i] * sum j. A[i,j] * x[j]"""
    return ast.Sum("i", V("N"), ast.Mul(acc("x", "i"), ast.Sum(
        "j", V("N"), ast.Mul(acc("A", "i", "j"), acc("x", "j")))))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 200])
def test_qform_counts(n: int) -> None:
    want = (n * (n - 1) + (n - 1), n * n + n, 0)
    assert cost_of(qform_inline(), N=n) == want
    c = cost_def(qform(), {"N": n})
    assert counts(c) == want
    assert list(c.per_binding) == ["y", "return"]
    assert counts(c.per_binding["y"]) == (n * (n - 1), n * n, 0)
    assert counts(c.per_binding["return"]) == (n - 1, n, 0)


def test_qform_at_size_zero_and_value_args_are_ignored() -> None:
    assert counts(cost_def(qform(), {"N": 0})) == (0, 0, 0)
    with_values = cost_def(qform(), {"N": 3, "x": np.zeros(3), "A": np.zeros((3, 3))})
    assert counts(with_values) == counts(cost_def(qform(), {"N": 3}))


def test_iverson_short_circuit() -> None:
    body = ast.Gen("i", V("N"), ast.Iverson(ast.Cmp("<", V("i"), aff(2)),
                                            call("exp", (acc("x", "i"),))))
    assert cost_of(body, N=10) == (0, 0, 2)
    assert cost_of(body, N=1) == (0, 0, 1)
    expensive = ast.Sum("i", V("N"), ast.Mul(acc("x", "i"), acc("x", "i")))
    assert cost_of(ast.Iverson(FALSE, expensive), N=10) == (0, 0, 0)
    assert cost_of(ast.Iverson(TRUE, expensive), N=10) == (9, 10, 0)
    # the guard is evaluated per point: [i == j] inside gen i, j costs only the diagonal
    diag = ast.Gen("i", V("N"), ast.Gen("j", V("N"), ast.Iverson(
        ast.Cmp("==", V("i"), V("j")), ast.Mul(acc("x", "i"), acc("x", "j")))))
    assert cost_of(diag, N=6) == (0, 6, 0)


def test_addition_with_a_structural_zero_is_free() -> None:
    x0, x1 = acc("x", 0), acc("x", 1)
    assert cost_of(ast.Add(x0, ast.Iverson(FALSE, x1))) == (0, 0, 0)
    assert cost_of(ast.Add(ast.Iverson(FALSE, x1), x0)) == (0, 0, 0)
    assert cost_of(ast.Add(x0, ZERO)) == (0, 0, 0)
    assert cost_of(ast.Add(x0, ast.Add(ZERO, ast.Iverson(FALSE, x1)))) == (0, 0, 0)
    assert cost_of(ast.Add(x0, ast.Let("t", x1, ast.Iverson(FALSE, ast.Var("t"))))) == (0, 0, 0)
    assert cost_of(ast.Add(x0, x1)) == (1, 0, 0)
    # Z is structural, refined (docs/cost-model.md) to see through brackets and products:
    assert cost_of(ast.Add(x0, ast.Iverson(TRUE, ZERO))) == (0, 0, 0)     # [true]*0 is Z
    assert cost_of(ast.Add(x0, ast.Mul(ZERO, x1))) == (0, 0, 0)           # 0*e is Z, not executed
    assert cost_of(ast.Add(x0, ast.Mul(ast.Iverson(FALSE, x1), x1))) == (0, 0, 0)
    assert cost_of(ast.Add(x0, ast.Mul(x1, x1))) == (1, 1, 0)
    assert cost_of(ast.Add(x0, ast.Const(-0.0))) == (0, 0, 0)
    # a guarded addition costs only where both sides are live
    g = ast.Gen("i", V("N"), ast.Add(ast.Iverson(ast.Cmp("<", V("i"), aff(5)), acc("x", "i")),
                                     ast.Iverson(ast.Cmp("<", aff(2), V("i")), acc("y", "i"))))
    assert cost_of(g, N=10) == (2, 0, 0)   # i = 3, 4


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10])
def test_one_point_sum_costs_no_addition(n: int) -> None:
    one = ast.Sum("j", V("N"), ast.Iverson(ast.Cmp("==", V("j"), aff(2)), acc("x", "j")))
    assert cost_of(one, N=n) == (0, 0, 0)
    few = ast.Sum("j", V("N"), ast.Iverson(ast.Cmp("<=", V("j"), aff(2)), acc("x", "j")))
    assert cost_of(few, N=n) == (max(0, min(n, 3) - 1), 0, 0)
    # the body's own cost is still counted at the one live point
    onemul = ast.Sum("j", V("N"), ast.Iverson(ast.Cmp("==", V("j"), aff(2)),
                                              ast.Mul(acc("x", "j"), acc("x", "j"))))
    assert cost_of(onemul, N=n) == (0, int(n > 2), 0)


def test_sums_of_zeros_and_empty_sums() -> None:
    assert cost_of(ast.Sum("j", V("N"), ZERO), N=5) == (0, 0, 0)
    assert cost_of(ast.Sum("j", V("N"), ast.Iverson(FALSE, acc("x", "j"))), N=5) == (0, 0, 0)
    assert cost_of(ast.Sum("j", V("N"), acc("x", "j")), N=0) == (0, 0, 0)
    # Z(sum ...) is always false: adding an empty sum costs an addition (docs/cost-model.md)
    assert cost_of(ast.Add(acc("x", 0), ast.Sum("j", aff(0), acc("x", "j")))) == (1, 0, 0)
    # a guard outside or inside the inner sum: live*M - 1 either way (M >= 1)
    p = ast.Cmp("<", V("i"), aff(3))
    outside = ast.Sum("i", V("N"), ast.Iverson(p, ast.Sum("j", V("M"), acc("A", "i", "j"))))
    inside = ast.Sum("i", V("N"), ast.Sum("j", V("M"), ast.Iverson(p, acc("A", "i", "j"))))
    assert cost_of(outside, N=5, M=4) == cost_of(inside, N=5, M=4) == (11, 0, 0)
    # live where not both summands are Z: points 0 and 1 -> one addition, no "+" counted
    both = ast.Sum("j", V("N"), ast.Add(ast.Iverson(ast.Cmp("==", V("j"), aff(0)), acc("x", "j")),
                                        ast.Iverson(ast.Cmp("==", V("j"), aff(1)), acc("x", "j"))))
    assert cost_of(both, N=5) == (1, 0, 0)


@pytest.mark.parametrize("n,m", [(1, 1), (3, 4), (5, 1), (4, 0), (0, 4), (20, 30)])
def test_nested_sums_are_costed_jointly(n: int, m: int) -> None:
    joint = ast.Sum("i", V("N"), ast.Sum("j", V("M"), acc("A", "i", "j")))
    # m = N*M live points -> N*M - 1 additions (which for a dense nest equals
    # N*(M-1) + (N-1), the count of costing each sum on its own) ...
    assert cost_of(joint, N=n, M=m) == (max(0, n * m - 1), 0, 0)
    # ... but a `let` breaks the nest, and then an empty inner sum is a live term of the
    # outer sum: with M = 0 the separate count is N - 1, the joint one 0.
    split = ast.Sum("i", V("N"), ast.Let("t", ZERO, ast.Sum("j", V("M"), acc("A", "i", "j"))))
    assert cost_of(split, N=n, M=m) == (n * max(0, m - 1) + max(0, n - 1), 0, 0)


def test_joint_costing_of_a_triangular_nest() -> None:
    n = 9
    tri = ast.Sum("i", V("N"), ast.Sum("j", V("N"), ast.Iverson(ast.Cmp("<", V("j"), V("i")),
                                                                acc("A", "i", "j"))))
    assert cost_of(tri, N=n) == (n * (n - 1) // 2 - 1, 0, 0)
    split = ast.Sum("i", V("N"), ast.Let("t", ZERO, ast.Sum("j", V("N"), ast.Iverson(
        ast.Cmp("<", V("j"), V("i")), acc("A", "i", "j")))))
    assert cost_of(split, N=n) == (n * (n - 1) // 2, 0, 0)   # row i = 0 is an empty sum
    # a three-deep nest with a diagonal predicate: N live points
    diag3 = ast.Sum("i", V("N"), ast.Sum("j", V("N"), ast.Sum("k", V("N"), ast.Iverson(
        ast.And(ast.Cmp("==", V("i"), V("j")), ast.Cmp("==", V("j"), V("k"))),
        ast.Mul(acc("x", "i"), acc("x", "k"))))))
    assert cost_of(diag3, N=n) == (n - 1, n, 0)


def test_lets_are_counted_once() -> None:
    t = ast.Var("t")
    shared = ast.Let("t", call("exp", (ast.Var("s"),)), ast.Add(ast.Mul(t, t), t))
    assert cost_of(shared) == (1, 1, 1)
    e = call("exp", (ast.Var("s"),))
    assert cost_of(ast.Add(ast.Mul(e, e), e)) == (1, 1, 3)
    inner = ast.Gen("i", V("N"), ast.Let("t", call("exp", (acc("x", "i"),)), ast.Mul(t, t)))
    assert cost_of(inner, N=7) == (0, 7, 7)
    # an unused let still costs (dead code is not free in SPEC 3)
    assert cost_of(ast.Let("t", call("exp", (ast.Var("s"),)), ast.Var("s"))) == (0, 0, 1)


def test_access_and_projection_cost_their_whole_operand() -> None:
    g = ast.Gen("i", V("N"), call("exp", (acc("x", "i"),)))
    assert cost_of(ast.Access(g, (aff(0),)), N=5) == (0, 0, 5)   # C(e[a]) = C(e)
    p = ast.Pair(call("exp", (ast.Var("s"),)), ast.Mul(ast.Var("s"), ast.Var("s")))
    assert cost_of(ast.Proj(p, 1)) == (0, 1, 1)


def test_relation_dependent_cost() -> None:
    d = mk([("N", SIZE), ("M", SIZE), ("E", ast.TRel((V("N"), V("M")))), ("A", mat("N", "M"))],
           ast.Sum("i", V("N"), ast.Sum("j", V("M"), ast.Iverson(
               ast.RelCall("E", (V("i"), V("j"))),
               ast.Mul(acc("A", "i", "j"), acc("A", "i", "j"))))))
    mask = np.zeros((4, 5), bool)
    mask[[0, 1, 1, 3], [0, 2, 4, 4]] = True
    for rel in (mask, np.argwhere(mask)):
        assert counts(cost_def(d, {"N": 4, "M": 5, "E": rel})) == (3, 4, 0)
    assert counts(cost_def(d, {"N": 4, "M": 5, "E": np.zeros((0, 2), int)})) == (0, 0, 0)
    with pytest.raises(TLError, match="missing argument 'E'"):
        cost_def(d, {"N": 4, "M": 5})
    with pytest.raises(TLError, match="missing size argument 'M'"):
        cost_def(d, {"N": 4, "E": mask})


def test_per_binding_breakdown() -> None:
    s = ast.Var("s")
    body = ast.Let("a", call("exp", (s,)),
                   ast.Let("b", ast.Gen("i", V("N"), ast.Mul(acc("x", "i"), ast.Var("a"))),
                           ast.Let("a", ast.Add(ast.Var("a"), s),
                                   ast.Sum("i", V("N"), acc("b", "i")))))
    d = mk([("N", SIZE), ("s", R), ("x", vec("N"))], body)
    c = cost_def(d, {"N": 4})
    assert list(c.per_binding) == ["a", "b", "a#2", "return"]
    assert [counts(c.per_binding[k]) for k in c.per_binding] == [
        (0, 0, 1), (0, 4, 0), (1, 0, 0), (3, 0, 0)]
    assert counts(c) == (4, 4, 1)
    assert sum(b.total for b in c.per_binding.values()) == c.total
    assert cost_def(mk([("s", R)], s), {}).per_binding == {"return": Cost.of(0, 0, 0)}


def test_gen_and_iverson_over_tensors_and_pairs() -> None:
    row = ast.Gen("j", V("M"), ast.Mul(acc("x", "j"), ast.Var("s")))
    e = ast.Gen("i", V("N"), ast.Iverson(ast.Cmp("<", V("i"), aff(2)), ast.Pair(row, ast.Var("s"))))
    assert cost_of(e, N=5, M=3) == (0, 6, 0)


def test_large_sizes_are_fast_and_exact() -> None:
    n, k = 200, 5
    nest = ast.Sum("i", V("N"), ast.Sum("j", V("N"), ast.Sum("k", V("K"), ast.Iverson(
        ast.Cmp("<=", V("j") + V("k"), V("i")), ast.Mul(acc("A", "i", V("j") + V("k")),
                                                        acc("w", "k"))))))
    t = time.perf_counter()
    live = sum(1 for i in range(n) for j in range(n) for kk in range(k) if j + kk <= i)
    assert cost_of(nest, N=n, K=k) == (live - 1, live, 0)
    assert counts(cost_def(qform(), {"N": 5000})) == (5000 * 4999 + 4999, 5000 * 5001, 0)
    assert time.perf_counter() - t < 3.0


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=120)
def test_vectorised_cost_matches_scalar_reference(seed: int) -> None:
    d, args = random_program(seed)
    env = bind_args(d, args, values=False)
    want = cost_scalar_reference(d.body, {**env.sizes, **env.rels})
    assert counts(cost_def(d, args)) == want, str(d.body)


def test_cost_on_tensorlang_testing_programs() -> None:
    testing = pytest.importorskip("tensorlang.testing")

    @given(testing.programs())
    @settings(max_examples=30)
    def check(case: tuple[ast.Def, dict[str, Any]]) -> None:
        d, args = case
        env = bind_args(d, args, values=False)
        want = cost_scalar_reference(d.body, {**env.sizes, **env.rels})
        assert counts(cost_def(d, args)) == want, str(d.body)

    check()


def test_cost_dataclass() -> None:
    c = Cost.of(1, 2, 3)
    assert c.total == 6 and c + Cost.of(1, 1, 1) == Cost.of(2, 3, 4)
    assert str(c) == "adds=1 muls=2 calls=3 total=6"
    with pytest.raises(Exception):
        c.adds = 5  # type: ignore[misc]


def test_long_statement_chains_cost() -> None:
    n = 3000
    body: ast.Expr = ast.Var(f"v{n}")
    for k in reversed(range(1, n + 1)):
        body = ast.Let(f"v{k}", ast.Add(ast.Var(f"v{k - 1}"), ast.Const(1.0)), body)
    c = cost_def(mk([("v0", R)], body), {})
    assert counts(c) == (n, 0, 0) and len(c.per_binding) == n + 1
    assert cost_scalar_reference(body, {}) == (n, 0, 0)
