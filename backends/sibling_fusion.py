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

A unit may also share only the outer loops of its members' nests (*prefix sharing*): a
statement over `[i0:H, i1:W]` and one over `[i0:H, i1:W, i2:2]` (maxpool's gradient) run in
one nest over `(i0, i1)`, inside which each member runs the rest of its own nest in turn.
Members of such a unit have one alternative and no relation loop.  The shared steps are
the longest prefix of all members' printed steps that ends with a loop, under the conjuncts
of their guards (on the sizes) that they all have; a member tests its others inside the
shared loops (`shared_steps`).  A member that reads an earlier member of the unit reads it
at the same values of the shared loops (it was computed in full for them, earlier in the
same iteration).  Members of the same nest next to each other run their own steps together
(`groups`); a member keeps a value in a local for the later members of its run, and for all
later members when it has no steps of its own.  Sums run by rows (`exact`) and row-panel
readers share only whole nests.

Every member computes each element with the same operations as alone (the same expression
printer, its own facts), so results are bit for bit those of separate nests; a value a
later member reads at the same point is kept in a local (`ExprPrinter.locals`) instead of
being read back.  Instrumented, each member keeps its own iteration counter (`TL_COUNTED`
stays per statement).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from tensorlang.ir.ast import Affine, Pred

from . import accumulate
from .codegen import ProgramPlan, StmtPlan, plan_reads
from .codegen_nest import Guard, Loop, Part, RelNames, Step, part_steps


def identity(s: StmtPlan) -> tuple[Affine, ...]:
    """The access of `s`'s own element at the point its body computes."""
    return tuple(Affine.var(g) for g in s.rhs.gen_names())


def _key_steps(s: StmtPlan, part: Part) -> list[Step]:
    """The steps of nest `part` of `s` as `nest_key` prints them."""
    rels = RelNames(lambda r: f"mask {r}", lambda pat: (f"coords {pat}", f"ptr {pat}"))
    return part_steps(part, _same, rels, [0], "    ", "", s.body_facts(part))


@dataclass(frozen=True)
class Nest:
    """A statement's one nest as prefix sharing sees it: the conjuncts of its guard (on the
    sizes only, so that a member may test the ones the others lack inside the shared loops)
    and its other steps as `nest_key` prints them."""

    guard: frozenset[Pred]
    steps: tuple[str, ...]


@dataclass(frozen=True)
class Prefix:
    """What the members of a unit share: the guard conjuncts they all have and their first
    other steps (`cut` of them, the last a loop)."""

    guard: frozenset[Pred]
    steps: tuple[str, ...]

    @property
    def cut(self) -> int:
        return len(self.steps)


def nest_steps(s: StmtPlan) -> Nest | None:
    """`s`'s nest for prefix sharing; None when `s` may not share a part of its nest (more
    than one alternative, a relation loop or a guard that needs lines, no loop)."""
    if s.mode != "loops" or s.scalar or not s.outer or len(s.outer) != 1:
        return None
    part = s.outer[0]
    if part.driver is not None or not part.has_loop():
        return None
    steps = _key_steps(s, part)
    if part.nest.guard:   # (the first step: there is no relation loop)
        guard = steps.pop(0)
        if not isinstance(guard, Guard) or guard.pre:
            return None
    return Nest(frozenset(part.nest.guard), tuple(repr(st) for st in steps))


def _cut(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common prefix of step lists `a` and `b` that ends with a
    loop (0: none)."""
    cut = 0
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            break
        if x.startswith("Loop("):
            cut = k + 1
    return cut


def _join(have: Prefix | Nest, nest: Nest) -> Prefix | None:
    """What a unit sharing `have` shares once a member with `nest` joins (None: nothing)."""
    cut = _cut(have.steps, nest.steps)
    return Prefix(have.guard & nest.guard, have.steps[:cut]) if cut else None


def shared_steps(unit: Sequence[StmtPlan]) -> Prefix | None:
    """What the members of `unit` share of their nests: None when they all print the same
    nest (`nest_key`), else their `Prefix`."""
    if len(unit) == 1 or all(nest_key(s) == nest_key(unit[0]) for s in unit[1:]):
        return None
    nests = [nest_steps(s) for s in unit]
    have: Prefix | Nest | None = nests[0]
    for nest in nests[1:]:
        assert have is not None and nest is not None, unit
        have = _join(have, nest)
    assert isinstance(have, Prefix), unit
    return have


def prefix_vars(s: StmtPlan, prefix: Prefix) -> tuple[str, ...]:
    """The program names of the loops `s` shares with its unit (`prefix`)."""
    assert s.outer is not None
    steps = _key_steps(s, s.outer[0])[1 if s.outer[0].nest.guard else 0:]
    return tuple(st.var for st in steps[:prefix.cut] if isinstance(st, Loop))


def own_steps(s: StmtPlan, prefix: Prefix | None) -> bool:
    """Whether member `s` runs loops or tests of its own inside the nest its unit shares
    (`prefix`: `shared_steps` of the unit)."""
    if prefix is None:
        return False
    nest = nest_steps(s)
    assert nest is not None
    return len(nest.steps) > prefix.cut or nest.guard != prefix.guard


def groups(unit: Sequence[StmtPlan]) -> list[list[StmtPlan]]:
    """The members of a unit in runs of the same nest (`nest_key`), which run their own
    steps once, together (all of them, in a unit of one nest)."""
    out: list[list[StmtPlan]] = []
    for s in unit:
        if out and nest_key(out[-1][0]) == nest_key(s):
            out[-1].append(s)
        else:
            out.append([s])
    return out


def in_scope(unit: Sequence[StmtPlan]) -> dict[str, frozenset[str]]:
    """Per member, the later members that see a local it assigns at its point: those of
    its own run (`groups`), and all of them when it has no steps of its own."""
    out: dict[str, frozenset[str]] = {}
    runs = groups(unit)
    prefix = shared_steps(unit) if len(runs) > 1 else None
    for k, run in enumerate(runs):
        later_runs = frozenset(t.var for r in runs[k + 1:] for t in r)
        for m, s in enumerate(run):
            mine = frozenset(t.var for t in run[m + 1:])
            out[s.var] = mine if own_steps(s, prefix) else mine | later_runs
    return out


def nest_key(s: StmtPlan) -> str | None:
    """What a statement's nest prints as, for statements that may share a nest (None for
    the others): the loop steps of each alternative, with program names as they are
    (the emitter's names are an injective function of them) and a fixed tag."""
    if s.mode != "loops" or s.scalar or not s.outer:
        return None
    if s.inner is not None and not all(part.has_loop() for part in s.outer):
        return None   # (a reduction with no outer loop runs its inner loop in chunks)
    steps = [_key_steps(s, part) for part in s.outer]
    return repr((s.rhs.gen_names(), s.rhs.dims, steps))


def _same(name: str) -> str:
    return name


def weight(s: StmtPlan) -> int:
    """About the lines a member adds to a shared nest's body (a sum of a few terms, fewer
    than `accumulate.SHORT` per loop, is printed without blocks: a loop and an addition)."""
    if s.inner is None:
        return 1
    return (FEW_WEIGHT if few_terms(s) else REDUCTION_WEIGHT) * len(s.inner)


def few_terms(s: StmtPlan) -> bool:
    """Whether reduction `s` adds fewer than `accumulate.SHORT` static terms per inner
    alternative (a loop and an addition, no blocks)."""
    terms = [part.static_terms() for part in s.inner or ()]
    return None not in terms and max(terms, default=0) < accumulate.SHORT   # type: ignore


# A shared nest is one statement of the kernel, which `kernel_split` cannot cut, and Numba's
# compile time grows faster than linearly with a function's size: a unit is closed when its
# members' weights reach MAX_WEIGHT (a sum's body is about ten lines).  Measured on the
# 50-term Hessian's kernel, Numba's compile CPU: 31.8 s at 16, 30.5 s at 32, 45.0 s unbounded.
REDUCTION_WEIGHT = 8
FEW_WEIGHT = 3
MAX_WEIGHT = 32


def schedule(plan: ProgramPlan, max_weight: int | None = None,
             alone: frozenset[str] = frozenset(), exact: frozenset[str] = frozenset()
             ) -> list[list[StmtPlan]]:
    """The statements with loops or a BLAS call, in emission order, grouped into units (see
    the module docstring) of at most `max_weight` (default MAX_WEIGHT; 0: every statement
    alone, in program order); the statements in `alone` share no nest (the sums the emitter
    runs by rows over a relation's rows: their walk once per row, not once per point, and
    the map that reads them a plain loop that vectorises), those in `exact` share only a
    whole nest (the sums the emitter runs by rows, all of a row's sums in one walk, which a
    prefix would split into a walk per sum); deterministic: a function of the plan alone."""
    if max_weight is None:
        max_weight = MAX_WEIGHT
    units: list[list[StmtPlan]] = []
    keys: list[str | None] = []    # the members' one nest key (None: mixed, or none)
    shared: list[Prefix | Nest | None] = []   # what all members share (a Nest: one member)
    weights: list[int] = []
    readers_of_panels = {rp.consumer for rp in plan.panels.values()}
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
        # (a row-panel product's reader runs its row loop in strips: not in a prefix)
        steps = None if s.var in alone or s.var in exact or s.var in readers_of_panels \
            else nest_steps(s)
        target, prefix = -1, None
        for k in range(max(math.ceil(last), 0), len(units) if key is not None else 0):
            if weights[k] + weight(s) > max_weight:
                continue
            if keys[k] == key:
                if k > last or _reads_at_point(s, units[k], reads):
                    target = k
                    break
                continue
            have = shared[k]
            prefix = _join(have, steps) if have is not None and steps is not None else None
            if prefix is not None and (k > last or _reads_at_prefix(
                    s, units[k], reads, prefix_vars(s, prefix))):
                target = k
                break
        if target < 0:
            units.append([s])
            keys.append(key)
            shared.append(steps)
            weights.append(weight(s))
            target = len(units) - 1
        else:
            if keys[target] != key:   # (a prefix of the nests: see the module docstring)
                keys[target], shared[target] = None, prefix
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
    members of the unit at the point being computed, from the local that holds it
    (`in_scope`)."""
    outputs = set(plan.program.output_vars())
    scope = in_scope(unit)
    out = set()
    for s in unit:
        uses = readers.get(s.var, ())
        here = identity(s)
        if s.var not in outputs and uses and \
                all(r in scope[s.var] and idx == here for r, idx in uses):
            out.add(s.var)
    return frozenset(out)


def _reads_at_point(s: StmtPlan, unit: Sequence[StmtPlan],
                    reads: Sequence[tuple[str, tuple[Affine, ...]]]) -> bool:
    members = {m.var for m in unit}
    here = identity(s)
    return all(idx == here for v, idx in reads if v in members)


def _reads_at_prefix(s: StmtPlan, unit: Sequence[StmtPlan],
                     reads: Sequence[tuple[str, tuple[Affine, ...]]],
                     loops: Sequence[str]) -> bool:
    """Whether every read of `s` of a member of `unit` is at the current values of the
    shared `loops` (which the member's own nest computed in full, earlier in the same
    iteration)."""
    gens = {m.var: m.rhs.gen_names() for m in unit}
    for v, idx in reads:
        if v in gens:
            if len(idx) != len(gens[v]):   # (a window walk: its array keeps the output's box)
                return False
            for g in loops:
                if g not in gens[v] or idx[gens[v].index(g)] != Affine.var(g):
                    return False
    return True


__all__ = ["schedule", "nest_key", "nest_steps", "shared_steps", "own_steps", "prefix_vars",
           "groups", "in_scope", "identity", "read_only_here", "Nest", "Prefix"]
