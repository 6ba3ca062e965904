"""Cost models for extraction (`extract.CostModel`).

`Spec3Cost`: each e-node becomes one Tensor-SSA primitive, a statement over the node's free
indices computed where its class's mask holds (a call: where its own mask holds), and costs
the SPEC 3 count of that primitive at each cost point: multiplications and calls = points
of its box where the mask holds; an addition = points where the mask and both operands'
supports hold; a sum = over the points of its box in the mask, `max(0, live - 1)` with
`live` the summation points where the body's support holds.  Reads, constants, brackets and
pins cost nothing.

`NewNodes`: one per node the input did not have (the proofs/ catalogue applies a rule and
extracts what it made, whatever the cost)."""
from __future__ import annotations

from typing import Mapping, Sequence

from .counting import PointCounter
from .egraph import ENode, Graph
from .rules_egg import CALLS, MASKED
from .universe import Universe

OPS = ("Mul", "Add", "Sum") + CALLS     # the constructors that become primitives


def own_mask(n: ENode) -> frozenset[str]:
    """The mask an e-node computes under (a Box's atoms are loop pins, true everywhere)."""
    return n.args[0] if n.op in MASKED and n.op != "Box" else frozenset()


class Spec3Cost:
    """The SPEC 3 cost of the primitive each node becomes, at the cost points `points`
    (the first is the representative point the greedy extraction prefers)."""

    def __init__(self, uni: Universe, points: Sequence[Mapping[str, int]]) -> None:
        self.uni = uni
        self.counter = PointCounter(uni, points)

    @property
    def points(self) -> list[dict[str, int]]:
        return self.counter.points

    def node_cost(self, n: ENode, g: Graph, free: Mapping[int, frozenset[str]]
                  ) -> tuple[int, ...]:
        op = n.op
        if op not in OPS:
            return (0,) * len(self.points)
        uni, count = self.uni, self.counter
        f = free[n.cls]
        m = uni.restrict(g.mask.get(n.cls, frozenset()) | own_mask(n), f)
        if op == "Mul" or op in CALLS:
            return count.count(f, m)
        if op == "Add":
            a, b = n.args
            ma = uni.restrict(g.mask.get(a, frozenset()), free[a])
            mb = uni.restrict(g.mask.get(b, frozenset()), free[b])
            return count.count(f, m | ma | mb)
        j, body = n.args
        mb = uni.restrict(g.mask.get(body, frozenset()), free[body])
        return count.sum_adds(f, m, j, mb)


class NewNodes:
    """Cost 1 for each node of the input (`Graph.old`), 0 for what the rules made: the
    extracted term uses as many new nodes as it can."""

    def node_cost(self, n: ENode, g: Graph, free: Mapping[int, frozenset[str]]
                  ) -> tuple[int]:
        return (0 if (n.op, n.args) not in g.old or n.op == "Param" else 1,)
