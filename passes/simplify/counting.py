"""Point counting at the cost points: how many points of an index box a conjunction of
atoms holds at, evaluated exactly on a numpy grid (each atom once per point of its own
indices, combined by broadcasting).  The static per-node cost of the extraction
(`cost_model.Spec3Cost`) is made of these counts.

Predicates are evaluated and points counted by `tensorlang.semantics.grid`, the one
evaluator of index arithmetic; this module only assembles the simplifier's atoms into
batch-shaped masks over the box of a node's free indices."""
from __future__ import annotations

import zlib
from typing import Iterable, Mapping, Sequence

import numpy as np

from tensorlang.ir.ast import Affine
from tensorlang.semantics import grid

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

    def _box(self, names: Sequence[str], k: int) -> grid.Box:
        """The index box of `names` (in that order) at the k-th cost point."""
        box = grid.Box(sizes=self.points[k], rels=self._relations(k))
        return box.bind_indices((n, self.extent(self.uni.ranges[n], k)) for n in names)

    def _atom_grid(self, atom: str, k: int) -> np.ndarray:
        """The atom on the box of its own indices (in `index_key` order), at point k."""
        key = (atom, k)
        hit = self._atom_grids.get(key)
        if hit is None:
            names = sorted(self.uni.atom_vars[atom], key=self.uni.index_key)
            hit = self._atom_grids[key] = grid.pred(self.uni.atoms[atom], self._box(names, k))
        return hit

    def _mask(self, names: Sequence[str], mask: frozenset[str], k: int) -> np.ndarray:
        """The conjunction `mask` in batch shape over the box of `names`."""
        out = np.ones((1,) * len(names), dtype=bool)
        pos = {n: d for d, n in enumerate(names)}
        for a in sorted(mask):
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
            names = sorted(free, key=self.uni.index_key)
            out = []
            for k in range(len(self.points)):
                if FALSE in mask:
                    out.append(0)
                    continue
                box = self._box(names, k)
                out.append(grid.total(grid.count(self._mask(names, mask, k), box), box))
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
            names = sorted(free - {j}, key=self.uni.index_key) + [j]   # summed axis last
            out = []
            for k in range(len(self.points)):
                if FALSE in allm:
                    out.append(0)
                    continue
                box = self._box(names, k)
                adds = grid.sum_additions(self._mask(names, allm, k), box, len(names) - 1)
                out.append(grid.total(adds, box))
            hit = self._counts[key] = tuple(out)
        return hit
