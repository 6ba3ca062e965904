"""The simplifier's e-graph (SPEC 7): the egglog encoding of Tensor-SSA right-hand sides, the
rewrite rules, the saturation schedule with its budget, and extraction by the cost model.

Encoding.  A right-hand side is a scalar term over *named* index variables: every
generator and summation index of the program gets a globally unique name with a fixed range
(`passes.simplify_py.Universe`), so a term's free indices say over which indices it is a
tensor.  Sorts and constructors (egglog syntax in `DECLARATIONS`):

    Mask = (Set String)        a conjunction of canonical predicate atoms (keys into the
                               universe's atom table; "false" is the atom that never holds)
    Ten  = (Param name)        an input statement (a parameter or an input projection)
         | (Stmt name body)    a materialised statement  v = gen I_v. body
    Sc   = (Num c) | (Get t acc)                  a constant; a read of t at an access key
         | (Mul a b) | (Add a b) | (Sum j a)      a * b, a + b, sum j. a
         | (Call1 P f a) .. (Call4 P f a b c d)   [P] * f(a), .., [P] * f(a, b, c, d)
         | (Iv P a)                               [P] * a
         | (Box P a)                              a, as a tensor also over the indices of
                                                  P's atoms `0 <= i` (a loop it sits in)

Every node is a tensor over its free indices -- the Tensor-SSA statement it becomes -- and
is computed where its class's mask holds (a call where its own mask holds: f(0) need not
be 0), which is what makes the cost of a node static.  Two analyses (egglog functions with
merges) are kept saturated: `free` (the free index names; merge: intersection, since equal
terms depend on the indices both depend on) and `mask` (a conjunction outside which the
class is 0; merge: union, since every member is 0 outside its own).  Python supplies `pfree`
(free indices of a mask), `accfree` (of an access key), `ne` (the mask `n_j >= 1` of a
summation index), and the relations `dead` (masks the index solver refutes) and `orm` (the
disjunction of two masks, for the support of an addition).

Rules (`RULES`, one egglog ruleset each) come in three groups: `clean` (Iverson algebra,
zero/one elimination, constant folding: they never raise the cost), `search` (the
equalities the cost-based extraction chooses among: distributivity and factoring, sums over
additions, factoring loop-invariant factors out of sums and back, associativity and
commutativity of products, interchange of sums -- together they reassociate chains of
contractions, the einsum contraction-order problem), and `analysis`.  The schedule
(`Budget`) saturates the analyses, runs `clean` a few times and `search` once with a
back-off scheduler per round, for a bounded number of rounds, stopping early at a node limit
or a time limit.

Extraction (`extract`) is greedy over the DAG (a statement read twice is computed once) with
the static per-node cost of SPEC 3: the number of scalar additions, multiplications or calls
the primitive of the node executes, counted exactly at representative sizes
(`simplify_py.Universe.count`).  See docs/simplifier.md.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from egglog import bindings as _eb

# ---------------------------------------------------------------------------------------------
# The egglog program: sorts, constructors, analyses

DECLARATIONS = r"""
(sort Mask (Set String))
(sort Ten)
(sort Sc)
(constructor Param (String) Ten)
(constructor Stmt (String Sc) Ten)
(constructor Num (f64) Sc)
(constructor Get (Ten String) Sc)
(constructor Mul (Sc Sc) Sc)
(constructor Add (Sc Sc) Sc)
(constructor Call1 (Mask String Sc) Sc)
(constructor Call2 (Mask String Sc Sc) Sc)
(constructor Call3 (Mask String Sc Sc Sc) Sc)
(constructor Call4 (Mask String Sc Sc Sc Sc) Sc)
(constructor Iv (Mask Sc) Sc)
(constructor Box (Mask Sc) Sc)
(constructor Sum (String Sc) Sc)
(function free (Sc) Mask :merge (set-intersect old new))
(function mask (Sc) Mask :merge (set-union old new))
(function pfree (Mask) Mask :merge (set-intersect old new))
(function accfree (String) Mask :merge (set-intersect old new))
(function ne (String) Mask :merge (set-intersect old new))
(relation dead (Mask))
(relation orm (Mask Mask Mask))
(set (pfree (set-empty)) (set-empty))
(set (pfree (set-of "false")) (set-empty))
"""

MAX_ARGS = 4     # the most arguments a builtin takes (sel_ge)
CALLS = tuple(f"Call{k}" for k in range(1, MAX_ARGS + 1))
CONSTRUCTORS: dict[str, tuple[str, ...]] = {  # name -> argument sorts
    "Param": ("String",), "Stmt": ("String", "Sc"), "Num": ("f64",), "Get": ("Ten", "String"),
    "Mul": ("Sc", "Sc"), "Add": ("Sc", "Sc"),
    **{f"Call{k}": ("Mask", "String") + ("Sc",) * k for k in range(1, MAX_ARGS + 1)},
    "Iv": ("Mask", "Sc"), "Box": ("Mask", "Sc"),
    "Sum": ("String", "Sc"),
}
OUT_SORT = {"Param": "Ten", "Stmt": "Ten"}
MASKED = CALLS + ("Iv", "Box")  # constructors whose first argument is a mask


def _marking() -> str:
    """`OldX` relations and the `mark` ruleset recording the e-nodes of the input (so that
    extraction keeps the input's choice unless another one is better at every cost point)."""
    out = ["(ruleset mark)"]
    for name, sorts in CONSTRUCTORS.items():
        vs = " ".join(f"a{k}" for k in range(len(sorts)))
        out.append(f"(relation Old{name} ({' '.join(sorts)}))")
        out.append(f"(rule ((= e ({name} {vs}))) ((Old{name} {vs})) :ruleset mark)")
    return "\n".join(out)


E = "(set-empty)"


def _pf(p: str, q: str, fp: str, fq: str) -> str:
    """The action recording the free indices of the union of two masks."""
    return f"(set (pfree (set-union {p} {q})) (set-union {fp} {fq}))"


def _call_rules(kind: str) -> str:
    """The rules of `kind` ("free", "mask", "push") for the calls of 1..MAX_ARGS arguments."""
    out = []
    for k in range(1, MAX_ARGS + 1):
        vs = [f"a{n}" for n in range(k)]
        args = " ".join(vs)
        if kind == "free":
            conds = " ".join(f"(= f{v} (free {v}))" for v in vs)
            acc = "fp"
            for v in vs:
                acc = f"(set-union {acc} f{v})"
            out.append(f"(rule ((= e (Call{k} P f {args})) (= fp (pfree P)) {conds})\n"
                       f"      ((set (free e) {acc})) :ruleset {{rs}})")
        elif kind == "mask":
            out.append(f"(rule ((= e (Call{k} P f {args}))) ((set (mask e) P)) :ruleset {{rs}})")
        else:
            pushed = " ".join(f"(Iv P {v})" for v in vs)
            out.append(f"(rule ((= e (Iv P (Call{k} Q f {args}))) (= fp (pfree P)) "
                       f"(= fq (pfree Q)))\n"
                       f"      ((union e (Call{k} (set-union P Q) f {pushed})) "
                       f"{_pf('P', 'Q', 'fp', 'fq')}) :ruleset {{rs}})")
    return "\n".join(out)


@dataclass(frozen=True)
class RuleDef:
    """One rewrite of the simplifier: `text` is egglog source with `{rs}` for its ruleset."""

    name: str
    group: str          # "analysis" | "clean" | "search"
    schema: str         # LHS -> RHS (or <->) in ASCII, for docs and the catalogue
    text: str

    @property
    def ruleset(self) -> str:
        return "rs_" + self.name.replace("-", "_")


def _r(name: str, group: str, schema: str, text: str) -> RuleDef:
    return RuleDef(name, group, schema, text.strip())


_ANALYSIS = [
    _r("A-free", "analysis", "free indices of every term (merge: intersection)", r"""
(rule ((= e (Num x))) ((set (free e) (set-empty))) :ruleset {rs})
(rule ((= e (Get t acc)) (= fa (accfree acc))) ((set (free e) fa)) :ruleset {rs})
(rule ((= e (Mul a b)) (= fa (free a)) (= fb (free b)))
      ((set (free e) (set-union fa fb))) :ruleset {rs})
(rule ((= e (Add a b)) (= fa (free a)) (= fb (free b)))
      ((set (free e) (set-union fa fb))) :ruleset {rs})
""" + _call_rules("free") + r"""
(rule ((= e (Iv P a)) (= fp (pfree P)) (= fa (free a)))
      ((set (free e) (set-union fp fa))) :ruleset {rs})
(rule ((= e (Box P a)) (= fp (pfree P)) (= fa (free a)))
      ((set (free e) (set-union fp fa))) :ruleset {rs})
(rule ((= e (Sum j a)) (= fa (free a))) ((set (free e) (set-remove fa j))) :ruleset {rs})
"""),
    _r("A-mask", "analysis",
       "zero-condition of every term (merge: union; `orm`: the disjunction of the masks of "
       "a sum's operands, from the Python pass)", r"""
(rule ((= e (Num x)) (!= x 0.0)) ((set (mask e) (set-empty))) :ruleset {rs})
(rule ((= e (Num 0.0))) ((set (mask e) (set-of "false"))) :ruleset {rs})
(rule ((= e (Mul a b)) (= ma (mask a)) (= mb (mask b)))
      ((set (mask e) (set-union ma mb))) :ruleset {rs})
(rule ((= e (Add a b)) (= ma (mask a)) (= mb (mask b)))
      ((set (mask e) (set-intersect ma mb))) :ruleset {rs})
(rule ((= e (Add a b)) (= ma (mask a)) (= mb (mask b)) (orm ma mb r))
      ((set (mask e) r)) :ruleset {rs})
""" + _call_rules("mask") + r"""
(rule ((= e (Iv P a)) (= ma (mask a))) ((set (mask e) (set-union P ma))) :ruleset {rs})
(rule ((= e (Box P a)) (= ma (mask a))) ((set (mask e) ma)) :ruleset {rs})
(rule ((= e (Sum j a)) (= nj (ne j))) ((set (mask e) nj)) :ruleset {rs})
"""),
]

_CLEAN = [
    _r("S-iv-false", "clean", "[false] * e -> 0  (also: a mask the index solver refutes)", r"""
(rule ((= m (mask e)) (set-contains m "false")) ((union e (Num 0.0))) :ruleset {rs})
(rule ((= m (mask e)) (dead m)) ((union e (Num 0.0))) :ruleset {rs})
"""),
    _r("S-iv-and", "clean", "[p] * [q] * e -> [p and q] * e", r"""
(rule ((= e (Iv P (Iv Q a))) (= fp (pfree P)) (= fq (pfree Q)) (= ma (mask a))
       (!= (set-diff Q ma) (set-empty)) (!= (set-diff P (set-union Q ma)) (set-empty)))
      ((union e (Iv (set-union P Q) a)) """ + _pf("P", "Q", "fp", "fq") + r""") :ruleset {rs})
"""),
    _r("S-iv-implied", "clean", "[p] * e -> e  when e is 0 wherever p fails", r"""
(rule ((= e (Iv P a)) (= m (mask a)) (= (set-diff P m) (set-empty))) ((union e a)) :ruleset {rs})
"""),
    _r("S-iv-push", "clean",
       "[p] * op(a, ..) -> op([p] * a, ..)  (a product over p's indices, every summand, "
       "a call and its arguments, a sum's body)", r"""
(rule ((= e (Iv P (Mul a b))) (= fp (pfree P)) (= fe (free (Mul a b)))
       (= (set-diff fp fe) (set-empty)) (= ma (mask a)) (= mb (mask b))
       (!= (set-diff P (set-union ma mb)) (set-empty)))
      ((union e (Mul (Iv P a) b))) :ruleset {rs})
(rule ((= e (Iv P (Add a b))))
      ((union e (Add (Iv P a) (Iv P b)))) :ruleset {rs})
""" + _call_rules("push") + r"""
(rule ((= e (Iv P (Sum j a))) (= fp (pfree P)) (set-not-contains fp j))
      ((union e (Sum j (Iv P a)))) :ruleset {rs})
"""),
    _r("S-iv-sum", "clean", "sum j. [q] * e -> [q] * sum j. e  (j not in q)", r"""
(rule ((= e (Sum j (Iv Q a))) (= fq (pfree Q)) (set-not-contains fq j))
      ((union e (Iv Q (Sum j a)))) :ruleset {rs})
"""),
    _r("S-box-drop", "clean",
       "(e pinned to loops I) * b -> e * b  when b is over I (the product is anyway)", r"""
(rule ((= e (Mul (Box P a) b)) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Mul a b))) :ruleset {rs})
(rule ((= e (Mul b (Box P a))) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Mul b a))) :ruleset {rs})
(rule ((= e (Add (Box P a) b)) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Add a b))) :ruleset {rs})
(rule ((= e (Add b (Box P a))) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Add b a))) :ruleset {rs})
(rule ((= e (Box P a)) (= fp (pfree P)) (= fa (free a)) (= (set-diff fp fa) (set-empty)))
      ((union e a)) :ruleset {rs})
"""),
    _r("S-mul-zero", "clean", "0 * e -> 0", r"""
(rewrite (Mul (Num 0.0) a) (Num 0.0) :ruleset {rs})
(rewrite (Mul a (Num 0.0)) (Num 0.0) :ruleset {rs})
"""),
    _r("S-mul-one", "clean", "1 * e -> e", r"""
(rewrite (Mul (Num 1.0) a) a :ruleset {rs})
(rewrite (Mul a (Num 1.0)) a :ruleset {rs})
"""),
    _r("S-add-zero", "clean", "0 + e -> e", r"""
(rewrite (Add (Num 0.0) a) a :ruleset {rs})
(rewrite (Add a (Num 0.0)) a :ruleset {rs})
"""),
    _r("S-sum-zero", "clean", "sum j. 0 -> 0", r"""
(rewrite (Sum j (Num 0.0)) (Num 0.0) :ruleset {rs})
"""),
    _r("S-fold", "clean", "c1 * c2 -> c, c1 + c2 -> c, c1 * (c2 * e) -> (c1 c2) * e", r"""
(rewrite (Mul (Num x) (Num y)) (Num (* x y)) :ruleset {rs})
(rewrite (Add (Num x) (Num y)) (Num (+ x y)) :ruleset {rs})
(rewrite (Mul (Num x) (Mul (Num y) a)) (Mul (Num (* x y)) a) :ruleset {rs})
"""),
]

_SEARCH = [
    _r("S-distribute", "search", "a * (b + c) <-> a * b + a * c", r"""
(birewrite (Mul a (Add b c)) (Add (Mul a b) (Mul a c)) :ruleset {rs})
"""),
    _r("S-sum-add", "search",
       "sum j. (a + b) -> [n_j >= 1] * (sum j. a + sum j. b)", r"""
(rule ((= e (Sum j (Add a b))) (= nj (ne j)))
      ((union e (Iv nj (Add (Sum j a) (Sum j b))))) :ruleset {rs})
"""),
    _r("S-sum-factor", "search",
       "sum j. a * b -> [n_j >= 1] * a * sum j. b  (j not free in a)", r"""
(rule ((= e (Sum j (Mul a b))) (= fa (free a)) (set-not-contains fa j) (= nj (ne j)))
      ((union e (Iv nj (Mul a (Sum j b))))) :ruleset {rs})
(rule ((= e (Sum j (Mul b a))) (= fa (free a)) (set-not-contains fa j) (= nj (ne j)))
      ((union e (Iv nj (Mul (Sum j b) a)))) :ruleset {rs})
"""),
    _r("S-sum-push", "search", "a * sum j. b -> sum j. a * b  (j not free in a)", r"""
(rule ((= e (Mul a (Sum j b))) (= fa (free a)) (set-not-contains fa j))
      ((union e (Sum j (Mul a b)))) :ruleset {rs})
"""),
    _r("S-mul-comm", "search", "a * b <-> b * a", r"""
(rewrite (Mul a b) (Mul b a) :ruleset {rs})
"""),
    _r("S-add-comm", "search", "a + b <-> b + a", r"""
(rewrite (Add a b) (Add b a) :ruleset {rs})
"""),
    _r("S-mul-assoc", "search", "(a * b) * c <-> a * (b * c)", r"""
(birewrite (Mul (Mul a b) c) (Mul a (Mul b c)) :ruleset {rs})
"""),
    _r("S-sum-swap", "search", "sum j. sum k. e <-> sum k. sum j. e", r"""
(rewrite (Sum j (Sum k a)) (Sum k (Sum j a)) :ruleset {rs})
"""),
]

RULES: dict[str, RuleDef] = {r.name: r for r in _ANALYSIS + _CLEAN + _SEARCH}
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(r.name for r in RULES.values() if r.group == g)
    for g in ("analysis", "clean", "search")}


