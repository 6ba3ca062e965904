"""Sums whose innermost loop is a plain range run as blocks (backends/accumulate.py,
`block_loop`): no per-term count or branch, terms stored into a stack buffer by a loop that
LLVM vectorises, added in `LANES` partial sums.  Checked on the generated source, on the
compiled block loop's LLVM IR, on the summation order (the Numba helpers against the plain
Python ones, bit for bit), and on random programs and shapes against the interpreter (the
accuracy bound is tests/test_accuracy.py; random programs, whose sums run as blocks, are
tests/test_numba_cpu.py's and test_aot.py's)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, assert_same
from tensorlang.backends import accumulate
from tensorlang.semantics.interp import interpret

numba = pytest.importorskip("numba")
numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")

SUMS = tl.parse("""
def logsum(N: size, M: size, A: R[N, M]) -> R:
    return sum i:N, j:M. log(A[i, j]) + 1.0 / A[i, j]

def rows(N: size, M: size, A: R[N, M]) -> R[N]:
    return gen i:N. sum j:M. tanh(A[i, j])

def total(N: size, x: R[N]) -> R:
    return sum i:N. x[i]

def upper(N: size, A: R[N, N]) -> R[N]:
    return gen i:N. sum j:N. [j > i] * log(A[i, j])
""")


def _source(fn) -> str:
    return numba_cpu.generated_source(fn.run_to("ssa"))


def _block_bodies(src: str) -> list[list[str]]:
    """The bodies of the blocked loops (`for _tbj...`) of a kernel's source (the kernel
    and the functions it calls: a parallel loop's body is one, backends/prange_bodies.py)."""
    lines = src.split("\ndef ", 1)[1].splitlines()
    out = []
    for k, line in enumerate(lines):
        if line.lstrip().startswith("for _tbj"):
            pad = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[k + 1:]:
                if len(nxt) - len(nxt.lstrip()) <= pad:
                    break
                body.append(nxt)
            out.append(body)
    return out


def test_a_plain_range_sum_has_no_per_term_count():
    nn = tl.load(str(EXAMPLES / "nnmatfac.tl"))["nnmatfac"]
    for fn in (SUMS["logsum"], SUMS["rows"], SUMS["total"], nn):
        src = _source(fn)
        assert f"{accumulate.BLOCK_CLOSE}(" in src
        bodies = _block_bodies(src)
        # a term with a log: the test of its arguments, and the block again (test_log_blocks)
        logs = "tl_log(" in src
        assert len(bodies) == 1 + logs, bodies
        for body in bodies:
            body = [ln for ln in body if "tl_log_outside(" not in ln]
            assert len(body) == 2, bodies   # the index, the term
            assert f"{accumulate.NONNEG}(" in body[0] and "_tb" in body[1]
            assert not any(re.search(r"_n\b|\bif\b", ln) for ln in body)  # no count, no branch


def test_blocks_where_they_pay_and_where_the_index_is_not_negative():
    """A loop of fewer than SHORT terms (SHORT_CHEAP without a call or division) is
    counted; blocks (whose index is declared non-negative) run only from a start >= 0."""
    tests = {name: [ln.strip() for ln in _source(SUMS[name]).splitlines()
                    if ln.strip().startswith("if _tbh")] for name in ("logsum", "total", "upper")}
    def threshold(test: str) -> int:
        return int(re.match(r"if _tbh\w+ - \w+ >= (\d+)", test).group(1))

    assert [threshold(t) for t in tests["logsum"]] == [accumulate.SHORT]
    assert [threshold(t) for t in tests["total"]] == [accumulate.SHORT_CHEAP]
    assert len(tests["upper"]) == 1 and \
        re.fullmatch(rf"if _tbh(\w+) - _tbl\1 >= {accumulate.SHORT} and _tbl\1 >= 0:",
                     tests["upper"][0])
    for n in (0, 1, 7, 8, 9, 200):   # rows of every length from n - 1 down to 0
        a = np.random.default_rng(n).uniform(0.5, 2.0, (n, n))
        args = {"N": n, "A": a}
        got = numba_cpu.compile_program(SUMS["upper"].run_to("ssa"))(args)
        assert_same(got, interpret(SUMS["upper"].core(), args), atol=1e-12)


def test_a_relation_driven_sum_keeps_the_counted_form():
    masked = tl.load(str(EXAMPLES / "masked.tl"))["masked"]
    src = _source(masked)
    assert "_n += 1" in src and not _block_bodies(src)


