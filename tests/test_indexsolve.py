"""Tests of the index solver (passes/indexsolve*): Smith normal form, equality systems,
Fourier-Motzkin bounds, sum elimination (against the interpreter) and loop nests (against
brute force), with the worked examples of seed 004."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorlang.ir.ast import (
    Access, Affine, And, Call, Cmp, Const, Exists, Expr, Gen, Iverson, Mul, Or, PFalse, PTrue,
    RelCall, Sum, Var, walk,
)
from tensorlang.semantics.cost import cost_expr
from tensorlang.semantics.interp import eval_expr
from scalar_reference import eval_scalar_reference
from tensorlang.passes.indexsolve import (
    Bound, LoopBound, affine_to_python, determinant, eliminate_sum, eliminate_sums, eval_pred,
    ext_gcd, fourier_motzkin, loop_nest, smith_normal_form, solve_equalities, solve_for,
)
from tensorlang.passes.indexsolve.snf import matmul

A = Affine.var
i, j, k, K, L, N, M = (A(n) for n in ("i", "j", "k", "K", "L", "N", "M"))
lit = Affine.lit


def exp(e: Expr) -> Expr:
    return Call("exp", (e,), ())


def acc(name: str, *idx: Affine | int) -> Expr:
    return Access(Var(name), idx)


def count(e: Any, cls: type) -> int:
    return sum(isinstance(n, cls) for n in walk(e))


def close(a: Any, b: Any) -> bool:
    return bool(np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True))


rng = np.random.default_rng(0)


# ---------------------------------------------------------------------------------------------
# Smith normal form


def _check_snf(m: list[list[int]], ncols: int) -> None:
    s, u, v = smith_normal_form(m, ncols)
    n = len(m)
    assert abs(determinant(u)) == 1 and abs(determinant(v)) == 1
    if n and ncols:
        assert matmul(matmul(u, m), v) == s
    diag = [s[t][t] for t in range(min(n, ncols))]
    assert all(s[r][c] == 0 for r in range(n) for c in range(ncols) if r != c)
    assert all(d >= 0 for d in diag)
    for a, b in zip(diag, diag[1:]):
        assert (a == 0 and b == 0) or (a != 0 and b % a == 0)


matrices = st.integers(0, 4).flatmap(lambda n: st.integers(0, 4).flatmap(
    lambda m: st.tuples(st.lists(st.lists(st.integers(-9, 9), min_size=m, max_size=m),
                                 min_size=n, max_size=n), st.just(m))))


@given(matrices)
def test_snf_properties(mm: tuple[list[list[int]], int]) -> None:
    _check_snf(*mm)


def test_snf_known() -> None:
    s, _, _ = smith_normal_form([[2, 4, 4], [-6, 6, 12], [10, -4, -16]])
    assert [s[t][t] for t in range(3)] == [2, 6, 12]
    s, _, _ = smith_normal_form([[2, 0], [0, 3]])        # needs the divisibility repair
    assert [s[0][0], s[1][1]] == [1, 6]
    _check_snf([[0, 0], [0, 0]], 2)
    _check_snf([[6, 10, 15]], 3)


@given(st.integers(-50, 50), st.integers(-50, 50))
def test_ext_gcd(a: int, b: int) -> None:
    g, x, y = ext_gcd(a, b)
    assert g >= 0 and x * a + y * b == g
    assert g == np.gcd(a, b)


# ---------------------------------------------------------------------------------------------
# Equality systems


def test_unsolvable_constant() -> None:
    assert solve_equalities([(j * 2, lit(1))], ["j"]) is None
    assert solve_equalities([(i * 2 + j * 4, K * 2 + 1)], ["i", "j"]) is None  # parity
    assert solve_equalities([(i, lit(1)), (i, lit(2))], ["i"]) is None          # cokernel


def test_divisibility_guard_both_encodings() -> None:
    for bounds in (None, {"K": N}):
        sol = solve_equalities([(j * 2, K)], ["j"], bounds)
        assert sol is not None and len(sol.quotients) == 1 and not sol.kernel
        ks = range(0, 9) if bounds else range(-9, 9)
        for kv in ks:
            env = {"K": kv, "N": 9}
            assert eval_pred(sol.guard, env) == (kv % 2 == 0)
            if kv % 2 == 0:
                assert sol.instantiate(env, {}) == {"j": kv // 2}
    # the bounded encoding is evaluable by the vectorised interpreter inside a gen
    sol = solve_equalities([(j * 2, K)], ["j"], {"K": N})
    got = eval_expr(Gen("K", N, Iverson(sol.guard, Const(1.0))), {"N": 7})
    assert list(got) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_diagonal_guard() -> None:
    sol = solve_equalities([(i, K), (i, L)], ["i"])
    assert sol is not None and sol.values["i"] in (K, L)
    assert sol.guard in (Cmp("==", K, L), Cmp("==", L, K))


def test_seed_figure3_and_figure4() -> None:
    # Figure 3: beta = alpha1 - 2 alpha2: a one-dimensional kernel along (2, 1).
    sol = solve_equalities([(A("a1") - A("a2") * 2, A("b"))], ["a1", "a2"])
    assert sol is not None and len(sol.kernel) == 1 and isinstance(sol.guard, PTrue)
    z = sol.kernel[0]
    d = [sol.values[a].coeff(z) for a in ("a1", "a2")]
    assert d in ([2, 1], [-2, -1])
    # Figure 4: beta = alpha1 - 2 alpha2 - 2 alpha3: every solution in a box is reached.
    names = ["a1", "a2", "a3"]
    sol = solve_equalities([(A("a1") - A("a2") * 2 - A("a3") * 2, A("b"))], names)
    assert sol is not None and len(sol.kernel) == 2
    reached = {tuple(sol.instantiate({"b": 3}, dict(zip(sol.kernel, zz))).values())
               for zz in itertools.product(range(-12, 13), repeat=2)}
    box = [p for p in itertools.product(range(-3, 4), repeat=3) if p[0] - 2 * p[1] - 2 * p[2] == 3]
    assert box and set(box) <= reached
    # ... and the Fourier-Motzkin nest over the kernel enumerates the box solutions exactly
    pred = Cmp("==", A("a1") - A("a2") * 2 - A("a3") * 2, A("b"))
    nest = loop_nest([(a, lit(6)) for a in names], pred)
    assert len(nest.loop_vars()) == 2
    for b in range(-12, 8):
        want = brute_points([(a, 6) for a in names], pred, {"b": b})
        assert {tuple(p[a] for a in names) for p in nest.points({"b": b})} == want


systems = st.tuples(
    st.integers(1, 3), st.integers(1, 3),
    st.lists(st.integers(-3, 3), min_size=9, max_size=9),
    st.lists(st.integers(-2, 2), min_size=6, max_size=6),
    st.lists(st.integers(-4, 4), min_size=3, max_size=3),
    st.lists(st.integers(-4, 4), min_size=2, max_size=2))


@given(systems)
def test_solve_equalities_property(sysdata: tuple) -> None:
    neq, nunk, coefs, pcoefs, consts, pvals = sysdata
    unknowns = ["u0", "u1", "u2"][:nunk]
    params = ["P", "Q"]
    eqs = []
    for r in range(neq):
        lhs = sum((A(u) * coefs[3 * r + c] for c, u in enumerate(unknowns)), lit(0))
        rhs = sum((A(p) * pcoefs[2 * r + c] for c, p in enumerate(params)), lit(consts[r]))
        eqs.append((lhs, rhs))
    sol = solve_equalities(eqs, unknowns)
    env = dict(zip(params, pvals))
    box = range(-6, 7)
    brute = [u for u in itertools.product(box, repeat=nunk)
             if all((lhs - rhs).evaluate({**env, **dict(zip(unknowns, u))}) == 0
                    for lhs, rhs in eqs)]
    if sol is None:
        assert not brute
        return
    holds = eval_pred(sol.guard, env)
    if brute:
        assert holds
    if holds:
        for zz in itertools.product(range(-2, 3), repeat=len(sol.kernel)):
            u = sol.instantiate(env, dict(zip(sol.kernel, zz)))
            full = {**env, **u}
            assert all((lhs - rhs).evaluate(full) == 0 for lhs, rhs in eqs)


# ---------------------------------------------------------------------------------------------
# Fourier-Motzkin


def brute_points(vars_sizes: list[tuple[str, int]], pred: Any, env: dict) -> set[tuple]:
    names = [v for v, _ in vars_sizes]
    out = set()
    for pt in itertools.product(*(range(n) for _, n in vars_sizes)):
        if eval_pred(pred, {**env, **dict(zip(names, pt))}):
            out.add(pt)
    return out


def test_fm_triangle_and_printing() -> None:
    cons = [i, N - 1 - i, j, N - 1 - j, j - i - 1]         # 0 <= i, j < N, i < j
    nest = fourier_motzkin(cons, ["i", "j"])
    assert [lv.var for lv in nest] == ["i", "j"]
    assert "i + 1" in nest[1].lower_py()
    pts = {(p["i"], p["j"]) for p in nest.points({"N": 5})}
    assert pts == {(a, b) for a in range(5) for b in range(5) if a < b}


def test_fm_ceil_floor_exact() -> None:
    # 3*z >= K - 2 and 2*z <= K: z from ceil((K-2)/3) to floor(K/2), negative K included
    nest = fourier_motzkin([A("z") * 3 - K + 2, K - A("z") * 2], ["z"])
    lv = nest[0]
    for kv in range(-12, 13):
        r = lv.range({"K": kv})
        assert list(r) == [z for z in range(-20, 20) if 3 * z >= kv - 2 and 2 * z <= kv]
        lo = eval(lv.lower_py(), {"K": kv})
        hi = eval(lv.upper_py(), {"K": kv})
        assert (lo, hi) == (r.start, r.stop - 1)
    assert Bound(K + 1, 3).lower_py() == "(K + 3) // 3"
    assert LoopBound("k", (Bound(lit(0)), Bound(1 - K)), (Bound(N - 1),)).range_py() \
        == "range(max(0, -K + 1), N)"


def test_fm_infeasible_and_guard() -> None:
    nest = fourier_motzkin([i - 3, 1 - i], ["i"])
    assert not list(nest.points({}))
    nest = fourier_motzkin([i, N - 1 - i, i - K], ["i"])
    assert nest.guard                       # K <= N - 1 remains on the parameters
    assert not list(nest.points({"N": 3, "K": 5}))


cons_strategy = st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-3, 3),
                                   st.integers(-2, 2), st.integers(-5, 5)), max_size=4)


@given(cons_strategy, st.integers(0, 4), st.integers(-3, 6))
def test_fm_property(raw: list, n: int, kv: int) -> None:
    names = ["a", "b", "c"]
    cons = [A(v) for v in names] + [lit(n - 1) - A(v) for v in names]
    cons += [A("a") * x + A("b") * y + A("c") * z + K * p + c for x, y, z, p, c in raw]
    nest = fourier_motzkin(cons, names)
    got = {tuple(p[v] for v in names) for p in nest.points({"K": kv})}
    want = {pt for pt in itertools.product(range(n), repeat=3)
            if all(c.evaluate({"K": kv, **dict(zip(names, pt))}) >= 0 for c in cons)}
    assert got == want


def test_affine_to_python() -> None:
    assert affine_to_python(1 - K) == "-K + 1"
    assert affine_to_python(i * 2 - j + 3) == "2*i - j + 3"
    assert affine_to_python(lit(0)) == "0"


# ---------------------------------------------------------------------------------------------
# Sum elimination: the seed 004 examples


def gen_k(size: Affine, e: Expr, name: str = "K") -> Expr:
    return Gen(name, size, e)


def test_unit_substitution_spec_form() -> None:
    # sum j:n. [j == a and q] * e  ->  [0 <= a < n and q{j:=a}] * e{j:=a}
    e = Sum("j", N, Iverson(And(Cmp("==", j, K + 1), RelCall("E", (j, K))), acc("x", j)))
    r = eliminate_sum(e)
    assert count(r, Sum) == 0 and isinstance(r, Iverson)
    assert r.e == acc("x", K + 1)
    E = rng.random((6, 6)) < 0.5
    env = {"N": 6, "x": rng.normal(size=6), "E": E}
    assert close(eval_expr(gen_k(N, r), env), eval_expr(gen_k(N, e), env))


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_seed_f5_flattened_index(m: int) -> None:
    # f_ij = exp x_{M i + j}: the adjoint sums over (i, j) with M*i + j == K (M literal: a
    # product of two sizes is not affine).
    body = Mul(acc("dg", i, j), exp(acc("x", i * m + j)))
    adj = Sum("i", N, Sum("j", lit(m), Iverson(Cmp("==", i * m + j, K), body)))
    r = eliminate_sum(adj)
    assert count(r, Sum) == 1                      # j = K - M i is gone; one sum over i
    assert acc("x", K) in set(walk(r))             # exp x_K: the read is a gather at K
    env = {"N": 4, "dg": rng.normal(size=(4, m)), "x": rng.normal(size=4 * m)}
    assert close(eval_expr(gen_k(N * m, r), env), eval_expr(gen_k(N * m, adj), env))
    assert cost_expr(gen_k(N * m, r), {"N": 4}).total <= cost_expr(gen_k(N * m, adj),
                                                                   {"N": 4}).total


def test_seed_diagonal() -> None:
    # f_i = x_ii ** 3: dx[K, L] = sum i. [i == K and i == L] * dg[i] * 3 x[i,i]**2
    body = Mul(acc("dg", i), Mul(Const(3.0), Call("pow", (acc("x", i, i),), (2.0,))))
    adj = Sum("i", N, Iverson(And(Cmp("==", i, K), Cmp("==", i, L)), body))
    r = eliminate_sum(adj)
    assert count(r, Sum) == 0
    assert any(n in (Cmp("==", K, L), Cmp("==", L, K)) for n in walk(r))
    env = {"N": 5, "dg": rng.normal(size=5), "x": rng.normal(size=(5, 5))}
    full = lambda e: Gen("K", N, Gen("L", N, e))   # noqa: E731
    assert close(eval_expr(full(r), env), eval_expr(full(adj), env))


def test_strided_read_adjoint() -> None:
    # y[i] = x[2*i]: dx[K] = sum i:N. [2*i == K] * dy[i]  is 0 at odd K, dy[K/2] at even K.
    adj = Sum("i", N, Iverson(Cmp("==", i * 2, K), acc("dy", i)))
    dy = rng.normal(size=5)
    r = eliminate_sum(adj)
    got = eval_expr(gen_k(N * 2, r), {"N": 5, "dy": dy})
    want = np.zeros(10)
    want[0::2] = dy
    assert close(got, want)
    # the loop nest needs no loop: i = K // 2 under the divisibility guard
    nest = loop_nest([("i", N)], Cmp("==", i * 2, K))
    assert not nest.loop_vars()
    for kv in range(-3, 12):
        pts = list(nest.points({"N": 5, "K": kv}))
        assert pts == ([{"i": kv // 2}] if kv % 2 == 0 and 0 <= kv < 10 else [])
    assert "% 2 == 0" in nest.to_python("pass")


def test_unsolvable_sum_is_zero() -> None:
    e = Sum("j", N, Iverson(Cmp("==", j * 2, lit(1)), acc("x", j)))
    assert eliminate_sum(e) == Const(0.0)


def test_general_coefficients_kernel_sum() -> None:
    # 2i + 3j == K: gcd 1, so one kernel coordinate replaces both sums.
    adj = Sum("i", N, Sum("j", M, Iverson(Cmp("==", i * 2 + j * 3, K), acc("W", i, j))))
    r = eliminate_sum(adj)
    assert count(r, Sum) == 1
    env = {"N": 5, "M": 4, "W": rng.normal(size=(5, 4))}
    assert close(eval_expr(gen_k(N * 2 + M * 3, r), env),
                 eval_expr(gen_k(N * 2 + M * 3, adj), env))
    # 2i + 4j == 2K + 1 is never solvable
    bad = Sum("i", N, Sum("j", M, Iverson(Cmp("==", i * 2 + j * 4, K * 2 + 1), acc("W", i, j))))
    assert eliminate_sum(bad) == Const(0.0)


def test_section6_example_access_equations() -> None:
    # f[i;j] = exp(-sum{k} ((a[i;k] + b[j;k])**2 * c[i;i] + d[i+k]**3)), i:3, j:4, k:5.
    # The adjoint of each access sums over (i, j, k) against `access == beta`.
    W = acc("W", i, j, k)        # stands for df[i,j] * (partial derivative) at (i, j, k)
    sizes = {"i": 3, "j": 4, "k": 5}
    cases = {  # access indices, adjoint shape, sums that must remain
        "a": ((i, k), (3, 5), 1), "b": ((j, k), (4, 5), 1),
        "c": ((i, i), (3, 3), 2), "d": ((i + k,), (8,), 2)}
    env = {"W": rng.normal(size=(3, 4, 5))}
    for _name, (idx, shape, remaining) in cases.items():
        betas = [f"B{t}" for t in range(len(idx))]
        pred = None
        for a, b in zip(idx, betas):
            c = Cmp("==", a, A(b))
            pred = c if pred is None else And(pred, c)
        adj = Sum("i", lit(3), Sum("j", lit(4), Sum("k", lit(5), Iverson(pred, W))))
        r = eliminate_sum(adj)
        assert count(r, Sum) == remaining
        wrap = lambda e: _gens(betas, shape, e)  # noqa: E731
        assert close(eval_expr(wrap(r), env), eval_expr(wrap(adj), env))
    # d: the remaining sum over i is bounded by max(0, B0 - 4) .. min(2, B0) (seed output)
    nest = loop_nest([(v, lit(n)) for v, n in sizes.items()], Cmp("==", i + k, A("B0")))
    assert [lv.var for lv in nest.levels] == ["i", "k", "j"]   # k = B0 - i, hoisted out of j
    lo, hi = nest.levels[0].loop.lower_py(), nest.levels[0].loop.upper_py()
    assert (lo, hi) == ("max(0, B0 - 4)", "min(2, B0)")


def _gens(names: list[str], shape: tuple[int, ...], e: Expr) -> Expr:
    for n, s in reversed(list(zip(names, shape))):
        e = Gen(n, lit(s), e)
    return e


def test_shadowed_binder_renamed() -> None:
    # the inner binder K shadows the parameter K of the outer guard
    e = Sum("i", N, Iverson(Cmp("==", i, K), Sum("K", M, Mul(acc("x", A("K")), acc("y", i)))))
    r = eliminate_sum(e)
    env = {"N": 4, "M": 3, "x": rng.normal(size=3), "y": rng.normal(size=4)}
    assert count(r, Sum) == 1
    assert close(eval_expr(gen_k(N, r), env), eval_expr(gen_k(N, e), env))


def test_eliminate_sums_everywhere() -> None:
    # trace of a diagonal: sum a. sum b. [a == b] * x[a] * y[a, b], nested in an exp
    inner = Sum("a", N, Sum("b", N, Iverson(Cmp("==", A("a"), A("b")),
                                            Mul(acc("x", A("a")), acc("y", A("a"), A("b"))))))
    e = exp(Mul(Const(0.5), inner))
    r = eliminate_sums(e)
    assert count(r, Sum) == 1
    env = {"N": 4, "x": rng.normal(size=4), "y": rng.normal(size=(4, 4))}
    assert close(eval_expr(r, env), eval_expr(e, env))


ADJOINTS_TL = """
def adj_f5(N: size, dg: R[N, 3], x: R[3*N]) -> R[3*N]:
    return gen K:3*N. sum i:N, j:3. [3*i + j == K] * dg[i, j] * exp(x[3*i + j])

