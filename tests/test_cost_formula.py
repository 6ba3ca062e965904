"""Exact cost formulas (tensorlang/semantics/cost_formula.py) against the cost model."""
from __future__ import annotations

import random
import zlib
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import slow_params
from tensorlang.ir.ast import TRel
from tensorlang.semantics.cost import cost_def
from tensorlang.semantics.cost_formula import (
    CostFormulaError, QuasiPolynomial, cost_formula, program_bounds,
)
from tensorlang.syntax.errors import TLError
from tensorlang.testing import programs

EXAMPLES = sorted(Path(__file__).resolve().parent.parent.joinpath("examples").glob("*.tl"))


def _functions() -> list[tuple[str, str]]:
    out = []
    for path in EXAMPLES:
        m = tl.load(path)
        out.extend((path.name, name) for name in m)
    return out


def _has_relations(fn: tl.Function) -> bool:
    return any(isinstance(p.type, TRel) for p in fn.params)


def _random_sizes(formula, rng: random.Random, high: int = 40) -> dict[str, int]:
    return {n: rng.randint(formula.domain[n], max(high, formula.domain[n])) for n in formula.sizes}


# The four whose simplification is most of this test's time run with -m slow (docs/
# decisions.md, "CI time"); CI keeps the other derived functions of their files (stencil.tl:
# dirichlet_grad; imgarap.tl: arap_gn, a jvp then a vjp).
SLOW_FUNCTIONS = {("stencil.tl", "upsample_grad"), ("imgarap.tl", "imgarap_grad"),
                  ("imgarap.tl", "arap_jvp"), ("imgarap.tl", "arap_vjp")}


@pytest.mark.parametrize("path,name", slow_params(_functions(), SLOW_FUNCTIONS.__contains__))
def test_example_formula_equals_cost_at_random_sizes(path: str, name: str) -> None:
    fn = tl.load(Path(EXAMPLES[0]).parent / path)[name]
    if _has_relations(fn):
        with pytest.raises(TLError, match="relation"):
            fn.cost_formula()
        return
    formula = fn.cost_formula()
    rng = random.Random(zlib.crc32(name.encode()))  # same sizes in every process
    for _ in range(20):
        sizes = _random_sizes(formula, rng)
        cost = fn.cost(**sizes)
        assert eval(str(formula), {}, dict(sizes)) == cost.total, sizes
        for part in ("adds", "muls", "calls"):
            assert eval(str(formula.component(part)), {}, dict(sizes)) == getattr(cost, part)
        assert formula.evaluate(**sizes) == cost


def test_qform_hessian_and_gradient() -> None:
    m = tl.load(Path(EXAMPLES[0]).parent / "qform.tl")
    n = QuasiPolynomial.variable("N")
    hess = m.qform_hess.cost_formula()
    assert str(hess) == "N**2" and hess.total == n ** 2
    assert hess.domain_text() == "all sizes"
    grad = m.qform_grad.cost_formula()
    # 2 N^2 multiplications (A x and A^T x) and as many additions, less N.
    assert str(grad.muls.leading_term()) == "2*N**2"
    assert str(grad.adds.leading_term()) == "2*N**2"
    assert str(grad.leading_term()) == "4*N**2"
    base = m.qform.cost_formula()
    assert str(base) == "2*N**2 + N - 1" and base.domain == {"N": 1}
    assert grad.leading_term().constant_ratio(base.leading_term()) == 2
    # the program as written
    assert str(m.qform.cost_formula(stage="source")) == "2*N**2 + N - 1"


def test_formula_of_every_stage_matches_that_stage() -> None:
    m = tl.load(Path(EXAMPLES[0]).parent / "conv.tl")
    fn = m.deconv_grad
    for stage in ("source", "letlift", "pairelim", "genpush", "ssa", "simplified"):
        formula = fn.cost_formula(stage=stage)
        rng = random.Random(7)
        for _ in range(5):
            sizes = _random_sizes(formula, rng, 25)
            assert formula.evaluate(**sizes) == fn.cost(stage=stage, **sizes)


SRC = """
def odd(N: size, x: R[N]) -> R:
    return sum k:N. [2*k == N - 1] * (x[k] * x[k])

def third(N: size, x: R[N]) -> R:
    return sum i:N, j:N. [3*j <= i] * (x[i] * x[j])

def shift(N: size, x: R[N]) -> R:
    return sum i:N. [i + 2 < N] * x[i + 2] * x[i]

def diag(N: size, K: size, x: R[N], y: R[K]) -> R[N]:
    return gen i:N. sum j:K. [i == j] * (x[i] * y[j])

def constant(N: size, x: R[N]) -> R:
    return x[0] * x[0]
"""


def test_quasi_polynomial_with_residues() -> None:
    m = tl.parse(SRC)
    odd = m.odd.cost_formula()
    assert str(odd) == "(N % 2)"             # one multiplication when N is odd
    assert odd.total.periods == (2,)
    third = m.third.cost_formula()
    text = str(third)
    assert "% 3" in text and "//" in text
    for n in range(third.domain["N"], 60):
        assert eval(text, {}, {"N": n}) == m.third.cost(N=n).total


