"""Window gathers walked by window (backends/window_walk.py, issue 14): a sum with one term
per output point, its window `c*j <= i <= c*j + c - 1`, runs as a product over the windows
and their offsets stored into the output's box, bit for bit the sum (its term plus 0.0),
and shares the window loops of the statements that feed it."""
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
from tensorlang.backends import sibling_fusion  # noqa: E402
from tensorlang.backends.codegen import plan_program  # noqa: E402
from tensorlang.backends.window_walk import window_form  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _gather(c0: int, c1: int, extra: str = "", rows: str = "") -> str:
    rows = rows or f"{c0} * N"
    # (r: computed over the windows, so the walk has loops to share)
    return (f"def w(N: size, M: size, x: R[N, M], y: R[{rows}, {c1} * M]) -> "
            f"R[{rows}, {c1} * M]:\n"
            f"    r = gen j:N. gen l:M. max t:2. sin(x[j, l]) * t\n"
            f"    return gen i:{rows}. gen k:{c1} * M. sum j:N. sum l:M. "
            f"[{c0} * j <= i and i <= {c0} * j + {c0 - 1} and {c1} * l <= k and "
            f"k <= {c1} * l + {c1 - 1}{extra}] * r[j, l] * y[i, k]\n")


def _walked(text: str) -> list[str]:
    p = tl.parse(text)["w"].run_to("ssa")
    return [s.var for s in plan_program(p, windows=True).stmts if s.store_at is not None]


def test_which_sums_are_walked_by_window():
    assert _walked(_gather(2, 3))
    assert _walked(_gather(1, 2))
    assert not _walked(_gather(2, 3, extra=" and j <= i"))     # another mask
    assert not _walked(_gather(2, 3, rows="2 * N + 1"))         # a row no window covers
    wide = _gather(2, 3).replace("i <= 2 * j + 1", "i <= 2 * j + 2")   # two terms a point
    assert not _walked(wide)
    p = tl.parse(_gather(2, 3))["w"].run_to("ssa")
    assert not [s for s in plan_program(p).stmts if s.store_at is not None]   # (default off)
    inputs_only = _gather(2, 3).replace("r[j, l] * y", "sin(x[j, l]) * y")   # nothing to share
    assert not _walked(inputs_only)


def test_maxpool_gradient_runs_in_one_nest_over_the_windows():
    m = tl.load(str(EXAMPLES / "maxpool.tl"))
    p = m["maxpool_grad"].run_to("ssa")
    plan = plan_program(p, windows=True)
    walked = [s for s in plan.stmts if s.store_at is not None]
    assert len(walked) == 1 and window_form(p.defs[walked[0].var]) is not None
    src = numba_cpu.generated_source(p)
    assert src.count("prange(") == 1, src
    x = np.random.default_rng(0).standard_normal((12, 10))
    x[0, :2] = x[1, 0] = 0.5   # ties: the cotangent shared among the maximisers
    args = {"H": 6, "W": 5, "X": x}
    got = numba_cpu.compile_program(p, jit=True)(args)
    assert_same(got, interpret(tssa.to_core(p), args))


@st.composite
def gathers(draw: Any) -> tuple[str, int, int, int]:
    c0, c1 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return _gather(c0, c1), draw(st.integers(0, 4)), draw(st.integers(0, 3)), \
        draw(st.integers(0, 2**32 - 1))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gathers())
def test_window_walks_agree_bit_for_bit_with_the_sum(case):
    """The walked statement (plain kernel) against the sum's own loops (the instrumented
    kernel, which does not walk): the same bits, -0.0 terms included; and the interpreter."""
    text, n, m, seed = case
    p = tl.parse(text)["w"].run_to("ssa")
    c0, c1 = (int(t.split(" * ")[0]) for t in text.split("-> R[")[1].split("]")[0].split(", "))
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((c0 * n, c1 * m))
    y[rng.random(y.shape) < 0.3] = -0.0
    args = {"N": n, "M": m, "x": rng.standard_normal((n, m)), "y": y}
    walked = numba_cpu.compile_program(p, jit=False)(args)
    summed = numba_cpu.compile_program(p, instrument=True, jit=False)(args)
    assert np.asarray(walked).tobytes() == np.asarray(summed).tobytes()
    assert_same(walked, interpret(tssa.to_core(p), args))
    assert _walked(text)


def test_a_walked_window_compiles_with_numba():
    text = _gather(2, 3)
    p = tl.parse(text)["w"].run_to("ssa")
    rng = np.random.default_rng(1)
    args = {"N": 4, "M": 3, "x": rng.standard_normal((4, 3)), "y": rng.standard_normal((8, 9))}
    got = numba_cpu.compile_program(p, jit=True)(args)
    assert_same(got, interpret(tssa.to_core(p), args))
    assert sibling_fusion.schedule(plan_program(p, windows=True))


def test_a_walked_gather_read_back_by_window_is_read_from_its_array():
    """A statement over the windows that reads the walked gather back (through its output
    box) does not share its nest: the gather's array holds the values (and the check of
    such reads does not index the walk's window indices with the box's)."""
    text = ("def w(N: size, x: R[N, N], y: R[2 * N, 2 * N]) -> R[N, N]:\n"
            "    r = gen j:N. gen l:N. max t:2. sin(x[j, l]) * t\n"
            "    g = gen i:2 * N. gen k:2 * N. sum j:N. sum l:N. [2 * j <= i and "
            "i <= 2 * j + 1 and 2 * l <= k and k <= 2 * l + 1] * r[j, l] * y[i, k]\n"
            "    return gen j:N. gen l:N. sum a:2. sum b:2. g[2 * j + a, 2 * l + b] * r[j, l]\n")
    assert _walked(text)
    p = tl.parse(text)["w"].run_to("ssa")
    rng = np.random.default_rng(2)
    args = {"N": 3, "x": rng.standard_normal((3, 3)), "y": rng.standard_normal((6, 6))}
    for jit in (False, True):
        assert_same(numba_cpu.compile_program(p, jit=jit)(args),
                    interpret(tssa.to_core(p), args))
