"""The simplifier (passes/simplify*.py, SPEC 7): the asymptotic wins of the examples, every
example and derived function simplified (meaning, cost, normal form), random programs, the
rules of the catalogue, the cost model of the extraction, and the safety net.

Costs are exact SPEC 3 costs of Tensor-SSA programs (`tssa.cost`, equal to
`cost_def(tssa.to_core(p), args)`); meaning is compared with the reference evaluation."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from tensorlang.ir import ast as A
from tensorlang import pipeline
from tensorlang.ir import tssa
from tensorlang.ir.ast import (Access, Add, Affine, Call, Cmp, Const, Def, Gen, Iverson, Let, Mul,
                            Param, Sum, TRel, TSize, Var, tensor)
from tensorlang.semantics.interp import interpret
from tensorlang.passes import simplify as S
from tensorlang.passes import simplify_egglog as G
from tensorlang.passes.derive import derive
from tensorlang.passes.genpush import genpush
from tensorlang.passes.letlift import letlift
from tensorlang.passes.pairelim import pairelim
from tensorlang.passes.simplify import simplify
from tensorlang.passes.ssa import to_ssa
from tensorlang.proofs.catalogue import RULES, check_rule, format_table, values_close
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.testing import programs, random_args

from examples_util import EXAMPLE_FILES, EXAMPLES

N, M = Affine.var("N"), Affine.var("M")


# ---------------------------------------------------------------------------------------------
# helpers


def example(file: str, name: str, kind: str | None = None, wrt: tuple[str, ...] = ()):
    """The Tensor-SSA program of an example function, a derived function of the file, or
    `kind(name, wrt)`."""
    m = tl.load(str(EXAMPLES / f"{file}.tl"))
    if kind is not None:
        return derive(pipeline.run_to(m[name].core(), "ssa"), kind, wrt)
    f = m[name]
    if f.is_derived:
        return derive(pipeline.run_to(m[f.source.fn].core(), "ssa"), f.kind, f.wrt, name)
    return pipeline.run_to(f.core(), "ssa")


def sized(p: tssa.Program, n: int) -> dict:
    """Every size n; relations full."""
    args: dict = {s: n for s in p.size_params()}
    for q in p.params:
        if isinstance(q.type, TRel):
            args[q.name] = np.ones(tuple(int(d.evaluate(args)) for d in q.type.sizes), bool)
    return args


def cost(p: tssa.Program, n: int) -> int:
    return tssa.cost(p, sized(p, n)).total


def at(p: tssa.Program, **sizes: int) -> dict:
    """The sizes given, relations full."""
    args: dict = dict(sizes)
    for q in p.params:
        if isinstance(q.type, TRel):
            args[q.name] = np.ones(tuple(int(d.evaluate(args)) for d in q.type.sizes), bool)
    return args


def growth(p: tssa.Program, n1: int = 20, n2: int = 40) -> float:
    """The exponent e of cost ~ n^e between two sizes."""
    return math.log(cost(p, n2) / cost(p, n1)) / math.log(n2 / n1)


def check_simplified(p: tssa.Program, q: tssa.Program, args: dict) -> None:
    assert is_tensor_ssa(q) is None, is_tensor_ssa(q)
    assert values_close(tssa.evaluate(q, args), tssa.evaluate(p, args))
    assert tssa.cost(q, args).total <= tssa.cost(p, args).total


def inputs(p: tssa.Program, n: int = 3, seed: int = 0) -> dict:
    return random_args(tssa.to_core(p), {s: n for s in p.size_params()}, seed,
                       rel_encoding="bool", low=0.5, high=1.5)


# ---------------------------------------------------------------------------------------------
# Asymptotic wins (SPEC 7): growth exponents between N = 20 and N = 40


def test_qform2_is_quadratic() -> None:
    p = example("qform2", "qform2")
    q = simplify(p)
    assert growth(p) > 2.8            # x^T (A^T A) x as written materialises A^T A: O(N^3)
    assert growth(q) < 2.1            # reassociated: (A x)^T (A x)
    assert cost(q, 20) < cost(p, 20) / 10
    check_simplified(p, q, inputs(p))


def test_qform2_jvp_in_A_is_quadratic() -> None:
    p = example("qform2", "qform2_jvp")
    q = simplify(p)
    assert growth(p) > 2.8
    assert growth(q) < 2.1
    check_simplified(p, q, inputs(p))


def test_hessian_of_qform_is_quadratic() -> None:
    p = example("qform", "qform", "hessian", ("x",))
    q = simplify(p)
    assert growth(q) < 2.1            # the one-hot seed left no factor N: A + A^T
    check_simplified(p, q, inputs(p))


def test_one_hot_seeds_leave_no_factor() -> None:
    # The materialised Hessian of the logistic loss is X^T diag(.) X: M N^2 (3 with M = N);
    # a one-hot seed looped over would make it 4.  The Jacobian of a scalar is its gradient.
    hess = simplify(example("logreg", "logreg_hess"))
    assert growth(hess) < 3.1
    jac = simplify(example("qform", "qform", "jacobian", ("x",)))
    assert growth(jac) < 2.1
    for p in (example("logreg", "logreg_hess"), example("qform", "qform", "jacobian", ("x",))):
        check_simplified(p, simplify(p), inputs(p))


def test_trace_of_a_diagonal_is_linear() -> None:
    p = example("pathological", "trace_diag")
    q = simplify(p)
    assert growth(q) < 1.1
    check_simplified(p, q, inputs(p))


# ---------------------------------------------------------------------------------------------
# Every example and every derived function of the examples


def _all_examples() -> list[tuple[str, str]]:
    out = []
    for f in EXAMPLE_FILES:
        m = tl.load(str(f))
        out += [(f.stem, name) for name in m]
    return out


@pytest.mark.parametrize("file,name", _all_examples())
def test_every_example_is_simplified(file: str, name: str) -> None:
    p = example(file, name)
    q = simplify(p)
    report = S.LAST_REPORT
    assert report.mode in ("full", "full+repaired"), report.reason
    for n, seed in ((2, 1), (3, 2)):
        check_simplified(p, q, inputs(p, n, seed))


def test_the_pipeline_simplifies() -> None:
    m = tl.load(str(EXAMPLES / "qform2.tl"))
    d = m.qform2.core()
    assert m.qform2.default_stage() == pipeline.FINAL == "simplified"
    q = pipeline.run_to(d, "simplified")
    assert isinstance(q, tssa.Program) and is_tensor_ssa(q) is None
    assert m.qform2.cost(N=20).total == cost(q, 20) < m.qform2.cost(stage="ssa", N=20).total
    assert m.qform2_jvp.cost(N=20).total < m.qform2_jvp.cost(stage="ssa", N=20).total


# ---------------------------------------------------------------------------------------------
# Random programs (tensorlang.testing.programs() normalised to Tensor SSA)


def _ssa(d: Def) -> tssa.Program:
    return to_ssa(genpush(pairelim(letlift(d))))


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs(inst: tuple[Def, dict]) -> None:
    d, args = inst
    p = _ssa(d)
    sizes = {q.name: args[q.name] for q in p.params if isinstance(q.type, TSize)}
    for q in (simplify(p, sizes), simplify(p)):
        assert is_tensor_ssa(q) is None, is_tensor_ssa(q)
        assert values_close(interpret(tssa.to_core(q), args), interpret(d, args))
        assert tssa.cost(q, args).total <= tssa.cost(p, args).total


# ---------------------------------------------------------------------------------------------
# The rules (proofs/rules_simplify.py) and what they do


def test_every_rule_is_in_the_catalogue() -> None:
    from tensorlang.proofs.rules_simplify import PYTHON_RULES, SIMPLIFY_RULES
    egglog_rules = {r for r in G.RULES if G.RULES[r].group != "analysis"}
    assert egglog_rules | set(PYTHON_RULES) == set(SIMPLIFY_RULES)
    for name in SIMPLIFY_RULES:
        assert RULES[name].pass_ == "simplify" and "->" in RULES[name].schema


def test_every_rule_holds() -> None:
    from tensorlang.proofs.rules_simplify import SIMPLIFY_RULES
    reports = [check_rule(RULES[name], 6) for name in SIMPLIFY_RULES]
    bad = [r for r in reports if not r.ok]
    assert not bad, format_table(bad)
    assert all(r.worst_ratio <= 1.0 for r in reports)


def _def(*binds: tuple[str, A.Expr], params=None) -> Def:
    from tensorlang.proofs.rules_simplify import SYM
    body: A.Expr = Var(binds[-1][0])
    for name, value in reversed(binds):
        body = Let(name, value, body)
    return Def("f", params or SYM, None, body)


def _rd(name: str, *idx: str) -> A.Expr:
    return Access(Var(name), tuple(Affine.var(i) for i in idx)) if idx else Var(name)


def _simplified_text(d: Def, sizes: dict | None = None) -> str:
    return tssa.to_text(simplify(to_ssa(d), sizes))


def _program(d: Def, sizes: dict | None = None) -> tuple[tssa.Program, tssa.Program]:
    p = to_ssa(d)
    return p, simplify(p, sizes)


def test_contradictory_brackets_are_zero() -> None:
    # t is 0 where i > 1, and b reads it only where i > 2: b is 0 (the index solver refutes
    # the conjunction of the brackets across the two statements)
    i = Affine.var("i")
    d = _def(("t", Gen("i", N, Iverson(Cmp("<=", i, Affine.lit(1)), Call("exp", (_rd("x", "i"),),
                                                                       ())))),
             ("b", Gen("i", N, Iverson(Cmp("<", Affine.lit(2), i),
                                       Mul(_rd("t", "i"), _rd("z", "i"))))))
    p, q = _program(d)
    assert cost(q, 10) == 0 < cost(p, 10)
    check_simplified(p, q, inputs(p, 5))


def test_zero_one_and_constant_folding() -> None:
    e = Add(Mul(Const(1.0), Mul(Const(2.0), Mul(Const(3.0), _rd("x", "i")))),
            Mul(Const(0.0), _rd("z", "i")))
    p, q = _program(_def(("b", Gen("i", N, e))))
    text = tssa.to_text(q)
    assert "6.0" in text and cost(q, 10) == 10 < cost(p, 10)


def test_sum_elimination_by_the_index_solver() -> None:
    # t[i] = z[i] (a one-hot contraction), then a sum pinned by [k == i]
    i, k = Affine.var("i"), Affine.var("k")
    d = _def(("t", Gen("i", N, Sum("k", N, Iverson(Cmp("==", k, i), _rd("z", "k"))))),
             ("b", Gen("i", N, Mul(_rd("t", "i"), _rd("x", "i")))))
    p, q = _program(d)
    assert cost(q, 20) == 20 and growth(q) < 1.1      # one multiplication per i
    check_simplified(p, q, inputs(p))


def test_loop_invariant_factor_leaves_the_sum() -> None:
    # sum j. x[i] * y[j] = x[i] * sum j. y[j]
    d = _def(("b", Gen("i", N, Sum("j", M, Mul(_rd("x", "i"), _rd("y", "j"))))))
    p, q = _program(d)
    args = at(p, N=20, M=20)
    assert tssa.cost(q, args).total == 19 + 20 < tssa.cost(p, args).total
    check_simplified(p, q, inputs(p))


def test_common_subexpressions_are_shared() -> None:
    e = Call("exp", (_rd("x", "i"),), ())
    d = _def(("t", Gen("i", N, e)), ("u", Gen("i", N, e)),
             ("b", Gen("i", N, Mul(_rd("t", "i"), _rd("u", "i")))))
    p, q = _program(d)
    c = tssa.cost(q, at(q, N=10, M=1))
    assert c.calls == 10 and c.total <= tssa.cost(p, at(p, N=10, M=1)).total


def test_loop_invariant_code_is_hoisted_only_where_it_pays() -> None:
    # exp(s) inside gen i:N is computed once -- and not at all when N = 0
    d = _def(("b", Gen("i", N, Mul(_rd("x", "i"), Call("exp", (_rd("s"),), ())))))
    p, q = _program(d)
    assert tssa.cost(q, at(q, N=10, M=1)).calls == 1
    assert tssa.cost(q, at(q, N=0, M=1)).total == 0


def test_matrix_chain_is_reassociated_by_the_sizes() -> None:
    # (B C^T) x: materialising B C^T costs N^2 M; B (C^T x) costs 2 N M
    i, j, k = (Affine.var(v) for v in "ijk")
    bc = Gen("i", N, Gen("k", N, Sum("j", M, Mul(_rd("B", "i", "j"), _rd("C", "k", "j")))))
    d = _def(("t", bc), ("b", Gen("i", N, Sum("k", N, Mul(_rd("t", "i", "k"), _rd("x", "k"))))))
    p, q = _program(d, {"N": 30, "M": 30})
    args = at(p, N=30, M=30)
    assert tssa.cost(q, args).total < tssa.cost(p, args).total / 5
    check_simplified(p, q, inputs(p))


# ---------------------------------------------------------------------------------------------
# The cost model of the extraction is SPEC 3


@pytest.mark.parametrize("file,name", [("qform", "qform"), ("qform2", "qform2_jvp"),
                                       ("logreg", "logreg_hess"), ("conv", "deconv_grad"),
                                       ("nbody", "nbody_grad"), ("imgarap", "arap_residuals")])
def test_extraction_cost_is_the_spec3_cost(file: str, name: str) -> None:
    """The input's own term, extracted and converted back: its model cost is the input's
    exact cost at every cost point, and the converted program costs no more."""
    p = example(file, name)
    q, model, points = S.roundtrip(p)
    for k, pt in enumerate(points):
        assert model[k] == tssa.cost(p, pt).total
        assert tssa.cost(q, pt).total <= model[k]


# ---------------------------------------------------------------------------------------------
# Budget, report, safety net


def test_budget_and_report() -> None:
    p = example("qform2", "qform2")
    simplify(p, budget=G.Budget(rounds=2))
    r = S.LAST_REPORT
    assert r.run is not None and r.run.rounds <= 2 and r.mode.startswith("full")
    assert r.after and all(r.after[k] <= r.before[k] for k in r.after)


def test_failures_leave_the_program_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    p = example("qform", "qform")

    def broken(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(S, "_attempt", broken)
    assert simplify(p) is p
    assert S.LAST_REPORT.mode == "unchanged" and "boom" in S.LAST_REPORT.reason


def test_a_costlier_candidate_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    p = example("qform2", "qform2")
    worse = example("qform2", "qform2_jvp")   # more work (and other outputs): never taken
    monkeypatch.setattr(S, "_attempt", lambda *a, **k: ([worse], None, ()))
    assert simplify(p) is p
    assert "cost would rise" in S.LAST_REPORT.reason