def test_domain_is_stated_and_tight() -> None:
    m = tl.parse(SRC)
    shift = m.shift.cost_formula()
    assert shift.domain == {"N": 3}
    assert shift.domain_text() == "N >= 3"
    assert "N >= 3" in shift.describe()
    assert shift.evaluate(N=2) != m.shift.cost(N=2)   # below the domain it does not hold
    for n in range(3, 30):
        assert shift.evaluate(N=n) == m.shift.cost(N=n)
    assert m.constant.cost_formula().total == 1


def test_piecewise_cost_is_refused_with_sizes() -> None:
    m = tl.parse(SRC)
    with pytest.raises(CostFormulaError, match=r"not one quasi-polynomial.*N=\d+, K=\d+"):
        m.diag.cost_formula()          # min(N, K) multiplications


def test_relations_are_refused() -> None:
    m = tl.load(Path(EXAMPLES[0]).parent / "masked.tl")
    with pytest.raises(TLError, match="relation E"):
        m.masked.cost_formula()


def test_program_bounds() -> None:
    m = tl.parse(SRC)
    b = program_bounds(m.third.core())
    assert (b.degree, b.period) == (2, 3)
    assert program_bounds(m.shift.core()).threshold >= 3
    assert program_bounds(m.constant.core()).degree == 0


# -- the quasi-polynomial type ------------------------------------------------------------


def test_quasi_polynomial_arithmetic_and_printing() -> None:
    n, k = QuasiPolynomial.variable("N"), QuasiPolynomial.variable("K")
    p = 2 * n ** 2 + n - 1
    assert str(p) == "2*N**2 + N - 1"
    assert p.evaluate(N=10) == 209
    assert str(n * k - k) == "N*K - K"
    half = QuasiPolynomial(("N",), (1,), {(0,): {(2,): Fraction(1, 2), (1,): Fraction(1, 2)}})
    assert str(half) == "(N**2 + N) // 2" and half.is_integer_valued()
    assert str(half.leading_term()) == "(N**2) / 2" and not half.leading_term().is_integer_valued()
    assert p - p == 0 and (p * 0).degree() == -1
    assert str(-n) == "-N"


@st.composite
def _quasi_polynomials(draw):
    names = draw(st.sampled_from([("N",), ("N", "K")]))
    periods = tuple(draw(st.integers(1, 3)) for _ in names)
    pieces = {}
    import itertools
    for r in itertools.product(*(range(p) for p in periods)):
        piece = {}
        for _ in range(draw(st.integers(0, 3))):
            e = tuple(draw(st.integers(0, 2)) for _ in names)
            piece[e] = Fraction(draw(st.integers(-5, 5)), draw(st.sampled_from([1, 2, 3])))
        pieces[r] = piece
    return QuasiPolynomial(names, periods, pieces)


@settings(max_examples=60)
@given(_quasi_polynomials(), st.integers(0, 30), st.integers(0, 30))
def test_str_evaluates_to_the_formula(q: QuasiPolynomial, a: int, b: int) -> None:
    sizes = dict(zip(q.names, (a, b)))
    text = str(q)
    value = q.evaluate(**sizes)
    got = eval(text, {}, dict(sizes))
    if q.is_integer_valued():
        assert got == value and isinstance(got, int)
    else:
        assert got == pytest.approx(float(value))


@settings(max_examples=40)
@given(_quasi_polynomials(), _quasi_polynomials(), st.integers(0, 20), st.integers(0, 20))
def test_arithmetic_is_pointwise(p: QuasiPolynomial, q: QuasiPolynomial, a: int, b: int) -> None:
    sizes = {"N": a, "K": b}
    ev = lambda f: Fraction(f.evaluate(**sizes))  # noqa: E731
    assert ev(p + q) == ev(p) + ev(q)
    assert ev(p * q) == ev(p) * ev(q)
    assert ev(p - q) == ev(p) - ev(q)


@settings(max_examples=40)
@given(_quasi_polynomials(), st.integers(0, 4))
def test_nonnegativity_proofs_are_sound(q: QuasiPolynomial, low: int) -> None:
    if q.nonnegative_from({n: low for n in q.names}):
        for a in range(low, low + 12):
            for b in range(low, low + 12):
                assert q.evaluate(**dict(zip(q.names, (a, b)))) >= 0


# -- random programs: the formula, when there is one, is the cost model ---------------------


@settings(max_examples=25)
@given(programs(max_size=4, max_depth=5, no_relations=True, max_sizes=2), st.randoms())
def test_random_programs(case, rnd) -> None:
    d, _ = case
    try:
        formula = cost_formula(d)
    except CostFormulaError as err:
        assert "quasi-polynomial" in err.message   # piecewise: refused loudly with sizes
        return
    for _ in range(10):
        sizes = {n: rnd.randint(formula.domain[n], formula.domain[n] + 15)
                 for n in formula.sizes}
        assert formula.evaluate(**sizes) == cost_def(d, sizes), sizes


def test_large_constants_are_refused_not_slow() -> None:
    m = tl.parse("""
def big(N: size, x: R[N]) -> R:
    return sum i:N, j:N, k:N. [i < 500] * (x[i] * x[j] * x[k])
""")
    with pytest.raises(CostFormulaError, match="fitted at sizes up to 505"):
        m.big.cost_formula(stage="source")
