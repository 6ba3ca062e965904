"""Linear-algebra workloads (SPEC 13, seed 003) against JAX, one thread each.

    NUMBA_NUM_THREADS=1 python -m bench.linalg [NAME ...] [--sizes 200,1000] [--rounds 5]

For every workload of examples/numpy_ref.py `LINALG_WORKLOADS` (GP negative log marginal
likelihood, Bayesian linear regression evidence through Cholesky and LQ, Kalman filter,
eigh Gaussian): f and its gradient (in the hyperparameters; in A for eigh) compiled by
tensorlang's Numba backend (LAPACK between kernels) and the same functions in JAX
(jax.scipy.linalg / jnp.linalg, `jax.jit`, `jax.grad`), float64.  Both run on one thread
(`NUMBA_NUM_THREADS=1`; XLA's and the BLAS's thread pools limited to one before any import,
and the process kept on one core),
timed interleaved (tensorlang, JAX, tensorlang, ...) so that a loaded machine slows both
alike; each reports the best of `--rounds` rounds after a warm-up that compiles.  The values
are checked against each other.  Ratio = tensorlang / JAX (below 1.25: within the target).
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_multi_thread_eigen=false").strip()

from bench import pin_cores  # noqa: E402

pin_cores(1)  # XLA runs big fusions on a second thread whatever its flags say

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _refs() -> Any:
    spec = importlib.util.spec_from_file_location("numpy_ref", ROOT / "examples" / "numpy_ref.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numpy_ref"] = mod
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def jax_functions() -> dict[str, tuple[Callable, tuple[str, ...], tuple[str, ...]]]:
    """name -> (JAX function, its argument names, the differentiated ones)."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    hl2p = 0.9189385332046727

    def chol_terms(S, v):
        L = jnp.linalg.cholesky(S)
        z = jsl.solve_triangular(L, v, lower=True)
        return 0.5 * z @ z + jnp.log(jnp.abs(jnp.diag(L))).sum() + v.shape[0] * hl2p

    def gp(X, y, ell, sf2, sn2):
        sq = (X * X).sum(1)
        d2 = sq[:, None] + sq[None, :] - 2 * X @ X.T
        K = sf2 * jnp.exp(-0.5 * d2 / (ell * ell)) + sn2 * jnp.eye(X.shape[0])
        return chol_terms(K, y)

    def blr_tail(L, X, y, lam_y, alpha):
        z = jsl.solve_triangular(L, X @ y, lower=True)
        n = y.shape[0]
        return (jnp.log(jnp.abs(jnp.diag(L))).sum()
                + 0.5 * (n * (2 * hl2p + jnp.log(lam_y)) + (y @ y - alpha * z @ z) / lam_y))

    def blr_chol(X, y, lam_y, lam_w):
        alpha = lam_w / lam_y
        return blr_tail(jnp.linalg.cholesky(jnp.eye(X.shape[0]) + alpha * X @ X.T), X, y,
                        lam_y, alpha)

    def blr_lq(X, y, lam_y, lam_w):
        alpha = lam_w / lam_y
        B = jnp.concatenate([jnp.eye(X.shape[0]), jnp.sqrt(alpha) * X], axis=1)
        _, r = jnp.linalg.qr(B.T)
        return blr_tail(r.T, X, y, lam_y, alpha)

    def kalman(obs, a, q, r, p0):
        T = obs.shape[0]
        D = jnp.eye(T) - a * jnp.eye(T, k=-1)
        sd = jnp.where(jnp.arange(T) == 0, jnp.sqrt(p0), jnp.sqrt(q))
        G = jsl.solve_triangular(D, jnp.diag(sd), lower=True)
        return chol_terms(G @ G.T + r * jnp.eye(T), obs)

    def eigh(A, y):
        w, V = jnp.linalg.eigh(A)
        u = V.T @ y
        return 0.5 * (jnp.log(w).sum() + (u * u / w).sum()) + w.shape[0] * hl2p

    return {"gp_nlml": (gp, ("X", "y", "ell", "sf2", "sn2"), ("ell", "sf2", "sn2")),
            "blr_chol": (blr_chol, ("X", "y", "lam_y", "lam_w"), ("lam_y", "lam_w")),
            "blr_lq": (blr_lq, ("X", "y", "lam_y", "lam_w"), ("lam_y", "lam_w")),
            "kalman_nll": (kalman, ("obs", "a", "q", "r", "p0"), ("a", "q", "r")),
            "eigh_nll": (eigh, ("A", "y"), ("A",))}


def _flat(v: Any) -> np.ndarray:
    if isinstance(v, (tuple, list)):
        return np.concatenate([_flat(x) for x in v])
    return np.asarray(v, dtype=np.float64).ravel()


def _timed(run: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def measure(name: str, n: int, rounds: int) -> dict[str, Any]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import tensorlang as tl

    refs = _refs()
    w = refs.LINALG_WORKLOADS[name]
    args = w.inputs(w.sizes(n), np.random.default_rng(n))
    fn, names, wrt = jax_functions()[name]
    f = tl.load(str(ROOT / "examples" / w.file))[w.func]
    ours = {"f": f.compile("numba"), "grad": tl.grad(f, *wrt).compile("numba")}
    jargs = [jax.device_put(np.asarray(args[k])) for k in names]
    jf = jax.jit(fn)
    jg = jax.jit(jax.grad(fn, argnums=tuple(names.index(x) for x in wrt)))
    theirs = {"f": lambda: jax.block_until_ready(jf(*jargs)),
              "grad": lambda: jax.block_until_ready(jg(*jargs))}
    mine = {k: (lambda c=c: c(**args)) for k, c in ours.items()}
    out: dict[str, Any] = {"name": name, "n": n}
    for k in ("f", "grad"):
        a, b = _flat(mine[k]()), _flat(theirs[k]())       # warm-up (compiles) and check
        err = float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))
        best_t, best_j = float("inf"), float("inf")
        for _ in range(rounds):                            # interleaved
            best_t = min(best_t, _timed(mine[k]))
            best_j = min(best_j, _timed(theirs[k]))
        out[k] = {"tensorlang_s": best_t, "jax_s": best_j, "ratio": best_t / best_j,
                  "max_rel_err": err}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.linalg", description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--sizes", default="200,1000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    names = a.names or list(jax_functions())
    rows = []
    print(f"{'workload':<12} {'n':>5} {'part':<5} {'tensorlang s':>13} {'JAX s':>10} "
          f"{'ratio':>6} {'rel err':>8}")
    for name in names:
        for n in (int(s) for s in a.sizes.split(",")):
            r = measure(name, n, a.rounds)
            rows.append(r)
            for k in ("f", "grad"):
                x = r[k]
                print(f"{name:<12} {n:>5} {k:<5} {x['tensorlang_s']:>13.4f} {x['jax_s']:>10.4f} "
                      f"{x['ratio']:>6.2f} {x['max_rel_err']:>8.1e}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
