"""The cost-bound checker (proofs/costbound.py) and the theorems it checks:
C(jvp f) - C(f) <= 3 C(f) (Theorem 6.1) and C(vjp f) <= 4 C(f) + |in| + |out| (Theorem
6.55), on every example function and on random programs, with exact SPEC 3 costs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.ir import ast as A
from tensorlang.passes.adjoint import vjp_program
from tensorlang.passes.derived import derive, to_program
from tensorlang.passes.fwd import is_real_valued, jvp_program
from tensorlang.proofs.costbound import (BoundReport, check_bounds, program_cost, type_size)
from tensorlang.testing import GENERATED_BUILTINS, differentiable_programs, programs

# The random programs draw every builtin a second derivative of a user program can call:
# SPEC 2.3's and the first-order helpers (dtanh, dsigmoid, dtan, step, sign, ge, gt); the
# selections (sel_ge, keep_ge, keep_gt), which the generator does not draw, are covered by
# the bounds on derivatives of random programs below.
assert A.SPEC_BUILTINS | {"dtanh", "dsigmoid", "dtan", "step", "sign", "ge", "gt"} \
    <= GENERATED_BUILTINS


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("n", [2, 6])
def test_bounds_hold_on_every_example(name, n):
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    args = w.inputs(w.sizes(n), np.random.default_rng(n))
    report = check_bounds(d, args)
    assert report.ok, str(report)
    for x in report.wrt:  # and one input at a time
        assert check_bounds(d, args, [x]).ok


@given(differentiable_programs())
def test_bounds_hold_on_random_differentiable_programs(case):
    d, args, wrt = case
    report = check_bounds(d, args, wrt)
    assert report.ok, str(report)


@given(programs())
def test_bounds_hold_on_random_programs(case):
    d, args = case
    if not any(is_real_valued(q.type) for q in d.params):
        return
    report = check_bounds(d, args)
    assert report.ok, str(report)


@given(programs(max_depth=3))
def test_bounds_hold_on_derivatives_of_random_programs(case):
    """Second derivatives: jvp and vjp of jvp(f) and vjp(f) (which call sel_ge, keep_ge,
    keep_gt, d2tanh & co.) are within the bounds too."""
    d, args = case
    if not any(is_real_valued(q.type) for q in d.params):
        return
    p = to_program(d)
    for q in (jvp_program(p), vjp_program(p)):
        report = check_bounds(q, args)
        assert report.ok, str(report)


# One-statement programs f = g(x) / g(x, y) for every builtin g (the bounds per call).
_ARGS = {1: "x[i]", 2: "x[i], y[i]", 3: "x[i], y[i], z[i]", 4: "x[i], y[i], z[i], w[i]"}


@pytest.mark.parametrize("fn", sorted(set(A.BUILTINS) - {"d2tanh", "d2sigmoid", "d2tan"}))
@pytest.mark.parametrize("reduce", [False, True])
def test_bounds_hold_for_one_call_of_every_builtin(fn, reduce):
    """`f = gen i. g(x[i], ...)` and `f = sum i. g(...)`: the derivative of every builtin
    but the tower's end is one call (times a constant or a tangent), so the tangent costs at
    most 3 per call, the vjp at most 4 per call plus the inputs and outputs."""
    nargs, nparams = A.BUILTINS[fn]
    names = "xyzw"[:nargs]
    call = f"{fn}({_ARGS[nargs]}{', 3.0' if nparams else ''})"
    body = f"sum i:N. {call}" if reduce else f"gen i:N. {call}"
    sig = ", ".join(f"{v}: R[N]" for v in names)
    m = tl.parse(f"def f(N: size, {sig}) -> {'R' if reduce else 'R[N]'}:\n"
                 f"    return {body}\n")
    for wrt in [None] + [[v] for v in names]:
        for n in (1, 7):
            r = check_bounds(m["f"].core(), {"N": n}, wrt)
            assert r.ok, str(r)
            assert reduce or r.cost_jvp - r.cost_f <= 3 * n, str(r)   # 3 per call


@pytest.mark.parametrize("src", [
    "def f(x: R, y: R) -> R:\n    return max(x, y)\n",
    "def f(x: R, y: R) -> R:\n    return min(x, y)\n",
    "def f(N: size, x: R[N], y: R[N]) -> R:\n    return sum i:N. max(x[i], y[i])\n",
    "def f(N: size, x: R[N], y: R[N]) -> R[N, N]:\n    z[i:N, j:N] = min(x[i], y[j])\n"
    "    return z\n",
    "def f(N: size, x: R[N]) -> R:\n    return sum i:N. max(x[i], x[i])\n"])
def test_bounds_hold_for_max_and_min_with_both_arguments_live(src):
    """jvp: one `sel_ge(a, b, da, db)` call; vjp: one `keep_ge(a, b, d_v)` /
    `keep_gt(b, a, d_v)` call per argument."""
    d = tl.parse(src)["f"].core()
    for n in (1, 4, 20):
        r = check_bounds(d, {"N": n})
        assert r.ok, str(r)
    jvp = program_cost(jvp_program(to_program(d)), {"N": 5})
    assert jvp == 2 * program_cost(to_program(d), {"N": 5})   # primal + one call per call


@pytest.mark.parametrize("fn, d2", [("tanh", "d2tanh"), ("sigmoid", "d2sigmoid"),
                                    ("tan", "d2tan")])
def test_bounds_hold_on_hvp_and_hessian_of_tanh_sigmoid_tan(fn, d2):
    """hvp = jvp(grad f): grad f calls dtanh, whose derivative is the one call d2tanh."""
    d = tl.parse(f"def f(N: size, x: R[N]) -> R:\n    return sum i:N. {fn}(x[i])\n")["f"].core()
    grad = derive(d, "grad", ("x",))
    hvp = derive(d, "hvp", ("x",))
    for n in (1, 5, 50):
        r = check_bounds(grad, {"N": n})     # C(jvp grad) is C(hvp) up to the primal
        assert r.ok, str(r)
        assert program_cost(hvp, {"N": n}) <= 4 * program_cost(grad, {"N": n})
    assert d2 in {s.rhs.fn for s in hvp.stmts if hasattr(s.rhs, "fn")}
    assert program_cost(derive(d, "hessian", ("x",)), {"N": 50}) == 50   # N calls of d2


def test_report_fields():
    w = WORKLOADS["qform"]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    r = check_bounds(d, {"N": 10}, ["x"])
    assert isinstance(r, BoundReport) and r.wrt == ("x",)
    assert r.cost_f == program_cost(to_program(d), {"N": 10}) == 10 * 10 + 10 + 9 * 10 + 9
    assert r.size_in == 10 and r.size_out == 1
    assert r.bounds == {"jvp": 4 * r.cost_f, "vjp": 4 * r.cost_f + 11}
    assert r.ratios["jvp"] == r.cost_jvp / r.cost_f
    assert "qform" in str(r) and r.ok


def test_jvp_with_the_primal_cannot_cost_three_times_a_product():
    """Why Theorem 6.1 bounds the tangent part: jvp(x * y) must return x*y and
    x*dy + y*dx -- three operations besides the primal product, so C(jvp) = 4 C(f)."""
    m = tl.parse("def f(x: R, y: R) -> R:\n    return x * y\n")
    p = to_program(m["f"].core())
    r = check_bounds(p, {})
    assert (r.cost_f, r.cost_jvp) == (1, 4) and r.ok
    assert program_cost(jvp_program(p, ["x"]), {}) == 2  # one live tangent: 2 C(f)


def test_the_checker_reports_rules_over_budget():
    """Never loosened: the tower's end (d2tanh' = dtanh (4 - 6 dtanh), a third derivative of
    tanh) is an expression, so a program made of one d2tanh call exceeds the jvp bound, and
    says so."""
    m = tl.parse("def f(N: size, x: R[N]) -> R[N]:\n    y[i:N] = d2tanh(x[i])\n    return y\n")
    r = check_bounds(m["f"].core(), {"N": 5})
    assert not r.ok and r.cost_jvp > r.bounds["jvp"]
    assert "VIOLATED" in str(r)


def test_type_size():
    t = tl.parse("def f(N: size, x: (R[N, 2], R)) -> R:\n    return x.1\n")["f"].core()
    assert type_size(t.params[1].type, {"N": 3}) == 7
