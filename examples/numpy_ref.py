"""Independent numpy implementations of every forward function in examples/.

Used by the example tests (the interpreter must agree with these) and by the benchmark suite
(the "numpy" column).  Each workload knows its file, its function, how its sizes follow from
one problem size N, and how to draw inputs on which it is well defined.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Args = dict[str, Any]


@dataclass(frozen=True)
class Workload:
    name: str
    file: str                                   # relative to examples/
    func: str
    sizes: Callable[[int], dict[str, int]]      # problem size N -> size arguments
    inputs: Callable[[dict[str, int], np.random.Generator], Args]
    ref: Callable[[Args], Any]


def _u(rng: np.random.Generator, *shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape)


def qform(a: Args) -> float:
    return float(a["x"] @ a["A"] @ a["x"])


def qform2(a: Args) -> float:
    B = a["A"].T @ a["A"]
    return float(a["x"] @ B @ a["x"])


def conv(a: Args) -> np.ndarray:
    N, K = a["N"], a["K"]
    return np.array([a["w"] @ a["x"][i:i + K] for i in range(N)], dtype=float).reshape(N)


def deconv_loss(a: Args) -> float:
    r = conv(a) - a["b"]
    return float(r @ r)


def _arap_residuals(U: np.ndarray, V: np.ndarray, T: np.ndarray) -> np.ndarray:
    W, H = U.shape
    c, s = np.cos(T), np.sin(T)
    r = np.zeros((W, H, 8))
    # neighbour q = p + (di, dj); rest offset p0 - q0 = (-di, -dj); residual = (p - q) - R (p0 - q0)
    for d, (di, dj) in enumerate([(1, 0), (0, 1), (-1, 0), (0, -1)]):
        ox, oy = -di, -dj
        for i in range(W):
            for j in range(H):
                qi, qj = i + di, j + dj
                if 0 <= qi < W and 0 <= qj < H:
                    r[i, j, 2 * d] = U[i, j] - U[qi, qj] - (c[i, j] * ox - s[i, j] * oy)
                    r[i, j, 2 * d + 1] = V[i, j] - V[qi, qj] - (s[i, j] * ox + c[i, j] * oy)
    return r


_NEIGHBOURS = [(1, 0), (0, 1), (-1, 0), (0, -1)]


def arap_gn(a: Args) -> tuple:
    """J^T J v for the residuals, with J written out by hand: r[p, 2d + c] =
    X_c[p] - X_c[q] - rot_c(T[p]) (X_0 = U, X_1 = V, q = p + neighbour d)."""
    U, T = a["U"], a["T"]
    W, H = U.shape
    c, s = np.cos(T), np.sin(T)
    dX, dT = (a["dU"], a["dV"]), a["dT"]
    out = [np.zeros((W, H)), np.zeros((W, H)), np.zeros((W, H))]
    for di, dj in _NEIGHBOURS:
        ox, oy = -di, -dj
        drot = (-s * ox - c * oy, c * ox - s * oy)   # d rot_c / dT
        for ch in range(2):
            for i in range(W):
                for j in range(H):
                    qi, qj = i + di, j + dj
                    if not (0 <= qi < W and 0 <= qj < H):
                        continue
                    jv = dX[ch][i, j] - dX[ch][qi, qj] - drot[ch][i, j] * dT[i, j]
                    out[ch][i, j] += jv
                    out[ch][qi, qj] -= jv
                    out[2][i, j] -= drot[ch][i, j] * jv
    return (out[0], (out[1], out[2]))


def arap_residuals(a: Args) -> np.ndarray:
    return _arap_residuals(a["U"], a["V"], a["T"])


def imgarap(a: Args) -> float:
    r = _arap_residuals(a["U"], a["V"], a["T"])
    return float(np.sum(r * r))


def nbody(a: Args) -> float:
    P, m = a["P"], a["m"]
    diff = P[:, None, :] - P[None, :, :]
    d2 = np.sum(diff * diff, axis=-1)
    iu = np.triu_indices(len(m), k=1)
    return float(-np.sum(m[iu[0]] * m[iu[1]] / np.sqrt(d2[iu] + 0.01)))


def nnmatfac(a: Args) -> float:
    WH = a["W"] @ a["H"]
    return float(np.sum(np.log(WH) + a["A"] / WH))


def logreg(a: Args) -> float:
    z = a["X"] @ a["w"]
    return float(np.sum(np.log(np.exp(-a["y"] * z) + 1.0)))


def matfac(a: Args) -> float:
    R = a["T"] - a["U"] @ a["V"].T
    return float(np.sum(np.where(a["Om"], R * R, 0.0)))


def masked(a: Args) -> float:
    E = a["E"].copy()
    np.fill_diagonal(E, False)
    return float(np.sum(np.where(E, a["A"] ** 2, 0.0)))


def trace_diag(a: Args) -> float:
    return float(np.trace(np.diag(a["x"])))


def row_col(a: Args) -> float:
    X = a["X"]
    return float(X[:, 0] @ X[0, :]) if X.size else 0.0


def skip_one(a: Args) -> float:
    return float(np.sum(a["x"][1:]))


def dead_code(a: Args) -> float:
    return float(a["x"] @ a["x"])


def maxpool(a: Args) -> float:
    X = a["X"]
    h, w = X.shape[0] // 2, X.shape[1] // 2
    P = X.reshape(h, 2, w, 2).max(axis=(1, 3))
    return float(np.sum(P * P))


def attention(a: Args) -> float:
    S = a["Q"] @ a["K"].T
    if S.size == 0:
        return 0.0
    E = np.exp(S - S.max(axis=1, keepdims=True))
    O = (E @ a["V"]) / E.sum(axis=1, keepdims=True)
    return float(np.sum(O * O))


def huber(a: Args) -> float:
    r = a["X"] @ a["w"] - a["y"]
    return float(np.sum(np.where(np.abs(r) <= 1.0, 0.5 * r * r, np.abs(r) - 0.5)))


def embag(a: Args) -> float:
    h = a["E"][a["tok"]].sum(axis=1)            # (B, K, D) -> (B, D)
    r = h @ a["w"] - a["y"]
    return float(r @ r)


def gnn(a: Args) -> float:
    msg = a["X"][a["src"]] @ a["W"]              # one message per edge
    agg = np.zeros_like(a["X"])
    np.add.at(agg, a["dst"], msg)                # node v sums its in-edges' messages
    return float(np.sum((np.tanh(agg) - a["T"]) ** 2))


def laplace(a: Args) -> np.ndarray:
    u = a["u"]
    return (np.roll(u, -1, 0) + np.roll(u, 1, 0) + np.roll(u, -1, 1) + np.roll(u, 1, 1)
            - 4.0 * u)


def dirichlet(a: Args) -> float:
    return float(-0.5 * np.sum(a["u"] * laplace(a)))


def upsample(a: Args) -> np.ndarray:
    return np.kron(a["x"], np.ones((2, 2))) * a["s"]


def upsample_loss(a: Args) -> float:
    return float(np.sum((upsample(a) - a["t"]) ** 2))


def _fourier_basis(t: np.ndarray, K: int) -> np.ndarray:
    return np.cos(np.outer(t, np.arange(K)))


def fourier_fit(a: Args) -> float:
    N = a["t"].shape[0]
    r = _fourier_basis(a["t"], a["c"].shape[0]) @ a["c"] - a["y"]
    return float(np.sum((np.arange(N) + 1.0) / N * r * r))


def _vec_mat(N: int, rng: np.random.Generator) -> Args:
    return {"N": N, "x": _u(rng, N), "A": _u(rng, N, N)}


def _conv_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    N, K = s["N"], s["K"]
    return {"N": N, "K": K, "x": _u(rng, N + K - 1), "w": _u(rng, K), "b": _u(rng, N)}


def _arap_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    W, H = s["W"], s["H"]
    gi, gj = np.meshgrid(np.arange(W, dtype=float), np.arange(H, dtype=float), indexing="ij")
    return {"W": W, "H": H, "U": gi + 0.1 * _u(rng, W, H), "V": gj + 0.1 * _u(rng, W, H),
            "T": 0.3 * _u(rng, W, H)}


def _arap_gn_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    W, H = s["W"], s["H"]
    return {**_arap_inputs(s, rng), "dU": _u(rng, W, H), "dV": _u(rng, W, H),
            "dT": _u(rng, W, H)}


def _nnmf_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    N, M, K = s["N"], s["M"], s["K"]
    return {**s, "A": _u(rng, N, M, lo=0.1, hi=1.0), "W": _u(rng, N, K, lo=0.1, hi=1.0),
            "H": _u(rng, K, M, lo=0.1, hi=1.0)}


def _logreg_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    M, N = s["M"], s["N"]
    return {**s, "X": _u(rng, M, N), "y": np.sign(_u(rng, M)) + 0.0, "w": _u(rng, N)}


def _matfac_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    N, M, K = s["N"], s["M"], s["K"]
    return {**s, "Om": rng.random((N, M)) < 0.3, "T": _u(rng, N, M), "U": _u(rng, N, K),
            "V": _u(rng, M, K)}


def _embag_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    B, K, V, D = s["B"], s["K"], s["V"], s["D"]
    return {**s, "tok": rng.integers(0, V, size=(B, K)), "E": _u(rng, V, D), "w": _u(rng, D),
            "y": _u(rng, B)}


def _gnn_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    V, M, D = s["V"], s["M"], s["D"]
    return {**s, "src": rng.integers(0, V, size=M), "dst": rng.integers(0, V, size=M),
            "X": _u(rng, V, D), "W": 0.5 * _u(rng, D, D), "T": _u(rng, V, D)}


def _upsample_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    N, M = s["N"], s["M"]
    return {**s, "x": _u(rng, N, M), "s": _u(rng, 2 * N, 2 * M), "t": _u(rng, 2 * N, 2 * M)}


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("qform", "qform.tl", "qform", lambda n: {"N": n},
             lambda s, r: _vec_mat(s["N"], r), qform),
    Workload("qform_sum", "qform_sum.tl", "qform_sum", lambda n: {"N": n},
             lambda s, r: _vec_mat(s["N"], r), qform),
    Workload("qform2", "qform2.tl", "qform2", lambda n: {"N": n},
             lambda s, r: _vec_mat(s["N"], r), qform2),
    Workload("conv", "conv.tl", "conv", lambda n: {"N": n, "K": 5},
             lambda s, r: {k: v for k, v in _conv_inputs(s, r).items() if k != "b"}, conv),
    Workload("deconv_loss", "conv.tl", "deconv_loss", lambda n: {"N": n, "K": 5},
             _conv_inputs, deconv_loss),
    Workload("arap_residuals", "imgarap.tl", "arap_residuals",
             lambda n: {"W": n, "H": n}, _arap_inputs, arap_residuals),
    Workload("imgarap", "imgarap.tl", "imgarap", lambda n: {"W": n, "H": n},
             _arap_inputs, imgarap),
    Workload("arap_gn", "imgarap.tl", "arap_gn", lambda n: {"W": n, "H": n},
             _arap_gn_inputs, arap_gn),
    Workload("nbody", "nbody.tl", "nbody", lambda n: {"N": n},
             lambda s, r: {"N": s["N"], "P": _u(r, s["N"], 3), "m": _u(r, s["N"], lo=0.5, hi=1.5)},
             nbody),
    Workload("nnmatfac", "nnmatfac.tl", "nnmatfac", lambda n: {"N": n, "M": n, "K": 5},
             _nnmf_inputs, nnmatfac),
    Workload("logreg", "logreg.tl", "logreg", lambda n: {"M": 2 * n, "N": n},
             _logreg_inputs, logreg),
    Workload("matfac", "matfac.tl", "matfac", lambda n: {"N": n, "M": n, "K": 5},
             _matfac_inputs, matfac),
    Workload("masked", "masked.tl", "masked", lambda n: {"N": n},
             lambda s, r: {"N": s["N"], "E": r.random((s["N"], s["N"])) < 0.2,
                           "A": _u(r, s["N"], s["N"])}, masked),
    Workload("embag", "embedding.tl", "embag", lambda n: {"B": n, "K": 8, "V": n, "D": 16},
             _embag_inputs, embag),
    Workload("gnn", "embedding.tl", "gnn", lambda n: {"V": n, "M": 4 * n, "D": 8},
             _gnn_inputs, gnn),
    Workload("laplace", "stencil.tl", "laplace", lambda n: {"N": n, "M": n},
             lambda s, r: {**s, "u": _u(r, s["N"], s["M"])}, laplace),
    Workload("dirichlet", "stencil.tl", "dirichlet", lambda n: {"N": n, "M": n},
             lambda s, r: {**s, "u": _u(r, s["N"], s["M"])}, dirichlet),
    Workload("upsample", "stencil.tl", "upsample", lambda n: {"N": n, "M": 8},
             lambda s, r: {k: v for k, v in _upsample_inputs(s, r).items() if k != "t"},
             upsample),
    Workload("upsample_loss", "stencil.tl", "upsample_loss", lambda n: {"N": n, "M": 8},
             _upsample_inputs, upsample_loss),
    Workload("trace_diag", "pathological.tl", "trace_diag", lambda n: {"N": n},
             lambda s, r: {"N": s["N"], "x": _u(r, s["N"])}, trace_diag),
    Workload("row_col", "pathological.tl", "row_col", lambda n: {"N": n},
             lambda s, r: {"N": s["N"], "X": _u(r, s["N"], s["N"])}, row_col),
    Workload("skip_one", "pathological.tl", "skip_one", lambda n: {"N": n},
             lambda s, r: {"N": s["N"], "x": _u(r, s["N"])}, skip_one),
    Workload("dead_code", "pathological.tl", "dead_code", lambda n: {"N": n},
             lambda s, r: _vec_mat(s["N"], r), dead_code),
    Workload("maxpool", "maxpool.tl", "maxpool", lambda n: {"H": n, "W": n},
             lambda s, r: {"H": s["H"], "W": s["W"], "X": _u(r, 2 * s["H"], 2 * s["W"])},
             maxpool),
    Workload("attention", "attention.tl", "attention", lambda n: {"N": n, "D": 4},
             lambda s, r: {"N": s["N"], "D": s["D"], **{k: _u(r, s["N"], s["D"])
                                                         for k in "QKV"}}, attention),
    Workload("huber", "piecewise.tl", "huber", lambda n: {"N": 2 * n, "M": n},
             lambda s, r: {"N": s["N"], "M": s["M"], "X": _u(r, s["N"], s["M"]),
                           "w": _u(r, s["M"], lo=-2.0, hi=2.0), "y": _u(r, s["N"])}, huber),
    Workload("fourier_fit", "positional.tl", "fourier_fit", lambda n: {"N": n, "K": 8},
             lambda s, r: {**s, "t": _u(r, s["N"], lo=0.0, hi=3.0), "c": _u(r, s["K"]),
                           "y": _u(r, s["N"])}, fourier_fit),
]}


# ---------------------------------------------------------------------------------------------
# Linear algebra (SPEC 13, seed 003): examples/gp_nlml.tl, blr_evidence.tl, kalman_loglik.tl,
# eigh_gauss.tl.  `LINALG_WORKLOADS` (the numpy/scipy references; tests/test_linalg.py and
# bench/linalg.py compare them, and JAX, with tensorlang).

_HALF_LOG_2PI = 0.9189385332046727


def _chol_solve_terms(S: np.ndarray, v: np.ndarray) -> float:
    from scipy.linalg import solve_triangular

    L = np.linalg.cholesky(S)
    z = solve_triangular(L, v, lower=True)
    return 0.5 * z @ z + np.log(np.abs(np.diag(L))).sum() + len(v) * _HALF_LOG_2PI


def gp_nlml(a: Args) -> float:
    X = a["X"]
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    K = a["sf2"] * np.exp(-0.5 * d2 / a["ell"] ** 2) + a["sn2"] * np.eye(len(X))
    return _chol_solve_terms(K, a["y"])


def blr_evidence(a: Args) -> float:
    from scipy.linalg import solve_triangular

    X, y, lam_y, lam_w = a["X"], a["y"], a["lam_y"], a["lam_w"]
    alpha = lam_w / lam_y
    L = np.linalg.cholesky(np.eye(len(X)) + alpha * X @ X.T)
    z = solve_triangular(L, X @ y, lower=True)
    n = len(y)
    return (np.log(np.abs(np.diag(L))).sum()
            + 0.5 * (n * (2 * _HALF_LOG_2PI + np.log(lam_y)) + (y @ y - alpha * z @ z) / lam_y))


def kalman_nll(a: Args) -> float:
    """The Kalman filter's recursion (prediction-error decomposition), step by step."""
    v, ar, q, r, p0 = a["obs"], a["a"], a["q"], a["r"], a["p0"]
    m, p, out = 0.0, p0, 0.0
    for t, vt in enumerate(v):
        if t > 0:
            m, p = ar * m, ar * ar * p + q
        s = p + r
        e = vt - m
        out += 0.5 * (np.log(s) + e * e / s) + _HALF_LOG_2PI
        k = p / s
        m, p = m + k * e, (1 - k) * p
    return out


