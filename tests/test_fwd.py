"""Forward differentiation (passes/jvp/): jvp programs are Tensor SSA, agree with central
finite differences (interpreter as oracle), return the primal, and follow the rules of
SPEC 6 statement by statement (zero tangents dropped, exp' shares the primal map, ...)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.syntax.errors import TLError
from tensorlang.passes.jvp import jvp_program
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.proofs.theorems import (axpy, check_derivatives, flat, like, program_cost, run,
                                        to_program)
from tensorlang.testing import differentiable_programs


def prog(src: str, name: str):
    return to_program(tl.parse(src)[name].core())


def assert_ssa(p: tssa.Program) -> None:
    """Clean, canonical Tensor SSA (one masked primitive per statement, CSE'd, no trivial
    copies, no dead statements) and printable."""
    msg = is_tensor_ssa(p)
    assert msg is None, msg
    ssa_printer.to_text(p)


def fd_jvp(p, args, xs, dx, h=1e-6):
    plus = run(p, {**args, **{x: axpy(h, dx[x], args[x]) for x in xs}})
    minus = run(p, {**args, **{x: axpy(-h, dx[x], args[x]) for x in xs}})
    return (flat(plus) - flat(minus)) / (2 * h)


# ---------------------------------------------------------------------------------------------
# Against finite differences


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_jvp_of_every_example_matches_finite_differences(name):
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    args = w.inputs(w.sizes(3), np.random.default_rng(3))
    report = check_derivatives(d, args)
    assert report.fd_error < 1e-6 and report.primal_error == 0.0, report


@given(differentiable_programs())
def test_jvp_of_random_programs_matches_finite_differences(case):
    d, args, wrt = case
    p = to_program(d)
    j = jvp_program(p, wrt)
    assert_ssa(j)
    rng = np.random.default_rng(0)
    dx = {x: like(args[x], rng) for x in wrt}
    y, ty = run(j, {**args, **{f"d_{x}": dx[x] for x in wrt}})
    np.testing.assert_array_equal(flat(y), flat(run(p, args)))
    fd = fd_jvp(p, args, wrt, dx)
    np.testing.assert_allclose(flat(ty), fd, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(fd).max(
        initial=0.0)))


def test_jvp_is_linear_in_the_tangent():
    p = prog("def f(N: size, x: R[N], y: R[N]) -> R:\n"
             "    return sum i:N. exp(x[i]) * y[i] * x[i]\n", "f")
    j = jvp_program(p)
    rng = np.random.default_rng(1)
    a = {"N": 4, "x": rng.uniform(-1, 1, 4), "y": rng.uniform(-1, 1, 4)}
    t1 = {"d_x": rng.uniform(-1, 1, 4), "d_y": rng.uniform(-1, 1, 4)}
    t2 = {"d_x": rng.uniform(-1, 1, 4), "d_y": rng.uniform(-1, 1, 4)}
    s = {k: 2.0 * t1[k] - 3.0 * t2[k] for k in t1}
    _, r1 = run(j, {**a, **t1})
    _, r2 = run(j, {**a, **t2})
    _, rs = run(j, {**a, **s})
    assert rs == pytest.approx(2.0 * r1 - 3.0 * r2, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Signatures and structure


def test_jvp_signature_and_tangent_names():
    p = prog("def f(N: size, x: R[N], A: R[N, N]) -> R[N]:\n"
             "    y[i:N] = sum j:N. A[i, j] * x[j]\n    return y\n", "f")
    j = jvp_program(p, ["x"])
    assert [q.name for q in j.params] == ["N", "x", "A", "d_x"]
    assert ssa_printer.fmt_type(j.ret) == "(R[N], R[N])"
    j2 = jvp_program(p, ["A"], tangent_names={"A": "dA"}, outputs="tangent")
    assert [q.name for q in j2.params][-1] == "dA"
    rng = np.random.default_rng(0)
    a = {"N": 3, "x": rng.uniform(size=3), "A": rng.uniform(size=(3, 3))}
    dA = rng.uniform(size=(3, 3))
    np.testing.assert_allclose(run(j2, {**a, "dA": dA}), dA @ a["x"], rtol=1e-12)


def test_jvp_without_names_differentiates_every_real_input():
    p = prog("def f(N: size, x: R[N], y: (R, R[N]), E: rel(N)) -> R:\n"
             "    return sum i:N. [E(i)] * x[i] * y.1[i] + y.0\n", "f")
    j = jvp_program(p)
    assert [q.name for q in j.params] == ["N", "x", "y", "E", "d_x", "d_y"]
    rng = np.random.default_rng(0)
    a = {"N": 4, "x": rng.uniform(-1, 1, 4), "y": (0.3, rng.uniform(-1, 1, 4)),
         "E": np.array([True, False, True, True])}
    dx = {"x": like(a["x"], rng), "y": like(a["y"], rng)}
    _, t = run(j, {**a, "d_x": dx["x"], "d_y": dx["y"]})
    assert t == pytest.approx(fd_jvp(p, a, ["x", "y"], dx)[0], rel=1e-6)


def test_jvp_rejects_bad_names():
    p = prog("def f(N: size, x: R[N]) -> R:\n    return sum i:N. x[i]\n", "f")
    with pytest.raises(TLError):
        jvp_program(p, ["z"])
    with pytest.raises(TLError):
        jvp_program(p, ["N"])


def test_zero_tangents_are_dropped():
    """x does not reach the output through A's branch: no statement for A's tangent, and a
    function that ignores x has the zero tangent (a constant, costing nothing)."""
    p = prog("def f(N: size, x: R[N], A: R[N, N]) -> R:\n"
             "    u[i:N] = sum j:N. A[i, j] * A[j, i]\n"
             "    return sum i:N. u[i] * x[i]\n", "f")
    j = jvp_program(p, ["x"])
    tangent = [s for s in j.stmts if s.var not in _primal_vars(j)
               and not isinstance(s.rhs, tssa.Input)]
    assert len(tangent) == 1  # sum i. u[i] * d_x[i]: nothing for A's branch
    c = prog("def g(N: size, x: R[N], z: R[N]) -> R:\n    return sum i:N. exp(z[i])\n", "g")
    jc = jvp_program(c, ["x"])
    out = jc.output[1]
    assert isinstance(jc.defs[out], tssa.ConstRhs) and jc.defs[out].value == 0.0
    assert program_cost(jc, {"N": 7}) == program_cost(c, {"N": 7})


def _primal_vars(j):
    # statements that read no tangent (d_...) variable, transitively
    tangent = set()
    for s in j.stmts:
        if isinstance(s.rhs, tssa.Input) and s.rhs.param.startswith("d_"):
            tangent.add(s.var)
        elif any(o.var in tangent for o in s.rhs.operands):
            tangent.add(s.var)
    return {s.var for s in j.stmts} - tangent


# ---------------------------------------------------------------------------------------------
# The rules, one by one (their costs)


def test_map_exp_shares_the_primal_call():
    p = prog("def f(N: size, x: R[N]) -> R[N]:\n    y[i:N] = exp(x[i])\n    return y\n", "f")
    j = jvp_program(p)
    calls = [s for s in j.stmts if isinstance(s.rhs, tssa.MapRhs)]
    assert len(calls) == 1  # exp' = exp: one call, one multiplication per element
    assert program_cost(j, {"N": 10}) == 20


def test_map_rule_is_one_call_and_one_contraction():
    p = prog("def f(N: size, x: R[N]) -> R[N]:\n    y[i:N] = tanh(x[i])\n    return y\n",
             "f")
    j = jvp_program(p)
    fns = sorted(s.rhs.fn for s in j.stmts if isinstance(s.rhs, tssa.MapRhs))
    assert fns == ["dtanh", "tanh"]
    assert program_cost(j, {"N": 10}) == 30  # 3 C(f): the tangent costs 2 C(f)


def test_max_with_both_tangents_live_is_one_selection_call():
    """FWD-select: jvp(max(x, y)) = sel_ge(x, y, dx, dy) (one call, not ge * dx + gt * dy),
    keep_ge / keep_gt with one live tangent; values match finite differences off the kink and
    follow the tie convention (max picks its first argument) on it."""
    p = prog("def f(N: size, x: R[N], y: R[N]) -> R[N]:\n"
             "    z[i:N] = max(x[i], y[i]) + min(y[i], x[i])\n    return z\n", "f")
    j = jvp_program(p)
    assert_ssa(j)
    fns = sorted(s.rhs.fn for s in j.stmts if isinstance(s.rhs, tssa.MapRhs))
    assert fns == ["max", "min", "sel_ge", "sel_ge"]
    assert program_cost(j, {"N": 10}) == 2 * program_cost(p, {"N": 10})
    rng = np.random.default_rng(4)
    a = {"N": 6, "x": rng.uniform(-1, 1, 6), "y": rng.uniform(-1, 1, 6)}
    dx = {"x": rng.uniform(-1, 1, 6), "y": rng.uniform(-1, 1, 6)}
    _, t = run(j, {**a, "d_x": dx["x"], "d_y": dx["y"]})
    np.testing.assert_allclose(t, fd_jvp(p, a, ["x", "y"], dx), rtol=1e-6)
    tie = {"N": 1, "x": np.ones(1), "y": np.ones(1), "d_x": np.full(1, 2.0),
           "d_y": np.full(1, 5.0)}
    assert run(j, tie)[1][0] == 2.0 + 5.0    # max -> d_x, min(y, x) -> d_y
    one = jvp_program(p, ["y"])
    fns = sorted(s.rhs.fn for s in one.stmts if isinstance(s.rhs, tssa.MapRhs))
    assert fns == ["keep_ge", "keep_gt", "max", "min"]


@pytest.mark.parametrize("fn", ["tanh", "sigmoid", "tan"])
def test_second_order_helpers_have_one_call_derivatives(fn):
    """tanh' = dtanh, dtanh' = d2tanh: the jvp of a grad (hvp) calls d2tanh once per
    element, and matches finite differences of the gradient's program."""
    p = prog(f"def f(N: size, x: R[N]) -> R[N]:\n    y[i:N] = d{fn}(x[i])\n    return y\n",
             "f")
    j = jvp_program(p)
    fns = sorted(s.rhs.fn for s in j.stmts if isinstance(s.rhs, tssa.MapRhs))
    assert fns == [f"d2{fn}", f"d{fn}"]
    assert program_cost(j, {"N": 10}) == 30   # 3 C(f), as for any unary builtin
    rng = np.random.default_rng(6)
    a = {"N": 5, "x": rng.uniform(-1, 1, 5)}
    dx = rng.uniform(-1, 1, 5)
    _, t = run(j, {**a, "d_x": dx})
    np.testing.assert_allclose(t, fd_jvp(p, a, ["x"], {"x": dx}), rtol=1e-6)


