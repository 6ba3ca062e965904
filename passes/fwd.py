"""Forward differentiation (jvp) on Tensor SSA (SPEC 6).

`jvp_program(p, wrt)` walks the statements of `p` in order and gives every variable v a
tangent dv (or none: a structural zero, whose statements are never emitted):

  FWD-input     x (a wrt input)              -> the tangent parameter d_x (same type)
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

The result is again a Tensor-SSA `Program` (params P + `d_x` per wrt input, output
`(y, d_y)`), so it composes with every other pass.  With `seed="onehot"` (one real-tensor
input x) the tangent is the one-hot `gen K, J. [K == J]` and every tangent statement gains the
generator indices J (appended): the Jacobian / Hessian construction of `passes.derived`.
The emitter (`passes.ademit`) inlines constant and gather reads and eliminates summation
indices with the index solver, so the one-hot seed simplifies away.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from tensorlang.ir import ast as A
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Param, Type
from tensorlang.syntax.errors import TLError
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, Input, MapRhs, Operand, Program,
                             ReduceRhs, Rhs)

from .ademit import Emitter, builtin_partial, builtin_select, has_select_rule, ids

RULES: dict[str, str] = {
    "FWD-input": "x (wrt) -> d_x",
    "FWD-const": "gen I. [P] * c -> 0",
    "FWD-add": "[P]([P1] u1[A1] + [P2] u2[A2]) -> [P]([P1] du1[A1] + [P2] du2[A2])",
    "FWD-map": "[P] f(u[A]) -> [P] c * g(u[A]) * du[A]  (f' = c * g)",
    "FWD-select": "[P] max(a, b) -> [P] sel_ge(a, b, da, db) (one call; keep_ge / keep_gt "
                  "for one live tangent; min and the selections alike)",
    "FWD-contract": "sum J. [P] c u1 u2 -> sum J. [P] c du1 u2 + sum J. [P] c u1 du2",
    "FWD-reduce": "sum J. [P] c u1 -> sum J. [P] c du1",
}


def is_real_valued(t: Type) -> bool:
    """R, arrays of real-valued types, pairs of real-valued types (SPEC 2.5)."""
    if isinstance(t, A.TReal):
        return True
    if isinstance(t, A.TArr):
        return is_real_valued(t.elem)
    if isinstance(t, A.TPair):
        return is_real_valued(t.a) and is_real_valued(t.b)
    return False


def wrt_params(p: Program, wrt: Sequence[str] | None) -> tuple[str, ...]:
    """The differentiated inputs: `wrt`, or every real-valued parameter (checked)."""
    types = p.param_types
    xs = tuple(wrt) if wrt else tuple(q.name for q in p.params if is_real_valued(q.type))
    if not xs:
        raise TLError(f"{p.name} has no real-valued parameter to differentiate")
    if len(set(xs)) != len(xs):
        raise TLError(f"a parameter is named twice in {', '.join(xs)}")
    for x in xs:
        if x not in types:
            raise TLError(f"{x} is not a parameter of {p.name}")
        if not is_real_valued(types[x]):
            raise TLError(f"cannot differentiate {p.name} with respect to {x}: not real-valued")
    return xs


def new_param(p: Program, name: str, t: Type, taken: set[str]) -> Param:
    if name in taken:
        raise TLError(f"the new parameter {name} clashes with a parameter of {p.name}")
    taken.add(name)
    return Param(name, t)


def out_paths(out: tssa.Out, path: tuple[int, ...] = ()) -> list[tuple[str, tuple[int, ...]]]:
    """The leaves of an output tree with their projection paths."""
    if isinstance(out, str):
        return [(out, path)]
    return out_paths(out[0], path + (0,)) + out_paths(out[1], path + (1,))


def map_out(out: tssa.Out, f) -> tssa.Out:
    return f(out) if isinstance(out, str) else (map_out(out[0], f), map_out(out[1], f))


def type_tree(t: Type, leaf, path: tuple[int, ...] = ()) -> tssa.Out:
    """An output tree with the pair structure of `t` (struct of arrays)."""
    s = A.scalar_of(t)
    if isinstance(s, A.TPair):
        return (type_tree(tssa.project_type(t, (0,)), leaf, path + (0,)),
                type_tree(tssa.project_type(t, (1,)), leaf, path + (1,)))
    return leaf(path)


def tuple_out(parts: Sequence[tssa.Out]) -> tssa.Out:
    """`(a, (b, c))`: n-tuples nest to the right."""
    out = parts[-1]
    for q in reversed(parts[:-1]):
        out = (q, out)
    return out


class Forward:
    """State of one jvp: the emitter, the primal renaming M and the tangents T."""

    def __init__(self, em: Emitter, batch: tuple[Affine, ...]) -> None:
        self.em = em
        self.batch = batch
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

    # -- the rules -------------------------------------------------------------------------

    def rule(self, rhs: Rhs) -> str | None:
        if isinstance(rhs, ConstRhs):
            return None
        if isinstance(rhs, AddRhs):
            return self.fwd_add(rhs)
        if isinstance(rhs, MapRhs):
            return self.fwd_map(rhs)
        if isinstance(rhs, ContractRhs):
            return self.fwd_contract(rhs)
        if isinstance(rhs, ReduceRhs):
            return self.fwd_reduce(rhs)
        raise TypeError(f"no tangent rule for {type(rhs).__name__}")

    def fwd_add(self, rhs: AddRhs) -> str | None:
        gen = self.gen(rhs)
        sides = [(t, s) for t, s in ((self.tan(rhs, o), s)
                                      for o, s in zip(rhs.operands, rhs.supports))
                 if t is not None]
        if not sides:
            return None
        if len(sides) == 1:
            (t, s), = sides
            return self.em.sum(gen, [], A.pred_and(rhs.pred, s), 1.0, [t])
        return self.em.add(gen, sides[0], sides[1], rhs.pred)

    def fwd_map(self, rhs: MapRhs) -> str | None:
        gen, pgen = self.gen(rhs), self.em.gens(rhs.dims)
        args = [self.prim(o) for o in rhs.operands]
        if has_select_rule(rhs.fn):  # FWD-select: one call however many tangents live
            tans = [self.tan(rhs, o) for o in rhs.operands]
            return builtin_select(self.em, gen, rhs.pred, rhs.fn, args, tans)
        terms: list[str | None] = []
        for k, o in enumerate(rhs.operands):
            t = self.tan(rhs, o)
            if t is None:
                continue
            d = builtin_partial(self.em, pgen, rhs.pred, rhs.fn, rhs.params, args, k)
            if d.zero:
                continue
            ops = [t] if d.op is None else [d.op, t]
            terms.append(self.em.sum(gen, [], rhs.pred, d.coeff, ops))
        return self.em.add_all(tuple(rhs.dims) + self.batch, terms)

    def fwd_contract(self, rhs: ContractRhs) -> str | None:
        gen = self.gen(rhs)
        sums = list(zip(rhs.sum_names(), rhs.sdims))
        o1, o2 = rhs.operands
        t1, t2 = self.tan(rhs, o1), self.tan(rhs, o2)
        if t1 is not None and o1 == o2:  # d(u u) = 2 u du: one contraction
            return self.em.sum(gen, sums, rhs.pred, 2.0 * rhs.coeff, [t1, self.prim(o2)])
        terms = []
        if t1 is not None:
            terms.append(self.em.sum(gen, sums, rhs.pred, rhs.coeff, [t1, self.prim(o2)]))
        if t2 is not None:
            terms.append(self.em.sum(gen, sums, rhs.pred, rhs.coeff, [self.prim(o1), t2]))
        return self.em.add_all(tuple(rhs.dims) + self.batch, terms)

    def fwd_reduce(self, rhs: ReduceRhs) -> str | None:
        t = self.tan(rhs, rhs.operands[0])
        if t is None:
            return None
        sums = list(zip(rhs.sum_names(), rhs.sdims))
        return self.em.sum(self.gen(rhs), sums, rhs.pred, rhs.coeff, [t])


def jvp_program(p: Program, wrt: Sequence[str] | None = None, *,
                tangent_names: Mapping[str, str] | None = None, outputs: str = "both",
                seed: str = "param", name: str | None = None,
                ret: Type | None = None, naive: bool = False) -> Program:
    """The forward derivative of `p` (SPEC 2.5 `jvp`).

    `outputs`: "both" returns `(y, d_y)`, "tangent" only `d_y`.  `seed`: "param" adds a
    tangent parameter per wrt input (named `d_x`, or `tangent_names[x]`); "onehot" (one
    real-tensor input x) seeds with `gen K, J. [K == J]` and appends J to every tangent,
    giving `d_y[I, J] = d y[I] / d x[J]` (the Jacobian).  `naive`: the bare rules without
    the emitter's simplifications (for comparison only).
    """
    if outputs not in ("both", "tangent"):
        raise ValueError(f"outputs must be 'both' or 'tangent', not {outputs!r}")
    if seed not in ("param", "onehot"):
        raise ValueError(f"seed must be 'param' or 'onehot', not {seed!r}")
    xs = wrt_params(p, wrt)
    types = p.param_types
    taken = {q.name for q in p.params}
    tnames = {x: (tangent_names or {}).get(x, f"d_{x}") for x in xs}
    batch: tuple[Affine, ...] = ()
    new: list[Param] = []
    if seed == "onehot":
        if len(xs) != 1 or not isinstance(A.scalar_of(types[xs[0]]), A.TReal):
            raise TLError("a one-hot seed needs exactly one input of type R or R[...]")
        batch = A.shape_of(types[xs[0]])
    else:
        new = [new_param(p, tnames[x], types[x], taken) for x in xs]
    em = Emitter(tuple(p.params) + tuple(new), p.ix, naive)
    fw = Forward(em, batch)
    for s in p.stmts:
        fw.M[s.var] = em.copy(s.rhs, fw.M)
        if isinstance(s.rhs, Input):
            fw.T[s.var] = _input_tangent(em, s.rhs, xs, tnames, seed, p.shapes[s.var])
        else:
            fw.T[s.var] = fw.rule(s.rhs)
    y = map_out(p.output, lambda v: fw.M[v])

    def tangent(v: str) -> str:
        t = fw.T.get(v)
        return t if t is not None else em.zeros(tuple(p.shapes[v]) + batch)

    dy = map_out(p.output, tangent)
    out: tssa.Out = (y, dy) if outputs == "both" else dy
    if ret is None and p.ret is not None:
        tret: Type | None = p.ret
        if seed == "onehot":
            tret = A.tensor(A.shape_of(p.ret) + batch) if isinstance(
                A.scalar_of(p.ret), A.TReal) else None
        if tret is not None:
            ret = A.TPair(p.ret, tret) if outputs == "both" else tret
    return em.b.program(out, name or f"{p.name}_jvp", ret)


def _input_tangent(em: Emitter, rhs: Input, xs: Sequence[str], tnames: Mapping[str, str],
                   seed: str, shape: tuple[Affine, ...]) -> str | None:
    if rhs.param not in xs:
        return None
    if seed == "param":
        return em.input(tnames[rhs.param], rhs.path)
    # one-hot: gen K, J. [K == J] * 1
    r = len(shape)
    gen = em.gens(shape + shape)
    eq = A.pred_and(*(A.Cmp("==", Affine.var(gen[k][0]), Affine.var(gen[r + k][0]))
                      for k in range(r)))
    return em.const(gen, 1.0, eq)


__all__ = ["jvp_program", "RULES", "Forward", "wrt_params", "is_real_valued", "out_paths",
           "map_out", "type_tree", "tuple_out"]
