"""Catalogue entries for the normalisation rules L1-L9, P1-P8 (and P0), G1-G4 (SPEC 4, 10).

Each entry draws well-typed instances of the rule's left-hand side *inside a random
context*, with random subterms from `tensorlang.testing` (its scopes, types, expressions,
predicates and indices), random sizes (0 included), values and relations:

    top-level lets  ->  an optional gen  ->  0-3 inner frames  ->  the redex

Inner frames are `[p] * _`, `(gen q:n. _)[a]`, and for scalar holes `sum q:n. _` (stacked
sums make nests), `_ + e`, `e * _`; for let-lifting also `let s = e in _`.  Instances respect
the pass's pre-condition: let-lifting takes anything, pair elimination let-lifted programs
(let-free subterms, lets only at the top), gen push-out struct-of-arrays programs (also no
pairs).  `apply` is the rule at its first redex in pre-order (`passes.rewrite.apply_rule`);
for P8 it is P8 followed by the projection pushes P1-P7 on the two new right-hand sides,
the unit the paper proves cost-neutral.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from hypothesis import strategies as st

from tensorlang import pipeline, testing
from tensorlang.ir.ast import (
    REAL, Access, Add, Affine, Call, Def, Expr, Gen, Iverson, Let, Max, Min, Mul, Pair, Param, Proj,
    Sum, TArr, TPair, Type, Var,
)
from tensorlang.passes import genpush, letlift, pairelim
from tensorlang.passes.rewrite import Ctx, apply_rule, rename_unique, soa

from .catalogue import PassEntry, Rule, register, register_pass
from .normal_forms import is_gen_pushed, is_let_lifted, is_struct_of_arrays

BUDGET = 20.0     # bound on the magnitude of every generated subterm's entries
DEPTH = 2         # depth of random subterms
MAX_SIZE = 3      # size parameters range over 0..MAX_SIZE


@dataclass(frozen=True)
class Family:
    """What the instances of a pass's rules may contain (its pre-condition)."""

    name: str
    lets: bool        # lets inside subterms and as inner frames
    pairs: bool       # pair types in scopes and subterms


LETLIFT = Family("letlift", lets=True, pairs=True)
PAIRELIM = Family("pairelim", lets=False, pairs=True)
GENPUSH = Family("genpush", lets=False, pairs=False)


@dataclass
class Names:
    """Binder names for contexts and redexes, apart from the `testing` generator's
    (`i j k l m`, `t1 t2 ...`) and parameter names."""

    n_idx: int = 0
    n_let: int = 0
    taken: set[str] = field(default_factory=set)

    def index(self) -> str:
        self.n_idx += 1
        return f"q{self.n_idx}"

    def let(self) -> str:
        self.n_let += 1
        return f"s{self.n_let}"


# ---------------------------------------------------------------------------------------------
# Drawing pieces


def _ex(draw: Callable, sc: testing.Scope, t: Type, fam: Family, depth: int = DEPTH,
        budget: float = BUDGET) -> tuple[Expr, float]:
    te = draw(testing.typed_expressions(sc, t, max_depth=depth, budget=budget, lets=fam.lets,
                                  no_pairs=not fam.pairs, max_size=MAX_SIZE))
    return te.expr, te.bound


def _type(draw: Callable, sc: testing.Scope, fam: Family, rank: int = 2, pairs: int = 1) -> Type:
    return draw(testing.types(sc, rank=rank, pairs=pairs if fam.pairs else 0,
                        no_pairs=not fam.pairs, max_size=MAX_SIZE))


def _size(draw: Callable, sc: testing.Scope) -> Affine:
    opts = [Affine.var(n) for n in sc.sizes] + [Affine.lit(2), Affine.lit(1), Affine.lit(0)]
    opts += [Affine.var(n) + 1 for n in sc.sizes]
    return draw(st.sampled_from(opts))


def _index(draw: Callable, sc: testing.Scope, n: Affine) -> Affine:
    """An index into a dimension of size n; one in four is out of range (`n` or `-1`) so
    that zero extension is exercised."""
    form = draw(st.integers(0, 7))
    if form == 6:
        return n
    if form == 7:
        return Affine.lit(-1)
    return draw(testing.indices(sc, n, max_size=MAX_SIZE))


