"""Run-time helpers of generated Numba CPU kernels: the builtins, compiled with `njit`.

Generated modules import `tl_<name>` from here.  They are compiled lazily, cached on disk by
Numba, and use `error_model="numpy"` like the kernels (1/0 is inf, not an exception).
`tl_exp`, `tl_log` and `tl_tanh` are not libm's (a call no loop vectorises) but
straight-line arithmetic (below).
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import types as pytypes
from typing import Any, Callable

# Idle OpenMP workers sleep instead of spinning (read when Numba starts its pool, on the first
# parallel kernel; a value the user set is kept): a spinning worker takes the core that BLAS,
# the calling thread or another process needs, which made a kernel 10-100x slower whenever
# another process kept one core busy (docs/backends.md, "Threads").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.extending import get_cython_function_address, intrinsic  # noqa: E402
from llvmlite import binding as llvm_binding  # noqa: E402
from llvmlite import ir as llvm_ir  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.core.compiler import Compiler  # noqa: E402
from numba.np.arrayobj import make_array, populate_array  # noqa: E402

from . import accumulate  # noqa: E402
from .scalar_builtins import FUNCS  # noqa: E402

_JIT = dict(cache=True, error_model="numpy", nogil=True)

# The compensated addition of the sums' accumulators (backends/accumulate.py)
tl_neumaier = njit(**_JIT)(accumulate.neumaier)


class TlNoAlias(Compiler):
    """The compiler pipeline of a parallel loop's outlined body whose array arguments are
    distinct allocations or read-only inputs (`prange_bodies.outline`): Numba's `noalias`
    flag, which marks the function's pointer arguments `noalias` for LLVM.  Passed as
    separate arguments, a body's arrays may alias for LLVM, which then reloads what a store
    might have changed and keeps loops from vectorising: maxpool's gradient at H = W = 2000
    ran 41 ms so on one thread, 25 ms with the flag (32 ms as one function)."""

    def define_pipelines(self):  # type: ignore[no-untyped-def]
        self.state.flags.noalias = True
        return super().define_pipelines()


def _with_globals(fn: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """`fn` with some of its global names bound to other objects (the compiled helpers it
    calls), for `njit`."""
    return pytypes.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                                fn.__defaults__, fn.__closure__)


# The blocked loops of sums (accumulate.block_loop)
tl_block_sum = njit(**_JIT)(accumulate.block_sum)
tl_block_close = njit(**_JIT)(_with_globals(accumulate.block_close, block_sum=tl_block_sum,
                                            neumaier=tl_neumaier))


_STACK_ARRAY = types.Array(types.float64, 1, "C")


def _stack_array(size: int):  # type: ignore[no-untyped-def]
    """The codegen of a float64 array of `size` elements on the stack of the calling function
    (allocated once, in its entry block; no reference count)."""
    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        double = context.get_value_type(types.float64)
        data = cgutils.alloca_once(builder, double, size=size)
        ary = make_array(_STACK_ARRAY)(context, builder)
        intp = context.get_value_type(types.intp)
        populate_array(ary, data=data, shape=cgutils.pack_array(builder, [intp(size)]),
                       strides=cgutils.pack_array(builder, [intp(8)]),
                       itemsize=intp(8), meminfo=None)
        return ary._getvalue()
    return codegen


@intrinsic
def tl_block_buffer(typingctx):  # type: ignore[no-untyped-def]
    """A float64 array of `accumulate.BLOCK` elements on the stack of the calling function:
    the terms of one block.  Inside a `prange` the body is a function of its own, so each
    thread has its own."""
    return _STACK_ARRAY(), _stack_array(accumulate.BLOCK)


@intrinsic
def tl_row_buffer(typingctx, n):  # type: ignore[no-untyped-def]
    """A float64 array of 3 * `accumulate.ROW_MAX` elements on the stack of the calling
    function (as `tl_block_buffer`): the sums, compensations and carries of a row of sums
    (`numba_cpu_source.sums_by_row`), which would otherwise be allocated for every row.
    `n` (at most its size: the elements the caller uses) matters to the stand-in only."""
    return _STACK_ARRAY(n), _stack_array(3 * accumulate.ROW_MAX)


@intrinsic
def tl_nonneg(typingctx, x):  # type: ignore[no-untyped-def]
    """`x`, which the compiler may assume is not negative (`llvm.assume`): indexing with it
    needs no wraparound, so a loop's loads stay contiguous (vector loads, not gathers).
    Only where `x >= 0` holds (`accumulate.block_loop` tests its loop's start)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        assume = builder.module.declare_intrinsic(
            "llvm.assume", fnty=llvm_ir.FunctionType(llvm_ir.VoidType(), [llvm_ir.IntType(1)]))
        builder.call(assume, [builder.icmp_signed(">=", args[0], args[0].type(0))])
        return args[0]
    return x(x), codegen


