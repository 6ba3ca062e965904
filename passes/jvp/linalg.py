"""Matrix helpers for the derivative rules of the linear-algebra boxes (SPEC 13, seed 003).

Every helper emits ordinary Tensor SSA through the `Emitter` (masked contractions, gathers,
adds) or a box statement, on variables of shape `[*batch, n, m]` (leading dimensions batch,
the identity in the batch indices).  A helper returns the statement variable, or None for a
structural zero (and treats a None operand as zero).
"""
from __future__ import annotations

from typing import Callable, Sequence

from tensorlang.ir.ast import Affine, Cmp, Or, Pred, PTrue
from tensorlang.ir.build import make_contract
from tensorlang.ir.tssa import BoxRhs, Operand
from tensorlang.semantics.boxes import out_shape

from .emit import Emitter

Mask = Callable[[Affine, Affine, Affine], Pred]   # (row i, column j, summed k) -> predicate


def le(a: Affine, b: Affine) -> Pred:
    return Cmp("<=", a, b)


def lt(a: Affine, b: Affine) -> Pred:
    return Cmp("<", a, b)


def eq(a: Affine, b: Affine) -> Pred:
    return Cmp("==", a, b)


def _gen(em: Emitter, dims: Sequence[Affine]) -> tuple[list[tuple[str, Affine]], list[Affine]]:
    gen = em.gens(dims)
    return gen, [Affine.var(n) for n, _ in gen]


def box(em: Emitter, fn: str, part: int, args: Sequence[str], label: str) -> str:
    """`fn(args).part` as a statement."""
    shapes = [em.shape(a) for a in args]
    rhs = BoxRhs(fn, part, out_shape(fn, part, shapes), label, tuple(len(s) for s in shapes),
                 tuple(d for s in shapes for d in s), tuple(Operand(a, ()) for a in args))
    return em.copy(rhs, {})


def matmul(em: Emitter, a: str | None, b: str | None, ta: bool = False, tb: bool = False,
           mask: Mask | None = None, coeff: float = 1.0) -> str | None:
    """`coeff * op(a) op(b)` (op: transpose when ta / tb), masked by `mask(i, j, k)` (None:
    a dense product, see below); `b` may be a vector `[*batch, k]` (then the result is a
    vector)."""
    if a is None or b is None:
        return None
    sa, sb = em.shape(a), em.shape(b)
    batch = sa[:-2]
    rows, inner = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    vec = len(sb) == len(sa) - 1
    cols = None if vec else (sb[-2] if tb else sb[-1])
    dims = tuple(batch) + (rows,) + (() if vec else (cols,))
    gen, ix = _gen(em, dims)
    bi, i = ix[:len(batch)], ix[len(batch)]
    j = None if vec else ix[len(batch) + 1]
    k = Affine.var(f"{em.tmp}m0")
    oa = Operand(a, tuple(bi) + ((k, i) if ta else (i, k)))
    ob = Operand(b, tuple(bi) + ((k,) if vec else ((j, k) if tb else (k, j))))
    if mask is None:
        # A dense product, emitted as it is (no mask strengthening from the operands'
        # supports): the backends run it as one BLAS call.  Triangular operands are
        # triangular by value (box outputs) or masked before (tril): the product is the
        # same, at the dense cost, which the per-box budgets count.
        rhs = make_contract(gen, [(f"{em.tmp}m0", inner)], oa, ob, PTrue(), coeff, em.ix)
        return em.copy(rhs, {})
    pred = mask(i, j if j is not None else i, k)
    return em.sum(gen, [(f"{em.tmp}m0", inner)], pred, coeff, [oa, ob])


def gather(em: Emitter, x: str | None, transpose: bool = False, coeff: float = 1.0,
           mask: Callable[[Affine, Affine], Pred] | None = None) -> str | None:
    """`coeff * [mask(i, j)] * x[.., i, j]` (x[.., j, i] with `transpose`)."""
    if x is None:
        return None
    s = em.shape(x)
    dims = tuple(s[:-2]) + ((s[-1], s[-2]) if transpose else (s[-2], s[-1]))
    gen, ix = _gen(em, dims)
    i, j = ix[-2], ix[-1]
    idx = tuple(ix[:-2]) + ((j, i) if transpose else (i, j))
    return em.sum(gen, [], mask(i, j) if mask else PTrue(), coeff, [Operand(x, idx)])


