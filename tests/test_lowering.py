"""Lowering decisions of the CPU code generator (issue 14): `exists` elimination, integer
powers, BLAS for reduces of products, storage, and the machine model (SPEC 16)."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, ROOT, assert_same
from tensorlang.backends import numba_rt, scalar_builtins
from tensorlang.backends.codegen import POWERS, plan_program
from tensorlang.backends.codegen_nest import Facts, simplify_exists
from tensorlang.backends.common import machine_model, storage
from tensorlang.backends.numba_cpu import compile_program, generated_source
from tensorlang.ir.ast import Affine, And, Cmp, Exists, Or, Pred, PTrue, RelCall
from tensorlang.semantics import builtins, grid
from tensorlang.semantics.interp import interpret

from bench.machine_rank import spearman

# ---------------------------------------------------------------------------------------------
# exists elimination

NAMES = ("i", "j")


def _affine(draw, names: tuple[str, ...]) -> Affine:
    a = Affine.lit(draw(st.integers(-3, 3)))
    for n in names:
        a = a + Affine.var(n) * draw(st.sampled_from([-2, -1, 0, 0, 1, 1, 2]))
    return a


@st.composite
def exists_preds(draw, depth: int = 2) -> Pred:
    """`exists k. C` over free indices i, j and size N, C a conjunction of comparisons,
    sometimes a relation call or a nested exists."""
    k = f"k{depth}"
    names = NAMES + ("N",) + tuple(f"k{d}" for d in range(depth, 3))
    parts: list[Pred] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "rel", "exists"]
                                    if depth > 1 else ["cmp", "cmp", "rel"]))
        if kind == "cmp":
            parts.append(Cmp(draw(st.sampled_from(["<", "<=", "=="])), _affine(draw, names),
                             _affine(draw, names)))
        elif kind == "rel":
            parts.append(RelCall("E", (Affine.var(k), Affine.var(draw(st.sampled_from(NAMES))))))
        else:
            parts.append(draw(exists_preds(depth - 1)))
    body = parts[0]
    for q in parts[1:]:
        body = And(body, q)
    size = draw(st.sampled_from([Affine.var("N"), Affine.var("N") - 1, Affine.lit(3)]))
    return Exists(k, size, body)


def _truth(p: Pred, n: int, rel: np.ndarray) -> np.ndarray:
    box = grid.Box(sizes={"N": n}, rels={"E": rel}).bind_indices([("i", n), ("j", n)])
    return np.broadcast_to(grid.pred(p, box), (n, n))


@settings(max_examples=300)   # cheap: a few small boxes per example
@given(exists_preds(), st.integers(0, 5), st.integers(0, 2 ** 16))
def test_exists_elimination_is_exact(p, n, seed):
    """`simplify_exists` is equivalent to the quantified predicate (the ONE evaluator,
    semantics/grid.py, on every point i, j of a box)."""
    q = simplify_exists(p)
    rel = np.random.default_rng(seed).random((max(n, 1) + 3, max(n, 1) + 3)) < 0.4
    np.testing.assert_array_equal(_truth(q, n, rel), _truth(p, n, rel))


@st.composite
def quotient_preds(draw) -> Pred:
    """`exists k:n. c k <= e and e <= c k + w` (and a second such pair, or a comparison):
    the shape `e // c` and `e % c` lower to, with widths w around c - 1 (exact or not)."""
    k = "k0"
    parts: list[Pred] = []
    for _ in range(draw(st.integers(1, 2))):
        c = draw(st.sampled_from([2, 3, 4]))
        e = _affine(draw, NAMES)
        w = Affine.lit(draw(st.integers(c - 3, c + 1)))
        ck = Affine.var(k) * c
        parts += [Cmp("<=", ck, e), Cmp("<=", e, ck + w)]
    if draw(st.booleans()):
        parts.append(Cmp(draw(st.sampled_from(["<", "<="])), _affine(draw, NAMES + (k,)),
                         _affine(draw, NAMES + ("N",))))
    body = parts[0]
    for q in parts[1:]:
        body = And(body, q)
    size = draw(st.sampled_from([Affine.var("N"), Affine.var("N") + 1, Affine.lit(3)]))
    return Exists(k, size, body)


@settings(max_examples=300)
@given(quotient_preds(), st.integers(0, 6))
def test_exists_elimination_with_quotient_coefficients_is_exact(p, n):
    """Coefficients 2-4 (`_project_cmps`: a pair is dropped only where its dark shadow always
    holds): equivalent to the quantified predicate on every point."""
    q = simplify_exists(p)
    rel = np.zeros((n + 3, n + 3), dtype=bool)
    np.testing.assert_array_equal(_truth(q, n, rel), _truth(p, n, rel))


@st.composite
def disjunctions(draw) -> Pred:
    """Disjunctions of comparisons and conjunctions of them over i, j and N: the case splits
    of `(i - 1) % N` derivatives (`1 <= i or i <= 0`) and ones that are not true."""
    parts: list[Pred] = []
    for _ in range(draw(st.integers(2, 4))):
        conj: Pred = Cmp(draw(st.sampled_from(["<", "<=", "=="])), _affine(draw, NAMES + ("N",)),
                         _affine(draw, NAMES + ("N",)))
        if draw(st.booleans()):
            conj = And(conj, Cmp("<=", _affine(draw, NAMES), _affine(draw, NAMES + ("N",))))
        parts.append(conj)
    out = parts[0]
    for q in parts[1:]:
        out = Or(out, q)
    return out


@settings(max_examples=300)
@given(disjunctions(), st.integers(0, 6))
def test_facts_decide_disjunctions_soundly(p, n):
    """`Facts.simplify` of a disjunction is equivalent to it at every point of the box (the
    ONE evaluator); the case split of a periodic read is decided true."""
    facts = Facts.of({"i": Affine.var("N"), "j": Affine.var("N")}, ["N"])
    q = facts.simplify(p)
    rel = np.zeros((n + 3, n + 3), dtype=bool)
    np.testing.assert_array_equal(_truth(q, n, rel), _truth(p, n, rel))
    i = Affine.var("i")
    split = Or(Cmp("<=", Affine.lit(1), i), Cmp("<=", i, Affine.lit(0)))
    assert isinstance(facts.simplify(split), PTrue)


def test_quotient_guards_are_no_loops():
    """upsampling's gradient masks `exists k0:N. 2 k0 <= i0 <= 2 k0 + 1`: every i0 in range
    has its k0, decided without a loop over N (it was O(N M) per point)."""
    # the simplified program as the backends get it (from the disk cache when compiled before)
    src = generated_source(tl.load(EXAMPLES / "stencil.tl")["upsample_grad"].final_program())
    assert "_exists" not in src


def test_trivially_true_exists_is_no_loop():
    """nbody's `exists k0:N. i0 + 1 <= k0` under `i0 + 1 <= i1`: decided, no flag loop."""
    src = generated_source(tl.load(EXAMPLES / "nbody.tl")["nbody"].run_to("ssa"))
    assert "_exists" not in src
    src = generated_source(tl.load(EXAMPLES / "nbody.tl")["nbody_grad"].run_to("simplified"))
    assert "_exists" not in src


