"""The simplifier (SPEC 7): Tensor SSA -> Tensor SSA through an egglog e-graph, extracted by
the cost model.  The pipeline's stage `simplified` (`tensorlang.pipeline`).

    simplify(p, sizes=None) -> Program

1. `simplify_py.lower`: the statements of `p` over globally named indices;
2. `simplify_py.Encoder`: each right-hand side becomes an egglog term; a read of a (linear)
   statement is put in one e-class with the statement's body at the read's indices
   (S-inline), and each body with its producers inlined and its sums solved by the index
   solver (S-sum-solve) joins the body's class;
3. `simplify_egglog.EGraph.run`: the rules of `simplify_egglog.RULES` within `Budget`; after
   each round the Python pass declares the masks the index solver refutes and folds calls
   of constants;
4. `simplify_egglog.extract` with `simplify_py.node_cost`: the cheapest term per class by the
   SPEC 3 cost of the Tensor-SSA primitive each node becomes, counted exactly at the
   representative sizes (`sizes`, or 16 for every size parameter), statements shared;
5. `simplify_py.Raiser` + `passes.ssa.to_ssa`: back to canonical, clean Tensor SSA;
6. verification: the result's exact cost (`tssa.cost`) must not exceed the input's at
   `sizes` (or, without sizes, at the representative sizes and a panel of small ones, each
   size 0..3 and one size at a time different, relations full, empty and random); otherwise
   the search rules are dropped and step 2-5 repeated, and if that does not help either the
   input is returned unchanged.  So `simplify` never raises the cost at the sizes it checks.

See docs/simplifier.md for the rules, their proof status and the budgets.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.ir import tssa
from tensorlang.ir.ast import Def, TRel, TSize
from tensorlang.ir.tssa import Program

from . import simplify_egglog as G
from . import simplify_py as SP
from .ssa import to_ssa

DEFAULT_BUDGET = G.Budget()


@dataclass
class Report:
    """What one `simplify` call did (for tests, docs and `tl` diagnostics)."""

    mode: str = ""                      # "full" | "clean" | "unchanged"
    run: G.RunStats | None = None
    nodes: int = 0
    model_cost: tuple = ()              # extraction cost at the cost points
    before: dict = field(default_factory=dict)   # exact costs at the checked sizes
    after: dict = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""


LAST_REPORT = Report()


def simplify(p: Program, sizes: Mapping[str, int] | None = None, *,
             budget: G.Budget | None = None, rules: Sequence[str] | None = None,
             verify: bool = True) -> Program:
    """The cheapest program the rules find that means what `p` means (SPEC 7).

    `sizes`: values of (some of) the size parameters to optimise for; missing ones (all, by
    default) use the representative size 16.  `rules`: restrict the e-graph rules (names of
    `simplify_egglog.RULES`); `budget`: saturation limits.  With `verify`, the result's cost
    is checked against `p`'s (module doc) and `p` is returned when it would be higher.
    """
    global LAST_REPORT
    t0 = time.perf_counter()
    report = Report()
    LAST_REPORT = report
    budget = budget or DEFAULT_BUDGET
    panel = []
    base = []
    for a in (_panel(p, sizes) if verify else []):
        try:
            base.append(_cost(p, a))
            panel.append(a)
        except Exception:  # a point the input cannot be costed at is no check
            continue
    report.before = {_key(a): c for a, c in zip(panel, base)}
    attempts: list[tuple[str, Sequence[str] | None]] = [("full", rules)]
    if rules is None:
        attempts.append(("clean", list(G.GROUPS["clean"])))
    out = p
    report.mode = "unchanged"
    for mode, chosen in attempts:
        try:
            candidates, run, model = _attempt(p, sizes, budget, chosen)
        except Exception as err:  # an optimisation that fails leaves the program as it is
            report.reason += f"{mode}: {type(err).__name__}: {err}; "
            continue
        for k, q in enumerate(candidates):
            try:
                costs = [_cost(q, a) for a in panel]
            except Exception as err:
                report.reason += f"{mode}: costing raised {type(err).__name__}: {err}; "
                continue
            if all(c <= b for c, b in zip(costs, base)):
                out = q
                report.mode = mode if k == 0 else mode + "+repaired"
                report.run, report.model_cost = run, model
                report.after = {_key(a): c for a, c in zip(panel, costs)}
                break
        else:
            report.reason += f"{mode}: cost would rise; "
            continue
        break
    report.seconds = time.perf_counter() - t0
    return out


def _attempt(p: Program, sizes: Mapping[str, int] | None, budget: G.Budget,
             rules: Sequence[str] | None) -> tuple[list[Program], G.RunStats, tuple[int, ...]]:
    """Lower, saturate, extract; the candidate programs in order of preference (the greedy
    extraction, then the one `simplify_egglog._repair` made of it)."""
    d = tssa.to_core(p)
    low = SP.lower(d, sizes, ex=p.ix[2])
    enc = SP.Encoder(low)
    eg = G.EGraph(rules)
    base, alternatives = enc.build()
    eg.add(base)
    eg.mark()
    eg.add(alternatives)
    rounds = PythonRounds(eg, low.uni)
    search = rules is None or any(G.RULES[r].group == "search" for r in rules)
    run = eg.run(budget, groups=("clean", "search") if search else ("clean",), on_round=rounds)
    if rounds(-1):   # the Python pass once more, and what egglog derives from it
        eg.add(["(run-schedule (saturate g_analysis) (run g_clean) (saturate g_analysis))"])
    graph = eg.freeze()
    ten_roots = {name: graph.roots[enc._ten[name][1:]] for name in _leaves(low.output)}
    uni = low.uni
    ex = G.extract(graph, list(ten_roots.values()),
                   lambda n, g, free: SP.node_cost(uni, n, g, free), uni.pfree, uni.accfree,
                   old=graph.old, complete=graph.free)
    out = []
    for choice in [ex.choice] + ([ex.repaired] if ex.repaired is not None else []):
        x = G.Extraction(choice, ex.free, ex.cost)
        q = to_ssa(SP.Raiser(low, graph, x, ten_roots).build())
        out.append(Program(p.name, p.params, q.stmts, q.output, p.ret, q.ix))
    return out, run, ex.cost


class PythonRounds:
    """After a round of egglog: masks the index solver refutes become `dead`, and calls of
    constants are folded (what egglog cannot derive)."""

    def __init__(self, eg: G.EGraph, uni: SP.Universe) -> None:
        self.eg, self.uni = eg, uni
        self.dead: set[frozenset[str]] = set()         # masks declared dead
        self.checked: dict[tuple, bool] = {}           # (mask, free) -> refuted
        self.folded: set[tuple] = set()
        self.ors: set[tuple] = set()

    def __call__(self, k: int) -> bool:
        g = self.eg.freeze()
        free = g.free
        cmds: list[str] = []
        by_mask: dict[frozenset[str], bool] = {}
        for cls, m in g.mask.items():
            if SP.FALSE in m or not m:
                continue
            f = free.get(cls, frozenset())
            key = (m, f)
            refuted = self.checked.get(key)
            if refuted is None:
                refuted = self.checked[key] = self.uni.refuted(self.uni.restrict(m, f))
            by_mask[m] = by_mask.get(m, True) and refuted
        for m, refuted in by_mask.items():
            if refuted and m not in self.dead:
                self.dead.add(m)
                lit = G.mask_lit(m)
                cmds.append(f"(set (pfree {lit}) {G.mask_lit(self.uni.pfree(m))})")
                cmds.append(f"(dead {lit})")
        for ns in g.nodes.values():     # supports of additions: disjunctions
            for n in ns:
                if n.op != "Add":
                    continue
                ma, mb = g.mask.get(n.args[0]), g.mask.get(n.args[1])
                if ma is None or mb is None or (ma, mb) in self.ors:
                    continue
                self.ors.add((ma, mb))
                r = self.uni.disjunction(ma, mb)
                if r - (ma & mb):
                    cmds.append(f"(set (pfree {G.mask_lit(r)}) {G.mask_lit(self.uni.pfree(r))})")
                    cmds.append(f"(orm {G.mask_lit(ma)} {G.mask_lit(mb)} {G.mask_lit(r)})")
        nums = {cls: n.args[0] for cls, ns in g.nodes.items() for n in ns if n.op == "Num"}
        for ns in g.nodes.values():
            for n in ns:
                if n.op in G.CALLS:
                    vals = [nums.get(c) for c in n.args[2:]]
                    if any(v is None for v in vals):
                        continue
                    key = (n.args[0], n.args[1], tuple(vals))
                    if key in self.folded:
                        continue
                    self.folded.add(key)
                    fn, params = SP.parse_fn_key(n.args[1])
                    from tensorlang.ir.ast import Call, Const
                    v = SP.fold_call(Call(fn, tuple(Const(x) for x in vals), params))
                    if isinstance(v, Const):
                        P = G.mask_lit(n.args[0])
                        args = " ".join(f"(Num {G.f64(x)})" for x in vals)
                        num = f"(Num {G.f64(v.value)})"
                        cmds.append(f"(union ({n.op} {P} {G.string(n.args[1])} {args}) "
                                    f"{num if not n.args[0] else f'(Iv {P} {num})'})")
        if cmds:
            self.eg.add(cmds)
        return bool(cmds)


# ---------------------------------------------------------------------------------------------
# Verification


def _leaves(out: Any) -> list[str]:
    return list(SP._leaves(out))


def _key(args: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int)) + \
        ("" if all(isinstance(v, int) for v in args.values()) else
         "," + "".join(_rel_tag(v) for v in args.values() if not isinstance(v, int)))


def _rel_tag(v: np.ndarray) -> str:
    return "F" if v.all() else ("0" if not v.any() else "r")


def _cost(p: Program, args: Mapping[str, Any]) -> int:
    return tssa.cost(p, args).total


def _panel(p: Program, sizes: Mapping[str, int] | None) -> list[dict[str, Any]]:
    """The size (and relation) assignments the result is checked at."""
    names = [q.name for q in p.params if isinstance(q.type, TSize)]
    rels = [q for q in p.params if isinstance(q.type, TRel)]
    points: list[dict[str, int]] = []
    if sizes is not None and all(n in sizes for n in names):
        points.append({n: int(sizes[n]) for n in names})
    else:
        rep = {n: int((sizes or {}).get(n, SP.DEFAULT_REP)) for n in names}
        points.append(rep)
        for v in range(4):
            points.append({n: v for n in names})
        for n in names:
            for v in (1, 5):
                pt = {m: 3 for m in names}
                pt[n] = v
                points.append(pt)
    out: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    dims = [d for q in p.params for d in (q.type.sizes if isinstance(q.type, TRel)
                                           else A.shape_of(tssa.soa_type(q.type))
                                           if not isinstance(tssa.soa_type(q.type), A.TPair)
                                           else _pair_dims(q.type))]
    for k, pt in enumerate(points):
        key = tuple(sorted(pt.items()))
        if key in seen or any(d.evaluate(pt) < 0 for d in dims):  # not a valid input
            continue
        seen.add(key)
        variants = _relations(rels, pt)
        if k == 0 and sizes is None:   # the representative point: one (random) relation
            variants = variants[-1:]
        out.extend({**pt, **rv} for rv in variants)
    return out


def _pair_dims(t: Any) -> list:
    return [d for path in tssa.leaf_paths(t) for d in A.shape_of(tssa.project_type(t, path))]


def _relations(rels: list, sizes: Mapping[str, int]) -> list[dict[str, np.ndarray]]:
    if not rels:
        return [{}]
    shapes = {q.name: tuple(max(0, int(d.evaluate(sizes))) for d in q.type.sizes) for q in rels}
    full = {n: np.ones(s, dtype=bool) for n, s in shapes.items()}
    empty = {n: np.zeros(s, dtype=bool) for n, s in shapes.items()}
    rand = {n: np.random.default_rng(zlib.crc32(n.encode()) + 1).random(s) < 0.5
            for n, s in shapes.items()}
    return [full, empty, rand]


# ---------------------------------------------------------------------------------------------
# One rule at a time (the proofs/ catalogue)


class NotApplicable(ValueError):
    """The rule found no redex in the program (or the extraction kept the input)."""


def apply_rules(d: Def, rules: Sequence[str], *, choose: str = "new",
                policy: SP.InlinePolicy | None = None, rounds: int = 2) -> Def:
    """A gen-pushed core `Def` rewritten by the e-graph rules `rules` (names in
    `simplify_egglog.RULES`; none: only the Python pass of `policy`), as a core Def.

    `choose="new"` extracts the term made of as many nodes the rules created as possible
    (the rules applied, whatever the cost); `"cost"` extracts by the cost model (for sizes
    given as literals in the types, exactly the cost).  `NotApplicable` when no rule
    matched (or, with no rules, the Python pass added no equality)."""
    policy = policy or SP.InlinePolicy(enabled=False, solve=False, licm=True)
    low = SP.lower(d)
    enc = SP.Encoder(low, policy)
    eg = G.EGraph(rules)
    base, alternatives = enc.build()
    eg.add(base)
    eg.mark()
    eg.add(alternatives)
    groups = tuple(g for g in ("clean", "search")
                   if any(G.RULES[r].group == g for r in rules))
    python = PythonRounds(eg, low.uni)
    run = eg.run(G.Budget(rounds=rounds, time_limit=10.0, python_rounds=(0,)), groups=groups,
                 on_round=python)
    if python(-1):
        eg.add(["(run-schedule (saturate g_analysis) (run g_clean) (saturate g_analysis))"])
    sets = {f":ruleset {G.RULES[r].ruleset}" for r in rules}
    fired = sum(n for text, n in run.matches.items() if any(s in text for s in sets))
    if not fired and not (not rules and alternatives):
        raise NotApplicable(f"{', '.join(rules) or 'the Python pass'} found no redex")
    return tssa.to_core(_extract_program(d, low, enc, eg, choose))


def _extract_program(d: Def, low: SP.Lowered, enc: SP.Encoder, eg: G.EGraph,
                     choose: str) -> Program:
    eg.saturate_analyses()
    graph = eg.freeze()
    ten_roots = {name: graph.roots[enc._ten[name][1:]] for name in _leaves(low.output)}
    uni = low.uni
    if choose == "new":
        def cost(n: G.ENode, g: G.Graph, free: Mapping) -> tuple[int]:
            return (0 if (n.op, n.args) not in g.old or n.op == "Param" else 1,)
        ex = G.extract(graph, list(ten_roots.values()), cost, uni.pfree, uni.accfree,
                       complete=graph.free)
    else:
        ex = G.extract(graph, list(ten_roots.values()),
                       lambda n, g, free: SP.node_cost(uni, n, g, free), uni.pfree,
                       uni.accfree, old=graph.old, complete=graph.free)
    q = to_ssa(SP.Raiser(low, graph, ex, ten_roots).build())
    return Program(d.name, d.params, q.stmts, q.output, d.ret, q.ix)


def roundtrip(p: Program, sizes: Mapping[str, int] | None = None
              ) -> tuple[Program, tuple[int, ...], list[dict[str, int]]]:
    """No rules: `p` lowered into the e-graph, its own term extracted and converted back.
    Returns the program, the model's cost of it at the cost points, and those points (the
    model is the SPEC 3 cost: at a point, `tssa.cost` of the program is the model's cost,
    or less where `to_ssa` shares equal statements)."""
    low = SP.lower(tssa.to_core(p), sizes, ex=p.ix[2])
    enc = SP.Encoder(low, SP.InlinePolicy(enabled=False, solve=False, licm=False))
    eg = G.EGraph([])
    base, _ = enc.build()
    eg.add(base)
    eg.mark()
    eg.saturate_analyses()
    PythonRounds(eg, low.uni)(0)      # supports of additions, refuted masks
    eg.saturate_analyses()
    graph = eg.freeze()
    ten_roots = {name: graph.roots[enc._ten[name][1:]] for name in _leaves(low.output)}
    uni = low.uni
    ex = G.extract(graph, list(ten_roots.values()),
                   lambda n, g, free: SP.node_cost(uni, n, g, free), uni.pfree, uni.accfree,
                   old=graph.old, complete=graph.free)
    q = to_ssa(SP.Raiser(low, graph, ex, ten_roots).build())
    return (Program(p.name, p.params, q.stmts, q.output, p.ret, q.ix), ex.cost,
            [dict(pt) for pt in uni.points])


__all__ = ["simplify", "Report", "LAST_REPORT", "DEFAULT_BUDGET", "apply_rules",
           "NotApplicable", "roundtrip"]
