"""The Tensor-SSA normal form (SPEC 5): `is_tensor_ssa(p)` returns None when `p` is in it,
otherwise a message naming the first violation.

The form: every statement is one masked primitive (`tensorlang.ir.tssa` right-hand sides) in
canonical form (rebuilding it gives the same interned node), statements are in dependency
order with distinct variables, operands are read with one index per dimension, affine
expressions use only the statement's generator/summation indices (and `exists`-bound ones)
and size parameters, relations are relation parameters of the right arity; and the program
is clean: no two statements have equal right-hand sides (CSE), no statement is trivial
(`v = u[I]`), every statement is read by the output (DCE).
"""
from __future__ import annotations

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.ast import TRel, TSize
from tensorlang.ir.tssa import Input, Program, ReduceRhs, Rhs


def _affines(rhs: Rhs) -> list[tuple[str, ast.Affine, frozenset[str]]]:
    """(where, affine, bound names) for every affine of a right-hand side (predicates'
    `exists` binders included)."""
    idx = frozenset(rhs.gen_names() + rhs.sum_names())
    out: list[tuple[str, ast.Affine, frozenset[str]]] = []
    out += [("a size", d, frozenset()) for d in rhs.dims + rhs.sdims]
    for o in rhs.operands:
        out += [(f"the access of {o.var}", a, idx) for a in o.idx]
    if isinstance(rhs, tssa.IndexRhs):
        out.append(("the index value", rhs.value, idx))
    preds = [rhs.pred] + list(getattr(rhs, "supports", ()))
    for p in preds:
        out += _pred_affines(p, idx)
    return out


def _pred_affines(p: ast.Pred,
                  bound: frozenset[str]) -> list[tuple[str, ast.Affine, frozenset[str]]]:
    if isinstance(p, ast.Cmp):
        return [("a predicate", p.lhs, bound), ("a predicate", p.rhs, bound)]
    if isinstance(p, ast.RelCall):
        return [("a relation argument", a, bound) for a in p.args]
    if isinstance(p, (ast.And, ast.Or)):
        return _pred_affines(p.a, bound) + _pred_affines(p.b, bound)
    if isinstance(p, ast.Exists):
        return [("an exists range", p.size, frozenset())] + \
            _pred_affines(p.body, bound | {p.idx})
    return []


def _relations(p: ast.Pred) -> list[ast.RelCall]:
    return [n for n in ast.walk(p) if isinstance(n, ast.RelCall)]


def _is_trivial(rhs: Rhs, shapes: dict[str, tuple[ast.Affine, ...]]) -> bool:
    """`v = gen I. u[I]` with u of shape I: v is u."""
    if not (isinstance(rhs, ReduceRhs) and not rhs.sdims and rhs.coeff == 1.0
            and isinstance(rhs.pred, ast.PTrue)):
        return False
    (o,) = rhs.operands
    ids = tuple(ast.Affine.var(n) for n in rhs.gen_names())
    return o.idx == ids and shapes.get(o.var) == rhs.dims


def _check_stmt(p: Program, k: int, s: tssa.Stmt, shapes: dict, sizes: frozenset[str],
                rels: dict[str, int]) -> str | None:
    rhs = s.rhs
    where = f"statement {k} ({s.var})"
    if type(rhs) not in tssa.KINDS.values():
        return f"{where}: {type(rhs).__name__} is not a Tensor-SSA primitive"
    if type(rhs)(*rhs.fields()) is not rhs:
        return f"{where}: right-hand side is not in canonical form"
    if isinstance(rhs, Input):
        t = p.param_types.get(rhs.param)
        if t is None or isinstance(t, (TSize, TRel)):
            return f"{where}: input of {rhs.param}, which is not a value parameter"
        try:
            leaf = tssa.project_type(t, rhs.path)
        except ValueError as err:
            return f"{where}: {err}"
        if not isinstance(ast.scalar_of(leaf), ast.TReal):
            return f"{where}: input {ssa_printer.fmt_rhs(rhs)} is not a real tensor"
        if s.var in p.param_types and s.var != rhs.param:
            return f"{where}: variable shadows parameter {s.var}"
        return None
    if s.var in p.param_types:
        return f"{where}: variable shadows parameter {s.var}"
    if rhs.ix != p.ix:
        return f"{where}: index names {rhs.ix} differ from the program's {p.ix}"
    if isinstance(rhs, tssa.BoxRhs):   # a box reads whole variables (SPEC 13)
        for o, shape in zip(rhs.operands, rhs.arg_shapes()):
            if o.var not in shapes:
                return f"{where}: reads {o.var} before it is defined"
            if tuple(shapes[o.var]) != tuple(shape):
                return f"{where}: {rhs.fn} reads {o.var} as shape {shape}, it has {shapes[o.var]}"
        return None
    for o in rhs.operands:
        if o.var not in shapes:
            return f"{where}: reads {o.var} before it is defined"
        if len(o.idx) != len(shapes[o.var]):
            return (f"{where}: reads {o.var} with {len(o.idx)} indices, it has "
                    f"{len(shapes[o.var])} dimensions")
    for what, a, bound in _affines(rhs):
        bad = a.vars() - bound - sizes
        if bad:
            return f"{where}: {what} uses {', '.join(sorted(bad))}, not in scope"
    for q in [rhs.pred] + list(getattr(rhs, "supports", ())):
        for r in _relations(q):
            if rels.get(r.name) != len(r.args):
                return f"{where}: {r.name}({len(r.args)} args) is not a relation parameter"
    return None


def is_tensor_ssa(p: Program) -> str | None:
    """None if `p` is a clean, canonical Tensor-SSA program; else the first violation."""
    if not isinstance(p, Program):
        return f"not a Tensor-SSA program: {type(p).__name__}"
    names = [q.name for q in p.params]
    if len(set(names)) != len(names):
        return "duplicate parameter names"
    for prefix in p.ix:
        if not tssa.prefix_ok(prefix, names):
            return f"index prefix {prefix!r} clashes with a parameter"
    sizes = frozenset(q.name for q in p.params if isinstance(q.type, TSize))
    rels = {q.name: len(q.type.sizes) for q in p.params if isinstance(q.type, TRel)}
    shapes: dict[str, tuple[ast.Affine, ...]] = {}
    seen: dict[Rhs, str] = {}
    for k, s in enumerate(p.stmts):
        if s.var in shapes:
            return f"statement {k}: {s.var} is assigned twice"
        msg = _check_stmt(p, k, s, shapes, sizes, rels)
        if msg is not None:
            return msg
        if s.rhs in seen:
            return f"statement {k} ({s.var}): same right-hand side as {seen[s.rhs]} (no CSE)"
        if _is_trivial(s.rhs, shapes):
            return f"statement {k} ({s.var}): trivial copy {ssa_printer.fmt_stmt(s)}"
        seen[s.rhs] = s.var
        shapes[s.var] = p.shapes[s.var]
    for v in p.output_vars():
        if v not in shapes:
            return f"output {v} is not defined"
    live = tssa.dce(p)
    if len(live.stmts) != len(p.stmts):
        dead = sorted({s.var for s in p.stmts} - {s.var for s in live.stmts})
        return f"dead statements: {', '.join(dead)}"
    return None
