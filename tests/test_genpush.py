"""Gen push-out (SPEC 4): rules G1-G4 against the interpreter and the cost model, the zero
extension guard of G1, G3 versus G4, and the whole pipeline letlift -> pairelim -> genpush on
random programs and on the examples."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from tensorlang.ir.ast import (
    Access, Affine, Cmp, Def, Gen, Iverson, TSize, Var, walk,
)
from tensorlang.semantics.cost import cost_def
from tensorlang.semantics.interp import interpret
from tensorlang.syntax.parser import parse_module
from tensorlang.passes.genpush import genpush, range_guard
from tensorlang.passes.rewrite import RuleNotApplicable, apply_rule, let_chain
from tensorlang.proofs.catalogue import compare
from tensorlang.proofs.normal_forms import is_gen_pushed
from tensorlang.testing import programs, random_args
from tensorlang.check.typecheck import check_module
from tensorlang.pipeline import derived_core, run_to

from test_letlift import assert_equivalent, core

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HEAD = "def f(N: size, M: size, x: R[N], A: R[N, M]) -> "

RULE_CASES: dict[str, str] = {
    "G1": HEAD + "R[N]:\n    return gen i:N. (gen j:N. exp(x[j]))[i + 1]",
    "G2": HEAD + "R[N]:\n    return [N < 3] * gen i:N. x[i] * 2.0",
    "G3": HEAD + "R[N, M]:\n    return A",
    "G4": HEAD + "R:\n    return sum i:N. A[i][1]",
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_each_rule_keeps_meaning_and_cost(rule: str) -> None:
    d = run_to(core(RULE_CASES[rule]), "pairelim")
    out = apply_rule(rule, d)
    assert out.body is not d.body
    assert_equivalent(d, out)
    full = genpush(d)
    assert is_gen_pushed(full) is None, is_gen_pushed(full)
    assert_equivalent(d, full)
    assert genpush(full) is full  # a fixed point


def test_rules_that_do_not_apply_raise() -> None:
    d = core(HEAD + "R[N]:\n    return gen i:N. x[i] + 1.0")
    for rule in ("G1", "G2", "G3", "G4"):
        with pytest.raises(RuleNotApplicable):
            apply_rule(rule, d)


def test_g1_keeps_zero_extension() -> None:
    """`(gen j:N. exp(x[j]))[i + 1]` reads 0 at i = N - 1: the guard `i + 1 < N` stays (the
    lower bound 0 <= i + 1 follows from i's range and is left out)."""
    d = core(RULE_CASES["G1"])
    out = genpush(d)
    (result,) = [out.body]
    assert isinstance(result, Gen) and isinstance(result.body, Iverson)
    i = Affine.var(result.idx)
    assert result.body.pred == Cmp("<", i + 1, Affine.var("N"))
    args = random_args(d, {"N": 3, "M": 1}, 0)
    assert interpret(out, args)[-1] == 0.0
    # G1 removes the materialised gen: N calls instead of N * N
    assert cost_def(out, args).calls == 2 < cost_def(d, args).calls == 9


def test_g1_guard_left_out_when_implied_by_ranges() -> None:
    d = core(HEAD + "R[N]:\n    return gen i:N. (gen j:N. x[j] * 2.0)[i]")
    out = genpush(d)
    assert not any(isinstance(n, Iverson) for n in walk(out.body))
    assert_equivalent(d, out)
    n, i, k = Affine.var("N"), Affine.var("i"), Affine.var("k")
    ranges = {"i": n, "k": Affine.var("K")}
    assert range_guard(i + k, n + Affine.var("K") - 1, ranges).__class__.__name__ == "PTrue"
    assert range_guard(i + 1, n, ranges) == Cmp("<", i + 1, n)
    assert range_guard(i - 1, n, ranges) == Cmp("<=", Affine.lit(0), i - 1)
    assert range_guard(Affine.lit(2), n, {}) == Cmp("<", Affine.lit(2), n)


def test_g1_with_several_indices() -> None:
    d = core(HEAD + "R:\n    return sum i:N. (gen a:N, b:M. A[a, b] * x[a])[i, 0]")
    out = genpush(d)
    assert is_gen_pushed(out) is None
    assert not any(isinstance(n, Gen) for n in walk(out.body))
    assert_equivalent(d, out)


def test_g3_eta_expands_partial_reads_but_g4_flattens_nested_access() -> None:
    d = core(HEAD + "R[N, M]:\n    B = gen i:N. A[i]\n    return B")
    out = genpush(d)
    binds, result = let_chain(out.body)
    (name, value), = binds
    # B = gen i:N. gen j:M. A[i, j]; the result is eta-expanded as well
    assert isinstance(value, Gen) and isinstance(value.body, Gen)
    assert isinstance(value.body.body, Access) and len(value.body.body.idx) == 2
    assert isinstance(result, Gen) and isinstance(result.body, Gen)
    d2 = core(RULE_CASES["G4"])
    out2 = genpush(d2)
    reads = [n for n in walk(out2.body) if isinstance(n, Access)]
    assert reads == [Access(Var("A"), (Affine.var(out2.body.idx), Affine.lit(1)))]
    assert not any(isinstance(n, Iverson) for n in walk(out2.body))  # no guard: x[a][b]


def test_g2_renames_the_gen_index_apart_from_the_predicate() -> None:
    from tensorlang.passes.genpush import G2
    from tensorlang.passes.rewrite import Ctx

    i, n = Affine.var("i"), Affine.var("N")
    d = core(HEAD + "R[N]:\n    return gen i:N. x[i]")
    ctx = Ctx(d)
    e = Iverson(Cmp("<", i, Affine.lit(2)), Gen("i", n, Access(Var("x"), (i,))))
    out = G2(e, ctx)
    assert isinstance(out, Gen) and out.idx != "i"
    assert out.body == Iverson(Cmp("<", i, Affine.lit(2)),
                               Access(Var("x"), (Affine.var(out.idx),)))


def test_normal_form_checker_rejects_gens_inside_scalars() -> None:
    msg = is_gen_pushed(core(RULE_CASES["G1"]))
    assert msg is not None and "computed value" in msg
    msg = is_gen_pushed(core(HEAD + "R:\n    return sum i:N. exp(x[i]) * sum j:N. x[j]"))
    assert msg is None
    msg = is_gen_pushed(core(RULE_CASES["G3"]))
    assert msg == "the result is not gen I. <scalar>"
    msg = is_gen_pushed(core(HEAD + "R[N]:\n    return gen i:N. sum j:M. A[i][j]"))
    assert msg is not None and "computed value" in msg  # A[i][j]: G4 not applied
    src = HEAD + "R:\n    y = gen i:N. x[i]\n    return sum i:N. y[i] * A[i, 0]"
    msg = is_gen_pushed(core(src))
    assert msg is None


def test_examples_through_the_three_passes() -> None:
    paths = sorted(EXAMPLES.glob("*.tl"))
    assert paths
    for path in paths:
        with open(path) as f:
            cm = check_module(parse_module(f.read(), str(path)), str(path),
                              derive=derived_core)
        for d in cm.defs.values():
            out = run_to(d, "genpush")
            assert is_gen_pushed(out) is None, (path, d.name, is_gen_pushed(out))
            sizes = {p.name: 3 for p in d.params if isinstance(p.type, TSize)}
            args = random_args(d, sizes, 1)
            meaning, cost, _, why = compare(d, out, args)
            assert meaning and cost, (path, d.name, why)


@given(programs())
def test_genpush_on_random_programs(example: tuple[Def, dict[str, Any]]) -> None:
    d, args = example
    src = run_to(d, "pairelim")
    out = genpush(src)
    assert is_gen_pushed(out) is None, is_gen_pushed(out)
    meaning, cost, _, why = compare(src, out, args)
    assert meaning and cost, why
    # and the whole pipeline against the source program
    meaning, cost, _, why = compare(d, out, args)
    assert meaning and cost, why