def adj_diag(N: size, dg: R[N]) -> R[N, N]:
    return gen K:N, L:N. sum i:N. [i == K and i == L] * dg[i]

def adj_snf(N: size, M: size, W: R[N, M]) -> R[2*N + 3*M]:
    return gen K:2*N + 3*M. sum i:N, j:M. [2*i + 3*j == K] * W[i, j]
"""


def test_whole_defs_stay_well_typed() -> None:
    from tensorlang.semantics.interp import interpret
    from tensorlang.syntax.parser import parse_module
    from tensorlang.check.typecheck import check_def, check_module

    m = check_module(parse_module(ADJOINTS_TL))
    args = {"adj_f5": {"N": 4, "dg": rng.normal(size=(4, 3)), "x": rng.normal(size=12)},
            "adj_diag": {"N": 4, "dg": rng.normal(size=4)},
            "adj_snf": {"N": 4, "M": 3, "W": rng.normal(size=(4, 3))}}
    for name, d in m.defs.items():
        r = eliminate_sums(d)
        assert count(r, Sum) < count(d, Sum)
        check_def(r)                                  # sizes stay affine in size parameters
        assert close(interpret(r, args[name]), interpret(d, args[name]))


def test_no_equality_unchanged() -> None:
    e = Sum("i", N, Iverson(Cmp("<", i, K), acc("x", i)))
    assert eliminate_sum(e) is e


def test_solve_for() -> None:
    p = And(Cmp("==", j + 1, K), And(RelCall("E", (i, j)), Cmp("<", j, N)))
    val, rest = solve_for(p, "j")
    assert val == K - 1
    assert "j" not in {n for x in walk(rest) for n in getattr(x, "vars", lambda: ())()}
    assert solve_for(Cmp("==", j * 2, K), "j") is None
    assert solve_for(Or(Cmp("==", j, K), PFalse()), "j") is None


# ---------------------------------------------------------------------------------------------
# Sum elimination: random systems against the interpreter


@st.composite
def sum_nests(draw: Any) -> tuple[Expr, dict[str, int]]:
    nv = draw(st.integers(1, 3))
    vs = ["s0", "s1", "s2"][:nv]
    sizes = [draw(st.sampled_from([lit(0), lit(1), lit(3), N, N + 1])) for _ in vs]
    params = [K, L]

    def affine(lo: int, hi: int) -> Affine:
        out = lit(draw(st.integers(-2, 2)))
        for v in vs:
            out = out + A(v) * draw(st.integers(lo, hi))
        for p in params:
            out = out + p * draw(st.integers(-1, 1))
        return out

    atoms = [Cmp("==", affine(-3, 3), lit(0)) for _ in range(draw(st.integers(1, 2)))]
    if draw(st.booleans()):
        atoms.append(Cmp(draw(st.sampled_from(["<", "<="])), affine(-1, 1), lit(1)))
    if draw(st.booleans()):
        atoms.append(RelCall("E", (A(vs[0]) + K, A(vs[-1]))))
    pred = atoms[0]
    for a in atoms[1:]:
        pred = And(pred, a)
    body: Expr = acc("W", *[A(v) for v in vs], *([0] * (3 - nv)))
    body = Mul(body, acc("x", A(vs[0]) + A(vs[-1]) * 2))
    e: Expr = Iverson(pred, body)
    for v, n in reversed(list(zip(vs, sizes))):
        e = Sum(v, n, e)
    return e, {"N": draw(st.integers(0, 3))}


@given(sum_nests())
def test_eliminate_sum_matches_interpreter(case: tuple[Expr, dict[str, int]]) -> None:
    e, sizes = case
    r = eliminate_sum(e)
    assert eliminate_sum(r) is r                      # nothing more to solve
    W = rng.normal(size=(5, 5, 5))
    x = rng.normal(size=20)
    E = rng.random((9, 9)) < 0.6
    for kv in range(-3, 6):
        for lv in range(-2, 3):
            env = {**sizes, "K": kv, "L": lv, "W": W, "x": x, "E": E}
            want = eval_scalar_reference(e, env)
            assert close(eval_scalar_reference(r, env), want)
            assert close(eval_expr(r, env), want)
    # cost not raised (sums over one true point compile to indexing)
    costs = {"N": sizes["N"], "K": 2, "L": 0, "E": E}
    assert cost_expr(r, costs).total <= cost_expr(e, costs).total


@given(st.lists(st.tuples(st.sampled_from(["==", "==", "<", "<="]),
                          st.lists(st.integers(-3, 3), min_size=5, max_size=5)),
                min_size=1, max_size=3))
def test_triangular_nests(raw: list) -> None:
    # sizes mention outer summed variables: sum i:N. sum j:i+1. sum k:j+2.
    p = None
    for op, (a, b, c, d, kk) in raw:
        atom = Cmp(op, i * a + j * b + k * c + K * kk + d, lit(0))
        p = atom if p is None else And(p, atom)
    vs = [("i", N), ("j", i + 1), ("k", j + 2)]
    e = Sum("i", N, Sum("j", i + 1, Sum("k", j + 2, Iverson(p, acc("W", i, j, k)))))
    r = eliminate_sum(e)
    nest = loop_nest(vs, p)
    W = rng.normal(size=(4, 4, 6))
    for nv in range(4):
        for kv in range(-3, 5):
            env = {"N": nv, "K": kv}
            want = {(a, b, c) for a in range(nv) for b in range(a + 1) for c in range(b + 2)
                    if eval_pred(p, {**env, "i": a, "j": b, "k": c})}
            got = [(q["i"], q["j"], q["k"]) for q in nest.points(env)]
            assert len(got) == len(set(got)) and set(got) == want
            full = {**env, "W": W}
            # (the vectorised interpreter wants sizes free of index variables)
            assert close(eval_scalar_reference(r, full), eval_scalar_reference(e, full))


# ---------------------------------------------------------------------------------------------
# Loop nests


def test_loop_nest_inequality_narrows() -> None:
    nest = loop_nest([("i", N), ("j", N)], Cmp("<", i, j))
    assert nest.levels[1].loop is not None
    assert nest.levels[1].loop.lower_py().startswith("max(i + 1") or \
        nest.levels[1].loop.lower_py() == "i + 1"


def test_loop_nest_equality_removes_loop() -> None:
    nest = loop_nest([("i", N), ("j", M)], And(Cmp("==", i, j), RelCall("E", (i, j))))
    assert nest.loop_vars() == ["i"] or nest.loop_vars() == ["j"]
    E = rng.random((4, 4)) < 0.5
    env = {"N": 4, "M": 3, "E": E}
    want = brute_points([("i", 4), ("j", 3)], And(Cmp("==", i, j), RelCall("E", (i, j))), env)
    assert {(p["i"], p["j"]) for p in nest.points(env)} == want


def _exec_points(nest: Any, names: list[str], env: dict) -> set[tuple]:
    src = "def _f(" + ", ".join(sorted(env)) + "):\n    _out = []\n"
    body = "_out.append((" + ", ".join(names) + ",))"
    src += "\n".join("    " + ln for ln in nest.to_python(body).splitlines())
    src += "\n    return _out\n"
    scope: dict = {}
    exec(src, scope)  # noqa: S102 -- generated from our own AST in a test
    return set(scope["_f"](**env))


@st.composite
def predicates(draw: Any, names: list[str]) -> Any:
    def affine() -> Affine:
        out = lit(draw(st.integers(-3, 3))) + K * draw(st.integers(-1, 1))
        for v in names:
            out = out + A(v) * draw(st.integers(-3, 3))
        return out

    def atom() -> Any:
        kind = draw(st.sampled_from(["<", "<=", "==", "==", "rel", "or", "exists"]))
        if kind == "rel":
            return RelCall("E", (A(names[0]), A(names[-1]) + 1))
        if kind == "or":
            return Or(Cmp("<", affine(), lit(0)), Cmp("==", affine(), lit(0)))
        if kind == "exists":
            return Exists("t", lit(3), Cmp("==", A(names[0]), A("t") * 2))
        return Cmp(kind, affine(), lit(0))

    p = atom()
    for _ in range(draw(st.integers(0, 3))):
        p = And(p, atom())
    return p


@given(st.data())
def test_loop_nest_matches_brute_force(data: Any) -> None:
    nv = data.draw(st.integers(1, 3))
    names = ["a", "b", "c"][:nv]
    sizes = [data.draw(st.integers(0, 4)) for _ in names]
    pred = data.draw(predicates(names))
    nest = loop_nest([(v, N + (n - 3)) for v, n in zip(names, sizes)], pred)
    E = rng.random((5, 5)) < 0.5
    for kv in (-2, 0, 1, 3):
        env = {"N": 3, "K": kv, "E": E}
        want = brute_points(list(zip(names, sizes)), pred, env)
        got = [tuple(p[v] for v in names) for p in nest.points(env)]
        assert len(got) == len(set(got)) and set(got) == want
        assert _exec_points(nest, names, env) == want


def test_loop_nest_python_and_kernel() -> None:
    nest = loop_nest([("i", N), ("j", M)], Cmp("==", i * 2 + j * 3, K))
    assert len(nest.loop_vars()) == 1                   # one kernel loop, no wasted i/j loop
    env = {"N": 6, "M": 5}
    for kv in range(-1, 30):
        want = {(a, b) for a in range(6) for b in range(5) if 2 * a + 3 * b == kv}
        assert _exec_points(nest, ["i", "j"], {**env, "K": kv}) == want


def test_loop_nest_false_and_true() -> None:
    assert not list(loop_nest([("i", N)], PFalse()).points({"N": 3}))
    assert [p["i"] for p in loop_nest([("i", N)], PTrue()).points({"N": 3})] == [0, 1, 2]
    assert loop_nest([("i", N)], PFalse()).to_python("x") == "pass"


@pytest.mark.slow
def test_loop_nest_compiles_with_numba() -> None:
    numba = pytest.importorskip("numba")
    nest = loop_nest([("i", N), ("j", N)], And(Cmp("<", i, j), RelCall("E", (i, j))))
    src = "def _f(N, E):\n    s = 0\n"
    src += "\n".join("    " + ln for ln in nest.to_python("s += i * 10 + j").splitlines())
    src += "\n    return s\n"
    scope: dict = {}
    exec(src, scope)  # noqa: S102
    E = rng.random((6, 6)) < 0.5
    f = numba.njit(scope["_f"])
    assert f(6, E) == sum(a * 10 + b for a in range(6) for b in range(6) if a < b and E[a, b])
