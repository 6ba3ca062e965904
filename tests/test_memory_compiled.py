"""The memory estimate (semantics/memory.py) against what a run really allocates: on a
compiled backend a sum is a loop or one matrix product (no working array), and the outputs
of linear-algebra boxes count (issue 11: `blr_lq`'s gradient at D = 1000 was refused for a
22 GiB working array its kernels never allocate)."""
from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from backends import numba_cpu
from examples_util import ci_examples
from tensorlang import api, pipeline
from tensorlang.ir import ast
from tensorlang.passes.vjp import vjp_program
from tensorlang.semantics import memory
from tensorlang.testing import (differentiable_programs, programs, random_args,
                                theorem_programs)
from tensorlang.syntax.errors import ResourceError

EX = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EX))
from numpy_ref import LINALG_WORKLOADS  # noqa: E402

WRT = {"gp_nlml": ("ell", "sf2", "sn2"), "blr_chol": ("lam_y", "lam_w"),
       "blr_lq": ("lam_y", "lam_w"), "kalman_nll": ("a", "q", "r"), "eigh_nll": ("A",)}


def _functions(name: str) -> tuple[tl.Function, tl.Function]:
    w = LINALG_WORKLOADS[name]
    f = tl.load(str(EX / w.file))[w.func]
    return f, tl.grad(f, *WRT[name])


def _peak_bytes(fn: tl.Function, bound: dict) -> int:
    """The peak of what the compiled program allocates in one call: the same generated code
    run as plain Python (`jit=False`), so that numpy's allocations are traced, with the boxes
    between the kernels as on the Numba backend."""
    run = numba_cpu.compile_program(api.final_program(fn), jit=False)
    run(bound)                                   # warm (imports, caches)
    tracemalloc.start()
    try:
        run(bound)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", sorted(WRT))
def test_compiled_estimate_is_close_to_the_allocations(name):
    w = LINALG_WORKLOADS[name]
    args = w.inputs(w.sizes(40), np.random.default_rng(3))
    for fn in _functions(name):
        bound = fn.bind(**args)
        est = fn.compile("numba").estimate(bound)
        ours = est.temporary_bytes + est.output
        peak = _peak_bytes(fn, bound)
        # an upper bound, and a tight one: the arrays the kernels allocate (a fused or
        # recomputed producer, a sibling member kept in a local: none), LAPACK's copies
        assert peak <= ours <= 2 * peak, (fn.name, ours, peak)


# The plain-Python run's own small allocations besides the arrays, whatever the sizes: its
# frames and argument list, a reduction's partial sums per chunk (at most 64), a sum's block
# of 128 terms (on the stack in the JIT kernel); at most 4.4 KiB on the random programs.
CALL_BYTES = 6144


def test_a_recomputed_producer_is_no_array():
    """`d` is N x N, cheap (a relu of a difference) and read by two statements: each
    recomputes it (`codegen.decide_fusion`), so the kernel allocates no N x N array and the
    estimate counts none; the estimate of every statement's array counts one."""
    m = tl.parse("def f(N: size, x: R[N], y: R[N]) -> R[N]:\n"
                 "    d = gen i:N. gen j:N. relu(x[i] - y[j])\n"
                 "    a = gen i:N. max j:N. d[i, j] * y[j]\n"
                 "    b = gen j:N. max i:N. d[i, j] * x[i]\n"
                 "    return gen i:N. a[i] * b[i]\n")
    n = 300
    rng = np.random.default_rng(0)
    bound = m.f.bind(x=rng.standard_normal(n), y=rng.standard_normal(n))
    est = m.f.compile("numba").estimate(bound)
    dense = memory.estimate(api.memory_program(m.f, "numba"), bound, compiled=True)
    assert max(t.entries for t in dense.temporaries) == n * n
    assert max(t.entries for t in est.temporaries) <= n
    peak = _peak_bytes(m.f, bound)
    ours = est.temporary_bytes + est.output
    assert peak <= ours + CALL_BYTES and ours <= 2 * peak, (ours, peak)


TWO_READERS = """
def two(N: size, M: size, Om: rel(N, M), T: R[N, M], A: R[N, M]) -> (R, R[N]):
    r[i:N, j:M] = [Om(i, j)] * exp(T[i, j])
    return (sum i:N, j:M. [Om(i, j)] * r[i, j] * A[i, j],
            gen i:N. sum j:M. [Om(i, j)] * r[i, j] * r[i, j])
"""


