"""Summation accuracy (issue 13): the interpreter (the oracle) sums as accurately as numpy's
pairwise `np.sum`, and the Numba backend's blocked, compensated accumulators stay within
1e-13 of the correctly rounded sum (`math.fsum`) on 10^7 terms, where a left-to-right loop
loses about 1e-9."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorlang as tl

N = 10**7
BOUND = 1e-13

MODULE = tl.parse("""
def total(N: size, x: R[N]) -> R:
    return sum i:N. x[i]

def dot(N: size, x: R[N], y: R[N]) -> R:
    return sum i:N. x[i] * y[i]

def rows(M: size, N: size, A: R[M, N]) -> R[M]:
    return gen i:M. sum j:N. A[i, j]

def grid(M: size, N: size, A: R[M, N]) -> R:
    return sum i:M, j:N. A[i, j]
""")


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(13)
    wide = rng.standard_normal(N) * np.exp(rng.uniform(-20.0, 20.0, N))   # wide range
    # 1/3 plus tiny steps: every add of a left-to-right loop rounds the same way (1e-10)
    thirds = 1.0 / 3.0 + rng.uniform(0.0, 1e-12, N)
    return {"wide": wide, "thirds": thirds}


DATA = _data()


def _rel(got: float, want: float) -> float:
    return abs(got - want) / abs(want)


@pytest.mark.parametrize("case", sorted(DATA))
def test_interpreter_sum_is_as_accurate_as_numpy(case: str) -> None:
    x = DATA[case]
    exact = math.fsum(x)
    got = MODULE["total"].interpret(x)
    assert _rel(got, exact) <= _rel(float(np.sum(x)), exact)
    assert _rel(got, exact) <= BOUND


@pytest.mark.parametrize("case", sorted(DATA))
def test_numba_sum_within_1e13(case: str) -> None:
    x = DATA[case]
    assert _rel(MODULE["total"].compile("numba")(x), math.fsum(x)) <= BOUND


def test_dot_product_contraction() -> None:
    x, y = DATA["wide"], DATA["thirds"]
    exact = math.fsum(x * y)   # the products are exact to 1 ulp each; fsum of the rounded ones
    want = float(np.sum(x * y))
    interp = MODULE["dot"].interpret(x, y)
    assert _rel(interp, exact) <= max(_rel(want, exact), BOUND)
    assert _rel(MODULE["dot"].compile("numba")(x, y), exact) <= BOUND


def test_row_sums_of_long_rows() -> None:
    a = DATA["thirds"].reshape(10, N // 10)
    exact = np.array([math.fsum(r) for r in a])
    numpy_err = np.abs(a.sum(axis=1) - exact) / np.abs(exact)
    interp_err = np.abs(MODULE["rows"].interpret(a) - exact) / np.abs(exact)
    assert np.all(interp_err <= np.maximum(numpy_err, 0.0))
    numba_err = np.abs(MODULE["rows"].compile("numba")(a) - exact) / np.abs(exact)
    assert numba_err.max() <= BOUND


@pytest.mark.parametrize("case", sorted(DATA))
@pytest.mark.parametrize("width", [100, 300])
def test_sums_of_rows_shorter_than_a_block(case: str, width: int) -> None:
    """The innermost loop runs as blocks of 128 counted from its start (accumulate.py):
    rows of 100 terms are all short blocks, added into the open block; rows of 300 end in
    one.  Within the bound still."""
    x = DATA[case]
    a = x.reshape(N // width, width) if N % width == 0 else x[:N - N % width].reshape(-1, width)
    exact = math.fsum(a.ravel())
    assert _rel(MODULE["grid"].compile("numba")(a), exact) <= BOUND


def test_non_finite_terms_sum_like_a_loop() -> None:
    """The compensation is nan once a term is infinite; the sum is the plain total then."""
    f = MODULE["total"].compile("numba")
    for xs in ([1.0, np.inf, 2.0], [np.inf, -np.inf], [1.0, np.nan], [-np.inf] * 300):
        x = np.array(xs)
        np.testing.assert_equal(f(x), MODULE["total"].interpret(x))


def test_neumaier_helper_is_the_inline_merge() -> None:
    """`numba_rt.tl_neumaier` (what the CPU kernels call) does the operations of the inline
    merge (what the CUDA kernels print), bit for bit, special values included (a NaN is a
    NaN: once the compensation is NaN the total is not finite, and a non-finite total is
    the result, `accumulate.result`)."""
    pytest.importorskip("numba")
    from tensorlang.backends import accumulate, numba_rt

    lines = accumulate.merge("a", "v", "    ")
    code = compile("\n".join(lines), "<merge>", "exec")
    special = [0.0, -0.0, 1.0, -1.0, 1e-300, 1e300, 3.0, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(16)
    values = [float(x) for x in  # (Python floats: no numpy warnings for inf - inf)
              special + list(rng.standard_normal(20) * 10.0 ** rng.integers(-20, 20, 20))]
    for s in values:
        for c in (0.0, 1e-17, -3e-5, np.nan):
            for v in values:
                env = {"a_s": s, "a_c": c, "v": v}
                exec(code, env)
                want = np.array([env["a_s"], env["a_c"]])
                for got in (np.array(numba_rt.tl_neumaier(s, c, v)),
                            np.array(accumulate.neumaier(s, c, v))):
                    _same_bits_or_nan(got, want, (s, c, v))


def _same_bits_or_nan(got: np.ndarray, want: np.ndarray, what: object) -> None:
    """Equal bit for bit, except that a NaN's sign and payload (which the hardware takes from
    either operand) are not compared."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), (what, got, want)
    assert got[~nan].tobytes() == want[~nan].tobytes(), (what, got, want)
