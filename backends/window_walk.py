"""Window gathers walked by window (CPU kernels, issue 14).

The adjoint of a pooling (maxpool's gradient) scatters each window's cotangent back to the
window's elements, which the derivative rules write as a gather over the output:

    v12[i0:2*H, i1:2*W] = sum j0:H, j1:W. [2*j0 <= i0 <= 2*j0 + 1 and 2*j1 <= i1 <= 2*j1 + 1]
                                          * v1[j0, j1, i0 - 2*j0, i1 - 2*j1] * v11[j0, j1, i0 - 2*j0]

Each output point has exactly one term: its window `j = i // c`.  Walked over the output,
the statement's nest `(i0, i1)` shares no loop with the statements over the windows
`(j0, j1)` that compute what it reads, so it reads them back from memory.  `window_form`
rewrites it as the same product over the windows and their offsets,

    v12[2*n0 + n2, 2*n1 + n3] = v1[n0, n1, n2, n3] * v11[n0, n1, n2]  for n0:H, n1:W, n2:2, n3:2

a pointwise statement whose nest starts with the window loops (so it shares them:
`sibling_fusion`, prefix sharing) and whose element is stored at `store_at`, an affine map
onto the output's box.  The rewrite applies when every output index is windowed by one
summation index, `c*j <= i <= c*j + c - 1` with the output's extent `c` times the sum's,
and the mask has nothing else: the map is then a bijection onto the box, so every element
is written once (no zero fill); and when the sum reads an array a statement computes (over
the windows: `reads_computed`), whose loops it can then share.  The value is the one term plus 0.0, as the sum adds it to
0.0 (a -0.0 term sums to +0.0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Cmp, PTrue
from tensorlang.ir.tssa import ContractRhs, Input, ReduceRhs, Rhs

from .codegen_nest import cmp_constraints


@dataclass(frozen=True)
class WindowForm:
    rhs: Rhs                          # the product over (windows..., offsets...)
    store_at: tuple[Affine, ...]      # where each element goes in the output's box


def window_form(rhs: Rhs) -> WindowForm | None:
    """The window walk of a one-term window gather (module docstring), else None."""
    if not isinstance(rhs, (ContractRhs, ReduceRhs)) or not rhs.sdims:
        return None
    gens, sums = rhs.gen_names(), rhs.sum_names()
    if len(gens) != len(sums):
        return None
    bounds: dict[tuple[str, str, int], int] = {}   # (gen, sum, c) -> which bounds seen
    for c in tssa.conjuncts(rhs.pred):
        if not isinstance(c, Cmp) or c.op not in ("<", "<="):
            return None
        (e,) = cmp_constraints(c)   # e >= 0
        found = _bound(e, gens, sums)
        if found is None:
            return None
        key, side = found
        bounds[key] = bounds.get(key, 0) | side
    pairs = {g: (j, c) for (g, j, c), sides in bounds.items() if sides == 3}
    if len(pairs) != len(gens) or len(bounds) != len(gens) or \
            len({j for j, _ in pairs.values()}) != len(sums):
        return None
    ranges = rhs.ranges()
    if any(ranges[g] != ranges[j] * c for g, (j, c) in pairs.items()):
        return None
    r = len(gens)
    new = [f"{rhs.ix[0]}{k}" for k in range(2 * r)]
    sub: dict[str, Affine] = {}
    for m, g in enumerate(gens):
        j, c = pairs[g]
        sub[g] = Affine.var(new[m]) * c + Affine.var(new[r + m])
        sub[j] = Affine.var(new[m])
    dims = tuple(ranges[pairs[g][0]] for g in gens) + \
        tuple(Affine.lit(pairs[g][1]) for g in gens)
    ops = tuple(o.subst(sub) for o in rhs.operands)
    walked = type(rhs)(rhs.ix, dims, (), PTrue(), rhs.coeff, ops)
    return WindowForm(walked, tuple(sub[g] for g in gens))


def reads_computed(rhs: Rhs, defs: Mapping[str, Rhs], fused: Collection[str]) -> bool:
    """Whether `rhs` reads an array that a statement computes (through fused producers):
    only then has the walk loops to share (a gather of an input, as upsampling's, stays as
    it is, where the map over its output that reads it keeps it in a local)."""
    todo = [o.var for o in rhs.operands]
    while todo:
        v = todo.pop()
        if isinstance(defs[v], Input):
            continue
        if v not in fused:
            return True
        todo += [o.var for o in defs[v].operands]
    return False


def _bound(e: Affine, gens: tuple[str, ...], sums: tuple[str, ...]
           ) -> tuple[tuple[str, str, int], int] | None:
    """`e >= 0` as a window bound on an output index `i` by a summation index `j`:
    ((i, j, c), 1) for `i - c*j >= 0`, ((i, j, c), 2) for `c*j + c - 1 - i >= 0`."""
    terms = dict(e.terms)
    if len(terms) != 2:
        return None
    (a, ca), (b, cb) = sorted(terms.items(), key=lambda t: t[0] not in gens)
    if a not in gens or b not in sums:
        return None
    if ca == 1 and cb < 0 and e.const == 0:
        return (a, b, -cb), 1
    if ca == -1 and cb > 0 and e.const == cb - 1:
        return (a, b, cb), 2
    return None


__all__ = ["WindowForm", "window_form", "reads_computed"]
