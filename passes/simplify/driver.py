"""`simplify`: Tensor SSA -> Tensor SSA through the e-graph (SPEC 7), with its report.

1. `lower`: the statements of `p` over globally named indices;
2. `encode.Encoder`: the input's terms, then the Python-made alternatives (S-licm,
   S-inline, S-sum-solve);
3. `egraph.EGraph.run`: the rules of `rules_egg.RULES` within the `budget.Budget`; after
   the first round and at the end, `rules_py.PythonRounds` adds what egglog cannot derive;
4. `extract.extract` with `cost_model.Spec3Cost`: the cheapest term per class by the SPEC 3
   cost of the primitive each node becomes, counted exactly at the cost points (the sizes
   given, or representative sizes: `counting.cost_points`);
5. `decode.decode`: back to canonical, clean Tensor SSA;
6. `verify`: the result's exact cost must not exceed the input's at the sizes given (or a
   panel of sizes); otherwise the search rules are dropped and 2-5 repeated, and if that
   does not help either the input is returned unchanged (a verified outcome, in the report).

Failures (an exception in 1-5, a size the input or a candidate cannot be costed at) raise
`SimplifyError` in strict mode (`strict=True`, or `TENSORLANG_STRICT=1` in the
environment); otherwise the input is returned and the report says why.
"""
from __future__ import annotations

import os
from typing import Mapping, NamedTuple, Sequence

from tensorlang.ir import tssa
from tensorlang.ir.ast import Def
from tensorlang.ir.tssa import Program
from tensorlang.syntax import limits

from . import box_split, verify
from .budget import DEFAULT_BUDGET, Budget, RunStats
from .cost_model import Spec3Cost
from .counting import cost_points
from .decode import decode
from .egraph import EGraph, Graph
from .encode import Encoder, InlinePolicy
from .extract import CostModel, Extraction, extract
from .lower import Lowered, lower
from .report import Report, SimplifyError
from .rules_egg import GROUPS, RULES
from .rules_py import PythonRounds

# the schedule's last step after the final Python pass: what egglog derives from it
FINISH = "(run-schedule (saturate g_analysis) (run g_clean) (saturate g_analysis))"


def strict_default() -> bool:
    """Strict mode from the environment: `TENSORLANG_STRICT=1`."""
    return os.environ.get("TENSORLANG_STRICT", "") not in ("", "0")


class Simplified(NamedTuple):
    """The result of `simplify`: the program and the report of what was done."""

    program: Program
    report: Report


class Loaded(NamedTuple):
    """A lowered program in an e-graph (input marked, alternatives added)."""

    low: Lowered
    enc: Encoder
    eg: EGraph
    alternatives: int          # how many Python-made alternatives were added


def load(d: Def, ex: str, rules: Sequence[str] | None,
         policy: InlinePolicy | None = None, alternatives: bool = True) -> Loaded:
    """Steps 1-2: lower `d`, encode it, mark the input's e-nodes, add the alternatives."""
    low = lower(d, ex)
    enc = Encoder(low, policy)
    eg = EGraph(rules)
    base, alts = enc.build()
    eg.add(base)
    eg.mark()
    if alternatives:
        eg.add(alts)
    return Loaded(low, enc, eg, len(alts) if alternatives else 0)


def saturate(loaded: Loaded, budget: Budget, groups: Sequence[str]) -> RunStats:
    """Step 3: the rule groups within `budget`, the Python pass between rounds and at the
    end."""
    python = PythonRounds(loaded.eg, loaded.low.uni)
    run = loaded.eg.run(budget, groups=groups, on_round=python)
    if python(-1):
        loaded.eg.add([FINISH])
    return run


def extract_program(p: Program | Def, loaded: Loaded, graph: Graph, model: CostModel,
                    keep_input: bool = True) -> tuple[list[Program], Extraction]:
    """Steps 4-5: the candidate programs in order of preference (the greedy extraction,
    then the one `extract` repaired), and the extraction."""
    uni = loaded.low.uni
    roots = loaded.enc.roots(graph)
    ex = extract(graph, list(roots.values()), model, uni.pfree, uni.accfree,
                 old=graph.old if keep_input else None, complete=graph.free)
    out = []
    for choice in [ex.choice] + ([ex.repaired] if ex.repaired is not None else []):
        x = Extraction(choice, ex.free, ex.cost)
        out.append(decode(p, loaded.low, graph, x, roots))
    return out, ex


