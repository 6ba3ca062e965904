"""The derivative cost bounds of SPEC 6, as numbers: what `Function.cost_bound`, `tl cost`
and the theorem checks (`tensorlang.proofs.theorems`) compare the cost of a derivative with.

  Theorem 6.1   C(jvp f) <= C(f) + JVP_FACTOR * C(f) + EXTREME_FACTOR * E(f)
                                                        (tangent part <= 3 C(f) + 4 E(f))
  Theorem 6.55  C(vjp f) <= VJP_FACTOR * C(f) + |in| + |out| + EXTREME_FACTOR * E(f)
                                                        (|.|: scalar entries)

E(f) is the number of points the max/min reductions of f visit (`cost.extreme_points`; 0
for a program without them, where the bounds are SPEC 6's).  Sharing the derivative equally
among tied maximisers (SPEC 12, JAX's convention) costs 4 per visited point (a comparison, a
selection, the tangent's and the count's additions) against the reduction's n - 1 calls, so no
multiple of C(f) bounds it where the reduced body is cheap (n = 1: C(f) = 0); the term is
stated per reduction as SPEC 13 states per box (docs/decisions.md, "max/min and SPEC 6").

C is the exact SPEC 3 cost of the programs as compiled (the default pipeline, simplifier
included); docs/derivatives.md explains why the bound is stated for those programs.
"""
from __future__ import annotations

from typing import Mapping

from tensorlang.ir.ast import TArr, TPair, TReal, Type

JVP_FACTOR = 3      # tangent part, Theorem 6.1
VJP_FACTOR = 4      # whole vjp program, Theorem 6.55
EXTREME_FACTOR = 4  # per point a max/min reduction visits, both theorems

__all__ = ["EXTREME_FACTOR", "JVP_FACTOR", "VJP_FACTOR", "type_size", "jvp_bound",
           "vjp_bound"]


def type_size(t: Type, sizes: Mapping[str, int]) -> int:
    """Number of scalar entries of a value of type `t` at the given sizes."""
    if isinstance(t, TReal):
        return 1
    if isinstance(t, TPair):
        return type_size(t.a, sizes) + type_size(t.b, sizes)
    if isinstance(t, TArr):
        return max(0, int(t.size.evaluate(sizes))) * type_size(t.elem, sizes)
    return 0


def jvp_bound(cost_f: int, extreme: int = 0) -> int:
    """Theorem 6.1: the most a jvp program (primal included) may cost; `extreme` is E(f)."""
    return cost_f + JVP_FACTOR * cost_f + EXTREME_FACTOR * extreme


def vjp_bound(cost_f: int, size_in: int, size_out: int, extreme: int = 0) -> int:
    """Theorem 6.55: the most a vjp (or grad) program may cost; `extreme` is E(f)."""
    return VJP_FACTOR * cost_f + size_in + size_out + EXTREME_FACTOR * extreme
