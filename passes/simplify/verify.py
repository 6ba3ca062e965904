"""The safety check of `simplify`: the exact cost (`cost_program`, SPEC 3) of a candidate
against the input's, at the sizes given or, without them, at a panel of sizes and
relations.  A point the input cannot be costed at is an error (`SimplifyError`), never a
point skipped: a check that checks nothing must not pass."""
from __future__ import annotations

import zlib
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.semantics.cost import cost_program
from tensorlang.ir.ast import TRel, TSize
from tensorlang.ir.tssa import Program

from .counting import DEFAULT_REP
from .report import SimplifyError

def point_key(args: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int)) + \
        ("" if all(isinstance(v, int) for v in args.values()) else
         "," + "".join(_rel_tag(v) for v in args.values() if not isinstance(v, int)))


def _rel_tag(v: np.ndarray) -> str:
    return "F" if v.all() else ("0" if not v.any() else "r")


def panel(p: Program, sizes: Mapping[str, int] | None) -> list[dict[str, Any]]:
    """The size (and relation) assignments the result is checked at."""
    names = [q.name for q in p.params if isinstance(q.type, TSize)]
    rels = [q for q in p.params if isinstance(q.type, TRel)]
    points: list[dict[str, int]] = []
    if sizes is not None and all(n in sizes for n in names):
        points.append({n: int(sizes[n]) for n in names})
    else:
        rep = {n: int((sizes or {}).get(n, DEFAULT_REP)) for n in names}
        points.append(rep)
        for v in range(4):
            points.append({n: v for n in names})
        for n in names:
            for v in (1, 5):
                pt = {m: 3 for m in names}
                pt[n] = v
                points.append(pt)
    out: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for k, pt in enumerate(points):
        key = tuple(sorted(pt.items()))
        if key in seen or not valid_sizes(p, pt):
            continue
        seen.add(key)
        variants = _relations(rels, pt)
        if k == 0 and sizes is None:   # the representative point: one (random) relation
            variants = variants[-1:]
        out.extend({**pt, **rv} for rv in variants)
    return out


def valid_sizes(p: Program, sizes: Mapping[str, int]) -> bool:
    """No dimension of an input is negative at `sizes` (inputs of such sizes cannot exist)."""
    dims = [d for q in p.params for d in (q.type.sizes if isinstance(q.type, TRel)
                                           else ast.shape_of(tssa.soa_type(q.type))
                                           if not isinstance(tssa.soa_type(q.type), ast.TPair)
                                           else _pair_dims(q.type))]
    return all(d.evaluate(sizes) >= 0 for d in dims if d.vars() <= sizes.keys())


def _pair_dims(t: Any) -> list:
    return [d for path in tssa.leaf_paths(t) for d in ast.shape_of(tssa.project_type(t, path))]


def _relations(rels: list, sizes: Mapping[str, int]) -> list[dict[str, np.ndarray]]:
    if not rels:
        return [{}]
    shapes = {q.name: tuple(max(0, int(d.evaluate(sizes))) for d in q.type.sizes) for q in rels}
    full = {n: np.ones(s, dtype=bool) for n, s in shapes.items()}
    empty = {n: np.zeros(s, dtype=bool) for n, s in shapes.items()}
    rand = {n: np.random.default_rng(zlib.crc32(n.encode()) + 1).random(s) < 0.5
            for n, s in shapes.items()}
    return [full, empty, rand]



def costs(p: Program, panel: list[dict[str, Any]], what: str) -> list[int]:
    """The exact total cost of `p` at every point of `panel`; `SimplifyError` naming the
    point where it cannot be costed."""
    out = []
    for args in panel:
        try:
            out.append(cost_program(p, args).total)
        except Exception as err:
            raise SimplifyError(f"{what} cannot be costed at {point_key(args)}: "
                                f"{type(err).__name__}: {err}") from err
    return out