def eigh_nll(a: Args) -> float:
    w, V = np.linalg.eigh(a["A"])
    u = V.T @ a["y"]
    return 0.5 * (np.log(w).sum() + (u * u / w).sum()) + len(w) * _HALF_LOG_2PI


def _gp_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    return {"N": s["N"], "D": s["D"], "X": rng.standard_normal((s["N"], s["D"])),
            "y": rng.standard_normal(s["N"]), "ell": 1.7, "sf2": 0.9, "sn2": 0.3}


def _blr_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    return {"D": s["D"], "N": s["N"], "X": rng.standard_normal((s["D"], s["N"])) / np.sqrt(s["N"]),
            "y": rng.standard_normal(s["N"]), "lam_y": 0.6, "lam_w": 1.4}


def _kalman_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    return {"T": s["T"], "obs": rng.standard_normal(s["T"]), "a": 0.8, "q": 0.5, "r": 0.7,
            "p0": 1.2}


def _spd_inputs(s: dict[str, int], rng: np.random.Generator) -> Args:
    n = s["N"]
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.linspace(1.0, 3.0, n) + 0.1 * rng.random(n)
    return {"N": n, "A": (Q * w) @ Q.T, "y": rng.standard_normal(n)}


LINALG_WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("gp_nlml", "linalg/gp_nlml.tl", "gp_nlml", lambda n: {"N": n, "D": 3}, _gp_inputs,
             gp_nlml),
    Workload("blr_chol", "linalg/blr_evidence.tl", "blr_chol", lambda n: {"D": n, "N": 2 * n},
             _blr_inputs, blr_evidence),
    Workload("blr_lq", "linalg/blr_evidence.tl", "blr_lq", lambda n: {"D": n, "N": 2 * n},
             _blr_inputs, blr_evidence),
    Workload("kalman_nll", "linalg/kalman_loglik.tl", "kalman_nll", lambda n: {"T": n},
             _kalman_inputs, kalman_nll),
    Workload("eigh_nll", "linalg/eigh_gauss.tl", "eigh_nll", lambda n: {"N": n}, _spd_inputs,
             eigh_nll),
]}
