"""Linear-algebra boxes (SPEC 13) around the e-graph: a box is opaque to the simplifier.

`open_boxes` turns each box statement `b = fn(u..).k` into a parameter `b` of the program
(a leaf the rules cannot look into) and adds the box's operands `u..` to the output, so the
simplifier still computes them; `close_boxes` puts the box statements back between the
simplified statements (reading the simplified operands) and restores the output.  The
boxes' own cost is untouched, so the simplifier's cost check on the opened program is the
check on the whole.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorlang.ir import ast, tssa
from tensorlang.ir.tssa import BoxRhs, Input, Program, Stmt


@dataclass(frozen=True)
class Opened:
    boxes: tuple[Stmt, ...]       # the box statements of the original program
    reads: tuple[str, ...]        # the variables they read, in output order


def has_boxes(p: Program) -> bool:
    return any(isinstance(s.rhs, BoxRhs) for s in p.stmts)


def open_boxes(p: Program) -> tuple[Program, Opened]:
    boxes = tuple(s for s in p.stmts if isinstance(s.rhs, BoxRhs))
    reads: list[str] = []
    for s in boxes:
        for o in s.rhs.operands:
            if o.var not in reads:
                reads.append(o.var)
    params = tuple(p.params) + tuple(ast.Param(s.var, ast.tensor(s.rhs.dims)) for s in boxes)
    stmts = tuple(Stmt(s.var, Input(s.var, ())) if isinstance(s.rhs, BoxRhs) else s
                  for s in p.stmts)
    out: tssa.Out = p.output
    for v in reversed(reads):
        out = (v, out) if out is not None else v
    return Program(p.name, params, stmts, (p.output, _tree(reads)) if reads else p.output,
                   None, p.ix), Opened(boxes, tuple(reads))


def _tree(vs: list[str]) -> tssa.Out:
    return vs[0] if len(vs) == 1 else (vs[0], _tree(vs[1:]))


def _leaves(out: tssa.Out, n: int) -> list[str]:
    if n == 1:
        assert isinstance(out, str)
        return [out]
    assert isinstance(out, tuple)
    return [out[0]] + _leaves(out[1], n - 1)


def close_boxes(q: Program, opened: Opened, original: Program) -> Program:
    if opened.reads:
        out, rest = q.output
        mapping = dict(zip(opened.reads, _leaves(rest, len(opened.reads))))
    else:
        out, mapping = q.output, {}
    fake = {s.var for s in opened.boxes}
    stmts = [s for s in q.stmts if not (isinstance(s.rhs, Input) and s.rhs.param in fake)]
    for s in opened.boxes:
        stmts.append(Stmt(s.var, s.rhs.rename_vars(mapping)))
    p = Program(original.name, original.params, tuple(stmts), out, original.ret, q.ix)
    return tssa.renumber(tssa.dce(tssa.toposort(p)))


__all__ = ["has_boxes", "open_boxes", "close_boxes", "Opened"]
