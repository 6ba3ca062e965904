"""Type checking of tensorlang programs (SPEC 2.1, 2.4, 2.5) and bounds warnings (SPEC 2.2).

`check_module` takes the parser's surface definitions, checks the name rules below, hands
each `def` to `tensorlang.check.elaborate` (tensor sugar to `gen`, inlining of earlier defs; the
elaborator reports type errors of the surface program as it goes), re-checks the resulting
core body with `type_of`, compares it with the declared return type (or records the inferred
one), and computes the signatures of derived defs (`grad`, `jvp`, ...).  Nothing here
evaluates a program or computes a derivative: where a def calls a derived function, its
program comes from the `derive` callable the caller passes (the pipeline's `derive` stage).

Typing rules of the core (`type_of`): `+ * f(..)` take and give `R`; `gen i:n. e : [n] t`;
`sum i:n. e : R` with `e : R`; `e[a1..ak]` peels k leading array dimensions (partial access
is allowed); `[p] * e` has the type of `e` (any type); pairs and projections as usual;
`let`.  Indices are affine in bound index variables and size variables; sizes (of binders
and inside types) are affine in size variables only; a relation call needs a relation
parameter of the same arity.

Name rules (SPEC 2 is silent; decided here):
  1. Program variables, index variables, size variables and relations share one namespace
     (as in `ast`): a name means one thing at each point of a program.
  2. Parameter names of a def are distinct.  Sizes in parameter types may name any size
     parameter of the def, whatever the order of the parameters.
  3. A binder (`gen`/`sum`/`exists` index, an inner `let x = e1 in e2`) may not reuse a name
     that is in scope in another role: `gen x:N. ...` inside a def with a parameter `x` is an
     error, as is `let i = ...` under `gen i`.  Shadowing in the same role is allowed (an
     inner `sum i` under `gen i`; an inner `let x` over a variable `x`).
  4. Statements (the `name = e` lines of a def, i.e. the spine of lets around the returned
     expression) may not redefine a parameter or an earlier statement.
  5. Def names in a module are distinct, and a def may call only defs written before it
     (no recursion).  Def names live apart from variables: a parameter may be named like a
     def.
Errors are `TypeCheckError`s located at the offending node, or at the nearest enclosing node
that has a location (nodes are hash-consed, so a shared node keeps the location of its first
occurrence).

Bounds warnings: an access `e[a]` of a dimension `n` whose index the checker cannot prove in
`0 <= a < n` gets a `TLWarning` (reads outside give 0, SPEC 2.2), unless an enclosing Iverson
bracket guards it.  The proof is Fourier-Motzkin elimination (with integer tightening) over
the ranges of the enclosing index variables (`0 <= i <= n - 1`, so a loop that runs has
`n >= 1`), `N >= 0` for sizes, and the conjunctions of enclosing Iverson predicates (a
disjunction is proved branch by branch; a relation call bounds its arguments by the
relation's shape; `exists` adds its variable with its range).
"""
from __future__ import annotations

import math
import re
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from tensorlang.ir.ast import (
    BUILTINS, DERIVED_KINDS, REAL, Access, Add, Affine, And, Box, Call, Cmp, Const, Def, DefCall,
    DerivedDef, Exists, Expr, Gen, IndexValue, Iverson, Let, Mul, Node, Or, Pair, Param, PFalse, Pred,
    Extremum,
    Proj, PTrue, RelCall, Sum, TArr, TPair, TReal, TRel, TSize, Type, Var, children, fresh,
    free_names,
    scalar_of, shape_of, subst, tensor,
)
from tensorlang.semantics import boxes
from tensorlang.check.scope import Scope
from tensorlang.syntax import limits
from tensorlang.syntax.errors import Loc, Source, TLError, TypeCheckError, diagnostic
from tensorlang.syntax.printer import to_tl

# The core Def of a derived definition given the module's earlier defs and derived defs: the
# pipeline's `derive` stage (`pipeline.derived_core`), supplied by the caller of the checker.
DeriveCore = Callable[[DerivedDef, Mapping[str, Def], Mapping[str, DerivedDef]], Def]

__all__ = [
    "TypeEnv", "type_of", "check_pred", "check_affine", "check_size", "check_type",
    "param_env", "check_names", "check_def", "check_module", "CheckedDef", "CheckedModule",
    "Signature", "derived_signature", "TLWarning", "provably_in_range", "prove_nonneg",
    "bounds_warnings", "access_warning", "format_type", "format_affine", "is_real_valued",
    "builtin_arity", "pick_loc", "role_text", "DeriveCore",
]

# ---------------------------------------------------------------------------------------------
# Printing (types in .tl syntax for messages)


def format_affine(a: Affine) -> str:
    """`N + K - 1`, `2*i + 1`, `-i`, `0` (the printer's text)."""
    return to_tl(a)


def format_type(t: Type) -> str:
    """A type in `.tl` syntax (`R[N, M]`)."""
    return to_tl(t)


def format_pred(p: Pred) -> str:
    if isinstance(p, PTrue):
        return "true"
    if isinstance(p, PFalse):
        return "false"
    if isinstance(p, Cmp):
        return f"{format_affine(p.lhs)} {p.op} {format_affine(p.rhs)}"
    if isinstance(p, RelCall):
        return f"{p.name}({', '.join(format_affine(a) for a in p.args)})"
    if isinstance(p, And):
        return f"{format_pred(p.a)} and {format_pred(p.b)}"
    if isinstance(p, Or):
        return f"({format_pred(p.a)} or {format_pred(p.b)})"
    if isinstance(p, Exists):
        return f"(exists {p.idx}:{format_affine(p.size)}. {format_pred(p.body)})"
    return repr(p)


