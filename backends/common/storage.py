"""Storage decisions for materialised statements (issue 14, cause 1).

A statement's array needs a zero fill only if some element is read that its nest does not
write.  It is allocated with `np.empty` when

* its nest writes every element (`covers_box`), or
* it is not an output and every read of it, in every consumer, happens only at points
  where its own mask holds (`reads_within_mask`): `v3[i, j]` written over the coordinates
  of a relation `Om` and read only under `[Om(i, j)]` is never read where it was not
  written, so matfac's N x M temporaries are not zero-filled.

Otherwise it keeps `np.zeros` (the value where the mask fails is 0, SPEC 2.2).  A BLAS
statement assigns the product itself and allocates zeros only when the product is empty.

A temporary written by one loop over the coordinates of a relation `R` (every generator
index bound by the coordinate loop) and read only where that loop wrote it, each read inside
a loop over the same coordinates (`R`'s pattern in the same column order, any CSR row key),
is stored as a vector of `nnz(R)` elements indexed by the coordinate's position
(`coordinate_layouts`): matfac's `v0[i0:N, i1:M] = sum j0:K. [Om(i0, i1)] * U * V` is 1.2 M
doubles at 30% density instead of an N x M array, written and read in order (both loops
walk the same sorted coordinate array) instead of scattered over 32 MB.  When its one
reader visits each member once, in a loop over the same coordinates, it is not stored at all
but computed there, at the top of that loop's body (`inlined_coordinates`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from tensorlang.ir import ast, tssa
from tensorlang.ir.ast import Affine, Cmp, Pred

from ..codegen import ProgramPlan, StmtPlan, plan_reads
from ..codegen_nest import Driver, Facts, Part, in_bounds

ZEROS, EMPTY = "zeros", "empty"


def allocation(s: StmtPlan, plan: ProgramPlan) -> str:
    """`EMPTY` when no element the statement's loops leave unwritten is ever read, else
    `ZEROS` (see the module docstring; proved on the plan, not guessed)."""
    if s.mode != "loops" or s.scalar or s.outer is None:
        return ZEROS
    if len(s.outer) == 1 and covers_box(s.outer[0], s.rhs.gen_names(), s.rhs.dims,
                                        plan.sizes):
        return EMPTY
    return EMPTY if reads_within_mask(s.var, plan) else ZEROS


def reads_within_mask(var: str, plan: ProgramPlan) -> bool:
    """`var` is not an output and each consumer reads it only where `var`'s mask (the
    conjuncts without summation indices: the points its nest stores to) holds and the read
    is in range (for an add, also where one of its supports holds: its nest visits only
    their union, `codegen._live`).  A consumer's facts are its index ranges and its own mask (a fused
    consumer's value is computed only where its mask holds; an add reads an operand only
    under its support)."""
    p = plan.program
    if var in p.output_vars():
        return False
    rhs = p.defs[var]
    snames = set(rhs.sum_names())
    written = [c for c in tssa.conjuncts(rhs.pred) if not ast.free_names(c) & snames]
    if isinstance(rhs, tssa.AddRhs):    # an add's nest visits only the union of supports
        written.append(ast.Or(*rhs.supports))
    for user in p.uses(var):
        urhs = p.defs[user]
        if isinstance(urhs, tssa.Input):
            return False
        base = Facts.of(urhs.ranges(), plan.sizes, [urhs.pred])
        for k, o in enumerate(urhs.operands):
            if o.var != var:
                continue
            facts = base
            if isinstance(urhs, tssa.AddRhs):
                facts = base.add([urhs.supports[k]])
            sub = dict(zip(rhs.gen_names(), o.idx))
            need: list[Pred] = in_bounds(o.idx, rhs.dims) + \
                [ast.subst(c, sub) for c in written]
            if not all(facts.implies(c) for c in need):
                return False
    return True


@dataclass(frozen=True)
class CoordLayout:
    """A temporary stored as one element per member of relation `rel`, at the member's
    position in the coordinates sorted by the columns `order`; `args[k]` is the generator
    index that the relation's argument k is (the writer's coordinate loop)."""

    rel: str
    order: tuple[int, ...]
    args: tuple[str, ...]
    gens: tuple[str, ...]

    @property
    def pattern(self) -> tuple[str, tuple[int, ...], int]:
        """The writer's pattern (its coordinate count is the vector's length)."""
        return (self.rel, self.order, 0)

    def position(self, idx: Sequence[Affine],
                 loop: tuple[str, tuple[int, ...], tuple[str, ...]]) -> bool:
        """Whether a read at `idx` (the temporary's indices) inside coordinate loop `loop`
        (`codegen_nest.Loop.position`) is at that loop's current member."""
        rel, order, args = loop
        if (rel, order) != (self.rel, self.order) or len(args) != len(self.args):
            return False
        at = dict(zip(self.gens, idx))
        return all(at[g] == Affine.var(a) for g, a in zip(self.args, args))


def coordinate_layouts(plan: ProgramPlan) -> dict[str, CoordLayout]:
    """The temporaries stored as coordinate vectors (module docstring): proved on the plan,
    every read is checked again when printed (`codegen.ExprPrinter.operand`)."""
    out: dict[str, CoordLayout] = {}
    readers = [(s, plan_reads(s.rhs, plan)) for s in plan.stmts if s.mode in ("loops", "blas")]
    for s in plan.stmts:
        layout = _writer_layout(s)
        if layout is None or not reads_within_mask(s.var, plan):
            continue
        if all(_reads_at_positions(layout, s.var, u, reads) for u, reads in readers):
            out[s.var] = layout
    return out


def inlined_coordinates(plan: ProgramPlan, layouts: Mapping[str, CoordLayout],
                        alone: Sequence[str], grouped: Mapping[str, str] | None = None
                        ) -> dict[str, str]:
    """Coordinate vector -> its one reader, for the vectors computed where they are read
    (module docstring) instead of stored: the writer's nest is its coordinate loop alone
    (a guard only on sizes that the reader's outer guards imply, checked before any of
    its loops: the value is computed at every member the reader visits), every coordinate vector it reads is
    itself computed there (a chain `v0 -> v3 -> v4` computes v0 and then v3 at the top of
    v4's loop), and it is read by one statement, in whose every nest the matching
    coordinate loop binds every index of that reader but the one `grouped` names (the
    generator that reader's sums run innermost, `NumbaEmitter.sums_by_row`: inside the
    coordinate loop, once per member): each member is visited once, so the value is
    computed once per member, as its own loop would.  `alone`: the statements that have a
    nest to themselves (`sibling_fusion.schedule`'s one-statement units)."""
    out: dict[str, str] = {}
    grouped = grouped or {}
    readers = [(u, plan_reads(u.rhs, plan)) for u in plan.stmts if u.mode in ("loops", "blas")]
    for s in plan.stmts:   # (writers first: a chain's earlier vectors are decided first)
        v = s.var
        layout = layouts.get(v)
        if layout is None:
            continue
        assert s.outer is not None
        if v not in alone or \
                any(w in layouts and out.get(w) != v for w, _ in plan_reads(s.rhs, plan)):
            continue
        users = [(u, [idx for w, idx in reads if w == v]) for u, reads in readers]
        users = [(u, idxs) for u, idxs in users if idxs]
        if len(users) != 1 or len(users[0][1]) != 1:
            continue
        u, (idx,) = users[0]
        if u.mode != "loops" or u.outer is None:   # (u reads a vector: it is not inlined)
            continue
        if not _guard_holds(s.outer[0].nest.guard, u, plan.sizes):
            continue
        names = set(u.rhs.gen_names()) | set(u.rhs.sum_names())
        names.discard(grouped.get(u.var, ""))
        ok = True
        for opart in u.outer:
            for ipart in u.inner or [None]:
                loops = [p.driver for p in (opart, ipart)
                         if p is not None and p.driver is not None and not p.driver.lookup]
                hit = [d for d in loops
                       if layout.position(idx, (d.rel, tuple(d.order), d.args))]
                ok = ok and bool(hit) and names <= set(hit[0].args)
        if ok:
            out[v] = u.var
    return out


def _guard_holds(guard: Sequence[Pred], u: StmtPlan, sizes: Sequence[str]) -> bool:
    """Every conjunct of `guard` mentions sizes only and follows from the guards of each of
    `u`'s outer nests (printed before its loops)."""
    if any(ast.free_names(g) - set(sizes) for g in guard):
        return False
    assert u.outer is not None
    return all(Facts.of({}, sizes, part.nest.guard).implies(g)
               for part in u.outer for g in guard)


def dense_pass_candidates(plan: ProgramPlan, layouts: Mapping[str, CoordLayout]
                          ) -> dict[str, str]:
    """Statement -> relation, for the pointwise statements whose one coordinate loop binds
    every generator index and whose array is a box (not a coordinate vector): they may
    instead run as one pass over the box that reads the relation's mask, writing every
    element (0 where the mask fails), which the emitter chooses per call by the relation's
    density (`numba_cpu.DENSE_RATIO`).  Not an add (its nest visits the union of its
    supports), a mask with `exists` (flag loops at every point) nor a reader of a
    coordinate vector (read only inside coordinate loops)."""
    out: dict[str, str] = {}
    for s in plan.stmts:
        layout = _writer_layout(s)
        if layout is None or s.var in layouts or s.inner is not None or \
                isinstance(s.rhs, tssa.AddRhs) or _has_exists(s.rhs.pred) or \
                any(w in layouts for w, _ in plan_reads(s.rhs, plan)):
            continue
        out[s.var] = layout.rel
    return out


def _has_exists(p: Pred) -> bool:
    if isinstance(p, ast.Exists):
        return True
    if isinstance(p, (ast.And, ast.Or)):
        return _has_exists(p.a) or _has_exists(p.b)
    return False


def _writer_layout(s: StmtPlan) -> CoordLayout | None:
    """The layout of `s` when one coordinate loop binds all its generator indices."""
    if s.mode != "loops" or s.scalar or not s.outer or len(s.outer) != 1:
        return None
    part = s.outer[0]
    d: Driver | None = part.driver
    gens = s.rhs.gen_names()
    if d is None or d.lookup or d.nbound or part.exclude or part.nest.levels or             len(set(d.args)) != len(d.args) or sorted(d.args) != sorted(gens):
        return None
    return CoordLayout(d.rel, tuple(d.order), tuple(d.args), tuple(gens))


def _reads_at_positions(layout: CoordLayout, var: str, u: StmtPlan,
                        reads: Sequence[tuple[str, tuple[Affine, ...]]]) -> bool:
    """Every read of `var` by `u` happens, in each of `u`'s nests, inside a coordinate
    loop at the read's member."""
    mine = [idx for v, idx in reads if v == var]
    if not mine:
        return True
    if u.mode != "loops" or u.outer is None:
        return False
    for opart in u.outer:
        for ipart in u.inner or [None]:
            loops = [(p.driver.rel, tuple(p.driver.order), p.driver.args)
                     for p in (opart, ipart)
                     if p is not None and p.driver is not None and not p.driver.lookup]
            if not all(any(layout.position(idx, lp) for lp in loops) for idx in mine):
                return False
    return True


def covers_box(part: Part, gens: tuple[str, ...], dims: tuple[Affine, ...],
               sizes: list[str]) -> bool:
    if part.driver is not None or part.exclude or not part.nest.feasible:
        return False
    nonempty = Facts.of({}, sizes, [Cmp("<", Affine.lit(0), d) for d in dims])
    if not all(nonempty.implies(g) for g in part.nest.guard):
        return False
    dim_of = dict(zip(gens, dims))
    seen: set[str] = set()
    for lv in part.nest.levels:
        lb = lv.loop
        if lb is None or lv.guards or lv.var not in dim_of or len(lb.lower) != 1 \
                or len(lb.upper) != 1:
            return False
        lo, hi = lb.lower[0], lb.upper[0]
        if lo.div != 1 or lo.expr != Affine.lit(0) or hi.div != 1 \
                or hi.expr != dim_of[lv.var] - 1:
            return False
        seen.add(lv.var)
    return seen == set(gens)


__all__ = ["ZEROS", "EMPTY", "allocation", "covers_box", "CoordLayout", "coordinate_layouts",
           "dense_pass_candidates", "inlined_coordinates"]