def program(rules: Iterable[str] | None = None) -> str:
    """The egglog source: declarations, one ruleset per rule, and a combined ruleset per
    group (`g_analysis`, `g_clean`, `g_search`) of the selected rules (all by default)."""
    chosen = set(RULES) if rules is None else set(rules) | set(GROUPS["analysis"])
    parts = [DECLARATIONS, _marking()]
    for r in RULES.values():
        parts.append(f"(ruleset {r.ruleset})")
        if r.name in chosen:
            parts.append(r.text.replace("{rs}", r.ruleset))
    for g, names in GROUPS.items():
        members = " ".join(RULES[n].ruleset for n in names if n in chosen)
        parts.append(f"(unstable-combined-ruleset g_{g} {members})" if members else
                     f"(ruleset g_{g})")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Budget and running


@dataclass(frozen=True)
class Budget:
    """Limits of one saturation (documented in docs/simplifier.md).

    Each round: saturate the analyses, run `clean` `clean_iters` times, run `search` once
    (back-off scheduler, `match_limit` matches per rule before a rule is banned for a while);
    `rounds` rounds at most; stop after a round that leaves more than `node_limit` e-nodes
    or when `time_limit` seconds have passed.  The run ends early when nothing changes
    (saturation).  The Python pass (refuted masks, supports of additions, calls of
    constants) runs after the rounds in `python_rounds` and once more at the end."""

    rounds: int = 12
    clean_iters: int = 3
    match_limit: int = 1000
    node_limit: int = 5000
    time_limit: float = 0.15
    python_rounds: tuple[int, ...] = (0,)   # rounds after which the Python pass runs