# ---------------------------------------------------------------------------------------------
# Warnings


@dataclass(frozen=True)
class TLWarning:
    """A diagnostic that does not stop compilation (printed like a `TLError`)."""

    message: str
    loc: Loc | None = None
    kind: str = "warning"

    def __str__(self) -> str:
        return diagnostic(self.kind, self.message, self.loc)


def _err(message: str, loc: Loc | None) -> TypeCheckError:
    return TypeCheckError(message, loc)


# Nodes are hash-consed and keep the location of their first occurrence, which may lie in
# another def or another file.  While a def is checked, `_SPAN` holds its source and line
# range, and a node location outside it gives way to the enclosing node's.
_SPAN: ContextVar[tuple[Source | None, int, float] | None] = ContextVar("tl_span", default=None)


def pick_loc(own: Loc | None, outer: Loc | None) -> Loc | None:
    """A node's own location if it belongs to the def being checked, else `outer`."""
    if own is None:
        return outer
    span = _SPAN.get()
    if span is None:
        return own
    src, lo, hi = span
    same = own.source is src or own.source == src  # equal text: the same place
    return own if same and lo <= own.line < hi else outer


# ---------------------------------------------------------------------------------------------
# Environments

VAR, INDEX, SIZE, REL = "variable", "index variable", "size", "relation"


@dataclass(frozen=True)
class TypeEnv:
    """What is in scope at a point of a program; immutable (`with_*` return new envs).

    `names` maps each name to `(role, info)`: a variable to its `Type`, an index variable to
    its range size (`Affine`), a size variable to `None`, a relation to its `TRel`.  Binding a
    name hides any earlier binding of it, whatever its role (one namespace).  `facts` are the
    predicates of the enclosing Iverson brackets (used by the bounds prover only).
    """

    names: Mapping[str, tuple[str, Any]] = field(default_factory=Scope)
    facts: tuple[Pred, ...] = ()
    # the index and size variables among `names` (a name hidden by another role maps to that
    # role): the bounds prover's facts, without a walk over every variable in scope
    bounded: Scope = field(default_factory=Scope)

    # -- queries
    def role(self, name: str) -> str | None:
        hit = self.names.get(name)
        return hit[0] if hit is not None else None

    def var_type(self, name: str) -> Type | None:
        hit = self.names.get(name)
        return hit[1] if hit is not None and hit[0] == VAR else None

    def index_size(self, name: str) -> Affine | None:
        hit = self.names.get(name)
        return hit[1] if hit is not None and hit[0] == INDEX else None

    def is_size(self, name: str) -> bool:
        return self.role(name) == SIZE

    def rel_type(self, name: str) -> TRel | None:
        hit = self.names.get(name)
        return hit[1] if hit is not None and hit[0] == REL else None

    @property
    def vars(self) -> dict[str, Type]:
        return {n: i for n, (r, i) in self.names.items() if r == VAR}

    @property
    def idx(self) -> dict[str, Affine]:
        return {n: i for n, (r, i) in self.names.items() if r == INDEX}

    @property
    def sizes(self) -> frozenset[str]:
        return frozenset(n for n, (r, _) in self.names.items() if r == SIZE)

    @property
    def rels(self) -> dict[str, TRel]:
        return {n: i for n, (r, i) in self.names.items() if r == REL}

    # -- extension
    def _with(self, name: str, role: str, info: Any) -> "TypeEnv":
        scope = self.names if isinstance(self.names, Scope) else Scope(dict(self.names))
        names = scope.bind(name, (role, info))
        bounded = self.bounded
        if role in (INDEX, SIZE) or name in bounded:
            bounded = bounded.bind(name, (role, info))
        # a fact about a shadowed name says nothing about the new one
        facts = tuple(f for f in self.facts if name not in free_names(f))
        return TypeEnv(names, facts, bounded)

    def with_var(self, name: str, t: Type) -> "TypeEnv":
        return self._with(name, VAR, t)

    def with_index(self, name: str, size: Affine) -> "TypeEnv":
        return self._with(name, INDEX, size)

    def with_size(self, name: str) -> "TypeEnv":
        return self._with(name, SIZE, None)

    def with_rel(self, name: str, t: TRel) -> "TypeEnv":
        return self._with(name, REL, t)

    def with_fact(self, p: Pred) -> "TypeEnv":
        if isinstance(p, PTrue):
            return self
        return TypeEnv(self.names, self.facts + (p,), self.bounded)

    def with_param(self, p: Param) -> "TypeEnv":
        if isinstance(p.type, TSize):
            return self.with_size(p.name)
        if isinstance(p.type, TRel):
            return self.with_rel(p.name, p.type)
        return self.with_var(p.name, p.type)

    @staticmethod
    def of_params(params: Iterable[Param]) -> "TypeEnv":
        env = TypeEnv()
        for p in params:
            env = env.with_param(p)
        return env

    def _key_info(self, name: str) -> Any:
        hit = self.names.get(name)
        if hit is None:
            return None
        role, info = hit
        return (role, None) if role in (INDEX, SIZE) else (role, info)


