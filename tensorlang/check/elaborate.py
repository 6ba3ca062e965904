"""Surface -> core elaboration (SPEC 2.3): tensor arithmetic sugar and inlining of defs.

The parser leaves two things that need types: tensor-valued `+ - *` (`x + y` with
`x, y : R[N]`, and scalar-times-tensor on either side) and calls of earlier defs (`DefCall`).
`elaborate_def` walks a surface def with a `TypeEnv`, type-checking as it goes, and returns a
core def (`is_core` holds for it):

  * Tensor arithmetic becomes `gen`: `x + y` -> `gen i:N. x[i] + y[i]`,
    `s * A` -> `gen i:N. gen j:M. s * A[i, j]`.  Arithmetic is kept lazy until its consumer is
    known, so indices are pushed into operands instead of building `(gen i. e)[j]`:
    `(x + y)[j]` -> `x[j] + y[j]`, and an operand `gen k:N. e` indexed at `i` becomes
    `e{k := i}` (guarded by `[0 <= i < N]` where that is not provable, to keep zero
    extension).  An operand whose evaluation costs something and that would otherwise be
    evaluated once per element (a scalar `sum`, an inlined call's `let`s) is bound by a `let`
    outside the `gen` first, so elaboration never multiplies work.  Shapes must be equal
    (Affine sizes are canonical, so equality is identity); tensor `+` does not broadcast a
    scalar.
  * `f(args)` of an earlier def is inlined: every binder of the callee is renamed fresh, value
    parameters are bound by `let` (or replaced, when the argument is a variable), size
    parameters are substituted by affine sizes and relation parameters renamed.  Arguments are
    positional; the size arguments may all be omitted, and are then inferred by unifying the
    parameter types with the argument types (a dimension that is a single size variable binds
    it; then a dimension left with a single unknown size is solved for it when that is exact,
    e.g. `x: R[N + K - 1]` with `K` known; every dimension must finally match).

Bounds warnings (see `typecheck`) are issued here, at the accesses written in the source:
accesses the elaborator builds are in range by construction, and an inlined callee was
checked on its own.

Calls of derived functions (`def g = grad(f, x)` then `g(x, A)` in a later def) are inlined
like calls of defs, but their program is the pipeline's to compute (stage `derive`): the
caller of the type checker supplies it as `derive` (`tensorlang.pipeline.derived_core`; the
API and the CLI do).  Without it such a call is a `TypeCheckError`: the front end never runs a
pass itself.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Union

from tensorlang.ir.ast import (
    REAL, Access, Add, Affine, And, Box, Call, Cmp, Const, Def, DefCall, DerivedDef, Exists, Expr,
    Gen, IndexValue, Iverson, Let, Mul, Node, Or, Pair, Param, Pred, Proj, PTrue, RelCall, Sum, TArr,
    TIndex, TPair, TReal, TRel, TSize, Type, Var, binder_name, fresh, map_fields, pred_and, scalar_of, shape_of,
    subst, tensor, walk, Cond, CondAnd, CondCmp, CondNot, CondOr, CondPred, Extremum, IfThen,
    cmp_pred, free_names, has_binders, pred_not,
)
from tensorlang.semantics import boxes
from tensorlang.syntax import printer
from tensorlang.syntax.errors import Loc, TypeCheckError
from tensorlang.check import prelude
from tensorlang.check.quasi import is_quasi_pred, lower_indices, lower_pred, lowered_access
from tensorlang.ir.ast import IndexRead, QuasiAffine, quasi_term
from tensorlang.check.typecheck import (
    SIZE, DeriveCore, TLWarning, TypeEnv, role_text, access_result, access_warning, box_type,
    INDEX, format_affine,
    builtin_arity,
    check_affine, check_pred, check_size, format_type, param_env, pick_loc, prove_nonneg, type_of,
)

__all__ = ["elaborate_def", "elaborate_expr", "is_core", "inline_call"]


# ---------------------------------------------------------------------------------------------
# Lazy elementwise arithmetic


@dataclass(frozen=True)
class _EW:
    """`a op b` over tensors of `shape`, not yet materialised.

    Operands are core expressions that may be indexed per element without repeating work (or
    nested `_EW`s, or scalars for `*`); `lets` bind the costly operands hoisted out of it."""

    op: type            # Add or Mul
    a: "Operand"
    b: "Operand"
    a_tensor: bool
    b_tensor: bool
    shape: tuple[Affine, ...]
    lets: tuple[tuple[str, Expr], ...]
    loc: Loc | None


Operand = Union[Expr, _EW]


def _wrap_lets(lets: Iterable[tuple[str, Expr]], body: Expr) -> Expr:
    for name, value in reversed(list(lets)):
        body = Let(name, value, body)
    return body


def _is_free(e: Expr) -> bool:
    """Costs nothing to evaluate (SPEC 3 counts only +, * and calls), so may be repeated."""
    return not any(isinstance(n, (Add, Mul, Call, Sum, Let, DefCall)) for n in walk(e))


def _pushable(e: Expr, k: int) -> bool:
    """Whether k indices can be pushed into `e` so that each element is still evaluated once."""
    if k == 0 or isinstance(e, Var):
        return True
    if isinstance(e, Access):
        return _pushable(e.e, k + len(e.idx))
    if isinstance(e, Gen):
        return _pushable(e.body, k - 1)
    if isinstance(e, Iverson):
        return _pushable(e.e, k)
    return _is_free(e)  # e.g. a projection of a variable: repeating it costs nothing


def _range_guard(a: Affine, n: Affine, env: TypeEnv) -> Pred:
    """The sides of `0 <= a < n` that are not provable at this point (true if both are)."""
    lo = () if prove_nonneg(a, env) else (Cmp("<=", Affine.lit(0), a),)
    hi = () if prove_nonneg(n - 1 - a, env) else (Cmp("<", a, n),)
    return pred_and(*lo, *hi)


def _guard(p: Pred, e: Expr) -> Expr:
    return e if isinstance(p, PTrue) else Iverson(p, e)


def _push(e: Expr, idx: tuple[Affine, ...], env: TypeEnv) -> Expr:
    """`e[idx]` with the indices pushed inside (e must be `_pushable`)."""
    if not idx:
        return e
    if isinstance(e, Access):
        return _push(e.e, e.idx + idx, env)
    if isinstance(e, Gen):
        guard = _range_guard(idx[0], e.size, env)
        body = subst(e.body, {e.idx: idx[0]})
        return _guard(guard, _push(body, idx[1:], env.with_fact(guard)))
    if isinstance(e, Iverson):
        return Iverson(e.pred, _push(e.e, idx, env.with_fact(e.pred)), loc=e.loc)
    return Access(e, idx, loc=e.loc)


def _has_scalar_operand(v: Operand) -> bool:
    if not isinstance(v, _EW):
        return False
    return (not v.a_tensor or not v.b_tensor or _has_scalar_operand(v.a)
            or _has_scalar_operand(v.b))


def _scalar_at(v: Operand, idx: tuple[Affine, ...], env: TypeEnv) -> Expr:
    """The element of operand `v` at the full index `idx` (scalars ignore it)."""
    if isinstance(v, _EW):
        a = _scalar_at(v.a, idx if v.a_tensor else (), env)
        b = _scalar_at(v.b, idx if v.b_tensor else (), env)
        return v.op(a, b, loc=v.loc)
    return _push(v, idx, env)


# ---------------------------------------------------------------------------------------------
# Inlining helpers


def _freshen(e: Expr, new_name: Callable[[str], str]) -> Expr:
    """`e` with every binder renamed to a fresh name (free names are untouched)."""
    memo: dict[tuple[int, int], Node] = {}
    keep: list[dict[str, str]] = []

    def go(n: Node, ren: dict[str, str]) -> Node:
        key = (id(n), id(ren))
        hit = memo.get(key)
        if hit is not None:
            return hit
        if not has_binders(n) and not (free_names(n) & ren.keys()):
            out: Node = n   # nothing to rename below (an inlined callee's body is shared)
        elif isinstance(n, Var):
            out = Var(ren[n.name], loc=n.loc) if n.name in ren else n
        elif isinstance(n, Affine):
            out = n.rename(ren) if n.vars() & ren.keys() else n
        elif isinstance(n, (Gen, Sum, Exists, Extremum, Let)):
            old = binder_name(n)
            assert old is not None
            inner = {**ren, old: new_name(old)}
            keep.append(inner)
            if isinstance(n, Let):
                out = Let(inner[old], go(n.value, ren), go(n.body, inner), loc=n.loc)
            else:
                out = type(n)(inner[old], go(n.size, ren), go(n.body, inner), loc=n.loc)
        else:
            out = map_fields(n, lambda c: go(c, ren))
        memo[key] = out
        return out

    root: dict[str, str] = {}
    keep.append(root)
    return go(e, root)  # type: ignore[return-value]


def _subst_type(t: Type, sizes: Mapping[str, Affine]) -> Type:
    if not sizes:
        return t
    if isinstance(t, TArr):
        return TArr(t.size.subst(sizes), _subst_type(t.elem, sizes))
    if isinstance(t, TPair):
        return TPair(_subst_type(t.a, sizes), _subst_type(t.b, sizes))
    if isinstance(t, TIndex):
        return TIndex(tuple(n.subst(sizes) for n in t.sizes), t.unbounded)
    if isinstance(t, TRel):
        return TRel(tuple(n.subst(sizes) for n in t.sizes))
    return t


def _unify(pt: Type, at: Type, unknown: set[str], sizes: dict[str, Affine]) -> None:
    """Bind the callee sizes that appear alone as a dimension of `pt` to `at`'s dimension."""
    if isinstance(pt, TArr) and isinstance(at, TArr):
        v = pt.size.as_var()
        if v in unknown and v not in sizes:
            sizes[v] = at.size
        _unify(pt.elem, at.elem, unknown, sizes)
    elif isinstance(pt, TPair) and isinstance(at, TPair):
        _unify(pt.a, at.a, unknown, sizes)
        _unify(pt.b, at.b, unknown, sizes)
    elif isinstance(pt, TRel) and isinstance(at, TRel) and len(pt.sizes) == len(at.sizes):
        for n, m in zip(pt.sizes, at.sizes):
            v = n.as_var()
            if v in unknown and v not in sizes:
                sizes[v] = m


