"""What one `simplify` call did, for tests, `tl show --stage simplified` and the docs: the
rules that ran and how often they matched, the budget used (rounds, e-nodes) and whether it
stopped the search early, the sizes the extraction chose at, the exact costs before and after
at the sizes checked, and every failure.  Nothing in it depends on time or on the process
(SPEC 15), so it is part of the stage's deterministic output."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tensorlang.syntax.errors import TLError

from .budget import Budget, RunStats
from .rules_egg import RULES


class SimplifyError(TLError):
    """The simplifier failed (raised in strict mode: tests, `TENSORLANG_STRICT=1`; otherwise
    recorded in the report and the input returned unchanged)."""

    kind = "simplifier error"


_RULESET = re.compile(r":ruleset (rs_[A-Za-z0-9_]+)")
_BY_RULESET = {r.ruleset: r.name for r in RULES.values()}


def matches_by_rule(stats: RunStats) -> dict[str, int]:
    """Matches per rule name (egglog reports them per rule text; each text names its
    ruleset), in `RULES` order, rules that never matched left out."""
    total: dict[str, int] = {}
    for text, n in stats.matches.items():
        m = _RULESET.search(text)
        name = _BY_RULESET.get(m.group(1)) if m else None
        if name is not None and n:
            total[name] = total.get(name, 0) + n
    return {name: total[name] for name in RULES if name in total}


@dataclass
class Report:
    """The report of one `simplify` call (see the module doc)."""

    function: str
    budget: Budget
    sizes: dict[str, int] | None            # the sizes given (None: representative sizes)
    cost_points: list[dict[str, int]] = field(default_factory=list)
    mode: str = "unchanged"                 # "full" | "clean" (+ "+repaired") | "unchanged"
    rules: tuple[str, ...] = ()             # the rules of the attempt that was kept
    run: RunStats | None = None
    model_cost: tuple[int, ...] = ()        # the extraction's cost at the cost points
    before: dict[str, int] = field(default_factory=dict)   # exact costs at the checked sizes
    after: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)         # attempts given up, and why
    failures: list[str] = field(default_factory=list)      # errors (strict mode raises)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def stopped_early(self) -> bool:
        return self.run is not None and self.run.stopped_early

    def text(self) -> str:
        """The report as `#` comment lines (what `tl show --stage simplified` appends)."""
        out = [f"# simplifier: {self.mode}" + (" (FAILED: input returned unchanged)"
                                               if self.failed and self.mode == "unchanged"
                                               else "")]
        if self.sizes:
            out.append("#   extracted at the sizes "
                       + ", ".join(f"{k}={v}" for k, v in sorted(self.sizes.items())))
        elif self.cost_points and self.cost_points[0]:
            out.append("#   sizes unknown: extracted at the representative sizes "
                       + "; ".join(", ".join(f"{k}={v}" for k, v in pt.items())
                                   for pt in self.cost_points))
        if self.run is not None:
            r = self.run
            state = ("saturated" if r.saturated else
                     f"STOPPED EARLY by the {'round' if r.stopped == 'rounds' else 'e-node'} "
                     "limit")
            out.append(f"#   search: {r.rounds}/{self.budget.rounds} rounds, {r.nodes}/"
                       f"{self.budget.node_limit} e-nodes, {state}")
            fired = matches_by_rule(r)
            if fired:
                out.append("#   rules matched: "
                           + ", ".join(f"{k} {v}" for k, v in fired.items()))
        if self.before:
            out.append("#   cost before -> after: "
                       + "; ".join(f"{k}: {v} -> {self.after.get(k, v)}"
                                   for k, v in self.before.items()))
        out += [f"#   note: {n}" for n in self.notes]
        out += [f"#   FAILURE: {f}" for f in self.failures]
        return "\n".join(out)
