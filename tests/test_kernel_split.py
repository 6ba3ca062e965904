"""Long kernels are cut into parts Numba compiles separately (backends/kernel_split.py): the
parts compute exactly what the single function did.  Checked with splitting forced on every
kernel (parts of one statement each), against the interpreter and against the unsplit kernel,
bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from examples_util import EXAMPLES
from tensorlang.backends import kernel_split, numba_cpu, numba_cpu_source
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs, random_args


@pytest.fixture
def split_everything(monkeypatch, cache_dir):
    monkeypatch.setattr(numba_cpu_source, "SPLIT_LINES", 0)
    # the weight of one line of straight code: one statement per part
    monkeypatch.setattr(numba_cpu_source, "PART_LINES", kernel_split.STRAIGHT)


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _close(a, b):
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _close(x, y)
    else:
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                                   rtol=1e-9, atol=1e-9, equal_nan=True)


def _unsplit(p, instrument=False):
    saved = numba_cpu_source.SPLIT_LINES
    numba_cpu_source.SPLIT_LINES = 10 ** 9
    try:
        return numba_cpu.compile_program(p, instrument, jit=False)
    finally:
        numba_cpu_source.SPLIT_LINES = saved


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(programs())
def test_split_random_programs_agree(split_everything, case):
    d, args = case
    p = tl.from_def(d).run_to("ssa")
    split = numba_cpu.compile_program(p, instrument=True, jit=False)
    whole = _unsplit(p, instrument=True)
    got = split(args)
    _same(got, whole(args))
    assert split.last_counts == whole.last_counts
    _close(got, interpret(d, args))


DERIVED = [("qform.tl", "qform_hess"), ("logreg.tl", "logreg_hess"),
           ("imgarap.tl", "arap_vjp"), ("nbody.tl", "nbody_hvp"), ("matfac.tl", "matfac_hess")]


@pytest.mark.parametrize("file,name", DERIVED)
def test_split_derived_examples_agree(split_everything, file, name):
    fn = tl.load(EXAMPLES / file)[name]
    p = fn.final_program()
    split = numba_cpu.compile_program(p, jit=False)
    assert split.source.count("def tl_part") >= 2
    sizes = {q.name: 3 for q in p.params if tl.api.format_type(q.type) == "size"}
    args = random_args(tssa.to_core(p), sizes, np.random.default_rng(1))
    _same(split(args), _unsplit(p)(args))


def test_split_kernel_compiles_with_numba(split_everything, tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path))
    numba_cpu._COMPILED.clear()  # noqa: SLF001 - the unsplit kernel may be memoised
    fn = tl.load(EXAMPLES / "qform.tl").qform_hess
    p = fn.final_program()
    c = numba_cpu.compile_program(p)
    assert c.source.count("def tl_part") >= 2
    x, a = np.arange(3.0), np.arange(9.0).reshape(3, 3)
    _same(c(N=3, x=x, A=a), _unsplit(p)(N=3, x=x, A=a))
    numba_cpu._COMPILED.clear()  # noqa: SLF001


def test_names_read_before_assignment_become_parameters():
    body = ["    a = x + 1.0", "    for i in range(n):", "        b = a * i",
            "    c = 0.0", "    if a > 0:", "        c = a", "    d = c + y",
            "    return (d,)"]
    parts, new_body = kernel_split.split_body(body, ["x", "y", "n"],
                                              kernel_split.STRAIGHT)
    # the loop's `b` and `i` stay local; the `if` may not assign `c`, so it takes it too
    assert [p.params for p in parts] == [["x"], ["a", "n"], [], ["a", "c"], ["c", "y"]]
    assert [p.returns for p in parts] == [["a"], [], ["c"], ["c"], ["d"]]
    assert new_body[-1] == "    return (d,)"


def test_kernels_with_many_parallel_loops_compile_serially(monkeypatch, cache_dir):
    p = tl.load(EXAMPLES / "imgarap.tl").arap_vjp.final_program()
    parallel, _ = numba_cpu_source.abstract_source(p)
    assert "parallel=TL_PARALLEL" in parallel
    monkeypatch.setattr(numba_cpu_source, "MAX_PARALLEL_LOOPS", 0)
    monkeypatch.setattr(numba_cpu_source, "SPLIT_LINES", 0)
    # the weight of one line of straight code: one statement per part
    monkeypatch.setattr(numba_cpu_source, "PART_LINES", kernel_split.STRAIGHT)
    serial, _ = numba_cpu_source.abstract_source(p)
    assert "parallel=TL_PARALLEL" not in serial and "def tl_part1" in serial
    assert serial.count("parallel=False") == serial.count("@njit(")
