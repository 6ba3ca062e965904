"""Transposed gathers by tiles (issue 14, `NumbaEmitter.sums_by_column_tiles`): a sum that
reads an array as `w[j, i]` (the summation index leading, its generator last) runs over
tiles of consecutive `i`, the summation loop once per tile, so consecutive reads are
neighbours in memory.  Checked against the interpreter on random programs of that shape,
and, where the kernel would otherwise run the sum by rows (a second generator), bit for bit
against that form."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import assert_same
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import numba_cpu_source  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _without_tiles(p: tssa.Program, args: dict[str, Any]) -> Any:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(numba_cpu_source.NumbaEmitter, "sums_by_column_tiles",
                  lambda self, *a: False)
        return numba_cpu.compile_program(p, jit=False)(args)


def test_nbody_gathers_read_the_pair_factors_by_tiles():
    """nbody's gradient and Hessian-vector product: the gather over j < i of the pair
    factors `w[j, i]` runs by tiles; values as the interpreter's, and as the row form's
    bit for bit."""
    for name in ("nbody_grad", "nbody_hvp"):
        p = tl.load(EXAMPLES / "nbody.tl")[name].run_to("simplified")
        src = numba_cpu.generated_source(p)
        assert src.count(f"prange((_tn") == 1, name
        rng = np.random.default_rng(3)
        for n in (0, 1, 2, 9, 17, 140):
            args = {"N": n, "P": rng.standard_normal((n, 3)), "m": rng.random(n)}
            if name == "nbody_hvp":
                args["v"] = rng.standard_normal((n, 3))
            got = numba_cpu.compile_program(p, jit=False)(args)
            assert_same(got, interpret(tssa.to_core(p), args), atol=1e-12)
            assert np.array_equal(got, _without_tiles(p, args)), (name, n)


@st.composite
def transposed_gathers(draw: Any) -> str:
    """`w` over an upper triangle (materialised: a sine read twice), summed over j below i (by an
    offset) as `w[j, i]`, with or without a second generator, times other operands."""
    off = draw(st.integers(-2, 2))
    cmp = draw(st.sampled_from(["<", "<="]))
    extra = draw(st.sampled_from(["", " and 1 <= i", " and i < N - 1"]))
    second = draw(st.booleans())
    w = "gen i:N. gen j:N. [i < j] * sin(x[i] - x[j])"
    if second:
        body = (f"gen i:N. gen c:K. sum j:N. [j {cmp} i + {off}{extra}] * "
                f"w[j, i] * (A[j, c] - A[i, c])")
        ret = "R[N, K]"
    else:
        body = f"gen i:N. sum j:N. [j {cmp} i + {off}{extra}] * w[j, i] * x[j]"
        ret = "R[N]"
    # (a second reader keeps `w` an array: the sine is not duplicated into each)
    return (f"def g(N: size, K: size, x: R[N], A: R[N, K]) -> ({ret}, R[N, N]):\n"
            f"    w = {w}\n    return ({body}, gen i:N. gen j:N. w[i, j] * x[j])\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transposed_gathers(), st.integers(0, 20), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_transposed_gathers_agree_with_the_interpreter(text, n, k, seed):
    p = tl.parse(text)["g"].run_to("ssa")
    src = numba_cpu.generated_source(p)
    assert "prange((_tn" in src, src
    rng = np.random.default_rng(seed)
    args = {"N": n, "K": k, "x": rng.standard_normal(n), "A": rng.standard_normal((n, k))}
    got = numba_cpu.compile_program(p, jit=False)(args)
    assert_same(got, interpret(tssa.to_core(p), args), atol=1e-12)
    if "gen c:K" in text:   # otherwise a per-point sum, blocked differently
        assert np.array_equal(got[0], _without_tiles(p, args)[0])


def test_a_long_transposed_gather_folds_its_blocks_like_the_row_form():
    """Rows of several blocks (N = 300 > 2 * 128): the compiled kernel matches the
    interpreter and the row form bit for bit."""
    text = ("def g(N: size, K: size, x: R[N], A: R[N, K]) -> R[N, K]:\n"
            "    w = gen i:N. gen j:N. [i < j] * sin(x[i] - x[j])\n"
            "    v = gen i:N. gen j:N. w[i, j] * x[j]\n"
            "    return gen i:N. gen c:K. sum j:N. [j < i] * w[j, i] * A[j, c] * v[j, i]\n")
    p = tl.parse(text)["g"].run_to("ssa")
    rng = np.random.default_rng(0)
    args = {"N": 300, "K": 2, "x": rng.standard_normal(300), "A": rng.standard_normal((300, 2))}
    want = interpret(tssa.to_core(p), args)
    got = numba_cpu.compile_program(p, jit=True)(args)
    assert_same(got, want, atol=1e-12)
    assert np.array_equal(got, _without_tiles(p, args))