def _pred(draw: Callable, sc: testing.Scope):
    return draw(testing.predicates(sc, max_depth=1, max_size=MAX_SIZE))


def _scope(draw: Callable, fam: Family) -> testing.Scope:
    return draw(testing.scopes(max_size=MAX_SIZE, no_pairs=not fam.pairs, max_params=3))


# ---------------------------------------------------------------------------------------------
# Contexts


Wrap = Callable[[Expr], Expr]


def _compose(wraps: list[Wrap]) -> Wrap:
    def wrap(e: Expr) -> Expr:
        for w in reversed(wraps):
            e = w(e)
        return e
    return wrap


def _context(draw: Callable, sc: testing.Scope, hole: Type, fam: Family, names: Names,
             inner: bool = True) -> tuple[testing.Scope, Wrap]:
    """Frames around a hole of type `hole`: returns the hole's scope and the wrapper."""
    wraps: list[Wrap] = []
    for _ in range(draw(st.integers(0, 2))):  # top-level lets (allowed by every pass)
        u = _type(draw, sc, fam)
        value, bound = _ex(draw, sc, u, fam)
        s = names.let()
        wraps.append(lambda h, s=s, value=value: Let(s, value, h))
        sc = sc.with_var(s, u, bound)
    if inner and draw(st.booleans()):  # a gen around everything else
        n, q = _size(draw, sc), names.index()
        wraps.append(lambda h, q=q, n=n: Gen(q, n, h))
        sc = sc.with_index(q, n)
    kinds = ["iverson", "gen_access"]
    if hole is REAL:
        kinds += ["sum", "sum", "add", "mul"]
    if fam.lets:
        kinds += ["let"]
    for _ in range(draw(st.integers(0, 3)) if inner else 0):
        kind = draw(st.sampled_from(kinds))
        if kind == "iverson":
            p = _pred(draw, sc)
            wraps.append(lambda h, p=p: Iverson(p, h))
        elif kind == "gen_access":
            n, q = _size(draw, sc), names.index()
            a = _index(draw, sc, n)
            wraps.append(lambda h, q=q, n=n, a=a: Access(Gen(q, n, h), (a,)))
            sc = sc.with_index(q, n)
        elif kind == "sum":
            n, q = _size(draw, sc), names.index()
            wraps.append(lambda h, q=q, n=n: Sum(q, n, h))
            sc = sc.with_index(q, n)
        elif kind in ("add", "mul"):
            other, _ = _ex(draw, sc, REAL, fam, budget=4.0)
            op = Add if kind == "add" else Mul
            left = draw(st.booleans())
            wraps.append(lambda h, o=other, op=op, left=left: op(h, o) if left else op(o, h))
        else:
            u = _type(draw, sc, fam)
            value, bound = _ex(draw, sc, u, fam)
            s = names.let()
            wraps.append(lambda h, s=s, value=value: Let(s, value, h))
            sc = sc.with_var(s, u, bound)
    return sc, _compose(wraps)


Redex = Callable[[Callable, testing.Scope], Expr]


def _instance(draw: Callable, sc: testing.Scope, hole: Type, redex: Redex, fam: Family,
              names: Names, inner: bool = True) -> tuple[Def, dict[str, Any]]:
    inner_sc, wrap = _context(draw, sc, hole, fam, names, inner)
    body = wrap(redex(draw, inner_sc))
    d0 = rename_unique(Def("f", sc.params, None, body))  # subterms may reuse binder names
    d = Def("f", sc.params, Ctx(d0).type_of(d0.body), d0.body)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return d, testing.random_args(d, sc.sizes, seed)


Builder = Callable[[Callable, testing.Scope, Names], tuple[testing.Scope, Type, Redex, bool]]


