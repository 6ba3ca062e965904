"""numba_rt.tl_exp, tl_log and tl_tanh, the kernels' exp, log and tanh written without a
library call (so that loops of them vectorise), against numpy's and libm's: exp and log
within 1 ulp, tanh within 2, exact on the special values, the same in a vectorised loop as
one call at a time, and vectorised (the loop's LLVM IR has vector operations; tests do not
time)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

numba = pytest.importorskip("numba")


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want))


@pytest.fixture(scope="module")
def kernels():
    from tensorlang.backends import numba_rt

    exp = numba_rt.tl_exp

    @numba.njit(error_model="numpy")
    def loop(xs, out):                   # LLVM vectorises this loop (tl_exp inlined)
        for k in range(xs.shape[0]):
            out[k] = exp(xs[k])

    return exp, loop


def test_exp_within_one_ulp_of_numpy(kernels):
    _, loop = kernels
    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.uniform(-745.2, 709.8, 400_000), rng.uniform(-1.0, 1.0, 200_000),
                         rng.standard_normal(200_000) * 20, rng.uniform(-745.2, -708.0, 100_000),
                         np.ldexp(rng.uniform(-1, 1, 50_000), rng.integers(-1074, 0, 50_000))])
    out = np.empty_like(xs)
    loop(xs, out)
    with np.errstate(over="ignore"):
        want = np.exp(xs)
    big = np.isinf(want)                 # above 709.78...: both overflow
    assert big.any() and np.array_equal(np.isinf(out), big)
    normal = (want >= np.finfo(np.float64).tiny) & ~big
    assert _ulps(out[normal], want[normal]).max() <= 1.0
    sub = ~normal & ~big    # subnormal results (and 0): one rounding, 1 unit at most
    assert np.abs(out[sub] - want[sub]).max() <= np.finfo(np.float64).smallest_subnormal
    assert np.all(out >= 0)


def test_exp_special_values(kernels):
    exp, loop = kernels
    xs = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 709.782712893384,
                   709.7827128933841, 710.0, 1e308, -1e308, -745.1332191019411,
                   -745.1332191019412, -745.14, -746.0, 5e-324, -5e-324, 1e-300, 2.0 ** -60])
    out = np.empty_like(xs)
    loop(xs, out)
    with np.errstate(over="ignore"):
        want = np.exp(xs)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(out[ok], want[ok], rtol=2.3e-16, atol=5e-324)
    assert exp(0.0) == 1.0 and exp(-0.0) == 1.0 and exp(np.inf) == np.inf and exp(-np.inf) == 0.0
    assert np.isnan(exp(np.nan))
    scalar = np.array([exp(x) for x in xs])       # one call at a time: the same bits
    assert np.array_equal(scalar[ok], out[ok])


def test_the_exp_loop_is_vectorised(kernels):
    """The point of it: a loop of exps runs at SIMD width (libm's call cannot be vectorised
    and ran 5-8x slower than numpy's exp).  Checked on the compiled loop's LLVM IR."""
    _, loop = kernels
    xs = np.linspace(-10.0, 0.0, 64)
    loop(xs, np.empty_like(xs))
    ir = "\n".join(loop.inspect_llvm().values())
    assert "x double>" in ir and "@exp(" not in ir
    # 2^k from the bits of the rounded k, not a float-to-int conversion: AVX2 has no vector
    # one for int64, and LLVM's scalarised conversions cost a quarter of the loop's time
    assert "fptosi" not in ir


# -- log and tanh ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def log_tanh():
    from tensorlang.backends import numba_rt

    log, tanh = numba_rt.tl_log, numba_rt.tl_tanh

    @numba.njit(error_model="numpy")
    def log_loop(xs, out):               # vectorised: tl_log inlined, no libm call
        for k in range(xs.shape[0]):
            out[k] = log(xs[k])

    @numba.njit(error_model="numpy")
    def tanh_loop(xs, out):
        for k in range(xs.shape[0]):
            out[k] = tanh(xs[k])

    return log, tanh, log_loop, tanh_loop


def _run(loop, xs: np.ndarray) -> np.ndarray:
    out = np.empty_like(xs)
    loop(xs, out)
    return out


def _same_specials(got: np.ndarray, want: np.ndarray) -> None:
    """NaN where libm gives NaN; otherwise equal values with equal signs (of zeros too)."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]),
                                                                  np.signbit(want[ok]))


def test_log_within_one_ulp_of_libm(log_tanh):
    _, _, log_loop, _ = log_tanh
    rng = np.random.default_rng(12)
    xs = np.concatenate([rng.uniform(0.0, 10.0, 300_000), np.exp(rng.uniform(-744, 709, 300_000)),
                         rng.uniform(0.7, 1.45, 300_000), 1.0 + rng.uniform(-1e-9, 1e-9, 50_000),
                         np.ldexp(rng.uniform(0.0, 1.0, 50_000),
                                  rng.integers(-1074, -1000, 50_000)),
                         rng.uniform(0.0, np.finfo(np.float64).max, 50_000)])
    xs = xs[xs > 0]
    got, want = _run(log_loop, xs), np.log(xs)
    nonzero = want != 0
    assert _ulps(got[nonzero], want[nonzero]).max() <= 1.0
    assert np.all(got[~nonzero] == 0.0)


