"""Forward functions of the workloads written once for an array namespace (jax.numpy or torch),
used by the JAX and PyTorch columns; their derivatives come from each framework's AD.

Each function takes `ops` (an `Ops`) and the workload's array arguments in the order of
`PARAMS[name]`; sizes follow from the shapes.  They are the programs of examples/*.tl
translated literally: the pathological ones keep what makes them pathological (the diagonal
matrix of `trace_diag`, the unused product of `dead_code`) because the question they ask is
whether differentiating the program *as written* stays cheap.  qform2 is written the way a
numpy user would write it, |A x|^2 (O(N^2)), not by materialising A^T A.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .systems_numpy import ARAP_CHANNELS, arap_slices


@dataclass(frozen=True)
class Ops:
    """The few operations whose spelling differs between jax.numpy and torch."""

    xp: Any                                    # jax.numpy or torch
    concatenate: Callable[..., Any]            # (arrays, axis)
    eye_bool: Callable[[int], Any]
    rowmax: Callable[[Any], Any]               # max over axis 1, kept as a column
    index_add: Callable[[Any, Any, Any], Any]  # (out, idx, rows): out with rows added at idx


PARAMS: dict[str, tuple[str, ...]] = {
    "qform": ("x", "A"), "qform_sum": ("x", "A"), "qform2": ("x", "A"), "conv": ("x", "w"),
    "deconv_loss": ("x", "w", "b"), "arap_residuals": ("U", "V", "T"),
    "imgarap": ("U", "V", "T"), "nbody": ("P", "m"), "nnmatfac": ("A", "W", "H"),
    "logreg": ("X", "y", "w"), "matfac": ("Om", "T", "U", "V"), "masked": ("E", "A"),
    "trace_diag": ("x",), "row_col": ("X",), "skip_one": ("x",), "dead_code": ("x", "A"),
    "maxpool": ("X",), "attention": ("Q", "K", "V"), "huber": ("X", "w", "y"),
    "embag": ("tok", "E", "w", "y"), "gnn": ("src", "dst", "X", "W", "T"), "laplace": ("u",),
    "dirichlet": ("u",), "upsample": ("x", "s"), "upsample_loss": ("x", "s", "t"),
    "fourier_fit": ("t", "c", "y"),
}
# Workloads whose function is itself a derivative of another: (function, derivative kind,
# wrt, names of the extra inputs); each system builds them with its own AD.
DERIVED: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "arap_gn": ("arap_residuals", "jtjv", ("U", "V", "T"), ("dU", "dV", "dT")),
}
# Relations: boolean masks, never differentiated.
BOOL_PARAMS: frozenset[tuple[str, str]] = frozenset({("matfac", "Om"), ("masked", "E")})
# Index arrays (SPEC 12): integer arrays, never differentiated.
INT_PARAMS: frozenset[tuple[str, str]] = frozenset(
    {("embag", "tok"), ("gnn", "src"), ("gnn", "dst")})


def qform(ops: Ops, x: Any, A: Any) -> Any:
    return x @ (A @ x)


def qform2(ops: Ops, x: Any, A: Any) -> Any:
    Ax = A @ x
    return Ax @ Ax


def conv(ops: Ops, x: Any, w: Any) -> Any:
    K = w.shape[0]
    N = x.shape[0] - K + 1
    out = w[0] * x[0:N]
    for k in range(1, K):
        out = out + w[k] * x[k:k + N]
    return out


def deconv_loss(ops: Ops, x: Any, w: Any, b: Any) -> Any:
    r = conv(ops, x, w) - b
    return r @ r


def _arap_channel(U: Any, V: Any, c: Any, s: Any, k: int) -> tuple[Any, tuple]:
    f, axis, fwd, ac, as_ = ARAP_CHANNELS[k]
    here, there = arap_slices(axis, fwd)
    F = U if f == "U" else V
    return F[here] - F[there] + ac * c[here] + as_ * s[here], (axis, fwd)


def arap_residuals(ops: Ops, U: Any, V: Any, T: Any) -> Any:
    xp = ops.xp
    c, s = xp.cos(T), xp.sin(T)
    chans = []
    for k in range(8):
        rk, (axis, fwd) = _arap_channel(U, V, c, s, k)
        pad = xp.zeros_like(U[:1, :] if axis == 0 else U[:, :1])  # the invalid row/column
        chans.append(ops.concatenate([rk, pad] if fwd else [pad, rk], axis))
    return xp.stack(chans, -1)


def imgarap(ops: Ops, U: Any, V: Any, T: Any) -> Any:
    c, s = ops.xp.cos(T), ops.xp.sin(T)
    total = 0.0
    for k in range(8):
        rk, _ = _arap_channel(U, V, c, s, k)
        total = total + (rk * rk).sum()
    return total


def nbody(ops: Ops, P: Any, m: Any) -> Any:
    xp = ops.xp
    D = P[:, None, :] - P[None, :, :]
    d2 = (D * D).sum(-1)
    upper = xp.triu(xp.ones_like(d2), 1) > 0
    return -xp.where(upper, m[:, None] * m[None, :] / xp.sqrt(d2 + 0.01), 0.0).sum()


def nnmatfac(ops: Ops, A: Any, W: Any, H: Any) -> Any:
    WH = W @ H
    return (ops.xp.log(WH) + A / WH).sum()


def logreg(ops: Ops, X: Any, y: Any, w: Any) -> Any:
    xp = ops.xp
    return xp.log(xp.exp(-y * (X @ w)) + 1.0).sum()


def matfac(ops: Ops, Om: Any, T: Any, U: Any, V: Any) -> Any:
    R = T - U @ V.T
    return ops.xp.where(Om, R * R, 0.0).sum()


def masked(ops: Ops, E: Any, A: Any) -> Any:
    keep = E & ~ops.eye_bool(A.shape[0])
    return ops.xp.where(keep, A * A, 0.0).sum()


def trace_diag(ops: Ops, x: Any) -> Any:
    return ops.xp.trace(ops.xp.diag(x))


def row_col(ops: Ops, X: Any) -> Any:
    return X[:, 0] @ X[0, :]


def skip_one(ops: Ops, x: Any) -> Any:
    return x[1:].sum()


def dead_code(ops: Ops, x: Any, A: Any) -> Any:
    unused = A @ x  # noqa: F841 -- dead on purpose: does the system eliminate it?
    return x @ x


def maxpool(ops: Ops, X: Any) -> Any:
    """2x2 max-pooling, then the squared norm (examples/maxpool.tl)."""
    xp = ops.xp
    P = xp.maximum(xp.maximum(X[0::2, 0::2], X[0::2, 1::2]),
                   xp.maximum(X[1::2, 0::2], X[1::2, 1::2]))
    return (P * P).sum()


def attention(ops: Ops, Q: Any, K: Any, V: Any) -> Any:
    """Softmax attention with the row maximum subtracted (examples/attention.tl)."""
    xp = ops.xp
    S = Q @ K.T
    E = xp.exp(S - ops.rowmax(S))
    O = (E @ V) / E.sum(1)[:, None]
    return (O * O).sum()


def huber(ops: Ops, X: Any, w: Any, y: Any) -> Any:
    """The Huber loss of a linear model (examples/piecewise.tl)."""
    xp = ops.xp
    r = X @ w - y
    a = xp.abs(r)
    return xp.where(a <= 1.0, 0.5 * r * r, a - 0.5).sum()


def embag(ops: Ops, tok: Any, E: Any, w: Any, y: Any) -> Any:
    r = E[tok].sum(1) @ w - y
    return r @ r


def gnn(ops: Ops, src: Any, dst: Any, X: Any, W: Any, T: Any) -> Any:
    agg = ops.index_add(ops.xp.zeros_like(X), dst, X[src] @ W)
    return ((ops.xp.tanh(agg) - T) ** 2).sum()


def laplace(ops: Ops, u: Any) -> Any:
    roll = ops.xp.roll
    return roll(u, -1, 0) + roll(u, 1, 0) + roll(u, -1, 1) + roll(u, 1, 1) - 4.0 * u


def dirichlet(ops: Ops, u: Any) -> Any:
    return -0.5 * (u * laplace(ops, u)).sum()


def upsample(ops: Ops, x: Any, s: Any) -> Any:
    if hasattr(x, "repeat_interleave"):  # torch
        return x.repeat_interleave(2, 0).repeat_interleave(2, 1) * s
    return ops.xp.repeat(ops.xp.repeat(x, 2, axis=0), 2, axis=1) * s


def upsample_loss(ops: Ops, x: Any, s: Any, t: Any) -> Any:
    return ((upsample(ops, x, s) - t) ** 2).sum()


def fourier_fit(ops: Ops, t: Any, c: Any, y: Any) -> Any:
    """A cosine-series fit, residuals weighted by position (examples/positional.tl)."""
    xp = ops.xp
    n = t.shape[0]
    p = xp.cos(t[:, None] * xp.arange(c.shape[0])[None, :]) @ c
    return ((xp.arange(n) + 1.0) / n * (p - y) ** 2).sum()


FORWARDS: dict[str, Callable[..., Any]] = {
    "qform": qform, "qform_sum": qform, "qform2": qform2, "conv": conv,
    "deconv_loss": deconv_loss,
    "arap_residuals": arap_residuals, "imgarap": imgarap, "nbody": nbody,
    "nnmatfac": nnmatfac, "logreg": logreg, "matfac": matfac, "masked": masked,
    "trace_diag": trace_diag, "row_col": row_col, "skip_one": skip_one, "dead_code": dead_code,
    "maxpool": maxpool, "attention": attention, "huber": huber,
    "embag": embag, "gnn": gnn, "laplace": laplace, "dirichlet": dirichlet,
    "upsample": upsample, "upsample_loss": upsample_loss, "fourier_fit": fourier_fit,
}