def builtin_arity(fn: str) -> tuple[int, int] | None:
    """(args, constant params) of a builtin: the grammar's, plus the derivative helpers of
    `tensorlang.semantics.builtins` (derivative programs call them and must type-check too)."""
    hit = BUILTINS.get(fn)
    if hit is not None:
        return hit
    try:
        from tensorlang.semantics.builtins import EXTRA_BUILTINS
    except ImportError:
        return None
    return EXTRA_BUILTINS.get(fn)


def is_real_valued(t: Type) -> bool:
    """R, arrays of real-valued types, pairs of real-valued types."""
    if isinstance(t, TReal):
        return True
    if isinstance(t, TArr):
        return is_real_valued(t.elem)
    if isinstance(t, TPair):
        return is_real_valued(t.a) and is_real_valued(t.b)
    return False


# ---------------------------------------------------------------------------------------------
# Well-formedness of affine expressions, sizes, predicates, types


def role_text(env: TypeEnv, name: str) -> str:
    role = env.role(name)
    if role is None:
        return f"{name} is not defined"
    return f"{name} is {'an' if role[0] in 'aeiou' else 'a'} {role}"


def check_affine(a: Affine, env: TypeEnv, loc: Loc | None, what: str = "index") -> None:
    """Indices may use bound index variables and size variables."""
    for v in a.vars():
        if env.role(v) not in (INDEX, SIZE):
            where = _name_in_brackets(v, loc) if env.role(v) is None else loc
            raise _err(f"{what} {format_affine(a)} must use index or size variables only, "
                       f"but {role_text(env, v)}", where)


def _name_in_brackets(name: str, loc: Loc | None) -> Loc | None:
    """The first `[... name ...]` at or after `loc` within the def being checked: an
    undefined index is reported where it is used, also when the access node is shared with
    another def (hash-consing keeps its first location, so `loc` may be an enclosing node or
    the def itself)."""
    span = _SPAN.get()
    if loc is None or loc.source is None or span is None or span[0] != loc.source:
        return loc
    lines = loc.source.text.splitlines()
    word = re.compile(rf"\[[^\]#]*?(?<![A-Za-z0-9_])({re.escape(name)})(?![A-Za-z0-9_])")
    for lineno in range(loc.line, min(len(lines), int(min(span[2], 1e9)) - 1) + 1):
        text = lines[lineno - 1].split("#", 1)[0]
        m = word.search(text, loc.col - 1 if lineno == loc.line else 0)
        if m is not None:
            col = m.start(1) + 1
            return Loc(loc.source, lineno, col, col + len(name))
    return loc


def check_size(a: Affine, env: TypeEnv, loc: Loc | None, what: str = "size") -> None:
    """Sizes are affine in size variables only."""
    for v in a.vars():
        if env.role(v) != SIZE:
            raise _err(f"{what} {format_affine(a)} must be affine in size variables, "
                       f"but {role_text(env, v)}", loc)


def check_type(t: Type, env: TypeEnv, loc: Loc | None, *, allow: tuple[type, ...] = ()) -> None:
    """A value type whose sizes are in scope; `allow` admits `TSize`/`TRel` at the top."""
    if isinstance(t, TReal):
        return
    if isinstance(t, TArr):
        check_size(t.size, env, loc, "array size")
        check_type(t.elem, env, loc)
    elif isinstance(t, TPair):
        check_type(t.a, env, loc)
        check_type(t.b, env, loc)
    elif isinstance(t, (TSize, TRel)) and isinstance(t, allow):
        if isinstance(t, TRel):
            for n in t.sizes:
                check_size(n, env, loc, "relation size")
    else:
        raise _err(f"{format_type(t)} is not allowed here (expected a value type: R, a "
                   "tensor or a pair)", loc)


def check_pred(p: Pred, env: TypeEnv, loc: Loc | None = None) -> None:
    loc = pick_loc(p.loc, loc)
    if isinstance(p, (PTrue, PFalse)):
        return
    if isinstance(p, Cmp):
        check_affine(p.lhs, env, loc)
        check_affine(p.rhs, env, loc)
    elif isinstance(p, RelCall):
        rel = env.rel_type(p.name)
        if rel is None:
            raise _err(f"{p.name} is not a relation ({role_text(env, p.name)})", loc)
        if len(rel.sizes) != len(p.args):
            raise _err(f"relation {p.name}: {format_type(rel)} takes {len(rel.sizes)} "
                       f"indices, found {len(p.args)}", loc)
        for a in p.args:
            check_affine(a, env, loc)
    elif isinstance(p, (And, Or)):
        check_pred(p.a, env, loc)
        check_pred(p.b, env, loc)
    elif isinstance(p, Exists):
        check_size(p.size, env, loc, "range of exists")
        check_pred(p.body, env.with_index(p.idx, p.size), loc)
    else:
        raise _err(f"not a predicate: {p!r}", loc)


# ---------------------------------------------------------------------------------------------
# type_of (core)

_TYPE_MEMO: "weakref.WeakKeyDictionary[Node, dict[tuple, Type]]" = weakref.WeakKeyDictionary()


def type_of(e: Expr, env: TypeEnv) -> Type:
    """The type of a core expression; `TypeCheckError` if it is ill-typed or not core.

    Memoised per (node, roles and types of its free names), so later passes may call it on
    every subterm cheaply.
    """
    return _type(e, env, e.loc)