def test_log_special_values(log_tanh):
    log, _, log_loop, _ = log_tanh
    xs = np.array([0.0, -0.0, 1.0, -1.0, -1e-300, -np.inf, np.inf, np.nan, 5e-324, 1e-310,
                   2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
                   0.5, 2.0, np.e, 0.7071067811865476, 1.4142135623730951])
    got = _run(log_loop, xs)
    with np.errstate(all="ignore"):
        want = np.log(xs)
    near = ~np.isnan(want) & np.isfinite(want) & (want != 0)
    assert _ulps(got[near], want[near]).max() <= 1.0
    got[near] = want[near]
    _same_specials(got, want)
    scalar = np.array([log(x) for x in xs])      # one call at a time: the same bits
    assert np.array_equal(scalar, got) or np.array_equal(np.isnan(scalar), np.isnan(got))


def test_tanh_within_two_ulp_of_libm(log_tanh):
    _, _, _, tanh_loop = log_tanh
    rng = np.random.default_rng(13)
    xs = np.concatenate([rng.uniform(-25.0, 25.0, 300_000), rng.standard_normal(300_000),
                         rng.uniform(-0.7, 0.7, 300_000), rng.uniform(-1e-4, 1e-4, 50_000),
                         np.ldexp(rng.uniform(-1, 1, 50_000), rng.integers(-1074, 3, 50_000))])
    got, want = _run(tanh_loop, xs), np.tanh(xs)
    nonzero = want != 0
    assert _ulps(got[nonzero], want[nonzero]).max() <= 2.0
    _same_specials(got[~nonzero], want[~nonzero])
    assert np.all(np.abs(got) <= 1.0)


def test_tanh_special_values(log_tanh):
    _, tanh, _, tanh_loop = log_tanh
    xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 3.7e-9, -3.8e-9,
                   0.625, -0.625, 0.6249999999999999, 19.0, 22.0, -22.0, 710.0, 1e308, -1e308])
    got = _run(tanh_loop, xs)
    want = np.tanh(xs)
    near = ~np.isnan(want) & (want != 0)     # (tanh(19) is 1 - 6.3e-17: 1 - 2^-53 or 1)
    assert _ulps(got[near], want[near]).max() <= 2.0
    got[near] = want[near]
    _same_specials(got, want)
    assert math.copysign(1.0, tanh(-0.0)) == -1.0


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_log_and_tanh_agree_with_math_on_any_float(log_tanh, x):
    """Hypothesis's floats reach the edges (subnormals, the largest floats, signed zeros)."""
    log, tanh = log_tanh[0], log_tanh[1]
    want_log = math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    got = log(x)
    if math.isnan(want_log) or math.isinf(want_log) or want_log == 0.0:
        assert got == want_log or (math.isnan(got) and math.isnan(want_log))
    else:
        assert abs(got - want_log) <= np.spacing(abs(want_log))
    want_tanh = math.tanh(x) if not math.isnan(x) else math.nan
    got = tanh(x)
    if math.isnan(want_tanh):
        assert math.isnan(got)
    elif want_tanh == 0.0:
        assert got == want_tanh and math.copysign(1, got) == math.copysign(1, want_tanh)
    else:
        assert abs(got - want_tanh) <= 2 * np.spacing(abs(want_tanh))


def test_the_log_and_tanh_loops_are_vectorised(log_tanh):
    """The point of them, as for exp: checked on the compiled loops' LLVM IR (libm's `log`
    and `tanh` are calls that no loop vectorises)."""
    _, _, log_loop, tanh_loop = log_tanh
    xs = np.linspace(0.5, 3.0, 64)
    for loop, name in ((log_loop, "log"), (tanh_loop, "tanh")):
        loop(xs, np.empty_like(xs))
        ir = "\n".join(loop.inspect_llvm().values())
        assert "x double>" in ir and f"@{name}(" not in ir, name
        assert "fptosi" not in ir, name     # (as for exp)


@pytest.mark.parametrize("name", ["sigmoid", "dsigmoid", "dtanh"])
def test_builtins_made_of_exp_vectorise(name):
    """numba_rt compiles the other builtins with its exp, log and tanh (`KERNEL_MATH`), and
    they select operands instead of branching around calls: a loop of them vectorises."""
    from tensorlang.backends import numba_rt

    fn = getattr(numba_rt, f"tl_{name}")

    @numba.njit(error_model="numpy")
    def loop(xs, out):
        for k in range(xs.shape[0]):
            out[k] = fn(xs[k])

    xs = np.linspace(-40.0, 40.0, 64)
    out = np.empty_like(xs)
    loop(xs, out)
    ir = "\n".join(loop.inspect_llvm().values())
    assert "x double>" in ir and "@exp(" not in ir
    from tensorlang.semantics import builtins
    np.testing.assert_allclose(out, builtins.apply(name, [xs], []), rtol=1e-15, atol=1e-300)
