"""Gen push-out (SPEC 4, paper 5.3): every binding is `gen I. <scalar expression>`.

Pre-condition: struct-of-arrays normal form (pair elimination).  Post-condition
(`proofs.normal_forms.is_gen_pushed`): every binding's right side and every component of the
result is `gen i1:n1 ... ik:nk. s` (k >= 0) with s scalar-typed and gen-free, and every
variable read inside s is a full scalar access `x[a1, ..., am]` (x a variable or a projection
of an input; m = 0 for scalars).

Rules:
```
G1  (gen i:n. e)[a, b..] -> [0 <= a and a < n] * e{i := a}[b..]
G2  [p] * gen i:n. e     -> gen i:n. [p] * e                  (i renamed apart from p)
G3  x[a1..ak] : [m]t     -> gen j:m. x[a1..ak, j]            (eta; not when itself accessed)
G4  e[a][b]              -> e[a, b]
```
G1 keeps zero extension with its guard; a guard conjunct implied by the ranges of the
enclosing gen/sum binders (e.g. `(gen j:n. e)[i]` under `gen i:n`) is left out, which
changes neither meaning nor cost.  G3 applies to a read in a tensor position (a binding, a
gen body, an Iverson body, a result component), never to the base of another access, where
G4 flattens instead: `x[a][b]` becomes `x[a, b]` rather than a guarded eta-expansion.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from tensorlang.ir.ast import (
    Access, Affine, Cmp, Def, Expr, Gen, Iverson, TArr, free_names, pred_and, subst,
)

from .rewrite import (
    ACCESS_BASE, BOX_ARG, Ctx, Rule, apply_rule as _apply_rule, iverson, provably_nonneg,
    register_rules, run_pass,
)


def _bounds(a: Affine, ranges: Mapping[str, Affine]) -> tuple[Affine, Affine] | None:
    """Symbolic (lower, upper) bounds of `a` as affine forms in the size variables, using
    `0 <= v <= n - 1` for an index variable v bound with range n; None if unknown."""
    lo = hi = Affine.lit(a.const)
    for v, c in a.terms:
        if v in ranges:
            vlo, vhi = Affine.lit(0), ranges[v] - 1
        else:
            vlo = vhi = Affine.var(v)  # a size variable: exact
        if c > 0:
            lo, hi = lo + vlo * c, hi + vhi * c
        else:
            lo, hi = lo + vhi * c, hi + vlo * c
    return lo, hi


def range_guard(a: Affine, n: Affine, ranges: Mapping[str, Affine]):
    """`0 <= a and a < n`, less the conjuncts implied by the enclosing ranges.

    The implication is sound where the context executes at all, i.e. when every enclosing
    range is non-empty; elsewhere nothing is evaluated and the guard does not matter.
    """
    bounds = _bounds(a, ranges)
    lo_ok = bounds is not None and provably_nonneg(bounds[0])
    hi_ok = bounds is not None and provably_nonneg(n - 1 - bounds[1])
    parts = []
    if not lo_ok:
        parts.append(Cmp("<=", Affine.lit(0), a))
    if not hi_ok:
        parts.append(Cmp("<", a, n))
    return pred_and(*parts)


def G1(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Access) and isinstance(e.e, Gen) and e.idx:
        g, a, rest = e.e, e.idx[0], e.idx[1:]
        body = subst(g.body, {g.idx: a})
        if rest:
            body = Access(body, rest)
        return iverson(range_guard(a, g.size, ctx.ranges), body)
    return None


def G2(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Iverson) and isinstance(e.e, Gen):
        g = e.e
        idx, body = g.idx, g.body
        if idx in free_names(e.pred):
            new = ctx.fresh(idx)
            body = subst(body, {idx: Affine.var(new)})
            idx = new
        return Gen(idx, g.size, Iverson(e.pred, body))
    return None


def G3(e: Expr, ctx: Ctx) -> Expr | None:
    if ctx.pos in (ACCESS_BASE, BOX_ARG) or not ctx.is_read(e):
        return None
    t = ctx.type_of(e)
    if not isinstance(t, TArr):
        return None
    j = ctx.fresh("j")
    base, idx = (e.e, e.idx) if isinstance(e, Access) else (e, ())
    return Gen(j, t.size, Access(base, idx + (Affine.var(j),)))


def G4(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Access) and isinstance(e.e, Access):
        return Access(e.e.e, e.e.idx + e.idx)
    return None


RULES: tuple[tuple[str, Rule], ...] = (("G1", G1), ("G2", G2), ("G3", G3), ("G4", G4))
register_rules(RULES)

SCHEMAS: dict[str, str] = {
    "G1": "(gen i:n. e)[a, b..] -> [0 <= a and a < n] * e{i := a}[b..]"
          "   (conjuncts implied by enclosing ranges left out)",
    "G2": "[p] * gen i:n. e -> gen i:n. [p] * e   (i fresh)",
    "G3": "x[a1..ak] : [m]t -> gen j:m. x[a1..ak, j]   (eta-expansion; not under an access)",
    "G4": "e[a][b] -> e[a, b]",
}


def genpush(d: Def, trace: Counter[str] | None = None) -> Def:
    """`d` (struct of arrays) in gen-pushed normal form (G1-G4 to a fixed point)."""
    return run_pass(d, RULES, trace)


def apply_rule(rule_id: str, d: Def) -> Def:
    """One application of rule `rule_id` (any pass's rule) at its first redex in `d`."""
    return _apply_rule(rule_id, d)


__all__ = ["genpush", "apply_rule", "range_guard", "RULES", "SCHEMAS", "G1", "G2", "G3", "G4"]
