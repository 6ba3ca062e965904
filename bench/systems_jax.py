"""The "jax" column: the forward functions of `forwards.py` on jax.numpy, float64
(`jax_enable_x64`), every function and derivative under `jax.jit`, timed with
`block_until_ready`.  Derivatives by JAX's AD: `jax.grad`, `jax.hessian` (forward over
reverse), `jax.jvp`, `jax.vjp`, hvp as `jax.jvp` of `jax.grad`, J^T J v as a jvp then a vjp.
Optional: `available()` says whether jax imports.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import forwards

NAME = "jax"
MEM_METHOD = "rss"   # XLA allocates outside Python: tracemalloc does not see it


def available() -> tuple[bool, str]:
    try:
        import jax  # noqa: F401
    except Exception as err:  # noqa: BLE001 -- any failure to import means "not installed"
        return False, f"jax not importable ({type(err).__name__}: {err})"
    return True, jax.__version__


def _ops() -> forwards.Ops:
    import jax.numpy as jnp

    return forwards.Ops(jnp, lambda arrs, axis: jnp.concatenate(arrs, axis),
                        lambda n: jnp.eye(n, dtype=bool),
                        lambda a: jnp.max(a, axis=1, keepdims=True),
                        lambda out, idx, rows: out.at[idx].add(rows))


def derivative_fn(kind: str, f: Callable[..., Any], idx: tuple[int, ...]) -> Callable[..., Any]:
    """A function of (*primals, *extras) computing derivative `kind` of `f` in the primals at
    positions `idx`, with SPEC 2.5's result conventions."""
    import jax

    def restrict(args: tuple) -> Callable[..., Any]:
        def g(*wrt: Any) -> Any:
            full = list(args)
            for i, v in zip(idx, wrt):
                full[i] = v
            return f(*full)
        return g

    n = len(idx)
    if kind == "grad":
        argnums = idx if n > 1 else idx[0]
        return jax.grad(f, argnums=argnums)
    if kind == "hessian":
        return jax.hessian(f, argnums=idx[0])

    def run(*all_args: Any) -> Any:
        k = len(all_args) - (n if kind in ("jvp", "jtjv") else 1)
        args, extras = all_args[:k], all_args[k:]
        g = restrict(args)
        primals = tuple(args[i] for i in idx)
        if kind == "jvp":
            return jax.jvp(g, primals, tuple(extras))
        if kind == "hvp":
            return jax.jvp(jax.grad(g), primals, (extras[0],))[1]
        if kind == "vjp":
            y, pull = jax.vjp(g, *primals)
            return (y, *pull(extras[0]))
        if kind == "jtjv":
            _, jv = jax.jvp(g, primals, tuple(extras))
            _, pull = jax.vjp(g, *primals)
            return tuple(pull(jv))
        raise NotImplementedError(f"jax: unknown derivative kind {kind}")

    return run


class System:
    name = NAME
    mem_method = MEM_METHOD

    def __init__(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)
        self.jax = jax
        self.ops = _ops()

    def version(self) -> str:
        return self.jax.__version__

    def _arrays(self, name: str, args: dict[str, Any]) -> tuple[Callable[..., Any], list[Any]]:
        import jax.numpy as jnp

        f = forwards.FORWARDS.get(name)
        if f is None:
            raise NotImplementedError(f"no jax forward for {name}")
        arrays = [jnp.asarray(args[n], dtype=bool if (name, n) in forwards.BOOL_PARAMS
                              else jnp.int64 if (name, n) in forwards.INT_PARAMS
                              else jnp.float64) for n in forwards.PARAMS[name]]
        return functools.partial(f, self.ops), arrays

    def _timed(self, fn: Callable[..., Any], arrays: list[Any]) -> Callable[[], Any]:
        jitted = self.jax.jit(fn)
        block = self.jax.block_until_ready
        return lambda: block(jitted(*arrays))

    def forward(self, task: Any, args: dict[str, Any]) -> Callable[[], Any]:
        if task.name in forwards.DERIVED:
            base, kind, wrt, extra = forwards.DERIVED[task.name]
            return self._derived(base, kind, wrt, extra, args)
        f, arrays = self._arrays(task.name, args)
        return self._timed(f, arrays)

    def derivative(self, task: Any, d: Any, args: dict[str, Any]) -> Callable[[], Any]:
        return self._derived(task.name, d.kind, d.wrt, d.extra_names(), args)

    def _derived(self, name: str, kind: str, wrt: Sequence[str], extra: Sequence[str],
                 args: dict[str, Any]) -> Callable[[], Any]:
        import jax.numpy as jnp

        f, arrays = self._arrays(name, args)
        idx = tuple(forwards.PARAMS[name].index(w) for w in wrt)
        extras = [jnp.asarray(args[e], dtype=jnp.float64) for e in extra]
        return self._timed(derivative_fn(kind, f, idx), arrays + extras)


def to_numpy(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(to_numpy(v) for v in value)
    return np.asarray(value, dtype=np.float64)
