"""Sibling loop fusion of the CPU kernels (backends/sibling_fusion.py, issue 16): statements
that run the same loop nest share one, with the same results bit for bit as separate nests
and the same iteration counts."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import assert_same, to_program
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import sibling_fusion  # noqa: E402
from tensorlang.backends.codegen import plan_program, plan_reads  # noqa: E402

SIBLINGS = """
def siblings(N: size, M: size, x: R[N, M], y: R[M]) -> (R[N, M], (R[N, M], R[N, M])):
    a = gen i:N. gen j:M. sin(x[i, j]) * y[j]
    b = gen i:N. gen j:M. cos(a[i, j]) + a[i, j] * x[i, j]
    c = gen i:N. gen j:M. sum k:M. [k <= j] * sin(x[i, k]) * a[i, j]
    return (a, (b, c))
"""
# The same with a sum whose inner loop walks row i of a relation whatever j: it runs by rows
# (all j at once per member, `sums_by_row`), in a nest of its own
BY_ROWS = SIBLINGS.replace("[k <= j] * ", "[E(i, k)] * ").replace(
    "x: R[N, M], y: R[M])", "E: rel(N, M), x: R[N, M], y: R[M])")


def _args(rng: np.random.Generator, n: int = 5, m: int = 4) -> dict[str, Any]:
    return {"N": n, "M": m, "x": rng.standard_normal((n, m)), "y": rng.standard_normal(m)}


def _bits(value: Any) -> Any:
    """A result as bytes (tuples nested), for bit-for-bit comparisons."""
    if isinstance(value, tuple):
        return tuple(_bits(v) for v in value)
    return np.asarray(value, dtype=np.float64).tobytes()


def _python_run(p: tssa.Program, args: dict[str, Any], shared: bool
                ) -> tuple[Any, dict[str, int]]:
    """The plain-Python kernel's result and counts, with nests shared or each alone."""
    with pytest.MonkeyPatch.context() as m:
        if not shared:
            m.setattr(sibling_fusion, "MAX_WEIGHT", 0)
        c = numba_cpu.compile_program(p, instrument=True, jit=False)
        out = c(args)
    return out, dict(c.last_counts)


def test_sibling_statements_share_one_nest(monkeypatch):
    p = tl.parse(SIBLINGS)["siblings"].run_to("ssa")
    units = sibling_fusion.schedule(plan_program(p))
    assert max(len(u) for u in units) >= 3, units   # a, b and the sum c: one nest
    src = numba_cpu.generated_source(p)
    with monkeypatch.context() as m:
        m.setattr(sibling_fusion, "MAX_WEIGHT", 0)
        alone = numba_cpu.generated_source(p)
    assert src.count("prange(") == 1 < alone.count("prange("), src
    args = _args(np.random.default_rng(0))
    want = interpret(tssa.to_core(p), args)
    _, counts = _python_run(p, args, False)
    for jit in (False, True):
        c = numba_cpu.compile_program(p, instrument=True, jit=jit)
        assert_same(c(args), want)
        assert c.last_counts == counts


ROWS = """
def rows(N: size, M: size, x: R[N, M], y: R[M]) -> (R[N, M], R[N]):
    r = gen i:N. sum j:M. sin(x[i, j] * y[j])
    a = gen i:N. gen j:M. cos(x[i, j]) * r[i]
    t = gen i:N. sum j:M. tanh(a[i, j] + r[i])
    return (a, t)
"""


def test_rows_and_their_box_share_the_loop_over_rows(monkeypatch):
    """Prefix sharing: a row, the box that reads it and a row of the box run in one nest
    over i (each with its own loop over j), bit for bit as in separate nests; the row read
    at the point being computed is kept in a local."""
    p = tl.parse(ROWS)["rows"].run_to("ssa")
    plan = plan_program(p)
    units = sibling_fusion.schedule(plan)
    assert len(units) == 1 and sibling_fusion.shared_steps(units[0]).cut == 1, units
    src = numba_cpu.generated_source(p)
    assert src.count("prange(") == 1, src
    args = _args(np.random.default_rng(3), 6, 5)
    shared, counts = _python_run(p, args, True)
    alone, counts_alone = _python_run(p, args, False)
    assert _bits(shared) == _bits(alone) and counts == counts_alone
    got = numba_cpu.compile_program(p, jit=True)(args)
    with monkeypatch.context() as m:
        m.setattr(sibling_fusion, "MAX_WEIGHT", 0)
        assert _bits(got) == _bits(numba_cpu.compile_program(p, jit=True)(args))
    assert_same(got, interpret(tssa.to_core(p), args))
    _check_schedule(p)


def test_a_sum_run_by_rows_keeps_its_own_nest():
    p = tl.parse(BY_ROWS)["siblings"].run_to("ssa")
    units = sibling_fusion.schedule(plan_program(p), alone=frozenset({"v6"}))
    assert [s.var for s in units[-1]] == ["v6"] and len(units[0]) == 2, units
    src = numba_cpu.generated_source(p)
    assert src.count("prange(") == 2 and "tl_row_buffer(" in src, src
    rng = np.random.default_rng(1)
    args = {**_args(rng), "E": rng.random((5, 4)) < 0.5}
    got = numba_cpu.compile_program(p, jit=True)(args)
    assert_same(got, interpret(tssa.to_core(p), args))
    assert _bits(got) == _bits(numba_cpu.compile_program(p, jit=False)(args))


