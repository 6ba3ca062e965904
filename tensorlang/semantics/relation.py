"""Relation values (SPEC 2.3): a set of index tuples inside a box of a given shape.

A relation argument may be given as a boolean mask, as a `(k, arity)` integer coordinate
array, or as a `Relation` made from either.  A `Relation` is immutable and keeps every form
a backend has asked of it, built on first use:

  * `coords()`: the distinct members, sorted lexicographically, `(nnz, arity)` int64;
  * `mask()`: the boolean mask (made only when a program tests single points);
  * `pattern(order, nbound)`: the coordinates with columns in `order`, sorted, and the CSR
    row pointer over the first `nbound` columns (what a compiled relation loop iterates).

An index array's relation `{(i..., idx[i...])}` is built by `index_array` in O(nnz), its
coordinates sorted by construction; `is_index_array` tells whether a relation is one.
Patterns are sorted by stable passes over the key columns (radix sorts for columns of at
most 2**16 values), never by a lexicographic sort of the whole coordinate array.

Coordinates given are kept as given (checked, and sorted and deduplicated only when they
are not already): nothing is densified.  Pass the same `Relation` to every call to convert
it once.  A plain numpy array is converted again on every call, except a read-only one
(`arr.flags.writeable` False, and so every array it is a view of): its `Relation` is kept,
keyed on the array object itself, for as long as the array lives (`from_value`).
"""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from tensorlang.syntax.errors import ShapeError

__all__ = ["Relation", "from_value", "is_immutable", "frozen_array", "index_array",
           "is_index_array"]


def frozen_array(arr: np.ndarray) -> np.ndarray:
    """`arr`, made read-only."""
    arr.flags.writeable = False
    return arr


class Relation:
    """An immutable relation of `shape` (see the module docstring); `nbytes`: the bytes of
    the form it was given in (what a memory estimate counts as its input)."""

    __slots__ = ("shape", "nbytes", "_mask", "_coords", "_patterns", "__weakref__")

    def __init__(self, value: Any, shape: tuple[int, ...] | None = None) -> None:
        """`value`: a boolean mask (its shape, which `shape` must equal when given) or `(k,
        arity)` integer coordinates (`shape` required; a 1-D array for arity 1)."""
        if isinstance(value, Relation):
            if shape is not None and tuple(shape) != value.shape:
                raise ShapeError(f"relation of shape {value.shape} given where shape "
                                 f"{tuple(shape)} is expected")
            self.shape, self._mask, self._coords = value.shape, value._mask, value._coords
            self._patterns, self.nbytes = value._patterns, value.nbytes
            return
        arr = np.asarray(value)
        self._patterns: dict[tuple[tuple[int, ...], int], tuple[np.ndarray, np.ndarray]] = {}
        if arr.dtype == np.bool_:
            if shape is not None and tuple(shape) != arr.shape:
                raise ShapeError(f"expected a boolean mask of shape {tuple(shape)}, got shape "
                                 f"{arr.shape}")
            self.shape = tuple(int(s) for s in arr.shape)
            # a copy, even of a read-only array: the relation must not keep the array it
            # is kept for (`from_value`) alive
            self._mask = frozen_array(arr.copy())
            self._coords: np.ndarray | None = None
            self.nbytes = int(arr.nbytes)   # what was given: the memory estimate's input
            return
        if shape is None:
            raise ShapeError("a relation given as coordinates needs its shape")
        self.shape = tuple(int(s) for s in shape)
        self._mask = None
        self._coords = _canonical(_checked_coords(arr, self.shape))
        self.nbytes = int(self._coords.nbytes)

    # -- the forms ---------------------------------------------------------------------------

    @property
    def arity(self) -> int:
        return len(self.shape)

    def coords(self) -> np.ndarray:
        """The distinct members, lexicographically sorted: `(nnz, arity)` int64, read-only."""
        if self._coords is None:
            assert self._mask is not None
            # the flat positions, then their indices: faster than `np.argwhere`, C order
            rest = np.flatnonzero(self._mask)
            coords = np.empty((len(rest), self.arity), dtype=np.int64)
            for k in range(self.arity - 1, 0, -1):
                rest, coords[:, k] = np.divmod(rest, self.shape[k])
            if self.arity:
                coords[:, 0] = rest
            self._coords = frozen_array(coords)
        return self._coords

    def mask(self) -> np.ndarray:
        """The boolean mask of `shape`, read-only."""
        if self._mask is None:
            mask = np.zeros(self.shape, dtype=np.bool_)
            mask[tuple(self.coords().T)] = True
            self._mask = frozen_array(mask)
        return self._mask

    @property
    def nnz(self) -> int:
        return len(self.coords())

    def pattern(self, order: tuple[int, ...], nbound: int) -> tuple[np.ndarray, np.ndarray]:
        """The coordinates with columns in `order`, sorted lexicographically, and the CSR row
        pointer over the first `nbound` columns (their flattened index; `[0]` when 0)."""
        key = (tuple(order), nbound)
        hit = self._patterns.get(key)
        if hit is None:
            hit = self._patterns[key] = _pattern(self.coords(), self.shape, *key)
        return hit

    def forms(self) -> list[str]:
        """The forms built so far: "mask", "coords", "pattern(order, nbound)" (to see what
        a run converted)."""
        out = [name for name, a in (("mask", self._mask), ("coords", self._coords))
               if a is not None]
        return out + [f"pattern({order}, {nbound})" for order, nbound in self._patterns]

    def __repr__(self) -> str:
        return f"<Relation of shape {self.shape}, {self.nnz} members>"


