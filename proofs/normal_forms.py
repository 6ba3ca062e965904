"""Checkers of the normal forms of SPEC 4 (and SPEC 5 when the SSA module is present).

Each checker returns None when the form holds and otherwise a message naming the first
binding (or the result) that violates it, and how.
"""
from __future__ import annotations

from typing import Any, Callable

from tensorlang.ir.ast import (
    Access, Def, Expr, Gen, Let, Pair, Proj, TArr, TPair, TReal, Type, Var, children, walk,
)
from tensorlang.syntax.errors import TLError
from tensorlang.passes.rewrite import Ctx, deep_recursion, let_chain, rename_unique


def _bindings(d: Def) -> tuple[list[tuple[str, Expr]], Expr]:
    return let_chain(d.body)


def _result_leaves(r: Expr) -> list[Expr]:
    """The leaves of the tree of pairs at the top of a result."""
    if isinstance(r, Pair):
        return _result_leaves(r.a) + _result_leaves(r.b)
    return [r]


def _where(name: str | None) -> str:
    return f"binding {name}" if name is not None else "the result"


def is_let_lifted(d: Def) -> str | None:
    """`let x1 = e1 in ... let xm = em in r` with no let inside any ei or r."""
    binds, result = _bindings(d)
    for name, value in [*binds, (None, result)]:
        for node in walk(value):
            if isinstance(node, Let):
                return f"{_where(name)} contains a let (of {node.name})"
    return None


def _soa_violation(e: Expr, ctx: Ctx) -> str | None:
    """A pair, or a projection of something other than an input, inside `e`."""
    for node in walk(e):
        if isinstance(node, Pair):
            return "contains a pair"
        if isinstance(node, Proj) and not ctx.is_input_read(node):
            return "projects something other than an input"
    return None


def _context(d: Def) -> tuple[Def, Ctx]:
    with deep_recursion():
        d = rename_unique(d)
    ctx = Ctx(d)
    for name, value in let_chain(d.body)[0]:
        ctx.declare(name, ctx.type_of(value))
    return d, ctx


def is_struct_of_arrays(d: Def) -> str | None:
    """Let-lifted; no binding of pair type; pairs only as the tree at the top of the result;
    projections only of inputs (`x.0.1`)."""
    msg = is_let_lifted(d)
    if msg is not None:
        return msg
    try:
        d, ctx = _context(d)
        binds, result = _bindings(d)
        for name, value in binds:
            t = ctx.type_of(value)
            if not _pair_free(t):
                return f"binding {name} has a type with pairs"
            msg = _soa_violation(value, ctx)
            if msg is not None:
                return f"binding {name} {msg}"
        for leaf in _result_leaves(result):
            msg = _soa_violation(leaf, ctx)
            if msg is not None:
                return f"the result {msg}"
            if not _pair_free(ctx.type_of(leaf)):
                return "a component of the result has pair type (not a tree of pairs)"
        return _pair_inputs_unprojected(d, ctx)
    except TLError as err:
        return f"ill-typed: {err.message}"


def _pair_free(t: Type) -> bool:
    while isinstance(t, TArr):
        t = t.elem
    return not isinstance(t, TPair)


def _pair_inputs_unprojected(d: Def, ctx: Ctx) -> str | None:
    """An input of pair type read other than through projections down to a non-pair."""
    parents: dict[int, Expr] = {}
    for node in walk(d.body):
        for child in _expr_children(node):
            parents[id(child)] = node
    for node in walk(d.body):
        if ctx.is_input_read(node) and not _pair_free(ctx.type_of(node)):
            parent = parents.get(id(node))
            if not isinstance(parent, Proj):
                return f"input {_base_name(node)} of pair type is read without projection"
    return None


def _base_name(e: Expr) -> str:
    while isinstance(e, Proj):
        e = e.e
    return e.name if isinstance(e, Var) else "?"


def _expr_children(e: Expr) -> list[Expr]:
    return [c for c in children(e) if isinstance(c, Expr)]


def _gen_pushed_violation(e: Expr, ctx: Ctx) -> str | None:
    while isinstance(e, Gen):
        e = e.body
    if not isinstance(ctx.type_of(e), TReal):
        return "is not gen I. <scalar>"
    return _scalar_body_violation(e, ctx)


def _scalar_body_violation(s: Expr, ctx: Ctx) -> str | None:
    stack = [s]
    while stack:
        node = stack.pop()
        if isinstance(node, (Gen, Let, Pair)):
            return f"has a {type(node).__name__.lower()} inside its scalar body"
        if isinstance(node, (Var, Proj, Access)):
            if not ctx.is_read(node):
                return "accesses or projects a computed value instead of reading a variable"
            if not isinstance(ctx.type_of(node), TReal):
                return "has a read that is not a full scalar access"
            continue  # indices are affine: nothing below a read to check
        stack.extend(_expr_children(node))
    return None


def is_gen_pushed(d: Def) -> str | None:
    """Struct of arrays, and every binding and result component is `gen I. s` with s scalar,
    gen-free, every read in s a full scalar access `x[a1..am]`."""
    msg = is_struct_of_arrays(d)
    if msg is not None:
        return msg
    try:
        d, ctx = _context(d)
        binds, result = _bindings(d)
        for name, value in binds:
            msg = _gen_pushed_violation(value, ctx)
            if msg is not None:
                return f"binding {name} {msg}"
        for leaf in _result_leaves(result):
            msg = _gen_pushed_violation(leaf, ctx)
            if msg is not None:
                return f"the result {msg}"
        return None
    except TLError as err:
        return f"ill-typed: {err.message}"


CHECKERS: dict[str, Callable[[Any], str | None]] = {
    "letlift": is_let_lifted,
    "pairelim": is_struct_of_arrays,
    "genpush": is_gen_pushed,
}

try:  # the Tensor-SSA checker lives with the SSA pass (its own contributor)
    from .normal_forms_ssa import is_tensor_ssa  # noqa: F401
    CHECKERS["ssa"] = is_tensor_ssa
except ImportError:  # pragma: no cover - present once the SSA stage exists
    pass

__all__ = ["is_let_lifted", "is_struct_of_arrays", "is_gen_pushed", "CHECKERS"]
if "is_tensor_ssa" in globals():
    __all__.append("is_tensor_ssa")
