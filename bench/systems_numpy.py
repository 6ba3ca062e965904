"""The "numpy" column: forward functions written by hand in vectorised numpy, and their
derivatives derived by hand (no AD).  These are also the reference the other systems'
derivatives are checked against (tests/test_bench.py checks them against finite differences).

Every derivative returns what the tensorlang derived function returns (SPEC 2.5): `grad` the
gradient (a tuple for several inputs), `hessian` the materialised Hessian with shape X + X,
`jvp` (y, dy), `vjp` (y, d_x...), `hvp` H v, `jtjv` the tuple J^T J v.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

Args = dict[str, Any]

NAME = "numpy"
MEM_METHOD = "tracemalloc"


def available() -> tuple[bool, str]:
    return True, np.__version__


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-t))


# -- qform, qform2 -----------------------------------------------------------------------------

def qform(a: Args) -> float:
    return float(a["x"] @ (a["A"] @ a["x"]))


def qform_grad(a: Args) -> np.ndarray:
    A, x = a["A"], a["x"]
    return A @ x + A.T @ x


def qform_hessian(a: Args) -> np.ndarray:
    return a["A"] + a["A"].T


def qform2(a: Args) -> float:
    # x^T (A^T A) x = |A x|^2: O(N^2), the form the simplifier has to find.
    Ax = a["A"] @ a["x"]
    return float(Ax @ Ax)


def qform2_jvp(a: Args) -> tuple[float, float]:
    Ax = a["A"] @ a["x"]
    return float(Ax @ Ax), float(2.0 * Ax @ (a["d_A"] @ a["x"]))


# -- conv, deconv_loss -------------------------------------------------------------------------

def conv(a: Args) -> np.ndarray:
    return np.correlate(a["x"], a["w"], mode="valid")


def conv_vjp(a: Args) -> tuple[np.ndarray, np.ndarray]:
    # The adjoint of a correlation with w is a (full) convolution with w.
    return conv(a), np.convolve(a["d_y"], a["w"])


def deconv_loss(a: Args) -> float:
    r = conv(a) - a["b"]
    return float(r @ r)


def deconv_grad(a: Args) -> np.ndarray:
    return 2.0 * np.convolve(conv(a) - a["b"], a["w"])


# -- imgarap -----------------------------------------------------------------------------------
# Channel k of the residual: (field, axis, towards +1?, coefficient of cos T, of sin T).
# Residual on its valid region R_k: F[here] - F[there] + ac * cos T[here] + as * sin T[here],
# where `there` is `here` shifted one pixel along the axis (examples/imgarap.tl).
ARAP_CHANNELS: tuple[tuple[str, int, bool, float, float], ...] = (
    ("U", 0, True, 1.0, 0.0), ("V", 0, True, 0.0, 1.0),
    ("U", 1, True, 0.0, -1.0), ("V", 1, True, 1.0, 0.0),
    ("U", 0, False, -1.0, 0.0), ("V", 0, False, 0.0, -1.0),
    ("U", 1, False, 0.0, 1.0), ("V", 1, False, -1.0, 0.0),
)


def arap_slices(axis: int, forward: bool) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """(here, there): the valid region of a channel and its neighbours."""
    lo, hi = slice(None, -1), slice(1, None)
    here, there = (lo, hi) if forward else (hi, lo)
    full = slice(None)
    return ((here, full), (there, full)) if axis == 0 else ((full, here), (full, there))


def _arap_channel(a: Args, k: int, c: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, tuple]:
    f, axis, fwd, ac, as_ = ARAP_CHANNELS[k]
    here, there = arap_slices(axis, fwd)
    F = a[f]
    return F[here] - F[there] + ac * c[here] + as_ * s[here], here


def arap_residuals(a: Args) -> np.ndarray:
    U = a["U"]
    c, s = np.cos(a["T"]), np.sin(a["T"])
    r = np.zeros(U.shape + (8,))
    for k in range(8):
        rk, here = _arap_channel(a, k, c, s)
        r[here + (k,)] = rk
    return r


def imgarap(a: Args) -> float:
    c, s = np.cos(a["T"]), np.sin(a["T"])
    return float(sum(np.sum(rk * rk) for rk, _ in (_arap_channel(a, k, c, s) for k in range(8))))


def _arap_transpose(a: Args, ws: list[np.ndarray], c: np.ndarray,
                    s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """J^T applied to per-channel residual cotangents `ws` (each on its valid region)."""
    g = {"U": np.zeros_like(a["U"]), "V": np.zeros_like(a["V"])}
    gT = np.zeros_like(a["T"])
    for k, w in enumerate(ws):
        f, axis, fwd, ac, as_ = ARAP_CHANNELS[k]
        here, there = arap_slices(axis, fwd)
        g[f][here] += w
        g[f][there] -= w
        gT[here] += w * (as_ * c[here] - ac * s[here])
    return g["U"], g["V"], gT


def imgarap_grad(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, s = np.cos(a["T"]), np.sin(a["T"])
    return _arap_transpose(a, [2.0 * _arap_channel(a, k, c, s)[0] for k in range(8)], c, s)


def arap_jtjv(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, s = np.cos(a["T"]), np.sin(a["T"])
    dT = a["d_T"]
    jv = []
    for k, (f, axis, fwd, ac, as_) in enumerate(ARAP_CHANNELS):
        here, there = arap_slices(axis, fwd)
        dF = a["d_" + f]
        jv.append(dF[here] - dF[there] + (as_ * c[here] - ac * s[here]) * dT[here])
    return _arap_transpose(a, jv, c, s)


def arap_gn(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `arap_gn` workload: J^T J v with the direction named dU, dV, dT."""
    return arap_jtjv({**a, "d_U": a["dU"], "d_V": a["dV"], "d_T": a["dT"]})


