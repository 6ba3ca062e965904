"""Let-lifting (SPEC 4): each rule L1-L9 against the interpreter and the cost model, the
cost counterexamples that fix the exact form of L7, L8 and L9, and the whole pass on random
programs."""
from __future__ import annotations

import textwrap
from typing import Any

import pytest
from hypothesis import given

from tensorlang.ir.ast import (
    REAL, Access, Add, Affine, Cmp, Const, Def, Gen, Iverson, Let, Mul, Param, Sum, TSize, Var,
    tensor, walk,
)
from tensorlang.semantics.cost import cost_def
from tensorlang.syntax.parser import parse_module
from tensorlang.passes.letlift import letlift
from tensorlang.passes.rewrite import RuleNotApplicable, apply_rule, rename_unique
from tensorlang.proofs.catalogue import compare
from tensorlang.proofs.normal_forms import is_let_lifted
from tensorlang.testing import programs, random_args
from tensorlang.check.typecheck import check_module


def core(src: str, name: str | None = None) -> Def:
    """The elaborated core def `name` (default: the last) of a `.tl` source."""
    cm = check_module(parse_module(textwrap.dedent(src)))
    return cm.defs[name or cm.order[-1]]


def sizes_of(d: Def, n: int) -> dict[str, int]:
    return {p.name: n for p in d.params if isinstance(p.type, TSize)}


def assert_equivalent(lhs: Def, rhs: Def, sizes=(0, 1, 3), seed: int = 0) -> None:
    """Same value and no higher cost, for several sizes (0 included)."""
    for n in sizes:
        args = random_args(lhs, sizes_of(lhs, n), seed)
        meaning, cost, _, why = compare(lhs, rhs, args)
        assert meaning and cost, why


HEAD = "def f(N: size, x: R[N], A: R[N, N]) -> "