def _type(e: Expr, env: TypeEnv, loc: Loc | None) -> Type:
    loc = pick_loc(e.loc, loc)
    if isinstance(e, Var):
        t = env.var_type(e.name)
        if t is None:
            raise _err(f"{e.name} is not a variable ({role_text(env, e.name)})"
                       if env.role(e.name) else f"undefined variable {e.name}", loc)
        return t
    if isinstance(e, Const):
        return REAL
    if isinstance(e, IndexValue):
        check_affine(e.a, env, loc, "index value")
        return REAL
    key = tuple((n, env._key_info(n)) for n in free_names(e))
    memo = _TYPE_MEMO.get(e)
    if memo is not None:
        hit = memo.get(key)
        if hit is not None:
            return hit
    t = _type_rule(e, env, loc)
    if memo is None:
        memo = _TYPE_MEMO.setdefault(e, {})
    memo[key] = t
    return t


def _expect_real(t: Type, what: str, loc: Loc | None) -> None:
    if not isinstance(t, TReal):
        raise _err(f"{what} must be R, found {format_type(t)}", loc)


def _type_rule(e: Expr, env: TypeEnv, loc: Loc | None) -> Type:
    if isinstance(e, (Add, Mul)):
        op = "+" if isinstance(e, Add) else "*"
        _expect_real(_type(e.a, env, loc), f"left operand of {op}", pick_loc(e.a.loc, loc))
        _expect_real(_type(e.b, env, loc), f"right operand of {op}",
                     pick_loc(e.b.loc, loc))
        return REAL
    if isinstance(e, Call):
        arity = builtin_arity(e.fn)
        if arity is None:
            raise _err(f"unknown function {e.fn}", loc)
        if arity != (len(e.args), len(e.params)):
            raise _err(f"{e.fn} takes {arity[0]} argument(s) and {arity[1]} constant "
                       f"parameter(s), found {len(e.args)} and {len(e.params)}", loc)
        for k, a in enumerate(e.args):
            _expect_real(_type(a, env, loc), f"argument {k + 1} of {e.fn}",
                         pick_loc(a.loc, loc))
        return REAL
    if isinstance(e, Pair):
        return TPair(_type(e.a, env, loc), _type(e.b, env, loc))
    if isinstance(e, Proj):
        # A tensor of pairs projects elementwise: [n](t1, t2) ~ ([n]t1, [n]t2) (SPEC 4, P2).
        t = _type(e.e, env, loc)
        dims = shape_of(t)
        inner = scalar_of(t)
        if not isinstance(inner, TPair):
            raise _err(f"projection .{e.k} needs a pair, found {format_type(t)}", loc)
        if e.k not in (0, 1):
            raise _err(f"projection .{e.k}: pairs have components .0 and .1", loc)
        return tensor(dims, inner.a if e.k == 0 else inner.b)
    if isinstance(e, (Gen, Sum, Extremum)):
        word = "gen" if isinstance(e, Gen) else "sum" if isinstance(e, Sum) else e.op
        check_size(e.size, env, loc, f"range of {word} {e.idx}")
        body = _type(e.body, env.with_index(e.idx, e.size), loc)
        if isinstance(e, Gen):
            return TArr(e.size, body)
        _expect_real(body, f"body of {word} {e.idx}", pick_loc(e.body.loc, loc))
        return REAL
    if isinstance(e, Access):
        t = _type(e.e, env, loc)
        for a in e.idx:
            check_affine(a, env, loc)
        return access_result(t, len(e.idx), loc)
    if isinstance(e, Iverson):
        check_pred(e.pred, env, loc)
        return _type(e.e, env, loc)
    if isinstance(e, Let):
        tv = _type(e.value, env, loc)
        return _type(e.body, env.with_var(e.name, tv), loc)
    if isinstance(e, Box):
        return box_type(e.fn, e.part, [_type(a, env, loc) for a in e.args], loc)
    if isinstance(e, DefCall):
        raise _err(f"call of {e.name} is not core: defs must be elaborated (inlined) first", loc)
    raise _err(f"not an expression: {e!r}", loc)


def box_type(fn: str, part: int, arg_types: Sequence[Type], loc: Loc | None) -> Type:
    """The type of output `part` of the linear-algebra box `fn` (SPEC 13)."""
    for k, t in enumerate(arg_types):
        if not isinstance(scalar_of(t), TReal) or not shape_of(t):
            raise _err(f"argument {k + 1} of {fn} must be a tensor of R, found "
                       f"{format_type(t)}", loc)
    try:
        return tensor(boxes.out_shape(fn, part, [shape_of(t) for t in arg_types]))
    except ValueError as err:
        raise _err(str(err), loc) from None


def access_result(t: Type, k: int, loc: Loc | None) -> Type:
    """The type of `e[a1..ak]` for `e : t` (peels k array dimensions).

    A pair of tensors with the same leading dimensions is accessed componentwise (the
    struct-of-arrays reading `([n]t1, [n]t2) ~ [n](t1, t2)` of SPEC 4, rule P7)."""
    if isinstance(t, TPair) and k > 0:
        return TPair(access_result(t.a, k, loc), access_result(t.b, k, loc))
    out = t
    for _ in range(k):
        if not isinstance(out, TArr):
            raise _err(f"access with {k} ind{'ex' if k == 1 else 'ices'} needs a tensor with at "
                       f"least {k} dimension{'s' if k > 1 else ''}, found {format_type(t)}", loc)
        out = out.elem
    return out


