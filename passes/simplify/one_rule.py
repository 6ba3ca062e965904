"""The simplifier one rule at a time, for the proofs/ catalogue (`apply_rules`), and the
input's own term through the whole machinery (`roundtrip`, which pins that the extraction's
cost model is SPEC 3)."""
from __future__ import annotations

from typing import Mapping, Sequence

from tensorlang.ir import tssa
from tensorlang.ir.ast import Def
from tensorlang.ir.tssa import Program

from .budget import Budget
from .cost_model import NewNodes, Spec3Cost
from .counting import cost_points
from .driver import extract_program, load, saturate
from .encode import InlinePolicy
from .rules_egg import RULES
from .rules_py import PythonRounds


class NotApplicable(ValueError):
    """The rule found no redex in the program (or the extraction kept the input)."""


def apply_rules(d: Def, rules: Sequence[str], *, choose: str = "new",
                policy: InlinePolicy | None = None, rounds: int = 2) -> Def:
    """A gen-pushed core `Def` rewritten by the e-graph rules `rules` (names in
    `rules_egg.RULES`; none: only the Python pass of `policy`), as a core Def.

    `choose="new"` extracts the term made of as many nodes the rules created as possible
    (the rules applied, whatever the cost); `"cost"` extracts by the cost model (for sizes
    given as literals in the types, exactly the cost).  `NotApplicable` when no rule
    matched (or, with no rules, the Python pass added no equality)."""
    policy = policy or InlinePolicy(enabled=False, solve=False, licm=True)
    loaded = load(d, "k", rules, policy)
    groups = tuple(g for g in ("clean", "search")
                   if any(RULES[r].group == g for r in rules))
    run = saturate(loaded, Budget(rounds=rounds, python_rounds=(0,)), groups)
    sets = {f":ruleset {RULES[r].ruleset}" for r in rules}
    fired = sum(n for text, n in run.matches.items() if any(s in text for s in sets))
    if not fired and not (not rules and loaded.alternatives):
        raise NotApplicable(f"{', '.join(rules) or 'the Python pass'} found no redex")
    loaded.eg.saturate_analyses()
    graph = loaded.eg.freeze()
    uni = loaded.low.uni
    if choose == "new":
        programs, _ = extract_program(d, loaded, graph, NewNodes(), keep_input=False)
    else:
        programs, _ = extract_program(d, loaded, graph,
                                      Spec3Cost(uni, cost_points(uni.size_names, None)))
    return tssa.to_core(programs[0])


def roundtrip(p: Program, sizes: Mapping[str, int] | None = None
              ) -> tuple[Program, tuple[int, ...], list[dict[str, int]]]:
    """No rules: `p` lowered into the e-graph, its own term extracted and converted back.
    Returns the program, the model's cost of it at the cost points, and those points (the
    model is the SPEC 3 cost: at a point, `cost_program` of the program is the model's cost,
    or less where `to_ssa` shares equal statements)."""
    loaded = load(tssa.to_core(p), p.ix[2], [],
                  InlinePolicy(enabled=False, solve=False, licm=False), alternatives=False)
    loaded.eg.saturate_analyses()
    PythonRounds(loaded.eg, loaded.low.uni)(0)      # supports of additions, refuted masks
    loaded.eg.saturate_analyses()
    graph = loaded.eg.freeze()
    uni = loaded.low.uni
    model = Spec3Cost(uni, cost_points(uni.size_names, sizes))
    programs, ex = extract_program(p, loaded, graph, model)
    return programs[0], ex.cost, [dict(pt) for pt in model.points]