# -- exp without a library call ---------------------------------------------------------------
# libm's `exp` is a call LLVM cannot vectorise: a loop of exps (the RBF kernel matrix of a
# Gaussian process) ran 5-8x slower than numpy's or XLA's SIMD exp.  This one is straight-line
# arithmetic that LLVM inlines and vectorises: x = k ln2 + r (Cody-Waite, |r| <= ln2 / 2),
# exp(r) by its Taylor polynomial to degree 13 (truncation < 2^-60 relative), 2^k as two
# exponent-field products (so that results in the subnormal range are rounded once).  Within
# 1 ulp of numpy's exp (tests/test_numba_exp.py); inf, 0 and NaN where numpy gives them.

@intrinsic
def _float_from_bits(typingctx, bits):  # type: ignore[no-untyped-def]
    """The float64 whose IEEE bits are the int64 `bits` (a bit cast, no conversion)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def _bits_from_float(typingctx, x):  # type: ignore[no-untyped-def]
    """The int64 whose bits are those of the float64 `x` (a bit cast, no conversion)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01   # ln 2 to 32 bits: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_ROUND = 6755399441055744.0            # 1.5 * 2^52: x + _ROUND - _ROUND rounds x to an integer
_ROUND_BITS = 0x4338000000000000       # its bits: bits(x + _ROUND) - _ROUND_BITS is that integer
_EXP_MAX = 709.782712893384            # exp(x) overflows above
_EXP_MIN = -745.1332191019412          # and is 0 below


@njit(**_JIT)
def tl_exp(x):  # type: ignore[no-untyped-def]
    xc = x if x < 709.9 else 709.9      # (NaN becomes 709.9 here: it is put back at the end)
    xc = xc if xc > -745.5 else -745.5
    t = xc * _INV_LN2 + _ROUND
    k = t - _ROUND
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    q = 0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (
        1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
            1.0 / 39916800 + r * (1.0 / 479001600 + r * (1.0 / 6227020800)))))))))))
    p = 1.0 + (r + (r * r) * q)
    ki = _bits_from_float(t) - _ROUND_BITS     # (k, without a float-to-int conversion)
    k1 = ki >> 1
    y = p * _float_from_bits((k1 + 1023) << 52) * _float_from_bits((ki - k1 + 1023) << 52)
    y = math.inf if x > _EXP_MAX else y
    y = 0.0 if x < _EXP_MIN else y
    return x if x != x else y


# -- log: fdlibm's algorithm without branches ---------------------------------------------------
# x = 2^k z with z in [sqrt(1/2), sqrt(2)) (integer arithmetic on the bits; subnormals are
# first scaled by 2^52), f = z - 1, s = f / (2 + f), log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2))
# with fdlibm's minimax R: within 1 ulp of libm's log (tests/test_numba_exp.py).

_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01
_TINY = 2.2250738585072014e-308      # the smallest normal float
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD


@njit(**_JIT)
def _log_reduced(f, dk):  # type: ignore[no-untyped-def]
    """log(2^dk (1 + f)) for f in [sqrt(1/2) - 1, sqrt(2) - 1): fdlibm's evaluation."""
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7))) + w * (_LG2 + w * (_LG4 + w * _LG6))
    return dk * _LN2_HI - ((hfsq - (s * (hfsq + r) + dk * _LN2_LO)) - f)


@njit(**_JIT)
def tl_log(x):  # type: ignore[no-untyped-def]
    sub = x < _TINY
    xs = x * 4503599627370496.0 if sub else x     # (2^52)
    ix = _bits_from_float(xs)
    k = (ix - _SQRT_HALF_BITS) >> 52
    f = _float_from_bits(ix - (k << 52)) - 1.0
    y = _log_reduced(f, np.float64(k - 52 if sub else k))
    y = x if x == math.inf else y
    y = -math.inf if x == 0.0 else y
    return math.nan if (x < 0.0 or x != x) else y


