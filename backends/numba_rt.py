"""Run-time helpers of generated Numba CPU kernels: the builtins, compiled with `njit`.

Generated modules import `tl_<name>` from here.  They are compiled lazily, cached on disk by
Numba, and use `error_model="numpy"` like the kernels (1/0 is inf, not an exception).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .scalar_builtins import FUNCS

_JIT = dict(cache=True, error_model="numpy", nogil=True)

globals().update({f"tl_{name}": njit(**_JIT)(fn) for name, fn in FUNCS.items()})


@njit(cache=True, nogil=True)
def tl_matmul(a, b):  # type: ignore[no-untyped-def]
    """`a @ b` for C-contiguous float64 matrices (BLAS gemm).  Kernels call this instead of
    `np.dot` so that the linear-algebra typing is compiled (and disk-cached) once, not in
    every kernel."""
    return np.dot(a, b)


__all__ = [f"tl_{name}" for name in FUNCS] + ["tl_matmul", "tl_matmul_loops"]


# -- plain-Python stand-ins (`compile_program(p, jit=False)`) ---------------------------------


def python_njit(*args: object, **kwargs: object) -> object:
    """`njit(...)` as a no-op decorator."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda f: f


python_prange = range


def _python_builtin(name: str) -> object:
    import numpy as np

    from tensorlang.semantics import builtins

    def fn(*xs: float) -> float:
        f = builtins.lookup(name)
        args = [np.float64(x) for x in xs[:f.arity]]
        return np.float64(builtins.apply(name, args, xs[f.arity:]))

    fn.__name__ = f"python_{name}"
    return fn


globals().update({f"python_{name}": _python_builtin(name) for name in FUNCS})


def python_matmul(a: object, b: object) -> object:
    import numpy as np
    return np.dot(a, b)


@njit(cache=True, nogil=True)
def tl_matmul_loops(a, b):  # type: ignore[no-untyped-def]
    """`a @ b` as a loop nest: what AOT images call instead of BLAS (backends/aot_cpu.py)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for t in range(k):
            x = a[i, t]
            for j in range(n):
                out[i, j] += x * b[t, j]
    return out
