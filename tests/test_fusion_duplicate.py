"""Fusion of cheap producers into every consumer (codegen.decide_fusion), stores that a
shared nest reads only through locals (numba_cpu_source.emit_siblings) and the
strength-reduced fractional powers, on nbody's derivatives (issue 14: the gradient wrote two
N x N x 3 temporaries, the Hessian-vector product three N x N arrays nothing read) and on
random programs against the interpreter."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import assert_same, to_program
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import codegen  # noqa: E402
from tensorlang.backends.codegen import plan_program  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _nbody(name: str) -> tssa.Program:
    return tl.load(EXAMPLES / "nbody.tl")[name].run_to("simplified")


def _allocations(src: str) -> list[str]:
    return re.findall(r"np\.(?:empty|zeros)\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)", src)


def test_nbody_gradient_stores_no_pair_by_coordinate_array():
    """The differences `P[i, c] - P[j, c]` and the pair terms `2 (P[i, c] - P[j, c]) w[i, j]`
    are recomputed where the two gathers (j > i, j < i) read them: the kernel allocates no
    N x N x 3 array, and one N x N array (the pair factor): the squared distances are a
    local of the pair nest (the constant 0.01 no longer splits that nest in two)."""
    src = numba_cpu.generated_source(_nbody("nbody_grad"))
    kernel = src[src.index("def tl_kernel"):]
    shapes = _allocations(kernel)
    nn = "max(0, n_N), max(0, n_N)"
    assert not any(s.startswith(nn + ",") for s in shapes), shapes
    assert shapes.count(nn) == 1, shapes
    assert "tl_pow" not in kernel


def test_nbody_hvp_stores_only_what_other_nests_read():
    """Members of the shared nest read only by later members at the same point (x^-1/2,
    sqrt, the pair weight, d2 and its directional derivative) are locals, not arrays: two
    N x N arrays remain (the two pair factors the gathers read)."""
    src = numba_cpu.generated_source(_nbody("nbody_hvp"))
    kernel = src[src.index("def tl_kernel"):]
    shapes = _allocations(kernel)
    nn = "max(0, n_N), max(0, n_N)"
    assert not any(s.startswith(nn + ",") for s in shapes), shapes
    assert shapes.count(nn) == 2, shapes
    assert "tl_pow" not in kernel


@pytest.mark.parametrize("name", ["nbody", "nbody_grad", "nbody_hvp"])
def test_nbody_kernels_agree_with_the_interpreter(name):
    p = _nbody(name)
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 7):
        args = {"N": n, "P": rng.standard_normal((n, 3)), "m": rng.random(n)}
        if name == "nbody_hvp":
            args["v"] = rng.standard_normal((n, 3))
        want = interpret(tssa.to_core(p), args)
        for jit in (False, True):
            assert_same(numba_cpu.compile_program(p, jit=jit)(args), want, atol=1e-12)


SHARED = """
def shared(N: size, x: R[N], A: R[N, N]) -> (R[N], R[N, N]):
    d = gen i:N. gen j:N. x[i] - x[j]
    e = gen i:N. gen j:N. sin(x[i] - x[j])
    r = gen i:N. sum j:N. d[i, j] * e[i, j] * A[i, j]
    s = gen i:N. sum j:N. d[j, i] * e[j, i]
    t = gen i:N. gen j:N. d[i, j] * A[j, i]
    return (gen i:N. r[i] + s[i], t)
