"""Row-panel products (backends/codegen.py `RowPanel`): a small-K matrix product read only by
one loop statement at `P[g, ..]`, `g` its first loop, is computed by strips of that loop
(one BLAS call per strip into a panel) instead of being stored whole.  Random programs agree
with the interpreter in plain Python (the generated code itself), on Numba's JIT engine
(BLAS) and on the AOT engine (loops), with the panels running (sizes above the thresholds)
and not (tiny sizes, K above `PANEL_MAX_K`: the product stored, read in place by the
strips); the plan takes exactly the reads by rows."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import tensorlang as tl
from examples_util import EXAMPLES, assert_same
from tensorlang.backends import codegen
from tensorlang.backends.codegen import plan_program
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret
from tensorlang.testing import row_panel_programs

numba = pytest.importorskip("numba")
numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")


def _want(case):
    return interpret(tssa.to_core(case.program), case.args)


@given(row_panel_programs())
def test_panels_are_planned_for_reads_by_rows_and_agree_in_python(case):
    plan = plan_program(case.program)
    assert bool(plan.panels) == case.panel, str(case.program)
    src = numba_cpu.compile_program(case.program, jit=False)
    assert ("tl_matmul_into(" in src.source) == case.panel
    assert_same(src(case.args), _want(case), atol=1e-9)


# Each example compiles a kernel for the JIT (7 s): with -m slow.  CI keeps the random
# programs in plain Python (the same generated code, planned and run: the test above) and
# nnmatfac's panels compiled on both engines, panels running or not (the test below)
# (docs/decisions.md, "CI time").
@pytest.mark.slow
@settings(max_examples=8)
@given(row_panel_programs())
def test_panels_agree_with_the_interpreter_on_the_jit_engine(case):
    got = numba_cpu.compile_program(case.program, engine="jit")(case.args)
    assert_same(got, _want(case), atol=1e-9)


def test_panel_runs_only_for_a_short_summed_axis_and_long_rows():
    assert codegen.panel_runs(2000, 2000, 5)
    assert not codegen.panel_runs(2000, 2000, codegen.PANEL_MAX_K + 1)
    assert not codegen.panel_runs(2000, 2000, 0)
    assert not codegen.panel_runs(100, 100, 5)                       # fits in the cache
    assert not codegen.panel_runs(10 ** 6, codegen.PANEL_MIN_N - 1, 5)   # short rows
    assert codegen.panel_rows(2000) * 2000 <= codegen.PANEL_ELEMS
    assert codegen.panel_rows(10 ** 7) == 1


@pytest.mark.parametrize("fn", ["nnmatfac", "nnmatfac_grad"])
def test_nnmatfac_computes_w_h_in_panels_and_agrees(fn):
    f = tl.load(EXAMPLES / "nnmatfac.tl")[fn]
    p = f.run_to(f.default_stage())
    (rp,) = plan_program(p).panels.values()
    assert p.shapes[rp.producer] == tuple(p.shapes[q.name] for q in p.params
                                          if q.name == "A")[0]
    rng = np.random.default_rng(1)
    for n, m, k in ((300, 260, 5), (130, 300, 40), (3, 4, 2)):   # panels, K too big, tiny
        args = dict(N=n, M=m, K=k, A=rng.uniform(0.5, 1.5, (n, m)),
                    W=rng.uniform(0.5, 1.5, (n, k)), H=rng.uniform(0.5, 1.5, (k, m)))
        want = interpret(tssa.to_core(p), args)
        for engine in ("jit", "aot"):
            assert_same(numba_cpu.compile_program(p, engine=engine)(args), want, atol=1e-9)


def test_a_kernel_whose_blas_runs_only_in_panels_keeps_its_threads():
    """nnmatfac's f calls BLAS only for the panels of W H: where they run, the call is not
    a BLAS call for threading (Numba's loops keep their threads, each panel product runs on
    one BLAS thread); where the product is stored whole, it is (`TL_BLAS`)."""
    f = tl.load(EXAMPLES / "nnmatfac.tl")["nnmatfac"]
    c = numba_cpu.compile_program(f.run_to(f.default_stage()))
    assert c._blas and not c._blas_at[0] and len(c._blas_at[1]) == 1
    assert not c._whole_blas({"N": 2000, "M": 2000, "K": 5})
    assert c._whole_blas({"N": 2000, "M": 2000, "K": 40})   # K too big: stored whole
    assert c._whole_blas({"N": 100, "M": 100, "K": 5})      # fits in the cache
    g = tl.load(EXAMPLES / "qform.tl")["qform_grad"]
    c = numba_cpu.compile_program(g.run_to(g.default_stage()))
    assert not c._blas or c._blas_at[0]


def test_machine_estimate_moves_no_product_that_runs_in_panels():
    from tensorlang.backends.common import machine_model
    f = tl.load(EXAMPLES / "nnmatfac.tl")["nnmatfac"]
    p = f.run_to(f.default_stage())
    (rp,) = plan_program(p).panels.values()
    product = 8 * 2000 * 2000
    small = {s.var: s for s in machine_model.estimate(p, dict(N=2000, M=2000, K=5)).stmts}
    large = {s.var: s for s in machine_model.estimate(p, dict(N=2000, M=2000, K=50)).stmts}
    assert small[rp.producer].into == rp.consumer and small[rp.producer].bytes < product
    assert large[rp.producer].into == "" and large[rp.producer].bytes >= product
    assert large[rp.consumer].bytes - small[rp.consumer].bytes >= 0.99 * product
    arrays = machine_model.kernel_arrays(p, dict(N=2000, M=2000, K=5))
    assert arrays.largest_temporary == (rp.producer, codegen.panel_rows(2000) * 2000)