RULE_CASES: dict[str, str] = {
    "L1": HEAD + "R:\n    return x[1] * (let t = x[0] * 2.0 in t + t)",
    "L2": HEAD + "R:\n    return max(x[1], let t = x[0] in t * t)",
    "L3": HEAD + "(R, R):\n    return (let t = exp(x[0]) in t * t, x[1])",
    "L4": HEAD + "R:\n    return (let t = (x[0] * x[1], x[1]) in t).0",
    "L5": HEAD + "R:\n    return (let t = gen i:N. x[i] * 2.0 in t)[1]",
    "L6": HEAD + "R:\n    y = let t = x[0] * x[1] in t + 1.0\n    return y * y",
    "L7": HEAD + "R:\n    return [N == 3] * (let t = exp(x[0]) in t * t)",
    "L8": HEAD + "R[N]:\n    return gen i:N. let t = x[i] * x[i] in t + 1.0",
    "L9": HEAD + "R:\n    return sum i:N. sum j:N. let t = A[i, j] * x[j] in [i <= j] * t",
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_each_rule_keeps_meaning_and_cost(rule: str) -> None:
    d = core(RULE_CASES[rule])
    out = apply_rule(rule, d)
    assert out.body is not d.body
    assert isinstance(out.body, Let) or rule == "L6"
    assert_equivalent(d, out)
    lifted = letlift(d)
    assert is_let_lifted(lifted) is None
    assert_equivalent(d, lifted)


def test_rules_that_do_not_apply_raise() -> None:
    d = core(HEAD + "R:\n    return x[0] + x[1]")
    for rule in ("L1", "L6", "L8", "L9"):
        with pytest.raises(RuleNotApplicable):
            apply_rule(rule, d)
    with pytest.raises(Exception, match="unknown rule"):
        apply_rule("L42", d)


def test_l6_flattens_a_statement_whose_value_is_a_let() -> None:
    d = core(RULE_CASES["L6"])
    out = letlift(d)
    names = [n.name for n in walk(out.body) if isinstance(n, Let)]
    assert names == ["t", "y"]  # t is now a statement before y


def test_l8_fissions_a_gen_and_reads_the_new_tensor() -> None:
    out = letlift(core(RULE_CASES["L8"]))
    assert isinstance(out.body, Let) and isinstance(out.body.value, Gen)
    t2 = out.body.name
    reads = [n for n in walk(out.body.body) if isinstance(n, Access) and n.e == Var(t2)]
    assert reads and all(r.idx == (Affine.var("i"),) for r in reads)


def test_l8_hoists_a_loop_invariant_value_without_the_gen() -> None:
    d = core(HEAD + "R[N]:\n    return gen i:N. let t = exp(x[0]) in t * x[i]")
    out = letlift(d)
    # t does not depend on i: one call instead of N, guarded by 0 < N (see below)
    assert isinstance(out.body, Let) and isinstance(out.body.value, Iverson)
    assert cost_def(out, {"N": 5}).calls == 1
    assert cost_def(d, {"N": 5}).calls == 5
    assert_equivalent(d, out)


def test_l8_hoist_needs_the_nonempty_guard() -> None:
    """Counterexample: hoisting e1 out of `gen i:n` unguarded costs C(e1) at n = 0, where the
    gen costs nothing.  The guard `[0 < n]` keeps the rule cost-neutral."""
    d = core(HEAD + "R[N]:\n    return gen i:N. let t = exp(x[0]) in t * x[i]")
    lhs_body = d.body
    assert isinstance(lhs_body, Gen) and isinstance(lhs_body.body, Let)
    let = lhs_body.body
    unguarded = Def(d.name, d.params, d.ret,
                    Let(let.name, let.value, Gen(lhs_body.idx, lhs_body.size, let.body)))
    assert cost_def(unguarded, {"N": 0}).total == 1 > cost_def(d, {"N": 0}).total == 0
    assert cost_def(letlift(d), {"N": 0}).total == 0
    # with a size known to be positive the guard is not needed
    d3 = core("def f(x: R[3]) -> R[3]:\n    return gen i:3. let t = exp(x[0]) in t * x[i]")
    out3 = letlift(d3)
    assert not any(isinstance(n, Iverson) for n in walk(out3.body))
    assert_equivalent(d3, out3)


def test_l7_must_duplicate_the_predicate() -> None:
    """Counterexample: lifting the let out of `[p] * _` without guarding e1 evaluates e1 where
    p is false: cost C(e1) instead of 0."""
    d = core(RULE_CASES["L7"])
    iv = d.body
    assert isinstance(iv, Iverson) and isinstance(iv.e, Let)
    naive = Def(d.name, d.params, d.ret, Let(iv.e.name, iv.e.value, Iverson(iv.pred, iv.e.body)))
    assert cost_def(naive, {"N": 2}).total == 1 > cost_def(d, {"N": 2}).total == 0
    out = apply_rule("L7", d)
    assert isinstance(out.body, Let) and isinstance(out.body.value, Iverson)
    assert cost_def(out, {"N": 2}).total == 0
    assert cost_def(out, {"N": 3}).total == cost_def(d, {"N": 3}).total == 2


def _nest_example() -> Def:
    """sum i:N. sum j:N. let t = x[j] in [i == 0] * t"""
    i, j, N = Affine.var("i"), Affine.var("j"), Affine.var("N")
    body = Sum("i", N, Sum("j", N, Let("t", Access(Var("x"), (j,)),
                                       Iverson(Cmp("==", i, Affine.lit(0)), Var("t")))))
    return Def("f", (Param("N", TSize()), Param("x", tensor([N]))), REAL, body)


def test_l9_on_the_innermost_sum_alone_raises_the_cost() -> None:
    """Counterexample (SPEC 3 as written): fission out of the inner sum of a nest only,

        sum i. sum j. let t = x[j] in [i == 0] * t
          -> sum i. let t' = gen j. x[j] in sum j. [i == 0] * t'[j],

    splits the jointly costed nest: the outer sum now adds one value per i, also for the
    i whose inner sum has no live term (Z(sum ...) is false).  At N = 2 the left side costs
    1 addition (2 live points), the right side 2.  Hence L9 acts on the maximal nest."""
    d = _nest_example()
    i, j, N = Affine.var("i"), Affine.var("j"), Affine.var("N")
    inner_only = Def(d.name, d.params, d.ret, Sum("i", N, Let(
        "t2", Gen("j", N, Access(Var("x"), (j,))),
        Sum("j", N, Iverson(Cmp("==", i, Affine.lit(0)), Access(Var("t2"), (j,)))))))
    args = random_args(d, {"N": 2}, 0)
    meaning, cost, _, _ = compare(d, inner_only, args)
    assert meaning and not cost
    assert cost_def(d, args).adds == 1 and cost_def(inner_only, args).adds == 2
    out = apply_rule("L9", d)  # the whole nest: let t' = gen i. gen j. ... is not needed
    assert isinstance(out.body, Let) and isinstance(out.body.body, Sum)
    assert isinstance(out.body.body.body, Sum)  # the nest is intact
    assert cost_def(out, args).adds == 1
    assert_equivalent(d, out, sizes=(0, 1, 2, 4))


def test_l9_generates_only_over_the_indices_the_value_uses() -> None:
    d = core(HEAD + "R:\n    return sum i:N. sum j:N. let t = exp(x[j]) in A[i, j] * t")
    out = apply_rule("L9", d)
    value = out.body.value
    # t depends on j only: gen j:N. [0 < N] * exp(x[j]) -- N calls, not N^2
    assert isinstance(value, Gen) and value.idx == "j"
    assert cost_def(out, {"N": 4}).calls == 4 < cost_def(d, {"N": 4}).calls == 16
    assert_equivalent(d, out)


def test_letlift_is_idempotent_and_keeps_lifted_programs() -> None:
    d = core(RULE_CASES["L9"])
    once = letlift(d)
    assert letlift(once) is once
    plain = core(HEAD + "R:\n    y = gen i:N. x[i] * 2.0\n    return sum i:N. y[i]")
    assert letlift(plain) is plain


def test_binders_are_renamed_apart_first() -> None:
    # the same name bound twice, and an index name reused: lifting must not capture
    d = core(HEAD + "R:\n    return (let t = x[0] in t * t) + (let t = x[1] in t + t)")
    out = letlift(d)
    names = [n.name for n in walk(out.body) if isinstance(n, Let)]
    assert len(names) == len(set(names)) == 2
    assert_equivalent(d, out)
    nested = Def("f", (Param("N", TSize()), Param("x", tensor([Affine.var("N")]))), None,
                 Gen("i", Affine.var("N"), Access(Gen("i", Affine.var("N"), Let(
                     "t", Mul(Access(Var("x"), (Affine.var("i"),)), Const(2.0)),
                     Add(Var("t"), Const(1.0)))), (Affine.var("i") + 1,))))
    renamed = rename_unique(nested)
    assert renamed.body.idx == "i" and renamed.body.body.e.idx != "i"
    assert_equivalent(nested, letlift(nested))


def test_pairs_and_tensors_of_lets() -> None:
    d = core(HEAD + "([N]R, R):\n"
             "    p = gen i:N. let s = x[i] * x[i] in (s, let u = s + 1.0 in u * s)\n"
             "    return (gen i:N. p[i].1, sum i:N. p[i].0)")
    out = letlift(d)
    assert is_let_lifted(out) is None
    assert_equivalent(d, out)


@given(programs())
def test_letlift_on_random_programs(example: tuple[Def, dict[str, Any]]) -> None:
    d, args = example
    out = letlift(d)
    assert is_let_lifted(out) is None
    meaning, cost, _, why = compare(d, out, args)
    assert meaning and cost, why
