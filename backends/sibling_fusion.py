"""Sibling loop fusion for the CPU kernel (issue 16): statements that run the same loop nest
share one.

The Hessian of a 50-term expression plans some 240 statements in 528 loops, most of them
dense maps and sums over the same box `[i0:N, i1:N]`, each in its own nest: Numba's compile
time grows with the number of loops, and each nest re-reads from memory what its neighbour
just wrote.  `schedule` groups them into *units*, the order in which the emitter prints
statements:

  * a unit is one statement, or several `loops` statements (pointwise maps, and reductions
    whose outer nest has a loop; not scalars) whose outer nests print identically
    (`nest_key`: the same generator indices, the same loops, guards, alternatives and
    exclusions), printed as ONE nest whose innermost body computes each member's element
    in turn (a reduction with its own inner loops);
  * a statement joins the first unit with its key that comes no earlier than the last unit
    it depends on (moving a pure statement earlier, past statements it does not read,
    changes nothing); when that is the unit of a statement it reads, every read of that
    unit's members (through fused producers too, `codegen.plan_reads`) must be at the
    point being computed, which an earlier body of the same iteration has just written;
  * a scalar statement is a unit of its own placed right after the last unit it reads from
    (not after every earlier unit), so that it never separates siblings it does not feed;
  * a unit closes at `MAX_WEIGHT`: Numba's compile time grows faster than linearly with a
    function's size, and a shared nest is one statement that `kernel_split` cannot cut.

Every member computes each element with the same operations as alone (the same expression
printer, its own facts), so results are bit for bit those of separate nests; a value a
later member reads at the same point is kept in a local (`ExprPrinter.locals`) instead of
being read back.  Instrumented, each member keeps its own iteration counter (`TL_COUNTED`
stays per statement).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from tensorlang.ir.ast import Affine

from .codegen import ProgramPlan, StmtPlan, plan_reads
from .codegen_nest import RelNames, part_steps


def identity(s: StmtPlan) -> tuple[Affine, ...]:
    """The access of `s`'s own element at the point its body computes."""
    return tuple(Affine.var(g) for g in s.rhs.gen_names())


def nest_key(s: StmtPlan) -> str | None:
    """What a statement's nest prints as, for statements that may share a nest (None for
    the others): the loop steps of each alternative, with program names as they are
    (the emitter's names are an injective function of them) and a fixed tag."""
    if s.mode != "loops" or s.scalar or not s.outer:
        return None
    if s.inner is not None and not all(part.has_loop() for part in s.outer):
        return None   # (a reduction with no outer loop runs its inner loop in chunks)
    rels = RelNames(lambda r: f"mask {r}", lambda pat: (f"coords {pat}", f"ptr {pat}"))
    steps = [part_steps(part, _same, rels, [0], "    ", "", s.body_facts(part))
             for part in s.outer]
    return repr((s.rhs.gen_names(), s.rhs.dims, steps))


def _same(name: str) -> str:
    return name


def weight(s: StmtPlan) -> int:
    """About the lines a member adds to a shared nest's body."""
    return 1 if s.inner is None else REDUCTION_WEIGHT * len(s.inner)


# A shared nest is one statement of the kernel, which `kernel_split` cannot cut, and Numba's
# compile time grows faster than linearly with a function's size: a unit is closed when its
# members' weights reach MAX_WEIGHT (a sum's body is about ten lines).  Measured on the
# 50-term Hessian's kernel, Numba's compile CPU: 31.8 s at 16, 30.5 s at 32, 45.0 s unbounded.
REDUCTION_WEIGHT = 8
MAX_WEIGHT = 32


def schedule(plan: ProgramPlan, max_weight: int | None = None,
             alone: frozenset[str] = frozenset()) -> list[list[StmtPlan]]:
    """The statements with loops or a BLAS call, in emission order, grouped into units (see
    the module docstring) of at most `max_weight` (default MAX_WEIGHT; 0: every statement
    alone, in program order); the statements in `alone` share no nest (the sums the emitter
    runs by rows over a relation's rows: their walk once per row, not once per point, and
    the map that reads them a plain loop that vectorises); deterministic: a function of the
    plan alone."""
    if max_weight is None:
        max_weight = MAX_WEIGHT
    units: list[list[StmtPlan]] = []
    keys: list[str | None] = []
    weights: list[int] = []
    where: dict[str, float] = {}   # unit index; a scalar: half past the unit it follows
    after: dict[int, list[StmtPlan]] = {}   # unit index -> the scalars emitted right after it
    for s in plan.counted():
        reads = plan_reads(s.rhs, plan)
        last = max((where[v] for v, _ in reads if v in where), default=-1)
        if s.scalar:
            # a scalar goes right after what it reads, not after everything before it: as
            # a barrier it kept later statements out of the nests it does not feed (nbody's
            # gradient: the constant 0.01 split the pair nest in two, and the N x N squared
            # distances were stored instead of kept in a local)
            after.setdefault(math.floor(last), []).append(s)
            where[s.var] = math.floor(last) + 0.5
            continue
        key = None if s.var in alone else nest_key(s)
        target = -1
        if key is not None:
            for k in range(max(math.ceil(last), 0), len(units)):
                if keys[k] == key and weights[k] + weight(s) <= max_weight and \
                        (k > last or _reads_at_point(s, units[k], reads)):
                    target = k
                    break
        if target < 0:
            units.append([s])
            keys.append(key)
            weights.append(weight(s))
            target = len(units) - 1
        else:
            units[target].append(s)
            weights[target] += weight(s)
        where[s.var] = target
    out = [[s] for s in after.get(-1, [])]
    for k, unit in enumerate(units):
        out += [unit, *([s] for s in after.get(k, []))]
    return out


def read_only_here(unit: Sequence[StmtPlan], plan: ProgramPlan,
                   readers: Mapping[str, Sequence[tuple[str, tuple[Affine, ...]]]]
                   ) -> frozenset[str]:
    """The members of a unit that need no array: not an output, and read only by later
    members of the unit at the point being computed (from the local that holds it)."""
    outputs = set(plan.program.output_vars())
    here = identity(unit[0])
    later: set[str] = set()
    out = set()
    for s in reversed(unit):
        uses = readers.get(s.var, ())
        if s.var not in outputs and uses and \
                all(r in later and idx == here for r, idx in uses):
            out.add(s.var)
        later.add(s.var)
    return frozenset(out)


def _reads_at_point(s: StmtPlan, unit: Sequence[StmtPlan],
                    reads: Sequence[tuple[str, tuple[Affine, ...]]]) -> bool:
    members = {m.var for m in unit}
    here = identity(s)
    return all(idx == here for v, idx in reads if v in members)


__all__ = ["schedule", "nest_key", "identity", "read_only_here"]
