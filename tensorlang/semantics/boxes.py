"""Linear-algebra black boxes (SPEC 13, seed 003): one registry entry per box.

    cholesky(A)          potrf   L lower with A = L L^T (A read as sym(A) = (A + A^T) / 2)
    cholesky_inverse(L)  potri   (L L^T)^-1
    trisolve(L, B)       trsm    X with L X = B   (L lower; B a matrix [.., n, m] or a vector)
    trisolve_t(L, B)     trsm    X with L^T X = B
    lq(A)                gelqf   (L, Q): A = L Q, Q Q^T = I, L lower with diag(L) >= 0
    eigh(A)              syevd   (w, V): sym(A) = V diag(w) V^T, w ascending, V's columns
                                 the eigenvectors, each signed so that its entry of largest
                                 magnitude (the first on ties) is positive (seed 003)

Leading dimensions batch: `cholesky` of an `R[B, n, n]` factors B matrices.  A pair-valued
box (`lq`, `eigh`) is two core nodes `Box(fn, 0, ..)`, `Box(fn, 1, ..)` (pair elimination
needs nothing new); the backends compute both parts with one LAPACK call.

Each entry has: its output shape (`out_shape`), its meaning (`evaluate`, numpy/scipy, with
errors that name the argument and say what failed -- never a NaN), its SPEC 3 cost
(`box_cost`: multiply-adds counted as one multiplication and one addition, square roots
and divisions as calls) and the constants of the derivative bounds (`JVP_CONST`,
`VJP_CONST`: the derivative statements of one box cost at most that many times the box).
The derivative rules themselves are in passes/jvp/boxes.py and passes/vjp/boxes.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tensorlang.ir.ast import BOX_NAMES, PAIR_BOXES, Affine
from tensorlang.syntax.errors import TLError


class BoxError(TLError):
    """A linear-algebra box met an input outside its domain (not positive definite,
    singular, not finite)."""

    kind = "linear algebra error"


@dataclass(frozen=True)
class BoxSpec:
    name: str
    arity: int
    parts: int            # 1, or 2 for the pair-valued boxes
    lapack: str           # the LAPACK routine it stands for
    schema: str           # what it computes (docs, `tl prove`)


BOXES: dict[str, BoxSpec] = {s.name: s for s in (
    BoxSpec("cholesky", 1, 1, "potrf", "L = cholesky(A): A = L L^T, L lower"),
    BoxSpec("cholesky_inverse", 1, 1, "potri", "cholesky_inverse(L) = (L L^T)^-1"),
    BoxSpec("trisolve", 2, 1, "trsm", "X = trisolve(L, B): L X = B"),
    BoxSpec("trisolve_t", 2, 1, "trsm", "X = trisolve_t(L, B): L^T X = B"),
    BoxSpec("lq", 1, 2, "gelqf+orglq", "(L, Q) = lq(A): A = L Q, Q Q^T = I"),
    BoxSpec("eigh", 1, 2, "syevd", "(w, V) = eigh(A): A = V diag(w) V^T"),
)}

# Derivative bound constants (checked by `tl prove`: the FWD-/ADJ- rows of the boxes;
# docs/linalg.md).  For one box statement f = box(u..) with n scalar entries in its operands
# and outputs (|in| + |out|):  tangent statements <= JVP_CONST[box] * C(f) + |in| + |out|,
# the whole vjp program <= VJP_CONST[box] * C(f) + |in| + |out|  (the shape of Theorem
# 6.55; the constants are what the seed-003 rules need: a few triangular solves and masked
# products per factorisation, the products dense (one BLAS call each, twice the flops of a
# triangular product); eigh's w-only derivative needs the eigenvectors too).
JVP_CONST: dict[str, int] = {"cholesky": 13, "cholesky_inverse": 5, "trisolve": 3,
                             "trisolve_t": 3, "lq": 6, "eigh": 13}
VJP_CONST: dict[str, int] = {"cholesky": 14, "cholesky_inverse": 7, "trisolve": 4,
                             "trisolve_t": 4, "lq": 7, "eigh": 14}


assert set(BOXES) == BOX_NAMES and {b for b in BOXES if BOXES[b].parts == 2} == PAIR_BOXES


def is_box(name: str) -> bool:
    return name in BOXES

# ---------------------------------------------------------------------------------------------
# Shapes


def _square(fn: str, what: str, s: Sequence[Affine]) -> None:
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"{fn}: {what} must be a square matrix R[.., n, n] (leading "
                         f"dimensions batch), found shape {_fmt(s)}")


def _fmt(s: Sequence[Affine]) -> str:
    return "[" + ", ".join(str(a) for a in s) + "]"


def out_shape(fn: str, part: int, shapes: Sequence[Sequence[Affine]]) -> tuple[Affine, ...]:
    """The shape of output `part` of `fn` applied to arguments of these shapes (ValueError
    with a message when they do not fit)."""
    spec = BOXES.get(fn)
    if spec is None:
        raise ValueError(f"unknown linear algebra box {fn}")
    if len(shapes) != spec.arity:
        raise ValueError(f"{fn} takes {spec.arity} argument(s), found {len(shapes)}")
    if not 0 <= part < spec.parts:
        raise ValueError(f"{fn} has {spec.parts} output(s), not .{part}")
    a = tuple(shapes[0])
    if fn in ("cholesky", "cholesky_inverse"):
        _square(fn, "the argument", a)
        return a
    if fn in ("trisolve", "trisolve_t"):
        _square(fn, "the triangular factor", a)
        b = tuple(shapes[1])
        batch, n = a[:-2], a[-1]
        if len(b) == len(a) and b[:-2] == batch and b[-2] == n:
            return b
        if len(b) == len(a) - 1 and b[:-1] == batch and b[-1] == n:
            return b
        raise ValueError(f"{fn}: the right-hand side must be R[.., {n}, m] or R[.., {n}] "
                         f"with the factor's batch dimensions, found {_fmt(b)} for a factor "
                         f"{_fmt(a)}")
    if fn == "lq":
        if len(a) < 2:
            raise ValueError(f"lq: the argument must be a matrix R[.., m, n], found {_fmt(a)}")
        m = a[-2]
        return a[:-1] + (m,) if part == 0 else a
    if fn == "eigh":
        _square(fn, "the argument", a)
        return a[:-1] if part == 0 else a
    raise AssertionError(fn)

# ---------------------------------------------------------------------------------------------
# Meaning


def _batched(f: Callable[..., np.ndarray], args: Sequence[np.ndarray], core: Sequence[int]
             ) -> np.ndarray:
    """Apply `f` to each batch item: arg k has `core[k]` trailing core dimensions."""
    batch = args[0].shape[:args[0].ndim - core[0]]
    if not batch:
        return f(*args, ())
    out = None
    for pos in np.ndindex(*batch):
        r = f(*(x[pos] for x in args), pos)
        if out is None:
            out = np.empty(batch + r.shape)
        out[pos] = r
    if out is None:  # an empty batch
        probe = [np.eye(x.shape[-1]) if c == 2 and x.shape[-1] == x.shape[-2]
                 else np.ones(x.shape[x.ndim - c:]) for x, c in zip(args, core)]
        r = f(*probe, ())
        out = np.empty(batch + r.shape)
    return out


def _where(label: str, pos: tuple[int, ...]) -> str:
    return label + (f" (batch item {list(pos)})" if pos else "")


def all_finite(x: np.ndarray) -> bool:
    """No NaN or infinity in x (a finite sum proves it without a boolean temporary; only a
    non-finite sum, which overflow can also cause, needs the full test)."""
    return bool(np.isfinite(np.sum(x))) or bool(np.all(np.isfinite(x)))


def _finite(fn: str, label: str, xs: Sequence[np.ndarray]) -> None:
    for x in xs:
        if not all_finite(x):
            raise BoxError(f"{fn}({label}): an argument holds NaN or infinity")


def _potrf(a: np.ndarray, label: str, pos: tuple[int, ...]) -> np.ndarray:
    from scipy.linalg import lapack

    n = a.shape[-1]
    if n == 0:
        return np.zeros((0, 0))
    sym = np.add(a, a.T)
    sym *= 0.5
    # sym (C order) is, read in Fortran order, its own transpose: the upper factor U of that
    # (sym = U^T U) is, read back in C order, the lower L -- no copies.
    u, info = lapack.dpotrf(sym.T, lower=0, clean=1, overwrite_a=1)
    if info > 0:
        k = info - 1
        sym = 0.5 * (a + a.T)
        c = np.linalg.cholesky(sym[:k, :k]) if k else np.zeros((0, 0))
        pivot = sym[k, k] - (np.linalg.solve(c, sym[k, :k]) ** 2).sum() if k else sym[0, 0]
        raise BoxError(f"cholesky({_where(label, pos)}): the matrix is not positive definite: "
                       f"pivot {k} (the leading minor of order {info} of {n}) is "
                       f"{pivot:.6g} <= 0")
    if info < 0:
        raise BoxError(f"cholesky({_where(label, pos)}): LAPACK potrf failed (info {info})")
    return u.T


def _check_triangular(fn: str, l: np.ndarray, label: str, pos: tuple[int, ...]) -> None:
    d = np.abs(np.diagonal(l))
    bad = np.flatnonzero(d == 0.0)
    if bad.size:
        k = int(bad[0])
        raise BoxError(f"{fn}({_where(label, pos)}): the triangular factor is singular: its "
                       f"diagonal entry [{k}, {k}] is 0")


def _trsm(trans: bool) -> Callable[..., np.ndarray]:
    fn = "trisolve_t" if trans else "trisolve"

    def solve(l: np.ndarray, b: np.ndarray, label: str, pos: tuple[int, ...]) -> np.ndarray:
        from scipy.linalg import blas

        _check_triangular(fn, l, label, pos)
        if l.shape[-1] == 0 or b.size == 0:
            return np.zeros(b.shape)
        # Solved transposed, X^T op(L)^T = B^T (trsm from the right): l.T and B^T are l and
        # B in Fortran order, and X^T comes back in Fortran order, i.e. X in C order -- no
        # copies but the result (trtrs would copy B into Fortran order and X back).
        rows = b.T if b.ndim == 2 else b[None, :]
        xt = blas.dtrsm(1.0, l.T, rows, side=1, lower=0, trans_a=1 if trans else 0)
        return xt.T if b.ndim == 2 else xt[0]
    return solve


def _potri(l: np.ndarray, label: str, pos: tuple[int, ...]) -> np.ndarray:
    from scipy.linalg import solve_triangular

    _check_triangular("cholesky_inverse", l, label, pos)
    n = l.shape[-1]
    if n == 0:
        return np.zeros((0, 0))
    li = solve_triangular(np.tril(l), np.eye(n), lower=True, check_finite=False)
    return li.T @ li


def lq_factor(a: np.ndarray, want_q: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(L, Q) of one matrix with diag(L) >= 0 (Q None unless `want_q`: geqrf alone, no
    orglq).  L is C-ordered: its transpose, what a trisolve with L hands to trsm, is then
    Fortran-ordered (no copy there)."""
    m, n = a.shape
    if a.size == 0:
        q, r = np.linalg.qr(a.T) if want_q else (None, np.linalg.qr(a.T, mode="r"))
        l = np.array(r.T)
    else:
        # scipy's geqrf/orgqr with the optimal workspace: numpy's qr takes twice as long at
        # 200 x 600 (the same numbers); a.T of a C-ordered a is Fortran-ordered (no copy)
        from scipy.linalg import lapack

        lwork = max(1, int(lapack.dgeqrf_lwork(n, m)[0]))
        qr, tau, _, info = lapack.dgeqrf(a.T, lwork=lwork)
        if info != 0:
            raise BoxError(f"lq: LAPACK geqrf failed (info {info})")
        l = np.tril(qr[:m, :].T)          # R^T: a C-ordered copy of R's triangle
        q = None
        if want_q:
            q, _, info = lapack.dorgqr(qr, tau, lwork=lwork, overwrite_a=1)
            if info != 0:
                raise BoxError(f"lq: LAPACK orgqr failed (info {info})")
    s = np.sign(np.diagonal(l)).copy()
    s[s == 0] = 1.0
    l *= s[None, :]            # in place: Q's transpose is a view (no copy of Q)
    if q is not None:
        q *= s[None, :]
    return l, (None if q is None else q.T)