def _block_function(term: str, python: bool = False):
    """A function summing `term` (of `j` and the array `x`) over `range(0, n)` with the
    lines `accumulate.block_loop` prints: compiled by Numba, or (`python`) in plain Python
    with the helpers of `compile_program(jit=False)`."""
    from tensorlang.backends import numba_rt

    pad = "    "
    opening, target, middle = accumulate.block_loop("acc", "j", "0", "x.shape[0]", "0", pad)
    lines = ["def run(x):", *[pad + ln for ln in accumulate.init("acc")],
             *[pad + ln for ln in opening], f"{pad * 4}{target} = {term}",
             *[pad + ln for ln in middle],
             *[pad * 3 + ln for ln in accumulate.add("acc", term, pad, call=True)],
             *[pad + ln for ln in accumulate.merge("acc", "acc", pad, call=True)],
             "    return acc_s + acc_c"]
    ns = {name: getattr(numba_rt, name.replace("tl_", "python_") if python else name)
          for name in ("tl_log", "tl_tanh", "tl_neumaier", accumulate.BLOCK_BUFFER,
                       accumulate.NONNEG, accumulate.BLOCK_CLOSE)}
    exec("\n".join(lines), ns)
    return ns["run"] if python else numba.njit(error_model="numpy")(ns["run"])


@pytest.mark.parametrize("term", ["tl_log(x[j]) + 1.0 / x[j]", "tl_tanh(x[j])"])
def test_the_block_loop_is_vectorised(term):
    """The terms' loop runs at SIMD width: vector divisions and contiguous vector loads of
    `x` (no gathers: the index is known not to be negative), no libm call."""
    run = _block_function(term)
    x = np.linspace(0.5, 3.0, 1000)
    run(x)
    ir = "\n".join(run.inspect_llvm().values())
    assert "fdiv <" in ir and "load <" in ir and "gather" not in ir
    assert "@log(" not in ir and "@tanh(" not in ir


_COMPILED = (_block_function("x[j] * 3.0"), _block_function("x[j] * 3.0", python=True))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 700), st.integers(0, 2**32 - 1))
def test_block_loop_sums_like_the_plain_python_helpers(n, seed):
    """The compiled blocks (stack buffer, lanes, merges) and the plain-Python helpers (what
    `compile_program(jit=False)` runs) give the same bits: one summation order."""
    run, plain = _COMPILED
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))
    got, want = run(x), plain(x)
    assert got == want or (math.isnan(got) and math.isnan(want))
    assert abs(got - math.fsum(x * 3.0)) <= 1e-13 * max(1.0, math.fsum(np.abs(x * 3.0)))


def test_block_sum_order_and_special_values():
    """`block_sum` adds term k into partial sum k % 8 and the partial sums pairwise; inf,
    -inf and NaN terms give what a loop's sum gives."""
    from tensorlang.backends import numba_rt
    buf = np.zeros(128)
    buf[:11] = [1e16, 1.0, -1e16, 1.0, 0, 0, 0, 0, 1.0, 0, 0]
    # lanes: p0 = 1e16 + 1 = 1e16 (rounded), p1 = 1 + 0 ... by the documented order
    p = [0.0] * 8
    for k in range(11):
        p[k % 8] += buf[k]
    want = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
    assert numba_rt.tl_block_sum(buf, 11) == accumulate.block_sum(buf, 11) == want
    for special, out in ((np.inf, np.inf), (-np.inf, -np.inf), (np.nan, np.nan)):
        buf[5] = special
        for n in (6, 100, 128):
            got = numba_rt.tl_block_sum(buf, n)
            assert got == out or (np.isnan(out) and np.isnan(got))
    buf[5], buf[7] = np.inf, -np.inf
    assert np.isnan(numba_rt.tl_block_sum(buf, 128))


@pytest.mark.parametrize("shape", [(1, 1), (3, 127), (3, 128), (2, 129), (5, 300), (40, 7),
                                   (40, 8), (0, 5), (5, 0), (1, 1000), (300, 3)])
def test_block_shapes_agree_with_the_interpreter(shape):
    n, m = shape
    rng = np.random.default_rng(n * 1000 + m)
    a = rng.uniform(0.1, 4.0, shape)
    for name in ("logsum", "rows"):
        fn = SUMS[name]
        args = {"N": n, "M": m, "A": a}
        got = numba_cpu.compile_program(fn.run_to("ssa"))(args)
        assert_same(got, interpret(fn.core(), args), atol=1e-12)


def test_a_short_loop_that_is_the_sums_only_loop_adds_plainly():
    """A sum whose one loop is short (fewer terms than a block) closes no block: the short
    case adds plainly, with no count or branch per term (matfac's K = 5 dot products); a sum
    with two loops keeps the count in its short case, which may run many times."""
    src = _source(SUMS.rows)
    short = src.split("else:", 1)[1]
    assert "_n += 1" not in short and re.search(r"_acc\d+ \+= ", short), src
    two = _source(SUMS.logsum)
    assert "_n += 1" in two, two
    args = {"N": 3, "M": 5, "A": np.random.default_rng(0).uniform(0.5, 2.0, (3, 5))}
    got = numba_cpu.compile_program(SUMS.rows.run_to("ssa"))(args)
    np.testing.assert_allclose(got, np.tanh(args["A"]).sum(axis=1), rtol=1e-14)
