"""Point counting at the cost points: how many points of an index box a conjunction of
atoms holds at, evaluated exactly on a numpy grid (each atom once per point of its own
indices, combined by broadcasting).  The static per-node cost of the extraction
(`cost_model.Spec3Cost`) is made of these counts.

This is the simplifier's only evaluator of predicates over index boxes; it is kept in this
one module so that it can be replaced by `tensorlang.semantics.grid` (SPEC 17) without
touching the rest of the package."""
from __future__ import annotations

import math
import zlib
from typing import Iterable, Mapping, Sequence

import numpy as np

from tensorlang.ir.ast import Affine
from tensorlang.semantics.interp import Env, eval_pred

from .universe import FALSE, Universe

DEFAULT_REP = 16          # representative size for every unknown size (docs/simplifier.md)


def cost_points(size_names: Iterable[str], sizes: Mapping[str, int] | None) -> list[dict[str, int]]:
    """The size assignments node costs are counted at.  With every size given: those sizes.
    Otherwise the representative point (given sizes, DEFAULT_REP for the others) and, per
    unknown size, the same point with that size small (3), and all unknown sizes 2 and 1:
    the extraction only trades a node of the input for one that is no worse at all of them,
    so size-dependent choices (a product over N or over M?) stay as written."""
    names = sorted(size_names)
    sizes = dict(sizes or {})
    base = {n: int(sizes.get(n, DEFAULT_REP)) for n in names}
    free = [n for n in names if n not in sizes]
    points = [base]
    for n in free:
        points.append({**base, n: 3})
    if free:
        points.append({**base, **{n: 2 for n in free}})
        points.append({**base, **{n: 1 for n in free}})
    return points


class PointCounter:
    """Counts of masked index boxes of a `Universe` at the cost points `points` (one size
    assignment each); relations are taken random, half of the entries set (fixed seed)."""

    def __init__(self, uni: Universe, points: Sequence[Mapping[str, int]]) -> None:
        self.uni = uni
        self.points = [dict(p) for p in points]
        self._rels: dict[int, dict[str, np.ndarray]] = {}
        self._counts: dict[tuple, tuple[int, ...]] = {}
        self._atom_grids: dict[tuple, np.ndarray] = {}

    def extent(self, a: Affine, k: int = 0) -> int:
        return max(0, int(a.evaluate(self.points[k])))

    def _relations(self, k: int) -> dict[str, np.ndarray]:
        """Relations at the k-th cost point: deterministic, half of the entries set (the
        extraction does not see the data; docs/simplifier.md)."""
        rels = self._rels.get(k)
        if rels is None:
            rels = self._rels[k] = {}
            for name, dims in self.uni.rel_shapes.items():
                shape = tuple(self.extent(d, k) for d in dims)
                rng = np.random.default_rng(zlib.crc32(name.encode()) + k)
                rels[name] = rng.random(shape) < 0.5
        return rels

    def _atom_grid(self, atom: str, k: int) -> np.ndarray:
        """The atom on the grid of its own indices (in `index_key` order), at point k."""
        key = (atom, k)
        hit = self._atom_grids.get(key)
        if hit is None:
            names = sorted(self.uni.atom_vars[atom], key=self.uni.index_key)
            env = Env(sizes=self.points[k], rels=self._relations(k))
            shape = []
            for n in names:
                m = self.extent(self.uni.ranges[n], k)
                env = env.bind_index(n, m)
                shape.append(m)
            hit = np.broadcast_to(eval_pred(self.uni.atoms[atom], env), tuple(shape))
            self._atom_grids[key] = hit
        return hit

    def _grid(self, names: Sequence[str], mask: frozenset[str], k: int) -> np.ndarray:
        """The conjunction `mask` on the grid of `names` (in `index_key` order)."""
        shape = tuple(self.extent(self.uni.ranges[n], k) for n in names)
        out = np.ones(shape, dtype=bool)
        pos = {n: d for d, n in enumerate(names)}
        for a in mask:
            g = self._atom_grid(a, k)
            view = [1] * len(names)
            for n, m in zip(sorted(self.uni.atom_vars[a], key=self.uni.index_key), g.shape):
                view[pos[n]] = m
            out = out & g.reshape(view)
        return out

    def count(self, free: frozenset[str], mask: frozenset[str]) -> tuple[int, ...]:
        """Points of the box of `free` where the atoms `mask` hold, at each cost point;
        `mask` mentions only indices of `free` (and sizes)."""
        key = ("c", free, mask)
        hit = self._counts.get(key)
        if hit is None:
            out = []
            names = sorted(self.uni.pfree(mask) & free, key=self.uni.index_key)
            for k in range(len(self.points)):
                if FALSE in mask:
                    out.append(0)
                    continue
                rest = math.prod(self.extent(self.uni.ranges[n], k) for n in free if n not in names)
                out.append(rest * int(np.count_nonzero(self._grid(names, mask, k))) if rest
                           else 0)
            hit = self._counts[key] = tuple(out)
        return hit

    def sum_adds(self, free: frozenset[str], mask: frozenset[str], j: str,
                 body: frozenset[str]) -> tuple[int, ...]:
        """Additions of `[mask] * sum j. e` with e live where `body` holds: the sum over the
        points of `free` in `mask` of max(0, live - 1), at each cost point."""
        key = ("s", free, mask, j, body)
        hit = self._counts.get(key)
        if hit is None:
            allm = mask | body
            names = sorted(((self.uni.pfree(allm) & free) - {j}) | {j}, key=self.uni.index_key)
            out = []
            for k in range(len(self.points)):
                if FALSE in allm:
                    out.append(0)
                    continue
                rest = math.prod(self.extent(self.uni.ranges[n], k) for n in free
                                 if n not in names)
                if not rest:
                    out.append(0)
                    continue
                grid = np.moveaxis(self._grid(names, allm, k), names.index(j), -1)
                live = grid.sum(axis=-1)
                out.append(rest * int(np.maximum(live - 1, 0).sum()))
            hit = self._counts[key] = tuple(out)
        return hit
