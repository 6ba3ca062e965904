"""Sums run by rows that read their terms down a column run over blocks of points
(`NumbaEmitter._column_blocked`), and equal constants are one kernel argument (issue 14:
nbody's Hessian-vector product).  The blocked form gives the bits of the plain one, and the
interpreter's values."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from examples_util import EXAMPLES, assert_same
from tensorlang.semantics.interp import interpret
from tensorlang.testing import random_args

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import numba_cpu_source  # noqa: E402
from tensorlang.backends.numba_cpu_source import NumbaEmitter  # noqa: E402

# (program, whether its sum is column-blocked)
CASES = {
    "triangle": ("def f(N: size, A: R[N, N], B: R[N, 3]) -> R[N, 3]:\n"
                 "    return gen i:N, c:3. sum j:N. [j < i] * A[j, i] * sin(B[j, c])\n",
                 True),
    "wide_group": ("def f(N: size, M: size, A: R[N, N], B: R[N, M]) -> R[N, M]:\n"
                   "    return gen i:N, c:M. sum j:N. [j < i] * A[j, i] * sin(B[j, c])\n",
                   True),
    "by_row": ("def f(N: size, A: R[N, N], B: R[N, 3]) -> R[N, 3]:\n"
               "    return gen i:N, c:3. sum j:N. [i < j] * A[i, j] * sin(B[j, c])\n",
               False),
}


def _source(text: str, blocked: bool = True) -> str:
    p = tl.parse(text).f.final_program()
    saved = NumbaEmitter._column_blocked
    try:
        if not blocked:
            NumbaEmitter._column_blocked = lambda *a: False   # type: ignore[method-assign]
        return numba_cpu_source.module_source(p)
    finally:
        NumbaEmitter._column_blocked = saved


_KERNELS: dict[str, object] = {}


def _run(src: str, args: dict) -> np.ndarray:
    if src not in _KERNELS:
        ns: dict = {}
        exec(compile(src.replace("cache=True", "cache=False"), "<kernel>", "exec"), ns)
        _KERNELS[src] = ns["tl_kernel"]
    kernel = _KERNELS[src]
    code = kernel.py_func.__code__   # (parameters n_N, v_A, ...: the program's names)
    return kernel(*[args[n[2:]] for n in code.co_varnames[:code.co_argcount]])[0]


@pytest.mark.parametrize("name", list(CASES))
def test_the_blocked_form_gives_the_plain_forms_bits_and_the_interpreters_values(name):
    text, blocked = CASES[name]
    src = _source(text)
    assert ("_cb" in src) == blocked
    plain = _source(text, blocked=False)
    assert "_cb" not in plain
    fn = tl.parse(text).f
    for n in (1, 2, 17, 40, 300):   # one point, a partial block, blocks of terms that fold
        sizes = {k: v for k, v in (("N", n), ("M", 5)) if k in {p.name for p in fn.params}}
        args = random_args(fn.core(), sizes, np.random.default_rng(n))
        args.update(sizes)
        got = _run(src, args)
        assert np.array_equal(got, _run(plain, args))
        assert_same(got, interpret(fn.core(), args), atol=1e-9)


# CI: the Hessian-vector product (issue 14's case) on the JIT; the gradient (another kernel to
# compile for the JIT; test_fusion_duplicate runs its AOT image) with -m slow (docs/
# decisions.md, "CI time").
@pytest.mark.parametrize("name", [pytest.param("nbody_grad", marks=pytest.mark.slow), "nbody_hvp"])
def test_nbody_derivatives_use_column_blocks_and_agree(name):
    fn = tl.load(str(EXAMPLES / "nbody.tl"))[name]
    rng = np.random.default_rng(0)
    P, mass, v = rng.random((150, 3)), rng.random(150) + 0.5, rng.standard_normal((150, 3))
    assert "_cb" in str(fn.generated_source("numba"))
    args = {"N": 150, "P": P, "m": mass, **({"v": v} if name == "nbody_hvp" else {})}
    assert_same(numba_cpu.compile_program(fn.final_program(), engine="jit")(args),
                interpret(fn.core(), args), atol=1e-9)


def test_equal_constants_are_one_argument():
    text = ("def f(N: size, x: R[N], y: R[N]) -> R:\n"
            "    return sum i:N. 2.5 * sin(x[i]) + 2.5 * cos(y[i]) + 0.25 * x[i] * y[i]\n")
    src, consts = numba_cpu_source.abstract_source(tl.parse(text).f.final_program())
    assert sorted(consts) == [0.25, 2.5] and "tl_c[2]" not in src