def _strategy(build: Builder, fam: Family) -> Callable[[], st.SearchStrategy]:
    """A zero-argument factory of the instance strategy for one rule."""
    @st.composite
    def instances(draw: Callable) -> tuple[Def, dict[str, Any]]:
        names = Names()
        sc = _scope(draw, fam)
        sc, hole, redex, inner = build(draw, sc, names)
        return _instance(draw, sc, hole, redex, fam, names, inner)

    return lambda: instances()


def _let_of(draw: Callable, sc: testing.Scope, t: Type, fam: Family, names: Names) -> Expr:
    """`let x = e1 in e2` with e2 : t (often reading x)."""
    u = _type(draw, sc, fam)
    e1, b1 = _ex(draw, sc, u, fam)
    x = names.let()
    e2, _ = _ex(draw, sc.with_var(x, u, b1), t, fam)
    return Let(x, e1, e2)


# ---------------------------------------------------------------------------------------------
# Let-lifting


def _b_L1(draw, sc, names):
    op = draw(st.sampled_from([Add, Mul]))
    left = draw(st.booleans())

    def redex(draw, sc):
        let = _let_of(draw, sc, REAL, LETLIFT, names)
        other, _ = _ex(draw, sc, REAL, LETLIFT, budget=4.0)
        return op(let, other) if left else op(other, let)
    return sc, REAL, redex, True


_SAFE_FNS = ("sin", "tanh", "sigmoid", "square", "max", "min")


def _b_L2(draw, sc, names):
    fn = draw(st.sampled_from(_SAFE_FNS))

    def redex(draw, sc):
        arity = 2 if fn in ("max", "min") else 1
        k = draw(st.integers(0, arity - 1))
        args = []
        for j in range(arity):
            if j == k:
                args.append(_let_of(draw, sc, REAL, LETLIFT, names))
            else:
                args.append(_ex(draw, sc, REAL, LETLIFT, budget=4.0)[0])
        return Call(fn, tuple(args), ())
    return sc, REAL, redex, True


def _b_L3(draw, sc, names):
    ta, tb = _type(draw, sc, LETLIFT, pairs=0), _type(draw, sc, LETLIFT, pairs=0)
    left = draw(st.booleans())

    def redex(draw, sc):
        if left:
            return Pair(_let_of(draw, sc, ta, LETLIFT, names), _ex(draw, sc, tb, LETLIFT)[0])
        return Pair(_ex(draw, sc, ta, LETLIFT)[0], _let_of(draw, sc, tb, LETLIFT, names))
    return sc, TPair(ta, tb), redex, True


def _b_L4(draw, sc, names):
    t, other = _type(draw, sc, LETLIFT, pairs=0), _type(draw, sc, LETLIFT, pairs=0)
    k = draw(st.integers(0, 1))
    pt = TPair(t, other) if k == 0 else TPair(other, t)
    return sc, t, lambda draw, sc: Proj(_let_of(draw, sc, pt, LETLIFT, names), k), True


def _b_L5(draw, sc, names):
    t, n = _type(draw, sc, LETLIFT, rank=1, pairs=0), _size(draw, sc)

    def redex(draw, sc):
        return Access(_let_of(draw, sc, TArr(n, t), LETLIFT, names), (_index(draw, sc, n),))
    return sc, t, redex, True


def _b_L6(draw, sc, names):
    t = _type(draw, sc, LETLIFT)

    def redex(draw, sc):
        u = _type(draw, sc, LETLIFT)
        inner = _let_of(draw, sc, u, LETLIFT, names)
        y = names.let()
        body, _ = _ex(draw, sc.with_var(y, u, BUDGET), t, LETLIFT)
        return Let(y, inner, body)
    return sc, t, redex, True


def _b_L7(draw, sc, names):
    t = _type(draw, sc, LETLIFT)
    return sc, t, lambda draw, sc: Iverson(_pred(draw, sc), _let_of(draw, sc, t, LETLIFT,
                                                                     names)), True


def _b_L8(draw, sc, names):
    t, n = _type(draw, sc, LETLIFT, rank=1), _size(draw, sc)
    uses_i = draw(st.booleans())

    def redex(draw, sc):
        q = names.index()
        inner = sc.with_index(q, n)
        u = _type(draw, sc, LETLIFT)
        e1, b1 = _ex(draw, inner if uses_i else sc, u, LETLIFT)
        x = names.let()
        e2, _ = _ex(draw, inner.with_var(x, u, b1), t, LETLIFT)
        return Gen(q, n, Let(x, e1, e2))
    return sc, soa(TArr(n, t)), redex, True


