"""The machine estimate of SPEC 16: per statement of a compiled program, the bytes it
moves, the floating-point operations it does and whether it runs as BLAS, and from them a
time estimate (a roofline: the larger of compute time and memory time, plus a per-call
overhead).  `tl cost --machine` prints it; the benchmark suite ranks its totals against
measured times (`bench/machine_rank.py`).

What a statement costs follows the code generator's plan (`backends.codegen`):

* a fused statement has no cost of its own: its operations are done in its consumer (they
  are added to the consumer's row) and it moves no memory;
* a BLAS statement does `2 m n k` flops at BLAS speed, reads its operands once (plus a copy
  of an operand the plan transposes) and writes its result; a weighted Gram product
  (syrk, `backends/gram.py`) does half of that and copies its base scaled; a row-panel
  product (`codegen.RowPanel`) that runs in panels at these sizes (`codegen.panel_runs`)
  writes no result to memory, and its reader reads none;
* a loop statement does its exact SPEC 3 operations (`semantics.cost.prim_cost`, builtin
  calls weighted by `CALL_FLOPS`) at scalar-loop speed, writes its array (twice when it is
  zero-filled first, `common.storage`) and reads each materialised operand array at most
  once per visited point; a read whose innermost index has a stride other than 1 (a column
  walk) moves a cache line per element.  The arrays are those the kernel allocates
  (`common.allocation`): a coordinate vector has one element per member of its relation,
  and a statement kept in a local or computed in its reader's loop writes none.

The constants describe one core of a current x86 machine; the model is for ranking
statements and programs (which one dominates, what a layout change saves), not for
predicting microseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine
from tensorlang.semantics.cost import cost_program
from tensorlang.semantics.interp import bind_args

from tensorlang.semantics import memory

from ..codegen import (ProgramPlan, StmtPlan, builtins_used, panel_rows, panel_runs,
                       plan_program, plan_reads)
from . import allocation, storage

FLOAT_BYTES = 8
CACHE_LINE = 64
LOOP_FLOPS = 1.0e9      # scalar loop with a strict-order accumulator, per second
BLAS_FLOPS = 2.0e10     # dgemm on one core
BANDWIDTH = 1.0e10      # bytes per second from memory
CALL_FLOPS = 20         # a transcendental builtin (exp, log, sqrt, ...) in flops
# Builtins that compile to a few arithmetic instructions (one flop each).
CHEAP_CALLS = frozenset({"square", "recip", "abs", "relu", "step", "sign", "max", "min",
                         "ge", "gt", "sel_ge", "keep_ge", "keep_gt"})
STMT_OVERHEAD = 2.0e-7  # seconds per materialised statement (allocation, loop set-up)
BLAS_OVERHEAD = 1.0e-6  # seconds per BLAS call (checks, reshapes, dispatch)


@dataclass(frozen=True)
class StmtEstimate:
    var: str
    mode: str            # loops | blas | fused (into `into`)
    flops: int
    bytes: int
    blas: bool
    seconds: float
    into: str = ""       # the consumer of a fused statement

    def row(self) -> str:
        where = f"fused into {self.into}" if self.mode == "fused" else \
            (f"BLAS rows in {self.into}" if self.into else "BLAS") if self.blas else "loops"
        return (f"{self.var:>8}  {where:<16} {self.flops:>14,} {self.bytes:>14,} "
                f"{self.seconds * 1e3:>10.4f}")


@dataclass(frozen=True)
class MachineEstimate:
    stmts: tuple[StmtEstimate, ...]

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.stmts if s.mode != "fused")

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.stmts)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stmts)

    def text(self, title: str) -> str:
        head = f"{'stmt':>8}  {'runs as':<16} {'flops':>14} {'bytes moved':>14} {'est. ms':>10}"
        rows = [s.row() for s in self.stmts]
        total = (f"{'total':>8}  {'':<16} {self.flops:>14,} {self.bytes:>14,} "
                 f"{self.seconds * 1e3:>10.4f}")
        return "\n".join([title, head, *rows, total])


def estimate(p: tssa.Program, args: Mapping[str, Any],
             plan: ProgramPlan | None = None) -> MachineEstimate:
    """The machine estimate of program `p` at the sizes (and relations) of `args`."""
    plan = plan or plan_program(p)
    env = bind_args(p, {k: v for k, v in args.items() if k in {q.name for q in p.params}},
                    values=False)
    sizes = {n: int(env.sizes[n]) for n in plan.sizes}
    counts = cost_program(plan.program, args).per_stmt   # (the plan may rewrite: gram.py)
    members = {r: int(np.count_nonzero(mask)) for r, mask in env.rels.items()}
    arrays = _stored(plan, sizes, members)
    fused_into = _fused_consumers(plan)
    flops: dict[str, int] = {}
    for s in plan.stmts:
        a, m, c = counts[s.var]
        flops[s.var] = a + m + call_weight(s.rhs) * c
    owned: dict[str, int] = dict(flops)        # a consumer's row carries its producers'
    for v in (s.var for s in plan.stmts):      # program order: producers first
        for c in fused_into.get(v, ()):        # each consumer recomputes a duplicated one
            owned[c] += owned[v]
    panels = running_panels(plan, sizes)
    out: list[StmtEstimate] = []
    for s in plan.stmts:
        if s.mode == "input":
            continue
        if s.mode == "fused":
            out.append(StmtEstimate(s.var, "fused", flops[s.var], 0, False, 0.0,
                                    ", ".join(fused_into.get(s.var, ()))))
        elif s.mode == "blas":
            out.append(_blas(s, plan, sizes, s.var in panels))
        else:
            out.append(_loops(s, plan, sizes, owned[s.var], counts[s.var], arrays,
                              set(panels)))
    return MachineEstimate(tuple(out))


def running_panels(plan: ProgramPlan, sizes: Mapping[str, int]) -> dict[str, int]:
    """The row-panel products (`codegen.RowPanel`) that run in panels at `sizes`, each with
    the elements of one panel."""
    out: dict[str, int] = {}
    for v, rp in plan.panels.items():
        s = plan.by_var[v]
        assert s.blas is not None
        ranges = {k: max(0, d.evaluate(sizes)) for k, d in s.rhs.ranges().items()}
        (i,), (j,), (k,) = s.blas.i_left, s.blas.i_right, s.rhs.sum_names()
        if panel_runs(ranges[i], ranges[j], ranges[k]):
            out[v] = panel_rows(ranges[j]) * ranges[j]
    return out


@dataclass(frozen=True)
class KernelArrays:
    """The arrays a compiled program allocates at given sizes, in elements: each array the
    kernel makes (`common.allocation`: a coordinate vector at its relation's member count
    when known, else its box; a product's copies), the inputs' and the output's.  A kernel
    whose largest temporary is O(output + inputs) allocates no intermediate larger than
    what it is given and returns (issue 14: matfac's Hessian)."""

    temporaries: tuple[tuple[str, int], ...]    # (statement, elements), not the outputs
    outputs: int
    inputs: int

    @property
    def largest_temporary(self) -> tuple[str, int]:
        return max(self.temporaries, key=lambda t: t[1], default=("", 0))


def kernel_arrays(p: tssa.Program, sizes: Mapping[str, int],
                  plan: ProgramPlan | None = None) -> KernelArrays:
    """`KernelArrays` of program `p` at `sizes` (a value for each size parameter; a
    relation among them: its member count sizes the coordinate vectors it indexes)."""
    plan = plan or plan_program(p)
    shapes = plan.program.shapes
    outs = set(plan.program.output_vars())
    panels = running_panels(plan, sizes)   # (a panel per strip being computed: per thread)
    arrays = allocation.kernel_arrays(plan)
    members = dict(memory.relation_members(arrays, sizes))
    temps = tuple((a.name, panels.get(a.name, _entries(a, sizes, members)))
                  for a in arrays if not a.output)
    inputs = sum(_size(shapes[s.var], sizes) for s in plan.stmts if s.mode == "input")
    return KernelArrays(temps, sum(_size(shapes[v], sizes) for v in outs), inputs)


def _entries(a: memory.Allocation, sizes: Mapping[str, int], members: Mapping[str, int]
             ) -> int:
    """Elements of an array the kernel allocates (a coordinate vector: at most its box)."""
    box = _size(a.dims, sizes)
    return min(box, members[a.rel]) if a.rel in members else box


def _stored(plan: ProgramPlan, sizes: Mapping[str, int], members: Mapping[str, int]
            ) -> dict[str, int]:
    """Elements of each statement's own array (`common.allocation`; none for a statement
    that has none), a coordinate vector at its relation's `members`."""
    return {a.name: _entries(a, sizes, members) for a in allocation.kernel_arrays(plan)
            if not a.working}


def call_weight(rhs: tssa.Rhs) -> int:
    """Flops of one builtin call of a map, as the kernel computes it (integer powers are
    strength-reduced: `codegen.builtins_used`)."""
    if not isinstance(rhs, tssa.MapRhs):
        return 0
    used = builtins_used(rhs)
    return max((1 if fn in CHEAP_CALLS else CALL_FLOPS) for fn in used) * len(used)


def _size(dims: tuple[Affine, ...], sizes: Mapping[str, int]) -> int:
    n = 1
    for d in dims:
        n *= max(0, d.evaluate(sizes))
    return n


def _blas(s: StmtPlan, plan: ProgramPlan, sizes: Mapping[str, int], panels: bool
          ) -> StmtEstimate:
    assert s.blas is not None
    b, rhs, shapes = s.blas, s.rhs, plan.program.shapes
    ranges = {k: max(0, d.evaluate(sizes)) for k, d in rhs.ranges().items()}

    def prod(names: tuple[str, ...]) -> int:
        n = 1
        for k in names:
            n *= ranges[k]
        return n
    m, n, k = prod(b.i_left), prod(b.i_right), prod(rhs.sum_names())
    if s.gram is not None:   # syrk: half of gemm's flops; X read, scaled into a copy
        x = _size(shapes[s.gram.base.var], sizes)
        flops = m * n * k
        bytes_ = FLOAT_BYTES * (3 * x + k + _size(rhs.dims, sizes))
        seconds = BLAS_OVERHEAD + max(flops / BLAS_FLOPS, bytes_ / BANDWIDTH)
        return StmtEstimate(s.var, "blas", flops, bytes_, True, seconds)
    moved = 0
    for o, perm, first in ((b.left, b.left_perm, len(b.i_left)),
                           (b.right, b.right_perm, len(rhs.sum_names()))):
        size = _size(shapes[o.var], sizes)
        in_place = perm == (1, 0) and first == 1          # a plain transpose: no copy
        copied = perm != tuple(range(len(perm))) and not in_place
        moved += size * (3 if copied else 1)
    if not panels:   # (in panels, the product stays in the cache)
        moved += _size(rhs.dims, sizes)
    flops = 2 * m * n * k
    bytes_ = FLOAT_BYTES * moved
    calls = -(-m // panel_rows(n)) if panels else 1
    seconds = BLAS_OVERHEAD * calls + max(flops / BLAS_FLOPS, bytes_ / BANDWIDTH)
    return StmtEstimate(s.var, "blas", flops, bytes_, True, seconds,
                        plan.panels[s.var].consumer if panels else "")


def _loops(s: StmtPlan, plan: ProgramPlan, sizes: Mapping[str, int], flops: int,
           count: tuple[int, int, int], arrays: Mapping[str, int], panels: set[str]
           ) -> StmtEstimate:
    p = plan.program
    points = max(count) if any(count) else _size(s.rhs.dims, sizes)
    out_elems = arrays.get(s.var, 0)
    box = s.rhs.dims and out_elems == _size(s.rhs.dims, sizes)   # (not a coordinate vector)
    fill = 2 if box and storage.allocation(s, plan) == storage.ZEROS else 1
    moved = out_elems * fill * FLOAT_BYTES
    inner = s.rhs.sum_names()[-1:] or s.rhs.gen_names()[-1:]
    inputs = p.inputs()
    for var, idx in plan_reads(s.rhs, plan):
        if not idx or var in panels or (var not in arrays and var not in inputs):
            continue      # (a scalar, a row panel in the cache, or a value held in a local)
        size = arrays[var] if var in arrays else _size(p.shapes[var], sizes)
        walked = inner and idx and idx[-1].coeff(inner[0]) not in (0, 1) or \
            inner and any(a.coeff(inner[0]) != 0 for a in idx[:-1])
        per = CACHE_LINE if walked else FLOAT_BYTES
        moved += min(size * FLOAT_BYTES * (CACHE_LINE // FLOAT_BYTES if walked else 1),
                     points * per)
    seconds = STMT_OVERHEAD + max(flops / LOOP_FLOPS, moved / BANDWIDTH)
    return StmtEstimate(s.var, "loops", flops, moved, False, seconds)


def _fused_consumers(plan: ProgramPlan) -> dict[str, tuple[str, ...]]:
    """The consumers each fused statement is computed in (several when it is duplicated,
    `codegen.decide_fusion`), in program order."""
    order = {s.var: k for k, s in enumerate(plan.stmts)}
    return {v: tuple(sorted(plan.program.uses(v), key=order.__getitem__))
            for v in plan.fused}


__all__ = ["StmtEstimate", "MachineEstimate", "estimate", "KernelArrays", "kernel_arrays",
           "running_panels"]
