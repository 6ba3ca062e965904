"""Adjoint differentiation (vjp) on Tensor SSA (SPEC 6).

`vjp_program(p, wrt)` copies the primal statements, then walks them in reverse.  Every
variable v collects cotangent contributions; its cotangent `d_v` is their sum (ADJ-fanout:
one guarded add per extra contribution, counted only where both are live).  A variable with
no contribution has a zero cotangent and emits nothing (the adjoint of dead code is nothing,
the adjoint of zero is dead code); only variables that depend on a wrt input (active ones)
receive contributions.  The contribution of a statement to an operand u1 read at A1:

  ADJ-contract  v = gen I. sum J. [P] c u1[A1] u2[A2]
                -> d_u1 += gen K. sum I, J. [P and A1(I, J) == K] * c * d_v[I] * u2[A2]
                   (`u[A] * u[A]`: one contribution with 2c)
  ADJ-reduce    v = gen I. sum J. [P] c u1[A1]
                -> d_u1 += gen K. sum I, J. [P and A1(I, J) == K] * c * d_v[I]
  ADJ-add       v = gen I. [P] ([P1] u1[A1] + [P2] u2[A2])
                -> d_u1 += gen K. sum I. [P and P1 and A1(I) == K] * d_v[I]
  ADJ-map       v = gen I. [P] f(u1[A1], ...)
                -> d_uk += gen K. sum I. [P and Ak(I) == K] * c * d_v[I] * g(u[A])[I]
                   with f's k-th partial `c * g` (`builtins.deriv_expr`)
  ADJ-select    v = gen I. [P] max(u1[A1], u2[A2])  (min, the selection helpers alike)
                -> d_u1 += gen K. sum I. [P and A1(I) == K] * keep_ge(u1[A1], u2[A2], d_v[I])
                   (one call instead of partial times cotangent; keep_gt for u2)
  ADJ-const, ADJ-input: no contribution (an input's cotangent is an output).

The sum over I, J is then solved against `A1(I, J) == K` by the index solver (see
`passes.ademit.Emitter.sum`), so every contribution is a gather over K: an ordinary Tensor-
SSA statement whose output elements are computed independently -- no scatter, no
accumulation into memory.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from tensorlang.ir import ast as A
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Cmp, Param, Pred, Type
from tensorlang.syntax.errors import TLError
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, Input, MapRhs, Operand, Program,
                             ReduceRhs, Rhs)

from .ademit import Emitter, builtin_partial, builtin_select, has_select_rule, ids
from .fwd import map_out, new_param, out_paths, tuple_out, type_tree, wrt_params

RULES: dict[str, str] = {
    "ADJ-contract": "sum J. [P] c u1[A1] u2[A2] -> d_u1 += gen K. sum I, J. "
                    "[P and A1 == K] c d_v[I] u2[A2]",
    "ADJ-reduce": "sum J. [P] c u1[A1] -> d_u1 += gen K. sum I, J. [P and A1 == K] c d_v[I]",
    "ADJ-add": "[P]([P1] u1[A1] + ..) -> d_u1 += gen K. sum I. [P and P1 and A1 == K] d_v[I]",
    "ADJ-map": "[P] f(u[A]) -> d_u += gen K. sum I. [P and A == K] c d_v[I] g(u[A])[I]",
    "ADJ-select": "[P] max(a, b) -> d_a += gen K. sum I. [P and A == K] keep_ge(a, b, d_v)[I]",
    "ADJ-fanout": "d_v = sum of the contributions (one guarded add per extra one)",
}


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


class Reverse:
    """State of one vjp: emitter, primal renaming M, pending contributions."""

    def __init__(self, em: Emitter, p: Program, active: set[str]) -> None:
        self.em = em
        self.p = p
        self.active = active
        self.M: dict[str, str] = {}
        self.contrib: dict[str, list[str]] = defaultdict(list)

    def give(self, rhs: Rhs, dv: str, k: int, coeff: float, extra: Sequence[Operand],
             pred: Pred) -> None:
        """Contribution of `rhs` (cotangent d_v = dv) to its k-th operand:
        `gen K. sum I, J. [pred and A_k == K] * coeff * d_v[I] * extra...`."""
        target = rhs.operands[k]
        if target.var not in self.active:
            return
        t = self.em.tmp
        ren = {n: Affine.var(f"{t}a{m}") for m, n in enumerate(rhs.gen_names())}
        ren.update({n: Affine.var(f"{t}b{m}") for m, n in enumerate(rhs.sum_names())})
        shape = self.p.shapes[target.var]
        gen = [(f"{t}k{d}", s) for d, s in enumerate(shape)]
        sums = [(f"{t}a{m}", s) for m, s in enumerate(rhs.dims)]
        sums += [(f"{t}b{m}", s) for m, s in enumerate(rhs.sdims)]
        eqs = [Cmp("==", a.subst(ren), Affine.var(g)) for a, (g, _) in zip(target.idx, gen)]
        ops = [Operand(dv, ids(f"{t}a{m}" for m in range(len(rhs.dims))))]
        ops += [o.subst(ren) for o in extra]
        var = self.em.sum(gen, sums, A.pred_and(A.subst(pred, ren), *eqs), coeff, ops)
        if var is not None:
            self.contrib[target.var].append(var)

    def prim(self, o: Operand) -> Operand:
        return o.rename(self.M)

    # -- the rules -------------------------------------------------------------------------

    def rule(self, rhs: Rhs, dv: str) -> None:
        if isinstance(rhs, ContractRhs):
            o1, o2 = rhs.operands
            if o1 == o2:
                self.give(rhs, dv, 0, 2.0 * rhs.coeff, [self.prim(o2)], rhs.pred)
            else:
                self.give(rhs, dv, 0, rhs.coeff, [self.prim(o2)], rhs.pred)
                self.give(rhs, dv, 1, rhs.coeff, [self.prim(o1)], rhs.pred)
        elif isinstance(rhs, ReduceRhs):
            self.give(rhs, dv, 0, rhs.coeff, [], rhs.pred)
        elif isinstance(rhs, AddRhs):
            for k, s in enumerate(rhs.supports):
                self.give(rhs, dv, k, 1.0, [], A.pred_and(rhs.pred, s))
        elif isinstance(rhs, MapRhs):
            self.adj_map(rhs, dv)
        elif not isinstance(rhs, ConstRhs):
            raise TypeError(f"no adjoint rule for {type(rhs).__name__}")

    def adj_map(self, rhs: MapRhs, dv: str) -> None:
        pgen = self.em.gens(rhs.dims)
        args = [self.prim(o) for o in rhs.operands]
        if has_select_rule(rhs.fn):
            self.adj_select(rhs, dv, pgen, args)
            return
        for k, o in enumerate(rhs.operands):
            if o.var not in self.active:
                continue
            d = builtin_partial(self.em, pgen, rhs.pred, rhs.fn, rhs.params, args, k)
            if d.zero:
                continue
            self.give(rhs, dv, k, d.coeff, [] if d.op is None else [d.op], rhs.pred)

    def adj_select(self, rhs: MapRhs, dv: str, pgen: list[tuple[str, Affine]],
                   args: list[Operand]) -> None:
        """ADJ-select: the contribution to u_k is the one call `keep_ge(a, b, d_v)` (or
        keep_gt), read back through the gather of ADJ-reduce."""
        here = Operand(dv, ids(n for n, _ in pgen))
        for k, o in enumerate(rhs.operands):
            if o.var not in self.active:
                continue
            tans = [here if m == k else None for m in range(len(args))]
            w = builtin_select(self.em, pgen, rhs.pred, rhs.fn, args, tans)
            if w is not None:
                self.give(rhs, w, k, 1.0, [], rhs.pred)


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
    adj: dict[str, str | None] = {}
    for s in reversed(p.stmts):
        dv = em.add_all(p.shapes[s.var], rv.contrib.pop(s.var, []))
        if isinstance(s.rhs, Input):
            adj[s.var] = dv
        elif dv is not None:
            rv.rule(s.rhs, dv)
    inputs = {(s.rhs.param, s.rhs.path): s.var for s in p.stmts if isinstance(s.rhs, Input)}

    def grad_of(x: str) -> tssa.Out:
        def leaf(path: tuple[int, ...]) -> str:
            var = inputs.get((x, path))
            d = adj.get(var) if var is not None else None
            t = tssa.project_type(p.param_types[x], path)
            return d if d is not None else em.zeros(A.shape_of(t))
        return type_tree(p.param_types[x], leaf)

    grads = [grad_of(x) for x in xs]
    y = map_out(p.output, lambda v: rv.M[v])
    out = tuple_out([y] + grads) if outputs == "both" else tuple_out(grads)
    if ret is None and p.ret is not None:
        types = [p.param_types[x] for x in xs]
        ret = _tuple_type(([p.ret] if outputs == "both" else []) + types)
    return em.b.program(out, name or f"{p.name}_vjp", ret)


def _tuple_type(ts: Sequence[Type]) -> Type:
    out = ts[-1]
    for t in reversed(ts[:-1]):
        out = A.TPair(t, out)
    return out


__all__ = ["vjp_program", "RULES", "active_vars", "Reverse"]
