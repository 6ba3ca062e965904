"""The builtin functions of `tensorlang.semantics.builtins` as scalar Python functions.

Plain Python on floats, written so that Numba compiles them (CPU `njit`, and CUDA device
functions later; no calls between them), and so that they agree with the numpy
implementations the interpreter uses, special values included: `tl_relu(-0.0)` is
`np.maximum(-0.0, 0.0)`, `tl_softplus` is numpy's `logaddexp(0, x)` step for step,
`tl_sigmoid` is scipy's `expit`.  Division by zero and domain errors give inf/nan (the
kernels compile with `error_model="numpy"`).

`FUNCS` maps each builtin name to its function; `tests/test_numba_cpu.py` compares every
one with `tensorlang.semantics.builtins.apply` on ordinary and special values.  The CPU
kernels' versions (`numba_rt`) are compiled with `math.exp`, `math.log` and `math.tanh`
meaning numba_rt's branch-free ones, so that loops of them vectorise; for the same reason
the functions here avoid branches whose arms call functions (a select of operands instead:
`tl_sigmoid` computes what scipy's `expit` computes, in one division).
"""
from __future__ import annotations

import math
from typing import Callable

_LOG2 = math.log(2.0)


def tl_exp(x: float) -> float:
    return math.exp(x)


def tl_log(x: float) -> float:
    return math.log(x)


def tl_sin(x: float) -> float:
    return math.sin(x)


def tl_cos(x: float) -> float:
    return math.cos(x)


def tl_tan(x: float) -> float:
    return math.tan(x)


def tl_tanh(x: float) -> float:
    return math.tanh(x)


def tl_sqrt(x: float) -> float:
    return math.sqrt(x)


def tl_sigmoid(x: float) -> float:
    # 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below: e = exp(-|x|) in both
    e = math.exp(-math.fabs(x))
    return (1.0 if x >= 0.0 else e) / (1.0 + e)


def tl_softplus(x: float) -> float:
    # numpy's logaddexp(0.0, x), branch for branch
    if x == 0.0:
        return _LOG2
    tmp = 0.0 - x
    if tmp > 0.0:
        return math.log1p(math.exp(-tmp))
    if tmp <= 0.0:
        return x + math.log1p(math.exp(tmp))
    return tmp


def tl_abs(x: float) -> float:
    return math.fabs(x)


def tl_relu(x: float) -> float:
    # np.maximum(x, 0.0): x if x > 0 or x is nan, else 0.0 (so relu(-0.0) == 0.0)
    return x if (x > 0.0 or x != x) else 0.0


def tl_square(x: float) -> float:
    return x * x


def tl_recip(x: float) -> float:
    return 1.0 / x


def tl_pow(x: float, c: float) -> float:
    # numpy's power takes sqrt for c == 0.5 (so pow(-0.0, 0.5) == -0.0, pow(-inf, 0.5) nan)
    if c == 0.5:
        return math.sqrt(x)
    if c == 2.0:
        return x * x
    return math.pow(x, c)


def tl_max(a: float, b: float) -> float:
    # np.maximum: the first argument if it is larger or nan, else the second
    return a if (a > b or a != a) else b


def tl_min(a: float, b: float) -> float:
    return a if (a < b or a != a) else b


def tl_step(x: float) -> float:
    return 1.0 if x > 0.0 else 0.0


def tl_sign(x: float) -> float:
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    if x == 0.0:
        return 0.0
    return x


def tl_ge(a: float, b: float) -> float:
    return 1.0 if a >= b else 0.0


def tl_gt(a: float, b: float) -> float:
    return 1.0 if a > b else 0.0


def tl_dtanh(x: float) -> float:
    u = math.exp(-2.0 * math.fabs(x))
    d = 1.0 + u
    return 4.0 * u / (d * d)


def tl_dsigmoid(x: float) -> float:
    # expit(x) * expit(-x), each as in tl_sigmoid: one of them is 1 / (1 + e), the other
    # e / (1 + e), with e = exp(-|x|) (at x = 0 both are 1/2 either way)
    e = math.exp(-math.fabs(x))
    d = 1.0 + e
    return (1.0 / d) * (e / d)


def tl_dtan(x: float) -> float:
    t = math.tan(x)
    return 1.0 + t * t


def tl_d2tanh(x: float) -> float:
    # -2 tanh(x) dtanh(x), dtanh as in tl_dtanh
    u = math.exp(-2.0 * math.fabs(x))
    d = 1.0 + u
    return -2.0 * math.tanh(x) * (4.0 * u / (d * d))


def tl_d2sigmoid(x: float) -> float:
    # -tanh(x / 2) dsigmoid(x), dsigmoid as in tl_dsigmoid
    e = math.exp(-math.fabs(x))
    d = 1.0 + e
    return -math.tanh(0.5 * x) * ((1.0 / d) * (e / d))


def tl_d2tan(x: float) -> float:
    t = math.tan(x)
    return 2.0 * t * (1.0 + t * t)


def tl_sel_ge(a: float, b: float, x: float, y: float) -> float:
    if a >= b:
        return x
    if a < b:
        return y
    return 0.0   # unordered (nan)


def tl_keep_ge(a: float, b: float, x: float) -> float:
    return x if a >= b else 0.0


def tl_keep_gt(a: float, b: float, x: float) -> float:
    return x if a > b else 0.0


FUNCS: dict[str, Callable[..., float]] = {
    name[3:]: fn for name, fn in list(globals().items())
    if name.startswith("tl_") and callable(fn)
}
