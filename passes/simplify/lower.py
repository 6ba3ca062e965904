"""Lowering: a gen-pushed core Def (e.g. `tssa.to_core(p)`) as statements over the global
index names of a `Universe` (docs/simplifier.md section 1, step 1)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Container

from tensorlang.ir import ast
from tensorlang.ir.tssa import out_leaves
from tensorlang.ir.ast import (Add, Affine, Const, Def, Gen, Iverson, Let, Mul, Param, Proj,
                               Pred, Sum, Var)

from .universe import FALSE, Universe


@dataclass
class Stmt:
    """`var = gen gens. body` over global names, or an input (`param` with a projection
    path) when `body` is None.  `support`: atoms over the gens outside which it is 0."""

    var: str
    gens: tuple[tuple[str, Affine], ...]
    body: ast.Expr | None
    support: frozenset[str] = frozenset()
    param: str | None = None
    path: tuple[int, ...] = ()

    @property
    def is_input(self) -> bool:
        return self.body is None


@dataclass
class Lowered:
    name: str
    params: tuple[Param, ...]
    ret: Any
    stmts: dict[str, Stmt]
    order: list[str]
    output: Any                 # Out tree of statement/parameter names
    uni: Universe


def read_base(e: ast.Expr) -> tuple[str, tuple[int, ...]] | None:
    path: list[int] = []
    while isinstance(e, Proj):
        path.append(e.k)
        e = e.e
    if isinstance(e, Var):
        return e.name, tuple(reversed(path))
    return None


def rename_binders(e: ast.Expr, uni: Universe, memo: dict,
                   keep: Container[str] = ()) -> ast.Expr:
    """Every summation binder of `e` (but those in `keep`) gets a fresh global name, in the
    order the binders appear: so names made elsewhere (the index solver's `ast.fresh`) do
    not reach the e-graph, whose order of indices must not depend on them (SPEC 15)."""
    hit = memo.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Sum) and e.idx not in keep:
        new = uni.new_index(e.size)
        body = ast.subst(e.body, {e.idx: Affine.var(new)})
        out: ast.Expr = Sum(new, e.size, rename_binders(body, uni, memo, keep))
    elif isinstance(e, (Affine, Pred)):
        out = e
    else:
        out = ast.map_fields(e, lambda c: rename_binders(c, uni, memo, keep)
                             if isinstance(c, ast.Expr) else c)
    memo[e] = out
    return out


def support_atoms(e: ast.Expr, uni: Universe) -> frozenset[str]:
    """Atoms outside which `e` is structurally 0 (the Iverson brackets of its spine)."""
    if isinstance(e, Iverson):
        atoms = uni.atoms_of(e.pred)
        if atoms is None:
            return frozenset((FALSE,))
        return atoms | support_atoms(e.e, uni)
    if isinstance(e, Const):
        return frozenset((FALSE,)) if e.value == 0.0 else frozenset()
    if isinstance(e, Sum):
        return frozenset(a for a in support_atoms(e.body, uni) if e.idx not in uni.atom_vars[a])
    if isinstance(e, Mul):
        return support_atoms(e.a, uni) | support_atoms(e.b, uni)
    if isinstance(e, Add):
        return uni.disjunction(support_atoms(e.a, uni), support_atoms(e.b, uni))
    return frozenset()


def lower(d: Def, ex: str = "k") -> Lowered:
    """The statements of a gen-pushed core Def (e.g. `tssa.to_core(p)`) over global names."""
    uni = Universe(d.params, ex)
    ptypes = {p.name: p.type for p in d.params}
    stmts: dict[str, Stmt] = {}
    order: list[str] = []
    for p in d.params:  # parameters read directly are input statements
        if isinstance(ast.scalar_of(p.type), ast.TReal):
            stmts[p.name] = Stmt(p.name, (), None, param=p.name)
            order.append(p.name)
    body = d.body
    while isinstance(body, Let):
        name, value = body.name, body.value
        base = read_base(value)
        if base is not None and base[0] in ptypes:
            stmts[name] = Stmt(name, (), None, param=base[0], path=base[1])
        else:
            gens: list[tuple[str, Affine]] = []
            while isinstance(value, Gen):
                g = uni.new_index(value.size)
                gens.append((g, value.size))
                value = ast.subst(value.body, {value.idx: Affine.var(g)})
            value = rename_binders(value, uni, {})
            uni.register(value)
            stmts[name] = Stmt(name, tuple(gens), value, support_atoms(value, uni))
        order.append(name)
        body = body.body
    out = _out_tree(body)
    for leaf in out_leaves(out):
        if leaf not in stmts:
            raise ValueError(f"output {leaf} is not a statement or real parameter")
    return Lowered(d.name, d.params, d.ret, stmts, order, out, uni)


def _out_tree(e: ast.Expr) -> Any:
    if isinstance(e, ast.Pair):
        return (_out_tree(e.a), _out_tree(e.b))
    if isinstance(e, Var):
        return e.name
    raise ValueError(f"output must be a tree of variables, not {type(e).__name__}")






def bracket(p: Pred, e: ast.Expr) -> ast.Expr:
    """`[p] * e`, without the bracket when p is true (0 when p is false)."""
    if isinstance(p, ast.PTrue):
        return e
    if isinstance(p, ast.PFalse):
        return Const(0.0)
    return Iverson(p, e)
