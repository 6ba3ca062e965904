"""Weighted Gram products `sum J. X[J, a] * X[J, b] * d[J]` (X^T diag(d) X), run as syrk.

A contraction whose two operands are the same base tensor, each scaled by factors that
depend on the summation indices only (row scalings), is symmetric: BLAS syrk computes it
with half of gemm's multiplications.  Hessians of sums of per-row losses have this shape
(logistic regression's `X^T diag(s (1 - s)) X`), but derivatives spell it as a product of
two separately computed operands, e.g.

    v4[i0:N, i1:M]  = X[i1, i0] * v3[i1]
    v12[i0:N, i1:M] = -1.0 * v10[i1] * v4[i0, i1] + v4[i0, i1] * v7[i1]
    v13[i0:N, i1:M] = X[i1, i0] * y[i1]
    v14[i0:N, i1:N] = sum j0:M. v12[i1, j0] * v13[i0, j0]

Two steps, both on Tensor SSA:

* `factor_row_scalings(p)` (a rewrite, exact in real arithmetic) follows both operands of a
  contraction back through the pointwise statements defining them (products, scalings,
  transposes and sums of terms over the same bases) and writes the summand as
  `coefficient * (product of base reads) * row factor`.  When exactly two base reads
  remain and they read one tensor in the same way (up to renaming the output indices),
  the contraction becomes the canonical form below, with the row factor one vector d over
  the summation indices (new pointwise statements); the operands' own statements become
  dead and are dropped.
* `gram_form(p, var)` recognises the canonical form

      d[J]     = ...                                  (any vector over the summation dims)
      w[..]    = c' * X[B'] * d[J]                    (read only by v)
      v[I]     = c * sum J. X[B] * w[..]              (B' = B with the output indices renamed)

  and returns what the code generator needs to call `numba_rt.tl_gram` (X as a matrix, d,
  the output's axis order): w is then never materialised.

Both steps only follow reads that are plain indices spanning the read statement's axes
(no zero extension, no cropping) into unmasked statements, and keep a rewrite only when
the result passes `blas_plan`, so the rewritten statement reads exactly the values the
original one read.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from tensorlang.ir import ast, tssa
from tensorlang.ir.ast import Affine, PTrue
from tensorlang.ir.canon import node_key
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, Operand, Program, ReduceRhs,
                                Rhs, Stmt)

# A row factor: an expression over the summation indices only.
#   ("read", operand) | ("prod", (factor, ...)) | ("scale", c, factor) | ("sum", f1, f2)
Factor = tuple
ONE: Factor = ("prod", ())

# How deep `_decompose` follows producers (a chain of pointwise statements).
MAX_DEPTH = 32


@dataclass(frozen=True)
class Scaled:
    """A value as `coeff * (product of the base reads) * factor`."""

    coeff: float
    bases: tuple[Operand, ...]    # reads involving output indices, in a canonical order
    factor: Factor


@dataclass(frozen=True)
class GramForm:
    """`v[I] = c * sum J. X[B] * w[..]`, `w = c' * X[B'] * d[J]`: see the module docstring.
    `x_perm` orders X's axes as (`i_x`, J); the product's axes are (`i_x`, `i_w`) and
    `out_perm` takes them to the generator order."""

    base: Operand          # X[B], in v's index names
    weight: Operand        # d[J], in v's index names (J in order)
    scaled: str            # w (computed by the syrk call, never materialised)
    coeff: float           # c * c'
    x_perm: tuple[int, ...]
    i_x: tuple[str, ...]
    i_w: tuple[str, ...]
    out_perm: tuple[int, ...]


def _plain(idx: Sequence[Affine]) -> tuple[str, ...] | None:
    """The index names of an access that is a list of distinct plain indices, else None."""
    names = tuple(a.as_var() for a in idx)
    if any(n is None for n in names) or len(set(names)) != len(names):
        return None
    return names  # type: ignore[return-value]


def _spans(o: Operand, dims: Sequence[Affine], ranges: Mapping[str, Affine]) -> bool:
    """`o` reads every point of a statement with axes `dims` exactly once (plain indices
    whose ranges are the axes)."""
    names = _plain(o.idx)
    return names is not None and len(names) == len(dims) and \
        all(ranges.get(n) == d for n, d in zip(names, dims))


def _unmasked(rhs: Rhs) -> bool:
    return isinstance(rhs.pred, PTrue) and \
        all(isinstance(s, PTrue) for s in getattr(rhs, "supports", ()))


def _decompose(p: Program, o: Operand, ranges: Mapping[str, Affine], gens: frozenset[str],
               memo: dict[Operand, Scaled], depth: int = 0) -> Scaled:
    """`o` (read in a contraction whose generator indices are `gens`) as a product of base
    reads times a row factor, following its pointwise producers as far as they factor
    (`memo`: each read once, so a producer read twice is not followed twice)."""
    if o not in memo:
        memo[o] = _follow(p, o, ranges, gens, memo, depth)
    return memo[o]


def _follow(p: Program, o: Operand, ranges: Mapping[str, Affine], gens: frozenset[str],
            memo: dict[Operand, Scaled], depth: int) -> Scaled:
    if not any(a.vars() & gens for a in o.idx):
        return Scaled(1.0, (), ("read", o))
    rhs = p.defs.get(o.var)
    stop = Scaled(1.0, (o,), ONE)
    if not isinstance(rhs, (ContractRhs, ReduceRhs, AddRhs)) or depth >= MAX_DEPTH or \
            not _unmasked(rhs) or getattr(rhs, "sdims", ()) or not _spans(o, rhs.dims, ranges):
        return stop
    sub = dict(zip(rhs.gen_names(), o.idx))
    parts = [_decompose(p, x.subst(sub), ranges, gens, memo, depth + 1) for x in rhs.operands]
    if isinstance(rhs, ContractRhs):
        return _product(rhs.coeff, parts)
    if isinstance(rhs, ReduceRhs):
        return Scaled(rhs.coeff * parts[0].coeff, parts[0].bases, parts[0].factor)
    if parts[0].bases == parts[1].bases:     # a sum of terms over the same bases
        return Scaled(1.0, parts[0].bases, ("sum", ("scale", parts[0].coeff, parts[0].factor),
                                            ("scale", parts[1].coeff, parts[1].factor)))
    return stop


def _product(coeff: float, parts: Sequence[Scaled]) -> Scaled:
    bases = tuple(sorted((b for q in parts for b in q.bases), key=node_key))
    for q in parts:
        coeff *= q.coeff
    return Scaled(coeff, bases, ("prod", tuple(q.factor for q in parts)))


def _pairing(bx: Operand, bw: Operand, gens: Sequence[str], sums: Sequence[str],
             ranges: Mapping[str, Affine]) -> dict[str, str] | None:
    """The renaming of output indices taking base read `bx` to `bw` (same tensor, the
    summation indices in the same places, each side's output indices a bijection between
    indices of the same ranges), or None."""
    if bx.var != bw.var:
        return None
    nx, nw = _plain(bx.idx), _plain(bw.idx)
    if nx is None or nw is None or len(nx) != len(nw):
        return None
    ren: dict[str, str] = {}
    for a, b in zip(nx, nw):
        if a in sums or b in sums:
            if a != b:
                return None
        elif a in gens and b in gens and a != b and ranges[a] == ranges[b]:
            ren[a] = b
        else:
            return None
    if set(ren) & set(ren.values()) or not set(sums) <= set(nx):
        return None
    return ren


def gram_form(p: Program, var: str) -> GramForm | None:
    """The canonical weighted Gram product `var` is, or None (module docstring)."""
    from .codegen import blas_plan   # (codegen imports this module)

    rhs = p.defs.get(var)
    if not isinstance(rhs, ContractRhs) or not rhs.sdims or \
            blas_plan(rhs, p.shapes, p.size_params()) is None:
        return None
    gens, sums = rhs.gen_names(), rhs.sum_names()
    ranges = rhs.ranges()
    for x, w in (rhs.operands, tuple(reversed(rhs.operands))):
        wrhs = p.defs.get(w.var)
        if not isinstance(wrhs, ContractRhs) or wrhs.sdims or not _unmasked(wrhs) or \
                p.uses(w.var) != frozenset({var}) or w.var in p.output_vars() or \
                not _spans(w, wrhs.dims, ranges):
            continue
        sub = dict(zip(wrhs.gen_names(), w.idx))
        for bw, d in (wrhs.operands, tuple(reversed(wrhs.operands))):
            bw, d = bw.subst(sub), d.subst(sub)
            ren = _pairing(x, bw, gens, sums, ranges)
            if ren is None or _plain(d.idx) != sums or \
                    p.shapes.get(d.var) != rhs.sdims:
                continue
            xnames = _plain(x.idx)
            assert xnames is not None
            i_x = tuple(g for g in gens if g in xnames)
            i_w = tuple(ren[g] for g in i_x)
            if sorted(i_x + i_w) != sorted(gens):
                continue
            order = i_x + i_w
            return GramForm(x, d, w.var, rhs.coeff * wrhs.coeff,
                            tuple(xnames.index(n) for n in i_x + sums), i_x, i_w,
                            tuple(order.index(g) for g in gens))
    return None


class _Emitter:
    """New pointwise statements over a contraction's summation dims (their generator
    indices stand for the summation indices, in order)."""

    def __init__(self, p: Program, rhs: ContractRhs, fresh: Callable[[], str]) -> None:
        self.shapes, self.ix, self.dims = p.shapes, rhs.ix, rhs.sdims
        self.ren = {j: Affine.var(f"{rhs.ix[0]}{k}") for k, j in enumerate(rhs.sum_names())}
        self.fresh = fresh
        self.stmts: list[Stmt] = []
        # (id of a factor, coefficient) -> (the factor, kept alive, and its operand)
        self.done: dict[tuple[int, float], tuple[Factor, tuple[Operand | None, float]]] = {}

    def add(self, rhs: Rhs) -> Operand:
        var = self.fresh()
        self.stmts.append(Stmt(var, rhs))
        return Operand(var, rhs.gen_ids())

    def vector(self, f: Factor, coeff: float = 1.0) -> Operand:
        """A variable over the summation dims holding `coeff * f`, read in order."""
        o, c = self.operand(f, coeff)
        if o is None:
            return self.add(ConstRhs(self.ix, self.dims, PTrue(), c))
        shape = self.shapes.get(o.var) or \
            next((s.rhs.dims for s in self.stmts if s.var == o.var), None)
        if c != 1.0 or tuple(o.idx) != tuple(self.ren.values()) or shape != self.dims:
            return self.add(ReduceRhs(self.ix, self.dims, (), PTrue(), c, (o,)))
        return o

    def operand(self, f: Factor, coeff: float = 1.0) -> tuple[Operand | None, float]:
        """`coeff * f` as (operand, coefficient still to apply); no operand for a constant.
        A factor shared by several terms (the same tuple) becomes statements once."""
        key = (id(f), coeff)
        if key not in self.done:
            self.done[key] = (f, self._operand(f, coeff))
        return self.done[key][1]

    def _operand(self, f: Factor, coeff: float) -> tuple[Operand | None, float]:
        kind = f[0]
        if kind == "read":
            return f[1].subst(self.ren), coeff
        if kind == "scale":
            return self.operand(f[2], coeff * f[1])
        if kind == "sum":
            a, b = self.vector(f[1]), self.vector(f[2])
            return self.add(AddRhs(self.ix, self.dims, PTrue(), (PTrue(), PTrue()),
                                   (a, b))), coeff
        acc: Operand | None = None
        for g in f[1]:
            o, c = self.operand(g)
            coeff *= c
            if o is not None:
                acc = o if acc is None else \
                    self.add(ContractRhs(self.ix, self.dims, (), PTrue(), 1.0, (acc, o)))
        return acc, coeff


def factor_row_scalings(p: Program) -> Program:
    """`p` with every weighted Gram contraction in the canonical form of `gram_form`
    (module docstring), dead statements dropped; `p` itself when there is none."""
    sizes = set(p.size_params())
    prefix = tssa.var_prefix([q.name for q in p.params] + [s.var for s in p.stmts])
    counter = itertools.count()

    def fresh() -> str:
        return f"{prefix}{next(counter)}"

    stmts: list[Stmt] = []
    for s in p.stmts:
        rhs = s.rhs
        new = None
        if isinstance(rhs, ContractRhs) and rhs.sdims and \
                not ast.free_names(rhs.pred) - sizes:   # (a guard on sizes only: kept)
            new = _factored(p, s.var, rhs, fresh)
        stmts.extend(new or [s])
    if len(stmts) == len(p.stmts) and all(a is b for a, b in zip(stmts, p.stmts)):
        return p
    return tssa.dce(dataclasses.replace(p, stmts=tuple(stmts)))


def _factored(p: Program, var: str, rhs: ContractRhs, fresh: Callable[[], str]
              ) -> list[Stmt] | None:
    """The statements replacing contraction `var` in canonical Gram form, or None."""
    gens, sums = frozenset(rhs.gen_names()), rhs.sum_names()
    ranges = rhs.ranges()
    memo: dict[Operand, Scaled] = {}
    summand = _product(rhs.coeff, [_decompose(p, o, ranges, gens, memo) for o in rhs.operands])
    if len(summand.bases) != 2 or \
            summand.bases == tuple(sorted(rhs.operands, key=node_key)):  # X X^T: tl_matmul
        return None
    left, right = summand.bases
    if _pairing(left, right, tuple(gens), sums, ranges) is None:
        return None
    if summand.coeff == 0.0 or summand.coeff != summand.coeff:
        return None
    done = gram_form(p, var)
    if done is not None and done.base.var == left.var:   # already in form, on this base
        return None
    em = _Emitter(p, rhs, fresh)
    d = em.vector(summand.factor)
    rnames = _plain(right.idx)
    assert rnames is not None
    w_dims = tuple(ranges[n] for n in rnames)
    to_w = {n: Affine.var(f"{rhs.ix[0]}{k}") for k, n in enumerate(rnames)}
    w = em.add(ContractRhs(rhs.ix, w_dims, (), PTrue(), 1.0,
                           (right.subst(to_w), Operand(d.var, [to_w[j] for j in sums]))))
    new = ContractRhs(rhs.ix, rhs.dims, rhs.sdims, rhs.pred, summand.coeff,
                      (left, Operand(w.var, [Affine.var(n) for n in rnames])))
    stmts = em.stmts + [Stmt(var, new)]
    # kept only if it lands in the form the code generator runs as syrk
    probe = dataclasses.replace(p, stmts=tuple([t for t in p.stmts if t.var != var] + stmts))
    if gram_form(tssa.toposort(probe), var) is None:
        return None
    return stmts


__all__ = ["factor_row_scalings", "gram_form", "GramForm", "Scaled"]
