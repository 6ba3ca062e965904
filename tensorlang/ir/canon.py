"""Canonical forms of Tensor SSA (SPEC 5): a total order on nodes and canonical predicates.

Structural equality of statements means semantic equality because their parts are put in
canonical form here: operands, conjuncts and summation indices are sorted by `node_key`;
predicates are flattened, deduplicated and sorted, comparisons normalised (`L <= R`,
`L == R`, integer-tightened, fixed sign) and decided where the index ranges decide them.
"""
from __future__ import annotations

import functools
import math
import weakref
from typing import Any, Iterable, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, And, Cmp, Exists, Node, Or, PFalse, Pred, PTrue, RelCall

EXISTS_PREFIX = "k"
"""Default prefix of canonical `exists` names (`k0, k1, ...` by nesting depth)."""

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
        return assemble(And, parts, PTrue())
    if isinstance(p, Or):
        parts = []
        for q in disjuncts(p):
            parts.extend(disjuncts(_canon(q, ranges, ex, depth)))
        if any(isinstance(q, PTrue) for q in parts):
            return PTrue()
        return assemble(Or, parts, PFalse())
    if isinstance(p, Exists):
        name = f"{ex}{depth}"
        size = p.size
        body = p.body if p.idx == name else ast.subst(p.body, {p.idx: Affine.var(name)})
        inner = dict(ranges)
        inner[name] = size
        body = _canon(body, inner, ex, depth + 1)
        if isinstance(body, PFalse):
            return body
        if name not in ast.free_names(body):  # exists over a range: the range is non-empty
            return _canon(And(Cmp("<=", Affine.lit(1), size), body), ranges, ex, depth)
        return Exists(name, size, body)
    raise TypeError(f"not a predicate: {p!r}")


def assemble(cls: type, parts: list[Pred], unit: Pred) -> Pred:
    uniq = {id(q): q for q in parts}
    ordered = sorted(uniq.values(), key=node_key)
    return _chain(cls, ordered) if ordered else unit


def canon_pred(p: Pred, ranges: Mapping[str, Affine] | Iterable[tuple[str, Affine]] = (),
               ex: str = EXISTS_PREFIX) -> Pred:
    """The canonical form of `p`, given the ranges `0 <= name < size` of its index names.

    Names without a range are sizes (non-negative).  `ex` is the prefix of canonical
    `exists` names.  Idempotent, and it keeps the meaning within the ranges.
    """
    items = tuple(sorted(ranges.items() if isinstance(ranges, Mapping) else ranges))
    return _canon_cached(p, items, ex, 0)


__all__ = ["node_key", "conjuncts", "disjuncts", "canon_pred", "assemble"]
