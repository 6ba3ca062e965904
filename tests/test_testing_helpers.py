"""The helpers for users' tests (end of tensorlang/testing.py) catch what they claim to."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import tensorlang as tl
from tensorlang.testing import (
    assert_cost_bound, assert_derivative_correct, function_inputs, function_sizes,
    random_inputs,
)

SRC = """
def square(N: size, x: R[N]) -> R:
    return sum i:N. x[i] * x[i]

def cube(N: size, x: R[N]) -> R:
    return sum i:N. x[i] * x[i] * x[i]

def vec(N: size, x: R[N]) -> R[N]:
    return gen i:N. x[i] * x[i]

def diff(N: size, K: size, x: R[N - K]) -> R:
    return sum i:N - K. x[i]
"""
m = tl.parse(SRC)


class _Swapped:
    """A derived function whose program is another function's derivative (a wrong one)."""

    def __init__(self, claimed, actual):
        self.kind, self.base, self.wrt, self.name = claimed.kind, claimed.base, claimed.wrt, \
            claimed.name
        self.compile = actual.compile


@pytest.mark.parametrize("kind", ["grad", "jvp", "vjp", "hvp", "hessian"])
def test_right_derivatives_pass(kind):
    assert_derivative_correct(getattr(tl, kind)(m.cube, "x"))


@pytest.mark.parametrize("kind", ["grad", "jvp", "vjp", "hvp", "hessian"])
def test_wrong_derivatives_fail(kind):
    wrong = _Swapped(getattr(tl, kind)(m.cube, "x"), getattr(tl, kind)(m.square, "x"))
    with pytest.raises(AssertionError, match="finite differences|dot-product|symmetry"):
        assert_derivative_correct(wrong)


def test_jacobian_and_non_derived():
    assert_derivative_correct(tl.jacobian(m.vec, "x"))
    wrong = _Swapped(tl.jacobian(m.vec, "x"), tl.hessian(m.square, "x"))
    with pytest.raises(AssertionError):
        assert_derivative_correct(wrong)
    with pytest.raises(tl.TLError, match="needs a derived function"):
        assert_derivative_correct(m.square)


def test_cost_bounds_pass_and_fail():
    g = tl.grad(m.square, "x")
    assert assert_cost_bound(g, "4 * cost(square) + N").proved_from is not None
    with pytest.raises(AssertionError, match=r"fails at N=\d+"):
        assert_cost_bound(g, "cost < N")
    with pytest.raises(AssertionError, match="cost of square at N=2 is 3 > bound 2"):
        assert_cost_bound(m.square, lambda N: N)
    with pytest.raises(AssertionError, match="unknown name"):
        assert_cost_bound(m.square, "M")


@settings(max_examples=20)
@given(function_sizes(m.diff, max_size=5))
def test_function_sizes_keep_dimensions_non_negative(sizes):
    assert sizes["N"] - sizes["K"] >= 0 and 1 <= sizes["K"] <= 5


@settings(max_examples=10)
@given(function_inputs(m.diff, max_size=5))
def test_function_inputs_fit_the_signature(args):
    assert args["x"].shape == (args["N"] - args["K"],)
    assert np.all(np.abs(args["x"]) <= 1)
    m.diff.interpret(**args)


def test_random_inputs_are_deterministic():
    a, b = random_inputs(m.cube, {"N": 3}, 5), random_inputs(m.cube, {"N": 3}, 5)
    assert np.array_equal(a["x"], b["x"]) and a["N"] == 3
