"""The forward (jvp) rules of SPEC 6: one function per Tensor-SSA form, in `JVP_RULES`.

Each rule gets the state of the walk (`Forward`: the emitter, the primal renaming M, the
tangents T) and one statement, and returns the variable of its tangent, or None for a
structural zero (whose statements are never emitted):

  FWD-input     x (a wrt input)              -> the tangent parameter d_x (same type), or
                                                the one-hot seed `gen K, J. [K == J]`
  FWD-const     gen I. [P] * c               -> 0
  FWD-add       [P] * ([P1] u1[A1] + [P2] u2[A2]) -> [P] * ([P1] du1[A1] + [P2] du2[A2])
                                                (one side zero: a masked gather of the other)
  FWD-map       [P] * f(u1[A1], ...)         -> sum_k c_k * g_k(u[A]) * duk[Ak]: one map of
                                                the builtin's derivative helper and one
                                                contraction per live argument
                                                (`builtins.deriv_expr`); exp' = exp shares the
                                                primal map by hash-consing
  FWD-select    [P] f(u1[A1], ...), f = max, min or a selection helper (partials are
                                             indicators) -> ONE call [P] sel_ge(a, b, du1,
                                                du2) / keep_ge(a, b, du) / keep_gt(...),
                                                masked by the tangents' supports
  FWD-contract  sum J. [P] c u1[A1] u2[A2]   -> sum J. [P] c du1[A1] u2[A2]
                                                + sum J. [P] c u1[A1] du2[A2]  (one add,
                                                counted only where both are live);
                                                `u[A] * u[A]` -> `2c * du[A] * u[A]`
  FWD-reduce    sum J. [P] c u1[A1]          -> sum J. [P] c du1[A1]
  FWD-extreme   [P] max j. u[A]              -> (sum j. eq du[A]) * recip(sum j. eq), eq the
                                                maximisers `ge(u[A], v)`: ties share equally
                                                (SPEC 12, JAX's convention); min alike

Budget (Theorem 6.1, checked per rule by the catalogue): the tangent statements of a
statement cost at most 3 times the statement (for every builtin but the derivative tower's
end, `builtins.TOWER_END`).  With a one-hot seed every tangent statement gains the seed's
generator indices J (the batch, appended): the Jacobian / Hessian construction.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir.ast import Affine
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, ExtremeRhs, IndexRhs, Input,
                                MapRhs, Operand, Program, ReduceRhs, Rhs, Stmt)

from .emit import (Emitter, builtin_partial, builtin_select, extreme_weights, has_select_rule,
                   ids)
from .registry import RuleTable


class Forward:
    """State of one jvp: the emitter, the primal renaming M and the tangents T."""

    def __init__(self, em: Emitter, p: Program, xs: Sequence[str], tnames: Mapping[str, str],
                 seed: str, batch: tuple[Affine, ...]) -> None:
        self.em = em
        self.p = p
        self.xs = tuple(xs)          # the differentiated parameters
        self.tnames = dict(tnames)   # their tangent parameters (seed "param")
        self.seed = seed             # "param" | "onehot"
        self.batch = batch           # the one-hot seed's generator dims (appended)
        self.M: dict[str, str] = {}
        self.T: dict[str, str | None] = {}

    def gen(self, rhs: Rhs) -> list[tuple[str, Affine]]:
        """The tangent statement's generators: the primal's, then the batch indices."""
        return self.em.gens(tuple(rhs.dims) + self.batch)

    def bidx(self, rhs: Rhs) -> tuple[Affine, ...]:
        r = len(rhs.dims)
        return ids(f"{self.em.ix[0]}{r + t}" for t in range(len(self.batch)))

    def tan(self, rhs: Rhs, o: Operand) -> Operand | None:
        t = self.T.get(o.var)
        return None if t is None else Operand(t, o.idx + self.bidx(rhs))

    def prim(self, o: Operand) -> Operand:
        return o.rename(self.M)


JvpRule = Callable[[Forward, Stmt], "str | None"]
JVP_RULES: RuleTable[JvpRule] = RuleTable("jvp")


@JVP_RULES.register("FWD-input", Input, "x (wrt) -> d_x  (one-hot seed: gen K, J. [K == J])")
def fwd_input(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, Input)
    if rhs.param not in fw.xs:
        return None
    if fw.seed == "param":
        return fw.em.input(fw.tnames[rhs.param], rhs.path)
    shape = fw.p.shapes[stmt.var]
    r = len(shape)
    gen = fw.em.gens(shape + shape)
    eq = ast.pred_and(*(ast.Cmp("==", Affine.var(gen[k][0]), Affine.var(gen[r + k][0]))
                        for k in range(r)))
    return fw.em.const(gen, 1.0, eq)


@JVP_RULES.register("FWD-const", ConstRhs, "gen I. [P] * c -> 0")
def fwd_const(fw: Forward, stmt: Stmt) -> str | None:
    return None


@JVP_RULES.register("FWD-index", IndexRhs, "gen I. a(I) -> 0 (an index value is a constant)")
def fwd_index(fw: Forward, stmt: Stmt) -> str | None:
    return None


@JVP_RULES.register("FWD-add", AddRhs,
                    "[P]([P1] u1[A1] + [P2] u2[A2]) -> [P]([P1] du1[A1] + [P2] du2[A2])")
def fwd_add(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, AddRhs)
    gen = fw.gen(rhs)
    sides = [(t, s) for t, s in ((fw.tan(rhs, o), s)
                                  for o, s in zip(rhs.operands, rhs.supports))
             if t is not None]
    if not sides:
        return None
    if len(sides) == 1:
        (t, s), = sides
        return fw.em.sum(gen, [], ast.pred_and(rhs.pred, s), 1.0, [t])
    return fw.em.add(gen, sides[0], sides[1], rhs.pred)


def _is_select(rhs: Rhs) -> bool:
    return isinstance(rhs, MapRhs) and has_select_rule(rhs.fn)


@JVP_RULES.register("FWD-map", MapRhs, "[P] f(u[A]) -> [P] c * g(u[A]) * du[A]  (f' = c * g)")
def fwd_map(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, MapRhs)
    gen, pgen = fw.gen(rhs), fw.em.gens(rhs.dims)
    args = [fw.prim(o) for o in rhs.operands]
    terms: list[str | None] = []
    for k, o in enumerate(rhs.operands):
        t = fw.tan(rhs, o)
        if t is None:
            continue
        d = builtin_partial(fw.em, pgen, rhs.pred, rhs.fn, rhs.params, args, k)
        if d.zero:
            continue
        ops = [t] if d.op is None else [d.op, t]
        terms.append(fw.em.sum(gen, [], rhs.pred, d.coeff, ops))
    return fw.em.add_all(tuple(rhs.dims) + fw.batch, terms)


@JVP_RULES.register("FWD-select", MapRhs,
                    "[P] max(a, b) -> [P] sel_ge(a, b, da, db) (one call; keep_ge / keep_gt "
                    "for one live tangent; min and the selections alike)", when=_is_select)
def fwd_select(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, MapRhs)
    args = [fw.prim(o) for o in rhs.operands]
    tans = [fw.tan(rhs, o) for o in rhs.operands]
    return builtin_select(fw.em, fw.gen(rhs), rhs.pred, rhs.fn, args, tans)


@JVP_RULES.register("FWD-contract", ContractRhs,
                    "sum J. [P] c u1 u2 -> sum J. [P] c du1 u2 + sum J. [P] c u1 du2")
def fwd_contract(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, ContractRhs)
    gen = fw.gen(rhs)
    sums = list(zip(rhs.sum_names(), rhs.sdims))
    o1, o2 = rhs.operands
    t1, t2 = fw.tan(rhs, o1), fw.tan(rhs, o2)
    if t1 is not None and o1 == o2:  # d(u u) = 2 u du: one contraction
        return fw.em.sum(gen, sums, rhs.pred, 2.0 * rhs.coeff, [t1, fw.prim(o2)])
    terms = []
    if t1 is not None:
        terms.append(fw.em.sum(gen, sums, rhs.pred, rhs.coeff, [t1, fw.prim(o2)]))
    if t2 is not None:
        terms.append(fw.em.sum(gen, sums, rhs.pred, rhs.coeff, [fw.prim(o1), t2]))
    return fw.em.add_all(tuple(rhs.dims) + fw.batch, terms)


@JVP_RULES.register("FWD-reduce", ReduceRhs, "sum J. [P] c u1 -> sum J. [P] c du1")
def fwd_reduce(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, ReduceRhs)
    t = fw.tan(rhs, rhs.operands[0])
    if t is None:
        return None
    sums = list(zip(rhs.sum_names(), rhs.sdims))
    return fw.em.sum(fw.gen(rhs), sums, rhs.pred, rhs.coeff, [t])


@JVP_RULES.register("FWD-extreme", ExtremeRhs,
                    "[P] max j. u[A] -> [P and 0 < n] (sum j. eq[I, j] du[A]) * recip(sum j. "
                    "eq[I, j]),  eq = ge(u[A], v[I])  (ties share equally; min alike)")
def fwd_extreme(fw: Forward, stmt: Stmt) -> str | None:
    rhs = stmt.rhs
    assert isinstance(rhs, ExtremeRhs)
    (o,) = rhs.operands
    t = fw.tan(rhs, o)
    if t is None:
        return None
    here = ids(rhs.gen_names())
    _, eq, r, mask = extreme_weights(fw.em, rhs, fw.prim(Operand(stmt.var, here)), fw.prim(o))
    if r is None:
        return None
    (jn,), (n,) = rhs.sum_names(), rhs.sdims
    gen = fw.gen(rhs)
    num = fw.em.sum(gen, [(jn, n)], rhs.pred, 1.0, [eq, t])
    if num is None:
        return None
    return fw.em.sum(gen, [], mask, 1.0, [Operand(num, ids(g for g, _ in gen)),
                                          Operand(r, here)])


__all__ = ["Forward", "JVP_RULES", "JvpRule", "fwd_input", "fwd_const", "fwd_add", "fwd_map",
           "fwd_select", "fwd_contract", "fwd_reduce", "fwd_extreme"]

from . import boxes as box_rules  # noqa: E402,F401  (registers FWD-cholesky, ...: SPEC 13)
