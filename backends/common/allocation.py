"""The arrays a CPU kernel allocates, from the code generator's own decisions (issue 14).

`kernel_arrays(plan)` lists, for a planned program, each array the Numba CPU kernel makes,
as `semantics.memory.Allocation`s (shape affine in the sizes).  It asks the functions the
emitter (`numba_cpu_source.NumbaEmitter`) asks, so that the memory estimate and the machine
model count what the kernel does:

  * a `fused` statement (`codegen.decide_fusion`: computed in its reader, recomputed in each
    when it is cheap and read by several) and a scalar have no array;
  * a member of a shared nest that only later members read at the same point is kept in a
    local (`sibling_fusion.read_only_here`);
  * a coordinate vector computed in its one reader's loop (`storage.inlined_coordinates`)
    has no array; one stored (`storage.coordinate_layouts`) has one entry per member of its
    relation (`rel`);
  * a BLAS statement's array, plus, while the product is made, the operands it copies (an
    operand whose axes are permuted, other than a plain transpose BLAS reads in place) and
    the unscaled product (`working`); a product whose axes are permuted into the statement's
    order keeps the product beside its copy (a local of the kernel); a weighted Gram product
    (syrk, `gram.py`) scales a copy of its base;
  * every other array statement its box (`np.zeros` or `np.empty`, `storage.allocation`).

The emitter records the list in the kernel module's header (`TL_ARRAYS`), so that a warm
process estimates a call without planning; `machine_model.kernel_arrays` reads it too.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from tensorlang.ir.ast import Affine
from tensorlang.semantics.memory import Allocation

from .. import sibling_fusion
from ..codegen import ProgramPlan, StmtPlan, plan_reads
from . import storage

Readers = Mapping[str, Sequence[tuple[str, tuple[Affine, ...]]]]


def readers_of(plan: ProgramPlan) -> dict[str, list[tuple[str, tuple[Affine, ...]]]]:
    """Per materialised value, the statements with a body that read it and their accesses
    (`plan_reads`, through fused producers)."""
    out: dict[str, list[tuple[str, tuple[Affine, ...]]]] = {}
    for t in plan.stmts:
        if t.mode not in ("fused", "input"):
            for v, idx in plan_reads(t.rhs, plan):
                out.setdefault(v, []).append((t.var, idx))
    return out


def kernel_arrays(plan: ProgramPlan, units: Sequence[Sequence[StmtPlan]] | None = None,
                  layouts: Mapping[str, storage.CoordLayout] | None = None,
                  inline: Mapping[str, str] | None = None, readers: Readers | None = None
                  ) -> tuple[Allocation, ...]:
    """The arrays the CPU kernel of `plan` allocates (module docstring).  `units`, `layouts`,
    `inline` and `readers`: the emitter's own (`sibling_fusion.schedule`,
    `storage.coordinate_layouts`, `storage.inlined_coordinates`, `readers_of`), computed
    here when not given, as the plain (not instrumented) kernel computes them."""
    if units is None:
        units = sibling_fusion.schedule(plan)
    if layouts is None:
        layouts = storage.coordinate_layouts(plan)
    if inline is None:
        inline = storage.inlined_coordinates(plan, layouts, [u[0].var for u in units
                                                             if len(u) == 1])
    if readers is None:
        readers = readers_of(plan)
    outputs = set(plan.program.output_vars())
    out: list[Allocation] = []
    for unit in units:
        if unit[0].var in inline:
            continue
        local = sibling_fusion.read_only_here(unit, plan, readers) if len(unit) > 1 else ()
        for s in unit:
            if s.scalar or s.var in local:
                continue
            is_out = s.var in outputs
            layout = layouts.get(s.var)
            out.append(Allocation(s.var, plan.dims(s), layout.rel if layout else None,
                                  output=is_out))
            if s.mode == "blas":
                out += _product_copies(s, plan)
    return tuple(out)


def _product_copies(s: StmtPlan, plan: ProgramPlan) -> list[Allocation]:
    """What a BLAS statement allocates besides its array (module docstring)."""
    b, shapes = s.blas, plan.program.shapes
    assert b is not None
    if s.gram is not None:   # tl_gram: the base scaled, then the product
        return [Allocation(s.var, shapes[s.gram.base.var], working=True),
                Allocation(s.var, s.rhs.dims, working=True)]
    extra = [Allocation(s.var, s.rhs.dims, working=True)]   # the product before its scaling
    for o, perm, first in ((b.left, b.left_perm, len(b.i_left)),
                           (b.right, b.right_perm, len(s.rhs.sum_names()))):
        if perm != tuple(range(len(perm))) and not (perm == (1, 0) and first == 1):
            extra.append(Allocation(s.var, shapes[o.var], working=True))
    if b.out_perm != tuple(range(len(b.out_perm))):   # the product kept beside its copy
        extra.append(Allocation(s.var, s.rhs.dims))
    return extra


__all__ = ["kernel_arrays", "readers_of"]