# ---------------------------------------------------------------------------------------------
# Random programs of sibling maps and sums over one box


_FNS = ("sin", "cos", "tanh", "sigmoid", "softplus")


@st.composite
def sibling_programs(draw: Any) -> str:
    """A def whose statements are maps and sums over the box [i:N, j:M], reading the
    inputs and earlier statements at the same point, at a mirrored point (`M - 1 - j`) or
    along a sum, and rows `gen i:N. sum j:M. ...` that share the loop over i with them
    (prefix sharing), and returning some of them."""
    count = draw(st.integers(2, 6))
    names: list[str] = []
    rows: list[str] = []
    lines: list[str] = []

    def atom() -> str:
        choices = ["x[i, j]", "y[j]", "0.5"]
        for v in names:
            choices += [f"{v}[i, j]", f"{v}[i, j]", f"{v}[i, M - 1 - j]"]
        choices += [f"{r}[i]" for r in rows]
        return draw(st.sampled_from(choices))

    def expr(depth: int) -> str:
        kind = draw(st.integers(0, 3 if depth else 0))
        if kind == 0:
            return atom()
        if kind == 1:
            return f"{draw(st.sampled_from(_FNS))}({expr(depth - 1)})"
        op = "*" if kind == 2 else "+"
        return f"({expr(depth - 1)} {op} {expr(depth - 1)})"

    for k in range(count):
        name = f"s{k}"
        if draw(st.integers(0, 3)) == 0:   # a row: shares the loop over i
            v = draw(st.sampled_from(names or ["x"]))
            lines.append(f"    {name} = gen i:N. sum j:M. {v}[i, j] * {expr(1)}")
            rows.append(name)
            continue
        if names and draw(st.booleans()) and draw(st.booleans()):
            v = draw(st.sampled_from(names))
            body = f"sum k:M. {v}[i, k] * {expr(1)}"
        else:
            body = expr(2)
        lines.append(f"    {name} = gen i:N. gen j:M. {body}")
        names.append(name)
    made = [f"s{k}" for k in range(count)]
    outs = [v for v in made if draw(st.booleans())] or [made[-1]]

    def nest(items: list[str]) -> str:
        return items[0] if len(items) == 1 else f"({items[0]}, {nest(items[1:])})"

    ret = nest(["R[N]" if v in rows else "R[N, M]" for v in outs])
    return (f"def sib(N: size, M: size, x: R[N, M], y: R[M]) -> {ret}:\n" +
            "\n".join(lines) + f"\n    return {nest(outs)}\n")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(sibling_programs(), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2**32 - 1))
def test_shared_nests_agree_bit_for_bit(text, n, m, seed):
    """Random sibling programs: shared nests give the separate nests' results bit for bit
    and the same iteration counts, and agree with the interpreter."""
    p = tl.parse(text)["sib"].run_to("ssa")
    args = _args(np.random.default_rng(seed), n, m)
    shared, counts = _python_run(p, args, True)
    alone, counts_alone = _python_run(p, args, False)
    assert _bits(shared) == _bits(alone)
    assert counts == counts_alone
    assert_same(shared, interpret(tssa.to_core(p), args), atol=1e-9)
    _check_schedule(p)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_shared_nests_agree_bit_for_bit(case):
    """The general random programs (tensorlang.testing): the same, where nests share."""
    d, args = case
    p = to_program(d)
    shared, counts = _python_run(p, args, True)
    alone, counts_alone = _python_run(p, args, False)
    assert _bits(shared) == _bits(alone)
    assert counts == counts_alone
    _check_schedule(p)


def _check_schedule(p: tssa.Program) -> None:
    """Every statement with loops is emitted once, after what it reads; a member reads an
    earlier member of its own nest only at the point being computed."""
    plan = plan_program(p)
    units = sibling_fusion.schedule(plan)
    order = [s.var for u in units for s in u]
    assert sorted(order) == sorted(s.var for s in plan.counted())
    unit_of = {s.var: k for k, u in enumerate(units) for s in u}
    for k, u in enumerate(units):
        prefix = sibling_fusion.shared_steps(u)
        assert prefix is None or prefix.cut > 0   # (the same nest, or a prefix of loops)
        for m, s in enumerate(u):
            loops = sibling_fusion.prefix_vars(s, prefix) if prefix is not None else ()
            for v, idx in plan_reads(s.rhs, plan):
                if v not in unit_of:
                    continue
                assert unit_of[v] <= k
                if unit_of[v] == k:
                    assert v in {t.var for t in u[:m]}
                    if prefix is None:
                        assert idx == sibling_fusion.identity(s)
                    else:   # at the shared loops' current values
                        gens = plan.by_var[v].rhs.gen_names()
                        assert all(idx[gens.index(g)] == Affine.var(g) for g in loops)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(sibling_programs())
def test_shared_nests_compile_with_numba(text):
    """Numba compiles shared nests (instrumented: a counter per member in the parallel
    loop) and they agree with the interpreter."""
    p = tl.parse(text)["sib"].run_to("ssa")
    c = numba_cpu.compile_program(p, instrument=True)
    for n, m in ((0, 3), (4, 3)):
        args = _args(np.random.default_rng(n), n, m)
        assert_same(c(args), interpret(tssa.to_core(p), args), atol=1e-9)
        python = numba_cpu.compile_program(p, instrument=True, jit=False)
        python(args)
        assert c.last_counts == python.last_counts
