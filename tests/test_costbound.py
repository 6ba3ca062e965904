"""The cost-bound checker (proofs/costbound.py) and the theorems it checks:
C(jvp f) - C(f) <= 3 C(f) (Theorem 6.1) and C(vjp f) <= 4 C(f) + |in| + |out| (Theorem
6.55), on every example function and on random programs, with exact SPEC 3 costs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.passes.derived import to_program
from tensorlang.passes.fwd import is_real_valued, jvp_program
from tensorlang.proofs.costbound import (BoundReport, check_bounds, program_cost, type_size)
from tensorlang.testing import GENERATED_BUILTINS, differentiable_programs, programs

# Builtins whose derivative rule is over budget by construction (see docs/derivatives.md):
# two-argument kinks with two live tangents (2 calls) and the second-order helpers whose
# derivatives are expressions of two calls (the builtin table has no d2tanh etc.).
OVER_BUDGET = {"max", "min", "dtanh", "dsigmoid", "dtan"}
WITHIN = frozenset(GENERATED_BUILTINS) - OVER_BUDGET


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


@given(differentiable_programs(builtins=WITHIN))
def test_bounds_hold_on_random_differentiable_programs(case):
    d, args, wrt = case
    report = check_bounds(d, args, wrt)
    assert report.ok, str(report)


@given(programs(builtins=WITHIN))
def test_bounds_hold_on_random_programs(case):
    d, args = case
    if not any(is_real_valued(q.type) for q in d.params):
        return
    report = check_bounds(d, args)
    assert report.ok, str(report)


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
    """Never loosened: the derivative of a second-order helper (dtanh' = -2 tanh dtanh) is
    two calls, so a program made of one dtanh call exceeds the jvp bound, and says so."""
    m = tl.parse("def f(N: size, x: R[N]) -> R[N]:\n    y[i:N] = dtanh(x[i])\n    return y\n")
    r = check_bounds(m["f"].core(), {"N": 5})
    assert not r.ok and r.cost_jvp > r.bounds["jvp"]
    assert "VIOLATED" in str(r)


def test_type_size():
    t = tl.parse("def f(N: size, x: (R[N, 2], R)) -> R:\n    return x.1\n")["f"].core()
    assert type_size(t.params[1].type, {"N": 3}) == 7