def _b_L9(draw, sc, names):
    depth = draw(st.integers(1, 2))

    def redex(draw, sc):
        binders = [(names.index(), _size(draw, sc)) for _ in range(depth)]
        full = sc
        for q, n in binders:
            full = full.with_index(q, n)
        sub = sc  # e1 sees a random subset of the nest's indices
        for q, n in binders:
            if draw(st.booleans()):
                sub = sub.with_index(q, n)
        u = _type(draw, sc, LETLIFT)
        e1, b1 = _ex(draw, sub, u, LETLIFT)
        x = names.let()
        e2, _ = _ex(draw, full.with_var(x, u, b1), REAL, LETLIFT, budget=4.0)
        body: Expr = Let(x, e1, e2)
        for q, n in reversed(binders):
            body = Sum(q, n, body)
        return body
    return sc, REAL, redex, True


def _b_L10(draw, sc, names):
    """`max i:n. let x = e1 in e2` (or min), e1 using i or not."""
    n = _size(draw, sc)
    uses_i = draw(st.booleans())
    kind = draw(st.sampled_from([Max, Min]))

    def redex(draw, sc):
        q = names.index()
        inner = sc.with_index(q, n)
        u = _type(draw, sc, LETLIFT)
        e1, b1 = _ex(draw, inner if uses_i else sc, u, LETLIFT)
        x = names.let()
        e2, _ = _ex(draw, inner.with_var(x, u, b1), REAL, LETLIFT, budget=4.0)
        return kind(q, n, Let(x, e1, e2))
    return sc, REAL, redex, True


# ---------------------------------------------------------------------------------------------
# Pair elimination


def _b_P0(draw, sc, names):
    a, b = _type(draw, sc, PAIRELIM, rank=1, pairs=0), _type(draw, sc, PAIRELIM, rank=1,
                                                             pairs=0)
    tensor_of_pairs = draw(st.booleans())
    n = _size(draw, sc)
    t = TArr(n, TPair(a, b)) if tensor_of_pairs else TPair(a, b)
    sc = sc.with_param(Param("zp", t))
    if tensor_of_pairs and draw(st.booleans()):  # zp[a].k: P0 at an access base
        k = draw(st.integers(0, 1))
        hole = a if k == 0 else b
        return sc, hole, lambda draw, sc: Proj(Access(Var("zp"), (_index(draw, sc, n),)),
                                               k), True
    return sc, soa(t), lambda draw, sc: Var("zp"), True


def _pair_type(draw, sc, fam=PAIRELIM) -> tuple[Type, Type]:
    return _type(draw, sc, fam, pairs=0), _type(draw, sc, fam, pairs=0)


def _b_P1(draw, sc, names):
    ta, tb = _pair_type(draw, sc)
    k = draw(st.integers(0, 1))

    def redex(draw, sc):
        return Proj(Pair(_ex(draw, sc, ta, PAIRELIM)[0], _ex(draw, sc, tb, PAIRELIM)[0]), k)
    return sc, (ta, tb)[k], redex, True


def _b_P2(draw, sc, names):
    ta, tb = _type(draw, sc, PAIRELIM, rank=1, pairs=0), _type(draw, sc, PAIRELIM, rank=1,
                                                               pairs=0)
    n, k = _size(draw, sc), draw(st.integers(0, 1))

    def redex(draw, sc):
        q = names.index()
        body, _ = _ex(draw, sc.with_index(q, n), TPair(ta, tb), PAIRELIM)
        return Proj(Gen(q, n, body), k)
    return sc, soa(TArr(n, (ta, tb)[k])), redex, True


