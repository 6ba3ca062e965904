"""The simplifier (SPEC 7): Tensor SSA -> Tensor SSA through an egglog e-graph, extracted by
the cost model; the pipeline's stage `simplified`.  docs/simplifier.md.

    simplify(p, sizes=None, *, budget=None, rules=None, strict=None) -> Simplified
        .program   the simplified tssa.Program (or `p` when nothing cheaper was verified)
        .report    `report.Report`: rules, budget used, sizes, costs, failures

Modules, in the order a program flows through them:
    universe    global index names, canonical predicate atoms, access keys
    lower       a core Def as statements over those names
    rules_egg   the egglog program: sorts, analyses, rewrite rules (text)
    rules_py    the rules egglog cannot express (inlining, the index solver, folding,
                refutation between rounds)
    encode      statements -> egglog commands (with the Python-made alternatives)
    budget      the search's limits, in rounds and e-nodes (never seconds)
    egraph      running egglog and reading the e-graph back
    counting    exact point counts of masked index boxes at the cost points
    cost_model  the SPEC 3 cost of an e-node (and the catalogue's "prefer new nodes")
    extract     greedy DAG extraction by a `CostModel`
    decode      an extraction -> Tensor SSA
    verify      the safety check: exact costs before and after
    report      the report, `SimplifyError`
    driver      `simplify`
    one_rule    one rule at a time (proofs/ catalogue), `roundtrip`

It imports `tensorlang.ir`, `tensorlang.semantics` (interp for predicates, builtins),
`tensorlang.syntax` (errors, the SSA printer's affine format), `tensorlang.passes.indexsolve`
and `tensorlang.passes.ssa`; nothing imports it but the
pipeline, the proofs/ catalogue and tests.
"""
from __future__ import annotations

from .budget import DEFAULT_BUDGET, Budget, RunStats
from .driver import Simplified, simplify, strict_default
from .one_rule import NotApplicable, apply_rules, roundtrip
from .report import Report, SimplifyError


__all__ = ["simplify", "Simplified", "Report", "SimplifyError", "Budget", "RunStats",
           "DEFAULT_BUDGET", "apply_rules", "NotApplicable", "roundtrip", "strict_default"]