def test_product_rule_and_square():
    p = prog("def f(N: size, x: R[N], y: R[N]) -> R:\n    return sum i:N. x[i] * y[i]\n", "f")
    j = jvp_program(p)
    # primal N muls + N-1 adds; tangent two contractions and one add
    assert program_cost(j, {"N": 10}) == 19 + 2 * 19 + 1
    sq = prog("def f(N: size, x: R[N]) -> R:\n    return sum i:N. x[i] * x[i]\n", "f")
    js = jvp_program(sq)
    contracts = [s for s in js.stmts if isinstance(s.rhs, tssa.ContractRhs)]
    assert len(contracts) == 2 and {s.rhs.coeff for s in contracts} == {1.0, 2.0}


def test_sparse_tangent_keeps_the_mask():
    p = prog("def f(N: size, x: R[N]) -> R:\n    return sum i:N. [i < 3] * sin(x[i])\n", "f")
    j = jvp_program(p)
    for n in (5, 50, 500):
        assert program_cost(j, {"N": n}) == program_cost(j, {"N": 5})


# ---------------------------------------------------------------------------------------------
# Composition


def test_jvp_of_jvp_is_the_second_derivative():
    p = prog("def f(x: R) -> R:\n    return sin(x) * exp(x)\n", "f")
    j = jvp_program(p, ["x"], outputs="tangent")            # f'(x) d_x
    jj = jvp_program(j, ["x"], tangent_names={"x": "e"}, outputs="tangent")
    x, dx, e = 0.3, 1.0, 1.0
    f2 = 2 * np.cos(x) * np.exp(x)                           # (sin e^x)'' = 2 cos x e^x
    assert run(jj, {"x": x, "d_x": dx, "e": e}) == pytest.approx(f2, rel=1e-12)
    jjj = jvp_program(jj, ["x"], tangent_names={"x": "g"}, outputs="tangent")
    f3 = 2 * np.exp(x) * (np.cos(x) - np.sin(x))
    assert run(jjj, {"x": x, "d_x": dx, "e": e, "g": 1.0}) == pytest.approx(f3, rel=1e-12)