def _b_P3(draw, sc, names):
    ta, tb = _type(draw, sc, PAIRELIM, rank=1, pairs=0), _type(draw, sc, PAIRELIM, rank=1,
                                                               pairs=0)
    n, k = _size(draw, sc), draw(st.integers(0, 1))

    def redex(draw, sc):
        e, _ = _ex(draw, sc, TArr(n, TPair(ta, tb)), PAIRELIM)
        return Proj(Access(e, (_index(draw, sc, n),)), k)
    return sc, (ta, tb)[k], redex, True


def _b_P4(draw, sc, names):
    ta, tb = _pair_type(draw, sc)
    k = draw(st.integers(0, 1))

    def redex(draw, sc):
        return Proj(Iverson(_pred(draw, sc), _ex(draw, sc, TPair(ta, tb), PAIRELIM)[0]), k)
    return sc, (ta, tb)[k], redex, True


def _b_P5(draw, sc, names):
    ta, tb = _type(draw, sc, PAIRELIM, rank=1, pairs=0), _type(draw, sc, PAIRELIM, rank=1,
                                                               pairs=0)
    n = _size(draw, sc)

    def redex(draw, sc):
        q = names.index()
        inner = sc.with_index(q, n)
        return Gen(q, n, Pair(_ex(draw, inner, ta, PAIRELIM)[0],
                              _ex(draw, inner, tb, PAIRELIM)[0]))
    return sc, soa(TArr(n, TPair(ta, tb))), redex, True


def _b_P6(draw, sc, names):
    ta, tb = _pair_type(draw, sc)

    def redex(draw, sc):
        return Iverson(_pred(draw, sc), Pair(_ex(draw, sc, ta, PAIRELIM)[0],
                                             _ex(draw, sc, tb, PAIRELIM)[0]))
    return sc, TPair(ta, tb), redex, True


def _b_P7(draw, sc, names):
    ta, tb = _type(draw, sc, PAIRELIM, rank=1, pairs=0), _type(draw, sc, PAIRELIM, rank=1,
                                                               pairs=0)
    n = _size(draw, sc)

    def redex(draw, sc):
        e1, _ = _ex(draw, sc, TArr(n, ta), PAIRELIM)
        e2, _ = _ex(draw, sc, TArr(n, tb), PAIRELIM)
        return Access(Pair(e1, e2), (_index(draw, sc, n),))
    return sc, TPair(ta, tb), redex, True


def _b_P8(draw, sc, names):
    ta, tb = _pair_type(draw, sc)
    t = _type(draw, sc, PAIRELIM)

    def redex(draw, sc):
        e, bound = _ex(draw, sc, TPair(ta, tb), PAIRELIM, depth=3)
        x = names.let()
        body, _ = _ex(draw, sc.with_var(x, TPair(ta, tb), bound), t, PAIRELIM)
        return Let(x, e, body)
    return sc, t, redex, False  # let-lifted: the binding sits in the top-level block


# ---------------------------------------------------------------------------------------------
# Gen push-out


def _b_G1(draw, sc, names):
    t, n = _type(draw, sc, GENPUSH, rank=2), _size(draw, sc)
    more = isinstance(t, TArr) and draw(st.booleans())
    hole = t.elem if more else t

    def redex(draw, sc):
        q = names.index()
        body, _ = _ex(draw, sc.with_index(q, n), t, GENPUSH)
        idx = (_index(draw, sc, n),) + ((_index(draw, sc, t.size),) if more else ())
        return Access(Gen(q, n, body), idx)
    return sc, hole, redex, True


def _b_G2(draw, sc, names):
    t, n = _type(draw, sc, GENPUSH, rank=1), _size(draw, sc)

    def redex(draw, sc):
        q = names.index()
        body, _ = _ex(draw, sc.with_index(q, n), t, GENPUSH)
        return Iverson(_pred(draw, sc), Gen(q, n, body))
    return sc, TArr(n, t), redex, True


def _b_G3(draw, sc, names):
    n, m = _size(draw, sc), _size(draw, sc)
    rank2 = draw(st.booleans())
    t = TArr(n, TArr(m, REAL)) if rank2 else TArr(n, REAL)
    sc = sc.with_param(Param("zt", t))
    partial = rank2 and draw(st.booleans())
    hole = t.elem if partial else t

    def redex(draw, sc):
        if partial:
            return Access(Var("zt"), (_index(draw, sc, n),))
        return Var("zt")
    return sc, hole, redex, True


