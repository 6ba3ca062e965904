"""Linear-algebra boxes (SPEC 13) around the e-graph: a box is opaque to the simplifier.

`open_boxes` turns each box statement `b = fn(u..).k` (and each dense product reading a
box's output: `opaque`) into a parameter `b` of the program (a leaf the rules cannot look
into) and adds the box's operands `u..` to the output, so the
simplifier still computes them; `close_boxes` puts the box statements back between the
simplified statements (reading the simplified operands) and restores the output.  The
boxes' own cost is untouched, so the simplifier's cost check on the opened program is the
check on the whole.

An index value `v = gen I. a(I)` (`IndexRhs`, SPEC 12) is opened the same way: a free leaf
whose reads the rules see as reads of a parameter (with their access's free indices, so
loop-invariance is judged right); it reads nothing and costs nothing.  So is a max/min
reduction (`ExtremeRhs`, SPEC 12), which the e-graph has no term for: the rest of the
program is simplified around it, its own cost untouched.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorlang.ir import ast, tssa
from tensorlang.ir.tssa import BoxRhs, ContractRhs, ExtremeRhs, IndexRhs, Input, Program, Stmt

from ..jvp.emit import project


@dataclass(frozen=True)
class Opened:
    boxes: tuple[Stmt, ...]       # the box statements of the original program
    reads: tuple[str, ...]        # the variables they read, in output order


LEAVES = (BoxRhs, IndexRhs, ExtremeRhs)   # the statements the e-graph sees as leaves


def has_boxes(p: Program) -> bool:
    """Whether `p` has statements the e-graph sees as leaves (boxes, index values, max/min
    reductions)."""
    return any(isinstance(s.rhs, LEAVES) for s in p.stmts)


def opaque(p: Program) -> set[str]:
    """The boxes, and the dense products that read a box's output (what the box rules
    emit as one BLAS call: the e-graph would trade them for masked triangular loops, fewer
    operations in the cost model but ten times slower), the index values and the max/min
    reductions."""
    boxes = {s.var for s in p.stmts if isinstance(s.rhs, BoxRhs)}
    full = _fully_read(p)
    low = _low_rank(p)
    dense = {s.var for s in p.stmts
             if isinstance(s.rhs, ContractRhs) and s.rhs.sdims
             and isinstance(s.rhs.pred, ast.PTrue) and s.var in full
             and any(o.var in boxes for o in s.rhs.operands)
             and not any(o.var in low for o in s.rhs.operands)}
    return boxes | dense | {s.var for s in p.stmts if isinstance(s.rhs, (IndexRhs, ExtremeRhs))}


def _low_rank(p: Program) -> set[str]:
    """Matrices (rank >= 2) every operand of which reads fewer distinct indices than the
    matrix has axes: a diagonal `[i == j] * d[i]` or an outer product `x[i] * y[j]`.  A
    product with one is n^2 work, which the e-graph finds (a BLAS call would do n^3)."""
    out = set()
    for s in p.stmts:
        rhs = s.rhs
        if isinstance(rhs, (BoxRhs, Input)) or len(rhs.dims) < 2 or rhs.sdims \
                or not rhs.operands:
            continue
        gens = set(rhs.gen_names())
        if all(len({n for a in o.idx for n in a.vars()} & gens) < len(gens)
               for o in rhs.operands):
            out.add(s.var)
    return out


def _fully_read(p: Program) -> set[str]:
    """The variables some statement needs in full: an output, a box operand, or read at
    every point (distinct indices, one per axis) by a statement itself needed in full.  A
    product read only on a diagonal or a band (`v[j, j - 1]`, through masked copies too) is
    left to the e-graph, which fuses it into its reader: n^2 operations, not a BLAS n^3."""
    full = set(p.output_vars())
    for s in reversed(p.stmts):
        box = isinstance(s.rhs, BoxRhs)
        if not box and s.var not in full:
            continue
        for o in s.rhs.operands:
            names = [a.as_var() for a in o.idx]
            if box or (all(n is not None for n in names) and len(set(names)) == len(names)):
                full.add(o.var)
    return full


def open_boxes(p: Program) -> tuple[Program, Opened]:
    keep = opaque(p)
    boxes = tuple(s for s in p.stmts if s.var in keep)
    reads: list[str] = []
    for s in boxes:
        for o in s.rhs.operands:
            if o.var not in reads:
                reads.append(o.var)
    params = tuple(p.params) + tuple(ast.Param(s.var, ast.tensor(s.rhs.dims)) for s in boxes)
    stmts = tuple(Stmt(s.var, Input(s.var, ())) if s.var in keep else s for s in p.stmts)
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


def _no_exists(p: ast.Pred) -> ast.Pred:
    """`exists k:n. <bounds on k>` replaced by its exact projection where there is one
    (`project`: Fourier-Motzkin, exact for unit coefficients): the e-graph leaves supports
    like `exists k:N. i <= k` (true in i's range), which a backend would test with a loop
    over k at every point."""
    if isinstance(p, ast.Exists):
        body = _no_exists(p.body)
        out = project(body, [p.idx], [p.size])
        return out if not any(isinstance(n, ast.Exists) for n in ast.walk(out)) else \
            ast.Exists(p.idx, p.size, body)
    if isinstance(p, (ast.And, ast.Or)):
        return type(p)(_no_exists(p.a), _no_exists(p.b))
    return p


def _tidy(rhs: tssa.Rhs) -> tssa.Rhs:
    if not hasattr(rhs, "pred") or not any(isinstance(n, ast.Exists)
                                           for q in [rhs.pred] + list(getattr(rhs, "supports", ()))
                                           for n in ast.walk(q)):
        return rhs
    vals = []
    for f in rhs._fields:
        v = getattr(rhs, f)
        if f == "pred":
            v = _no_exists(v)
        elif f == "supports":
            v = tuple(_no_exists(x) for x in v)
        vals.append(v)
    return type(rhs)(*vals)


def close_boxes(q: Program, opened: Opened, original: Program) -> Program:
    if opened.reads:
        out, rest = q.output
        mapping = dict(zip(opened.reads, _leaves(rest, len(opened.reads))))
    else:
        out, mapping = q.output, {}
    fake = {s.var for s in opened.boxes}
    stmts = [Stmt(s.var, _tidy(s.rhs)) for s in q.stmts
             if not (isinstance(s.rhs, Input) and s.rhs.param in fake)]
    for s in opened.boxes:
        stmts.append(Stmt(s.var, s.rhs.rename_vars(mapping)))
    p = Program(original.name, original.params, tuple(stmts), out, original.ret, q.ix)
    return tssa.renumber(tssa.dce(tssa.toposort(p)))


__all__ = ["has_boxes", "open_boxes", "close_boxes", "Opened"]