# ---------------------------------------------------------------------------------------------
# integer powers

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -3.25, 1e-160, -1e-160, 1e155, 1e200, -1e300, 5e-324,
           math.inf, -math.inf, math.nan, 0.1, 7.0]


@pytest.mark.parametrize("c", sorted(POWERS))
def test_strength_reduced_powers_match_numpy_power(c):
    """Each form, with the builtins as the interpreter computes them (numba_rt's plain-Python
    stand-ins; the compiled builtins match those bit for bit, test_numba_cpu.py), against
    numpy's power on special and ordinary values."""
    fns = {f"tl_{k}": getattr(numba_rt, f"python_{k}") for k in scalar_builtins.FUNCS}
    fns["math"] = math
    for x in SPECIAL:
        with np.errstate(all="ignore"):
            got = float(eval(POWERS[c].format(x="x", p="tl_"), fns,  # noqa: S307
                             {"x": np.float64(x)}))
        with np.errstate(all="ignore"):
            want = float(builtins.apply("pow", [np.float64(x)], (c,)))
        if math.isnan(want):
            assert math.isnan(got), (c, x)
        elif want == 0.0 or math.isinf(want):
            assert got == want and math.copysign(1, got) == math.copysign(1, want), (c, x)
        else:
            assert got == pytest.approx(want, rel=1e-15), (c, x)