def test_a_coordinate_vector_counts_the_relations_members():
    """A relation-masked temporary read by two statements at the relation's members (so
    not computed where read, as matfac's residual now is) is stored as a vector of Om's
    members (`storage.coordinate_layouts`), not as an N x M array: the estimate counts
    nnz(Om) entries for it (N M when Om is not made yet), an upper bound of the traced
    peak, and a different relation of the same shape is estimated anew."""
    f = tl.parse(TWO_READERS)["two"]
    n, m = 200, 150
    rng = np.random.default_rng(2)
    args = {"Om": rng.random((n, m)) < 0.1, "T": rng.standard_normal((n, m)),
            "A": rng.standard_normal((n, m))}
    bound = f.bind(**args)
    compiled = f.compile("numba")
    est = compiled.estimate(bound)
    nnz = int(args["Om"].sum())
    vectors = [t for t in est.temporaries if t.entries == nnz]
    assert vectors and max(t.entries for t in est.temporaries) < n * m
    sizes_only = compiled.estimate({"N": n, "M": m, "T": args["T"], "A": args["A"]})
    assert max(t.entries for t in sizes_only.temporaries) == n * m
    peak = _peak_bytes(f, bound)
    ours = est.temporary_bytes + est.output
    assert peak <= ours + CALL_BYTES and ours <= 2 * peak, (ours, peak)
    # the call's check reads the relation it is given (same shape, four times the members)
    denser = dict(args, Om=rng.random((n, m)) < 0.4)
    compiled(**args)
    limit = ours + est.inputs + 8 * nnz
    memory.set_limit(limit)
    try:
        compiled(**args)
        with pytest.raises(ResourceError):
            compiled(**denser)
    finally:
        memory.set_limit(None)


@pytest.mark.parametrize("strategy, examples", [
    (programs(), 60), (programs(real_output_only=True), 60),
    # (nested sums over N x M: slow in plain Python, 1.3 s an example)
    (theorem_programs(max_size=4), ci_examples(10, 15))])
def test_random_programs_allocate_at_most_the_estimate(strategy, examples):
    """On random programs (at larger sizes than drawn, so that arrays outweigh the call's
    own few KiB; a real result, so that every array is a temporary; the theorem programs'
    tensor statements read at shifted indices), the traced peak of a plain-Python run of
    the kernel is at most the Numba estimate that `Compiled.__call__` checks, plus
    `CALL_BYTES`."""
    @settings(max_examples=examples)
    @given(strategy, st.integers(0, 2**16))
    def check(case: Any, seed: int) -> None:
        d, drawn = case
        _check_peak(d, pipeline.run_to(d, "ssa"), drawn, seed)
    check()


@settings(max_examples=40)
@given(differentiable_programs(), st.integers(0, 2**16))
def test_random_reverse_derivatives_allocate_at_most_the_estimate(case, seed):
    """The same on the reverse derivatives of random smooth programs (more statements,
    N x N temporaries, fused and recomputed producers), as derived (not simplified)."""
    d, drawn, wrt = case
    v = vjp_program(pipeline.run_to(d, "ssa"), wrt)
    _check_peak(pipeline.as_core(v), v, drawn, seed)


def _check_peak(d: ast.Def, p: Any, drawn: dict, seed: int) -> None:
    """The traced peak of a call of `p` (the SSA program of `d`) at sizes 4 n + 16 for the
    drawn n, against the estimate (`d`'s inputs and output, `p`'s kernel's arrays)."""
    sizes = {q.name: 4 * drawn[q.name] + 16 for q in d.params if isinstance(q.type, ast.TSize)}
    bound = api.bind_args(d.name, d.params, (),
                          random_args(d, sizes, np.random.default_rng(seed)))
    run = numba_cpu.compile_program(p, jit=False)
    est = memory.estimate(d, bound, compiled=True, arrays=run.arrays)   # Compiled.estimate
    run.call_bound(bound)                        # warm (imports, a relation's forms)
    tracemalloc.start()
    try:
        run.call_bound(bound)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= est.temporary_bytes + est.output + CALL_BYTES, (peak, est)


