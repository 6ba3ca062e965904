"""Forward rules of the linear-algebra boxes (SPEC 13, seed 003), in `JVP_RULES`.

Each tangent is ordinary Tensor SSA plus the same boxes (`linalg.py`), so it can be
simplified, costed, compiled and differentiated again.  dA is read symmetrised where the box
reads sym(A) (cholesky, eigh) and lower-triangular where it reads a triangle (the factor of
trisolve, trisolve_t, cholesky_inverse):

  FWD-cholesky          L = chol(A):   X = L^-1 sym(dA) L^-T,  dL = L Phi(X)
  FWD-trisolve          X = L^-1 B:    dX = L^-1 (dB - tril(dL) X)
  FWD-trisolve_t        X = L^-T B:    dX = L^-T (dB - tril(dL)^T X)
  FWD-cholesky_inverse  C = (L L^T)^-1: M = C tril(dL) L^-1,  dC = -(M + M^T)
  FWD-lq                A = L Q:       Y = L^-1 dA, C = Y Q^T, Lam = tril(C) + strict_tril(C^T),
                                       dL = L Lam,  dQ = Y - Lam Q
  FWD-eigh              A = V diag(w) V^T:  P = V^T sym(dA) V,  dw = diag(P),
                                       dV = V (F o P),  F_ij = [i != j] / (w_j - w_i)
"""
from __future__ import annotations

from tensorlang.ir.tssa import BoxRhs, Stmt
from tensorlang.syntax.errors import NotYetSupported

from . import linalg
from .rules import JVP_RULES, Forward


def _setup(fw: Forward, stmt: Stmt) -> tuple[BoxRhs, list[str], list[str | None]]:
    rhs = stmt.rhs
    assert isinstance(rhs, BoxRhs)
    if fw.batch:
        raise NotYetSupported(f"{rhs.fn}: a one-hot (Jacobian/Hessian) seed through a "
                              "linear-algebra box; use jvp/hvp instead")
    prims = [fw.M[o.var] for o in rhs.operands]
    tans = [fw.T.get(o.var) for o in rhs.operands]
    return rhs, prims, tans


def _label(rhs: BoxRhs) -> str:
    return f"{rhs.label} (in the jvp of {rhs.fn})"


def _is(fn: str):
    return lambda rhs: isinstance(rhs, BoxRhs) and rhs.fn == fn


@JVP_RULES.register("FWD-cholesky", BoxRhs, "L = chol(A) -> dL = L Phi(L^-1 sym(dA) L^-T)",
                    when=_is("cholesky"))
def fwd_cholesky(fw: Forward, stmt: Stmt) -> str | None:
    rhs, (a,), (da,) = _setup(fw, stmt)
    if da is None:
        return None
    em, lab = fw.em, _label(rhs)
    l = fw.M[stmt.var]
    y = linalg.solve(em, "trisolve", l, linalg.sym(em, da), lab)
    x = linalg.solve(em, "trisolve", l, linalg.gather(em, y, transpose=True), lab)
    return linalg.matmul(em, l, linalg.phi(em, x))      # L lower, Phi(X) lower: L Phi(X)


@JVP_RULES.register("FWD-trisolve", BoxRhs, "X = L^-1 B -> dX = L^-1 (dB - tril(dL) X)",
                    when=_is("trisolve"))
def fwd_trisolve(fw: Forward, stmt: Stmt) -> str | None:
    rhs, (l, b), (dl, db) = _setup(fw, stmt)
    em = fw.em
    x = fw.M[stmt.var]
    r = linalg.add(em, db, linalg.matmul(em, linalg.tril(em, dl), x), -1.0)
    return linalg.solve(em, "trisolve", l, r, _label(rhs))


@JVP_RULES.register("FWD-trisolve_t", BoxRhs, "X = L^-T B -> dX = L^-T (dB - tril(dL)^T X)",
                    when=_is("trisolve_t"))
def fwd_trisolve_t(fw: Forward, stmt: Stmt) -> str | None:
    rhs, (l, b), (dl, db) = _setup(fw, stmt)
    em = fw.em
    x = fw.M[stmt.var]
    r = linalg.add(em, db, linalg.matmul(em, linalg.tril(em, dl), x, ta=True), -1.0)
    return linalg.solve(em, "trisolve_t", l, r, _label(rhs))


@JVP_RULES.register("FWD-cholesky_inverse", BoxRhs,
                    "C = (L L^T)^-1 -> dC = -(M + M^T), M = C tril(dL) L^-1",
                    when=_is("cholesky_inverse"))
def fwd_cholesky_inverse(fw: Forward, stmt: Stmt) -> str | None:
    rhs, (l,), (dl,) = _setup(fw, stmt)
    if dl is None:
        return None
    em = fw.em
    c = fw.M[stmt.var]
    p = linalg.matmul(em, c, linalg.tril(em, dl))
    m = linalg.right_solve(em, p, l, _label(rhs))
    return linalg.scale(em, linalg.add(em, m, linalg.gather(em, m, transpose=True)), -1.0)


def _lq_parts(fw: Forward, stmt: Stmt) -> tuple[str | None, str | None]:
    rhs, (a,), (da,) = _setup(fw, stmt)
    if da is None:
        return None, None
    em, lab = fw.em, _label(rhs)
    l = linalg.box(em, "lq", 0, [a], rhs.label)
    q = linalg.box(em, "lq", 1, [a], rhs.label)
    y = linalg.solve(em, "trisolve", l, da, lab)
    c = linalg.matmul(em, y, q, tb=True)
    lam = linalg.add(em, linalg.tril(em, c),
                     linalg.gather(em, c, transpose=True, mask=lambda i, j: linalg.lt(j, i)))
    if rhs.part == 0:
        return linalg.matmul(em, l, lam), None                # L, Lam lower
    return None, linalg.add(em, y, linalg.matmul(em, lam, q), -1.0)


@JVP_RULES.register("FWD-lq", BoxRhs,
                    "A = L Q -> dL = L Lam, dQ = L^-1 dA - Lam Q (Lam: lower part of "
                    "L^-1 dA Q^T with its skew part removed)", when=_is("lq"))
def fwd_lq(fw: Forward, stmt: Stmt) -> str | None:
    dl, dq = _lq_parts(fw, stmt)
    return dl if stmt.rhs.part == 0 else dq


@JVP_RULES.register("FWD-eigh", BoxRhs,
                    "A = V diag(w) V^T -> dw = diag(V^T sym(dA) V), dV = V (F o V^T sym(dA) V)",
                    when=_is("eigh"))
def fwd_eigh(fw: Forward, stmt: Stmt) -> str | None:
    rhs, (a,), (da,) = _setup(fw, stmt)
    if da is None:
        return None
    em = fw.em
    w = linalg.box(em, "eigh", 0, [a], rhs.label)
    v = linalg.box(em, "eigh", 1, [a], rhs.label)
    p = linalg.matmul(em, linalg.matmul(em, v, linalg.sym(em, da), ta=True), v)
    if rhs.part == 0:
        return linalg.diagonal(em, p)
    return linalg.matmul(em, v, linalg.hadamard(em, linalg.eig_gaps(em, w), p))


__all__ = ["fwd_cholesky", "fwd_trisolve", "fwd_trisolve_t", "fwd_cholesky_inverse",
           "fwd_lq", "fwd_eigh"]
