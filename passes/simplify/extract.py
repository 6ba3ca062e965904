"""Extraction (SPEC 7): the cheapest well-scoped term of every e-class reachable from the
roots, by a cost model given as an object (`CostModel`): vector costs, one entry per cost
point, a node's cost counted once however often it is read (the DAG, not the tree).

The simplifier's model is `cost_model.Spec3Cost` (the SPEC 3 count of the primitive each
node becomes); the proofs/ catalogue uses `cost_model.NewNodes` (prefer what a rule made)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from .egraph import ENode, Graph
from .rules_egg import MASKED, OUT_SORT


class CostModel(Protocol):
    """What extraction needs of a cost model."""

    def node_cost(self, n: ENode, g: Graph, free: Mapping[int, frozenset[str]]
                  ) -> Sequence[int]:
        """The node's own cost at each cost point (the same length for every node; the
        first entry is the point the greedy pass prefers)."""
        ...



class ExtractionError(Exception):
    """No well-scoped, acyclic term could be extracted for a root."""


@dataclass
class Extraction:
    """The chosen e-node of every class reachable from the roots, with the model's cost
    (one entry per cost point; each chosen node counted once)."""

    choice: dict[int, ENode]
    free: dict[int, frozenset[str]]
    cost: tuple[int, ...]
    repaired: dict[int, ENode] | None = None    # `_repair`'s choice when it differs


def node_free(n: ENode, free: Mapping[int, frozenset[str]], pfree: Callable[[frozenset], frozenset],
              accfree: Callable[[str], frozenset]) -> frozenset[str] | None:
    """The free index names of an e-node given its children's (None if a child is unknown)."""
    op, a = n.op, n.args
    if op in ("Num", "Param", "Stmt"):
        return frozenset()
    if op == "Get":
        return accfree(a[1])
    kids = [free.get(c) for c in n.children()]
    if any(k is None for k in kids):
        return None
    out = frozenset().union(*kids)  # type: ignore[arg-type]
    if op == "Sum":
        return out - {a[0]}
    if op in MASKED:
        out = out | pfree(a[0])
    return out


def class_free(g: Graph, pfree: Callable[[frozenset], frozenset],
               accfree: Callable[[str], frozenset]) -> dict[int, frozenset[str]]:
    """Free indices of every class: the intersection over its nodes (a fixpoint), computed
    from the node structure (the same as the egglog analysis, and total)."""
    free: dict[int, frozenset[str]] = {}
    changed = True
    while changed:
        changed = False
        for cls, ns in g.nodes.items():
            acc: frozenset[str] | None = None
            for n in ns:
                f = node_free(n, free, pfree, accfree)
                if f is not None:
                    acc = f if acc is None else acc & f
            if acc is not None and free.get(cls) != acc:
                if cls in free and not acc < free[cls]:
                    acc = acc & free[cls]
                    if acc == free[cls]:
                        continue
                free[cls] = acc
                changed = True
    return free


def _dominates(a: "np.ndarray", b: "np.ndarray") -> bool:
    return bool((a <= b).all() and (a < b).any())


def _better(a: "np.ndarray", b: "np.ndarray") -> bool:
    """Cheaper at the representative point (the first), or as cheap there and no dearer
    anywhere else."""
    return bool(a[0] < b[0] or (a[0] == b[0] and _dominates(a, b)))


def _improve(cand: Sequence[ENode], index: Mapping[ENode, int], own: "np.ndarray",
             best: dict, parents: Mapping[int, Sequence[ENode]], allowed: set[ENode]) -> None:
    """Worklist fixpoint: a node is (re)evaluated when a child class's choice changed."""
    queue = deque(cand)
    queued = set(cand)
    while queue:
        n = queue.popleft()
        queued.discard(n)
        i = index[n]
        kids = n.children()
        if any(k not in best for k in kids):
            continue
        if any(n.cls in best[k][3] for k in kids):
            continue
        merged = frozenset((i,)).union(*(best[k][2] for k in kids)) if kids else frozenset((i,))
        total = own[list(merged)].sum(axis=0)
        cur = best.get(n.cls)
        if cur is None or (cur[1] != i and _better(total, cur[0])):
            classes = frozenset((n.cls,)).union(*(best[k][3] for k in kids))
        elif cur[1] == i and _dominates(total, cur[0]):
            classes = cur[3]
        else:
            continue
        best[n.cls] = (total, i, merged, classes)
        for p in parents.get(n.cls, ()):
            if p not in queued and p in allowed:
                queued.add(p)
                queue.append(p)