# ---------------------------------------------------------------------------------------------
# Bounds: Fourier-Motzkin over index ranges, sizes and guard facts

_Con = tuple[tuple[tuple[str, int], ...], int]  # sum(c * v) + const >= 0
_FM_CAP = 400       # give up (no proof) past this many constraints
_BRANCH_CAP = 16    # disjunctive facts: at most this many case splits


def _mk_con(terms: Mapping[str, int], const: int) -> _Con | bool:
    """Normalised constraint; True if trivially satisfied, False if contradictory.

    Dividing by the gcd of the coefficients and flooring the constant is sound for integer
    points (and tightens: 2i <= 2N - 1 gives i <= N - 1)."""
    items = [(v, c) for v, c in terms.items() if c]
    if not items:
        return const >= 0
    g = 0
    for _, c in items:
        g = math.gcd(g, abs(c))
    if g > 1:
        items = [(v, c // g) for v, c in items]
        const = const // g
    return (tuple(sorted(items)), const)


def _aff_con(a: Affine) -> _Con | bool:
    return _mk_con(dict(a.terms), a.const)


def _infeasible(cons: Iterable[_Con]) -> bool:
    """True when the constraints have no rational (hence no integer) solution."""
    cur: dict[tuple, int] = {}
    for terms, c in cons:
        if terms not in cur or c < cur[terms]:
            cur[terms] = c
    while cur:
        occ: dict[str, list[int]] = {}
        for terms in cur:
            for v, c in terms:
                occ.setdefault(v, [0, 0])[0 if c > 0 else 1] += 1
        v = min(occ, key=lambda x: (occ[x][0] * occ[x][1] - occ[x][0] - occ[x][1], x))
        pos, neg, nxt = [], [], {}
        for terms, c in cur.items():
            coeff = dict(terms).get(v, 0)
            if coeff > 0:
                pos.append((terms, c, coeff))
            elif coeff < 0:
                neg.append((terms, c, -coeff))
            else:
                nxt[terms] = c
        for pt, pc, pk in pos:
            for nt, nc, nk in neg:
                acc: dict[str, int] = {}
                for name, c in pt:
                    acc[name] = acc.get(name, 0) + c * nk
                for name, c in nt:
                    acc[name] = acc.get(name, 0) + c * pk
                acc.pop(v, None)
                con = _mk_con(acc, pc * nk + nc * pk)
                if con is False:
                    return True
                if con is True:
                    continue
                t, c = con
                if t not in nxt or c < nxt[t]:
                    nxt[t] = c
        if len(nxt) > _FM_CAP:
            return False
        cur = nxt
    return False


def _pred_branches(p: Pred, env: TypeEnv) -> list[list[Affine]]:
    """DNF of what `p` tells about indices: a list of alternatives, each a list of affine
    expressions known to be >= 0.  No alternatives: `p` is false."""
    if isinstance(p, PTrue):
        return [[]]
    if isinstance(p, PFalse):
        return []
    if isinstance(p, Cmp):
        d = p.rhs - p.lhs
        if p.op == "<":
            return [[d - 1]]
        if p.op == "<=":
            return [[d]]
        return [[d, -d]]
    if isinstance(p, RelCall):  # a relation is false outside its shape
        rel = env.rel_type(p.name)
        if rel is None or len(rel.sizes) != len(p.args):
            return [[]]
        out: list[Affine] = []
        for a, n in zip(p.args, rel.sizes):
            out += [a, n - 1 - a]
        return [out]
    if isinstance(p, And):
        left, right = _pred_branches(p.a, env), _pred_branches(p.b, env)
        if len(left) * len(right) > _BRANCH_CAP:  # too many cases: keep the smaller side
            return left if len(left) <= len(right) else right
        return [a + b for a in left for b in right]
    if isinstance(p, Or):
        both = _pred_branches(p.a, env) + _pred_branches(p.b, env)
        return both if len(both) <= _BRANCH_CAP else [[]]
    if isinstance(p, Exists):
        t = fresh(p.idx, free_names(p) | env.names.keys())
        body = subst(p.body, {p.idx: Affine.var(t)})
        rng = [Affine.var(t), p.size - 1 - Affine.var(t)]
        return [rng + b for b in _pred_branches(body, env)]
    return [[]]


def _base_facts(env: TypeEnv) -> list[Affine]:
    out: list[Affine] = []
    for name, (role, info) in env.bounded.items():
        if role == INDEX:
            out += [Affine.var(name), info - 1 - Affine.var(name)]
        elif role == SIZE:
            out.append(Affine.var(name))
    return out


def _relevant(goal: Affine, facts: list[Affine]) -> list[Affine]:
    """The facts connected to the goal's variables (FM only needs those)."""
    want = set(goal.vars())
    pending = list(facts)
    chosen: list[Affine] = []
    changed = True
    while changed:
        changed = False
        rest = []
        for f in pending:
            if f.vars() & want or not f.vars():
                chosen.append(f)
                want |= f.vars()
                changed = True
            else:
                rest.append(f)
        pending = rest
    return chosen


def prove_nonneg(goal: Affine, env: TypeEnv) -> bool:
    """Whether `goal >= 0` follows from the index ranges, sizes and facts of `env`."""
    if goal.is_const():
        return goal.const >= 0
    base = _base_facts(env)
    branches: list[list[Affine]] = [[]]
    for p in env.facts:
        new = [b + c for b in branches for c in _pred_branches(p, env)]
        if len(new) > _BRANCH_CAP:
            continue  # drop this fact rather than explode
        branches = new
    negated = -goal - 1  # goal <= -1
    for branch in branches:
        facts = _relevant(goal, base + branch)
        cons: list[_Con] = []
        contradiction = False
        for f in facts + [negated]:
            c = _aff_con(f)
            if c is False:
                contradiction = True
                break
            if c is not True:
                cons.append(c)
        if not contradiction and not _infeasible(cons):
            return False
    return True


def provably_in_range(a: Affine, n: Affine, env: TypeEnv) -> bool:
    """Whether `0 <= a < n` holds wherever this point of the program is evaluated."""
    return prove_nonneg(a, env) and prove_nonneg(n - 1 - a, env)


def access_warning(target: Expr, idx: Sequence[Affine], t: Type, env: TypeEnv,
                   loc: Loc | None) -> TLWarning | None:
    """A warning for `target[idx]` (target of type t) if some index is not provably in range."""
    dims = shape_of(t)
    bad = [(a, n) for a, n in zip(idx, dims) if not provably_in_range(a, n, env)]
    if not bad:
        return None
    name = target.name if isinstance(target, Var) else "tensor"
    shown = f"{name}[{', '.join(format_affine(a) for a in idx)}]"
    why = "; ".join(f"0 <= {format_affine(a)} < {format_affine(n)}" for a, n in bad)
    return TLWarning(f"access {shown} may be out of bounds: cannot prove {why} (reads "
                     "outside give 0; guard the access with an Iverson bracket if intended)",
                     loc)


def bounds_warnings(d: Def) -> list[TLWarning]:
    """Bounds warnings for every access of a core def (see the module docstring)."""
    out: list[TLWarning] = []
    seen: set[tuple[str, Loc | None]] = set()

    def go(e: Node, env: TypeEnv, loc: Loc | None) -> None:
        loc = pick_loc(e.loc, loc)
        if isinstance(e, (Gen, Sum, Extremum)):
            go(e.body, env.with_index(e.idx, e.size), loc)
        elif isinstance(e, Let):
            go(e.value, env, loc)
            go(e.body, env.with_var(e.name, type_of(e.value, env)), loc)
        elif isinstance(e, Iverson):
            go(e.e, env.with_fact(e.pred), loc)
        elif isinstance(e, Access):
            w = access_warning(e.e, e.idx, type_of(e.e, env), env, loc)
            if w is not None and (w.message, w.loc) not in seen:
                seen.add((w.message, w.loc))
                out.append(w)
            go(e.e, env, loc)
        elif isinstance(e, Expr):
            for c in children(e):
                if isinstance(c, Expr):
                    go(c, env, loc)

    go(d.body, param_env(d), d.loc)
    return out


# ---------------------------------------------------------------------------------------------
# Name rules (surface defs, before elaboration)


def _binder_error(kind: str, name: str, role: str, loc: Loc | None) -> TypeCheckError:
    return _err(f"{kind} {name} has the same name as the {role} {name} in scope "
                "(a name may not be reused in another role)", loc)


def check_names(d: Def) -> None:
    """Rules 2-4 of the module docstring; raises `TypeCheckError`."""
    scope: dict[str, str] = {}
    origin: dict[str, str] = {}
    for p in d.params:
        if p.name in scope:
            raise _err(f"parameter {p.name} of {d.name} is declared twice",
                       pick_loc(p.loc, d.loc))
        scope[p.name] = SIZE if isinstance(p.type, TSize) else \
            REL if isinstance(p.type, TRel) else VAR
        origin[p.name] = "parameter"
    e: Expr = d.body
    loc = d.loc
    while isinstance(e, Let):
        loc = pick_loc(e.loc, loc)
        _names_in(e.value, scope, loc)
        if e.name in scope:
            what = origin[e.name]
            if what == "statement":
                raise _err(f"{e.name} is already defined by an earlier statement of {d.name}",
                           loc)
            raise _err(f"statement {e.name} redefines the {what} {e.name} of {d.name}", loc)
        scope[e.name] = VAR
        origin[e.name] = "statement"
        e = e.body
    _names_in(e, scope, pick_loc(e.loc, loc))


def _names_in(e: Node, scope: Mapping[str, str], loc: Loc | None) -> None:
    loc = pick_loc(e.loc, loc)
    if isinstance(e, (Gen, Sum, Exists, Extremum)):
        role = scope.get(e.idx)
        if role is not None and role != INDEX:
            word = e.op if isinstance(e, Extremum) else \
                {Gen: "gen", Sum: "sum", Exists: "exists"}[type(e)]
            raise _binder_error(f"{word} index", e.idx, role, loc)
        _names_in(e.body, {**scope, e.idx: INDEX}, loc)
    elif isinstance(e, Let):
        role = scope.get(e.name)
        if role is not None and role != VAR:
            raise _binder_error("let variable", e.name, role, loc)
        _names_in(e.value, scope, loc)
        _names_in(e.body, {**scope, e.name: VAR}, loc)
    elif isinstance(e, (Expr, Pred)):
        for c in e.fields():
            for x in (c if isinstance(c, tuple) else (c,)):
                if isinstance(x, (Expr, Pred)):
                    _names_in(x, scope, loc)


# ---------------------------------------------------------------------------------------------
# Defs and modules


def param_env(d: Def) -> TypeEnv:
    """The environment of a def's body: its parameters (types checked: sizes in types must be
    size parameters of the def, in any order)."""
    sizes = TypeEnv()
    for p in d.params:
        if isinstance(p.type, TSize):
            sizes = sizes.with_size(p.name)
    for p in d.params:
        try:
            check_type(p.type, sizes, pick_loc(p.loc, d.loc), allow=(TSize, TRel))
        except TypeCheckError as err:
            raise _err(f"parameter {p.name} of {d.name}: {err.message}", err.loc) from None
    return TypeEnv.of_params(d.params)


def check_ret_type(d: Def, env: TypeEnv) -> None:
    if d.ret is not None:
        try:
            check_type(d.ret, env, d.loc)
        except TypeCheckError as err:
            raise _err(f"return type of {d.name}: {err.message}", err.loc) from None


def _return_loc(d: Def) -> Loc | None:
    e, loc = d.body, d.loc
    while isinstance(e, Let):
        loc = pick_loc(e.loc, loc)
        e = e.body
    return pick_loc(e.loc, loc)


@dataclass(frozen=True)
class CheckedDef:
    core: Def            # elaborated core def; `ret` is the declared or inferred type
    ret_type: Type
    warnings: tuple[TLWarning, ...]


def check_def(d: Def, earlier: Mapping[str, Def] | None = None, *,
              later: Iterable[str] = (), derived: Mapping[str, DerivedDef] | None = None,
              end_line: int | None = None, derive: DeriveCore | None = None) -> CheckedDef:
    """Check and elaborate one surface def.  `earlier`: the core defs it may call; `later`,
    `derived`: names of later defs and of derived defs (for precise error messages);
    `end_line`: where the next definition starts (locations past it are not this def's);
    `derive`: the programs of the derived defs it calls (`pipeline.derived_core`)."""
    token = None
    if d.loc is not None:
        token = _SPAN.set((d.loc.source, d.loc.line, end_line or math.inf))
    try:
        return _check_def(d, earlier, later, derived, derive)
    finally:
        if token is not None:
            _SPAN.reset(token)


def _check_def(d: Def, earlier: Mapping[str, Def] | None, later: Iterable[str],
               derived: Mapping[str, DerivedDef] | None,
               derive: DeriveCore | None) -> CheckedDef:
    from tensorlang.check.elaborate import elaborate_def  # elaborate imports this module

    check_names(d)
    env = param_env(d)
    check_ret_type(d, env)
    warnings: list[TLWarning] = []
    core = elaborate_def(d, earlier or {}, later=later, derived=derived, warnings=warnings,
                         derive=derive)
    t = type_of(core.body, env if core.params == d.params else param_env(core))
    if d.ret is not None and t is not d.ret:
        raise _err(f"{d.name} is declared to return {format_type(d.ret)}, but its body has "
                   f"type {format_type(t)}", _return_loc(d))
    if core.ret is not t:
        core = Def(core.name, core.params, t, core.body, loc=d.loc)
    return CheckedDef(core, t, tuple(warnings))


class Signature(NamedTuple):
    """Parameters and return type of a function (derived defs, SPEC 2.5)."""

    params: tuple[Param, ...]
    ret: Type

    def __str__(self) -> str:
        ps = ", ".join(f"{p.name}: {format_type(p.type)}" for p in self.params)
        return f"({ps}) -> {format_type(self.ret)}"


def _tuple_type(ts: Sequence[Type]) -> Type:
    """n-tuples nest to the right: (a, b, c) is (a, (b, c))."""
    out = ts[-1]
    for t in reversed(ts[:-1]):
        out = TPair(t, out)
    return out


def derived_signature(dd: DerivedDef, params: Sequence[Param], ret: Type,
                      loc: Loc | None = None) -> Signature:
    """The signature of `dd` given its function's parameters and return type (SPEC 2.5)."""
    loc = pick_loc(dd.loc, loc)
    kind, f = dd.kind, dd.fn
    if kind not in DERIVED_KINDS:
        raise _err(f"unknown derived function {kind} (expected one of "
                   f"{', '.join(DERIVED_KINDS)})", loc)
    by_name = {p.name: p for p in params}
    for x in dd.wrt:
        if x not in by_name:
            raise _err(f"{kind}({f}, ...): {x} is not a parameter of {f} (parameters: "
                       f"{', '.join(by_name) or 'none'})", loc)
        if not is_real_valued(by_name[x].type):
            raise _err(f"{kind}({f}, ...): cannot differentiate with respect to {x}: expected a "
                       f"real-valued parameter (R, a tensor of R or a pair of those), found "
                       f"{format_type(by_name[x].type)}", loc)
    if len(set(dd.wrt)) != len(dd.wrt):
        raise _err(f"{kind}({f}, ...): a parameter is named twice in {', '.join(dd.wrt)}", loc)
    xs = list(dd.wrt) or [p.name for p in params if is_real_valued(p.type)]
    if not xs:
        raise _err(f"{kind}({f}): {f} has no real-valued parameter to differentiate", loc)
    types = [by_name[x].type for x in xs]
    taken = set(by_name)

    def new_param(name: str, t: Type) -> Param:
        if name in taken:
            raise _err(f"{kind}({f}, ...): the new parameter {name} clashes with the parameter "
                       f"{name} of {f}", loc)
        taken.add(name)
        return Param(name, t)

    if kind in ("grad", "hessian", "hvp") and not isinstance(ret, TReal):
        raise _err(f"{kind}({f}, ...) needs {f} to return R, but it returns {format_type(ret)}",
                   loc)
    if kind in ("hvp", "hessian", "jacobian") and len(xs) != 1:
        raise _err(f"{kind}({f}, ...) differentiates with respect to exactly one parameter, "
                   f"found {len(xs)} ({', '.join(xs)})", loc)
    ps = tuple(params)
    if kind == "jvp":
        return Signature(ps + tuple(new_param(f"d_{x}", t) for x, t in zip(xs, types)),
                         TPair(ret, ret))
    if kind == "vjp":
        return Signature(ps + (new_param("d_y", ret),), _tuple_type([ret, *types]))
    if kind == "grad":
        return Signature(ps, _tuple_type(types))
    if kind == "hvp":
        return Signature(ps + (new_param("v", types[0]),), types[0])
    x_shape = _real_shape(types[0], f"{kind}({f}, {xs[0]}): parameter {xs[0]}", loc)
    if kind == "hessian":
        return Signature(ps, tensor(x_shape + x_shape))
    y_shape = _real_shape(ret, f"{kind}({f}, {xs[0]}): the result of {f}", loc)
    return Signature(ps, tensor(y_shape + x_shape))


def _real_shape(t: Type, what: str, loc: Loc | None) -> tuple[Affine, ...]:
    if not isinstance(scalar_of(t), TReal):
        raise _err(f"{what} must be R or a tensor of R, found {format_type(t)}", loc)
    return shape_of(t)


@dataclass
class CheckedModule:
    """The checked module: elaborated core defs and derived defs, in source order."""

    defs: dict[str, Def]
    derived: dict[str, DerivedDef]
    ret_types: dict[str, Type]
    warnings: list[TLWarning]
    order: list[str]
    derived_types: dict[str, Signature]
    filename: str = "<input>"


def _with_file(loc: Loc | None, filename: str) -> Loc | None:
    """Locations built without a source get the module's file name."""
    if loc is None or loc.source is not None or filename == "<input>":
        return loc
    return Loc(Source(filename, ""), loc.line, loc.col, loc.end_col)


def check_module(defs: Sequence[Def | DerivedDef], filename: str = "<input>",
                 derive: DeriveCore | None = None) -> CheckedModule:
    """Check a module: each def against the defs before it (see the module docstring).
    `derive` gives the programs of derived defs that later defs call."""
    try:
        return _check_module(defs, filename, derive)
    except TLError as err:
        err.loc = _with_file(err.loc, filename)
        raise


def _check_module(items: Sequence[Def | DerivedDef], filename: str,
                  derive: DeriveCore | None) -> CheckedModule:
    out = CheckedModule({}, {}, {}, [], [], {}, filename)
    first: dict[str, Loc | None] = {}
    for k, item in enumerate(items):
        if not isinstance(item, (Def, DerivedDef)):
            raise _err(f"expected a def, found {type(item).__name__}", getattr(item, "loc", None))
        if item.name in first:
            where = f" (line {first[item.name].line})" if first[item.name] else ""
            raise _err(f"{item.name} is already defined{where}", item.loc)
        first[item.name] = item.loc
        later = [x.name for x in items[k + 1:]]
        nxt = items[k + 1].loc if k + 1 < len(items) else None
        if isinstance(item, Def):
            limits.check_def(item)  # before any recursive walk of it (syntax/limits.py)
            try:
                checked = check_def(item, out.defs, later=later, derived=out.derived,
                                    end_line=nxt.line if nxt is not None else None,
                                    derive=derive)
            except RecursionError:
                raise limits.too_deep(item.loc) from None
            limits.check_def(checked.core, "after inlining the defs it calls")
            out.defs[item.name] = checked.core
            out.ret_types[item.name] = checked.ret_type
            out.warnings.extend(TLWarning(w.message, _with_file(w.loc, filename))
                                for w in checked.warnings)
        else:
            sig = _check_derived(item, out, later)
            out.derived[item.name] = item
            out.derived_types[item.name] = sig
            out.ret_types[item.name] = sig.ret
        out.order.append(item.name)
    return out


def _check_derived(dd: DerivedDef, m: CheckedModule, later: Sequence[str]) -> Signature:
    if dd.fn == dd.name:
        raise _err(f"{dd.name} = {dd.kind}({dd.fn}, ...): recursion is not allowed", dd.loc)
    if dd.fn in m.defs:
        base = m.defs[dd.fn]
        params, ret = base.params, m.ret_types[dd.fn]
    elif dd.fn in m.derived_types:
        params, ret = m.derived_types[dd.fn]
    elif dd.fn in later:
        raise _err(f"{dd.fn} is not defined before this point (a derived def may only use "
                   "earlier defs)", dd.loc)
    else:
        raise _err(f"{dd.kind}({dd.fn}, ...): {dd.fn} is not defined", dd.loc)
    return derived_signature(dd, params, ret, dd.loc)