def _checked_coords(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    arity = len(shape)
    if arr.size == 0:
        return np.zeros((0, arity), dtype=np.int64)
    if arity == 1 and arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating) and bool(np.all(np.mod(arr, 1) == 0)))
    if arr.ndim != 2 or arr.shape[1] != arity or not integral:
        raise ShapeError(f"expected a boolean mask of shape {shape} or a (k, {arity}) integer "
                         f"coordinate array, got {arr.dtype} array of shape {arr.shape}")
    out = arr.astype(np.int64)   # a copy: the caller may change its array afterwards
    inside = np.all((out >= 0) & (out < np.array(shape, dtype=np.int64)), axis=1)
    if not inside.all():
        bad = tuple(int(c) for c in out[~inside][0])
        raise ShapeError(f"coordinate {bad} is outside shape {shape}")
    return out


def _canonical(coords: np.ndarray) -> np.ndarray:
    """Sorted and distinct; coordinates that already are stay as given (an O(k) check)."""
    if len(coords) > 1:
        step = _row_compare(coords[1:], coords[:-1])
        if not np.all(step > 0):
            if np.any(step < 0):
                coords = coords[np.lexsort(coords.T[::-1])]
                step = _row_compare(coords[1:], coords[:-1])
            coords = coords[np.r_[True, step != 0]]
    return frozen_array(np.ascontiguousarray(coords))


def _row_compare(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, the sign of `a - b` in lexicographic order."""
    out = np.zeros(len(a), dtype=np.int64)
    for col in range(a.shape[1] - 1, -1, -1):   # the first differing column decides
        d = np.sign(a[:, col] - b[:, col])
        out = np.where(d != 0, d, out)
    return out


def _pattern(coords: np.ndarray, shape: tuple[int, ...], order: tuple[int, ...],
             nbound: int) -> tuple[np.ndarray, np.ndarray]:
    """O(nnz log nnz) at most: a least-significant-digit sort, one stable pass per column
    (a radix sort, O(nnz), for a column of at most 2**16 values).  `coords` are sorted,
    so when the columns after the row key keep their relative order (the usual case) the
    passes over the row key's columns alone are exact."""
    order = tuple(order)
    dims = tuple(shape[k] for k in order)
    if order == tuple(range(coords.shape[1])) or not len(coords):
        cols = coords if len(coords) else np.zeros((0, len(order)), dtype=np.int64)
    else:
        # column by column: numpy gathers 1-D arrays far faster than rows of a 2-D one
        src = [np.ascontiguousarray(coords[:, k]) for k in order]
        last = nbound if list(order[nbound:]) == sorted(order[nbound:]) else len(order)
        perm = np.arange(len(coords))
        for t in range(last - 1, -1, -1):
            perm = perm[_stable_argsort(src[t][perm], dims[t])]
        cols = np.empty((len(coords), len(order)), dtype=np.int64)
        for t, col in enumerate(src):
            cols[:, t] = col[perm]
    cols = frozen_array(np.ascontiguousarray(cols))
    if not nbound:
        return cols, frozen_array(np.zeros(1, dtype=np.int64))
    nrows = math.prod(dims[:nbound])
    keys = np.ravel_multi_index(tuple(cols[:, t] for t in range(nbound)), dims[:nbound]) \
        if len(cols) else np.zeros(0, dtype=np.int64)
    ptr = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=nrows), out=ptr[1:])
    return cols, frozen_array(ptr)


