"""Windows and scalars in the CPU kernel (issue 14): a producer read through a window that
the consumer's bounds pin (`2 i <= j <= 2 i + 1`: each producer point once) is fused
(`codegen.injective` with the consumer's predicate); a sum over such windows adds its few
terms plainly (`Part.static_terms`, no block buffer); and a scalar statement is scheduled
right after what it reads, so it no longer splits the sibling nests around it
(`sibling_fusion.schedule`).  Each is checked against the interpreter, the first also by
brute force over small boxes."""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import assert_same
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, And, Cmp, Pred, PTrue
from tensorlang.semantics.grid import holds_at
from tensorlang.semantics.interp import interpret

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import codegen, sibling_fusion  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
I, J = Affine.var("i"), Affine.var("j")


def test_a_window_pinned_by_the_bounds_is_injective():
    window = And(Cmp("<=", I * 2, J), Cmp("<=", J, I * 2 + 1))
    assert not codegen.injective((J,), ("i", "j"))
    assert codegen.injective((J,), ("i", "j"), window)
    wide = And(Cmp("<=", I * 2, J), Cmp("<=", J, I * 2 + 2))   # j = 2i + 2 = 2(i + 1)
    assert not codegen.injective((J,), ("i", "j"), wide)
    strict = And(Cmp("<", I * 3 - 1, J), Cmp("<", J, I * 3 + 3))   # 3i <= j <= 3i + 2
    assert codegen.injective((J,), ("i", "j"), strict)
    assert codegen.injective((J,), ("i", "j"), Cmp("==", I * 2, J + 1))


_TERMS = st.integers(-3, 3)


@st.composite
def accesses_and_bounds(draw: Any) -> tuple[tuple[Affine, ...], Pred]:
    """A one- or two-dimensional access of (i, j, k) and up to four inequalities."""
    names = ("i", "j", "k")

    def affine(const: bool = True) -> Affine:
        return Affine(tuple((n, draw(_TERMS)) for n in names),
                      draw(st.integers(-3, 3)) if const else 0)

    idx = tuple(affine(False) for _ in range(draw(st.integers(1, 2))))
    conj: list[Pred] = []
    for _ in range(draw(st.integers(0, 3))):
        conj.append(Cmp(draw(st.sampled_from(["<", "<=", "=="])), affine(), affine()))
    for _ in range(draw(st.integers(0, 2))):   # a window: s x + a <= e <= s x + a + w
        x, e = Affine.var(draw(st.sampled_from(names))), affine()
        s, a, w = draw(st.integers(1, 3)), draw(st.integers(-2, 2)), draw(st.integers(0, 3))
        conj += [Cmp("<=", x * s + a, e), Cmp("<=", e, x * s + a + w)]
    pred: Pred = PTrue()
    for c in draw(st.permutations(conj)):
        pred = c if isinstance(pred, PTrue) else And(pred, c)
    return idx, pred


@settings(max_examples=500, deadline=None)
@given(accesses_and_bounds())
def test_injective_is_sound_on_small_boxes(case):
    """Whenever `injective` says so, no two points of the box [-4, 4]^3 where the
    predicate holds share the access's value."""
    idx, pred = case
    if not codegen.injective(idx, ("i", "j", "k"), pred):
        return
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for pt in itertools.product(range(-4, 5), repeat=3):
        env = dict(zip(("i", "j", "k"), pt))
        if not holds_at(pred, env):
            continue
        key = tuple(a.evaluate(env) for a in idx)
        assert seen.setdefault(key, pt) == pt, (idx, pred, key, seen[key], pt)


def test_upsample_adjoint_reads_its_window_without_a_temporary():
    """upsample's vjp: the cotangent times the gains (`d_y * s`) is computed in the window
    sum that reads it (no 2N x 2M temporary besides the output), and that sum adds its four
    terms plainly (no block buffer)."""
    f = tl.load(EXAMPLES / "stencil.tl")["upsample"]
    p = tl.vjp(f, "x").run_to("simplified")
    src = numba_cpu.generated_source(p)
    kernel = src[src.index("def tl_kernel"):]
    assert kernel.count("np.empty((max(0, 2*n_N), max(0, 2*n_M)))") == 1, kernel
    assert "tl_block_buffer()" not in src
    rng = np.random.default_rng(0)
    for n, m in ((0, 2), (1, 1), (3, 5)):
        args = {"N": n, "M": m, "x": rng.standard_normal((n, m)),
                "s": rng.standard_normal((2 * n, 2 * m)),
                "d_y": rng.standard_normal((2 * n, 2 * m))}
        want = interpret(tssa.to_core(p), args)
        for jit in (False, True):
            assert_same(numba_cpu.compile_program(p, jit=jit)(args), want, atol=1e-12)


@st.composite
def window_programs(draw: Any) -> str:
    """A pointwise producer over [j:S N] read by a sum over a window of j pinned by i (the
    adjoint shape of pooling and upsampling), the window possibly wider than the stride."""
    s = draw(st.integers(1, 3))
    w = draw(st.integers(0, 3))
    lo = draw(st.integers(-1, 1))
    body = draw(st.sampled_from(["x[j] * y[j]", "x[j] + 0.5", "square(x[j]) - y[j]"]))
    return (f"def win(N: size, x: R[{s} * N], y: R[{s} * N]) -> R[N]:\n"
            f"    p = gen j:{s} * N. {body}\n"
            f"    return gen i:N. sum j:{s} * N. [{s} * i + {lo} <= j and "
            f"j <= {s} * i + {lo + w}] * p[j] * x[j]\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window_programs(), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_window_sums_agree_with_the_interpreter(text, n, seed):
    p = tl.parse(text)["win"].run_to("ssa")
    s = int(text.split("x: R[")[1].split(" ")[0])
    rng = np.random.default_rng(seed)
    args = {"N": n, "x": rng.standard_normal(s * n), "y": rng.standard_normal(s * n)}
    want = interpret(tssa.to_core(p), args)
    assert_same(numba_cpu.compile_program(p, jit=False)(args), want, atol=1e-12)


def test_a_scalar_does_not_split_the_nest_of_the_statements_around_it():
    """nbody's Hessian-vector product: the constant 0.01 (a scalar statement) comes
    between the squared distances and the terms that read them; it is scheduled before
    them, so the whole pair computation is one nest."""
    p = tl.load(EXAMPLES / "nbody.tl")["nbody_hvp"].run_to("simplified")
    plan = codegen.plan_program(p)
    units = sibling_fusion.schedule(plan)
    where = {s.var: k for k, unit in enumerate(units) for s in unit}
    scalars = [s for s in plan.counted() if s.scalar]
    assert scalars
    for s in scalars:   # right after the last unit it reads (behind other scalars only)
        reads = [where[v] for v, _ in codegen.plan_reads(s.rhs, plan) if v in where]
        first = max(reads, default=-1) + 1
        assert where[s.var] >= first and all(
            all(m.scalar for m in units[k]) for k in range(first, where[s.var]))
    pair = [s.var for s in plan.counted() if not s.scalar and s.rhs.dims and
            len(s.rhs.dims) == 2 and str(s.rhs.dims[1]) == str(s.rhs.dims[0])]
    assert len({where[v] for v in pair}) == 1, (pair, where)
