"""Programs with linear-algebra boxes (SPEC 13) on backends whose kernels cannot call LAPACK.

A generated Numba kernel cannot call scipy's LAPACK wrappers, so the program is split at
its box statements: the statements between two boxes become a sub-program compiled as an
ordinary kernel (its parameters: the original ones plus the variables it reads from earlier
parts; its output: the variables later parts or the result read), and each box runs between
the kernels through `semantics.boxes.evaluate` (numpy/scipy, i.e. LAPACK).  The two parts of
a pair box (`lq`, `eigh`) share one factorisation per call.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

import numpy as np

from tensorlang.ir import ast, tssa
from tensorlang.ir.ast import Affine, PTrue
from tensorlang.ir.tssa import BoxRhs, Input, Program, ReduceRhs, Stmt
from tensorlang.semantics import boxes, interp, memory


@dataclass(frozen=True)
class KernelPart:
    program: Program
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class ViewPart:
    """`var[I] = src[perm(I)]`: a transpose, taken as a numpy view (no kernel, no copy;
    LAPACK reads a transposed operand through its Fortran order)."""

    var: str
    src: str
    axes: tuple[int, ...]


Part = Union[KernelPart, ViewPart, Stmt]


def _transpose(sub: Program) -> ViewPart | None:
    """The view a one-statement kernel part is, if it is an unmasked, unscaled transpose."""
    body = [s for s in sub.stmts if not isinstance(s.rhs, Input)]
    if len(body) != 1 or not isinstance(body[0].rhs, ReduceRhs) or body[0].var != sub.output:
        return None
    rhs = body[0].rhs
    if rhs.sdims or rhs.coeff != 1.0 or not isinstance(rhs.pred, PTrue):
        return None
    src = rhs.operands[0]
    gens = [Affine.var(n) for n in rhs.gen_names()]
    if len(src.idx) != len(gens) or sorted(map(repr, src.idx)) != sorted(map(repr, gens)):
        return None
    perm = [gens.index(a) for a in src.idx]          # src axis k <- output axis perm[k]
    if perm == sorted(perm) or tuple(sub.shapes[src.var][k] for k in range(len(perm))) != \
            tuple(rhs.dims[perm[k]] for k in range(len(perm))):
        return None
    axes = [0] * len(perm)
    for k, j in enumerate(perm):
        axes[j] = k
    return ViewPart(body[0].var, src.var, tuple(axes))


def _tree(vs: tuple[str, ...]) -> tssa.Out:
    return vs[0] if len(vs) == 1 else (vs[0], _tree(vs[1:]))


def _flat(v: Any, n: int) -> list[Any]:
    if n == 1:
        return [v]
    return [v[0]] + _flat(v[1], n - 1)


def split_at_boxes(p: Program) -> list[Part]:
    """The kernels and boxes of `p`, in order (see the module docstring).  Statements are
    grouped by box depth, so there are as many kernels as boxes on the longest chain of
    boxes (plus one), not one per box: kernel k holds every statement that needs the boxes
    of stages < k and no later one; the boxes of stage k run after kernel k."""
    level: dict[str, int] = {}       # kernel stage of a statement / box stage of a box
    is_box: dict[str, bool] = {}
    stmts = [s for s in p.stmts if not isinstance(s.rhs, Input)]
    for s in stmts:
        box = isinstance(s.rhs, BoxRhs)
        need = 0
        for o in s.rhs.operands:
            if o.var not in level:
                continue                     # an input
            if is_box[o.var]:
                need = max(need, level[o.var] + (0 if box else 1))
            else:
                need = max(need, level[o.var])
        level[s.var], is_box[s.var] = need, box
    depth = max(level.values(), default=0)
    groups: list[list[Stmt] | Stmt] = []
    for k in range(depth + 1):
        groups.append([s for s in stmts if not is_box[s.var] and level[s.var] == k])
        groups.extend(s for s in stmts if is_box[s.var] and level[s.var] == k)
    later_reads: list[set[str]] = []
    need_vars = set(p.output_vars())
    for g in reversed(groups):
        later_reads.append(set(need_vars))
        for s in ([g] if isinstance(g, Stmt) else g):
            need_vars |= {o.var for o in s.rhs.operands}
    later_reads.reverse()
    inputs = p.inputs()
    parts: list[Part] = []
    for g, after in zip(groups, later_reads):
        if isinstance(g, Stmt):
            parts.append(g)
            continue
        defined = {s.var for s in g}
        outs = tuple(s.var for s in g if s.var in after)
        if not outs:
            continue
        reads = sorted({o.var for s in g for o in s.rhs.operands} - defined)
        extra = [v for v in reads if v not in inputs]
        params = tuple(p.params) + tuple(ast.Param(v, ast.tensor(p.shapes[v])) for v in extra)
        head = [Stmt(v, inputs[v]) for v in reads if v in inputs]
        head += [Stmt(v, Input(v, ())) for v in extra]
        sub = Program(f"{p.name}_part{len(parts)}", params, tuple(head + g), _tree(outs),
                      None, p.ix)
        sub = tssa.dce(sub)
        parts.append(_transpose(sub) or KernelPart(sub, outs))
    return parts


class StagedProgram:
    """Kernels and boxes called in turn; called like a `CompiledProgram`.

    `compile_kernel` compiles a kernel part.  With `compile_jit` and `jit_above`, a call
    whose boxes do more than `jit_above` operations (SPEC 3 cost, `boxes.box_cost`) runs
    its kernel parts as `compile_jit` compiles them instead (the Numba backend: on the JIT
    engine -- a kernel's own cost may be small enough for the serial AOT image, which is
    slower per operation, when the call as a whole is not: docs/linalg.md, "Performance")."""

    def __init__(self, program: Program, compile_kernel: Callable[[Program], Any],
                 compile_jit: Callable[[Program], Any] | None = None,
                 jit_above: int | None = None) -> None:
        self.program = program
        self.parts: list[Any] = []
        for part in split_at_boxes(program):
            if isinstance(part, KernelPart):
                self.parts.append((part, compile_kernel(part.program)))
            elif isinstance(part, ViewPart):
                self.parts.append((part, None))
            else:
                self.parts.append((part, None))
        self._compile_jit = compile_jit if jit_above is not None else None
        self._jit_above = jit_above if jit_above is not None else 0
        self._jit_parts: list[Any] | None = None     # compiled on the first large call
        self._large: dict[tuple[int, ...], bool] = {}
        self._size_names = tuple(q.name for q in program.params if isinstance(q.type, ast.TSize))
        self._sig = ast.Def(program.name, program.params, program.ret, ast.Const(0.0))
        # the factorisations whose second part (Q of lq, V of eigh) no statement reads
        used: dict[tuple, set[int]] = {}
        for s in program.stmts:
            if isinstance(s.rhs, BoxRhs):
                used.setdefault(_box_key(s.rhs), set()).add(s.rhs.part)
        self._first_only = {k for k, parts in used.items() if parts == {0}}

    def __repr__(self) -> str:
        return f"<StagedProgram {self.program.name}: {len(self.parts)} parts>"

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        env = interp.bind_args(self._sig, given)
        inputs = {k: v for k, (v, _) in env.vals.items()}
        full = dict(given)
        full.update(env.sizes)
        return self._run(inputs, full, lambda kernel, call: kernel(call))

    def call_bound(self, bound: Mapping[str, Any]) -> Any:
        """Run on arguments already checked and converted (the API's call path: see
        `CompiledProgram.call_bound`); the kernels are called the same way, without checking
        their arguments again (they come from this call or from LAPACK)."""
        return self._run(bound, dict(bound), lambda kernel, call: kernel.call_bound(call))

    def _run(self, values: Mapping[str, Any], full: dict[str, Any],
             call_kernel: Callable[[Any, dict[str, Any]], Any]) -> Any:
        vals: dict[str, Any] = {}
        for var, rhs in self.program.inputs().items():
            v = values[rhs.param]
            for k in rhs.path:
                v = v[k]
            vals[var] = v
        factored: dict[tuple, tuple[np.ndarray, ...]] = {}
        for part, kernel in self._parts_for(full):
            if kernel is not None:
                call = dict(full)
                call.update({q.name: vals[q.name] for q in part.program.params
                             if q.name in vals and q.name not in full})
                out = call_kernel(kernel, call)
                for v, x in zip(part.outputs, _flat(out, len(part.outputs))):
                    vals[v] = x
                continue
            if isinstance(part, ViewPart):
                vals[part.var] = np.transpose(vals[part.src], part.axes)
                continue
            rhs = part.rhs
            operands = [np.asarray(vals[o.var], dtype=np.float64) for o in rhs.operands]
            key = _box_key(rhs)
            if key not in factored:   # both parts of a pair box from one factorisation
                factored[key] = boxes.evaluate_parts(rhs.fn, operands, rhs.label,
                                                     key in self._first_only)
            vals[part.var] = factored[key][rhs.part]
        # (not a nested function calling itself: that closure would be a reference cycle
        # holding every intermediate array until the garbage collector runs, so that each
        # call would allocate, and page-fault, fresh memory)
        return _build(self.program.output, vals)

    @property
    def arrays(self) -> tuple[memory.Allocation, ...]:
        """What a call allocates (`memory.Allocation`s): each kernel's arrays (its outputs
        too: the result is a copy, `_build`), each box's output and working copies."""
        out: list[memory.Allocation] = []
        factored: set[tuple] = set()
        for part, kernel in self.parts:
            if kernel is not None:
                out += [dataclasses.replace(a, output=False) for a in kernel.arrays]
            elif isinstance(part, Stmt):
                rhs = part.rhs
                key = _box_key(rhs)
                out += memory.box_allocations(part.var, rhs.fn, rhs.dims, rhs.arg_shapes(),
                                              key not in factored)
                factored.add(key)
        return tuple(out)

    def kernels_for(self, sizes: Mapping[str, int]) -> list[Any]:
        """The compiled kernels a call with these sizes runs, in order."""
        return [kernel for _, kernel in self._parts_for(sizes) if kernel is not None]

    def _parts_for(self, full: Mapping[str, Any]) -> list[Any]:
        """The parts a call with these sizes runs (see the class docstring)."""
        if self._compile_jit is None:
            return self.parts
        sizes = tuple([int(full[n]) for n in self._size_names])
        large = self._large.get(sizes)
        if large is None:
            if len(self._large) > 64:
                self._large.clear()
            large = self._large[sizes] = \
                boxes_work(self.program, dict(zip(self._size_names, sizes))) > self._jit_above
        if not large:
            return self.parts
        if self._jit_parts is None:
            self._jit_parts = [(part, None if kernel is None else self._compile_jit(part.program))
                               for part, kernel in self.parts]
        return self._jit_parts