def add(em: Emitter, a: str | None, b: str | None, cb: float = 1.0) -> str | None:
    """`a + cb * b` (same shape)."""
    if b is not None and cb != 1.0:
        b = scale(em, b, cb)
    if a is None:
        return b
    if b is None:
        return a
    gen, ix = _gen(em, em.shape(a))
    return em.add(gen, (Operand(a, tuple(ix)), PTrue()), (Operand(b, tuple(ix)), PTrue()))


def scale(em: Emitter, x: str | None, c: float) -> str | None:
    if x is None:
        return None
    gen, ix = _gen(em, em.shape(x))
    return em.sum(gen, [], PTrue(), c, [Operand(x, tuple(ix))])


def tril(em: Emitter, x: str | None, coeff: float = 1.0) -> str | None:
    """The lower triangle of x (diagonal included)."""
    return gather(em, x, coeff=coeff, mask=lambda i, j: le(j, i))


def phi(em: Emitter, x: str | None) -> str | None:
    """The lower triangle with the diagonal halved (seed 003's Phi)."""
    strict = gather(em, x, mask=lambda i, j: lt(j, i))
    half = gather(em, x, coeff=0.5, mask=lambda i, j: eq(i, j))
    return add(em, strict, half)


def sym(em: Emitter, x: str | None) -> str | None:
    """(x + x^T) / 2."""
    return add(em, scale(em, x, 0.5), gather(em, x, transpose=True, coeff=0.5))


def copyltu(em: Emitter, x: str | None) -> str | None:
    """The symmetric matrix with x's lower triangle (seed 003's copyltu)."""
    return add(em, gather(em, x, mask=lambda i, j: le(j, i)),
               gather(em, x, transpose=True, mask=lambda i, j: lt(i, j)))


def solve(em: Emitter, fn: str, l: str, b: str | None, label: str) -> str | None:
    """trisolve / trisolve_t of l and b (None for a zero b)."""
    return None if b is None else box(em, fn, 0, [l, b], label)


def right_solve_t(em: Emitter, x: str | None, l: str, label: str) -> str | None:
    """x L^-T = (L^-1 x^T)^T."""
    if x is None:
        return None
    return gather(em, solve(em, "trisolve", l, gather(em, x, transpose=True), label),
                  transpose=True)


def right_solve(em: Emitter, x: str | None, l: str, label: str) -> str | None:
    """x L^-1 = (L^-T x^T)^T."""
    if x is None:
        return None
    return gather(em, solve(em, "trisolve_t", l, gather(em, x, transpose=True), label),
                  transpose=True)


def diag_embed(em: Emitter, w: str | None) -> str | None:
    """diag(w) as a matrix."""
    if w is None:
        return None
    s = em.shape(w)
    gen, ix = _gen(em, tuple(s) + (s[-1],))
    return em.sum(gen, [], eq(ix[-2], ix[-1]), 1.0, [Operand(w, tuple(ix[:-1]))])


def diagonal(em: Emitter, x: str | None) -> str | None:
    if x is None:
        return None
    s = em.shape(x)
    gen, ix = _gen(em, tuple(s[:-1]))
    return em.sum(gen, [], PTrue(), 1.0, [Operand(x, tuple(ix) + (ix[-1],))])


def hadamard(em: Emitter, a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    gen, ix = _gen(em, em.shape(a))
    return em.sum(gen, [], PTrue(), 1.0, [Operand(a, tuple(ix)), Operand(b, tuple(ix))])


def eig_gaps(em: Emitter, w: str) -> str | None:
    """F[.., i, j] = [i != j] / (w_j - w_i)."""
    s = em.shape(w)
    gen, ix = _gen(em, tuple(s) + (s[-1],))
    b, i, j = tuple(ix[:-2]), ix[-2], ix[-1]
    wj = em.sum(gen, [], PTrue(), 1.0, [Operand(w, b + (j,))])
    wi = em.sum(gen, [], PTrue(), -1.0, [Operand(w, b + (i,))])
    gap = em.add(gen, (Operand(wj, tuple(ix)), PTrue()), (Operand(wi, tuple(ix)), PTrue()))
    off = Cmp("<", i, j)
    return em.map(gen, "recip", (), [Operand(gap, tuple(ix))], Or(off, Cmp("<", j, i)))


__all__ = ["box", "matmul", "gather", "add", "scale", "tril", "phi", "sym", "copyltu",
           "solve", "right_solve", "right_solve_t", "diag_embed", "diagonal", "hadamard",
           "eig_gaps", "le", "lt", "eq"]