def test_no_math_pow_for_integer_powers():
    src = generated_source(tl.load(EXAMPLES / "nnmatfac.tl")["nnmatfac_grad"].run_to("simplified"))
    assert "tl_pow" not in src and "tl_square(tl_recip(" in src


# ---------------------------------------------------------------------------------------------
# BLAS for a reduce of a product

QFORM = ("def qf(N: size, x: R[N], A: R[N, N]) -> R:\n"
         "    return sum i:N, j:N. x[i] * A[i, j] * x[j]\n"
         "def qf_grad = grad(qf, x)\n")


@pytest.mark.parametrize("func", ["qf", "qf_grad"])
@pytest.mark.parametrize("jit", [False, True])
def test_reduce_of_product_runs_as_blas(tmp_path, func, jit):
    f = tmp_path / "qf.tl"
    f.write_text(QFORM)
    fn = tl.load(f)[func]
    p = fn.run_to(fn.default_stage())
    plan = plan_program(p)
    assert any(s.mode == "blas" and s.var not in
               {t.var for t in p.stmts if type(t.rhs).__name__ == "ContractRhs"}
               for s in plan.stmts)              # a reduce became a BLAS call
    src = generated_source(p)
    assert "tl_matmul" in src and "v_A[j0, i0]" not in src
    rng = np.random.default_rng(0)
    for n in (0, 1, 7):
        args = {"N": n, "x": rng.standard_normal(n), "A": rng.standard_normal((n, n))}
        assert_same(compile_program(p, jit=jit)(args), interpret(fn.core(), args))


# ---------------------------------------------------------------------------------------------
# storage


def test_matfac_temporaries_are_not_zero_filled():
    for func in ("matfac", "matfac_grad"):
        fn = tl.load(EXAMPLES / "matfac.tl")[func]
        plan = plan_program(fn.run_to(fn.default_stage()))
        allocs = {s.var: storage.allocation(s, plan) for s in plan.stmts
                  if s.mode == "loops" and not s.scalar}
        assert allocs and set(allocs.values()) == {storage.EMPTY}, (func, allocs)


def test_masked_outputs_keep_their_zero_fill():
    fn = tl.load(EXAMPLES / "pathological.tl")["row_col_grad"]
    plan = plan_program(fn.run_to(fn.default_stage()))
    (s,) = [s for s in plan.stmts if s.mode == "loops"]
    assert storage.allocation(s, plan) == storage.ZEROS


# ---------------------------------------------------------------------------------------------
# machine model


def test_machine_model_rows():
    fn = tl.load(EXAMPLES / "qform.tl")["qform_grad"]
    est = machine_model.estimate(fn.run_to(fn.default_stage()), {"N": 100})
    blas = [s for s in est.stmts if s.blas]
    assert len(blas) == 2 and all(s.flops == 2 * 100 * 100 for s in blas)
    assert all(s.bytes >= 8 * 100 * 100 for s in blas)      # each reads A once
    small = machine_model.estimate(fn.run_to(fn.default_stage()), {"N": 10})
    assert small.seconds < est.seconds and small.bytes < est.bytes


def test_machine_model_counts_fills_and_fused_work():
    fn = tl.load(EXAMPLES / "nbody.tl")["nbody"]
    est = machine_model.estimate(fn.run_to(fn.default_stage()), {"N": 50})
    fused = [s for s in est.stmts if s.mode == "fused"]
    assert fused and all(s.bytes == 0 and s.into for s in fused)
    total_ops = sum(sum(c) for c in
                    __import__("tensorlang.semantics.cost", fromlist=["x"])
                    .cost_program(fn.run_to(fn.default_stage()), {"N": 50}).per_stmt.values())
    assert est.flops >= total_ops // 2


def test_tl_cost_machine_cli():
    out = subprocess.run([sys.executable, "-m", "tensorlang", "cost",
                          str(EXAMPLES / "qform.tl"), "qform", "N=100", "--machine"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "BLAS" in out.stdout and "bytes moved" in out.stdout and "total" in out.stdout


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)