def boxes_work(p: Program, sizes: Mapping[str, int]) -> int:
    """The SPEC 3 cost (adds + multiplications + calls) of `p`'s box statements at `sizes`."""
    work = 0
    for s in p.stmts:
        if isinstance(s.rhs, BoxRhs):
            shapes = [tuple(int(d.evaluate(sizes)) for d in shape)
                      for shape in s.rhs.arg_shapes()]
            work += sum(boxes.box_cost(s.rhs.fn, s.rhs.part, shapes))
    return work


def _build(o: tssa.Out, vals: Mapping[str, Any]) -> Any:
    """The program's output from the values of its variables (fresh float64 arrays)."""
    if isinstance(o, str):
        x = vals[o]
        return float(x) if np.ndim(x) == 0 else np.array(x, dtype=np.float64)
    return tuple(_build(c, vals) for c in o)


def _box_key(rhs: BoxRhs) -> tuple[str, tuple[str, ...]]:
    """One factorisation: the box and its operands (the parts of a pair box share it)."""
    return (rhs.fn, tuple(o.var for o in rhs.operands))


def has_boxes(p: Program) -> bool:
    return any(isinstance(s.rhs, BoxRhs) for s in p.stmts)


__all__ = ["split_at_boxes", "StagedProgram", "KernelPart", "ViewPart", "has_boxes",
           "boxes_work"]