# -- nbody -------------------------------------------------------------------------------------

def _nbody_pairs(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    P, m = a["P"], a["m"]
    D = P[:, None, :] - P[None, :, :]                   # D[i, j] = P_i - P_j
    q = np.einsum("ijc,ijc->ij", D, D) + 0.01
    mm = m[:, None] * m[None, :]
    np.fill_diagonal(mm, 0.0)                           # no self-interaction
    return D, q, mm, q ** -0.5


def nbody(a: Args) -> float:
    _, _, mm, rq = _nbody_pairs(a)
    return float(-0.5 * np.sum(mm * rq))                # each pair i < j once


def nbody_grad(a: Args) -> np.ndarray:
    D, q, mm, rq = _nbody_pairs(a)
    G = mm * rq / q                                     # m_i m_j q^{-3/2}
    return np.einsum("ij,ijc->ic", G, D)


def nbody_hvp(a: Args) -> np.ndarray:
    # Pair term phi(|D|^2), phi = -m_i m_j (. + eps)^{-1/2}: grad_i = sum_j 2 phi' D_ij and
    # its derivative along v is sum_j 2 phi' dD_ij + 4 phi'' (D_ij . dD_ij) D_ij.
    D, q, mm, rq = _nbody_pairs(a)
    v = a["v"]
    dD = v[:, None, :] - v[None, :, :]
    two_d1 = mm * rq / q                                # 2 phi'
    four_d2 = -3.0 * mm * rq / (q * q)                  # 4 phi''
    proj = np.einsum("ijc,ijc->ij", D, dD)
    return np.einsum("ij,ijc->ic", two_d1, dD) + np.einsum("ij,ijc->ic", four_d2 * proj, D)


# -- nnmatfac, logreg, matfac, masked ----------------------------------------------------------

def nnmatfac(a: Args) -> float:
    WH = a["W"] @ a["H"]
    return float(np.sum(np.log(WH) + a["A"] / WH))


def nnmatfac_grad(a: Args) -> tuple[np.ndarray, np.ndarray]:
    WH = a["W"] @ a["H"]
    G = 1.0 / WH - a["A"] / (WH * WH)
    return G @ a["H"].T, a["W"].T @ G


def logreg(a: Args) -> float:
    z = a["X"] @ a["w"]
    return float(np.sum(np.log(np.exp(-a["y"] * z) + 1.0)))


def logreg_grad(a: Args) -> np.ndarray:
    y = a["y"]
    sig = _sigmoid(-y * (a["X"] @ a["w"]))
    return a["X"].T @ (-y * sig)


def logreg_hessian(a: Args) -> np.ndarray:
    X, y = a["X"], a["y"]
    sig = _sigmoid(-y * (X @ a["w"]))
    h = y * y * sig * (1.0 - sig)
    return X.T @ (h[:, None] * X)


def _matfac_res(a: Args) -> np.ndarray:
    return np.where(a["Om"], a["T"] - a["U"] @ a["V"].T, 0.0)


def matfac(a: Args) -> float:
    R = _matfac_res(a)
    return float(np.sum(R * R))


def matfac_grad(a: Args) -> np.ndarray:
    return -2.0 * _matfac_res(a) @ a["V"]


def matfac_hessian(a: Args) -> np.ndarray:
    # H[i, k, i', l] = 2 [i == i'] sum_j Om[i, j] V[j, k] V[j, l]: block diagonal in i.
    Om, V = np.asarray(a["Om"], dtype=float), a["V"]
    N, K = a["U"].shape
    B = np.einsum("ij,jk,jl->ikl", Om, V, V)
    H = np.zeros((N, K, N, K))
    ar = np.arange(N)
    H[ar, :, ar, :] = 2.0 * B
    return H


def _offdiag(E: np.ndarray) -> np.ndarray:
    E = np.array(E, dtype=bool)
    np.fill_diagonal(E, False)
    return E


def masked(a: Args) -> float:
    return float(np.sum(np.where(_offdiag(a["E"]), a["A"] ** 2, 0.0)))


def masked_grad(a: Args) -> np.ndarray:
    return np.where(_offdiag(a["E"]), 2.0 * a["A"], 0.0)


# -- pathological (seed 002) -------------------------------------------------------------------

def trace_diag(a: Args) -> float:
    return float(np.trace(np.diag(a["x"])))


def trace_diag_grad(a: Args) -> np.ndarray:
    return np.ones_like(a["x"])


def row_col(a: Args) -> float:
    X = a["X"]
    return float(X[:, 0] @ X[0, :]) if X.size else 0.0


def row_col_grad(a: Args) -> np.ndarray:
    X = a["X"]
    G = np.zeros_like(X)
    if X.size:
        G[:, 0] += X[0, :]
        G[0, :] += X[:, 0]
    return G


def skip_one(a: Args) -> float:
    return float(np.sum(a["x"][1:]))


def skip_one_grad(a: Args) -> np.ndarray:
    g = np.ones_like(a["x"])
    g[:1] = 0.0
    return g


def dead_code(a: Args) -> float:
    return float(a["x"] @ a["x"])


def dead_code_grad(a: Args) -> np.ndarray:
    return 2.0 * a["x"]


# -- SPEC 12: max-pool, softmax attention, Huber loss ------------------------------------------

def maxpool(a: Args) -> float:
    X = a["X"]
    P = X.reshape(X.shape[0] // 2, 2, X.shape[1] // 2, 2).max(axis=(1, 3))
    return float(np.sum(P * P))


def maxpool_grad(a: Args) -> np.ndarray:
    """Tied maximisers share the derivative equally (JAX's convention, SPEC 12)."""
    X = a["X"]
    W = X.reshape(X.shape[0] // 2, 2, X.shape[1] // 2, 2)
    P = W.max(axis=(1, 3), keepdims=True)
    hit = (W == P).astype(np.float64)
    G = hit * (2.0 * P / hit.sum(axis=(1, 3), keepdims=True))
    return G.reshape(X.shape)


def _attention_parts(a: Args) -> tuple[np.ndarray, np.ndarray]:
    S = a["Q"] @ a["K"].T
    E = np.exp(S - S.max(axis=1, keepdims=True))
    A = E / E.sum(axis=1, keepdims=True)
    return A, A @ a["V"]


def attention(a: Args) -> float:
    if a["Q"].shape[0] == 0:
        return 0.0
    _, O = _attention_parts(a)
    return float(np.sum(O * O))


def attention_grad(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dO = 2 O; dV = A^T dO; dS = A * (dA - rowsum(dA * A)) with dA = dO V^T (the row
    maximum cancels); dQ = dS K, dK = dS^T Q."""
    A, O = _attention_parts(a)
    dO = 2.0 * O
    dA = dO @ a["V"].T
    dS = A * (dA - np.sum(dA * A, axis=1, keepdims=True))
    return dS @ a["K"], dS.T @ a["Q"], A.T @ dO


def huber(a: Args) -> float:
    r = a["X"] @ a["w"] - a["y"]
    return float(np.sum(np.where(np.abs(r) <= 1.0, 0.5 * r * r, np.abs(r) - 0.5)))


def huber_grad(a: Args) -> np.ndarray:
    r = a["X"] @ a["w"] - a["y"]
    return a["X"].T @ np.where(np.abs(r) <= 1.0, r, np.sign(r))


# -- index arrays and quasi-affine indices (SPEC 12) -------------------------------------------

def embag(a: Args) -> float:
    r = a["E"][a["tok"]].sum(axis=1) @ a["w"] - a["y"]
    return float(r @ r)


def embag_grad(a: Args) -> tuple[np.ndarray, np.ndarray]:
    h = a["E"][a["tok"]].sum(axis=1)
    r = h @ a["w"] - a["y"]
    dE = np.zeros_like(a["E"])
    rows = np.broadcast_to((2.0 * r)[:, None, None] * a["w"][None, None, :],
                           a["tok"].shape + a["w"].shape)
    np.add.at(dE, a["tok"], rows)
    return dE, 2.0 * h.T @ r


def _gnn_parts(a: Args) -> tuple[np.ndarray, np.ndarray]:
    agg = np.zeros_like(a["X"])
    np.add.at(agg, a["dst"], a["X"][a["src"]] @ a["W"])
    return agg, np.tanh(agg)


def gnn(a: Args) -> float:
    return float(np.sum((_gnn_parts(a)[1] - a["T"]) ** 2))


def gnn_grad(a: Args) -> tuple[np.ndarray, np.ndarray]:
    _, h = _gnn_parts(a)
    dmsg = (2.0 * (h - a["T"]) * (1.0 - h * h))[a["dst"]]
    dX = np.zeros_like(a["X"])
    np.add.at(dX, a["src"], dmsg @ a["W"].T)
    return dX, a["X"][a["src"]].T @ dmsg


def _laplace(u: np.ndarray) -> np.ndarray:
    return (np.roll(u, -1, 0) + np.roll(u, 1, 0) + np.roll(u, -1, 1) + np.roll(u, 1, 1)
            - 4.0 * u)


def laplace(a: Args) -> np.ndarray:
    return _laplace(a["u"])


def laplace_vjp(a: Args) -> tuple[np.ndarray, np.ndarray]:
    return _laplace(a["u"]), _laplace(a["d_y"])  # the periodic Laplacian is symmetric


def dirichlet(a: Args) -> float:
    return float(-0.5 * np.sum(a["u"] * _laplace(a["u"])))


def dirichlet_grad(a: Args) -> np.ndarray:
    return -_laplace(a["u"])


def _up(x: np.ndarray) -> np.ndarray:
    return np.kron(x, np.ones((2, 2)))


def _block_sum(y: np.ndarray) -> np.ndarray:
    return y.reshape(y.shape[0] // 2, 2, y.shape[1] // 2, 2).sum(axis=(1, 3))


def upsample(a: Args) -> np.ndarray:
    return _up(a["x"]) * a["s"]


def upsample_vjp(a: Args) -> tuple[np.ndarray, np.ndarray]:
    return _up(a["x"]) * a["s"], _block_sum(a["d_y"] * a["s"])


def upsample_loss(a: Args) -> float:
    return float(np.sum((_up(a["x"]) * a["s"] - a["t"]) ** 2))


def upsample_grad(a: Args) -> tuple[np.ndarray, np.ndarray]:
    r = 2.0 * (_up(a["x"]) * a["s"] - a["t"])
    return _block_sum(r * a["s"]), r * _up(a["x"])


# -- indices as values (SPEC 12) ---------------------------------------------------------------

def _fourier_parts(a: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cosine basis, the residuals and the position weights."""
    n = a["t"].shape[0]
    basis = np.cos(np.outer(a["t"], np.arange(a["c"].shape[0])))
    return basis, basis @ a["c"] - a["y"], (np.arange(n) + 1.0) / n


def fourier_fit(a: Args) -> float:
    _, r, w = _fourier_parts(a)
    return float(np.sum(w * r * r))


def fourier_fit_grad(a: Args) -> np.ndarray:
    basis, r, w = _fourier_parts(a)
    return basis.T @ (2.0 * w * r)


FORWARD: dict[str, Callable[[Args], Any]] = {
    "qform": qform, "qform_sum": qform, "qform2": qform2, "conv": conv,
    "deconv_loss": deconv_loss,
    "arap_residuals": arap_residuals, "imgarap": imgarap, "arap_gn": arap_gn, "nbody": nbody,
    "nnmatfac": nnmatfac, "logreg": logreg, "matfac": matfac, "masked": masked,
    "trace_diag": trace_diag, "row_col": row_col, "skip_one": skip_one, "dead_code": dead_code,
    "maxpool": maxpool, "attention": attention, "huber": huber,
    "embag": embag, "gnn": gnn, "laplace": laplace, "dirichlet": dirichlet,
    "upsample": upsample, "upsample_loss": upsample_loss, "fourier_fit": fourier_fit,
}

DERIVATIVES: dict[tuple[str, str], Callable[[Args], Any]] = {
    ("qform", "grad"): qform_grad, ("qform", "hessian"): qform_hessian,
    ("qform_sum", "grad"): qform_grad, ("qform2", "jvp"): qform2_jvp,
    ("conv", "vjp"): conv_vjp, ("deconv_loss", "grad"): deconv_grad,
    ("arap_residuals", "jtjv"): arap_jtjv, ("imgarap", "grad"): imgarap_grad,
    ("nbody", "grad"): nbody_grad, ("nbody", "hvp"): nbody_hvp,
    ("nnmatfac", "grad"): nnmatfac_grad,
    ("logreg", "grad"): logreg_grad, ("logreg", "hessian"): logreg_hessian,
    ("matfac", "grad"): matfac_grad, ("matfac", "hessian"): matfac_hessian,
    ("masked", "grad"): masked_grad,
    ("trace_diag", "grad"): trace_diag_grad, ("row_col", "grad"): row_col_grad,
    ("skip_one", "grad"): skip_one_grad, ("dead_code", "grad"): dead_code_grad,
    ("maxpool", "grad"): maxpool_grad, ("attention", "grad"): attention_grad,
    ("huber", "grad"): huber_grad,
    ("embag", "grad"): embag_grad, ("gnn", "grad"): gnn_grad, ("laplace", "vjp"): laplace_vjp,
    ("dirichlet", "grad"): dirichlet_grad, ("upsample", "vjp"): upsample_vjp,
    ("upsample_loss", "grad"): upsample_grad, ("fourier_fit", "grad"): fourier_fit_grad,
}


class System:
    """Hand-written numpy: each callable runs on the argument dict as given."""

    name = NAME
    mem_method = MEM_METHOD

    def version(self) -> str:
        return np.__version__

    def forward(self, task: Any, args: Args) -> Callable[[], Any]:
        fn = FORWARD.get(task.name)
        if fn is None:
            raise NotImplementedError(f"no numpy forward for {task.name}")
        return lambda: fn(args)

    def derivative(self, task: Any, d: Any, args: Args) -> Callable[[], Any]:
        fn = DERIVATIVES.get((task.name, d.key))
        if fn is None:
            raise NotImplementedError(f"no numpy {d.label} for {task.name}")
        return lambda: fn(args)