def _b_G4(draw, sc, names):
    n, m = _size(draw, sc), _size(draw, sc)
    t = _type(draw, sc, GENPUSH, rank=1)

    def redex(draw, sc):
        e, _ = _ex(draw, sc, TArr(n, TArr(m, t)), GENPUSH)
        return Access(Access(e, (_index(draw, sc, n),)), (_index(draw, sc, m),))
    return sc, t, redex, True


# ---------------------------------------------------------------------------------------------
# Registration


def _apply(rule_id: str) -> Callable[[Def], Def]:
    return lambda d: apply_rule(rule_id, d)


_ENTRIES: list[tuple[str, str, dict[str, str], Builder, Family, Callable[[Def], Def] | None]] = [
    ("L1", "letlift", letlift.SCHEMAS, _b_L1, LETLIFT, None),
    ("L2", "letlift", letlift.SCHEMAS, _b_L2, LETLIFT, None),
    ("L3", "letlift", letlift.SCHEMAS, _b_L3, LETLIFT, None),
    ("L4", "letlift", letlift.SCHEMAS, _b_L4, LETLIFT, None),
    ("L5", "letlift", letlift.SCHEMAS, _b_L5, LETLIFT, None),
    ("L6", "letlift", letlift.SCHEMAS, _b_L6, LETLIFT, None),
    ("L7", "letlift", letlift.SCHEMAS, _b_L7, LETLIFT, None),
    ("L8", "letlift", letlift.SCHEMAS, _b_L8, LETLIFT, None),
    ("L9", "letlift", letlift.SCHEMAS, _b_L9, LETLIFT, None),
    ("L10", "letlift", letlift.SCHEMAS, _b_L10, LETLIFT, None),
    ("P0", "pairelim", pairelim.SCHEMAS, _b_P0, PAIRELIM, None),
    ("P1", "pairelim", pairelim.SCHEMAS, _b_P1, PAIRELIM, None),
    ("P2", "pairelim", pairelim.SCHEMAS, _b_P2, PAIRELIM, None),
    ("P3", "pairelim", pairelim.SCHEMAS, _b_P3, PAIRELIM, None),
    ("P4", "pairelim", pairelim.SCHEMAS, _b_P4, PAIRELIM, None),
    ("P5", "pairelim", pairelim.SCHEMAS, _b_P5, PAIRELIM, None),
    ("P6", "pairelim", pairelim.SCHEMAS, _b_P6, PAIRELIM, None),
    ("P7", "pairelim", pairelim.SCHEMAS, _b_P7, PAIRELIM, None),
    ("P8", "pairelim", pairelim.SCHEMAS, _b_P8, PAIRELIM, pairelim.apply_p8_pushed),
    ("G1", "genpush", genpush.SCHEMAS, _b_G1, GENPUSH, None),
    ("G2", "genpush", genpush.SCHEMAS, _b_G2, GENPUSH, None),
    ("G3", "genpush", genpush.SCHEMAS, _b_G3, GENPUSH, None),
    ("G4", "genpush", genpush.SCHEMAS, _b_G4, GENPUSH, None),
]

for _name, _pass, _schemas, _build, _fam, _custom in _ENTRIES:
    register(Rule(_name, _pass, _schemas[_name], _strategy(_build, _fam),
                  _custom if _custom is not None else _apply(_name)))

NORMALIZE_RULES: tuple[str, ...] = tuple(e[0] for e in _ENTRIES)

# Whole passes, each fed the normal form of the passes before it (the pipeline up to there).
for _stage, _check in (("letlift", is_let_lifted), ("pairelim", is_struct_of_arrays),
                       ("genpush", is_gen_pushed)):
    register_pass(PassEntry(_stage, partial(pipeline.run_to, name=pipeline.previous(_stage)),
                            pipeline.stage(_stage).load(), _check))

__all__ = ["NORMALIZE_RULES", "LETLIFT", "PAIRELIM", "GENPUSH", "Family"]
