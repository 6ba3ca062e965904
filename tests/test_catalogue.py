"""The rule catalogue (SPEC 10): every normalisation rule holds on random instances, the
checker catches wrong rules (meaning and cost), the table, and the whole-pass checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorlang.ir.ast import Access, Gen, Iverson, Let, subst
from tensorlang.passes import letlift as letlift_mod
from tensorlang.proofs.catalogue import (
    PASSES, RULES, Rule, RuleReport, all_ok, check_all, check_pass, check_rule,
    format_pass_table, format_table, load_rule_modules, values_close,
)
from tensorlang.proofs.rules_normalize import NORMALIZE_RULES
from tensorlang.passes.rewrite import Ctx, rename_unique, step_once

EXPECTED = ("L1 L2 L3 L4 L5 L6 L7 L8 L9 P0 P1 P2 P3 P4 P5 P6 P7 P8 G1 G2 G3 G4").split()


def test_every_normalisation_rule_is_registered() -> None:
    load_rule_modules()
    assert list(NORMALIZE_RULES) == EXPECTED
    for name in EXPECTED:
        rule = RULES[name]
        assert rule.pass_ == {"L": "letlift", "P": "pairelim", "G": "genpush"}[name[0]]
        assert "->" in rule.schema


def test_all_normalisation_rules_hold() -> None:
    reports = check_all(max_examples=10, names=EXPECTED)
    bad = [r for r in reports if not r.ok]
    assert not bad, format_table(bad)
    assert all(r.instances == 10 and r.worst_ratio <= 1.0 for r in reports)


def _single_step(fn):
    """A Rule.apply that rewrites the first redex of `fn` (as apply_rule does)."""
    def apply(d):
        d = rename_unique(d)
        body = step_once(d.body, fn, Ctx(d))
        if body is None:
            raise ValueError("no redex")
        return type(d)(d.name, d.params, d.ret, body)
    return apply


def test_a_rule_that_raises_the_cost_is_caught() -> None:
    # L7 without duplicating the predicate onto the bound value: e1 runs where p is false
    def l7_naive(e, ctx):
        if isinstance(e, Iverson) and isinstance(e.e, Let):
            return Let(e.e.name, e.e.value, Iverson(e.pred, e.e.body))
        return None

    good = RULES["L7"]
    bad = Rule("L7-naive", "letlift", good.schema, good.instances, _single_step(l7_naive))
    report = check_rule(bad, 60)
    assert report.meaning_ok and not report.cost_ok and not report.ok
    assert report.worst_ratio > 1 and "cost rises" in report.counterexample
    table = format_table([report])
    assert "L7-naive" in table and "NO" in table and "counterexample" in table


def test_a_rule_that_changes_the_meaning_is_caught() -> None:
    # G1 without its guard loses zero extension
    def g1_unguarded(e, ctx):
        if isinstance(e, Access) and isinstance(e.e, Gen):
            body = subst(e.e.body, {e.e.idx: e.idx[0]})
            return Access(body, e.idx[1:]) if len(e.idx) > 1 else body
        return None

    good = RULES["G1"]
    bad = Rule("G1-unguarded", "genpush", good.schema, good.instances,
               _single_step(g1_unguarded))
    report = check_rule(bad, 60)
    assert not report.meaning_ok and "values differ" in report.counterexample
    assert not report.cost_ok  # and at size 0 it evaluates what the empty gen never did


def test_a_rule_that_does_not_apply_is_a_failure() -> None:
    good = RULES["L1"]
    never = Rule("L1-never", "letlift", good.schema, good.instances,
                 lambda d: letlift_mod.apply_rule("G4", d))
    report = check_rule(never, 5)
    assert not report.ok and "apply raised" in report.counterexample


def test_format_table_columns() -> None:
    reports = [RuleReport("L1", "letlift", 10, True, True, 1.0, None),
               RuleReport("G1", "genpush", 3, True, True, 0.25, None),
               RuleReport("X", "ssa", 0, True, True, math.nan, None)]
    lines = format_table(reports).splitlines()
    assert lines[0].split() == ["rule", "pass", "instances", "checked", "meaning", "ok",
                                "cost", "ok", "worst", "cost", "ratio"]
    assert lines[2].split() == ["L1", "letlift", "10", "yes", "yes", "1.000"]
    assert lines[3].split() == ["G1", "genpush", "3", "yes", "yes", "0.250"]
    assert lines[4].split()[-1] == "-"
    assert not all_ok(reports)  # no instances drawn for X
    assert all_ok(reports[:2])


def test_values_close() -> None:
    a = np.array([1.0, 2.0, np.nan])
    assert values_close(a, a + np.array([1e-12, 0, 0]))
    assert not values_close(a, np.array([1.0, 2.0, 3.0]))  # NaN pattern
    assert not values_close(a, a[:2])
    assert values_close((1.0, a), (1.0 + 1e-13, a.copy()))
    assert not values_close((1.0, a), a)
    assert not values_close(1.0, 1.001)
    assert values_close(np.array([1e6, 1e-30]), np.array([1e6, 0.0]))  # relative to scale
    assert not values_close(np.array([np.inf]), np.array([-np.inf]))


@pytest.mark.parametrize("name", ["letlift", "pairelim", "genpush"])
def test_whole_passes_on_random_programs(name: str) -> None:
    load_rule_modules()
    report = check_pass(PASSES[name], 15)
    assert report.ok, format_pass_table([report])
    assert report.programs == 15