def _same_structure(a: Type, b: Type) -> bool:
    """Equal types up to the sizes of their dimensions."""
    if isinstance(a, TArr) and isinstance(b, TArr):
        return _same_structure(a.elem, b.elem)
    if isinstance(a, TPair) and isinstance(b, TPair):
        return _same_structure(a.a, b.a) and _same_structure(a.b, b.b)
    if isinstance(a, TRel) and isinstance(b, TRel):
        return len(a.sizes) == len(b.sizes)
    return type(a) is type(b)


def _dim_pairs(pt: Type, at: Type) -> Iterable[tuple[Affine, Affine]]:
    """Corresponding (parameter, argument) dimensions of two types of the same structure."""
    if isinstance(pt, TArr) and isinstance(at, TArr):
        yield pt.size, at.size
        yield from _dim_pairs(pt.elem, at.elem)
    elif isinstance(pt, TPair) and isinstance(at, TPair):
        yield from _dim_pairs(pt.a, at.a)
        yield from _dim_pairs(pt.b, at.b)
    elif isinstance(pt, TRel) and isinstance(at, TRel):
        yield from zip(pt.sizes, at.sizes)


def _solve_sizes(pairs: list[tuple[Type, Type]], unknown: set[str],
                 sizes: dict[str, Affine]) -> None:
    """Beyond single-variable dimensions: a dimension with one size still unknown, once the
    known ones are substituted, determines it when the division is exact (`x: R[N + K - 1]`
    with K known gives N).  Repeats until nothing new is learnt."""
    progress = True
    while progress and unknown - sizes.keys():
        progress = False
        for pt, at in pairs:
            for pd, ad in _dim_pairs(pt, at):
                d = pd.subst(sizes)
                left = [v for v in d.vars() if v in unknown and v not in sizes]
                if len(left) != 1:
                    continue
                v = left[0]
                c = d.coeff(v)
                rest = ad - (d - Affine.var(v) * c)  # c * v == rest
                if rest.const % c or any(k % c for _, k in rest.terms):
                    continue
                sizes[v] = Affine(tuple((n, k // c) for n, k in rest.terms), rest.const // c)
                progress = True


def _expr_affine(e: Expr) -> Affine | None:
    """A size argument written as an expression (`N`, `3`, `N + K - 1`, `2 * N`)."""
    return _affine_of(e, lambda name: True)


def _value_affine(e: Expr, env: TypeEnv) -> Affine | None:
    """`e` as an affine expression of index and size variables with integer coefficients
    (`i`, `N - 1`, `2*i + j + 1`), or None.  Such an expression used as a real is one
    `IndexValue` (index arithmetic is free, SPEC 3); anything else that mentions an index
    (`i * i`, `i / 2`, `0.5 * i`) is real arithmetic on index values."""
    return _affine_of(e, lambda name: env.var_type(name) is None
                      and env.role(name) in _INDEX_ROLES)


def _affine_of(e: Expr, affine_name: Callable[[str], bool]) -> Affine | None:
    """`e` built from names (those `affine_name` accepts), integer literals, `+` and products
    by integer literals, as an `Affine`; None otherwise.  The right operands are tried first,
    so a long sum of reals is rejected at once (and walked without recursion)."""
    if isinstance(e, Var):
        return Affine.var(e.name) if affine_name(e.name) else None
    if isinstance(e, Const):
        return Affine.lit(int(e.value)) if float(e.value).is_integer() else None
    if isinstance(e, Add):
        spine: list[Expr] = []
        while isinstance(e, Add):
            spine.append(e.b)
            e = e.a
        spine.append(e)
        out = Affine.lit(0)
        for term in spine:
            a = _affine_of(term, affine_name)
            if a is None:
                return None
            out = out + a
        return out
    if isinstance(e, Mul):
        b = _affine_of(e.b, affine_name)
        a = _affine_of(e.a, affine_name) if b is not None else None
        if a is None or b is None:
            return None
        if a.is_const():
            return b * a.const
        if b.is_const():
            return a * b.const
    return None


# `if l op r then a else b` as `sel_ge(x, y, u, v)` (u if x >= y else v): (which side is x,
# which branch is u), with 0 = lhs / then.  `a > b` is `not (b >= a)`.
_SELECT_ARGS: dict[str, tuple[int, int]] = {">=": (0, 0), "<=": (1, 0), ">": (1, 1), "<": (0, 1)}
_INDEX_ROLES = frozenset({INDEX, SIZE})


def _surface_pred(c: Cond, env: TypeEnv) -> Pred | None:
    """The condition of an `if` as an index predicate before quasi-affine lowering, or None
    where it compares values (or negates a relation call or `exists`)."""
    if isinstance(c, CondPred):
        return c.pred
    if isinstance(c, CondCmp):
        lhs, rhs = (_index_reading(e, a, env) for e, a in ((c.lhs, c.alhs), (c.rhs, c.arhs)))
        return None if lhs is None or rhs is None else cmp_pred(c.op, lhs, rhs, c.loc)
    if isinstance(c, (CondAnd, CondOr)):
        a, b = _surface_pred(c.a, env), _surface_pred(c.b, env)
        if a is None or b is None:
            return None
        return (And if isinstance(c, CondAnd) else Or)(a, b, loc=c.loc)
    if isinstance(c, CondNot):
        a = _surface_pred(c.a, env)
        return None if a is None else pred_not(a)
    raise _err(f"not a condition: {c!r}", c.loc)


def _index_reading(e: Expr | None, a: Affine | None, env: TypeEnv
                   ) -> Affine | QuasiAffine | None:
    """A side of a comparison in a condition as an index expression, or None where it is a
    value: the affine reading when it names only indices and sizes, else an entry of an index
    array (`idx[i]`, the parser reads it as an access)."""
    if a is not None:
        return a if all(env.role(v) in _INDEX_ROLES for v in a.vars()) else None
    if isinstance(e, Access) and isinstance(e.e, Var) and \
            isinstance(env.rel_type(e.e.name), TIndex):
        return quasi_term(IndexRead(e.e.name, e.idx, loc=e.loc))
    return None


def _signature_text(params: Iterable[Param]) -> str:
    return ", ".join(f"{p.name}: {format_type(p.type)}" for p in params)


def _all_names(d: Def) -> set[str]:
    out = {p.name for p in d.params}
    for n in walk(d.body):
        if isinstance(n, Var):
            out.add(n.name)
        elif isinstance(n, Affine):
            out |= n.vars()
        elif isinstance(n, RelCall):
            out.add(n.name)
        b = binder_name(n)
        if b is not None:
            out.add(b)
    return out


# ---------------------------------------------------------------------------------------------
# The elaborator


def _err(message: str, loc: Loc | None) -> TypeCheckError:
    return TypeCheckError(message, loc)


class _Elaborator:
    def __init__(self, d: Def, earlier: Mapping[str, Def], later: Iterable[str],
                 derived: Mapping[str, DerivedDef], warnings: list[TLWarning] | None,
                 derive: DeriveCore | None = None) -> None:
        self.d = d
        self.earlier = earlier
        self.later = set(later)
        self.derived = dict(derived)  # earlier derived definitions, callable like defs
        self.derive = derive  # computes their programs (the pipeline's derive stage)
        self.warnings = warnings if warnings is not None else []
        self._seen = {(w.message, w.loc) for w in self.warnings}
        self.avoid = _all_names(d)
        self.generated: set[str] = set()  # names made by `fresh`, unique in this def
        self.numbers = itertools.count()  # this def's own: its names do not depend on others
        self.index_extents: dict[str, list[Affine]] = {}  # see `record`
        self.placeholders: set[str] = set()  # ranges not inferred yet (`_with_index_bounds`)

    def fresh(self, base: str) -> str:
        name = fresh(base, self.avoid, self.numbers)
        self.avoid.add(name)
        self.generated.add(name)
        return name

    def warn(self, w: TLWarning | None) -> None:
        if w is not None and (w.message, w.loc) not in self._seen:
            self._seen.add((w.message, w.loc))
            self.warnings.append(w)

    # -- results
    def core(self, v: Operand, env: TypeEnv) -> Expr:
        """A core expression for `v` (materialises lazy tensor arithmetic as `gen`)."""
        if not isinstance(v, _EW):
            return v
        names = tuple(self.fresh("i") for _ in v.shape)
        inner = env
        for n, size in zip(names, v.shape):
            inner = inner.with_index(n, size)
        body = _scalar_at(v, tuple(Affine.var(n) for n in names), inner)
        for n, size in reversed(list(zip(names, v.shape))):
            body = Gen(n, size, body, loc=v.loc)
        return _wrap_lets(v.lets, body)

    def index(self, v: _EW, idx: tuple[Affine, ...], env: TypeEnv, loc: Loc | None) -> Expr:
        """`v[idx]` (a user's possibly partial access of tensor arithmetic).

        Out of range, reads of tensor operands give 0 (and pushed `gen`s guard themselves),
        so `x[a] + y[a]` is already 0 there; a scalar factor is not (inf * 0 is nan), so
        then the access gets the guard that keeps zero extension exact."""
        guard: Pred = PTrue()
        if _has_scalar_operand(v):
            guard = pred_and(*(_range_guard(a, n, env) for a, n in zip(idx, v.shape)))
        env = env.with_fact(guard)
        rest = v.shape[len(idx):]
        names = tuple(self.fresh("i") for _ in rest)
        inner = env
        for n, size in zip(names, rest):
            inner = inner.with_index(n, size)
        body = _scalar_at(v, idx + tuple(Affine.var(n) for n in names), inner)
        for n, size in reversed(list(zip(names, rest))):
            body = Gen(n, size, body, loc=loc)
        return _wrap_lets(v.lets, _guard(guard, body))

    # -- expressions
    def expr(self, e: Expr, env: TypeEnv, loc: Loc | None) -> tuple[Operand, Type]:
        loc = pick_loc(e.loc, loc)
        if isinstance(e, (Var, Add, Mul)):
            a = _value_affine(e, env)
            if a is not None and a.terms:  # an index value (SPEC 12)
                return IndexValue(a, loc=e.loc), REAL
        if isinstance(e, Var):
            t = env.var_type(e.name)
            if t is None:
                role = env.role(e.name)
                if role is None:
                    raise _err(f"undefined variable {e.name}", loc)
                raise _err(f"{role_text(env, e.name)}, not a value (only sizes and indices "
                           "may be used as numbers)", loc)
            return e, t
        if isinstance(e, Const):
            return e, REAL
        if isinstance(e, IndexValue):  # already core
            check_affine(e.a, env, loc, "index value")
            return e, REAL
        if isinstance(e, (Add, Mul)):
            return self.arith(e, env, loc)
        if isinstance(e, Call):
            return self.call(e.fn, e.args, e.params, env, loc)
        if isinstance(e, Pair):
            (a, ta), (b, tb) = self.expr(e.a, env, loc), self.expr(e.b, env, loc)
            return Pair(self.core(a, env), self.core(b, env), loc=e.loc), TPair(ta, tb)
        if isinstance(e, Proj):
            v, t = self.expr(e.e, env, loc)
            if not isinstance(t, TPair):
                raise _err(f"projection .{e.k} needs a pair, found {format_type(t)}", loc)
            if e.k not in (0, 1):
                raise _err(f"projection .{e.k}: pairs have components .0 and .1", loc)
            return Proj(self.core(v, env), e.k, loc=e.loc), (t.a if e.k == 0 else t.b)
        if isinstance(e, (Gen, Sum, Extremum)):
            return self.binder(e, env, loc)
        if isinstance(e, IfThen):
            return self.ifthen(e, env, loc)
        if isinstance(e, Access):
            return self.access(e, env, loc)
        if isinstance(e, Iverson):
            pred = self.pred(e.pred, env, loc)
            inner = env.with_fact(pred)
            v, t = self.expr(e.e, inner, loc)
            return Iverson(pred, self.core(v, inner), loc=e.loc), t
        if isinstance(e, Let):
            v, tv = self.expr(e.value, env, loc)
            inner = env.with_var(e.name, tv)
            b, tb = self.expr(e.body, inner, loc)
            return Let(e.name, self.core(v, env), self.core(b, inner), loc=e.loc), tb
        if isinstance(e, DefCall):
            return self.defcall(e, env, loc)
        raise _err(f"not an expression: {e!r}", loc)

    def binder(self, e: Gen | Sum | Extremum, env: TypeEnv,
               loc: Loc | None) -> tuple[Operand, Type]:
        word = "gen" if isinstance(e, Gen) else "sum" if isinstance(e, Sum) else e.op
        check_size(e.size, env, loc, f"range of {word} {e.idx}")
        inner = env.with_index(e.idx, e.size)
        v, t = self.expr(e.body, inner, loc)
        body = self.core(v, inner)
        if isinstance(e, Gen):
            return Gen(e.idx, e.size, body, loc=e.loc), TArr(e.size, t)
        if not isinstance(t, TReal):
            raise _err(f"the body of {word} {e.idx} must be R, found {format_type(t)}",
                       pick_loc(e.body.loc, loc))
        return type(e)(e.idx, e.size, body, loc=e.loc), REAL

    # -- selection (SPEC 12)
    def ifthen(self, e: IfThen, env: TypeEnv, loc: Loc | None) -> tuple[Operand, Type]:
        """`if c then a else b`.  An index-only condition p whose negation is an index
        predicate becomes `[p] * a + [not p] * b` (static; the addition has disjoint supports
        and costs nothing); otherwise the branches must be R and the condition is evaluated
        per point: one comparison of reals becomes `sel_ge(l, r, a, b)` (with its arguments
        arranged for the operator), a compound condition a 0/1 value k and `sel_ge(k, 0.5,
        a, b)`.  The selection is piecewise constant in differentiation (its tangent selects
        the branch's tangent); both branches are evaluated, as with numpy's `where`."""
        # negated before lowering: `not (i % 2 == 0)` is `i % 2 != 0`, an index predicate
        p = _surface_pred(e.cond, env)
        q = pred_not(p) if p is not None else None
        if p is not None and q is not None:
            ploc = pick_loc(e.cond.loc, loc)
            p, q = self.pred(p, env, ploc), self.pred(q, env, ploc)
            return self.expr(Add(Iverson(p, e.a, loc=loc), Iverson(q, e.b, loc=loc), loc=loc),
                             env, loc)
        p = None if p is None else self.pred(p, env, pick_loc(e.cond.loc, loc))
        branches = []
        for part, word in ((e.a, "then"), (e.b, "else")):
            v, t = self.expr(part, env, loc)
            if not isinstance(t, TReal):
                raise _err(f"the {word} branch of an if whose condition depends on values must "
                           f"be R, found {format_type(t)} (select elementwise inside a gen)",
                           pick_loc(part.loc, loc))
            branches.append(self.core(v, env))
        a, b = branches
        c = e.cond
        if isinstance(c, CondCmp) and p is None and c.op in _SELECT_ARGS:
            lhs, rhs = self.real_side(c.lhs, c, env, loc), self.real_side(c.rhs, c, env, loc)
            order = _SELECT_ARGS[c.op]
            sides, picks = (lhs, rhs), (a, b)
            args = (sides[order[0]], sides[1 - order[0]], picks[order[1]], picks[1 - order[1]])
            return Call("sel_ge", args, (), loc=loc), REAL
        k, lets = self.cond_value(c, env, loc)
        return _wrap_lets(lets, Call("sel_ge", (k, Const(0.5), a, b), (), loc=loc)), REAL

    def index_cond(self, c: Cond, env: TypeEnv, loc: Loc | None) -> Pred | None:
        """The condition as a checked index predicate (quasi-affine parts lowered), or None
        where it compares values."""
        p = _surface_pred(c, env)
        return None if p is None else self.pred(p, env, pick_loc(c.loc, loc))

    def real_side(self, e: Expr | None, c: CondCmp, env: TypeEnv, loc: Loc | None) -> Expr:
        loc = pick_loc(c.loc, loc)
        if e is None:
            raise _err("a comparison of values needs real expressions on both sides", loc)
        v, t = self.expr(e, env, loc)
        if not isinstance(t, TReal):
            raise _err(f"a comparison in a condition compares reals, found {format_type(t)}",
                       pick_loc(e.loc, loc))
        return self.core(v, env)

    def cond_value(self, c: Cond, env: TypeEnv, loc: Loc | None
                   ) -> tuple[Expr, list[tuple[str, Expr]]]:
        """The condition as a real 0/1 value (index parts are Iverson brackets `[p] * 1`),
        with the `let`s that bind compared expressions used twice."""
        lets: list[tuple[str, Expr]] = []

        def shared(e: Expr) -> Expr:
            if isinstance(e, (Var, Const)) or (isinstance(e, Access) and isinstance(e.e, Var)):
                return e
            name = self.fresh("c")
            lets.append((name, e))
            return Var(name)

        def go(c: Cond) -> Expr:
            cl = pick_loc(c.loc, loc)
            p = self.index_cond(c, env, cl)
            if p is not None:
                return Iverson(p, Const(1.0), loc=cl)
            if isinstance(c, CondCmp):
                lhs, rhs = self.real_side(c.lhs, c, env, cl), self.real_side(c.rhs, c, env, cl)
                if c.op in ("==", "!="):
                    lhs, rhs = shared(lhs), shared(rhs)
                    if c.op == "==":
                        return Mul(Call("ge", (lhs, rhs), ()), Call("ge", (rhs, lhs), ()), loc=cl)
                    return Add(Call("gt", (lhs, rhs), ()), Call("gt", (rhs, lhs), ()), loc=cl)
                fn = "ge" if c.op in (">=", "<=") else "gt"
                return Call(fn, (lhs, rhs) if c.op in (">=", ">") else (rhs, lhs), (), loc=cl)
            if isinstance(c, CondAnd):
                return Mul(go(c.a), go(c.b), loc=cl)
            if isinstance(c, CondOr):
                return Call("max", (go(c.a), go(c.b)), (), loc=cl)
            if isinstance(c, CondNot):
                return Call("gt", (Const(0.5), go(c.a)), (), loc=cl)
            raise _err("a relation call or exists under 'not' needs an index predicate", cl)

        return go(c), lets

    def access(self, e: Access, env: TypeEnv, loc: Loc | None) -> tuple[Operand, Type]:
        v, t = self.expr(e.e, env, loc)
        if any(isinstance(a, QuasiAffine) for a in e.idx):
            return self.quasi_access(e, v, t, env, loc)
        for a in e.idx:
            check_affine(a, env, loc)
        rt = access_result(t, len(e.idx), loc)
        self.warn(access_warning(e.e, e.idx, t, env, loc))
        if isinstance(v, _EW):
            return self.index(v, e.idx, env, loc), rt
        return Access(v, e.idx, loc=e.loc), rt

    def record(self, name: str, extent: Affine) -> None:
        """An extent index array `name` indexes (its entries' range, when not declared)."""
        self.index_extents.setdefault(name, []).append(extent)

    def quasi_access(self, e: Access, v: Operand, t: Type, env: TypeEnv,
                     loc: Loc | None) -> tuple[Operand, Type]:
        """`x[.. i // 2 .., idx[j], ..]` (see `tensorlang.check.quasi`): a sum over the fresh
        quotient / entry variables of the guarded affine access, under a `gen` over the
        dimensions the access leaves."""
        rt = access_result(t, len(e.idx), loc)
        if not isinstance(scalar_of(t), TReal):
            raise _err(f"a quasi-affine or index-array index needs a tensor of R, found "
                       f"{format_type(t)}", loc)
        for a in e.idx:
            if isinstance(a, Affine):
                check_affine(a, env, loc)
        dims = shape_of(t)
        cases = lower_indices(e.idx, env, self.fresh, self.record, loc, dims[:len(e.idx)])
        lets: list[tuple[str, Expr]] = []
        target = self.operand(v, len(dims), lets)
        rest = dims[len(e.idx):]
        names = tuple(self.fresh("i") for _ in rest)
        outer = env
        for n, size in zip(names, rest):
            outer = outer.with_index(n, size)
        tail = tuple(Affine.var(n) for n in names)

        def read(values: tuple[Affine, ...], inner: TypeEnv) -> Expr:
            full = values + tail
            self.warn(access_warning(e.e, full, t, inner, loc))
            if isinstance(target, _EW):
                return self.index(target, full, inner, loc)
            return _push(target, full, inner) if _pushable(target, len(full)) else \
                Access(target, full, loc=e.loc)

        body = lowered_access(read, cases, outer, loc)
        for n, size in reversed(list(zip(names, rest))):
            body = Gen(n, size, body, loc=loc)
        return _wrap_lets(lets, body), rt

    def pred(self, p: Pred, env: TypeEnv, loc: Loc | None) -> Pred:
        """A checked predicate, quasi-affine comparisons lowered (`tensorlang.check.quasi`)."""
        if is_quasi_pred(p):
            p = lower_pred(p, env, self.fresh, self.record, loc)
        check_pred(p, env, loc)
        return p

    def call(self, fn: str, args: tuple[Expr, ...], params: tuple[float, ...], env: TypeEnv,
             loc: Loc | None) -> tuple[Operand, Type]:
        arity = builtin_arity(fn)
        if arity is None:
            raise _err(f"unknown function {fn}", loc)
        if arity != (len(args), len(params)):
            want = f"{arity[0]} argument(s)" + (f" and {arity[1]} constant(s)" if arity[1] else "")
            raise _err(f"{fn} takes {want}, found {len(args) + len(params)}", loc)
        out = []
        for k, a in enumerate(args):
            v, t = self.expr(a, env, loc)
            if not isinstance(t, TReal):
                raise _err(f"argument {k + 1} of {fn}: expected R, found {format_type(t)} "
                           "(builtins are scalar; map over a tensor with gen)",
                           pick_loc(a.loc, loc))
            out.append(v)
        return Call(fn, tuple(out), params, loc=loc), REAL

    # -- tensor arithmetic
    def arith(self, e: Add | Mul, env: TypeEnv, loc: Loc | None) -> tuple[Operand, Type]:
        (a, ta), (b, tb) = self.expr(e.a, env, loc), self.expr(e.b, env, loc)
        cls = type(e)
        if isinstance(ta, TReal) and isinstance(tb, TReal):
            return cls(a, b, loc=e.loc), REAL
        op = "+" if cls is Add else "*"
        for t in (ta, tb):
            if not isinstance(scalar_of(t), TReal):
                raise _err(f"operands of {op} must be R or tensors of R, found {format_type(t)}",
                           loc)
        sa, sb = shape_of(ta), shape_of(tb)
        if sa and sb and sa != sb:
            raise _err(f"shape mismatch in {op}: {format_type(ta)} and {format_type(tb)}", loc)
        if cls is Add and not (sa and sb):
            raise _err(f"cannot add {format_type(ta)} and {format_type(tb)}: tensor + needs "
                       "two tensors of the same shape (only * scales a tensor by a scalar)", loc)
        lets: list[tuple[str, Expr]] = []
        oa = self.operand(a, len(sa), lets)
        ob = self.operand(b, len(sb), lets)
        shape = sa or sb
        ew = _EW(cls, oa, ob, bool(sa), bool(sb), shape, tuple(lets), pick_loc(e.loc, loc))
        return ew, tensor(shape)

    def operand(self, v: Operand, k: int, lets: list[tuple[str, Expr]]) -> Operand:
        """`v` as an operand of elementwise arithmetic over k dimensions (0: a scalar);
        costly parts are hoisted into `lets` (in order) so they are evaluated once."""
        if isinstance(v, _EW):
            lets.extend(v.lets)
            return replace(v, lets=())
        ok = _is_free if k == 0 else (lambda x: _pushable(x, k))
        if ok(v):
            return v
        while isinstance(v, Let):  # hoist the statements of an inlined call
            if v.name in self.generated:  # already unique: cannot capture anything
                lets.append((v.name, v.value))
                v = v.body
                continue
            name = self.fresh(v.name)
            lets.append((name, v.value))
            v = subst(v.body, {v.name: Var(name)})
        if ok(v):
            return v
        name = self.fresh("t")
        lets.append((name, v))
        return Var(name)

    # -- calls of earlier defs
    def derived_core(self, name: str, loc: Loc | None) -> Def:
        """The program of an earlier derived definition (SPEC 2.5), as a core Def, from the
        pipeline the caller supplied."""
        if self.derive is None:
            raise _err(f"{name} is a derived function: a call of it needs its program, which "
                       "the pipeline computes (check the module through tensorlang.api, or "
                       "pass derive=tensorlang.pipeline.derived_core)", loc)
        return self.derive(self.derived[name], self.earlier, self.derived)

    def defcall(self, e: DefCall, env: TypeEnv, loc: Loc | None) -> tuple[Operand, Type]:
        callee = self.earlier.get(e.name)
        if callee is None and boxes.is_box(e.name):
            return elaborate_box(self, e, env, loc)
        if callee is None and e.name not in self.derived and e.name != self.d.name \
                and e.name not in self.later:
            callee = prelude.lookup(e.name)   # the standard prelude (docs/linalg.md)
        if callee is None:
            if e.name == self.d.name:
                raise _err(f"{e.name} calls itself: recursion is not allowed", loc)
            if e.name in self.later:
                raise _err(f"{e.name} is not defined before this point (a def may only call "
                           "earlier defs; recursion is not allowed)", loc)
            if e.name in self.derived:
                return inline_call(self, self.derived_core(e.name, loc), e, env, loc)
            arity = builtin_arity(e.name)
            if arity is not None and len(e.args) == sum(arity):
                consts = e.args[arity[0]:]
                if all(isinstance(c, Const) for c in consts):
                    return self.call(e.name, e.args[:arity[0]],
                                     tuple(c.value for c in consts), env, loc)  # type: ignore
            raise _err(f"unknown function {e.name}", loc)
        return inline_call(self, callee, e, env, loc)


def elaborate_box(el: _Elaborator, e: DefCall, env: TypeEnv,
                  loc: Loc | None) -> tuple[Expr, Type]:
    """A linear-algebra box (SPEC 13): `let t = arg; b = Box(fn, k, t..) in b` (a pair of
    the two parts for `lq`, `eigh`), so that after let-lifting every box is the whole value
    of a statement and reads variables."""
    spec = boxes.BOXES[e.name]
    if env.idx:
        raise _err(f"{e.name} applies to whole matrices: it cannot appear under gen/sum "
                   f"(index {', '.join(sorted(env.idx))} in scope); batch over leading "
                   "dimensions instead", loc)
    if len(e.args) != spec.arity:
        raise _err(f"{e.name} takes {spec.arity} argument(s), found {len(e.args)}", loc)
    lets: list[tuple[str, Expr]] = []
    args: list[Expr] = []
    types: list[Type] = []
    for a in e.args:
        v, t = el.expr(a, env, loc)
        core = el.core(v, env)
        if not isinstance(core, Var):
            name = el.fresh("t")
            lets.append((name, core))
            core = Var(name)
        args.append(core)
        types.append(t)
    label = ", ".join(printer.to_tl(a) for a in e.args)
    parts = []
    out_types = []
    for k in range(spec.parts):
        out_types.append(box_type(e.name, k, types, loc))
        name = el.fresh(e.name[:4])
        lets.append((name, Box.make(e.name, k, args, label, [shape_of(t) for t in types],
                                     loc=loc)))
        parts.append(Var(name))
    if spec.parts == 1:
        return _wrap_lets(tuple(lets), parts[0]), out_types[0]
    return (_wrap_lets(tuple(lets), Pair(parts[0], parts[1], loc=loc)),
            TPair(out_types[0], out_types[1]))


def inline_call(el: _Elaborator, callee: Def, e: DefCall, env: TypeEnv,
                loc: Loc | None) -> tuple[Expr, Type]:
    """Inline `callee(args)` (see the module docstring): the core expression and its type."""
    params, args, name = callee.params, e.args, callee.name
    n_sizes = sum(isinstance(p.type, TSize) for p in params)
    if len(args) == len(params):
        pairs = list(zip(params, args))
    elif n_sizes and len(args) == len(params) - n_sizes and not any(
            isinstance(a, Var) and env.role(a.name) == SIZE for a in args):
        pairs = list(zip([p for p in params if not isinstance(p.type, TSize)], args))
    else:  # a size among fewer arguments than parameters: some value is missing
        alt = f", or {len(params) - n_sizes} without the sizes" if n_sizes else ""
        raise _err(f"{name} takes {len(params)} argument(s) ({_signature_text(params)}){alt}; "
                   f"found {len(args)}", loc)
    position = {p.name: k + 1 for k, p in enumerate(params)}
    sizes: dict[str, Affine] = {}
    rels: dict[str, str] = {}
    typed: list[tuple[Param, Type, Loc | None]] = []
    values: list[tuple[Param, Expr]] = []
    arrays: list[tuple[Param, str, TIndex, Loc | None]] = []
    for p, a in pairs:
        where = f"argument {position[p.name]} of {name} (parameter {p.name}: {format_type(p.type)})"
        aloc = pick_loc(a.loc, loc)
        if isinstance(p.type, TSize):
            aff = _expr_affine(a)
            if aff is None:
                raise _err(f"{where} must be a size (affine in size variables)", aloc)
            check_size(aff, env, aloc, f"{where}:")
            sizes[p.name] = aff
        elif isinstance(p.type, TIndex):  # unified on its shape; its range below
            arr = env.rel_type(a.name) if isinstance(a, Var) else None
            if not isinstance(arr, TIndex):
                raise _err(f"{where} must be an index-array parameter (Z[...])", aloc)
            rels[p.name] = a.name  # type: ignore[union-attr]
            arrays.append((p, a.name, arr, aloc))  # type: ignore[union-attr]
            typed.append((Param(p.name, tensor(p.type.shape)), tensor(arr.shape), aloc))
        elif isinstance(p.type, TRel):
            rel = env.rel_type(a.name) if isinstance(a, Var) else None
            if rel is None:
                raise _err(f"{where} must be a relation parameter", aloc)
            rels[p.name] = a.name  # type: ignore[union-attr]
            typed.append((p, rel, aloc))
        else:
            v, t = el.expr(a, env, aloc)
            values.append((p, el.core(v, env)))
            typed.append((p, t, aloc))
    unknown = {p.name for p in params if isinstance(p.type, TSize)}
    for p, t, _ in typed:
        _unify(p.type, t, unknown, sizes)
    _solve_sizes([(p.type, t) for p, t, _ in typed], unknown, sizes)
    for p, t, aloc in typed:  # a rank or pair mismatch is reported as such, not as a size
        if not _same_structure(p.type, t):
            raise _err(f"argument {position[p.name]} of {name} (parameter {p.name}): expected "
                       f"{format_type(_subst_type(p.type, sizes))}, found {format_type(t)}", aloc)
    for p, _, arr, _ in arrays:  # a range no other argument fixes: the array's own
        v = p.type.sizes[-1].as_var()
        if v in unknown and v not in sizes:
            sizes[v] = arr.sizes[-1]
    for p, arg, arr, aloc in arrays:
        want_bound = p.type.sizes[-1].subst(sizes)
        if want_bound.vars() & (unknown - sizes.keys()):
            continue  # reported below
        el.record(arg, want_bound)
        if arr.sizes[-1] is not want_bound and not (arr.sizes[-1].vars() & el.placeholders):
            raise _err(f"argument {position[p.name]} of {name} (parameter {p.name}): entries "
                       f"in 0 <= {arg}[...] < {format_affine(arr.sizes[-1])}, but {name} "
                       f"indexes with them below {format_affine(want_bound)}", aloc)
    for p in params:
        if p.name in unknown and p.name not in sizes:
            raise _err(f"cannot infer the size {p.name} of {name} from its arguments; pass the "
                       "sizes explicitly", loc)
    for p, t, aloc in typed:
        want = _subst_type(p.type, sizes)
        if want is not t:
            raise _err(f"argument {position[p.name]} of {name} (parameter {p.name}): expected "
                       f"{format_type(want)}, found {format_type(t)}", aloc)
    ret = callee.ret if callee.ret is not None else type_of(callee.body, param_env(callee))
    mapping: dict[str, object] = {**sizes, **rels}
    lets: list[tuple[str, Expr]] = []
    for p, v in values:
        if isinstance(v, Var):
            mapping[p.name] = v
        else:
            fresh_name = el.fresh(p.name)
            mapping[p.name] = Var(fresh_name)
            lets.append((fresh_name, v))
    body = subst(_freshen(callee.body, el.fresh), mapping)
    return _wrap_lets(lets, body), _subst_type(ret, sizes)


# ---------------------------------------------------------------------------------------------
# Entry points


def elaborate_def(d: Def, earlier: Mapping[str, Def] | None = None, *,
                  later: Iterable[str] = (), derived: Mapping[str, DerivedDef] | None = None,
                  warnings: list[TLWarning] | None = None,
                  derive: DeriveCore | None = None) -> Def:
    """The core def of surface def `d`; `earlier` are the (core) defs it may call, `derive`
    computes the programs of the derived defs in `derived` it calls.

    `ret` of the result is the declared type, or the inferred one when none was declared
    (`typecheck.check_def` compares them).  Bounds warnings are appended to `warnings`."""
    d = _with_index_bounds(d, earlier or {}, later, derived or {}, derive)
    env = param_env(d)
    el = _Elaborator(d, earlier or {}, later, derived or {}, warnings, derive)
    v, t = el.expr(d.body, env, d.loc)
    body = el.core(v, env)
    return Def(d.name, d.params, d.ret if d.ret is not None else t, body, loc=d.loc)


def _with_index_bounds(d: Def, earlier: Mapping[str, Def], later: Iterable[str],
                       derived: Mapping[str, DerivedDef], derive: DeriveCore | None) -> Def:
    """`d` with the range of every index array written `Z[...]` without `in m` inferred from
    its uses (`tensorlang.check.quasi`): one elaboration with a placeholder size per such
    array collects the extents they index."""
    open_params = [p for p in d.params if isinstance(p.type, TIndex) and p.type.unbounded]
    if not open_params:
        return d
    avoid = _all_names(d)
    holders: dict[str, str] = {}
    for p in open_params:
        holders[p.name] = fresh(p.name + "_range", avoid | set(holders.values()),
                                itertools.count())
    scratch_params = [Param(p.name, TIndex(p.type.sizes + (Affine.var(holders[p.name]),)),
                            loc=p.loc) if p.name in holders else p for p in d.params]
    scratch_params += [Param(h, TSize()) for h in holders.values()]
    scratch = Def(d.name, scratch_params, d.ret, d.body, d.requires, loc=d.loc)
    el = _Elaborator(scratch, earlier, later, derived, [], derive)
    placeholders = set(holders.values())
    el.placeholders = placeholders
    el.expr(d.body, param_env(scratch), d.loc)
    params = []
    for p in d.params:
        if p.name not in holders:
            params.append(p)
            continue
        extents = []
        for x in el.index_extents.get(p.name, []):
            if not (x.vars() & placeholders) and x not in extents:
                extents.append(x)
        where = pick_loc(p.loc, d.loc)
        shape = ", ".join(format_affine(n) for n in p.type.sizes)
        if not extents:
            raise _err(f"cannot infer the range of the entries of index array {p.name}: use it "
                       f"as a whole index (x[{p.name}[i]]) or declare it ({p.name}: "
                       f"Z[{shape}] in M)", where)
        if len(extents) > 1:
            shown = " and ".join(format_affine(x) for x in extents)
            raise _err(f"index array {p.name} indexes dimensions of different extents ({shown}): "
                       f"declare the range of its entries ({p.name}: Z[{shape}] in M)", where)
        params.append(Param(p.name, TIndex(p.type.sizes + (extents[0],)), loc=p.loc))
    return Def(d.name, params, d.ret, d.body, d.requires, loc=d.loc)


def elaborate_expr(e: Expr, env: TypeEnv, earlier: Mapping[str, Def] | None = None, *,
                   derived: Mapping[str, DerivedDef] | None = None,
                   warnings: list[TLWarning] | None = None,
                   derive: DeriveCore | None = None) -> tuple[Expr, Type]:
    """Elaborate one surface expression in `env` (the REPL's expressions): the core
    expression and its type."""
    scratch = Def("<expr>", (), None, e)
    el = _Elaborator(scratch, earlier or {}, (), derived or {}, warnings, derive)
    el.avoid |= set(env.names)
    v, t = el.expr(e, env, e.loc)
    return el.core(v, env), t


def is_core(d: Def) -> bool:
    """Whether `d` is in the core grammar and well-typed: no `DefCall`, `+ * f(..)` on
    scalars only, and the body has the declared return type."""
    try:
        t = type_of(d.body, param_env(d))
    except TypeCheckError:
        return False
    return d.ret is None or t is d.ret