def test_onehot_seed_gives_the_jacobian():
    p = prog("def f(N: size, x: R[N]) -> R[N]:\n"
             "    y[i:N] = sum j:N. [j <= i] * sin(x[j]) * x[i]\n    return y\n", "f")
    jac = jvp_program(p, ["x"], seed="onehot", outputs="tangent")
    rng = np.random.default_rng(2)
    a = {"N": 4, "x": rng.uniform(-1, 1, 4)}
    J = run(jac, a)
    for k in range(4):
        e = np.eye(4)[k]
        np.testing.assert_allclose(J[:, k], fd_jvp(p, a, ["x"], {"x": e}), rtol=1e-6,
                                   atol=1e-8)


def test_no_add_is_paid_for_an_empty_sum():
    """The supports of a contraction's two tangent terms are exact (`exists j. E(i - 1, j)`,
    not the Fourier-Motzkin projection that drops the relation), so their add is counted
    only where the sum has a live point: with an empty E, f and its jvp cost nothing."""
    p = prog("def f(N: size, M: size, E: rel(N, M), z: R[N]) -> R[M]:\n"
             "    return gen i:M. sum j:M. [E(i - 1, j)] * z[0] * z[i]\n", "f")
    j = jvp_program(p, ["z"])
    assert_ssa(j)
    for e in (np.zeros((1, 2), dtype=bool), np.array([[False, True]])):
        args = {"N": 1, "M": 2, "E": e}
        assert program_cost(j, args) - program_cost(p, args) <= 3 * program_cost(p, args)
    assert program_cost(j, {"N": 1, "M": 2, "E": np.zeros((1, 2), dtype=bool)}) == 0
