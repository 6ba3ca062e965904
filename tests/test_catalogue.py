"""The rule catalogue (SPEC 10): every normalisation and derivative rule holds on random
instances, every rule of the jvp/vjp registries has an entry, the checker catches wrong rules
(meaning, cost, normal form, no instances), the tables, the whole-pass and theorem checks,
and `tl prove` fails on any of them."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLE_FILES
from tensorlang import cli
from tensorlang.ir import tssa
from tensorlang.ir.ast import Access, Gen, Iverson, Let, PTrue, subst
from tensorlang.ir import build
from tensorlang.ir.build import Builder
from tensorlang.ir.tssa import Operand
from tensorlang.passes import letlift as letlift_mod
from tensorlang.passes.jvp import JVP_RULES
from tensorlang.passes.jvp.emit import ids
from tensorlang.passes.rewrite import Ctx, rename_unique, step_once
from tensorlang.passes.vjp import VJP_RULES
from tensorlang.proofs.catalogue import (
    DERIVATIVES, PASSES, RULES, PassReport, Rule, RuleReport, TheoremRow, all_ok, bound_rows,
    check_all, check_pass, check_rule, derivative_rows, format_pass_table, format_table,
    format_theorem_table, load_rule_modules, values_close,
)
from tensorlang.proofs.rules_derivative import FORMS, PARAMS, N, derivative_rule
from tensorlang.proofs.rules_normalize import NORMALIZE_RULES

EXPECTED = ("L1 L2 L3 L4 L5 L6 L7 L8 L9 L10 P0 P1 P2 P3 P4 P5 P6 P7 P8 G1 G2 G3 G4").split()


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
    reports.append(RuleReport("FWD-add", "jvp", 4, True, True, 0.5, None, True))
    lines = format_table(reports).splitlines()
    assert lines[0].split() == ["rule", "pass", "instances", "checked", "meaning", "ok",
                                "cost", "ok", "normal", "form", "ok", "worst", "cost", "ratio"]
    assert lines[2].split() == ["L1", "letlift", "10", "yes", "yes", "-", "1.000"]
    assert lines[3].split() == ["G1", "genpush", "3", "yes", "yes", "-", "0.250"]
    assert lines[4].split()[-1] == "-"
    assert lines[5].split() == ["FWD-add", "jvp", "4", "yes", "yes", "yes", "0.500"]
    assert not all_ok(reports)  # no instances drawn for X
    assert all_ok(reports[:2] + reports[3:])
    assert not RuleReport("FWD-add", "jvp", 4, True, True, 0.5, None, False).ok


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


# ---------------------------------------------------------------------------------------------
# The derivative rules (FWD-*, ADJ-*)

BOX_RULES = ["cholesky", "trisolve", "trisolve_t", "cholesky_inverse", "lq", "eigh"]  # SPEC 13
FWD = ["FWD-input", "FWD-const", "FWD-index", "FWD-add", "FWD-map", "FWD-select",
       "FWD-contract", "FWD-reduce"]
ADJ = ["ADJ-input", "ADJ-const", "ADJ-index", "ADJ-add", "ADJ-map", "ADJ-select",
       "ADJ-contract", "ADJ-reduce", "ADJ-fanout"]
FWD_BOX = [f"FWD-{b}" for b in BOX_RULES]
ADJ_BOX = [f"ADJ-{b}" for b in BOX_RULES]


# max/min reductions (SPEC 12): their bound has a term per point the reduction visits.
EXTREME = ["FWD-extreme", "ADJ-extreme"]


def test_every_rule_of_the_derivative_registries_is_a_catalogue_entry() -> None:
    load_rule_modules()
    assert list(JVP_RULES.rules) == FWD + EXTREME[:1] + FWD_BOX
    assert list(VJP_RULES.rules) == ADJ[:-1] + EXTREME[1:] + ADJ[-1:] + ADJ_BOX
    assert set(FORMS) == set(FWD + FWD_BOX) | set(ADJ + ADJ_BOX) | set(EXTREME)
    for table in (JVP_RULES, VJP_RULES):
        for name, rule in table.rules.items():
            entry = RULES[name]
            assert entry.pass_ == table.kind and entry.schema == rule.schema
            assert entry.check is not None and entry.apply is None


def test_every_form_has_its_rule() -> None:
    """The registries dispatch each Tensor-SSA form to its rule, selections to FWD-select /
    ADJ-select."""
    b = Builder(PARAMS)
    x, s = b.input("x"), b.input("s")
    gen = [("g", N)]
    rhss = {"input": tssa.Input("x", ()),
            "const": build.make_const(gen, 2.0),
            "index": build.make_index(gen, "g + N"),
            "add": build.make_add(gen, (x, ["g"]), (x, ["g + 1"])),
            "map": build.make_map(gen, "sin", [(x, ["g"])]),
            "select": build.make_map(gen, "max", [(x, ["g"]), (s, [])]),
            "contract": build.make_contract(gen, [("h", N)], (x, ["g"]), (x, ["h"])),
            "reduce": build.make_reduce(gen, [("h", N)], (x, ["h"]))}
    for form, rhs in rhss.items():
        assert JVP_RULES.lookup(rhs).name == "FWD-" + form
        assert VJP_RULES.lookup(rhs).name == "ADJ-" + form


def test_all_derivative_rules_hold() -> None:
    reports = check_all(max_examples=15, names=FWD + FWD_BOX + ADJ + ADJ_BOX)
    bad = [r for r in reports if not r.ok]
    assert not bad, format_table(bad)
    for r in reports:
        assert r.instances == 15 and r.normal_form_ok is True
        assert math.isnan(r.worst_ratio) or r.worst_ratio <= 1.0


def test_extreme_rules_keep_meaning() -> None:
    reports = check_all(max_examples=15, names=EXTREME)
    for r in reports:
        assert r.instances == 15 and r.meaning_ok and r.normal_form_ok is True, \
            format_table([r])


def test_extreme_rules_meet_the_per_reduction_bound() -> None:
    """Within 3 C(f) + 4 E(f) (jvp tangent) and 4 C(f) + |in| + |out| + 4 E(f) (vjp), E(f)
    the points the reduction visits (semantics/bounds.py)."""
    reports = check_all(max_examples=15, names=EXTREME)
    assert all(r.cost_ok and r.ok for r in reports), format_table(reports)


def _swap_rule(monkeypatch, table, name: str, fn) -> None:
    monkeypatch.setitem(table.rules, name, dataclasses.replace(table.rules[name], fn=fn))


def test_a_derivative_rule_that_changes_the_meaning_is_caught(monkeypatch) -> None:
    # FWD-contract forgetting the second term of Leibniz's rule
    def one_term(fw, stmt):
        rhs = stmt.rhs
        t1 = fw.tan(rhs, rhs.operands[0])
        if t1 is None:
            return None
        sums = list(zip(rhs.sum_names(), rhs.sdims))
        return fw.em.sum(fw.gen(rhs), sums, rhs.pred, rhs.coeff,
                         [t1, fw.prim(rhs.operands[1])])

    _swap_rule(monkeypatch, JVP_RULES, "FWD-contract", one_term)
    report = check_rule(RULES["FWD-contract"], 40)
    assert not report.meaning_ok and not report.ok
    assert "finite differences" in report.counterexample


def test_an_adjoint_rule_that_changes_the_meaning_is_caught(monkeypatch) -> None:
    # ADJ-reduce forgetting the coefficient: the dot-product test fails
    def no_coeff(rv, stmt, dv):
        rv.give(stmt.rhs, dv, 0, 1.0, [], stmt.rhs.pred)

    _swap_rule(monkeypatch, VJP_RULES, "ADJ-reduce", no_coeff)
    report = check_rule(RULES["ADJ-reduce"], 40)
    assert not report.meaning_ok and "dot-product test" in report.counterexample


def test_a_derivative_rule_over_its_budget_is_caught(monkeypatch) -> None:
    # FWD-reduce as the sum of two halves: right, but an add and a multiplication too many
    def halves(fw, stmt):
        rhs = stmt.rhs
        t = fw.tan(rhs, rhs.operands[0])
        if t is None:
            return None
        sums = list(zip(rhs.sum_names(), rhs.sdims))
        half = fw.em.sum(fw.gen(rhs), sums, rhs.pred, 0.5 * rhs.coeff, [t])
        if half is None:
            return None
        here = Operand(half, ids(n for n, _ in fw.gen(rhs)))
        return fw.em.add(fw.gen(rhs), (here, PTrue()), (here, PTrue()))

    _swap_rule(monkeypatch, JVP_RULES, "FWD-reduce", halves)
    report = check_rule(RULES["FWD-reduce"], 40)
    assert report.meaning_ok and not report.cost_ok and report.worst_ratio > 1.0
    assert "> 3 C(f)" in report.counterexample


def test_a_derivative_rule_leaving_tensor_ssa_is_caught(monkeypatch) -> None:
    # FWD-map that materialises a trivial copy of its tangent (v = gen I. t[I])
    good = JVP_RULES.rules["FWD-map"].fn

    def copied(fw, stmt):
        t = good(fw, stmt)
        if t is None:
            return None
        gen = fw.gen(stmt.rhs)
        return fw.em.b.reduce(gen, [], (t, [n for n, _ in gen]))

    _swap_rule(monkeypatch, JVP_RULES, "FWD-map", copied)
    report = check_rule(RULES["FWD-map"], 20)
    assert report.normal_form_ok is False and not report.ok
    assert "not Tensor SSA" in report.counterexample


def test_a_registry_rule_without_instances_fails(monkeypatch) -> None:
    monkeypatch.setitem(JVP_RULES.rules, "FWD-new", dataclasses.replace(
        JVP_RULES.rules["FWD-add"], name="FWD-new"))
    report = check_rule(derivative_rule("FWD-new"), 5)
    assert report.instances == 0 and not report.ok
    assert "no instance could be drawn" in report.counterexample
    assert "FWD-new" in format_table([report])


# ---------------------------------------------------------------------------------------------
# The theorems and `tl prove`


def test_the_derivatives_hold_on_random_programs_and_every_example() -> None:
    rows = derivative_rows(3)
    assert [(r.name, r.programs) for r in rows] == [(DERIVATIVES, "random"),
                                                    (DERIVATIVES, "examples")]
    assert all(r.ok for r in rows), format_theorem_table(rows)
    n_examples = sum(1 for f in EXAMPLE_FILES for fn in tl.load(str(f)).values()
                     if not fn.is_derived)
    assert rows[0].checked == 3 and rows[1].checked == n_examples >= 16


def test_a_derivative_violation_is_reported(monkeypatch) -> None:
    from tensorlang.proofs import theorems

    real = theorems.check_derivatives

    def off(d, args, wrt=None):
        return dataclasses.replace(real(d, args, wrt), fd_error=1.0, ok=False)

    monkeypatch.setattr(theorems, "check_derivatives", off)
    rows = derivative_rows(2)
    assert all(not r.ok and r.worst == 1.0 for r in rows)
    table = format_theorem_table(rows)
    assert f"{DERIVATIVES} (rules) on random: counterexample" in table


def test_the_bound_rows_come_from_the_theorem_checker(monkeypatch) -> None:
    from tensorlang.proofs import theorems

    got = [theorems.TheoremReport("6.1 jvp", "rules", "random", 2, 0.5),
           theorems.TheoremReport("6.55 vjp", "compiled", "examples", 32, 1.25,
                                  ("f wrt x: C(vjp)=9 (bound 8)",), ("def f() -> R: ...",)),
           theorems.TheoremReport("6.1 jvp", "rules", "examples", 0, 0.0)]
    monkeypatch.setattr(theorems, "check_theorems", lambda k, examples: got)
    rows = bound_rows(2)
    assert [(r.name, r.level, r.programs, r.checked, r.ok) for r in rows] == [
        ("6.1 jvp bound", "rules", "random", 2, True),
        ("6.55 vjp bound", "compiled", "examples", 32, False),
        ("6.1 jvp bound", "rules", "examples", 0, False)]   # no program checked: a failure
    table = format_theorem_table(rows)
    assert "C(vjp)=9 (bound 8)" in table and "(no program was checked)" in table


def _prove(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["prove", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow   # (2 min cold; CI runs `tl prove --examples 10` itself after the suite)
def test_tl_prove_lists_every_rule_and_the_theorems(capsys) -> None:
    code, out, err = _prove(capsys, "--examples", "2")
    assert code == 0, err
    rows = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(FWD + FWD_BOX + ADJ + ADJ_BOX + EXPECTED) <= rows
    lines = out.splitlines()
    for theorem in ("6.1 jvp bound", "6.55 vjp bound"):
        for level, programs in itertools.product(("rules", "compiled"), ("random", "examples")):
            assert sum(line.split()[:5] == [*theorem.split(), level, programs]
                       for line in lines) == 1
    assert sum(line.startswith(DERIVATIVES) for line in lines) == 2
    assert "normal form ok" in out and "worst cost ratio" in out


def _fast_prove(monkeypatch, names: list[str]) -> None:
    """`tl prove` on these rules only, with the pass and theorem checks stubbed (passing)."""
    from tensorlang.proofs import catalogue

    real = catalogue.check_all
    monkeypatch.setattr(catalogue, "check_all", lambda k: real(k, names))
    monkeypatch.setattr(catalogue, "check_passes", lambda k: [
        PassReport("ssa", k, True, True, True, 1.0, None)])
    monkeypatch.setattr(catalogue, "check_theorems", lambda k: [
        TheoremRow(name, "rules", "random", k, True, 0.5, None)
        for name in ("6.1 jvp bound", "6.55 vjp bound", DERIVATIVES)])


def test_tl_prove_fails_on_a_broken_rule(capsys, monkeypatch) -> None:
    _fast_prove(monkeypatch, ["FWD-add", "ADJ-add"])
    assert _prove(capsys, "--examples", "5")[0] == 0

    def dropped(fw, stmt):  # the tangent of an add is zero: wrong
        return None

    _swap_rule(monkeypatch, JVP_RULES, "FWD-add", dropped)
    code, out, err = _prove(capsys, "--examples", "5")
    # ADJ-add fails too: its dot-product test compares with the jvp
    assert code == 1 and "2 checks failed: FWD-add, ADJ-add" in err
    assert "FWD-add: counterexample" in out


def test_tl_prove_fails_on_a_rule_with_no_instances(capsys, monkeypatch) -> None:
    from tensorlang.proofs import catalogue

    monkeypatch.setitem(RULES, "FWD-none", Rule("FWD-none", "jvp", "x -> x",
                                                lambda: st.nothing(), check=lambda i: None))
    _fast_prove(monkeypatch, ["FWD-input", "FWD-none"])
    code, out, err = _prove(capsys, "--examples", "3")
    assert code == 1 and "1 check failed: FWD-none" in err
    assert catalogue.check_all(3)[1].instances == 0


def test_tl_prove_fails_on_a_failed_normal_form_or_theorem(capsys, monkeypatch) -> None:
    from tensorlang.proofs import catalogue

    _fast_prove(monkeypatch, ["FWD-input"])
    monkeypatch.setattr(catalogue, "check_passes", lambda k: [
        PassReport("ssa", k, True, False, True, 1.0, "not in normal form")])
    code, _, err = _prove(capsys, "--examples", "2")
    assert code == 1 and "1 check failed: ssa" in err
    monkeypatch.setattr(catalogue, "check_passes", lambda k: [
        PassReport("ssa", k, True, True, True, 1.0, None)])
    monkeypatch.setattr(catalogue, "check_theorems", lambda k: [
        TheoremRow("6.55 vjp bound", "compiled", "examples", 32, False, 1.5, "qform ...")])
    code, out, err = _prove(capsys, "--examples", "2")
    assert code == 1 and "6.55 vjp bound (compiled) on examples" in err
    assert "counterexample" in out
    monkeypatch.setattr(catalogue, "check_theorems", lambda k: [
        TheoremRow(DERIVATIVES, "rules", "random", 0, True, math.nan, None)])
    code, out, err = _prove(capsys, "--examples", "2")
    assert code == 1 and f"{DERIVATIVES} (rules) on random" in err


def test_tl_prove_needs_the_examples(capsys, monkeypatch) -> None:
    from tensorlang.proofs import catalogue

    _fast_prove(monkeypatch, ["FWD-input"])

    def missing(k):
        raise FileNotFoundError("no examples/*.tl next to the tensorlang package (/x)")

    monkeypatch.setattr(catalogue, "check_theorems", missing)
    code, _, err = _prove(capsys, "--examples", "1")
    assert code == 1 and "no examples/*.tl" in err and "Traceback" not in err


def test_tl_prove_needs_a_positive_count(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["prove", "--examples", "0"])
    assert exc.value.code == 2 and "positive integer" in capsys.readouterr().err