"""


def test_cheap_producer_read_by_several_statements_is_fused_in_each():
    """`d` (one subtraction) is read by three statements, through different accesses: it is
    recomputed in each; `e` (a sine) is stored."""
    p = tl.parse(SHARED)["shared"].run_to("ssa")
    plan = plan_program(p)
    multi = {v for v in plan.fused if len(p.uses(v)) > 1}
    assert multi, (str(p), plan.fused)
    for v in multi:
        assert codegen.inline_ops(p.defs[v], {}) is not None
    stored = {s.var for s in plan.stmts if s.mode == "loops"}
    sines = {s.var for s in p.stmts if isinstance(s.rhs, tssa.MapRhs) and s.rhs.fn == "sin"}
    assert sines and not any(v in plan.fused for v in sines if len(p.uses(v)) > 1), stored
    rng = np.random.default_rng(0)
    for n in (0, 1, 5):
        args = {"N": n, "x": rng.standard_normal(n), "A": rng.standard_normal((n, n))}
        want = interpret(tssa.to_core(p), args)
        for jit in (False, True):
            assert_same(numba_cpu.compile_program(p, jit=jit)(args), want, atol=1e-12)


def _run(p: tssa.Program, args: dict[str, Any], duplicate: bool) -> Any:
    with pytest.MonkeyPatch.context() as m:
        if not duplicate:
            m.setattr(codegen, "MAX_DUPLICATED_OPS", -1)
        return numba_cpu.compile_program(p, jit=False)(args)


_CHEAP = ("{a} + {b}", "{a} * {b}", "{a} - {b}", "square({a})", "relu({a})", "abs({a})")


@st.composite
def shared_producer_programs(draw: Any) -> str:
    """Defs over the box [i:N, j:M] whose cheap statements are read by several later ones,
    at the point, mirrored (`M - 1 - j`), transposed into sums, and through masks."""
    names: list[str] = []
    lines: list[str] = []

    def atom() -> str:
        choices = ["x[i, j]", "y[j]", "0.5"]
        for v in names:
            choices += [f"{v}[i, j]", f"{v}[i, M - 1 - j]"]
        return draw(st.sampled_from(choices))

    def cheap(depth: int) -> str:
        if depth == 0 or draw(st.booleans()):
            return atom()
        form = draw(st.sampled_from(_CHEAP))
        return "(" + form.format(a=cheap(depth - 1), b=cheap(depth - 1)) + ")"

    for k in range(draw(st.integers(2, 6))):
        name = f"s{k}"
        kind = draw(st.integers(0, 3))
        if kind == 0 and names:
            v = draw(st.sampled_from(names))
            body = f"sum k:M. {v}[i, k] * {cheap(1)}"
        elif kind == 1:
            body = f"[i < j] * {cheap(2)}"
        elif kind == 2:
            body = f"sin({cheap(1)})"
        else:
            body = cheap(3)
        lines.append(f"    {name} = gen i:N. gen j:M. {body}")
        names.append(name)
    outs = [v for v in names if draw(st.booleans())] or [names[-1]]

    def nest(items: list[str]) -> str:
        return items[0] if len(items) == 1 else f"({items[0]}, {nest(items[1:])})"

    ret = nest(["R[N, M]"] * len(outs))
    return (f"def sp(N: size, M: size, x: R[N, M], y: R[M]) -> {ret}:\n" +
            "\n".join(lines) + f"\n    return {nest(outs)}\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_producer_programs(), st.integers(0, 4), st.integers(0, 4),
       st.integers(0, 2**32 - 1))
def test_duplicated_fusion_agrees_with_the_interpreter(text, n, m, seed):
    """Random programs of cheap producers read by several statements: the kernel (plain
    Python) agrees with the interpreter, and with the kernel that stores them."""
    p = tl.parse(text)["sp"].run_to("ssa")
    rng = np.random.default_rng(seed)
    args = {"N": n, "M": m, "x": rng.standard_normal((n, m)), "y": rng.standard_normal(m)}
    want = interpret(tssa.to_core(p), args)
    got = _run(p, args, True)
    assert_same(got, want, atol=1e-9)
    assert_same(got, _run(p, args, False), atol=1e-12)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_with_duplicated_fusion_agree_with_the_interpreter(case):
    """The general random programs (tensorlang.testing), duplication on and off."""
    d, args = case
    p = to_program(d)
    want = interpret(tssa.to_core(p), args)
    got = _run(p, args, True)
    assert_same(got, want, atol=1e-9)
    assert_same(got, _run(p, args, False), atol=1e-9)


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(shared_producer_programs())
def test_duplicated_fusion_compiles_with_numba(text):
    p = tl.parse(text)["sp"].run_to("ssa")
    c = numba_cpu.compile_program(p)
    for n, m in ((0, 3), (4, 3)):
        rng = np.random.default_rng(n)
        args = {"N": n, "M": m, "x": rng.standard_normal((n, m)),
                "y": rng.standard_normal(m)}
        assert_same(c(args), interpret(tssa.to_core(p), args), atol=1e-9)
