"""Let-lifting (SPEC 4, paper 5.1): one top-level block of bindings.

Post-condition: the body is `let x1 = e1 in ... let xm = em in r` with no `let` inside any
`ei` or `r` (checked by `tensorlang.proofs.normal_forms.is_let_lifted`).

Rules (names unique, so a let can move past any term without capture):
```
L1  (let x = e1 in e2) + e3   -> let x = e1 in e2 + e3        (both sides of + and *)
L2  f(.., let x = e1 in e2, ..) -> let x = e1 in f(.., e2, ..)
L3  (let x = e1 in e2, e3)    -> let x = e1 in (e2, e3)       (both components)
L4  (let x = e1 in e2).k      -> let x = e1 in e2.k
L5  (let x = e1 in e2)[a]     -> let x = e1 in e2[a]
L6  let y = (let x = e1 in e2) in e3 -> let x = e1 in let y = e2 in e3
L7  [p] * (let x = e1 in e2)  -> let x = [p] * e1 in [p] * e2
L8  gen i:n. let x = e1 in e2 -> let x' = gen i:n. e1 in gen i:n. e2{x := x'[i]}
L9  sum I. let x = e1 in e2   -> let x' = gen I1. [G] * e1 in sum I. e2{x := x'[I1]}
```
L8 when i is not free in e1: `let x = [0 < n] * e1 in gen i:n. e2` (the guard is dropped when
n >= 1 is provable).  Without the guard the cost would rise from 0 to C(e1) at n = 0.

L9 acts on a maximal nest of sums `sum I = sum i1:n1. ... sum ik:nk.` (SPEC 3 costs such a
nest jointly): I1 are the indices of the nest free in e1 and G is `0 < n` for the others.
Applied to the innermost sum of a nest alone, loop fission would split the nest in two and
the outer sum would pay one addition for every index value whose inner sum has no live term,
which SPEC 3 as written counts (docs/passes.md, "L9 and sum nests"; tests/test_letlift.py
pins the counterexample).
"""
from __future__ import annotations

from collections import Counter

from tensorlang.ir.ast import (
    Access, Add, Affine, Call, Cmp, Def, Expr, Extremum, Gen, Iverson, Let, Mul, Pair, Proj, Sum,
    TArr,
    free_names, pred_and, subst, Var,
)

from .rewrite import (
    SUM_BODY, Ctx, Rule, apply_rule as _apply_rule, iverson, provably_nonneg, provably_pos,
    register_rules, run_pass,
)


def L1(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, (Add, Mul)):
        op = type(e)
        if isinstance(e.a, Let):
            return Let(e.a.name, e.a.value, op(e.a.body, e.b))
        if isinstance(e.b, Let):
            return Let(e.b.name, e.b.value, op(e.a, e.b.body))
    return None


def L2(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Call):
        for k, a in enumerate(e.args):
            if isinstance(a, Let):
                args = e.args[:k] + (a.body,) + e.args[k + 1:]
                return Let(a.name, a.value, Call(e.fn, args, e.params))
    return None


def L3(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Pair):
        if isinstance(e.a, Let):
            return Let(e.a.name, e.a.value, Pair(e.a.body, e.b))
        if isinstance(e.b, Let):
            return Let(e.b.name, e.b.value, Pair(e.a, e.b.body))
    return None


def L4(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Proj) and isinstance(e.e, Let):
        return Let(e.e.name, e.e.value, Proj(e.e.body, e.k))
    return None


def L5(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Access) and isinstance(e.e, Let):
        return Let(e.e.name, e.e.value, Access(e.e.body, e.idx))
    return None


def L6(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Let) and isinstance(e.value, Let):
        inner = e.value
        return Let(inner.name, inner.value, Let(e.name, inner.body, e.body))
    return None


def L7(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Iverson) and isinstance(e.e, Let):
        inner = e.e
        return Let(inner.name, Iverson(e.pred, inner.value), Iverson(e.pred, inner.body))
    return None


def _nonempty_guard(sizes: list[Affine], inside: list[Affine]):
    """`0 < n` for each size n of a binder the value is hoisted out of: the value used to be
    evaluated only when all of them are non-empty.  Left out when provable: n >= 1 always,
    or n >= m for the size m of a gen the value stays inside (which runs only if m >= 1)."""
    def known(n: Affine) -> bool:
        return provably_pos(n) or any(provably_nonneg(n - m) for m in inside)
    return pred_and(*(Cmp("<", Affine.lit(0), n) for n in sizes if not known(n)))


