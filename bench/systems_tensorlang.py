"""The "tensorlang" column: the example programs through the public API.

`tl.load(examples/FILE)[func]` compiled once for the backend (the API's default unless one is
asked for); a derivative is the derived def of the example file when it has one (`qform_hess`)
or is built with `tl.grad`/`tl.vjp`/`tl.jvp`/`tl.hvp`/`tl.hessian`; J^T J v is the file's def
when it names one (`arap_gn`: one program, as `jax.jit` compiles the jvp and vjp as one), else
the jvp of the function followed by its vjp (two calls).  Whatever the API raises `NotYetSupported` for is "n/a".
"""
from __future__ import annotations

from typing import Any, Callable

import tensorlang as tl
from tensorlang import api

from .tasks import EXAMPLES

NAME = "tensorlang"


class System:
    def __init__(self, backend: str | None = None) -> None:
        self.backend = backend or api.default_backend()
        self.name = NAME
        self.label = f"{NAME}[{self.backend}]"
        # The interpreter and anything else in-process allocate through numpy (tracemalloc
        # sees it); compiled kernels allocate with malloc outside Python.
        self.mem_method = "tracemalloc" if self.backend == "interp" else "rss"
        self._modules: dict[str, Any] = {}

    def version(self) -> str:
        import importlib.metadata

        try:
            v = importlib.metadata.version("tensorlang")
        except importlib.metadata.PackageNotFoundError:
            v = "source"
        return f"{v}, backend {self.backend}"

    def module(self, task: Any) -> Any:
        f = task.workload.file
        if f not in self._modules:
            self._modules[f] = tl.load(EXAMPLES / f)
        return self._modules[f]

    def function(self, task: Any) -> Any:
        return self.module(task)[task.workload.func]

    def parts(self, task: Any, d: Any) -> list[Any]:
        """The tensorlang Functions whose results make up derivative `d` (one, or two for
        J^T J v)."""
        m, f = self.module(task), self.function(task)
        if d.tl_def is not None and d.tl_def in m:
            return [m[d.tl_def]]
        if d.kind == "jtjv":
            return [tl.jvp(f, *d.wrt), tl.vjp(f, *d.wrt)]
        make = {"grad": tl.grad, "hessian": tl.hessian, "jvp": tl.jvp, "vjp": tl.vjp,
                "hvp": tl.hvp}[d.kind]
        return [make(f, *d.wrt)]

    def _call(self, fn: Any) -> Callable[[dict[str, Any]], Any]:
        compiled = fn.compile(self.backend)
        names = [p.name for p in fn.params]
        return lambda args: compiled(**{n: args[n] for n in names})

    @staticmethod
    def _relations(fns: list[Any], args: dict[str, Any]) -> dict[str, Any]:
        """`args` with every relation a `tl.Relation` (what binding makes of a mask), made once
        per measurement as the JAX column puts its inputs on the device once: the calls then
        reuse its coordinate forms instead of converting the mask each time."""
        import tensorlang as tl
        from tensorlang.ir.ast import TIndex, TRel

        out = dict(args)
        for fn in fns:   # (an index array stays an integer array: the API takes only that)
            rels = [p.name for p in fn.params
                    if isinstance(p.type, TRel) and not isinstance(p.type, TIndex)]
            if any(not isinstance(out.get(n), tl.Relation) for n in rels):
                bound = fn.bind(**{p.name: out[p.name] for p in fn.params if p.name in out})
                out.update({n: bound[n] for n in rels})
        return out

    def forward(self, task: Any, args: dict[str, Any]) -> Callable[[], Any]:
        fn = self.function(task)
        run, args = self._call(fn), self._relations([fn], args)
        return lambda: run(args)

    def derivative(self, task: Any, d: Any, args: dict[str, Any]) -> Callable[[], Any]:
        fns = self.parts(task, d)
        parts = [self._call(p) for p in fns]
        if d.kind == "jtjv" and len(fns) == 1:   # a def of the file (arap_gn)
            call = fns[0].compile(self.backend)
            given = d.def_args([p.name for p in fns[0].params],
                               [p.name for p in self.function(task).params], args)
            return lambda: call(**given)
        if d.kind != "jtjv":   # (no relation in the J^T J v workloads)
            run, args = parts[0], self._relations(fns, args)
            return lambda: run(args)
        jvp, vjp = parts

        def jtjv() -> Any:
            _, jv = jvp(args)
            return tuple(vjp({**args, "d_y": jv})[1:])
        return jtjv

    def kernel_arrays(self, task: Any, d: Any, sizes: dict[str, int]) -> dict[str, Any] | None:
        """For a materialised Hessian on the Numba CPU backend: the largest temporary array
        its kernel allocates, the output's and the inputs' sizes (elements) at `sizes`
        (`machine_model.kernel_arrays`; issue 14 asks matfac's to be O(output))."""
        if self.backend != "numba" or d.kind != "hessian":
            return None
        from tensorlang.backends.common import machine_model

        arrays = machine_model.kernel_arrays(self.parts(task, d)[0].final_program(), sizes)
        var, largest = arrays.largest_temporary
        return {"largest_temporary": largest, "temporary": var, "output": arrays.outputs,
                "inputs": arrays.inputs}

    # -- cost model (bench/costs.py calls these in its worker process) ----------------------

    def cost(self, task: Any, args: dict[str, Any], stage: str | None = None) -> Any:
        return self.function_cost(self.function(task), args, stage)

    def derivative_cost(self, task: Any, d: Any, args: dict[str, Any],
                        stage: str | None = None) -> Any:
        costs = [self.function_cost(p, args, stage) for p in self.parts(task, d)]
        return costs[0] if len(costs) == 1 else CostSum(costs)

    @staticmethod
    def function_cost(fn: Any, args: dict[str, Any], stage: str | None = None) -> Any:
        """`fn.cost` on the sizes and relations among `args` (arrays only give shapes, and a
        missing value -- the cotangent of J^T J v's vjp -- is fine: `cost` needs none)."""
        names = {p.name for p in fn.params}
        return fn.cost(stage=stage, **{k: v for k, v in args.items() if k in names})


class CostSum:
    """Sum of the costs of the parts of a composite derivative."""

    def __init__(self, costs: list[Any]) -> None:
        self.adds = sum(int(c.adds) for c in costs)
        self.muls = sum(int(c.muls) for c in costs)
        self.calls = sum(int(c.calls) for c in costs)
        self.total = sum(int(c.total) for c in costs)
