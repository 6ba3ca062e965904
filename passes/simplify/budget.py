"""The simplifier's budget, in deterministic units only (SPEC 15): rounds of the schedule,
matches per rule, e-nodes.  Never seconds: the program the simplifier returns must not depend
on how busy the machine is."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Budget:
    """Limits of one saturation (documented in docs/simplifier.md).

    Each round: saturate the analyses, run `clean` `clean_iters` times, run `search` once
    (back-off scheduler, `match_limit` matches per rule before a rule is banned for a while);
    `rounds` rounds at most; stop after a round that leaves more than `node_limit` e-nodes.
    The run ends early when nothing changes (saturation).  The Python pass (refuted masks,
    supports of additions, calls of constants) runs after the rounds in `python_rounds` and
    once more at the end."""

    rounds: int = 12
    clean_iters: int = 3
    match_limit: int = 1000
    node_limit: int = 5000
    python_rounds: tuple[int, ...] = (0,)   # rounds after which the Python pass runs

    def describe(self) -> str:
        return (f"{self.rounds} rounds, {self.node_limit} e-nodes, {self.match_limit} matches "
                f"per rule and round")


DEFAULT_BUDGET = Budget()


@dataclass
class RunStats:
    """What one saturation used of its budget."""

    rounds: int = 0
    nodes: int = 0
    stopped: str = ""          # "saturated" | "rounds" (limit) | "nodes" (limit)
    matches: dict[str, int] = field(default_factory=dict)   # egglog rule text -> matches

    @property
    def saturated(self) -> bool:
        return self.stopped == "saturated"

    @property
    def stopped_early(self) -> bool:
        """The budget ended the search before saturation."""
        return self.stopped in ("rounds", "nodes")