def _stable_argsort(values: np.ndarray, extent: int) -> np.ndarray:
    """A stable argsort of integers in `0 <= v < extent`."""
    if extent <= 1 << 16:   # numpy's stable sort of 16-bit integers is a radix sort
        return np.argsort((values - (1 << 15)).astype(np.int16), kind="stable")
    return np.argsort(values, kind="stable")


def index_array(values: np.ndarray, bound: int) -> Relation:
    """The relation `{(i..., values[i...])}` of an index array (SPEC 12) whose integer
    entries have been checked to lie in `0 <= v < bound`: its coordinates are built
    sorted and distinct (the index tuples in C order, one value each), O(nnz), without
    the checks and the sort a coordinate list given by a user takes."""
    values = np.asarray(values)
    index_shape = tuple(int(n) for n in values.shape)
    arity = len(index_shape) + 1
    nnz = math.prod(index_shape)
    coords = np.empty((nnz, arity), dtype=np.int64)
    if nnz:
        grid = coords.reshape(*index_shape, arity)
        for k, n in enumerate(index_shape):   # column k: index k, broadcast over the others
            grid[..., k] = np.arange(n, dtype=np.int64).reshape(
                (n,) + (1,) * (len(index_shape) - k - 1))
        grid[..., -1] = values
    rel = Relation.__new__(Relation)
    rel.shape = (*index_shape, int(bound))
    rel._mask = None
    rel._coords = frozen_array(coords)
    rel._patterns = {}
    rel.nbytes = int(coords.nbytes)
    return rel


def is_index_array(rel: Relation) -> bool:
    """`rel` is a total function of its first arguments (exactly one member per index
    tuple of `shape[:-1]`): what a relation given for an index array must be wherever a
    backend relies on it (`exists v. idx(i..., v)` is true for every in-range i).  O(nnz)."""
    coords = rel.coords()
    if len(coords) != math.prod(rel.shape[:-1]):
        return False
    prefix = coords[:, :-1]   # sorted: distinct prefixes differ from their neighbours
    return len(coords) < 2 or bool(np.all(np.any(prefix[1:] != prefix[:-1], axis=1)))


# ---------------------------------------------------------------------------------------------
# Arguments: conversion, kept for immutable arrays


def is_immutable(arr: np.ndarray) -> bool:
    """No one can change `arr`'s data through numpy: it and every array it views are
    read-only (a read-only view of a writeable array is not)."""
    base: Any = arr
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return base is None or isinstance(base, bytes)


# id(array) -> (weak reference to it, shape, its Relation); an entry leaves with its array
_KEPT: dict[int, tuple[weakref.ref, tuple[int, ...], Relation]] = {}


def from_value(value: Any, shape: tuple[int, ...]) -> Relation:
    """`value` (a `Relation`, mask or coordinates) as a `Relation` of `shape`; a read-only
    array's `Relation` is kept (see the module docstring).  A `ShapeError` when it does not
    fit."""
    if isinstance(value, Relation):
        if value.shape != shape:
            raise ShapeError(f"expected a relation of shape {shape}, got one of shape "
                             f"{value.shape}")
        return value
    if not isinstance(value, np.ndarray) or not is_immutable(value):
        return Relation(value, shape)
    key = id(value)
    hit = _KEPT.get(key)
    if hit is not None and hit[0]() is value and hit[1] == shape:
        return hit[2]
    rel = Relation(value, shape)
    try:
        ref = weakref.ref(value, lambda _, key=key, kept=_KEPT: kept.pop(key, None))
    except TypeError:
        return rel
    _KEPT[key] = (ref, shape, rel)
    return rel
