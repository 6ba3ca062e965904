"""A user's own test suite for their tensorlang programs, written only with the public API
(`tensorlang.load`, `tensorlang.testing`): the worked example of docs/testing.md."""
from pathlib import Path

import numpy as np
from hypothesis import given, settings

import tensorlang as tl
from tensorlang.testing import (
    assert_cost_bound, assert_derivative_correct, function_inputs, function_sizes,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
qform = tl.load(EXAMPLES / "project" / "contracts.tl")     # qform and conv, with contracts
logreg = tl.load(EXAMPLES / "logreg.tl")


@settings(max_examples=10, deadline=None)
@given(function_inputs(qform.qform, max_size=5))
def test_qform_is_x_transpose_A_x(args):
    x, A = args["x"], args["A"]
    assert np.isclose(qform.qform.interpret(**args), x @ A @ x)


@settings(max_examples=10, deadline=None)
@given(function_inputs(qform.qform_grad, max_size=5))
def test_qform_gradient_is_A_plus_A_transpose_x(args):
    x, A = args["x"], args["A"]
    assert np.allclose(qform.qform_grad.interpret(**args), (A + A.T) @ x)


def test_derivatives_are_correct():
    assert_derivative_correct(qform.qform_grad)
    assert_derivative_correct(qform.qform_hess)
    assert_derivative_correct(logreg.logreg_grad, seed=1)
    assert_derivative_correct(logreg.logreg_hess, seed=2)


@settings(max_examples=5, deadline=None)
@given(function_inputs(logreg.logreg, max_size=4))
def test_logreg_gradient_at_random_inputs(args):
    assert_derivative_correct(logreg.logreg_grad, args)


def test_contracts_hold():
    from tensorlang.check.contracts import check_module

    for result in check_module(qform):       # what `tl check` decides
        assert result.ok, result.describe()


def test_conv_gradient():
    assert_derivative_correct(qform.deconv_grad)


def test_cost_bounds():
    # the cheap-gradient theorem, proved for all sizes from the cost formulas
    result = assert_cost_bound(qform.qform_grad, "4 * cost(qform) + N")
    assert result.proved_from is not None
    # the Hessian costs exactly N^2 additions: its formula, and a bound with a callable
    assert str(qform.qform_hess.cost_formula()) == "N**2"
    assert_cost_bound(qform.qform_hess, lambda N: N**2)
    assert_cost_bound(logreg.logreg_grad, "muls <= 2 * cost(logreg)")


@settings(max_examples=10, deadline=None)
@given(function_sizes(logreg.logreg_hess, max_size=8))
def test_hessian_cost_formula(sizes):
    formula = logreg.logreg_hess.cost_formula()
    assert formula.evaluate(**sizes) == logreg.logreg_hess.cost(**sizes)
