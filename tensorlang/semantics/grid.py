"""Affine expressions and predicates over index boxes: the ONE evaluator of index arithmetic.

The interpreter, the cost model (core and Tensor SSA), the index solver and the simplifier's
point counting all evaluate affine indices and predicates here, vectorised over a *box* of
named index variables at concrete sizes and relations.

A `Box` has `depth` numpy axes; the binder at position `k` owns axis `k` and ranges over
`0..extents[k]-1`.  An index variable is an `arange` along its axis, so an affine expression
is an int64 array and a predicate a boolean array of *batch shape*: `depth` axes, each of
length 1 (the value does not depend on that index: numpy broadcasting) or the axis' extent.
Sizes are ints; a relation is a boolean mask of its shape (`R(a..)` is false outside it).

Counting works on batch-shaped arrays too: `reduce_axes` sums exactly over trailing axes (a
length-1 axis stands for `extent` equal entries), `count` is the number of points where a
predicate holds, and `sum_additions` is SPEC 3's addition count of a sum nest,
`max(0, live - 1)` per outer point, live = points of the summed axes where the summand is
not a structural zero.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.ir.canon import conjuncts
from tensorlang.syntax.errors import TLError

_CMP = {"<": operator.lt, "<=": operator.le, "==": operator.eq}


@dataclass(frozen=True)
class Box:
    """Sizes, relations and bound index variables (`idx[name] = (axis, extent)`)."""

    sizes: Mapping[str, int] = field(default_factory=dict)
    rels: Mapping[str, np.ndarray] = field(default_factory=dict)   # boolean masks
    idx: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    extents: tuple[int, ...] = ()
    # indices bound to one value per outer point (`bind_pinned`), of batch shape
    pinned: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return len(self.extents)

    def bind_index(self, name: str, n: int) -> "Box":
        """Enter a binder: `name` ranges over 0..n-1 along the new axis `depth`."""
        return replace(self, idx={**self.idx, name: (self.depth, n)},
                       extents=self.extents + (n,))

    def bind_pinned(self, name: str, values: int | np.ndarray) -> "Box":
        """Enter a binder whose index has one value per outer point (`values`, of the outer
        batch shape): the new axis `depth` has length 1 and `name` takes `values` there."""
        d = self.depth
        return replace(self, idx={**self.idx, name: (d, 1)}, extents=self.extents + (1,),
                       pinned={**self.pinned,
                               name: to_depth(np.asarray(values, dtype=np.int64), d + 1)})

    def bind_indices(self, axes: Iterable[tuple[str, int]]) -> "Box":
        out = self
        for name, n in axes:
            out = out.bind_index(name, n)
        return out

    def axis_range(self, axis: int) -> np.ndarray:
        """0..extent-1 laid along `axis` of the batch shape."""
        shape = [1] * self.depth
        shape[axis] = self.extents[axis]
        return np.arange(self.extents[axis], dtype=np.int64).reshape(shape)


def extent(a: ast.Affine, box: Box) -> int:
    """The value of a size expression (binder extent or type dimension); negative -> 0."""
    v = affine(a, box)
    if isinstance(v, np.ndarray):
        raise TLError(f"size {a} depends on an index variable")
    return max(0, int(v))


def affine(a: ast.Affine, box: Box) -> int | np.ndarray:
    """An int if `a` mentions no bound index variable, else an int64 array of batch rank."""
    out: int | np.ndarray = a.const
    for name, coeff in a.terms:
        if name in box.pinned:
            out = out + coeff * to_depth(box.pinned[name], box.depth)
        elif name in box.idx:
            out = out + coeff * box.axis_range(box.idx[name][0])
        elif name in box.sizes:
            out = out + coeff * box.sizes[name]
        else:
            raise TLError(f"unbound index or size variable {name!r}")
    return out


def quasi_value(a: "ast.Affine | ast.QuasiAffine", env: Mapping[str, int],
                arrays: Mapping[str, np.ndarray]) -> int | None:
    """A surface index expression of SPEC 12 at one point: `e // c` and `e % c` as Python's
    floor division and remainder (`-1 // 2 == -1`, `-1 % 2 == 1`), `idx[a]` an entry of the
    integer array `arrays[idx]`.  None where it has no value: a divisor <= 0, a read of an
    index array outside its shape (an access at such an index reads 0).  The reference the
    lowering (`tensorlang.check.quasi`) is checked against."""
    if isinstance(a, ast.Affine):
        return int(a.evaluate(env))
    out = int(a.base.evaluate(env))
    for term, coeff in zip(a.terms, a.coeffs):
        if isinstance(term, ast.IndexDiv):
            num = quasi_value(term.num, env, arrays)
            den = int(term.den.evaluate(env))
            if num is None or den <= 0:
                return None
            v = num // den if term.op == "//" else num % den
        else:
            args = [quasi_value(x, env, arrays) for x in term.args]
            arr = arrays[term.name]
            if any(x is None for x in args) or not all(
                    0 <= x < n for x, n in zip(args, arr.shape)):  # type: ignore[operator]
                return None
            v = int(arr[tuple(args)])
        out += coeff * v
    return out


def to_depth(x: Any, depth: int) -> np.ndarray:
    """`x` (a scalar, or an array of the batch shape of a shallower box) with `depth` batch
    axes: the axes of binders entered since have length 1."""
    x = np.asarray(x)
    return x.reshape(x.shape + (1,) * (depth - x.ndim))


def index_value(a: ast.Affine, box: Box) -> np.ndarray:
    """An affine expression of indices and sizes as a real (`ast.IndexValue`, SPEC 12): a
    float64 array of batch rank."""
    return batch(np.asarray(affine(a, box), dtype=np.float64), box.depth)


def batch(x: Any, depth: int) -> np.ndarray:
    """A scalar or batch-rank array as an array with exactly `depth` (batch) axes."""
    x = np.asarray(x)
    return x.reshape((1,) * depth) if x.ndim == 0 else x


def pred(p: ast.Pred, box: Box) -> np.ndarray:
    """Where `p` holds: a boolean array of batch shape."""
    d = box.depth
    if isinstance(p, ast.PTrue):
        return np.ones((1,) * d, dtype=bool)
    if isinstance(p, ast.PFalse):
        return np.zeros((1,) * d, dtype=bool)
    if isinstance(p, ast.Cmp):
        return batch(_CMP[p.op](affine(p.lhs, box), affine(p.rhs, box)), d)
    if isinstance(p, ast.And):
        return pred(p.a, box) & pred(p.b, box)
    if isinstance(p, ast.Or):
        return pred(p.a, box) | pred(p.b, box)
    if isinstance(p, ast.RelCall):
        if p.name not in box.rels:
            raise TLError(f"unbound relation {p.name!r}", p.loc)
        mask = box.rels[p.name]
        if len(p.args) != mask.ndim:
            raise TLError(f"relation {p.name!r} takes {mask.ndim} indices, got {len(p.args)}",
                          p.loc)
        return batch(gather(mask, [affine(a, box) for a in p.args], 0, d, fill=False), d)
    if isinstance(p, ast.Exists):
        n = extent(p.size, box)
        body = pred(p.body, box.bind_index(p.idx, n))
        return np.any(np.broadcast_to(body, body.shape[:d] + (n,)), axis=d)
    raise TLError(f"not a predicate: {p!r}")


def sum_nest(e: ast.Sum) -> tuple[list[tuple[str, ast.Affine]], ast.Expr]:
    """The maximal nest `sum i1. sum i2. ... body` starting at `e`."""
    binders: list[tuple[str, ast.Affine]] = []
    body: ast.Expr = e
    while isinstance(body, ast.Sum):
        binders.append((body.idx, body.size))
        body = body.body
    return binders, body


def pinned_quotient(q: str, later: set[str], summand: ast.Expr,
                    box: Box) -> int | np.ndarray | None:
    """The one value of the summed index `q` at which `summand` can be non-zero, per point
    of `box`, when the summand's bracket pins it: `[c*q <= a and a < c*q + c and ...] * e` (or
    any equivalent pair of bounds, as the passes rewrite them)
    with c > 0 and `a` free of q and of the `later` binders of its sum nest (the quotient
    variables `check.quasi` introduces for `a // c` and `a % c`): then q = floor(a / c).
    None when there is no such pin.  The caller still keeps only 0 <= q < n.

    A sum over a pinned index has that one live term, so the interpreter and the cost model
    evaluate it at that point instead of at all n (upsampling by 2 in two dimensions made
    them evaluate 4 N^2 M^2 points instead of 4 N M)."""
    if not isinstance(summand, ast.Iverson):
        return None
    # Each comparison as `D >= 0` (`a < b` is `b - a - 1 >= 0`); with D = k*q + R, k > 0 is
    # the lower bound k*q >= -R, k < 0 the upper bound |k|*q <= R.
    lows: dict[int, set[ast.Affine]] = {}
    highs: dict[int, set[ast.Affine]] = {}
    for c in conjuncts(summand.pred):
        if not isinstance(c, ast.Cmp) or c.op == "==":
            continue
        diff = c.rhs - c.lhs - (1 if c.op == "<" else 0)
        k = diff.coeff(q)
        rest = diff - ast.Affine.var(q).scale(k)
        if k == 0 or rest.vars() & later:
            continue
        if k > 0:
            lows.setdefault(k, set()).add(-rest)
        else:
            highs.setdefault(-k, set()).add(rest)
    for k, uppers in highs.items():
        for upper in uppers:   # k*q <= upper and k*q >= upper - k + 1: q = floor(upper / k)
            if upper - (k - 1) in lows.get(k, ()):
                return affine(upper, box) // k
    return None


def holds_at(p: ast.Pred, env: Mapping[str, Any]) -> bool:
    """`p` at one point: `env` maps index and size names to ints, relations to boolean
    masks (a depth-0 box)."""
    sizes: dict[str, int] = {}
    rels: dict[str, np.ndarray] = {}
    for name, v in env.items():
        if not isinstance(v, np.ndarray):
            sizes[name] = operator.index(v)
        elif v.dtype == bool:
            rels[name] = v
        else:
            raise TLError(f"relation {name!r} must be a boolean mask, got {v.dtype} array")
    return bool(pred(p, Box(sizes, rels)))


def gather(leaf: np.ndarray, idx: list[int | np.ndarray], leaf_depth: int, depth: int,
           fill: Any = 0.0) -> np.ndarray:
    """`leaf[idx]` per batch point, `fill` where any index is out of range (zero extension).

    `leaf` has `leaf_depth` batch axes (0 or `depth`) then the accessed axes; the result has
    `depth` batch axes then the remaining axes of `leaf`.
    """
    k = len(idx)
    dims = leaf.shape[leaf_depth:leaf_depth + k]
    rest = leaf.shape[leaf_depth + k:]
    if all(isinstance(a, (int, np.integer)) for a in idx):
        if all(0 <= a < n for a, n in zip(idx, dims)):   # plain indexing, keeps batch axes
            out = leaf[(slice(None),) * leaf_depth + tuple(int(a) for a in idx)]
        else:
            out = np.full(leaf.shape[:leaf_depth] + rest, fill, dtype=leaf.dtype)
        return out.reshape((1,) * (depth - leaf_depth) + out.shape)
    arrays = [batch(a, depth) for a in idx]
    valid = np.ones((1,) * depth, dtype=bool)
    for a, n in zip(arrays, dims):
        valid = valid & (a >= 0) & (a < n)
    bshape = np.broadcast_shapes(valid.shape, leaf.shape[:leaf_depth])
    if 0 in dims or not valid.any():
        return np.full(bshape + rest, fill, dtype=leaf.dtype)
    # Batch axes of the leaf index themselves (0 where the leaf broadcasts along them).
    bidx: list[Any] = []
    for t in range(leaf_depth):
        if leaf.shape[t] == 1:
            bidx.append(0)
        else:
            shape = [1] * depth
            shape[t] = leaf.shape[t]
            bidx.append(np.arange(leaf.shape[t], dtype=np.int64).reshape(shape))
    cidx = [np.clip(a, 0, n - 1) for a, n in zip(arrays, dims)]
    out = leaf[tuple(bidx + cidx)]   # all indices advanced: shape = batch shape + rest
    if not valid.all():
        out = np.where(valid.reshape(valid.shape + (1,) * len(rest)), out,
                       np.asarray(fill, dtype=leaf.dtype))
    return out


# ---------------------------------------------------------------------------------------------
# Exact counting


def reduce_axes(a: np.ndarray, box: Box, first: int = 0) -> np.ndarray:
    """Sum `a` exactly over the batch axes `first..depth-1` of `box` (trailing non-batch axes
    of `a` are kept).  A length-1 axis stands for `extent` equal entries."""
    a = np.asarray(a)
    if a.dtype == bool:
        a = a.astype(np.int64)
    for ax in reversed(range(first, box.depth)):
        a = _reduce_axis(a, ax, box.extents[ax])
    return a


COUNT_LIMIT = float(2**60)  # headroom below 2**63 for the additions that follow a reduction


def _reduce_axis(a: np.ndarray, ax: int, n: int) -> np.ndarray:
    """Sum axis `ax` of extent `n` exactly; a count that int64 would wrap is a TLError."""
    if a.size and float(np.abs(a).max()) * n > COUNT_LIMIT:
        raise TLError(f"the operation count exceeds {COUNT_LIMIT:.3g}, beyond the exact 64-bit "
                      f"count of the cost model (a range of size {n})")
    return a.sum(axis=ax) if a.shape[ax] != 1 else np.take(a, 0, axis=ax) * n


def count(p: ast.Pred | np.ndarray, box: Box, first: int = 0) -> np.ndarray:
    """The number of points of axes `first..` where `p` (a predicate or a batch-shaped mask)
    holds, per point of the axes before `first` (a 0-d array when `first == 0`)."""
    mask = pred(p, box) if isinstance(p, ast.Node) else np.asarray(p)
    return reduce_axes(mask, box, first)


def sum_additions(live: ast.Pred | np.ndarray, box: Box, first: int) -> np.ndarray:
    """SPEC 3's additions of a sum over the axes `first..depth-1`: `max(0, m - 1)` per point
    of the outer axes, m = summed points where `live` holds."""
    return np.maximum(count(live, box, first) - 1, 0)


def total(a: np.ndarray, box: Box) -> int:
    """The exact sum of a count array over all its batch axes (the first `a.ndim` axes of
    `box`: a `count` or `sum_additions` result is summed over the outer points)."""
    a = np.asarray(a, dtype=np.int64)
    for ax in reversed(range(a.ndim)):
        a = _reduce_axis(a, ax, box.extents[ax])
    return int(a)


__all__ = ["Box", "extent", "affine", "batch", "pred", "holds_at", "gather", "reduce_axes",
           "count", "sum_additions", "total"]