# -- log of a positive normal float -----------------------------------------------------------
# tl_log less its cases for zero, subnormal, negative, inf and NaN input (a scaling and four
# selects per element: a quarter of its time in a loop).  A blocked sum computes each block
# with it and tests every argument with `tl_log_outside`; a block with an argument outside
# is computed again with tl_log (`NumbaEmitter._block_again`): the sum has tl_log's bits.

_NORMAL_MIN_BITS = 0x0010000000000000                  # bits of the smallest normal float
_NORMAL_SPAN = 0x7FF0000000000000 - _NORMAL_MIN_BITS   # ... to those of inf (not included)
_SIGN_BIT = -0x8000000000000000


@njit(**_JIT)
def tl_log_normal(x):  # type: ignore[no-untyped-def]
    ix = _bits_from_float(x)
    k = (ix - _SQRT_HALF_BITS) >> 52
    return _log_reduced(_float_from_bits(ix - (k << 52)) - 1.0, np.float64(k))


@njit(**_JIT)
def tl_log_outside(x):  # type: ignore[no-untyped-def]
    """Whether `x` is not a positive normal finite float, where `tl_log_normal(x)` may differ
    from `tl_log(x)`: one unsigned comparison of its bits less the smallest normal's (as a
    signed one with the sign bits flipped: AVX2 compares signed integers only)."""
    return ((_bits_from_float(x) - _NORMAL_MIN_BITS) ^ _SIGN_BIT) >= (_NORMAL_SPAN ^ _SIGN_BIT)


# -- tanh -----------------------------------------------------------------------------------
# |x| < 0.625: x + x^3 P(x^2) / Q(x^2) (Cephes' rational approximation); above,
# 1 - 2 / (exp(2|x|) + 1) with exp as in tl_exp (|x| capped at 22, where tanh is 1 in
# float64); both arms computed, one division.  Within 2 ulp of libm's tanh; x itself below
# 2^-28 (signed zeros, subnormals) and for NaN.

_TANH_P = (-1.61468768441708447952e3, -9.92877231001918586564e1, -9.64399179425052238628e-1)
_TANH_Q = (4.84406305325125486048e3, 2.23548839060100448583e3, 1.12811678491632931402e2)


@njit(**_JIT)
def tl_tanh(x):  # type: ignore[no-untyped-def]
    a = abs(x)
    a = a if a < 22.0 else 22.0
    y = 2.0 * a
    t = y * _INV_LN2 + _ROUND
    k = t - _ROUND
    r = (y - k * _LN2_HI) - k * _LN2_LO
    q = 0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (
        1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
            1.0 / 39916800 + r * (1.0 / 479001600 + r * (1.0 / 6227020800)))))))))))
    u = (1.0 + (r + (r * r) * q)) * _float_from_bits((_bits_from_float(t) - _ROUND_BITS + 1023) << 52)
    s = a * a
    small = a < 0.625
    pn = a * s * (_TANH_P[0] + s * (_TANH_P[1] + s * _TANH_P[2]))
    pd = _TANH_Q[0] + s * (_TANH_Q[1] + s * (_TANH_Q[2] + s))
    v = (pn if small else 2.0) / (pd if small else u + 1.0)   # (selects: no branch)
    z = a + v if small else 1.0 - v
    z = -z if x < 0.0 else z
    return x if (a < 3.725290298461914e-09 or x != x) else z


# -- the other builtins -------------------------------------------------------------------------
# compiled with `math.exp`, `math.log` and `math.tanh` meaning the functions above (so that
# sigmoid, dtanh, ... vectorise too); the rest of `math` is Python's.

KERNEL_MATH = pytypes.ModuleType("tl_kernel_math", "math, with the kernels' exp, log, tanh")
KERNEL_MATH.__dict__.update({k: v for k, v in vars(math).items() if not k.startswith("_")})
KERNEL_MATH.__dict__.update(exp=tl_exp, log=tl_log, tanh=tl_tanh)

globals().update({f"tl_{name}": njit(**_JIT)(_with_globals(fn, math=KERNEL_MATH))
                  for name, fn in FUNCS.items() if name not in ("exp", "log", "tanh")})


# BLAS syrk (C = A A^T, half of gemm's work), called from kernels by its symbol name, which
# the process resolves when it links a kernel (so that the disk-cached code holds no address)
llvm_binding.add_symbol("tl_blas_dsyrk", get_cython_function_address(
    "scipy.linalg.cython_blas", "dsyrk"))
