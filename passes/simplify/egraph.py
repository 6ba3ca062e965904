"""The simplifier's e-graph: an egglog e-graph loaded with `rules_egg.program`, run under a
`budget.Budget`, and read back into Python (`Graph`: classes of `ENode`s and the analyses)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from egglog import bindings as egglog_bindings

from .budget import Budget, RunStats
from .rules_egg import CONSTRUCTORS, OUT_SORT, program



class EGraph:
    """An egglog e-graph loaded with the simplifier's program."""

    def __init__(self, rules: Iterable[str] | None = None) -> None:
        self.eg = egglog_bindings.EGraph()
        self._run(program(rules))

    def _run(self, text: str) -> list:
        if not text.strip():
            return []
        return self.eg.run_program(*self.eg.parse_program(text))

    def add(self, commands: Sequence[str], chunk: int = 40) -> None:
        """Run egglog commands (terms, facts, unions), in order.  In chunks: parsing one long
        text is superlinear in egglog."""
        for k in range(0, len(commands), chunk):
            self._run("\n".join(commands[k:k + chunk]))

    def size(self) -> int:
        (out,) = self._run("(print-size)")
        return sum(n for name, n in out.sizes if name in CONSTRUCTORS)

    def saturate_analyses(self) -> None:
        self._run("(run-schedule (saturate g_analysis))")

    def mark(self) -> None:
        """Record the current e-nodes as the input's (`Graph.old`)."""
        self._run("(run-schedule (run mark))")

    def run(self, budget: Budget, groups: Sequence[str] = ("clean", "search"),
            on_round: Callable[[int], None] | None = None) -> RunStats:
        """Run the schedule within `budget`; `on_round(k)` is called after each round (the
        Python pass adds what egglog cannot derive, e.g. refuted masks)."""
        stats = RunStats()
        parts = ["(saturate g_analysis)"]
        if "clean" in groups:
            parts.append(f"(repeat {budget.clean_iters} (seq (run-with bo g_clean) "
                         f"(saturate g_analysis)))")
        if "search" in groups:
            parts.append("(run-with bo g_search)")
        parts.append("(saturate g_analysis)")
        sched = (f"(run-schedule (let-scheduler bo (back-off :match-limit {budget.match_limit}))"
                 f" (seq {' '.join(parts)}))")
        commands = self.eg.parse_program(sched)
        stats.stopped = "rounds"
        for k in range(budget.rounds):
            (out,) = self.eg.run_program(*commands)
            stats.rounds = k + 1
            for rule, n in out.report.num_matches_per_rule.items():
                stats.matches[rule] = stats.matches.get(rule, 0) + n
            changed = out.report.updated
            if on_round is not None and k in budget.python_rounds:
                changed = bool(on_round(k)) or changed
            stats.nodes = self.size()
            if not changed:
                stats.stopped = "saturated"
                break
            if stats.nodes > budget.node_limit:
                stats.stopped = "nodes"
                break
        return stats

    def freeze(self) -> "Graph":
        return Graph.read(self.eg)


# ---------------------------------------------------------------------------------------------
# Reading the e-graph back


@dataclass(frozen=True)
class ENode:
    """An e-node: constructor, its primitive arguments decoded (str, float, frozenset of atom
    keys) and its child e-classes (ids)."""

    op: str
    args: tuple           # per position: str | float | frozenset | int (a child class id)
    cls: int              # the e-class it belongs to

    def children(self) -> tuple[int, ...]:
        # memoised: extraction walks the graph hundreds of thousands of times (issue 16)
        kids = self.__dict__.get("_children")
        if kids is None:
            sorts = CONSTRUCTORS[self.op]
            kids = tuple(a for a, s in zip(self.args, sorts) if s in ("Sc", "Ten"))
            object.__setattr__(self, "_children", kids)
        return kids


@dataclass
class Graph:
    """A frozen e-graph: classes (id -> e-nodes), the analyses, named roots (lets)."""

    nodes: dict[int, list[ENode]]
    free: dict[int, frozenset[str]]
    mask: dict[int, frozenset[str]]
    roots: dict[str, int]
    old: set[tuple] = field(default_factory=set)     # (op, args) of the input's e-nodes

    @staticmethod
    def read(eg: "egglog_bindings.EGraph") -> "Graph":
        fz = eg.freeze()
        sets: dict[str, frozenset[str]] = {}
        ids: dict[str, int] = {}

        def vid(v: object, sort: str) -> int:
            key = f"{sort}:{v}"
            out = ids.get(key)
            if out is None:
                out = ids[key] = len(ids)
            return out

        def decode(v: object, sort: str) -> object:
            if sort == "String":
                return eg.value_to_string(v)
            if sort == "f64":
                return eg.value_to_f64(v)
            if sort == "Mask":
                key = str(v)
                hit = sets.get(key)
                if hit is None:
                    hit = sets[key] = frozenset(eg.value_to_string(s) for s in eg.value_to_set(v))
                return hit
            return vid(v, sort)

        nodes: dict[int, list[ENode]] = {}
        free: dict[int, frozenset[str]] = {}
        mask: dict[int, frozenset[str]] = {}
        roots: dict[str, int] = {}
        old: set[tuple] = set()
        for name, fn in fz.functions.items():
            if name.startswith("Old") and name[3:] in CONSTRUCTORS:
                sorts = CONSTRUCTORS[name[3:]]
                for row in fn.rows:
                    old.add((name[3:], tuple(decode(v, s) for v, s in zip(row.inputs, sorts))))
            elif name in CONSTRUCTORS:
                sorts = CONSTRUCTORS[name]
                out_sort = OUT_SORT.get(name, "Sc")
                for row in fn.rows:
                    if row.subsumed:
                        continue
                    cls = vid(row.output, out_sort)
                    args = tuple(decode(v, s) for v, s in zip(row.inputs, sorts))
                    nodes.setdefault(cls, []).append(ENode(name, args, cls))
            elif name in ("free", "mask"):
                table = free if name == "free" else mask
                for row in fn.rows:
                    table[vid(row.inputs[0], "Sc")] = decode(row.output, "Mask")  # type: ignore
            elif fn.is_let_binding:
                for row in fn.rows:
                    roots[name.lstrip("$")] = vid(row.output, fn.output_sort)
        return Graph(nodes, free, mask, roots, old)

    def size(self) -> int:
        return sum(len(v) for v in self.nodes.values())


