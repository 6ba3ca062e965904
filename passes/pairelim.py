"""Pair elimination (SPEC 4, paper 5.2): struct of arrays, no intermediate pairs.

Pre-condition: let-lifted.  Post-condition (`proofs.normal_forms.is_struct_of_arrays`): no
binding has a pair type, pairs occur only in the result (a tree of pairs), and projections
only of inputs (`x.0.1`, which SPEC 5 takes as SSA inputs).

Parameters are kept as they are: a parameter of pair type `x : (t1, t2)` or
`x : [n](t1, t2)` (a tensor of pairs, which is a pair of tensors at run time) is read through
projections `x.0`, `x.1` (nested: `x.0.1`).  So the signature, and the arguments a caller
passes, do not change.  Types are struct-of-arrays throughout (`passes.rewrite.soa`), which is
what makes `(e.k)[a]` (P3) well typed for `e : [n](t1, t2)`.

Rules:
```
P0  x  -> (x.0, x.1)   for a read of an input x of pair type that is not itself projected
P1  (e1, e2).k         -> ek
P2  (gen i:n. e).k     -> gen i:n. e.k
P3  (e[a]).k           -> (e.k)[a]
P4  ([p] * e).k        -> [p] * e.k
P5  gen i:n. (e1, e2)  -> (gen i:n. e1, gen i:n. e2)
P6  [p] * (e1, e2)     -> ([p] * e1, [p] * e2)
P7  (e1, e2)[a]        -> (e1[a], e2[a])
P8  let x = e in b, x of pair type -> let x0 = e.0 in let x1 = e.1 in b{x := (x0, x1)}
```
P0 is P8 for the implicit binding of an input (its two halves are the projections): it lets
P1-P7 see every pair-typed value as a pair.  P8 duplicates e; once P1-P4 have pushed the
projections in, the two copies share no arithmetic, so the cost is unchanged (`P8` in the
rule catalogue checks P8 followed by the projection pushes; tests/test_pairelim.py too).
"""
from __future__ import annotations

from collections import Counter

from tensorlang.ir.ast import (
    Access, Def, Expr, Gen, Iverson, Let, Pair, Proj, TPair, Var, map_fields, subst,
)

from .rewrite import (
    LET_VALUE, PROJ_ARG, Ctx, Rule, RuleNotApplicable, apply_rule as _apply_rule,
    deep_recursion, normalize, register_rules, rename_unique, run_pass, step_once,
)


def P0(e: Expr, ctx: Ctx) -> Expr | None:
    if ctx.pos != PROJ_ARG and ctx.is_input_read(e) and isinstance(ctx.type_of(e), TPair):
        return Pair(Proj(e, 0), Proj(e, 1))
    return None


def P1(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Proj) and isinstance(e.e, Pair):
        return e.e.a if e.k == 0 else e.e.b
    return None


def P2(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Proj) and isinstance(e.e, Gen):
        g = e.e
        return Gen(g.idx, g.size, Proj(g.body, e.k))
    return None


def P3(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Proj) and isinstance(e.e, Access):
        a = e.e
        return Access(Proj(a.e, e.k), a.idx)
    return None


def P4(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Proj) and isinstance(e.e, Iverson):
        return Iverson(e.e.pred, Proj(e.e.e, e.k))
    return None


def P5(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Gen) and isinstance(e.body, Pair):
        return Pair(Gen(e.idx, e.size, e.body.a), Gen(e.idx, e.size, e.body.b))
    return None


def P6(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Iverson) and isinstance(e.e, Pair):
        return Pair(Iverson(e.pred, e.e.a), Iverson(e.pred, e.e.b))
    return None


def P7(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Access) and isinstance(e.e, Pair):
        return Pair(Access(e.e.a, e.idx), Access(e.e.b, e.idx))
    return None


def P8(e: Expr, ctx: Ctx) -> Expr | None:
    if not isinstance(e, Let):
        return None
    t = ctx.type_of(e.value)
    if not isinstance(t, TPair):
        return None
    x0, x1 = ctx.fresh(e.name), ctx.fresh(e.name)
    ctx.declare(x0, t.a)
    ctx.declare(x1, t.b)
    body = subst(e.body, {e.name: Pair(Var(x0), Var(x1))})
    return Let(x0, Proj(e.value, 0), Let(x1, Proj(e.value, 1), body))


RULES: tuple[tuple[str, Rule], ...] = (
    ("P0", P0), ("P1", P1), ("P2", P2), ("P3", P3), ("P4", P4), ("P5", P5), ("P6", P6),
    ("P7", P7), ("P8", P8),
)
register_rules(RULES)
PUSH_RULES: tuple[tuple[str, Rule], ...] = RULES[1:8]  # P1-P7

SCHEMAS: dict[str, str] = {
    "P0": "x -> (x.0, x.1)   (x an input of pair type, not under a projection)",
    "P1": "(e1, e2).k -> ek",
    "P2": "(gen i:n. e).k -> gen i:n. e.k",
    "P3": "(e[a]).k -> (e.k)[a]",
    "P4": "([p] * e).k -> [p] * e.k",
    "P5": "gen i:n. (e1, e2) -> (gen i:n. e1, gen i:n. e2)",
    "P6": "[p] * (e1, e2) -> ([p] * e1, [p] * e2)",
    "P7": "(e1, e2)[a] -> (e1[a], e2[a])",
    "P8": "let x = e in b, x : (t1, t2) -> let x0 = e.0 in let x1 = e.1 in b{x := (x0, x1)}"
          "   (then P1-P7 push the projections into e.0 and e.1)",
}


def pairelim(d: Def, trace: Counter[str] | None = None) -> Def:
    """`d` (let-lifted) in struct-of-arrays normal form (P0-P8 to a fixed point)."""
    return run_pass(d, RULES, trace)


def apply_p8_pushed(d: Def) -> Def:
    """P8 at its first redex, then P1-P7 to a fixed point on the two new right-hand sides.

    This is the unit whose cost-neutrality the paper argues (5.2): P8 alone duplicates e.
    """
    with deep_recursion():
        d = rename_unique(d)
        ctx = Ctx(d)
        before = set(ctx.used)
        body = step_once(d.body, P8, ctx)
    if body is None:
        raise RuleNotApplicable(f"rule P8 does not apply to {d.name}")
    new_names = ctx.used - before

    def push(e: Expr) -> Expr:
        if isinstance(e, Let):
            value = e.value
            if e.name in new_names:
                value = normalize(value, PUSH_RULES, ctx, LET_VALUE)
            return Let(e.name, push(value), push(e.body))
        return map_fields(e, lambda c: push(c) if isinstance(c, Expr) else c)

    with deep_recursion():
        return Def(d.name, d.params, d.ret, push(body), loc=d.loc)


def apply_rule(rule_id: str, d: Def) -> Def:
    """One application of rule `rule_id` (any pass's rule) at its first redex in `d`."""
    return _apply_rule(rule_id, d)


__all__ = ["pairelim", "apply_rule", "apply_p8_pushed", "RULES", "SCHEMAS",
           "P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8"]
