"""The "torch" column: the forward functions of `forwards.py` on PyTorch CPU tensors, float64,
eager mode.  f runs under `torch.no_grad()`; gradients and vjps by ordinary reverse-mode
autograd (`torch.autograd.grad`, which re-records the forward: that is what a gradient costs in
PyTorch); Hessians, jvps and hvps by `torch.func` (`hessian` = jacfwd(jacrev), `jvp`, jvp of
`grad`).  Optional: `available()` says whether torch imports.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import forwards

NAME = "torch"
MEM_METHOD = "rss"   # torch's CPU allocator is invisible to tracemalloc


def available() -> tuple[bool, str]:
    try:
        import torch  # noqa: F401
    except Exception as err:  # noqa: BLE001 -- any failure to import means "not installed"
        return False, f"torch not importable ({type(err).__name__}: {err})"
    return True, torch.__version__


def _ops() -> forwards.Ops:
    import torch

    return forwards.Ops(torch, lambda arrs, axis: torch.cat(arrs, axis),
                        lambda n: torch.eye(n, dtype=torch.bool),
                        lambda a: torch.amax(a, dim=1, keepdim=True),
                        lambda out, idx, rows: out.index_add(0, idx, rows))


def derivative_fn(kind: str, f: Callable[..., Any], idx: tuple[int, ...],
                  n_args: int) -> Callable[..., Any]:
    """A function of (*primals, *extras) computing derivative `kind` of `f` in the primals at
    positions `idx`, with SPEC 2.5's result conventions."""
    import torch
    from torch import func as torch_func

    def restrict(args: tuple) -> Callable[..., Any]:
        def g(*wrt: Any) -> Any:
            full = list(args)
            for i, v in zip(idx, wrt):
                full[i] = v
            return f(*full)
        return g

    def split(all_args: tuple) -> tuple[tuple, tuple, Callable[..., Any], tuple]:
        args, extras = all_args[:n_args], all_args[n_args:]
        return args, extras, restrict(args), tuple(args[i] for i in idx)

    if kind == "grad":
        def grad(*all_args: Any) -> Any:
            args, _, g, primals = split(all_args)
            leaves = [p.detach().requires_grad_(True) for p in primals]
            out = torch.autograd.grad(g(*leaves), leaves)
            return out if len(out) > 1 else out[0]
        return grad
    if kind == "vjp":
        def vjp(*all_args: Any) -> Any:
            args, extras, g, primals = split(all_args)
            leaves = [p.detach().requires_grad_(True) for p in primals]
            y = g(*leaves)
            return (y.detach(), *torch.autograd.grad(y, leaves, extras[0]))
        return vjp

    def run(*all_args: Any) -> Any:
        args, extras, g, primals = split(all_args)
        if kind == "hessian":
            return torch_func.hessian(g)(*primals)
        if kind == "jvp":
            return torch_func.jvp(g, primals, tuple(extras))
        if kind == "hvp":
            return torch_func.jvp(torch_func.grad(g), primals, (extras[0],))[1]
        if kind == "jtjv":
            _, jv = torch_func.jvp(g, primals, tuple(extras))
            _, pull = torch_func.vjp(g, *primals)
            return tuple(pull(jv))
        raise NotImplementedError(f"torch: unknown derivative kind {kind}")

    return run


class System:
    name = NAME
    mem_method = MEM_METHOD

    def __init__(self) -> None:
        import os

        import torch

        threads = os.environ.get("TL_BENCH_THREADS")
        if threads and int(threads) > 0:
            torch.set_num_threads(int(threads))
        self.torch = torch
        self.ops = _ops()

    def version(self) -> str:
        return f"{self.torch.__version__} ({self.torch.get_num_threads()} threads)"

    def _tensors(self, name: str, args: dict[str, Any]) -> tuple[Callable[..., Any], list[Any]]:
        f = forwards.FORWARDS.get(name)
        if f is None:
            raise NotImplementedError(f"no torch forward for {name}")
        torch = self.torch
        tensors = [torch.as_tensor(np.asarray(args[n]), dtype=torch.bool
                                   if (name, n) in forwards.BOOL_PARAMS else torch.int64
                                   if (name, n) in forwards.INT_PARAMS else torch.float64)
                   for n in forwards.PARAMS[name]]
        return functools.partial(f, self.ops), tensors

    def forward(self, task: Any, args: dict[str, Any]) -> Callable[[], Any]:
        if task.name in forwards.DERIVED:
            base, kind, wrt, extra = forwards.DERIVED[task.name]
            return self._derived(base, kind, wrt, extra, args)
        f, tensors = self._tensors(task.name, args)
        no_grad = self.torch.no_grad

        def call() -> Any:
            with no_grad():
                return f(*tensors)
        return call

    def derivative(self, task: Any, d: Any, args: dict[str, Any]) -> Callable[[], Any]:
        return self._derived(task.name, d.kind, d.wrt, d.extra_names(), args)

    def _derived(self, name: str, kind: str, wrt: Sequence[str], extra: Sequence[str],
                 args: dict[str, Any]) -> Callable[[], Any]:
        f, tensors = self._tensors(name, args)
        idx = tuple(forwards.PARAMS[name].index(w) for w in wrt)
        extras = [self.torch.as_tensor(args[e], dtype=self.torch.float64) for e in extra]
        run = derivative_fn(kind, f, idx, len(tensors))
        return lambda: run(*tensors, *extras)


def to_numpy(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(to_numpy(v) for v in value)
    if hasattr(value, "detach"):
        return value.detach().numpy().astype(np.float64)
    return np.asarray(value, dtype=np.float64)
