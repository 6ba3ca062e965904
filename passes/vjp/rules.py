"""The adjoint (vjp) rules of SPEC 6: one function per Tensor-SSA form, in `VJP_RULES`.

The driver walks the statements in reverse.  Every variable v collects cotangent
contributions; its cotangent `d_v` is their sum (ADJ-fanout: one guarded add per extra
contribution, counted only where both are live).  A variable with no contribution has a
zero cotangent and emits nothing; only variables that depend on a wrt input (active ones)
receive contributions.  A rule gets the state (`Reverse`), one statement `v = rhs` and
`d_v`, and gives each active operand u1 (read at A1) its contribution:

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
  ADJ-const     no contribution
  ADJ-input     d_v is the cotangent of the input (an output of the vjp)
  ADJ-fanout    d_v = the sum of v's contributions (one guarded add per extra one)

The sum over I, J is solved against `A1(I, J) == K` by the index solver (`Emitter.sum`), so
every contribution is a gather over K: an ordinary Tensor-SSA statement whose output
elements are computed independently -- no scatter, no accumulation into memory.

Budget (Theorem 6.55, checked per rule by the catalogue): with the primal, the vjp of a
statement costs at most 4 times the statement plus the sizes of the differentiated inputs
and of the output.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Sequence

from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, Cmp, Pred
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, ExtremeRhs, IndexRhs, Input,
                                MapRhs, Operand, Program, ReduceRhs, Rhs, Stmt)

from ..jvp.emit import (Emitter, builtin_partial, builtin_select, extreme_weights,
                        has_select_rule, ids)
from ..jvp.registry import RuleTable


class Reverse:
    """State of one vjp: emitter, primal renaming M, pending contributions, the cotangents
    of the inputs."""

    def __init__(self, em: Emitter, p: Program, active: set[str]) -> None:
        self.em = em
        self.p = p
        self.active = active
        self.M: dict[str, str] = {}
        self.contrib: dict[str, list[str]] = defaultdict(list)
        self.adj: dict[str, str] = {}     # input statement -> its cotangent

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
        var = self.em.sum(gen, sums, ast.pred_and(ast.subst(pred, ren), *eqs), coeff, ops)
        if var is not None:
            self.contrib[target.var].append(var)

    def prim(self, o: Operand) -> Operand:
        return o.rename(self.M)


VjpRule = Callable[[Reverse, Stmt, str], None]
VJP_RULES: RuleTable[VjpRule] = RuleTable("vjp")


@VJP_RULES.register("ADJ-input", Input, "x: d_x = d_v (an output of the vjp)")
def adj_input(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rv.adj[stmt.var] = dv


@VJP_RULES.register("ADJ-const", ConstRhs, "gen I. [P] * c: no contribution")
def adj_const(rv: Reverse, stmt: Stmt, dv: str) -> None:
    return None


@VJP_RULES.register("ADJ-index", IndexRhs, "gen I. a(I): no contribution (no operands)")
def adj_index(rv: Reverse, stmt: Stmt, dv: str) -> None:
    return None


@VJP_RULES.register("ADJ-add", AddRhs,
                    "[P]([P1] u1[A1] + ..) -> d_u1 += gen K. sum I. [P and P1 and A1 == K] d_v[I]")
def adj_add(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    assert isinstance(rhs, AddRhs)
    for k, s in enumerate(rhs.supports):
        rv.give(rhs, dv, k, 1.0, [], ast.pred_and(rhs.pred, s))


def _is_select(rhs: Rhs) -> bool:
    return isinstance(rhs, MapRhs) and has_select_rule(rhs.fn)


@VJP_RULES.register("ADJ-map", MapRhs,
                    "[P] f(u[A]) -> d_u += gen K. sum I. [P and A == K] c d_v[I] g(u[A])[I]")
def adj_map(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    assert isinstance(rhs, MapRhs)
    pgen = rv.em.gens(rhs.dims)
    args = [rv.prim(o) for o in rhs.operands]
    for k, o in enumerate(rhs.operands):
        if o.var not in rv.active:
            continue
        d = builtin_partial(rv.em, pgen, rhs.pred, rhs.fn, rhs.params, args, k)
        if d.zero:
            continue
        rv.give(rhs, dv, k, d.coeff, [] if d.op is None else [d.op], rhs.pred)


@VJP_RULES.register("ADJ-select", MapRhs,
                    "[P] max(a, b) -> d_a += gen K. sum I. [P and A == K] keep_ge(a, b, d_v)[I]",
                    when=_is_select)
def adj_select(rv: Reverse, stmt: Stmt, dv: str) -> None:
    """The contribution to u_k is the one call `keep_ge(a, b, d_v)` (or keep_gt), read back
    through the gather of ADJ-reduce."""
    rhs = stmt.rhs
    assert isinstance(rhs, MapRhs)
    pgen = rv.em.gens(rhs.dims)
    args = [rv.prim(o) for o in rhs.operands]
    here = Operand(dv, ids(n for n, _ in pgen))
    for k, o in enumerate(rhs.operands):
        if o.var not in rv.active:
            continue
        tans = [here if m == k else None for m in range(len(args))]
        w = builtin_select(rv.em, pgen, rhs.pred, rhs.fn, args, tans)
        if w is not None:
            rv.give(rhs, w, k, 1.0, [], rhs.pred)


@VJP_RULES.register("ADJ-contract", ContractRhs,
                    "sum J. [P] c u1[A1] u2[A2] -> d_u1 += gen K. sum I, J. "
                    "[P and A1 == K] c d_v[I] u2[A2]")
def adj_contract(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    assert isinstance(rhs, ContractRhs)
    o1, o2 = rhs.operands
    if o1 == o2:
        rv.give(rhs, dv, 0, 2.0 * rhs.coeff, [rv.prim(o2)], rhs.pred)
    else:
        rv.give(rhs, dv, 0, rhs.coeff, [rv.prim(o2)], rhs.pred)
        rv.give(rhs, dv, 1, rhs.coeff, [rv.prim(o1)], rhs.pred)


@VJP_RULES.register("ADJ-reduce", ReduceRhs,
                    "sum J. [P] c u1[A1] -> d_u1 += gen K. sum I, J. [P and A1 == K] c d_v[I]")
def adj_reduce(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    assert isinstance(rhs, ReduceRhs)
    rv.give(rhs, dv, 0, rhs.coeff, [], rhs.pred)


@VJP_RULES.register("ADJ-extreme", ExtremeRhs,
                    "[P] max j. u[A] -> d_u += gen K. sum I, j. [P and A == K] g[I] eq[I, j], "
                    "g = [0 < n] d_v * recip(sum j. eq),  eq = ge(u[A], v[I])  (a gather)")
def adj_extreme(rv: Reverse, stmt: Stmt, dv: str) -> None:
    """Ties share the cotangent equally (SPEC 12); the contribution is a gather of the
    selection `eq` scaled per output point, like ADJ-contract's."""
    rhs = stmt.rhs
    assert isinstance(rhs, ExtremeRhs)
    (o,) = rhs.operands
    if o.var not in rv.active:
        return
    here = ids(rhs.gen_names())
    _, eq, r, mask = extreme_weights(rv.em, rhs, rv.prim(Operand(stmt.var, here)), rv.prim(o))
    if r is None:
        return
    g = rv.em.sum(rv.em.gens(rhs.dims), [], mask, 1.0, [Operand(dv, here), Operand(r, here)])
    if g is not None:
        rv.give(rhs, g, 0, 1.0, [eq], rhs.pred)


@VJP_RULES.register("ADJ-fanout", None,
                    "d_v = sum of v's contributions (one guarded add per extra one)")
def adj_fanout(rv: Reverse, var: str) -> str | None:
    """The cotangent of `var`: the sum of its pending contributions (None: zero)."""
    return rv.em.add_all(rv.p.shapes[var], rv.contrib.pop(var, []))


__all__ = ["Reverse", "VJP_RULES", "VjpRule", "adj_input", "adj_const", "adj_add", "adj_map",
           "adj_select", "adj_contract", "adj_reduce", "adj_extreme", "adj_fanout"]

from . import boxes as box_rules  # noqa: E402,F401  (registers ADJ-cholesky, ...: SPEC 13)
