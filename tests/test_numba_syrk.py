"""numba_rt.tl_matmul: a product `sum k. a[i, k] * a[j, k]` (b is a's transpose, the same
memory) is BLAS syrk with its triangle mirrored -- half of gemm's work; any other product is
gemm.  Against numpy on random shapes, and in a compiled program against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl

numba = pytest.importorskip("numba")


@pytest.fixture(scope="module")
def products():
    from tensorlang.backends import numba_rt

    matmul = numba_rt.tl_matmul

    @numba.njit
    def gram(x):                          # as a kernel writes it: x.reshape(...) and x.T
        return matmul(x.reshape(x.shape), x.T)

    @numba.njit
    def product(x, y):
        return matmul(x, y)

    return gram, product


def test_gram_is_symmetric_and_agrees_with_numpy(products):
    """From `SYRK_MIN_K` columns on, syrk with one triangle mirrored: symmetric bit for
    bit; below, gemm (symmetric to rounding)."""
    from tensorlang.backends.numba_rt import SYRK_MIN_K

    gram, _ = products
    rng = np.random.default_rng(3)
    for m, k in [(1, 1), (1, 32), (7, 31), (7, 32), (33, 64), (200, 40), (65, 300), (300, 33)]:
        x = rng.standard_normal((m, k))
        c = gram(x)
        assert c.shape == (m, m) and c.flags.c_contiguous
        if k >= SYRK_MIN_K:
            assert np.array_equal(c, c.T), (m, k)
        else:
            np.testing.assert_allclose(c, c.T, rtol=1e-14, atol=1e-14 * k)
        np.testing.assert_allclose(c, x @ x.T, rtol=1e-12, atol=1e-12 * k)


def test_other_products_are_gemm(products):
    _, product = products
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 40))
    y = rng.standard_normal((40, 50))
    np.testing.assert_allclose(product(x, x), x @ x, rtol=1e-12, atol=1e-12)  # not x x^T
    np.testing.assert_allclose(product(x, y), x @ y, rtol=1e-12, atol=1e-12)
    xt = np.ascontiguousarray(x.T)                  # equal values, other memory
    np.testing.assert_allclose(product(x, xt), x @ x.T, rtol=1e-12, atol=1e-12)


def test_gram_in_a_kernel_agrees_with_the_interpreter():
    """On the JIT engine (the AOT image has loops instead of BLAS)."""
    from tensorlang import api
    from tensorlang.backends import numba_cpu

    f = tl.parse("def gram(N: size, K: size, X: R[N, K]) -> R[N, N]:\n"
                 "    G[i:N, j:N] = sum k:K. X[i, k] * X[j, k]\n"
                 "    return G\n")["gram"]
    run = numba_cpu.compile_program(api.final_program(f), engine="jit")
    assert "tl_matmul(" in run.source
    rng = np.random.default_rng(5)
    for n, k in [(3, 40), (50, 64), (2, 5)]:
        args = {"N": n, "K": k, "X": rng.standard_normal((n, k))}
        got = run(args)
        np.testing.assert_allclose(got, f.interpret(**args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("one_thread", [True, False])
def test_narrow_products_agree_with_numpy(products, one_thread):
    """A product with few columns (at most NARROW, fewer than its rows) is computed as its
    transpose when BLAS runs on one thread (OpenBLAS's gemm was 3-5x slower the other way):
    C-contiguous, the same values, for row-major and transposed operands."""
    import contextlib

    from tensorlang.backends import numba_rt
    _, product = products
    rng = np.random.default_rng(5)
    with numba_rt.BlasThreads(1) if one_thread else contextlib.nullcontext():
        for m, k, n in [(9, 300, 1), (300, 40, 5), (300, 40, numba_rt.NARROW),
                        (300, 40, numba_rt.NARROW + 1), (5, 40, 300), (64, 3, 64)]:
            x, y = rng.standard_normal((m, k)), rng.standard_normal((k, n))
            for a, b in ((x, y), (np.ascontiguousarray(x.T).T, y),
                         (x, np.ascontiguousarray(y.T).T)):
                c = product(a, b)
                assert c.shape == (m, n) and c.flags.c_contiguous
                np.testing.assert_allclose(c, x @ y, rtol=1e-12, atol=1e-12 * k)