def eigh_factor(a: np.ndarray, want_v: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(w, V) of sym(a), V's columns signed by seed 003's rule (V None unless `want_v`:
    the eigenvalues alone)."""
    sym = a + a.T
    sym *= 0.5
    if not want_v:
        return np.linalg.eigvalsh(sym), None
    w, v = np.linalg.eigh(sym)
    return w, sign_columns(v)


def sign_columns(v: np.ndarray) -> np.ndarray:
    """Each column (last axis batch-wise) flipped so its largest-magnitude entry (the first
    on ties) is positive."""
    if v.shape[-1] == 0:
        return v
    k = np.argmax(np.abs(v), axis=-2)
    pick = np.take_along_axis(v, k[..., None, :], axis=-2)
    return v * np.where(pick < 0, -1.0, 1.0)


def _lq(part: int) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, label: str, pos: tuple[int, ...]) -> np.ndarray:
        m, n = a.shape
        if m > n:
            raise BoxError(f"lq({_where(label, pos)}): needs at most as many rows as columns, "
                           f"found {m} x {n}")
        l, q = lq_factor(a, want_q=part == 1)   # L: geqrf alone
        return l if part == 0 else q
    return run


def _eigh(part: int) -> Callable[..., np.ndarray]:
    def run(a: np.ndarray, label: str, pos: tuple[int, ...]) -> np.ndarray:
        w, v = eigh_factor(a)
        return w if part == 0 else v
    return run


def _core_dims(fn: str, shapes: Sequence[tuple[int, ...]]) -> list[int]:
    if fn in ("trisolve", "trisolve_t"):
        return [2, 2 if len(shapes[1]) == len(shapes[0]) else 1]
    return [2]


def evaluate_parts(fn: str, args: Sequence[np.ndarray], label: str = "",
                   first_only: bool = False) -> tuple[np.ndarray | None, ...]:
    """Every output of `fn` (both parts of `lq`, `eigh` from one factorisation); with
    `first_only` the second part of a pair box is None and not computed (L of `lq` without
    forming Q, the eigenvalues without the eigenvectors)."""
    if fn not in PAIR_BOXES:
        return (evaluate(fn, 0, args, label),)
    a = np.ascontiguousarray(args[0], dtype=np.float64)
    label = label or "arg0"
    _finite(fn, label, [a])
    if fn == "lq" and a.shape[-2] > a.shape[-1]:
        return (evaluate(fn, 0, [a], label),)        # raises the error
    batch = a.shape[:-2]
    flat = a.reshape((-1,) + a.shape[-2:])
    both = [lq_factor(x, not first_only) if fn == "lq" else eigh_factor(x, not first_only)
            for x in flat]
    outs: list[np.ndarray | None] = []
    for k in range(2):
        if k and first_only:
            outs.append(None)
            continue
        parts = [b[k] for b in both]
        if len(parts) == 1 and not batch:
            out = parts[0]                  # no stacking copy
        elif parts:
            out = np.stack(parts).reshape(batch + parts[0].shape)
        else:
            out = np.zeros(batch + tuple(int(d) for d in out_shape(fn, k, [a.shape])[len(batch):]))
        if not all_finite(out):
            raise BoxError(f"{fn}({label}): the result is not finite (the input is too badly "
                           "conditioned)")
        outs.append(out)
    return tuple(outs)


def evaluate(fn: str, part: int, args: Sequence[np.ndarray], label: str = "") -> np.ndarray:
    """Output `part` of `fn` on float64 arrays (leading dimensions batch)."""
    # any layout: a transposed operand reaches LAPACK in Fortran order without a copy
    args = [np.asarray(x, dtype=np.float64) for x in args]
    label = label or ", ".join(f"arg{k}" for k in range(len(args)))
    _finite(fn, label, args)
    one: Callable[..., np.ndarray]
    if fn == "cholesky":
        one = _potrf
    elif fn == "cholesky_inverse":
        one = _potri
    elif fn in ("trisolve", "trisolve_t"):
        one = _trsm(fn == "trisolve_t")
    elif fn == "lq":
        one = _lq(part)
    elif fn == "eigh":
        one = _eigh(part)
    else:
        raise TLError(f"unknown linear algebra box {fn}")
    core = _core_dims(fn, [x.shape for x in args])
    out = _batched(lambda *xs: one(*xs[:-1], label, xs[-1]), args, core)
    if not all_finite(out):
        raise BoxError(f"{fn}({label}): the result is not finite (the input is too badly "
                       "conditioned)")
    return out

# ---------------------------------------------------------------------------------------------
# Cost (SPEC 3 units: a multiply-add is one multiplication and one addition)


def box_cost(fn: str, part: int, shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int]:
    """(adds, muls, calls) of output `part` of `fn` on arguments of these (integer) shapes.

    potrf: n^3/6 multiply-adds and n square roots (n^3/3 flops); potri: n^3/3 and n
    divisions; trsm: n^2 m / 2 multiply-adds and n m divisions (n^2 m flops); gelqf (L):
    m^2 n - m^3/3, orglq (Q) as much again; syevd: w alone 2n^3/3, with V 9n^3/2."""
    a = shapes[0]
    batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
    if fn in ("trisolve", "trisolve_t"):
        n = a[-1]
        b = shapes[1]
        m = b[-1] if len(b) == len(a) else 1
        fma, calls = n * n * m // 2, n * m
    elif fn == "cholesky":
        n = a[-1]
        fma, calls = n ** 3 // 6, n
    elif fn == "cholesky_inverse":
        n = a[-1]
        fma, calls = n ** 3 // 3, n
    elif fn == "lq":
        m, n = a[-2], a[-1]
        fma, calls = max(0, m * m * n - m ** 3 // 3) * (1 if part == 0 else 2), m
    elif fn == "eigh":
        n = a[-1]
        fma, calls = (2 * n ** 3 // 3) if part == 0 else (9 * n ** 3 // 2), n
    else:
        raise TLError(f"unknown linear algebra box {fn}")
    return (batch * fma, batch * fma, batch * calls)


__all__ = ["BOXES", "BoxSpec", "BoxError", "JVP_CONST", "VJP_CONST", "is_box", "out_shape",
           "evaluate", "evaluate_parts", "box_cost", "all_finite", "lq_factor", "eigh_factor", "sign_columns"]