@dataclass
class RunStats:
    rounds: int = 0
    saturated: bool = False
    nodes: int = 0
    seconds: float = 0.0
    stopped: str = ""                            # "saturated" | "rounds" | "nodes" | "time"
    matches: dict[str, int] = field(default_factory=dict)


class EGraph:
    """An egglog e-graph loaded with the simplifier's program."""

    def __init__(self, rules: Iterable[str] | None = None) -> None:
        self.eg = _eb.EGraph()
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
        t0 = time.perf_counter()
        parts = ["(saturate g_analysis)"]
        if "clean" in groups:
            parts.append(f"(repeat {budget.clean_iters} (seq (run-with bo g_clean) "
                         f"(saturate g_analysis)))")
        if "search" in groups:
            parts.append(f"(run-with bo g_search)")
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
                stats.saturated, stats.stopped = True, "saturated"
                break
            if stats.nodes > budget.node_limit:
                stats.stopped = "nodes"
                break
            if time.perf_counter() - t0 > budget.time_limit:
                stats.stopped = "time"
                break
        stats.seconds = time.perf_counter() - t0
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
        sorts = CONSTRUCTORS[self.op]
        return tuple(a for a, s in zip(self.args, sorts) if s in ("Sc", "Ten"))


@dataclass
class Graph:
    """A frozen e-graph: classes (id -> e-nodes), the analyses, named roots (lets)."""

    nodes: dict[int, list[ENode]]
    free: dict[int, frozenset[str]]
    mask: dict[int, frozenset[str]]
    roots: dict[str, int]
    old: set[tuple] = field(default_factory=set)     # (op, args) of the input's e-nodes

    @staticmethod
    def read(eg: "_eb.EGraph") -> "Graph":
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


