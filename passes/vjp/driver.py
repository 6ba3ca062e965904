"""The vjp driver: copy the primal, seed the outputs' cotangents, walk the statements in
reverse (ADJ-fanout sums each variable's contributions, `VJP_RULES` passes them on), and
return the primal output with the inputs' cotangents."""
from __future__ import annotations

from typing import Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Param, Type
from tensorlang.ir.tssa import Input, Program
from tensorlang.syntax.errors import TLError

from ..jvp.emit import Emitter
from ..jvp.signature import (map_out, new_param, out_paths, tuple_out, tuple_type, type_tree,
                             wrt_params)
from .rules import VJP_RULES, Reverse, adj_fanout


def active_vars(p: Program, xs: Sequence[str]) -> set[str]:
    """Variables that depend on a wrt input (only they carry cotangents)."""
    act: set[str] = set()
    for s in p.stmts:
        if isinstance(s.rhs, Input):
            if s.rhs.param in xs:
                act.add(s.var)
        elif any(o.var in act for o in s.rhs.operands):
            act.add(s.var)
    return act


def vjp_program(p: Program, wrt: Sequence[str] | None = None, *, seed: str = "param",
                outputs: str = "both", cotangent_name: str = "d_y", name: str | None = None,
                ret: Type | None = None, naive: bool = False) -> Program:
    """The reverse derivative of `p` (SPEC 2.5 `vjp`).

    `seed`: "param" adds the cotangent parameter `d_y` of y's type; "one" seeds a real-
    valued `p` with the constant 1 (the gradient).  `outputs`: "both" returns
    `(y, d_x1, ...)`, "grads" only `d_x1` (or the tuple of them).  `naive`: the bare rules
    without the emitter's simplifications and index solving (for comparison only).
    """
    if seed not in ("param", "one"):
        raise ValueError(f"seed must be 'param' or 'one', not {seed!r}")
    if outputs not in ("both", "grads"):
        raise ValueError(f"outputs must be 'both' or 'grads', not {outputs!r}")
    xs = wrt_params(p, wrt)
    taken = {q.name for q in p.params}
    new: list[Param] = []
    if seed == "param":
        if p.ret is None:
            raise TLError(f"vjp({p.name}): the return type of {p.name} is unknown")
        new.append(new_param(p, cotangent_name, p.ret, taken))
    elif not (isinstance(p.output, str) and not p.shapes[p.output]):
        raise TLError(f"grad({p.name}) needs {p.name} to return R")
    em = Emitter(tuple(p.params) + tuple(new), p.ix, naive)
    rv = Reverse(em, p, active_vars(p, xs))
    for s in p.stmts:
        rv.M[s.var] = em.copy(s.rhs, rv.M)
    for leaf, path in out_paths(p.output):
        if leaf not in rv.active:
            continue
        c = em.input(cotangent_name, path) if seed == "param" else em.const([], 1.0)
        if c is not None:
            rv.contrib[leaf].append(c)
    for s in reversed(p.stmts):
        dv = adj_fanout(rv, s.var)
        if dv is not None:
            VJP_RULES.lookup(s.rhs).fn(rv, s, dv)
    inputs = {(s.rhs.param, s.rhs.path): s.var for s in p.stmts if isinstance(s.rhs, Input)}

    def grad_of(x: str) -> tssa.Out:
        def leaf(path: tuple[int, ...]) -> str:
            var = inputs.get((x, path))
            d = rv.adj.get(var) if var is not None else None
            t = tssa.project_type(p.param_types[x], path)
            return d if d is not None else em.zeros(ast.shape_of(t))
        return type_tree(p.param_types[x], leaf)

    grads = [grad_of(x) for x in xs]
    y = map_out(p.output, lambda v: rv.M[v])
    out = tuple_out([y] + grads) if outputs == "both" else tuple_out(grads)
    if ret is None and p.ret is not None:
        types = [p.param_types[x] for x in xs]
        ret = tuple_type(([p.ret] if outputs == "both" else []) + types)
    return em.b.program(out, name or f"{p.name}_vjp", ret)


__all__ = ["vjp_program", "active_vars"]