def simplify(p: Program, sizes: Mapping[str, int] | None = None, *,
             budget: Budget | None = None, rules: Sequence[str] | None = None,
             verify_cost: bool = True, strict: bool | None = None) -> Simplified:
    """The cheapest program the rules find that means what `p` means (SPEC 7), and the
    report.

    `sizes`: values of (some of) the size parameters, when known (a `cost(N=...)`); the
    extraction and the check use them; unknown ones use the representative sizes
    (`counting.cost_points`).  `rules`: restrict the e-graph rules (names of
    `rules_egg.RULES`); `budget`: the search's limits.  With `verify_cost`, the result's
    cost is checked against `p`'s (module doc).  `strict` (default: `TENSORLANG_STRICT`):
    raise `SimplifyError` on failure instead of returning `p`."""
    if box_split.has_boxes(p):  # boxes, index values, max/min: opaque leaves (box_split.py)
        opened, info = box_split.open_boxes(p)
        res = simplify(opened, sizes, budget=budget, rules=rules, verify_cost=verify_cost,
                       strict=strict)
        return Simplified(box_split.close_boxes(res.program, info, p), res.report)
    strict = strict_default() if strict is None else strict
    budget = budget or DEFAULT_BUDGET
    given = ({k: int(sizes[k]) for k in p.size_params() if k in sizes}
             if sizes is not None else None)
    notes = []
    if given is not None and not verify.valid_sizes(p, given):
        notes.append("the sizes " + ", ".join(f"{k}={v}" for k, v in given.items())
                     + " make an input's dimension negative: simplified as without sizes")
        given = None
    report = Report(p.name, budget, given, cost_points(p.size_params(), given), notes=notes)
    if len(p.stmts) > limits.MAX_SIMPLIFY_STATEMENTS:
        # A documented limit, not a failure: the extraction is quadratic in a chain of
        # statements (tensorlang/syntax/limits.py, docs/tutorial.md "Limits").
        report.notes.append(f"not simplified: {len(p.stmts):,} statements, more than the "
                            f"{limits.MAX_SIMPLIFY_STATEMENTS:,} the simplifier takes "
                            f"({limits.LIMITS_DOC})")
        return Simplified(p, report)
    try:
        checked = verify.panel(p, given) if verify_cost else []
        if verify_cost and not checked:
            raise SimplifyError(f"{p.name}: no sizes at which the cost can be checked "
                                f"(every panel point makes a dimension negative)")
        base = verify.costs(p, checked, "the input")
    except SimplifyError as err:
        return _failed(p, report, str(err.message), strict, err)
    report.before = {verify.point_key(a): c for a, c in zip(checked, base)}
    attempts: list[tuple[str, Sequence[str] | None]] = [("full", rules)]
    if rules is None:
        attempts.append(("clean", list(GROUPS["clean"])))
    for mode, chosen in attempts:
        try:
            candidates, run, model = attempt(p, given, budget, chosen)
        except Exception as err:  # a bug: loud in strict mode, in the report otherwise
            msg = f"{mode}: {type(err).__name__}: {err}"
            if strict:
                raise SimplifyError(f"{p.name}: the simplifier failed ({msg})") from err
            report.failures.append(msg)
            continue
        for k, q in enumerate(candidates):
            try:
                after = verify.costs(q, checked, f"the {mode} candidate")
            except SimplifyError as err:
                if strict:
                    raise
                report.failures.append(f"{mode}: {err.message}")
                continue
            if all(c <= b for c, b in zip(after, base)):
                report.mode = mode if k == 0 else mode + "+repaired"
                report.rules = tuple(chosen) if chosen is not None else tuple(
                    r for r in RULES if RULES[r].group != "analysis")
                report.run, report.model_cost = run, model
                report.after = {verify.point_key(a): c for a, c in zip(checked, after)}
                return Simplified(q, report)
        report.notes.append(f"{mode}: the cost would rise at some checked size; given up")
    return Simplified(p, report)


def _failed(p: Program, report: Report, msg: str, strict: bool,
            err: Exception) -> Simplified:
    if strict:
        raise SimplifyError(msg) from err
    report.failures.append(msg)
    return Simplified(p, report)


def attempt(p: Program, sizes: Mapping[str, int] | None, budget: Budget,
            rules: Sequence[str] | None) -> tuple[list[Program], RunStats, tuple[int, ...]]:
    """Lower, saturate, extract: the candidate programs, the run, the model's cost."""
    loaded = load(tssa.to_core(p), p.ix[2], rules)
    search = rules is None or any(RULES[r].group == "search" for r in rules)
    run = saturate(loaded, budget, ("clean", "search") if search else ("clean",))
    graph = loaded.eg.freeze()
    model = Spec3Cost(loaded.low.uni, cost_points(loaded.low.uni.size_names, sizes))
    candidates, ex = extract_program(p, loaded, graph, model)
    return candidates, run, ex.cost
