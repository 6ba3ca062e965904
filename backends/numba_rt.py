"""Run-time helpers of generated Numba CPU kernels: the builtins, compiled with `njit`.

Generated modules import `tl_<name>` from here.  They are compiled lazily, cached on disk by
Numba, and use `error_model="numpy"` like the kernels (1/0 is inf, not an exception).
"""
from __future__ import annotations

from numba import njit

from .scalar_builtins import FUNCS

_JIT = dict(cache=True, error_model="numpy", nogil=True)

globals().update({f"tl_{name}": njit(**_JIT)(fn) for name, fn in FUNCS.items()})

__all__ = [f"tl_{name}" for name in FUNCS]
