"""The Numba backend's staged programs (backends/box_stages.py): kernels and LAPACK boxes in
turn.  A call whose boxes are large runs its kernels on the JIT engine (the AOT image is
serial and calls no BLAS); either way the values are the interpreter's.  A call leaves no
reference cycle (its arrays are freed at once, so the next call reuses their memory), and
the heap keeps freed memory for that reuse (backends/heap.py, tests/test_heap.py)."""
from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import api
from tensorlang.backends import box_stages, numba_cpu
from tensorlang.ir.tssa import BoxRhs
from tensorlang.semantics.cost import cost_program

EX = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EX))
from numpy_ref import LINALG_WORKLOADS  # noqa: E402

WRT = {"gp_nlml": ("ell", "sf2", "sn2"), "blr_chol": ("lam_y", "lam_w"),
       "blr_lq": ("lam_y", "lam_w"), "kalman_nll": ("a", "q", "r"), "eigh_nll": ("A",)}


def _function(name: str, grad: bool) -> tl.Function:
    w = LINALG_WORKLOADS[name]
    f = tl.load(str(EX / w.file))[w.func]
    return tl.grad(f, *WRT[name]) if grad else f


def _close(got, want, rtol=1e-9):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            _close(a, b, rtol)
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)


def _staged(fn: tl.Function, jit_above: int) -> box_stages.StagedProgram:
    """The program as the Numba backend stages it, with the JIT threshold `jit_above`."""
    p = api.final_program(fn)
    return box_stages.StagedProgram(
        p, lambda q: numba_cpu.compile_program(q),
        lambda q: numba_cpu.compile_program(q, engine="jit"), jit_above)


def _kernel_engines(staged: box_stages.StagedProgram, sizes: dict) -> set[str]:
    return {kernel.last_engine for kernel in staged.kernels_for(sizes)}


def test_boxes_work_is_the_cost_of_the_box_statements():
    for name in ("gp_nlml", "blr_lq", "eigh_nll"):
        w = LINALG_WORKLOADS[name]
        for grad in (False, True):
            p = api.final_program(_function(name, grad))
            for n in (0, 3, 50):
                sizes = w.sizes(n)
                per = cost_program(p, sizes).per_stmt
                want = sum(sum(per[s.var]) for s in p.stmts if isinstance(s.rhs, BoxRhs))
                assert box_stages.boxes_work(p, sizes) == want


# CI: gp's value (its JIT kernels are also the large call of
# test_the_backend_picks_the_jit_from_the_size_of_the_boxes); its gradient, whose kernels are
# compiled for the JIT only here, with -m slow, as every workload's in
# test_every_workload_on_the_jit_path_agrees_with_the_interpreter (docs/decisions.md, "CI time").
@pytest.mark.parametrize("grad", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_large_calls_run_the_kernels_on_the_jit_and_agree(grad):
    """The threshold at 0: every call is large; random inputs of several sizes against the
    interpreter; the threshold above the call's boxes: the kernels' own engine choice."""
    fn = _function("gp_nlml", grad)
    w = LINALG_WORKLOADS["gp_nlml"]
    rng = np.random.default_rng(5)
    large, small = _staged(fn, 0), _staged(fn, 1 << 62)
    for n in (1, 4, 9):
        args = w.inputs(w.sizes(n), rng)
        want = fn.interpret(**args)
        _close(large(args), want)
        _close(small(args), want)
        sizes = w.sizes(n)
        assert _kernel_engines(large, sizes) == {"jit"}
        assert _kernel_engines(small, sizes) == {"aot"}


@pytest.mark.slow
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("name", sorted(WRT))
def test_every_workload_on_the_jit_path_agrees_with_the_interpreter(name, grad):
    fn = _function(name, grad)
    w = LINALG_WORKLOADS[name]
    staged = _staged(fn, 0)
    for seed, n in ((1, 2), (2, 6)):
        args = w.inputs(w.sizes(n), np.random.default_rng(seed))
        _close(staged(args), fn.interpret(**args), rtol=1e-8)


def test_the_backend_picks_the_jit_from_the_size_of_the_boxes():
    """compile("numba"): a call whose boxes cost more than AOT_MAX_WORK runs its kernels on
    the JIT (gp at N = 200: a Cholesky factorisation of 2.7 million operations), a small one
    on the kernels' own choice."""
    fn = _function("gp_nlml", False)
    w = LINALG_WORKLOADS["gp_nlml"]
    p = api.final_program(fn)
    staged = numba_cpu.compile_program(p)
    assert isinstance(staged, box_stages.StagedProgram)
    for n, engine in ((200, "jit"), (5, "aot")):
        sizes = w.sizes(n)
        assert (box_stages.boxes_work(p, sizes) > numba_cpu.AOT_MAX_WORK) == (engine == "jit")
        args = w.inputs(sizes, np.random.default_rng(n))
        _close(staged(args), fn.interpret(**args), rtol=1e-8)
        assert _kernel_engines(staged, sizes) == {engine}


# CI: gp's gradient (its kernels are test_linalg's too); Kalman's (five kernels more to
# compile) with -m slow (docs/decisions.md, "CI time").
@pytest.mark.parametrize("name", ["gp_nlml", pytest.param("kalman_nll", marks=pytest.mark.slow)])
def test_a_call_leaves_no_reference_cycle(name):
    fn = _function(name, True)
    w = LINALG_WORKLOADS[name]
    args = w.inputs(w.sizes(6), np.random.default_rng(0))
    run = fn.compile("numba")
    run(**args)
    gc.collect()
    was = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run(**args)
        assert gc.collect() == 0, [type(o).__name__ for o in gc.garbage][:20]
    finally:
        gc.set_debug(was)
        gc.garbage.clear()
