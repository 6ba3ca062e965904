"""Adjoint rules of the linear-algebra boxes (SPEC 13, seed 003), in `VJP_RULES`.

Each contribution is ordinary Tensor SSA plus the same boxes (passes/jvp/linalg.py), so a
vjp can be differentiated again (the Hessian-vector product of a GP likelihood).  Where the
box reads sym(A) the cotangent is symmetrised; where it reads a triangle it is masked to it:

  ADJ-cholesky          L = chol(A):  Abar = sym(L^-T Phi(L^T tril(Lbar)) L^-1)
  ADJ-trisolve          X = L^-1 B:   Bbar = L^-T Xbar,  Lbar = -tril(Bbar X^T)
  ADJ-trisolve_t        X = L^-T B:   Bbar = L^-1 Xbar,  Lbar = -tril(X Bbar^T)
  ADJ-cholesky_inverse  C = (L L^T)^-1:  Lbar = -2 tril(C sym(Cbar) L^-T)
  ADJ-lq                A = L Q:      Abar = L^-T (Qbar + copyltu(M) Q),
                                      M = L^T tril(Lbar) - Qbar Q^T
  ADJ-eigh              A = V diag(w) V^T:  Abar = sym(V (diag(wbar) + F o V^T Vbar) V^T)
"""
from __future__ import annotations

from tensorlang.ir.ast import Affine
from tensorlang.ir.tssa import BoxRhs, Operand, Stmt

from ..jvp import linalg
from ..jvp.emit import Emitter
from ..jvp.linalg import le
from .rules import VJP_RULES, Reverse


def _is(fn: str):
    return lambda rhs: isinstance(rhs, BoxRhs) and rhs.fn == fn


def _give(rv: Reverse, rhs: BoxRhs, k: int, var: str | None) -> None:
    target = rhs.operands[k].var
    if var is not None and target in rv.active:
        rv.contrib[target].append(var)


def _prims(rv: Reverse, rhs: BoxRhs) -> list[str]:
    return [rv.M[o.var] for o in rhs.operands]


def _label(rhs: BoxRhs) -> str:
    return f"{rhs.label} (in the vjp of {rhs.fn})"


@VJP_RULES.register("ADJ-cholesky", BoxRhs, "L = chol(A) -> Abar = sym(L^-T Phi(L^T Lbar) L^-1)",
                    when=_is("cholesky"))
def adj_cholesky(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em, lab = rv.em, _label(rhs)
    l = rv.M[stmt.var]
    # tril(L^T tril(Lbar)) = tril(L^T Lbar) for a lower L: a dense product, then Phi
    m = linalg.matmul(em, l, dv, ta=True)
    t1 = linalg.solve(em, "trisolve_t", l, linalg.phi(em, m), lab)
    s = linalg.right_solve(em, t1, l, lab)
    _give(rv, rhs, 0, linalg.sym(em, s))


@VJP_RULES.register("ADJ-trisolve", BoxRhs, "X = L^-1 B -> Bbar = L^-T Xbar, Lbar = -tril(Bbar X^T)",
                    when=_is("trisolve"))
def adj_trisolve(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em = rv.em
    l, _ = _prims(rv, rhs)
    x = rv.M[stmt.var]
    bbar = linalg.solve(em, "trisolve_t", l, dv, _label(rhs))
    _give(rv, rhs, 1, bbar)
    if rhs.operands[0].var in rv.active:
        _give(rv, rhs, 0, _outer(em, bbar, x, rhs.ranks[1] == rhs.ranks[0]))


@VJP_RULES.register("ADJ-trisolve_t", BoxRhs,
                    "X = L^-T B -> Bbar = L^-1 Xbar, Lbar = -tril(X Bbar^T)",
                    when=_is("trisolve_t"))
def adj_trisolve_t(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em = rv.em
    l, _ = _prims(rv, rhs)
    x = rv.M[stmt.var]
    bbar = linalg.solve(em, "trisolve", l, dv, _label(rhs))
    _give(rv, rhs, 1, bbar)
    if rhs.operands[0].var in rv.active:
        _give(rv, rhs, 0, _outer(em, x, bbar, rhs.ranks[1] == rhs.ranks[0]))


def _outer(em: Emitter, a: str | None, b: str | None, matrix: bool) -> str | None:
    """-tril(a b^T): a sum over the columns of matrices, or an outer product of vectors."""
    if a is None or b is None:
        return None
    if matrix:
        return linalg.tril(em, linalg.matmul(em, a, b, tb=True), coeff=-1.0)
    s = em.shape(a)
    gen = em.gens(tuple(s) + (s[-1],))
    ix = [Affine.var(g) for g, _ in gen]
    bi = tuple(ix[:-2])
    return em.sum(gen, [], le(ix[-1], ix[-2]), -1.0,
                  [Operand(a, bi + (ix[-2],)), Operand(b, bi + (ix[-1],))])


@VJP_RULES.register("ADJ-cholesky_inverse", BoxRhs,
                    "C = (L L^T)^-1 -> Lbar = -2 tril(C sym(Cbar) L^-T)",
                    when=_is("cholesky_inverse"))
def adj_cholesky_inverse(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em = rv.em
    (l,) = _prims(rv, rhs)
    c = rv.M[stmt.var]
    g = linalg.matmul(em, c, linalg.sym(em, dv))
    h = linalg.right_solve_t(em, g, l, _label(rhs))
    _give(rv, rhs, 0, linalg.tril(em, h, coeff=-2.0))


@VJP_RULES.register("ADJ-lq", BoxRhs,
                    "A = L Q -> Abar = L^-T (Qbar + copyltu(L^T Lbar - Qbar Q^T) Q)",
                    when=_is("lq"))
def adj_lq(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em = rv.em
    (a,) = _prims(rv, rhs)
    l = linalg.box(em, "lq", 0, [a], rhs.label)
    q = linalg.box(em, "lq", 1, [a], rhs.label)
    if rhs.part == 0:   # Lbar = dv, Qbar = 0
        m = linalg.matmul(em, l, dv, ta=True)     # copyltu reads the lower triangle only
        r = linalg.matmul(em, linalg.copyltu(em, m), q)
    else:               # Qbar = dv, Lbar = 0
        m = linalg.scale(em, linalg.matmul(em, dv, q, tb=True), -1.0)
        r = linalg.add(em, dv, linalg.matmul(em, linalg.copyltu(em, m), q))
    _give(rv, rhs, 0, linalg.solve(em, "trisolve_t", l, r, _label(rhs)))


@VJP_RULES.register("ADJ-eigh", BoxRhs,
                    "A = V diag(w) V^T -> Abar = sym(V (diag(wbar) + F o V^T Vbar) V^T)",
                    when=_is("eigh"))
def adj_eigh(rv: Reverse, stmt: Stmt, dv: str) -> None:
    rhs = stmt.rhs
    em = rv.em
    (a,) = _prims(rv, rhs)
    w = linalg.box(em, "eigh", 0, [a], rhs.label)
    v = linalg.box(em, "eigh", 1, [a], rhs.label)
    if rhs.part == 0:
        mid = linalg.diag_embed(em, dv)
    else:
        mid = linalg.hadamard(em, linalg.eig_gaps(em, w), linalg.matmul(em, v, dv, ta=True))
    out = linalg.matmul(em, linalg.matmul(em, v, mid), v, tb=True)
    _give(rv, rhs, 0, linalg.sym(em, out))


__all__ = ["adj_cholesky", "adj_trisolve", "adj_trisolve_t", "adj_cholesky_inverse",
           "adj_lq", "adj_eigh"]