_dsyrk = types.ExternalFunction("tl_blas_dsyrk", types.void(*[types.voidptr] * 10))
SYRK_MIN_K = 32     # below, gemm (the mirrored triangle would cost more than syrk saves)
NARROW = 64         # a product with at most this many columns, fewer than rows: transposed
                    # (when BLAS runs on one thread)


@njit(cache=True, nogil=True)
def tl_matmul(a, b):  # type: ignore[no-untyped-def]
    """`a @ b` for contiguous float64 matrices (BLAS gemm; syrk when `b` is `a.T`, the
    product `sum k. a[i, k] * a[j, k]`, with its triangle mirrored; a narrow product as
    its transpose, `NARROW`).  Kernels call this
    instead of `np.dot` so that the linear-algebra typing is compiled (and disk-cached) once,
    not in every kernel."""
    m, k = a.shape
    if (k >= SYRK_MIN_K and m > 0 and b.shape[0] == k and b.shape[1] == m
            and a.ctypes.data == b.ctypes.data and a.strides[1] == 8 and a.strides[0] == 8 * k
            and b.strides[0] == 8 and b.strides[1] == 8 * k):
        return _syrk(a)
    n = b.shape[1]
    if n < m and n <= NARROW and _blas_get_threads() == 1:
        # a narrow product (n columns, m rows) as its transpose: on one thread OpenBLAS's
        # gemm was 3-5x slower for n = 2..16 than for the same product with m and n
        # swapped (nnmatfac's gradient, `sum j. v4[i, j] H[k, j]`: 13 -> 3 ms at 2000 x
        # 2000, K = 5); on two threads with a busy core the swapped one was 6x slower
        return np.ascontiguousarray(np.dot(b.T, a.T).T)
    return np.dot(a, b)


@njit(cache=True, nogil=True)
def tl_matmul_into(a, b, out):  # type: ignore[no-untyped-def]
    """`out[:] = a @ b` (BLAS gemm into a C-contiguous `out`): a strip of a row-panel
    product (`codegen.RowPanel`)."""
    np.dot(a, b, out)


@njit(cache=True, nogil=True)
def _syrk(a):  # type: ignore[no-untyped-def]
    """a a^T of a C-contiguous a (m x k): syrk on the Fortran view (a^T, k x m) fills one
    triangle, which is copied to the other in 32 x 32 tiles."""
    m, k = a.shape
    c = np.empty((m, m))
    ints = np.array([m, k, k, m], dtype=np.int32)          # n, k, lda, ldc (Fortran ints)
    scal = np.array([1.0, 0.0])                              # alpha, beta
    chars = np.array([ord("U"), ord("T")], dtype=np.uint8)   # C's upper (Fortran) = lower (C)
    _dsyrk(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes,
           scal[0:].ctypes, a.ctypes, ints[2:].ctypes, scal[1:].ctypes, c.ctypes,
           ints[3:].ctypes)
    _mirror(c)
    return c


@njit(cache=True, nogil=True)
def tl_gram(a, d):  # type: ignore[no-untyped-def]
    """`a diag(d) a^T` (n x n) for a float64 matrix `a` (n x k, any layout) and `d` (k): the
    weighted Gram products of backends/gram.py.  syrk on the columns of `a` scaled by
    sqrt(d) minus syrk on those scaled by sqrt(-d) (the columns with d < 0, found at run
    time; NaN counts as positive, so that it spreads like the product's), one triangle
    mirrored: half of gemm's multiplications.  Below `SYRK_MIN_K` columns, loops."""
    n, k = a.shape
    if k < SYRK_MIN_K:
        return _gram_loops(a, d)
    npos = 0
    for t in range(k):
        if not d[t] < 0.0:
            npos += 1
    cols = a.strides[0] == 8 and a.strides[1] == 8 * n    # a^T is C-contiguous (k x n)
    # s holds the scaled columns, those with d >= 0 first: as rows of a C array (k x n) when
    # a's columns are contiguous, else as columns (n x k); syrk reads it in Fortran order
    s = np.empty((k, n)) if cols else np.empty((n, k))
    pos, neg = 0, npos
    for t in range(k):
        if d[t] < 0.0:
            f, r = math.sqrt(-d[t]), neg
            neg += 1
        else:
            f, r = math.sqrt(d[t]), pos
            pos += 1
        if cols:
            for i in range(n):
                s[r, i] = f * a[i, t]
        else:
            for i in range(n):
                s[i, r] = f * a[i, t]
    c = np.empty((n, n))
    # n, k of each part, lda, ldc (Fortran ints); alpha, beta of each part
    ints = np.array([n, npos, k - npos, n if cols else k, n], dtype=np.int32)
    scal = np.array([1.0, 0.0, -1.0, 1.0 if npos > 0 else 0.0])
    chars = np.array([ord("U"), ord("N") if cols else ord("T")], dtype=np.uint8)
    if npos > 0:
        _dsyrk(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes,
               scal[0:].ctypes, s.ctypes, ints[3:].ctypes, scal[1:].ctypes, c.ctypes,
               ints[4:].ctypes)
    if npos < k:
        rest = s[npos:] if cols else s[:, npos:]
        _dsyrk(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, ints[2:].ctypes,
               scal[2:].ctypes, rest.ctypes, ints[3:].ctypes, scal[3:].ctypes, c.ctypes,
               ints[4:].ctypes)
    _mirror(c)
    return c


