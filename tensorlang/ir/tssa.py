"""Tensor SSA (SPEC 5): the IR of derivatives, the simplifier and the backends.

A `Program` is the original definition's parameters, a list of statements `v = rhs` in
dependency order, and an output (a variable, or a right-nested pair tree of variables).
Every right-hand side is ONE masked primitive over generator indices I and summation
indices J, with a predicate P over I and J and affine accesses A:

    input     v = x  or  x.0.1                                     `Input`
    const     v = gen I. [P] * c                                   `ConstRhs`
    add       v = gen I. [P] * ([P1] * u1[A1] + [P2] * u2[A2])     `AddRhs`
    map       v = gen I. [P] * f(u1[A1], ...)                      `MapRhs`
    contract  v = gen I. sum J. [P] * c * u1[A1] * u2[A2]          `ContractRhs`
    reduce    v = gen I. sum J. [P] * c * u1[A1]                   `ReduceRhs`

Canonical conventions (enforced by the node constructors, so that structurally equal
statements are the same interned node and CSE is a dictionary lookup):

  * generator index k is named `ix[0] + str(k)` (default `i0, i1, ...`), summation index k
    `ix[1] + str(k)` (`j0, ...`), an `exists` bound at nesting depth d `ix[2] + str(d)`
    (`k0, ...`).  `ix` is chosen per program so that it never clashes with a parameter.
  * add operands (with their supports) and contract operands are in a fixed total order,
    and the summation indices of contract/reduce are permuted to the least such form;
  * predicates are canonical: `and`/`or` flattened, deduplicated and sorted; comparisons
    become `L <= R` or `L == R` with integer-tightened coefficients and a fixed sign;
    comparisons implied (or refuted) by the index ranges are dropped (or become false).

An operand `u[A]` reads with zero extension (SPEC 2.2): out of `u`'s range it is 0, which
is what `sum j:n. [j == a] * u[j]` means.  In an add, `P1`/`P2` are the operands' supports
(where they are structurally non-zero): the addition is counted only where both hold.
`to_core` turns a program into the equivalent core `Def` (a `let` per statement) whose
SPEC 3 cost is exactly the cost of the primitives: `c *` with c == 1 is omitted, a
contraction costs its multiplications where P holds and `max(0, m - 1)` additions per
output point (m = number of J points where P holds), an add costs one addition where
P, P1 and P2 hold, a map one call where P holds.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence, Union

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.semantics import builtins as B
from tensorlang.ir.ast import (Affine, And, Cmp, Exists, Node, Or, Param, PFalse, Pred, PTrue, RelCall,
                  TArr, TPair, TReal, TRel, TSize, Type)

IX: tuple[str, str, str] = ("i", "j", "k")
"""Default prefixes of generator, summation and `exists` index names."""

Out = Union[str, tuple]
"""An output: a variable name, or a pair `(Out, Out)` (n-tuples nest to the right)."""

AffineLike = Union[Affine, int, str]


def aff(x: AffineLike) -> Affine:
    """An `Affine` from an Affine, an integer literal or an index/size name."""
    if isinstance(x, Affine):
        return x
    if isinstance(x, str):
        return Affine.var(x)
    return Affine.lit(int(x))


# ---------------------------------------------------------------------------------------------
# A total order on nodes (used to sort operands, conjuncts and summation indices)

_KEYS: "weakref.WeakKeyDictionary[Node, tuple]" = weakref.WeakKeyDictionary()


def node_key(x: Any) -> tuple:
    """A deterministic, totally ordered key for nodes, tuples and scalars."""
    if isinstance(x, Node):
        hit = _KEYS.get(x)
        if hit is None:
            hit = (type(x).__name__, tuple(node_key(f) for f in x.fields()))
            _KEYS[x] = hit
        return hit
    if isinstance(x, tuple):
        return ("~", tuple(node_key(v) for v in x))
    if isinstance(x, bool):
        return ("?", int(x))
    if isinstance(x, int):
        return ("#", x)
    if isinstance(x, float):
        return ("%", repr(x))
    if isinstance(x, str):
        return ("'", x)
    if x is None:
        return ("-",)
    raise TypeError(f"no key for {type(x).__name__}")


# ---------------------------------------------------------------------------------------------
# Canonical predicates


def conjuncts(p: Pred) -> list[Pred]:
    """The flattened conjuncts of `p` (`true` has none)."""
    if isinstance(p, PTrue):
        return []
    if isinstance(p, And):
        return conjuncts(p.a) + conjuncts(p.b)
    return [p]


def disjuncts(p: Pred) -> list[Pred]:
    if isinstance(p, PFalse):
        return []
    if isinstance(p, Or):
        return disjuncts(p.a) + disjuncts(p.b)
    return [p]


def _chain(cls: type, parts: Sequence[Pred]) -> Pred:
    out = parts[0]
    for q in parts[1:]:
        out = cls(out, q)
    return out


def _gcd(terms: Iterable[tuple[str, int]]) -> int:
    g = 0
    for _, c in terms:
        g = math.gcd(g, abs(c))
    return g


def _bound(d: Affine, ranges: Mapping[str, Affine], upper: bool) -> Affine:
    """The least (or greatest) value of `d` over the index ranges, affine in the sizes."""
    out = Affine.lit(d.const)
    for name, c in d.terms:
        size = ranges.get(name)
        if size is None:
            out = out + Affine(((name, c),), 0)
        elif (c > 0) == upper:
            out = out + (size - 1) * c
    return out


def _sizes_nonneg(a: Affine) -> bool:
    """`a >= 0` for all non-negative sizes."""
    return a.const >= 0 and all(c >= 0 for _, c in a.terms)


def _sizes_neg(a: Affine) -> bool:
    """`a < 0` for all non-negative sizes."""
    return a.const < 0 and all(c <= 0 for _, c in a.terms)


def _split(op: str, d: Affine) -> Pred:
    """`d >= 0` as `L <= R`, or `d == 0` (leading term positive) as `L == R`, both sides
    with positive coefficients."""
    pos = Affine(tuple((n, c) for n, c in d.terms if c > 0), 0)
    neg = Affine(tuple((n, -c) for n, c in d.terms if c < 0), 0)
    if d.const >= 0:
        pos = pos + d.const
    else:
        neg = neg + (-d.const)
    return Cmp(op, neg, pos) if op == "<=" else Cmp(op, pos, neg)


def _canon_cmp(p: Cmp, ranges: Mapping[str, Affine]) -> Pred:
    d = p.rhs - p.lhs
    if p.op == "<":
        d = d - 1
    if p.op in ("<", "<="):  # d >= 0
        if d.is_const():
            return PTrue() if d.const >= 0 else PFalse()
        g = _gcd(d.terms)
        d = Affine(tuple((n, c // g) for n, c in d.terms), d.const // g)  # floor: integers
        if _sizes_nonneg(_bound(d, ranges, upper=False)):
            return PTrue()
        if _sizes_neg(_bound(d, ranges, upper=True)):
            return PFalse()
        return _split("<=", d)
    # d == 0
    if d.is_const():
        return PTrue() if d.const == 0 else PFalse()
    g = _gcd(d.terms)
    if d.const % g:
        return PFalse()
    d = Affine(tuple((n, c // g) for n, c in d.terms), d.const // g)
    if d.terms[0][1] < 0:
        d = -d
    lo, hi = _bound(d, ranges, upper=False), _bound(d, ranges, upper=True)
    if _sizes_nonneg(lo - 1) or _sizes_neg(hi):  # d > 0 or d < 0 on the whole range
        return PFalse()
    return _split("==", d)


@functools.lru_cache(maxsize=1 << 16)
def _canon_cached(p: Pred, ranges: tuple[tuple[str, Affine], ...], ex: str, depth: int) -> Pred:
    return _canon(p, dict(ranges), ex, depth)


def _canon(p: Pred, ranges: dict[str, Affine], ex: str, depth: int) -> Pred:
    if isinstance(p, (PTrue, PFalse, RelCall)):
        return p
    if isinstance(p, Cmp):
        return _canon_cmp(p, ranges)
    if isinstance(p, And):
        parts: list[Pred] = []
        for q in conjuncts(p):
            parts.extend(conjuncts(_canon(q, ranges, ex, depth)))
        if any(isinstance(q, PFalse) for q in parts):
            return PFalse()
        return _assemble(And, parts, PTrue())
    if isinstance(p, Or):
        parts = []
        for q in disjuncts(p):
            parts.extend(disjuncts(_canon(q, ranges, ex, depth)))
        if any(isinstance(q, PTrue) for q in parts):
            return PTrue()
        return _assemble(Or, parts, PFalse())
    if isinstance(p, Exists):
        name = f"{ex}{depth}"
        size = p.size
        body = p.body if p.idx == name else A.subst(p.body, {p.idx: Affine.var(name)})
        inner = dict(ranges)
        inner[name] = size
        body = _canon(body, inner, ex, depth + 1)
        if isinstance(body, PFalse):
            return body
        if name not in A.free_names(body):  # exists over a range: the range is non-empty
            return _canon(And(Cmp("<=", Affine.lit(1), size), body), ranges, ex, depth)
        return Exists(name, size, body)
    raise TypeError(f"not a predicate: {p!r}")


def _assemble(cls: type, parts: list[Pred], unit: Pred) -> Pred:
    uniq = {id(q): q for q in parts}
    ordered = sorted(uniq.values(), key=node_key)
    return _chain(cls, ordered) if ordered else unit


def canon_pred(p: Pred, ranges: Mapping[str, Affine] | Iterable[tuple[str, Affine]] = (),
               ex: str = IX[2]) -> Pred:
    """The canonical form of `p`, given the ranges `0 <= name < size` of its index names.

    Names without a range are sizes (non-negative).  `ex` is the prefix of canonical
    `exists` names.  Idempotent, and it keeps the meaning within the ranges.
    """
    items = tuple(sorted(ranges.items() if isinstance(ranges, Mapping) else ranges))
    return _canon_cached(p, items, ex, 0)


# ---------------------------------------------------------------------------------------------
# Right-hand sides


class Operand(Node):
    """`var[idx]`: a zero-extended affine read of a statement variable (`var` if scalar)."""

    __slots__ = ("var", "idx")
    _fields = ("var", "idx")
    var: str
    idx: tuple[Affine, ...]

    @classmethod
    def _norm(cls, var: str, idx: Iterable[AffineLike] = ()) -> tuple:
        return (str(var), tuple(aff(a) for a in idx))

    def rename(self, mapping: Mapping[str, str]) -> "Operand":
        return Operand(mapping.get(self.var, self.var), self.idx)

    def subst(self, mapping: Mapping[str, Affine]) -> "Operand":
        return Operand(self.var, tuple(a.subst(mapping) for a in self.idx))


class Rhs(Node):
    """Base of statement right-hand sides.  Uniform views: `dims`, `sdims`, `pred`,
    `operands`, `coeff`, and `gen_names()` / `sum_names()`."""

    __slots__ = ()
    kind: ClassVar[str] = ""
    dims: tuple[Affine, ...] = ()
    sdims: tuple[Affine, ...] = ()
    operands: tuple[Operand, ...] = ()
    ix: tuple[str, str, str] = IX

    @property
    def pred(self) -> Pred:  # overridden by a field where the primitive has a mask
        return PTrue()

    @property
    def coeff(self) -> float:
        return 1.0

    def gen_names(self) -> tuple[str, ...]:
        return tuple(f"{self.ix[0]}{k}" for k in range(len(self.dims)))

    def sum_names(self) -> tuple[str, ...]:
        return tuple(f"{self.ix[1]}{k}" for k in range(len(self.sdims)))

    def gen_ids(self) -> tuple[Affine, ...]:
        """The generator indices as affines (the identity access `v[i0, i1, ...]`)."""
        return tuple(Affine.var(n) for n in self.gen_names())

    def sum_ids(self) -> tuple[Affine, ...]:
        return tuple(Affine.var(n) for n in self.sum_names())

    def ranges(self) -> dict[str, Affine]:
        return dict(zip(self.gen_names() + self.sum_names(), self.dims + self.sdims))

    def with_operands(self, ops: Sequence[Operand]) -> "Rhs":
        """The same primitive reading other operands (re-canonicalised)."""
        vals = [tuple(ops) if f == "operands" else getattr(self, f) for f in self._fields]
        return type(self)(*vals)

    def rename_vars(self, mapping: Mapping[str, str]) -> "Rhs":
        if not self.operands:
            return self
        return self.with_operands([o.rename(mapping) for o in self.operands])


def _ix(ix: Iterable[str]) -> tuple[str, str, str]:
    t = tuple(str(s) for s in ix)
    if len(t) != 3 or len(set(t)) != 3:
        raise ValueError(f"bad index prefixes {t!r}")
    return t  # type: ignore[return-value]


def _ranges(ix: tuple[str, str, str], dims: Sequence[Affine],
            sdims: Sequence[Affine] = ()) -> dict[str, Affine]:
    out = {f"{ix[0]}{k}": d for k, d in enumerate(dims)}
    out.update({f"{ix[1]}{k}": d for k, d in enumerate(sdims)})
    return out


class Input(Rhs):
    """`v = x` or `v = x.0.1`: a parameter, or a projection path into a pair parameter."""

    __slots__ = ("param", "path")
    _fields = ("param", "path")
    kind = "input"
    param: str
    path: tuple[int, ...]

    @classmethod
    def _norm(cls, param: str, path: Iterable[int] = ()) -> tuple:
        path = tuple(int(k) for k in path)
        if any(k not in (0, 1) for k in path):
            raise ValueError(f"bad projection path {path}")
        return (str(param), path)


class ConstRhs(Rhs):
    """`v = gen I. [P] * c`.  A zero constant is canonically unmasked."""

    __slots__ = ("ix", "dims", "pred", "value")
    _fields = ("ix", "dims", "pred", "value")
    kind = "const"
    value: float

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred,
              value: float) -> tuple:
        ix, dims = _ix(ix), tuple(aff(d) for d in dims)
        value = float(value)
        pred = canon_pred(pred, _ranges(ix, dims), ix[2])
        if value == 0.0 or isinstance(pred, PFalse):
            value, pred = 0.0, PTrue()
        return (ix, dims, pred, value)


def _add_key(pair: tuple[Pred, Operand]) -> tuple:
    return node_key(pair[1]) + node_key(pair[0])


class AddRhs(Rhs):
    """`v = gen I. [P] * ([P1] * u1[A1] + [P2] * u2[A2])`; `supports` = (P1, P2)."""

    __slots__ = ("ix", "dims", "pred", "supports", "operands")
    _fields = ("ix", "dims", "pred", "supports", "operands")
    kind = "add"
    supports: tuple[Pred, Pred]

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred,
              supports: Iterable[Pred], operands: Iterable[Operand]) -> tuple:
        ix, dims = _ix(ix), tuple(aff(d) for d in dims)
        rng = _ranges(ix, dims)
        pred = canon_pred(pred, rng, ix[2])
        outer = {id(q) for q in conjuncts(pred)}
        sups = []
        for s in supports:  # conjuncts already in the mask are redundant in a support
            s = canon_pred(s, rng, ix[2])
            if not isinstance(s, PFalse):
                s = _assemble(And, [q for q in conjuncts(s) if id(q) not in outer], PTrue())
            sups.append(s)
        ops = tuple(operands)
        if len(sups) != 2 or len(ops) != 2:
            raise ValueError("add takes two supports and two operands")
        pairs = sorted(zip(sups, ops), key=_add_key)
        return (ix, dims, pred, (pairs[0][0], pairs[1][0]), (pairs[0][1], pairs[1][1]))


class MapRhs(Rhs):
    """`v = gen I. [P] * f(u1[A1], ...)` for a builtin `f` with constant `params`."""

    __slots__ = ("ix", "dims", "pred", "fn", "params", "operands")
    _fields = ("ix", "dims", "pred", "fn", "params", "operands")
    kind = "map"
    fn: str
    params: tuple[float, ...]

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred, fn: str,
              params: Iterable[float], operands: Iterable[Operand]) -> tuple:
        ix, dims = _ix(ix), tuple(aff(d) for d in dims)
        params, ops = tuple(float(c) for c in params), tuple(operands)
        arity = A.BUILTINS.get(fn)
        if arity is None or arity != (len(ops), len(params)):
            raise ValueError(f"bad builtin call {fn}/{len(ops)} with {len(params)} params")
        return (ix, dims, canon_pred(pred, _ranges(ix, dims), ix[2]), fn, params, ops)


class _SumRhs(Rhs):
    """Shared canonicalisation of contract and reduce: the least form over the orderings of
    the summation indices and of the (commutative) operands."""

    __slots__ = ()
    _arity: ClassVar[int] = 0
    _MAX_PERM: ClassVar[int] = 5  # beyond 5! orderings keep the given order of J

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], sdims: Iterable[AffineLike],
              pred: Pred, coeff: float, operands: Iterable[Operand]) -> tuple:
        ix = _ix(ix)
        dims, sdims = tuple(aff(d) for d in dims), tuple(aff(d) for d in sdims)
        ops, coeff = tuple(operands), float(coeff)
        if len(ops) != cls._arity:
            raise ValueError(f"{cls.kind} takes {cls._arity} operand(s), got {len(ops)}")
        if coeff == 0.0:  # `0 * u` is a structural zero to SPEC 3: write a const instead
            raise ValueError(f"{cls.kind} with coefficient 0")
        jn = [f"{ix[1]}{k}" for k in range(len(sdims))]
        perms: Iterable[tuple[int, ...]] = (
            itertools.permutations(range(len(sdims))) if len(sdims) <= cls._MAX_PERM
            else [tuple(range(len(sdims)))])
        best: tuple | None = None
        for perm in perms:
            ren = {jn[perm[k]]: Affine.var(jn[k]) for k in range(len(sdims)) if perm[k] != k}
            sd = tuple(sdims[perm[k]] for k in range(len(sdims)))
            pr = canon_pred(A.subst(pred, ren) if ren else pred, _ranges(ix, dims, sd), ix[2])
            ren_ops = tuple(o.subst(ren) if ren else o for o in ops)
            for order in set(itertools.permutations(ren_ops)):
                cand = (order, sd, pr)  # accesses first: J in order of first use
                key = node_key(cand)
                if best is None or key < best[0]:
                    best = (key, cand)
        assert best is not None
        order, sd, pr = best[1]
        return (ix, dims, sd, pr, coeff, order)


class ContractRhs(_SumRhs):
    """`v = gen I. sum J. [P] * c * u1[A1] * u2[A2]`: a masked binary einsum."""

    __slots__ = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    _fields = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    kind = "contract"
    _arity = 2


class ReduceRhs(_SumRhs):
    """`v = gen I. sum J. [P] * c * u1[A1]`: a masked unary einsum (J empty: a masked,
    scaled gather)."""

    __slots__ = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    _fields = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    kind = "reduce"
    _arity = 1


KINDS: dict[str, type] = {c.kind: c for c in (Input, ConstRhs, AddRhs, MapRhs, ContractRhs,
                                              ReduceRhs)}


class Stmt(Node):
    """`var = rhs`."""

    __slots__ = ("var", "rhs")
    _fields = ("var", "rhs")
    var: str
    rhs: Rhs


# ---------------------------------------------------------------------------------------------
# Constructors from arbitrary index names (renamed to the canonical ones)

IndexList = Sequence[tuple[str, AffineLike]]
OperandLike = Union[Operand, tuple]


def _canon_names(ix: tuple[str, str, str], gen: IndexList,
                 sums: IndexList = ()) -> tuple[dict[str, Affine], tuple, tuple]:
    ren: dict[str, Affine] = {}
    for k, (name, _) in enumerate(gen):
        ren[name] = Affine.var(f"{ix[0]}{k}")
    for k, (name, _) in enumerate(sums):
        ren[name] = Affine.var(f"{ix[1]}{k}")
    if len(ren) != len(gen) + len(sums):
        raise ValueError("index names must be distinct")
    return ren, tuple(aff(s) for _, s in gen), tuple(aff(s) for _, s in sums)


def operand(x: OperandLike) -> Operand:
    """`Operand` from an Operand, `(var, [affine-likes])` or a scalar variable name."""
    if isinstance(x, Operand):
        return x
    if isinstance(x, str):
        return Operand(x, ())
    var, idx = x
    return Operand(var, tuple(aff(a) for a in idx))


def _ren_ops(ren: Mapping[str, Affine], ops: Iterable[OperandLike]) -> tuple[Operand, ...]:
    return tuple(operand(o).subst(ren) for o in ops)


def _ren_pred(ren: Mapping[str, Affine], p: Pred) -> Pred:
    return A.subst(p, ren) if ren else p


def make_const(gen: IndexList, value: float, pred: Pred = PTrue(), ix: Iterable[str] = IX
               ) -> ConstRhs:
    ix = _ix(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return ConstRhs(ix, dims, _ren_pred(ren, pred), value)


def make_add(gen: IndexList, a: OperandLike, b: OperandLike, pred: Pred = PTrue(),
             supports: tuple[Pred, Pred] = (PTrue(), PTrue()), ix: Iterable[str] = IX
             ) -> AddRhs:
    ix = _ix(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return AddRhs(ix, dims, _ren_pred(ren, pred),
                  tuple(_ren_pred(ren, s) for s in supports), _ren_ops(ren, (a, b)))


def make_map(gen: IndexList, fn: str, args: Sequence[OperandLike], pred: Pred = PTrue(),
             params: Sequence[float] = (), ix: Iterable[str] = IX) -> MapRhs:
    ix = _ix(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return MapRhs(ix, dims, _ren_pred(ren, pred), fn, params, _ren_ops(ren, args))


def make_contract(gen: IndexList, sums: IndexList, a: OperandLike, b: OperandLike,
                  pred: Pred = PTrue(), coeff: float = 1.0, ix: Iterable[str] = IX
                  ) -> ContractRhs:
    ix = _ix(ix)
    ren, dims, sdims = _canon_names(ix, gen, sums)
    return ContractRhs(ix, dims, sdims, _ren_pred(ren, pred), coeff, _ren_ops(ren, (a, b)))


def make_reduce(gen: IndexList, sums: IndexList, a: OperandLike, pred: Pred = PTrue(),
                coeff: float = 1.0, ix: Iterable[str] = IX) -> ReduceRhs:
    ix = _ix(ix)
    ren, dims, sdims = _canon_names(ix, gen, sums)
    return ReduceRhs(ix, dims, sdims, _ren_pred(ren, pred), coeff, _ren_ops(ren, (a,)))


# ---------------------------------------------------------------------------------------------
# Types of parameters


def project_type(t: Type, path: Sequence[int]) -> Type:
    """The type of `x.k1.k2...` for `x : t` in struct-of-arrays form
    (`[n](t1, t2) ~ ([n]t1, [n]t2)`)."""
    for k in path:
        t = _proj1(t, k)
    return t


def _proj1(t: Type, k: int) -> Type:
    if isinstance(t, TPair):
        return t.a if k == 0 else t.b
    if isinstance(t, TArr):
        return TArr(t.size, _proj1(t.elem, k))
    raise ValueError(f"projection .{k} of non-pair type {t!r}")


def leaf_paths(t: Type) -> list[tuple[int, ...]]:
    """Projection paths from a (struct-of-arrays) type to its real-tensor leaves."""
    s = A.scalar_of(t)
    if isinstance(s, TPair):
        return [(0,) + p for p in leaf_paths(_proj1(t, 0))] + \
               [(1,) + p for p in leaf_paths(_proj1(t, 1))]
    return [()]


def soa_type(t: Type) -> Type:
    """The struct-of-arrays form of a type: `[n](t1, t2)` becomes `([n]t1, [n]t2)`."""
    if isinstance(A.scalar_of(t), TPair):
        return TPair(soa_type(_proj1(t, 0)), soa_type(_proj1(t, 1)))
    return t


def _is_real_tensor(t: Type) -> bool:
    return isinstance(A.scalar_of(t), TReal)


# ---------------------------------------------------------------------------------------------
# Programs


@dataclass(frozen=True)
class Program:
    """A Tensor-SSA program.  Statement variables are distinct; a plain input statement is
    named after its parameter (`x = x`), an input projection `x_0_1 = x.0.1`."""

    name: str
    params: tuple[Param, ...]
    stmts: tuple[Stmt, ...]
    output: Out
    ret: Type | None = None
    ix: tuple[str, str, str] = IX

    @cached_property
    def defs(self) -> dict[str, Rhs]:
        return {s.var: s.rhs for s in self.stmts}

    @cached_property
    def position(self) -> dict[str, int]:
        return {s.var: k for k, s in enumerate(self.stmts)}

    @cached_property
    def param_types(self) -> dict[str, Type]:
        return {p.name: p.type for p in self.params}

    def size_params(self) -> list[str]:
        return [p.name for p in self.params if isinstance(p.type, TSize)]

    def shape(self, var: str) -> tuple[Affine, ...]:
        """The shape of a statement variable (its generator sizes)."""
        return self.shapes[var]

    @cached_property
    def shapes(self) -> dict[str, tuple[Affine, ...]]:
        out: dict[str, tuple[Affine, ...]] = {}
        for s in self.stmts:
            if isinstance(s.rhs, Input):
                out[s.var] = A.shape_of(project_type(self.param_types[s.rhs.param],
                                                     s.rhs.path))
            else:
                out[s.var] = s.rhs.dims
        return out

    @cached_property
    def users(self) -> dict[str, frozenset[str]]:
        """For every variable, the statements (their variables) that read it."""
        acc: dict[str, set[str]] = {s.var: set() for s in self.stmts}
        for s in self.stmts:
            for o in s.rhs.operands:
                acc.setdefault(o.var, set()).add(s.var)
        return {k: frozenset(v) for k, v in acc.items()}

    def uses(self, var: str) -> frozenset[str]:
        return self.users.get(var, frozenset())

    def output_vars(self) -> list[str]:
        return list(_out_leaves(self.output))

    def inputs(self) -> dict[str, Input]:
        return {s.var: s.rhs for s in self.stmts if isinstance(s.rhs, Input)}

    def __str__(self) -> str:
        return to_text(self)


def _out_leaves(out: Out) -> Iterable[str]:
    if isinstance(out, str):
        yield out
    else:
        for o in out:
            yield from _out_leaves(o)


def _map_out(out: Out, f: Callable[[str], str]) -> Out:
    return f(out) if isinstance(out, str) else tuple(_map_out(o, f) for o in out)


def dce(p: Program) -> Program:
    """Drop statements the output does not (transitively) read."""
    live = set(p.output_vars())
    keep: list[Stmt] = []
    for s in reversed(p.stmts):
        if s.var in live:
            keep.append(s)
            live.update(o.var for o in s.rhs.operands)
    return Program(p.name, p.params, tuple(reversed(keep)), p.output, p.ret, p.ix)


def toposort(p: Program) -> Program:
    """Statements in dependency order (stable: keeps the given order where it is valid)."""
    defs = p.defs
    done: set[str] = set()
    order: list[Stmt] = []
    stmt_of = {s.var: s for s in p.stmts}

    def visit(v: str, stack: set[str]) -> None:
        if v in done:
            return
        if v in stack:
            raise ValueError(f"cyclic definition of {v}")
        stack.add(v)
        for o in defs[v].operands:
            if o.var not in defs:
                raise ValueError(f"{v} reads undefined {o.var}")
            visit(o.var, stack)
        stack.discard(v)
        done.add(v)
        order.append(stmt_of[v])

    for s in p.stmts:
        visit(s.var, set())
    return Program(p.name, p.params, tuple(order), p.output, p.ret, p.ix)


def _prefix_ok(prefix: str, taken: Iterable[str]) -> bool:
    pat = re.compile(re.escape(prefix) + r"[0-9]+")
    return not any(pat.fullmatch(t) for t in taken)


def choose_ix(taken: Iterable[str]) -> tuple[str, str, str]:
    """Index prefixes whose names `<prefix><digits>` clash with none of `taken`."""
    taken = list(taken)
    for cand in itertools.chain([IX], ((f"i{n}_", f"j{n}_", f"k{n}_") for n in itertools.count())):
        if all(_prefix_ok(c, taken) for c in cand):
            return cand
    raise AssertionError("unreachable")


def var_prefix(taken: Iterable[str]) -> str:
    taken = list(taken)
    for cand in itertools.chain(["v", "t", "w"], (f"v{n}_" for n in itertools.count())):
        if _prefix_ok(cand, taken):
            return cand
    raise AssertionError("unreachable")


def input_name(param: str, path: Sequence[int], taken: Iterable[str]) -> str:
    """The statement variable of input `param.path` (the parameter itself when no path)."""
    if not path:
        return param
    base = param + "_" + "_".join(str(k) for k in path)
    name, taken = base, set(taken)
    while name in taken:
        name += "_"
    return name


def renumber(p: Program) -> Program:
    """Canonical statement names: inputs keep their names, the others become `v0, v1, ...`
    in statement order (operands re-sorted by the constructors)."""
    taken = [q.name for q in p.params] + [s.var for s in p.stmts if isinstance(s.rhs, Input)]
    vp = var_prefix(taken)
    mapping: dict[str, str] = {}
    k = 0
    for s in p.stmts:
        if isinstance(s.rhs, Input):
            mapping[s.var] = s.var
        else:
            mapping[s.var] = f"{vp}{k}"
            k += 1
    stmts = tuple(Stmt(mapping[s.var], s.rhs.rename_vars(mapping)) for s in p.stmts)
    return Program(p.name, p.params, stmts, _map_out(p.output, lambda v: mapping[v]),
                   p.ret, p.ix)


# ---------------------------------------------------------------------------------------------
# Builder


class Builder:
    """Builds programs statement by statement; with `share` (default) an emitted right-hand
    side equal to an earlier one returns the earlier variable (CSE by hash-consing).

    The `const`/`add`/`map`/`contract`/`reduce` helpers take index lists `[(name, size)]`
    with any names and operands `(var, [affines or names])`; they rename to the canonical
    index names.  This is the parser-free way to write SSA programs (tests, derivatives).
    """

    def __init__(self, params: Sequence[Param], *, share: bool = True,
                 ix: Iterable[str] | None = None) -> None:
        self.params: list[Param] = list(params)
        self.share = share
        self._ptypes = {q.name: q.type for q in self.params}
        self._taken: set[str] = set(self._ptypes)
        leaves = [input_name(q.name, path, self._taken) for q in self.params
                  for path in leaf_paths(q.type) if path and _is_real_tensor(
                      project_type(q.type, path))]
        self._taken.update(leaves)
        self.ix = _ix(ix) if ix is not None else choose_ix(self._taken)
        self._vp = var_prefix(self._taken)
        self._count = itertools.count()
        self.stmts: list[Stmt] = []
        self.shapes: dict[str, tuple[Affine, ...]] = {}
        self.defs: dict[str, Rhs] = {}
        self._by_rhs: dict[Rhs, str] = {}

    @staticmethod
    def extend(p: Program, *, share: bool = True) -> "Builder":
        """A builder that starts with the statements of `p` (to append to it)."""
        b = Builder(p.params, share=share, ix=p.ix)
        for s in p.stmts:
            b._add(s.var, s.rhs, p.shapes[s.var])
        b._taken.update(s.var for s in p.stmts)
        return b

    def add_param(self, param: Param) -> None:
        if param.name in self._ptypes:
            raise ValueError(f"duplicate parameter {param.name}")
        for path in leaf_paths(param.type):
            if path:
                self._taken.add(input_name(param.name, path, self._taken))
        self.params.append(param)
        self._ptypes[param.name] = param.type
        self._taken.add(param.name)

    # -- emission --------------------------------------------------------------------------

    def _add(self, var: str, rhs: Rhs, shape: tuple[Affine, ...]) -> None:
        self.stmts.append(Stmt(var, rhs))
        self.shapes[var] = shape
        self.defs[var] = rhs
        self._by_rhs.setdefault(rhs, var)

    def _fresh(self) -> str:
        while True:
            name = f"{self._vp}{next(self._count)}"
            if name not in self._taken and name not in self.defs:
                return name

    def input(self, param: str, path: Sequence[int] = ()) -> str:
        """The variable holding input `param.path` (emitted once, whatever `share` says)."""
        rhs = Input(param, tuple(path))
        hit = self._by_rhs.get(rhs)
        if hit is not None:
            return hit
        if param not in self._ptypes:
            raise ValueError(f"no parameter {param}")
        t = project_type(self._ptypes[param], rhs.path)
        if not _is_real_tensor(t):
            raise ValueError(f"input {param}{''.join('.' + str(k) for k in path)} is not a "
                             f"real tensor")
        var = input_name(param, rhs.path, (set(self._ptypes) | set(self.defs)) - {param})
        self._add(var, rhs, A.shape_of(t))
        return var

    def emit(self, rhs: Rhs) -> str:
        """Append `v = rhs` (or reuse an equal statement) and return v."""
        if isinstance(rhs, Input):
            return self.input(rhs.param, rhs.path)
        if self.share:
            hit = self._by_rhs.get(rhs)
            if hit is not None:
                return hit
        for o in rhs.operands:
            shape = self.shapes.get(o.var)
            if shape is None:
                raise ValueError(f"operand {o.var} is not defined")
            if len(shape) != len(o.idx):
                raise ValueError(f"{o.var} has {len(shape)} dimensions, read with {len(o.idx)}")
        var = self._fresh()
        self._add(var, rhs, rhs.dims)
        return var

    def const(self, gen: IndexList, value: float, pred: Pred = PTrue()) -> str:
        return self.emit(make_const(gen, value, pred, self.ix))

    def add(self, gen: IndexList, a: OperandLike, b: OperandLike, pred: Pred = PTrue(),
            supports: tuple[Pred, Pred] = (PTrue(), PTrue())) -> str:
        return self.emit(make_add(gen, a, b, pred, supports, self.ix))

    def map(self, gen: IndexList, fn: str, args: Sequence[OperandLike], pred: Pred = PTrue(),
            params: Sequence[float] = ()) -> str:
        return self.emit(make_map(gen, fn, args, pred, params, self.ix))

    def contract(self, gen: IndexList, sums: IndexList, a: OperandLike, b: OperandLike,
                 pred: Pred = PTrue(), coeff: float = 1.0) -> str:
        return self.emit(make_contract(gen, sums, a, b, pred, coeff, self.ix))

    def reduce(self, gen: IndexList, sums: IndexList, a: OperandLike, pred: Pred = PTrue(),
               coeff: float = 1.0) -> str:
        return self.emit(make_reduce(gen, sums, a, pred, coeff, self.ix))

    def program(self, output: Out, name: str = "f", ret: Type | None = None, *,
                prune: bool = True, canonical_names: bool = True) -> Program:
        """The program so far with this output; `prune` drops dead statements,
        `canonical_names` renumbers the statement variables."""
        for v in _out_leaves(output):
            if v not in self.defs:
                raise ValueError(f"output {v} is not defined")
        p = Program(name, tuple(self.params), tuple(self.stmts), output, ret, self.ix)
        if prune:
            p = dce(p)
        return renumber(p) if canonical_names else p


# ---------------------------------------------------------------------------------------------
# to_core: the equivalent core definition (a let per statement)


def _read(o: Operand) -> A.Expr:
    return A.Access(A.Var(o.var), o.idx) if o.idx else A.Var(o.var)


def _iv(p: Pred, e: A.Expr) -> A.Expr:
    return e if isinstance(p, PTrue) else A.Iverson(p, e)


def _wrap(binder: type, names: Sequence[str], sizes: Sequence[Affine], e: A.Expr) -> A.Expr:
    for name, size in reversed(list(zip(names, sizes))):
        e = binder(name, size, e)
    return e


def _product(coeff: float, ops: Sequence[Operand]) -> A.Expr:
    """`c * u1 * u2` left-associated; `c` omitted when it is 1 (it costs nothing)."""
    factors: list[A.Expr] = ([] if coeff == 1.0 else [A.Const(coeff)]) + [_read(o) for o in ops]
    out = factors[0]
    for f in factors[1:]:
        out = A.Mul(out, f)
    return out


def rhs_to_expr(rhs: Rhs) -> A.Expr:
    """The core expression of one right-hand side (its free variables: operands, sizes,
    relations, and for inputs the parameter)."""
    if isinstance(rhs, Input):
        e: A.Expr = A.Var(rhs.param)
        for k in rhs.path:
            e = A.Proj(e, k)
        return e
    if isinstance(rhs, ConstRhs):
        body: A.Expr = _iv(rhs.pred, A.Const(rhs.value))
    elif isinstance(rhs, AddRhs):
        (s1, s2), (o1, o2) = rhs.supports, rhs.operands
        body = _iv(rhs.pred, A.Add(_iv(s1, _read(o1)), _iv(s2, _read(o2))))
    elif isinstance(rhs, MapRhs):
        body = _iv(rhs.pred, A.Call(rhs.fn, tuple(_read(o) for o in rhs.operands), rhs.params))
    elif isinstance(rhs, _SumRhs):
        body = _wrap(A.Sum, rhs.sum_names(), rhs.sdims,
                     _iv(rhs.pred, _product(rhs.coeff, rhs.operands)))
    else:
        raise TypeError(f"not a right-hand side: {rhs!r}")
    return _wrap(A.Gen, rhs.gen_names(), rhs.dims, body)


def _out_expr(out: Out) -> A.Expr:
    if isinstance(out, str):
        return A.Var(out)
    a, b = out
    return A.Pair(_out_expr(a), _out_expr(b))


def to_core(p: Program) -> A.Def:
    """The equivalent core `Def`: `let v = <rhs> in ...` per statement (plain inputs are the
    parameters themselves and get no `let`).  Interpreter and cost model evaluate SSA
    programs through this."""
    body = _out_expr(p.output)
    for s in reversed(p.stmts):
        if isinstance(s.rhs, Input) and not s.rhs.path and s.var == s.rhs.param:
            continue
        body = A.Let(s.var, rhs_to_expr(s.rhs), body)
    return A.Def(p.name, p.params, p.ret, body)


# ---------------------------------------------------------------------------------------------
# Printer: a list of masked einsums (valid .tl)


def fmt_affine(a: Affine) -> str:
    parts: list[str] = []
    for name, c in a.terms:
        mag = abs(c)
        t = name if mag == 1 else f"{mag}*{name}"
        parts.append(("- " if c < 0 else "+ ") + t)
    if a.const or not parts:
        parts.append(("- " if a.const < 0 else "+ ") + str(abs(a.const)))
    s = " ".join(parts)
    return s[2:] if s.startswith("+ ") else "-" + s[2:]


_ASCII = {"and": " and ", "or": " or ", "<=": "<=", "<": "<", "==": "==", "exists": "exists ",
          "sum": "sum ", "*": " * ", "]*": "] * "}
_UNICODE = {"and": " ∧ ", "or": " ∨ ", "<=": "≤", "<": "<", "==": "=", "exists": "∃",
            "sum": "Σ ", "*": "·", "]*": "]·"}


def fmt_pred(p: Pred, prec: int = 0, unicode: bool = False) -> str:
    """`or` binds looser than `and`; `exists` extends right, so it is parenthesised inside
    a conjunction or disjunction."""
    sym = _UNICODE if unicode else _ASCII
    if isinstance(p, PTrue):
        return "true"
    if isinstance(p, PFalse):
        return "false"
    if isinstance(p, Cmp):
        return f"{fmt_affine(p.lhs)} {sym[p.op]} {fmt_affine(p.rhs)}"
    if isinstance(p, RelCall):
        return f"{p.name}({', '.join(fmt_affine(a) for a in p.args)})"
    if isinstance(p, And):
        s = sym["and"].join(fmt_pred(q, 2, unicode) for q in conjuncts(p))
        return f"({s})" if prec > 1 else s
    if isinstance(p, Or):
        s = sym["or"].join(fmt_pred(q, 1, unicode) for q in disjuncts(p))
        return f"({s})" if prec > 0 else s
    if isinstance(p, Exists):
        s = f"{sym['exists']}{p.idx}:{fmt_affine(p.size)}. {fmt_pred(p.body, 0, unicode)}"
        return f"({s})" if prec > 0 else s
    raise TypeError(repr(p))


def fmt_type(t: Type) -> str:
    if isinstance(t, TReal):
        return "R"
    if isinstance(t, TSize):
        return "size"
    if isinstance(t, TRel):
        return f"rel({', '.join(fmt_affine(s) for s in t.sizes)})"
    if isinstance(t, TPair):
        return f"({fmt_type(t.a)}, {fmt_type(t.b)})"
    if isinstance(t, TArr):
        dims = A.shape_of(t)
        elem = A.scalar_of(t)
        if isinstance(elem, TReal):
            return f"R[{', '.join(fmt_affine(d) for d in dims)}]"
        return "".join(f"[{fmt_affine(d)}]" for d in dims) + fmt_type(elem)
    raise TypeError(repr(t))


def _fmt_num(c: float) -> str:
    return repr(float(c))


def fmt_operand(o: Operand) -> str:
    return f"{o.var}[{', '.join(fmt_affine(a) for a in o.idx)}]" if o.idx else o.var


def _guard(p: Pred, unicode: bool = False) -> str:
    sym = _UNICODE if unicode else _ASCII
    return "" if isinstance(p, PTrue) else f"[{fmt_pred(p, 0, unicode)}{sym[']*']}"


def fmt_rhs(rhs: Rhs, unicode: bool = False) -> str:
    """The right-hand side as a .tl expression (generator indices implicit)."""
    sym = _UNICODE if unicode else _ASCII
    g = functools.partial(_guard, unicode=unicode)
    if isinstance(rhs, Input):
        return rhs.param + "".join(f".{k}" for k in rhs.path)
    if isinstance(rhs, ConstRhs):
        return g(rhs.pred) + _fmt_num(rhs.value)
    if isinstance(rhs, AddRhs):
        (s1, s2), (o1, o2) = rhs.supports, rhs.operands
        inner = f"{g(s1)}{fmt_operand(o1)} + {g(s2)}{fmt_operand(o2)}"
        return f"{g(rhs.pred)}({inner})" if not isinstance(rhs.pred, PTrue) else inner
    if isinstance(rhs, MapRhs):
        args = [fmt_operand(o) for o in rhs.operands] + [_fmt_num(c) for c in rhs.params]
        return f"{g(rhs.pred)}{rhs.fn}({', '.join(args)})"
    if isinstance(rhs, _SumRhs):
        factors = ([] if rhs.coeff == 1.0 else [_fmt_num(rhs.coeff)]) + \
                  [fmt_operand(o) for o in rhs.operands]
        body = g(rhs.pred) + sym["*"].join(factors)
        if rhs.sdims:
            binders = ", ".join(f"{n}:{fmt_affine(s)}"
                                for n, s in zip(rhs.sum_names(), rhs.sdims))
            return f"{sym['sum']}{binders}. {body}"
        return body
    raise TypeError(repr(rhs))


def fmt_stmt(s: Stmt, unicode: bool = False) -> str:
    """`v[i0:N, i1:M] = <rhs>` (the .tl sugar for `v = gen i0:N, i1:M. <rhs>`)."""
    rhs = s.rhs
    lhs = s.var
    if rhs.dims:
        lhs += "[" + ", ".join(f"{n}:{fmt_affine(d)}"
                               for n, d in zip(rhs.gen_names(), rhs.dims)) + "]"
    return f"{lhs} = {fmt_rhs(rhs, unicode)}"


def _fmt_out(out: Out) -> str:
    return out if isinstance(out, str) else f"({_fmt_out(out[0])}, {_fmt_out(out[1])})"


def to_text(p: Program, unicode: bool = False) -> str:
    """One statement per line, like masked einsums; the ASCII text is a valid `.tl` def
    (`unicode`: mathematical notation, Σ ∧ ∨ ≤ ·)."""
    # Types in struct-of-arrays form: `x.0` of `x : [n](R, R)` is typed as `([n]R, [n]R).0`
    params = ", ".join(f"{q.name}: {fmt_type(soa_type(q.type))}" for q in p.params)
    ret = f" -> {fmt_type(soa_type(p.ret))}" if p.ret is not None else ""
    lines = [f"def {p.name}({params}){ret}:"]
    for s in p.stmts:
        if isinstance(s.rhs, Input) and not s.rhs.path and s.var == s.rhs.param:
            continue
        lines.append("    " + fmt_stmt(s, unicode))
    lines.append(f"    return {_fmt_out(p.output)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Direct numpy evaluation and exact cost (agree with interpret/cost_def of to_core)


@dataclass
class _Env:
    sizes: dict[str, int]
    rels: dict[str, np.ndarray]
    values: dict[str, np.ndarray] = field(default_factory=dict)


def _size(a: Affine, env: _Env) -> int:
    return int(a.evaluate(env.sizes))


def _dense_relation(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        if arr.shape != shape:
            raise ValueError(f"relation of shape {arr.shape}, expected {shape}")
        return arr
    coords = arr.astype(np.int64).reshape(-1, len(shape))
    out = np.zeros(shape, dtype=bool)
    ok = np.all((coords >= 0) & (coords < np.array(shape, dtype=np.int64)), axis=1)
    out[tuple(coords[ok].T)] = True
    return out


def _env_of(p: Program, args: Mapping[str, Any]) -> _Env:
    sizes = {q.name: int(args[q.name]) for q in p.params if isinstance(q.type, TSize)}
    env = _Env(sizes, {})
    for q in p.params:
        if isinstance(q.type, TRel):
            shape = tuple(_size(s, env) for s in q.type.sizes)
            env.rels[q.name] = _dense_relation(args[q.name], shape)
    return env


def eval_pred(p: Pred, names: Mapping[str, Any], n: int, env: _Env) -> np.ndarray:
    """`p` at n points; `names` maps index names to int arrays of length n (or ints)."""
    if isinstance(p, PTrue):
        return np.ones(n, dtype=bool)
    if isinstance(p, PFalse):
        return np.zeros(n, dtype=bool)
    scope = {**env.sizes, **names}
    if isinstance(p, Cmp):
        lhs, rhs = p.lhs.evaluate(scope), p.rhs.evaluate(scope)
        res = lhs < rhs if p.op == "<" else lhs <= rhs if p.op == "<=" else lhs == rhs
        return np.broadcast_to(np.asarray(res, dtype=bool), (n,)).copy()
    if isinstance(p, And):
        return eval_pred(p.a, names, n, env) & eval_pred(p.b, names, n, env)
    if isinstance(p, Or):
        return eval_pred(p.a, names, n, env) | eval_pred(p.b, names, n, env)
    if isinstance(p, RelCall):
        rel = env.rels[p.name]
        idx = [np.broadcast_to(np.asarray(a.evaluate(scope), dtype=np.int64), (n,))
               for a in p.args]
        ok = np.ones(n, dtype=bool)
        for a, s in zip(idx, rel.shape):
            ok &= (a >= 0) & (a < s)
        out = np.zeros(n, dtype=bool)
        out[ok] = rel[tuple(a[ok] for a in idx)]
        return out
    if isinstance(p, Exists):
        acc = np.zeros(n, dtype=bool)
        for t in range(max(0, _size(p.size, env))):
            acc |= eval_pred(p.body, {**names, p.idx: t}, n, env)
        return acc
    raise TypeError(repr(p))


def _gather(arr: np.ndarray, o: Operand, names: Mapping[str, Any], n: int,
            env: _Env) -> np.ndarray:
    """`u[A]` at n points with zero extension."""
    if not o.idx:
        return np.full(n, float(arr))
    scope = {**env.sizes, **names}
    idx = [np.broadcast_to(np.asarray(a.evaluate(scope), dtype=np.int64), (n,))
           for a in o.idx]
    ok = np.ones(n, dtype=bool)
    for a, s in zip(idx, arr.shape):
        ok &= (a >= 0) & (a < s)
    out = np.zeros(n)
    out[ok] = arr[tuple(a[ok] for a in idx)]
    return out


@dataclass
class _Grid:
    """The points of `gen I. sum J.` (row-major, J fastest) where the mask holds."""

    shape_i: tuple[int, ...]
    shape_j: tuple[int, ...]
    sel: np.ndarray                 # flat positions of the masked points
    names: dict[str, np.ndarray]    # index values at the masked points

    @property
    def n_i(self) -> int:
        return int(np.prod(self.shape_i, dtype=np.int64))

    @property
    def n_j(self) -> int:
        return int(np.prod(self.shape_j, dtype=np.int64))


def _grid(rhs: Rhs, env: _Env) -> _Grid:
    shape_i = tuple(max(0, _size(d, env)) for d in rhs.dims)
    shape_j = tuple(max(0, _size(d, env)) for d in rhs.sdims)
    shape = shape_i + shape_j
    total = int(np.prod(shape, dtype=np.int64))
    flat = np.arange(total, dtype=np.int64)
    coords = np.unravel_index(flat, shape) if shape else ()
    all_names = dict(zip(rhs.gen_names() + rhs.sum_names(), coords))
    mask = eval_pred(rhs.pred, all_names, total, env)
    sel = flat[mask]
    return _Grid(shape_i, shape_j, sel, {k: v[mask] for k, v in all_names.items()})


def _eval_rhs(rhs: Rhs, env: _Env, args: Mapping[str, Any]) -> np.ndarray:
    if isinstance(rhs, Input):
        v = args[rhs.param]
        for k in rhs.path:
            v = v[k]
        return np.asarray(v, dtype=np.float64)
    g = _grid(rhs, env)
    n = len(g.sel)
    ops = [_gather(env.values[o.var], o, g.names, n, env) for o in rhs.operands]
    with np.errstate(all="ignore"):
        if isinstance(rhs, ConstRhs):
            vals = np.full(n, rhs.value)
        elif isinstance(rhs, AddRhs):
            s1, s2 = (eval_pred(s, g.names, n, env) for s in rhs.supports)
            vals = np.where(s1, ops[0], 0.0) + np.where(s2, ops[1], 0.0)
        elif isinstance(rhs, MapRhs):
            vals = np.asarray(B.apply(rhs.fn, ops, rhs.params), dtype=np.float64)
            vals = np.broadcast_to(vals, (n,))
        else:
            vals = ops[0] * ops[1] if len(ops) == 2 else ops[0].copy()
            if rhs.coeff != 1.0:
                vals = rhs.coeff * vals
    full = np.zeros(g.n_i * g.n_j)
    full[g.sel] = vals
    if isinstance(rhs, _SumRhs):
        return full.reshape(g.n_i, g.n_j).sum(axis=1).reshape(g.shape_i)
    return full.reshape(g.shape_i)


def _result(v: np.ndarray) -> Any:
    return float(v) if v.ndim == 0 else v


def evaluate(p: Program, args: Mapping[str, Any]) -> Any:
    """Run the program with numpy (dense index grids).  Results: float for scalars, float64
    arrays for tensors, tuples for pairs; agrees with `interpret(to_core(p), args)`."""
    env = _env_of(p, args)
    for s in p.stmts:
        env.values[s.var] = _eval_rhs(s.rhs, env, args)

    def build(out: Out) -> Any:
        return _result(env.values[out]) if isinstance(out, str) else tuple(map(build, out))

    return build(p.output)


@dataclass(frozen=True)
class SSACost:
    """SPEC 3 counts of an SSA program; `per_stmt[var] = (adds, muls, calls)`."""

    adds: int
    muls: int
    calls: int
    per_stmt: dict[str, tuple[int, int, int]]

    @property
    def total(self) -> int:
        return self.adds + self.muls + self.calls


def rhs_cost(rhs: Rhs, env: _Env) -> tuple[int, int, int]:
    """(adds, muls, calls) of one right-hand side under the sizes/relations of `env`."""
    if isinstance(rhs, (Input, ConstRhs)):
        return (0, 0, 0)
    g = _grid(rhs, env)
    n = len(g.sel)
    if isinstance(rhs, AddRhs):
        s1, s2 = (eval_pred(s, g.names, n, env) for s in rhs.supports)
        return (int(np.count_nonzero(s1 & s2)), 0, 0)
    if isinstance(rhs, MapRhs):
        return (0, 0, n)
    muls = n * (len(rhs.operands) - 1 + (rhs.coeff != 1.0))
    adds = 0
    if rhs.sdims:
        live = np.bincount(g.sel // max(g.n_j, 1), minlength=g.n_i) if g.n_j else \
            np.zeros(g.n_i, dtype=np.int64)
        adds = int(np.maximum(live - 1, 0).sum())
    return (adds, int(muls), 0)


def cost(p: Program, args: Mapping[str, Any]) -> SSACost:
    """The exact SPEC 3 cost (equal to `cost_def(to_core(p), args)`), per statement."""
    env = _env_of(p, args)
    per = {s.var: rhs_cost(s.rhs, env) for s in p.stmts}
    return SSACost(sum(c[0] for c in per.values()), sum(c[1] for c in per.values()),
                   sum(c[2] for c in per.values()), per)
