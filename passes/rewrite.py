"""Shared machinery of the normalisation passes (SPEC 4): rules, contexts, a fixed-point engine.

A *rule* is a function `rule(e, ctx) -> Expr | None` that rewrites the node `e` at the root
(returning the right-hand side) or returns None when `e` is not a redex.  A pass is a named
table of rules applied to a fixed point by `normalize`, *innermost first*: the children of a
node are normalised before the rules are tried at the node, and whatever a rule returns is
normalised again.  Every rule of SPEC 4 makes progress (lets move outwards, projections move
inwards, pairs and gens move outwards, accesses get flatter), so this terminates; the result
is a term on which no rule of the table applies anywhere.

Rules see a `Ctx`: the types of the program's variables, a fresh-name supply, the *position*
of the node (`ctx.pos`, which field of which kind of parent holds it) and the ranges of the
index variables bound around it (`ctx.ranges`).  Positions are what let `G3` (eta-expand a
partial access) stay away from `e[a][b]`, `L9` act on a whole nest of sums, and `P0` leave
projections of inputs alone.

Names are unique before any rule runs (`rename_unique`): every binder of the program gets a
name used nowhere else, so lets can move past other terms without capture and one global
table holds the type of every program variable.

Types here are *struct-of-arrays* types (`soa`): `[n](t1, t2)` is `([n]t1, [n]t2)`, which is
how tuples of tensors are represented at run time (docs/architecture.md).  Under this
isomorphism the intermediate terms of pair elimination (`(e.k)[a]` for `e : [n](t1, t2)`) are
well typed.
"""
from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

from tensorlang.ir.ast import (
    REAL, Access, Add, Affine, And, Box, Call, Cmp, Const, Def, DefCall, Exists, Expr, Gen,
    IndexValue, Iverson, Let, Mul, Node, Or, Pair, PFalse, Pred, Proj, PTrue, RelCall, Sum, TArr,
    TPair, TRel, TSize, Type, Var, free_names, tensor, walk, Extremum,
)
from tensorlang.semantics.boxes import out_shape as box_shape
from tensorlang.syntax.errors import TLError


class PassError(TLError):
    """A pass met a program outside its precondition (an internal error of the pipeline)."""

    kind = "internal pass error"


class RuleNotApplicable(PassError):
    """`apply_rule` found no redex of the requested rule."""


Rule = Callable[[Expr, "Ctx"], "Expr | None"]


# ---------------------------------------------------------------------------------------------
# Struct-of-arrays types


def soa(t: Type) -> Type:
    """`t` with every array dimension distributed over pairs: `[n](a, b)` -> `([n]a, [n]b)`."""
    if isinstance(t, TArr):
        elem = soa(t.elem)
        if isinstance(elem, TPair):
            return TPair(soa(TArr(t.size, elem.a)), soa(TArr(t.size, elem.b)))
        return TArr(t.size, elem)
    if isinstance(t, TPair):
        return TPair(soa(t.a), soa(t.b))
    return t


def index_type(t: Type) -> Type:
    """The (SoA) type of `e[a]` for `e : t`."""
    if isinstance(t, TArr):
        return t.elem
    if isinstance(t, TPair):
        return TPair(index_type(t.a), index_type(t.b))
    raise PassError(f"access of a value of type {t!r}")


def provably_nonneg(a: Affine) -> bool:
    """`a >= 0` for every value of its (size) variables, which are all >= 0."""
    return a.const >= 0 and all(c >= 0 for _, c in a.terms)


def provably_pos(n: Affine) -> bool:
    """`n >= 1` for every value of its size variables."""
    return provably_nonneg(n - 1)


# ---------------------------------------------------------------------------------------------
# Unique renaming


def _fresh_name(base: str, used: set[str]) -> str:
    """The first `stem_k` (k = 1, 2, ...) not in `used`; deterministic, unlike `ast.fresh`."""
    stem = base.split("_")[0] or "v"
    k = 1
    while f"{stem}_{k}" in used:
        k += 1
    return f"{stem}_{k}"