@njit(cache=True, nogil=True)
def _mirror(c):  # type: ignore[no-untyped-def]
    """Copy the lower triangle of a square C array to the upper, in 32 x 32 tiles."""
    m = c.shape[0]
    for ib in range(0, m, 32):
        for jb in range(ib, m, 32):
            for i in range(ib, min(ib + 32, m)):
                for j in range(max(jb, i + 1), min(jb + 32, m)):
                    c[i, j] = c[j, i]


@njit(cache=True, nogil=True)
def _gram_loops(a, d):  # type: ignore[no-untyped-def]
    """`a diag(d) a^T` as a loop nest over one triangle (mirrored)."""
    n, k = a.shape
    c = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            acc = 0.0
            for t in range(k):
                acc += a[i, t] * d[t] * a[j, t]
            c[i, j] = acc
    _mirror(c)
    return c


tl_gram_loops = _gram_loops     # what AOT images call instead of BLAS (backends/aot_cpu.py)


__all__ = [f"tl_{name}" for name in FUNCS] + ["tl_log_normal", "tl_log_outside",
                                                "tl_matmul", "tl_matmul_loops", "tl_gram",
                                                "tl_gram_loops", "tl_neumaier",
                                                "tl_block_sum", "tl_block_close",
                                                "tl_block_buffer", "tl_row_buffer", "tl_nonneg",
                                                "TlNoAlias", "threads_for",
                                                "use_threads", "BlasThreads", "PARALLEL_GRAIN"]


# -- threads: the parallel grain (issue 14) ---------------------------------------------------

# Element operations per thread below which a kernel runs on the calling thread alone.  A
# parallel loop or a threaded BLAS call waits for its slowest thread: microseconds on an idle
# machine, but a whole scheduler time slice (milliseconds) when another process keeps a
# worker's core busy.  With at least this much work per thread (about 2 ms), that wait costs
# at most in proportion to the work.
PARALLEL_GRAIN = 1 << 21


def most_threads() -> int:
    """The threads a kernel may use: Numba's pool, at most the cores this process may run on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(numba.config.NUMBA_NUM_THREADS, cores))


def threads_for(work: int, blas: bool = False) -> int:
    """The threads for a kernel call doing about `work` element operations: one per
    `PARALLEL_GRAIN`, at most `most_threads()`.  For a kernel calling BLAS (`blas`), minus
    that count when BLAS must be held to it (`BlasThreads`, which costs microseconds: not
    for calls too small for BLAS to start its threads anyway).  The results never depend
    on it (chunked reductions: docs/backends.md)."""
    threads = max(1, min(_MOST, work // PARALLEL_GRAIN))
    if blas and work >= BLAS_THREADED and BlasThreads.default() > threads:
        return -threads
    return threads


# BLAS (OpenBLAS) runs a call this small on one thread by itself
BLAS_THREADED = 1 << 15


_MOST = most_threads()
_SET = threading.local()   # the count last set in this thread (Numba's setting is per thread)


def use_threads(n: int) -> None:
    """Run this thread's next parallel loops on `n` threads (`numba.set_num_threads`, which
    costs microseconds: called only when the count changes)."""
    if getattr(_SET, "n", None) != n:
        numba.set_num_threads(n)
        _SET.n = n


def _blas_thread_functions() -> tuple[Any, Any] | None:
    """(`set_num_threads`, `get_num_threads`) of the BLAS that Numba's `np.dot` calls
    (scipy's), as ctypes functions, or None when it is not one we know."""
    try:
        from scipy.linalg import cython_blas

        lib = ctypes.CDLL(cython_blas.__file__)
    except (ImportError, OSError):
        return None
    for prefix, suffix in (("scipy_openblas", ""), ("openblas", ""), ("scipy_openblas", "64_"),
                           ("openblas", "64_")):
        put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
        get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
        if put is not None and get is not None:
            put.argtypes, put.restype, get.restype = [ctypes.c_int], None, ctypes.c_int
            return put, get
    return None


def blas_threads() -> tuple[Callable[[int], None], int] | None:
    """(`set_num_threads`, its thread count now) of the BLAS that Numba's `np.dot` calls
    (scipy's), or None when it is not one we know (it then keeps its own threads)."""
    found = _blas_thread_functions()
    return None if found is None else (found[0], max(1, int(found[1]())))


# BLAS's thread count now, for `tl_matmul` (by symbol name, like syrk; 0 for a BLAS whose
# count we cannot read)
_BLAS_FUNCTIONS = _blas_thread_functions()
_NO_COUNT = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)
llvm_binding.add_symbol("tl_blas_get_threads", ctypes.cast(
    _BLAS_FUNCTIONS[1] if _BLAS_FUNCTIONS is not None else _NO_COUNT, ctypes.c_void_p).value)
