"""The simplifier's Python rules: what egglog cannot express (it has no binders, no
substitution, no integer linear algebra, no calls to numpy), docs/simplifier.md section 4.

* **S-inline**: a read `u[A]` of a statement `u = gen I. e` equals
  `[0 <= A < n] * e{I := A}` (zero extension): substitution, so the read and the producer's
  body are put in one e-class and the rules see through statements (`inline_read`);
* **S-sum-solve**: `sum j. [j == a and q] * e -> [0 <= a < n and q{j:=a}] * e{j:=a}` and the
  general case (Smith normal form, Fourier-Motzkin) by the index solver (`solve`);
* **S-fold-call**: black-box calls of constants are evaluated (`fold_call`);
* **refutation and supports** (`PythonRounds`, between egglog rounds): masks the index
  solver refutes are declared `dead`, supports of additions (`orm`) are computed, calls of
  constants folded in the e-graph;
* the same rules as functions on core programs, for the proofs/ catalogue
  (`canon_brackets`, `inline_single_use`, `solve_sums`, `fold_calls`).

S-licm and S-pred-canon live where they act: `encode.Encoder` (hoisting alternatives) and
`universe.Universe.atoms_of` (canonical atoms)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tensorlang.ir import ast
from tensorlang.ir.tssa import out_leaves
from tensorlang.ir.ast import Access, Affine, Call, Const, Def, Gen, Iverson, Let, Pred, Var
from tensorlang.passes.indexsolve import eliminate_sums
from tensorlang.semantics import builtins

from .egraph import EGraph
from .lower import Stmt, bracket, lower, rename_binders
from .rules_egg import CALLS, f64, mask_lit, parse_fn_key, string
from .universe import FALSE, Universe

def inline_read(st: Stmt, idx: Sequence[Affine], uni: Universe) -> ast.Expr:
    """`u[A]` as `[0 <= A < n] * body{I := A}` (the read's zero extension), its sums solved."""
    assert st.body is not None
    m = {g: a for (g, _), a in zip(st.gens, idx)}
    e = rename_binders(ast.subst(st.body, m), uni, {}, keep=uni.ranges) if m else st.body
    if uni.renaming(st.gens, idx):
        return e
    guard = ast.pred_and(*(ast.in_range(a, n) for a, (_, n) in zip(idx, st.gens)))
    atoms = uni.atoms_of(guard)
    if atoms is None:
        return Const(0.0)
    if atoms:
        e = Iverson(uni.pred_of(atoms), e)
    e = solve(e, uni)
    return e


def solve(e: ast.Expr, uni: Universe) -> ast.Expr:
    """S-sum-solve: the index solver on every sum of `e` (new binders registered)."""
    out = eliminate_sums(e)
    if out is not e:
        out = rename_binders(out, uni, {}, keep=uni.ranges)
        uni.register(out)
    return out


def fold_call(e: Call) -> ast.Expr:
    """S-fold-call: a call of constants is a constant (when finite)."""
    if all(isinstance(a, Const) for a in e.args):
        with np.errstate(all="ignore"):
            v = float(builtins.apply(e.fn, [np.float64(a.value) for a in e.args], e.params))
        if math.isfinite(v):
            return Const(v)
    return e


# ---------------------------------------------------------------------------------------------
# The Python rules on core programs (the proofs/ catalogue applies them one at a time)


def _split_gens(value: ast.Expr) -> tuple[list[tuple[str, Affine]], ast.Expr]:
    """`gen I. e` as (the generators I with their sizes, e)."""
    gens: list[tuple[str, Affine]] = []
    while isinstance(value, Gen):
        gens.append((value.idx, value.size))
        value = value.body
    return gens, value


def _with_gens(gens: Sequence[tuple[str, Affine]], value: ast.Expr) -> ast.Expr:
    for name, size in reversed(gens):
        value = Gen(name, size, value)
    return value


def _with_lets(d: Def, binds: Sequence[tuple[str, ast.Expr]], body: ast.Expr) -> Def:
    """`d` with the bindings `binds` around `body`."""
    for name, value in reversed(binds):
        body = Let(name, value, body)
    return Def(d.name, d.params, d.ret, body)


def _map_bodies(d: Def, f: Any) -> Def:
    """`d` with `f(value, uni)` applied to every binding's value (gens kept)."""
    low_uni = Universe(d.params)
    out: list[tuple[str, ast.Expr]] = []
    body = d.body
    while isinstance(body, Let):
        gens, value = _split_gens(body.value)
        low_uni.ranges.update(gens)
        low_uni.register(value)
        out.append((body.name, _with_gens(gens, f(value, low_uni))))
        body = body.body
    return _with_lets(d, out, body)


def canon_brackets(d: Def) -> Def:
    """S-pred-canon on a gen-pushed core Def: every bracket canonical against the ranges of
    the indices in scope (implied comparisons dropped; a refuted bracket is 0)."""
    def go(e: ast.Expr, uni: Universe) -> ast.Expr:
        if isinstance(e, Iverson):
            inner = go(e.e, uni)
            atoms = uni.atoms_of(e.pred)
            if atoms is None:
                return Const(0.0)
            return bracket(uni.pred_of(atoms), inner)
        if isinstance(e, (Affine, Pred)):
            return e
        return ast.map_fields(e, lambda c: go(c, uni) if isinstance(c, ast.Expr) else c)
    return _map_bodies(d, go)


def fold_calls(d: Def) -> Def:
    """S-fold-call on a core Def: calls of constants evaluated."""
    def go(e: ast.Expr, uni: Universe) -> ast.Expr:
        if isinstance(e, (Affine, Pred)):
            return e
        e = ast.map_fields(e, lambda c: go(c, uni) if isinstance(c, ast.Expr) else c)
        return fold_call(e) if isinstance(e, Call) else e
    return _map_bodies(d, go)


def solve_sums(d: Def) -> Def:
    """S-sum-solve on a core Def: the index solver on every sum."""
    return _map_bodies(d, lambda e, uni: eliminate_sums(e))


def inline_single_use(d: Def) -> Def:
    """S-inline on a core Def: the first (non-input) binding read by exactly one other
    binding, and not returned, is substituted into it (with the reads' zero-extension
    guards) and dropped.  `ValueError` if there is none."""
    low = lower(d)
    readers: dict[str, list[str]] = {}
    for name in low.order:
        st = low.stmts[name]
        if st.body is not None:
            for n in ast.walk(st.body):
                if isinstance(n, Var) and n.name in low.stmts and n.name != name:
                    readers.setdefault(n.name, []).append(name)
    outs = set(out_leaves(low.output))
    target = next((v for v in low.order if not low.stmts[v].is_input and v not in outs
                   and len(set(readers.get(v, ()))) == 1), None)
    if target is None:
        raise ValueError("no binding is read by exactly one other")
    st = low.stmts[target]

    def sub(e: ast.Expr) -> ast.Expr:
        if isinstance(e, Access) and isinstance(e.e, Var) and e.e.name == target:
            return inline_read(st, e.idx, low.uni)
        if isinstance(e, Var) and e.name == target:
            return inline_read(st, (), low.uni)
        if isinstance(e, (Affine, Pred)):
            return e
        return ast.map_fields(e, lambda c: sub(c) if isinstance(c, ast.Expr) else c)

    out: list[tuple[str, ast.Expr]] = []
    body = d.body
    while isinstance(body, Let):
        if body.name != target:
            value = body.value
            if body.name in readers.get(target, ()):
                gens, _ = _split_gens(value)
                cur = low.stmts[body.name]
                # the lowered body uses global names: read back through them
                ren = {g: Affine.var(n) for (g, _), (n, _) in zip(cur.gens, gens)}
                assert cur.body is not None
                value = _with_gens(gens, ast.subst(sub(cur.body), ren))
            out.append((body.name, value))
        body = body.body
    return _with_lets(d, out, body)



# ---------------------------------------------------------------------------------------------
# Between egglog rounds


class PythonRounds:
    """After a round of egglog: masks the index solver refutes become `dead`, and calls of
    constants are folded (what egglog cannot derive)."""

    def __init__(self, eg: EGraph, uni: Universe) -> None:
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
            if FALSE in m or not m:
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
                lit = mask_lit(m)
                cmds.append(f"(set (pfree {lit}) {mask_lit(self.uni.pfree(m))})")
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
                    cmds.append(f"(set (pfree {mask_lit(r)}) {mask_lit(self.uni.pfree(r))})")
                    cmds.append(f"(orm {mask_lit(ma)} {mask_lit(mb)} {mask_lit(r)})")
        nums = {cls: n.args[0] for cls, ns in g.nodes.items() for n in ns if n.op == "Num"}
        for ns in g.nodes.values():
            for n in ns:
                if n.op in CALLS:
                    vals = [nums.get(c) for c in n.args[2:]]
                    if any(v is None for v in vals):
                        continue
                    key = (n.args[0], n.args[1], tuple(vals))
                    if key in self.folded:
                        continue
                    self.folded.add(key)
                    fn, params = parse_fn_key(n.args[1])
                    v = fold_call(Call(fn, tuple(Const(x) for x in vals), params))
                    if isinstance(v, Const):
                        P = mask_lit(n.args[0])
                        args = " ".join(f"(Num {f64(x)})" for x in vals)
                        num = f"(Num {f64(v.value)})"
                        cmds.append(f"(union ({n.op} {P} {string(n.args[1])} {args}) "
                                    f"{num if not n.args[0] else f'(Iv {P} {num})'})")
        if cmds:
            self.eg.add(cmds)
        return bool(cmds)


