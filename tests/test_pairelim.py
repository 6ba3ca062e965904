"""Pair elimination (SPEC 4): rules P0-P8 against the interpreter and the cost model, P8's
cost-neutrality once the projections are pushed in, parameters of pair type, and the whole
pass on random let-lifted programs."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from tensorlang.ir.ast import Access, Affine, Def, Pair, Proj, Var, walk
from tensorlang.semantics.cost import cost_def
from tensorlang.passes.letlift import letlift
from tensorlang.passes.pairelim import apply_p8_pushed, pairelim
from tensorlang.passes.rewrite import RuleNotApplicable, apply_rule, let_chain
from tensorlang.proofs.catalogue import compare
from tensorlang.proofs.normal_forms import is_struct_of_arrays
from tensorlang.testing import programs

from test_letlift import assert_equivalent, core

HEAD = "def f(N: size, x: R[N], z: [N](R, R), q: (R, R[N])) -> "

RULE_CASES: dict[str, str] = {
    "P0": HEAD + "(R, R[N]):\n    return q",
    "P1": HEAD + "R:\n    return (exp(x[0]), x[1] * x[1]).1",
    # The left sides of P2 (projection of a tensor of pairs) and P7 (access of a pair of
    # tensors) are well typed only up to struct-of-arrays, not in the surface language;
    # they arise from P8 and P3.  Built from these bodies below (`SOA_ONLY`).
    "P2": HEAD + "[N](R, R):\n    return gen i:N. (x[i] * 2.0, exp(x[i]))",
    "P3": HEAD + "R:\n    return (z[1]).0",
    "P4": HEAD + "R:\n    return ([N == 2] * (x[0] * x[0], exp(x[1]))).0",
    "P5": HEAD + "[N](R, R):\n    return gen i:N. (x[i] * 2.0, exp(x[i]))",
    "P6": HEAD + "(R, R):\n    return [N < 3] * (x[0] * x[1], x[1])",
    "P7": HEAD + "([N]R, [N]R):\n    return (gen i:N. x[i] * 2.0, gen i:N. exp(x[i]))",
    "P8": HEAD + "R:\n    p = (x[0] * x[1], exp(x[0]))\n    return p.0 + p.1",
}


SOA_ONLY = {"P2": lambda body: Proj(body, 1), "P7": lambda body: Access(body, (Affine.lit(1),))}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_each_rule_keeps_meaning_and_cost(rule: str) -> None:
    d = letlift(core(RULE_CASES[rule]))
    if rule in SOA_ONLY:
        d = Def(d.name, d.params, None, SOA_ONLY[rule](d.body))
    out = apply_p8_pushed(d) if rule == "P8" else apply_rule(rule, d)
    assert out.body is not d.body
    assert_equivalent(d, out)
    full = pairelim(d)
    assert is_struct_of_arrays(full) is None, is_struct_of_arrays(full)
    assert_equivalent(d, full)


def test_rules_that_do_not_apply_raise() -> None:
    d = core(HEAD + "R:\n    return x[0] + x[1]")
    for rule in ("P1", "P5", "P8"):
        with pytest.raises(RuleNotApplicable):
            apply_rule(rule, d)
    with pytest.raises(RuleNotApplicable):
        apply_p8_pushed(d)


EXPENSIVE_PAIR = (HEAD + "R:\n"
                  "    p = gen i:N. (exp(x[i]) * x[i], sin(x[i]) + x[i] * x[i])\n"
                  "    return sum i:N. p[i].0 * p[i].1")


def test_p8_alone_duplicates_but_pushed_projections_share_nothing() -> None:
    """P8 copies e into both halves; by itself that doubles the cost of e.  Once P1-P4 push
    the projections in, each half keeps only its own component: the cost is unchanged."""
    d = letlift(core(EXPENSIVE_PAIR))
    args = {"N": 4}
    single = apply_rule("P8", d)
    binds, _ = let_chain(single.body)
    assert [type(v) for _, v in binds] == [Proj, Proj]
    assert cost_def(single, args).total > cost_def(d, args).total  # the bare duplicate
    pushed = apply_p8_pushed(d)
    assert cost_def(pushed, args).total == cost_def(d, args).total
    halves = let_chain(pushed.body)[0]
    assert not any(isinstance(n, (Pair, Proj)) for _, v in halves for n in walk(v))
    assert_equivalent(d, pushed)
    # per binding: the two halves together cost exactly what the pair did
    before = cost_def(d, args).per_binding
    after = cost_def(pushed, args).per_binding
    assert list(before) == ["p", "return"]
    assert sum(after[n].total for n, _ in halves) == before["p"].total > 0


def test_parameters_of_pair_type_are_read_through_projections() -> None:
    d = letlift(core(HEAD + "([N]R, R):\n"
                     "    w = gen i:N. (z[i].1 * x[i], z[i].0)\n"
                     "    return (gen i:N. w[i].0 + q.1[i], sum i:N. w[i].1 * q.0)"))
    out = pairelim(d)
    assert out.params == d.params  # the signature (and the arguments) do not change
    projected = {n for n in walk(out.body) if isinstance(n, Proj)}
    assert projected and all(isinstance(p.e, Var) for p in projected)
    # z : [N](R, R) is a pair of tensors: its components are read as z.0[a], z.1[a]
    assert any(isinstance(n, Access) and n.e == Proj(Var("z"), 1) for n in walk(out.body))
    assert is_struct_of_arrays(out) is None
    assert_equivalent(d, out)


def test_pair_valued_result_and_nested_pairs() -> None:
    d = letlift(core(HEAD + "((R, R), R[N]):\n"
                     "    p = ((x[0], exp(x[1])), gen i:N. x[i] * 3.0)\n"
                     "    r = [N < 4] * p\n"
                     "    return (r.0, r.1)"))
    out = pairelim(d)
    binds, result = let_chain(out.body)
    assert isinstance(result, Pair) and isinstance(result.a, Pair)
    assert len(binds) == 6  # p and r each split into three leaves
    assert is_struct_of_arrays(out) is None
    assert_equivalent(d, out)


def test_normal_form_checker_rejects_intermediate_pairs() -> None:
    d = letlift(core(RULE_CASES["P8"]))
    msg = is_struct_of_arrays(d)
    assert msg is not None and "binding p" in msg
    assert is_struct_of_arrays(letlift(core(RULE_CASES["P0"]))) is not None  # bare pair input


@given(programs())
def test_pairelim_on_random_programs(example: tuple[Def, dict[str, Any]]) -> None:
    d, args = example
    src = letlift(d)
    out = pairelim(src)
    assert is_struct_of_arrays(out) is None, is_struct_of_arrays(out)
    meaning, cost, _, why = compare(src, out, args)
    assert meaning and cost, why
    assert pairelim(out) is out  # a fixed point