_blas_get_threads = types.ExternalFunction("tl_blas_get_threads", types.intc())


class BlasThreads:
    """`with BlasThreads(n):` the BLAS calls of a kernel run on at most `n` threads (BLAS owns
    the threads where it runs; Numba's loops of that kernel run on one).  BLAS's own count is
    put back after, so other code in the process is not affected; nothing is set when `n` is
    not below it."""

    _blas: tuple[Callable[[int], None], int] | None = None
    _looked = False

    @staticmethod
    def default() -> int:
        """BLAS's own thread count (0 when it is not a BLAS we can set)."""
        if not BlasThreads._looked:
            BlasThreads._blas, BlasThreads._looked = blas_threads(), True
        return BlasThreads._blas[1] if BlasThreads._blas is not None else 0

    def __init__(self, n: int) -> None:
        self.n = n if n < BlasThreads.default() else 0

    def __enter__(self) -> None:
        if self.n:
            BlasThreads._blas[0](self.n)  # type: ignore[index]

    def __exit__(self, *exc: object) -> None:
        if self.n:
            put, default = BlasThreads._blas  # type: ignore[misc]
            put(default)


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


python_log_normal = python_log  # type: ignore[name-defined]  # noqa: F821


def python_log_outside(x: float) -> bool:
    return not (x >= _TINY and x < math.inf)


python_neumaier = accumulate.neumaier
python_block_close = accumulate.block_close


def python_block_buffer() -> object:
    import numpy as np
    return np.empty(accumulate.BLOCK)


def python_row_buffer(n: int) -> object:
    import numpy as np
    return np.empty(n)


def python_nonneg(x: int) -> int:
    return x


def python_matmul(a: object, b: object) -> object:
    import numpy as np
    return np.dot(a, b)


def python_matmul_into(a: object, b: object, out: object) -> None:
    import numpy as np
    np.dot(a, b, out=out)


def python_gram(a: object, d: object) -> object:
    import numpy as np
    return np.dot(np.asarray(a) * np.asarray(d), np.asarray(a).T)


@njit(cache=True, nogil=True)
def tl_matmul_into_loops(a, b, out):  # type: ignore[no-untyped-def]
    """`tl_matmul_into` as a loop nest (AOT images, backends/aot_cpu.py)."""
    out[:, :] = tl_matmul_loops(a, b)


@njit(cache=True, nogil=True)
def tl_matmul_loops(a, b):  # type: ignore[no-untyped-def]
    """`a @ b` as a loop nest: what AOT images call instead of BLAS (backends/aot_cpu.py)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    if n == 1:   # matrix-vector: a dot product per row, four partial sums (no inner loop of 1)
        for i in range(m):
            s0 = s1 = s2 = s3 = 0.0
            t = 0
            while t + 4 <= k:
                s0 += a[i, t] * b[t, 0]
                s1 += a[i, t + 1] * b[t + 1, 0]
                s2 += a[i, t + 2] * b[t + 2, 0]
                s3 += a[i, t + 3] * b[t + 3, 0]
                t += 4
            while t < k:
                s0 += a[i, t] * b[t, 0]
                t += 1
            out[i, 0] = (s0 + s1) + (s2 + s3)
        return out
    for i in range(m):
        for t in range(k):
            x = a[i, t]
            for j in range(n):
                out[i, j] += x * b[t, j]
    return out
