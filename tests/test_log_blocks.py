"""A block of a sum computes its logs without the cases of special arguments
(`numba_rt.tl_log_normal`) and again with `tl_log` when one of its arguments is zero,
subnormal, negative, inf or NaN (`NumbaEmitter._block_again`; issue 14: nnmatfac).  The
result has the bits of the kernel without the fast form, and the interpreter's values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorlang as tl
from examples_util import EXAMPLES, assert_same
from tensorlang.semantics.interp import interpret

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import numba_cpu_source, numba_rt  # noqa: E402
from tensorlang.backends.numba_cpu_source import NumbaEmitter  # noqa: E402

ROWS = "def f(N: size, M: size, X: R[N, M], Y: R[N, M]) -> R[N]:\n" \
       "    return gen i:N. sum j:M. log(X[i, j]) * Y[i, j] + log(log(X[i, j] + 3.0))\n"
# the argument of row r's special value, at column SPECIAL_AT[r] (a second block from 128)
SPECIALS = [0.0, -0.0, 5e-324, 1e-310, -2.0, math.inf, -math.inf, math.nan,
            2.2250738585072014e-308, 1.7976931348623157e308]
SPECIAL_AT = [3, 130, 0, 200, 127, 128, 255, 64, 10, 300]


def _source(text: str, fast: bool = True, jit: bool = True) -> str:
    p = tl.parse(text).f.final_program()
    saved = NumbaEmitter.fast_logs
    try:
        NumbaEmitter.fast_logs = fast
        return numba_cpu_source.module_source(p, jit=jit)
    finally:
        NumbaEmitter.fast_logs = saved


def _run(src: str, args: dict, jit: bool = True) -> np.ndarray:
    ns: dict = {}
    exec(compile(src.replace("cache=True", "cache=False"), "<kernel>", "exec"), ns)
    kernel = ns["tl_kernel"]
    code = (kernel.py_func if jit else kernel).__code__
    return kernel(*[args[n[2:]] for n in code.co_varnames[:code.co_argcount]])[0]


def _args(m: int) -> dict:
    rng = np.random.default_rng(m)
    n = len(SPECIALS) + 1   # the last row has no special value
    X = rng.uniform(0.1, 4.0, (n, m))
    for r, (v, at) in enumerate(zip(SPECIALS, SPECIAL_AT)):
        X[r, at % m] = v
    return {"N": n, "M": m, "X": X, "Y": rng.standard_normal((n, m))}


def test_the_helpers_agree_with_tl_log_where_they_claim_to():
    for v in SPECIALS + [1.0, 0.5, 3.0, 1e300, 1e-300, 2.0 ** 1023, 0.7071067811865476]:
        outside = bool(numba_rt.tl_log_outside(v))
        assert outside == numba_rt.python_log_outside(v)
        assert outside == (not (v > 0 and math.isfinite(v) and v >= 2.2250738585072014e-308))
        if not outside:
            assert numba_rt.tl_log_normal(v) == numba_rt.tl_log(v)
    x = np.exp(np.random.default_rng(0).uniform(-700.0, 700.0, 20000))
    assert all(numba_rt.tl_log_normal(v) == numba_rt.tl_log(v) for v in x)


@pytest.mark.parametrize("m", [7, 128, 400])   # the short loop; one block; blocks and a rest
def test_blocks_with_special_arguments_give_the_plain_forms_bits(m):
    src, plain = _source(ROWS), _source(ROWS, fast=False)
    assert "tl_log_normal" in src and "tl_log_outside" in src
    assert "tl_log_normal" not in plain
    args = _args(m)
    got = _run(src, args)
    assert np.array_equal(got, _run(plain, args), equal_nan=True)
    # log(0) = -inf, of a negative number NaN, of inf inf: the row's sum is not finite
    special = [not (v > 0.0 and math.isfinite(v)) for v in SPECIALS] + [False]
    assert list(~np.isfinite(got)) == special
    fn = tl.parse(ROWS).f
    assert_same(got, interpret(fn.core(), args), atol=1e-9)
    python = _run(_source(ROWS, jit=False), args, jit=False)   # the plain-Python stand-ins
    assert_same(python, got, atol=1e-9)


def test_nnmatfac_uses_the_fast_form_and_agrees():
    m = tl.load(str(EXAMPLES / "nnmatfac.tl"))
    f = m["nnmatfac"]
    assert "tl_log_normal" in str(f.generated_source("numba"))
    rng = np.random.default_rng(0)
    n, k = 300, 5
    A, W, H = rng.random((n, n)), rng.random((n, k)) + 0.1, rng.random((k, n)) + 0.1
    args = {"A": A, "W": W, "H": H}
    assert_same(f.compile("numba")(**args), f.compile("interp")(**args), atol=1e-9)
    W[7, :] = 0.0   # a row of WH is 0: log gives -inf, A / 0 inf: the sum is NaN
    assert math.isnan(float(f.compile("numba")(**args)))