def _fission(binders: list[tuple[str, Affine]], let: Let, ctx: Ctx) -> tuple[str, Expr, Expr]:
    """Loop fission of `let x = e1 in e2` out of the binders (outermost first).

    Returns (x', value, e2{x := x'[I1]}): the value generates over the binders I1 free in
    e1, guarded by the non-emptiness of the others.
    """
    fv = free_names(let.value)
    used = [(i, n) for i, n in binders if i in fv]
    guard = _nonempty_guard([n for i, n in binders if i not in fv], [n for _, n in used])
    value = iverson(guard, let.value)
    if not used:
        return let.name, value, let.body
    t = ctx.type_of(let.value)
    for i, n in reversed(used):
        value = Gen(i, n, value)
        t = TArr(n, t)
    name = ctx.fresh(let.name)
    ctx.declare(name, t)
    read = Access(Var(name), tuple(Affine.var(i) for i, _ in used))
    return name, value, subst(let.body, {let.name: read})


def L8(e: Expr, ctx: Ctx) -> Expr | None:
    if isinstance(e, Gen) and isinstance(e.body, Let):
        name, value, body = _fission([(e.idx, e.size)], e.body, ctx)
        return Let(name, value, Gen(e.idx, e.size, body))
    return None


def L9(e: Expr, ctx: Ctx) -> Expr | None:
    if not isinstance(e, Sum) or ctx.pos == SUM_BODY:
        return None  # only at the top of a maximal nest of sums
    binders: list[tuple[str, Affine]] = []
    node: Expr = e
    while isinstance(node, Sum):
        binders.append((node.idx, node.size))
        node = node.body
    if not isinstance(node, Let):
        return None
    name, value, body = _fission(binders, node, ctx)
    for i, n in reversed(binders):
        body = Sum(i, n, body)
    return Let(name, value, body)


def L10(e: Expr, ctx: Ctx) -> Expr | None:
    """Loop fission out of a max/min reduction (SPEC 12), as L9 does for one sum."""
    if isinstance(e, Extremum) and isinstance(e.body, Let):
        name, value, body = _fission([(e.idx, e.size)], e.body, ctx)
        return Let(name, value, type(e)(e.idx, e.size, body))
    return None


RULES: tuple[tuple[str, Rule], ...] = (
    ("L1", L1), ("L2", L2), ("L3", L3), ("L4", L4), ("L5", L5), ("L6", L6), ("L7", L7),
    ("L8", L8), ("L9", L9), ("L10", L10),
)
register_rules(RULES)

SCHEMAS: dict[str, str] = {
    "L1": "(let x = e1 in e2) + e3 -> let x = e1 in e2 + e3   (both sides of + and *)",
    "L2": "f(.., let x = e1 in e2, ..) -> let x = e1 in f(.., e2, ..)",
    "L3": "(let x = e1 in e2, e3) -> let x = e1 in (e2, e3)   (both components)",
    "L4": "(let x = e1 in e2).k -> let x = e1 in e2.k",
    "L5": "(let x = e1 in e2)[a] -> let x = e1 in e2[a]",
    "L6": "let y = (let x = e1 in e2) in e3 -> let x = e1 in let y = e2 in e3",
    "L7": "[p] * (let x = e1 in e2) -> let x = [p] * e1 in [p] * e2",
    "L8": "gen i:n. let x = e1 in e2 -> let x' = gen i:n. e1 in gen i:n. e2{x := x'[i]}"
          "   (i not free in e1: let x = [0 < n] * e1 in gen i:n. e2)",
    "L9": "sum I. let x = e1 in e2 -> let x' = gen I1. [0 < n for I \\ I1] * e1 in"
          " sum I. e2{x := x'[I1]}   (I a maximal sum nest, I1 its indices free in e1)",
    "L10": "max i:n. let x = e1 in e2 -> let x' = gen i:n. e1 in max i:n. e2{x := x'[i]}"
           "   (also min; i not free in e1: let x = [0 < n] * e1 in max i:n. e2)",
}


def letlift(d: Def, trace: Counter[str] | None = None) -> Def:
    """`d` in let-lifted normal form (rules L1-L9 to a fixed point, innermost first)."""
    return run_pass(d, RULES, trace)


def apply_rule(rule_id: str, d: Def) -> Def:
    """One application of rule `rule_id` (any pass's rule) at its first redex in `d`."""
    return _apply_rule(rule_id, d)


__all__ = ["letlift", "apply_rule", "RULES", "SCHEMAS",
           "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9",
           "L10"]