# ---------------------------------------------------------------------------------------------
# Extraction


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


NodeCost = Callable[[ENode, "Graph", Mapping[int, frozenset[str]]], Sequence[int]]


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


def extract(g: Graph, roots: Sequence[int], cost: NodeCost,
            pfree: Callable[[frozenset], frozenset], accfree: Callable[[str], frozenset],
            old: "set[tuple] | None" = None,
            complete: "Mapping[int, frozenset[str]] | None" = None) -> Extraction:
    """Greedy DAG extraction by vector costs (one entry per cost point).

    `complete`: the classes' free indices when known (the saturated egglog analysis),
    otherwise computed.  Admissible nodes have exactly their class's free indices (so the
    extracted term is well
    scoped wherever a rule placed the class).  A class's cost is the sum of the distinct
    nodes of its chosen sub-DAG (a statement read twice is computed once).  Nodes of the
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
        cand.extend(n for n in ns if node_free(n, free, pfree, accfree) == f)
    is_old = (lambda n: (n.op, n.args) in old) if old is not None else (lambda n: True)
    cand.sort(key=lambda n: (not is_old(n), len(n.children())))
    index = {n: i for i, n in enumerate(cand)}
    own = np.array([tuple(cost(n, g, free)) for n in cand], dtype=np.int64)
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


def f64(x: float) -> str:
    """An egglog f64 literal."""
    if not math.isfinite(x):
        raise ValueError(f"non-finite constant {x}")
    s = repr(float(x))
    return s if ("." in s or "e" in s) else s + ".0"


def string(s: str) -> str:
    if '"' in s or "\\" in s:
        raise ValueError(f"bad egglog string {s!r}")
    return f'"{s}"'


def mask_lit(atoms: Iterable[str]) -> str:
    atoms = sorted(set(atoms))
    if not atoms:
        return E
    return "(set-of " + " ".join(string(a) for a in atoms) + ")"


__all__ = ["RULES", "GROUPS", "RuleDef", "program", "Budget", "RunStats", "EGraph", "ENode",
           "Graph", "Extraction", "ExtractionError", "extract", "class_free", "node_free",
           "f64", "string", "mask_lit", "CONSTRUCTORS"]