def rename_unique(d: Def) -> Def:
    """`d` with binders renamed apart, as the passes need them.

    * every let-bound variable has a name used by no other binder, parameter or free name of
      the program (so a let can move anywhere, and one table holds all variable types);
    * an index binder (gen, sum, exists) never shadows an enclosing binder and never reuses
      the name of a parameter or a let-bound variable; sibling binders may share a name
      (`gen i. e1` and `gen i. e2` after loop fission), which is harmless and reads better.

    A binder keeps its name when that is allowed, so conforming programs come back unchanged.
    """
    outer = {p.name for p in d.params} | set(free_names(d.body))
    renamer = _Renamer(outer | _index_names(d.body), frozenset(outer))
    body = renamer.expr(d.body, {})
    return d if body is d.body else Def(d.name, d.params, d.ret, body, loc=d.loc)


def _index_names(e: Expr) -> set[str]:
    out: set[str] = set()
    for node in walk(e):
        if isinstance(node, (Gen, Sum, Exists, Extremum)):
            out.add(node.idx)
    return out


class _Renamer:
    def __init__(self, used: set[str], reserved: frozenset[str]) -> None:
        self.used = used                          # every name taken anywhere (grows)
        self.var_names: set[str] = set(reserved)  # parameters, free names, let names

    def bind_var(self, name: str, m: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        new = _fresh_name(name, self.used) if name in self.used else name
        self.used.add(new)
        self.var_names.add(new)
        return new, {**m, name: new}

    def bind_index(self, name: str, m: Mapping[str, str],
                   scope: frozenset[str]) -> tuple[str, dict[str, str], frozenset[str]]:
        new = name
        if name in scope or name in self.var_names:
            new = _fresh_name(name, self.used | scope)
        self.used.add(new)
        return new, {**m, name: new}, scope | {new}

    def aff(self, a: Affine, m: Mapping[str, str]) -> Affine:
        return a.rename(m) if (a.vars() & m.keys()) else a

    def pred(self, p: Pred, m: Mapping[str, str], sc: frozenset[str]) -> Pred:
        if isinstance(p, (PTrue, PFalse)):
            return p
        if isinstance(p, Cmp):
            return Cmp(p.op, self.aff(p.lhs, m), self.aff(p.rhs, m), loc=p.loc)
        if isinstance(p, RelCall):
            return RelCall(p.name, tuple(self.aff(a, m) for a in p.args), loc=p.loc)
        if isinstance(p, (And, Or)):
            return type(p)(self.pred(p.a, m, sc), self.pred(p.b, m, sc), loc=p.loc)
        if isinstance(p, Exists):
            size = self.aff(p.size, m)
            name, m2, sc2 = self.bind_index(p.idx, m, sc)
            return Exists(name, size, self.pred(p.body, m2, sc2), loc=p.loc)
        raise PassError(f"unknown predicate {type(p).__name__}")

    def expr(self, e: Expr, m: Mapping[str, str], sc: frozenset[str] = frozenset()) -> Expr:
        if isinstance(e, Var):
            return Var(m[e.name], loc=e.loc) if e.name in m else e
        if isinstance(e, Const):
            return e
        if isinstance(e, IndexValue):  # its indices are renamed like an access's
            return IndexValue(self.aff(e.a, m), loc=e.loc)
        if isinstance(e, (Add, Mul, Pair)):
            return type(e)(self.expr(e.a, m, sc), self.expr(e.b, m, sc), loc=e.loc)
        if isinstance(e, Call):
            return Call(e.fn, tuple(self.expr(a, m, sc) for a in e.args), e.params, loc=e.loc)
        if isinstance(e, Proj):
            return Proj(self.expr(e.e, m, sc), e.k, loc=e.loc)
        if isinstance(e, Access):
            return Access(self.expr(e.e, m, sc), tuple(self.aff(a, m) for a in e.idx),
                          loc=e.loc)
        if isinstance(e, Iverson):
            return Iverson(self.pred(e.pred, m, sc), self.expr(e.e, m, sc), loc=e.loc)
        if isinstance(e, (Gen, Sum, Extremum)):
            size = self.aff(e.size, m)
            name, m2, sc2 = self.bind_index(e.idx, m, sc)
            return type(e)(name, size, self.expr(e.body, m2, sc2), loc=e.loc)
        if isinstance(e, Let):
            value = self.expr(e.value, m, sc)
            name, m2 = self.bind_var(e.name, m)
            return Let(name, value, self.expr(e.body, m2, sc), loc=e.loc)
        if isinstance(e, Box):
            return Box(e.fn, e.part, tuple(self.expr(a, m, sc) for a in e.args), e.label,
                       e.ranks, e.dims, loc=e.loc)
        if isinstance(e, DefCall):
            raise PassError("calls of definitions must be inlined before the passes run",
                            e.loc)
        raise PassError(f"not a core expression: {type(e).__name__}")


# ---------------------------------------------------------------------------------------------
# Rule context


# Positions: which field of which parent holds a node.
ROOT, LET_VALUE, LET_BODY, GEN_BODY, SUM_BODY = "root", "letval", "letbody", "gen", "sum"
EXTREMUM_BODY = "extremum"
ACCESS_BASE, PROJ_ARG, IVERSON_BODY, OPERAND = "access", "proj", "iverson", "op"
BOX_ARG = "box"  # an argument of a linear-algebra box: a whole variable, left as it is


class Ctx:
    """What a rule may know about the program around the node it looks at."""

    def __init__(self, d: Def) -> None:
        self.params: dict[str, Type] = {p.name: soa(p.type) for p in d.params}
        self.inputs: frozenset[str] = frozenset(
            n for n, t in self.params.items() if not isinstance(t, (TSize, TRel)))
        self.types: dict[str, Type] = dict(self.params)
        self.used: set[str] = set(self.params) | set(free_names(d.body))
        for node in walk(d.body):
            if isinstance(node, (Let, Gen, Sum, Extremum)):
                self.used.add(node.name if isinstance(node, Let) else node.idx)
            elif isinstance(node, Exists):
                self.used.add(node.idx)
        self._type_memo: dict[Node, Type] = {}
        self.pos: str = ROOT
        self.ranges: Mapping[str, Affine] = {}
        self.fired: Counter[str] = Counter()

    # -- names and types
    def fresh(self, base: str) -> str:
        name = base if base not in self.used else _fresh_name(base, self.used)
        self.used.add(name)
        return name

    def declare(self, name: str, t: Type) -> None:
        self.types[name] = soa(t)
        self.used.add(name)

    def type_of(self, e: Expr) -> Type:
        hit = self._type_memo.get(e)
        if hit is None:
            hit = self._type_memo[e] = self._type(e)
        return hit

    def _type(self, e: Expr) -> Type:
        if isinstance(e, Var):
            t = self.types.get(e.name)
            if t is None:
                raise PassError(f"unbound variable {e.name!r}", e.loc)
            return t
        if isinstance(e, (Const, IndexValue, Add, Mul, Call, Sum, Extremum)):
            return REAL
        if isinstance(e, Pair):
            return TPair(self.type_of(e.a), self.type_of(e.b))
        if isinstance(e, Proj):
            t = self.type_of(e.e)
            if not isinstance(t, TPair):
                raise PassError(f"projection .{e.k} of a non-pair", e.loc)
            return t.a if e.k == 0 else t.b
        if isinstance(e, Gen):
            return soa(TArr(e.size, self.type_of(e.body)))
        if isinstance(e, Access):
            t = self.type_of(e.e)
            for _ in e.idx:
                t = index_type(t)
            return t
        if isinstance(e, Iverson):
            return self.type_of(e.e)
        if isinstance(e, Let):
            if e.name not in self.types:
                self.declare(e.name, self.type_of(e.value))
            return self.type_of(e.body)
        if isinstance(e, Box):  # a whole-tensor box (semantics/boxes.py)
            return tensor(box_shape(e.fn, e.part, e.shapes()))
        raise PassError(f"not a core expression: {type(e).__name__}")

    # -- reads of variables
    def is_input_read(self, e: Expr) -> bool:
        """`x` or `x.k.l...` for an input parameter x."""
        while isinstance(e, Proj):
            e = e.e
        return isinstance(e, Var) and e.name in self.inputs

    def is_read(self, e: Expr) -> bool:
        """A variable read: `v[a...]` where v is a variable or a projection of an input."""
        if isinstance(e, Access):
            e = e.e
            if isinstance(e, Access):
                return False
        return isinstance(e, Var) or (isinstance(e, Proj) and self.is_input_read(e))


# ---------------------------------------------------------------------------------------------
# The engine


Slot = tuple[str, Expr, str, Mapping[str, Affine]]


def _slots(e: Expr, ranges: Mapping[str, Affine]) -> list[Slot]:
    """(field, child, position, ranges) for each expression child of `e`."""
    if isinstance(e, Let):
        return [("value", e.value, LET_VALUE, ranges), ("body", e.body, LET_BODY, ranges)]
    if isinstance(e, (Gen, Sum, Extremum)):
        inner = dict(ranges)
        inner[e.idx] = e.size
        pos = GEN_BODY if isinstance(e, Gen) else SUM_BODY if isinstance(e, Sum) else \
            EXTREMUM_BODY
        return [("body", e.body, pos, inner)]
    if isinstance(e, Access):
        return [("e", e.e, ACCESS_BASE, ranges)]
    if isinstance(e, Proj):
        return [("e", e.e, PROJ_ARG, ranges)]
    if isinstance(e, Iverson):
        return [("e", e.e, IVERSON_BODY, ranges)]
    if isinstance(e, (Add, Mul, Pair)):
        return [("a", e.a, OPERAND, ranges), ("b", e.b, OPERAND, ranges)]
    if isinstance(e, Call):
        return [(f"arg{k}", a, OPERAND, ranges) for k, a in enumerate(e.args)]
    if isinstance(e, Box):
        return [(f"arg{k}", a, BOX_ARG, ranges) for k, a in enumerate(e.args)]
    if isinstance(e, (Var, Const, IndexValue)):
        return []
    raise PassError(f"not a core expression: {type(e).__name__}")


def _rebuild(e: Expr, new: Mapping[str, Expr]) -> Expr:
    if not new:
        return e
    if isinstance(e, Call):
        args = tuple(new.get(f"arg{k}", a) for k, a in enumerate(e.args))
        if all(x is y for x, y in zip(args, e.args)):
            return e
        return Call(e.fn, args, e.params, loc=e.loc)
    if isinstance(e, Box):
        args = tuple(new.get(f"arg{k}", a) for k, a in enumerate(e.args))
        if all(x is y for x, y in zip(args, e.args)):
            return e
        return Box(e.fn, e.part, args, e.label, e.ranks, e.dims, loc=e.loc)
    vals = {f: new.get(f, getattr(e, f)) for f in e._fields}
    if all(vals[f] is getattr(e, f) for f in e._fields):
        return e
    return type(e)(*(vals[f] for f in e._fields), loc=e.loc)


def _enter(node: Expr, ctx: Ctx) -> None:
    """Declare the variable a let binds before anything under it is looked at."""
    if isinstance(node, Let) and node.name not in ctx.types:
        ctx.declare(node.name, ctx.type_of(node.value))


@contextmanager
def deep_recursion(limit: int = 20000) -> Iterator[None]:
    """Long let chains recurse deeply; raise the limit for the duration of a pass."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def normalize(e: Expr, rules: Sequence[tuple[str, Rule]], ctx: Ctx, pos: str = ROOT,
              ranges: Mapping[str, Affine] | None = None) -> Expr:
    """`e` rewritten with `rules` to a fixed point, innermost first (see the module doc)."""
    memo: dict[tuple, Expr] = {}
    ranges = ranges or {}

    def key(node: Expr, p: str, rg: Mapping[str, Affine]) -> tuple:
        bound = free_names(node) & rg.keys()
        return (node, p, frozenset((v, rg[v]) for v in bound) if bound else None)

    def norm(node: Expr, p: str, rg: Mapping[str, Affine]) -> Expr:
        k = key(node, p, rg)
        hit = memo.get(k)
        if hit is not None:
            return hit
        cur = node
        while True:
            _enter(cur, ctx)
            new = {}
            for field, child, cpos, crg in _slots(cur, rg):
                nc = norm(child, cpos, crg)
                if nc is not child:
                    new[field] = nc
            cur = _rebuild(cur, new)
            ctx.pos, ctx.ranges = p, rg
            for name, rule in rules:
                out = rule(cur, ctx)
                if out is not None:
                    ctx.fired[name] += 1
                    cur = out
                    break
            else:
                break
        memo[k] = cur
        memo[key(cur, p, rg)] = cur
        return cur

    with deep_recursion():
        return norm(e, pos, ranges)


def step_once(e: Expr, rule: Rule, ctx: Ctx, pos: str = ROOT,
              ranges: Mapping[str, Affine] | None = None) -> Expr | None:
    """`e` with the first redex of `rule` (pre-order: outermost, then left to right) rewritten,
    or None when `rule` applies nowhere."""
    def go(node: Expr, p: str, rg: Mapping[str, Affine]) -> Expr | None:
        _enter(node, ctx)
        ctx.pos, ctx.ranges = p, rg
        out = rule(node, ctx)
        if out is not None:
            return out
        for field, child, cpos, crg in _slots(node, rg):
            nc = go(child, cpos, crg)
            if nc is not None:
                return _rebuild(node, {field: nc})
        return None

    with deep_recursion():
        return go(e, pos, ranges or {})


def run_pass(d: Def, rules: Sequence[tuple[str, Rule]],
             trace: Counter[str] | None = None) -> Def:
    """Rename binders apart, then normalise the body of `d` with `rules`."""
    with deep_recursion():
        d = rename_unique(d)
        ctx = Ctx(d)
        body = normalize(d.body, rules, ctx)
    if trace is not None:
        trace.update(ctx.fired)
    return d if body is d.body else Def(d.name, d.params, d.ret, body, loc=d.loc)


# ---------------------------------------------------------------------------------------------
# Per-rule application (for proofs/ and the docs)

RULE_TABLE: dict[str, Rule] = {}


def register_rules(rules: Sequence[tuple[str, Rule]]) -> None:
    for name, fn in rules:
        RULE_TABLE[name] = fn


def _load_tables() -> None:
    # The pass modules register their rules when imported.
    from tensorlang.passes import genpush, letlift, pairelim  # noqa: F401


def apply_rule(rule_id: str, d: Def) -> Def:
    """`d` with one application of rule `rule_id` at its first redex (pre-order).

    Binders are renamed apart first (alpha-equivalence, not a rewrite).  Raises
    `RuleNotApplicable` when the rule has no redex in `d`.
    """
    _load_tables()
    rule = RULE_TABLE.get(rule_id)
    if rule is None:
        raise PassError(f"unknown rule {rule_id!r} (known: {', '.join(sorted(RULE_TABLE))})")
    with deep_recursion():
        d = rename_unique(d)
        ctx = Ctx(d)
        body = step_once(d.body, rule, ctx)
    if body is None:
        raise RuleNotApplicable(f"rule {rule_id} does not apply to {d.name}")
    return Def(d.name, d.params, d.ret, body, loc=d.loc)


# ---------------------------------------------------------------------------------------------
# Small term helpers shared by the passes


def let_chain(e: Expr) -> tuple[list[tuple[str, Expr]], Expr]:
    """The bindings and result of `let x1 = e1 in ... let xm = em in r`."""
    binds: list[tuple[str, Expr]] = []
    while isinstance(e, Let):
        binds.append((e.name, e.value))
        e = e.body
    return binds, e


def iverson(p: Pred, e: Expr) -> Expr:
    """`[p] * e`, or `e` itself when p is `true`."""
    return e if isinstance(p, PTrue) else Iverson(p, e)


__all__ = [
    "PassError", "RuleNotApplicable", "Rule", "Ctx", "soa", "index_type", "provably_nonneg",
    "provably_pos", "rename_unique", "normalize", "step_once", "run_pass", "deep_recursion",
    "RULE_TABLE", "register_rules", "apply_rule", "let_chain", "iverson",
]