def test_blr_lq_gradient_at_d1000_is_not_refused():
    """The estimate of the call the benchmark makes (D = 1000, N = 2000): the interpreter's
    working array of the product `sum j:D. Qbar[j, i] C[i, j]` (D x (D + N) x D entries) is
    no allocation of the compiled program, which holds a few D x (D + N) arrays."""
    w = LINALG_WORKLOADS["blr_lq"]
    sizes = w.sizes(1000)
    _, grad = _functions("blr_lq")
    d = api.memory_program(grad, "numba")
    D, N = sizes["D"], sizes["N"]
    # the estimate reads the sizes and the inputs' byte counts only
    bound = {"D": D, "N": N, "X": np.broadcast_to(0.0, (D, N)), "y": np.broadcast_to(0.0, N),
             "lam_y": 1.0, "lam_w": 1.0}
    interp_est = memory.estimate(d, bound)
    compiled_est = memory.estimate(d, bound, compiled=True)
    assert interp_est.total > 20 * 2**30                      # the interpreter's 22 GiB
    dn = sizes["D"] * (sizes["D"] + sizes["N"])
    assert compiled_est.temporary_bytes < 12 * 8 * dn         # a dozen D x (D + N) arrays
    assert compiled_est.total < 2**30
    # what the Numba kernels allocate: no more than every statement's array
    numba_est = grad.compile("numba").estimate(bound)
    assert numba_est.inputs == compiled_est.inputs and numba_est.output == compiled_est.output
    assert numba_est.temporary_bytes <= compiled_est.temporary_bytes


def test_compiled_call_checks_the_compiled_estimate(monkeypatch):
    """A limit between the two estimates: the interpreter refuses, the Numba call runs."""
    w = LINALG_WORKLOADS["blr_lq"]
    args = w.inputs(w.sizes(40), np.random.default_rng(1))
    _, grad = _functions("blr_lq")
    bound = grad.bind(**args)
    d = api.memory_program(grad, "numba")
    compiled = grad.compile("numba")
    low = compiled.estimate(bound).total
    high = memory.estimate(d, bound).total
    assert high > 4 * low
    monkeypatch.setenv(memory.ENV_VAR, str(2 * low))
    value = compiled(**args)
    with pytest.raises(ResourceError, match="statement"):
        grad.compile("interp")(**args)
    monkeypatch.setenv(memory.ENV_VAR, "1G")
    np.testing.assert_allclose(value, grad.compile("interp")(**args), rtol=1e-10)


def test_cli_run_random_checks_the_estimate_of_its_backend(capsys):
    """`tl run --random` refuses before making the inputs on the estimate the API's call
    makes on the backend it runs on: with a limit between the two estimates the Numba run
    goes through and the interpreter's is refused (it once used the interpreter's for all)."""
    from tensorlang import cli

    w = LINALG_WORKLOADS["blr_lq"]
    sizes = w.sizes(40)
    _, grad = _functions("blr_lq")
    d = api.memory_program(grad, "numba")
    bound = {**sizes, "X": np.broadcast_to(0.0, (sizes["D"], sizes["N"])),
             "y": np.broadcast_to(0.0, sizes["N"]), "lam_y": 1.0, "lam_w": 1.0}
    low = grad.compile("numba").estimate(bound).total
    high = memory.estimate(d, bound).total
    assert high > 4 * low
    argv = ["run", str(EX / w.file), "blr_lq_grad", "--random", f"D={sizes['D']}",
            "--random", f"N={sizes['N']}", "--arg", "lam_y=0.7", "--arg", "lam_w=1.3",
            "--max-memory", str(2 * low)]
    try:
        assert cli.main(argv + ["--backend", "numba"]) == 0
        out = capsys.readouterr().out
        assert "d_lam_y" in out and "d_lam_w" in out
        assert cli.main(argv + ["--backend", "interp"]) != 0
        err = capsys.readouterr().err
        assert "resource error" in err and "above the memory limit" in err
        assert "Traceback" not in err
    finally:
        memory.set_limit(None)


def test_a_warm_compiled_call_reads_the_limit_the_environment_has_now(monkeypatch):
    """The per-call limit is memoised by the environment's text: setting, changing and
    removing TENSORLANG_MAX_MEMORY between calls of a warm compiled function takes effect."""
    m = tl.parse("def f(N: size, x: R[N]) -> R[N]:\n    return gen i:N. 2.0 * x[i]\n")
    run, x = m.f.compile("numba"), np.ones(4096)
    monkeypatch.delenv(memory.ENV_VAR, raising=False)
    assert run(x=x)[0] == 2.0
    monkeypatch.setenv(memory.ENV_VAR, "1K")
    with pytest.raises(ResourceError, match="above the memory limit of 1.0 KiB"):
        run(x=x)
    monkeypatch.setenv(memory.ENV_VAR, "1G")
    assert run(x=x)[0] == 2.0
    monkeypatch.setenv(memory.ENV_VAR, "2K")
    with pytest.raises(ResourceError, match="above the memory limit of 2.0 KiB"):
        run(x=x)
    monkeypatch.delenv(memory.ENV_VAR)
    assert run(x=x)[0] == 2.0