def extract(g: Graph, roots: Sequence[int], model: CostModel,
            pfree: Callable[[frozenset], frozenset], accfree: Callable[[str], frozenset],
            old: "set[tuple] | None" = None,
            complete: "Mapping[int, frozenset[str]] | None" = None) -> Extraction:
    """Greedy DAG extraction by vector costs (one entry per cost point).

    `complete`: the classes' free indices when known (the saturated egglog analysis),
    otherwise computed.  Admissible nodes have exactly their class's free indices (so the
    extracted term is well scoped wherever a rule placed the class).  A class's cost is the
    sum of the distinct nodes of its chosen sub-DAG (a statement read twice is computed
    once).  Nodes of the
    input (`old`, keys `(op, args)`) are chosen first; another node replaces a class's
    choice when it is cheaper at the representative point (ties: no dearer at any point).
    Then `_repair` compares whole programs at every cost point, so that choices that depend
    on the sizes stay as the input wrote them.  A node whose children's sub-DAGs contain its
    own class is skipped (no cycles)."""
    if complete is not None and all(c in complete for c, ns in g.nodes.items()
                                    if ns[0].op not in OUT_SORT):
        free = dict(complete)
        free.update({c: frozenset() for c, ns in g.nodes.items() if ns[0].op in OUT_SORT})
    else:
        free = class_free(g, pfree, accfree)
    cand: list[ENode] = []
    for cls, ns in g.nodes.items():
        f = free.get(cls)
        if f is None:       # no node of the class is well scoped (only cyclic ones): none admissible
            continue
        cand.extend(n for n in ns if node_free(n, free, pfree, accfree) == f)
    is_old = (lambda n: (n.op, n.args) in old) if old is not None else (lambda n: True)
    cand.sort(key=lambda n: (not is_old(n), len(n.children())))
    index = {n: i for i, n in enumerate(cand)}
    own = np.array([tuple(model.node_cost(n, g, free)) for n in cand], dtype=np.int64)
    if own.ndim != 2:
        own = own.reshape(len(cand), -1)
    parents: dict[int, list[ENode]] = {}
    for n in cand:
        for k in set(n.children()):
            parents.setdefault(k, []).append(n)
    best: dict[int, tuple[np.ndarray, int, frozenset, frozenset]] = {}
    olds = [n for n in cand if is_old(n)]
    _improve(olds, index, own, best, parents, set(olds))     # the input's own choices
    base = {c: cand[b[1]] for c, b in best.items()}
    _improve(cand, index, own, best, parents, set(cand))     # then every node
    greedy = {c: cand[b[1]] for c, b in best.items()}
    for r in roots:
        if r not in greedy:
            raise ExtractionError(f"no admissible term for e-class {r}")
    _check_acyclic(greedy, roots)
    repaired = _repair(greedy, base, roots, index, own)
    if _reach(repaired, roots) == _reach(greedy, roots):
        repaired = None
    return Extraction(greedy, free, tuple(int(v) for v in _total(greedy, roots, index, own)),
                      repaired)


def _reach(choice: Mapping[int, ENode], roots: Sequence[int]) -> dict[int, ENode]:
    out: dict[int, ENode] = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in out or c not in choice:
            continue
        n = out[c] = choice[c]
        stack.extend(n.children())
    return out


def _total(choice: Mapping[int, ENode], roots: Sequence[int], index: Mapping[ENode, int],
           own: "np.ndarray") -> "np.ndarray":
    rows = [index[n] for n in _reach(choice, roots).values()]
    return own[rows].sum(axis=0) if rows else np.zeros(own.shape[1], dtype=np.int64)


def _repair(greedy: dict[int, ENode], base: dict[int, ENode], roots: Sequence[int],
            index: Mapping[ENode, int], own: "np.ndarray") -> dict[int, ENode]:
    """Per-class choices can lose on the whole DAG (a new term shares less with the rest
    than the input's did), and favour the representative point.  Compare the whole programs
    at the cost points: revert classes to the input's choice while that lowers the total;
    keep the input where the greedy program is still not at least as cheap at every point.
    (The model counts terms equal up to the names of their summation indices twice, which
    `to_ssa` shares, so `simplify` tries the greedy choice first with exact costs.)"""
    if not all(r in base for r in roots):
        return greedy
    t_base = _total(base, roots, index, own)
    cur = dict(greedy)
    t_cur = _total(cur, roots, index, own)
    for _ in range(8):
        if (t_cur <= t_base).all():
            return cur
        improved = False
        for c in list(_reach(cur, roots)):
            if c not in base or base[c] is cur[c]:
                continue
            trial = dict(cur)
            trial[c] = base[c]
            for k, n in base.items():      # classes only the input's term reaches
                trial.setdefault(k, n)
            try:
                _check_acyclic(trial, roots)
            except ExtractionError:
                continue
            t = _total(trial, roots, index, own)
            if t.sum() < t_cur.sum():
                cur, t_cur, improved = trial, t, True
        if not improved:
            break
    return cur if (t_cur <= t_base).all() else dict(base)


def _check_acyclic(choice: Mapping[int, ENode], roots: Sequence[int]) -> None:
    state: dict[int, int] = {}

    def visit(cls: int) -> None:
        stack = [(cls, iter(choice[cls].children()))]
        state[cls] = 1
        while stack:
            c, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[c] = 2
                stack.pop()
                continue
            s = state.get(nxt, 0)
            if s == 1:
                raise ExtractionError("the greedy choice is cyclic")
            if s == 0:
                state[nxt] = 1
                stack.append((nxt, iter(choice[nxt].children())))

    for r in roots:
        if state.get(r, 0) == 0:
            visit(r)


