"""What the suite measures: each workload of SPEC 11 with the derivatives timed for it.

A workload (examples/numpy_ref.py `WORKLOADS`) gives the `.tl` file, the function, the sizes
as a function of one problem size N, input makers and the numpy reference of the forward
function.  A `Task` adds the derivatives to time (`Deriv`) and the size caps that keep a sweep
inside memory and time: the interpreter materialises the O(N^3) intermediate of qform2 and
naive Hessians, so those stop at smaller N (a skipped point is reported, never hidden).
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Sequence

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

Args = dict[str, Any]

# The derivative kinds: grad/hessian/hvp/jvp/vjp as in SPEC 2.5; "jtjv" is J^T J v of a
# tensor-valued function (a jvp followed by a vjp), the Gauss-Newton product of ATL's imgARAP.
KINDS = ("grad", "hessian", "jvp", "vjp", "hvp", "jtjv")


def load_numpy_ref() -> ModuleType:
    """examples/numpy_ref.py as the module `numpy_ref` (shared with the tests if loaded)."""
    mod = sys.modules.get("numpy_ref")
    if mod is not None and hasattr(mod, "WORKLOADS"):
        return mod
    spec = importlib.util.spec_from_file_location("numpy_ref", EXAMPLES / "numpy_ref.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numpy_ref"] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Deriv:
    """One derivative of a workload's function.

    `tl_def` names the derived def of the example file when it has one (`qform_hess`);
    otherwise the tensorlang side builds it with `tl.grad`/`tl.vjp`/... from the API.
    `points` are the sizes its targets are stated at (issue 14: logreg's Hessian at
    n = 400, matfac's at m = 200) when they are not sweep sizes: the sweep measures the
    derivative (and f) there too, when the point lies between its smallest and largest size.
    """

    kind: str
    wrt: tuple[str, ...]
    tl_def: str | None = None
    max_n: int | None = None
    points: tuple[int, ...] = ()   # sizes of its targets, measured too when within the sweep

    @property
    def key(self) -> str:
        return self.kind

    @property
    def label(self) -> str:
        inner = ", ".join(self.wrt)
        return f"J^T J v({inner})" if self.kind == "jtjv" else f"{self.kind}({inner})"

    def def_args(self, def_params: Sequence[str], f_params: Sequence[str],
                 a: Args) -> Args:
        """The arguments of the file's def `tl_def` from this derivative's argument dict `a`:
        by name, except a J^T J v def (arap_gn), which takes f's parameters and then one
        direction per wrt input, in order (`dU` for `d_U`)."""
        if self.kind != "jtjv":
            return {n: a[n] for n in def_params}
        keys = [*f_params, *("d_" + w for w in self.wrt)]
        if len(keys) != len(def_params):
            raise ValueError(f"{self.tl_def}: expected f's parameters and one direction per "
                             f"input ({', '.join(keys)})")
        return {n: a[k] for n, k in zip(def_params, keys)}

    def extra_names(self) -> list[str]:
        if self.kind in ("jvp", "jtjv"):
            return ["d_" + w for w in self.wrt]
        if self.kind == "hvp":
            return ["v"]
        if self.kind == "vjp":
            return ["d_y"]
        return []

    def extras(self, args: Args, fwd_value: Any, rng: np.random.Generator) -> Args:
        """Tangents, the hvp direction or the cotangent, drawn uniformly in [-1, 1]."""
        if self.kind in ("jvp", "jtjv"):
            return {"d_" + w: rng.uniform(-1, 1, np.shape(args[w])) for w in self.wrt}
        if self.kind == "hvp":
            return {"v": rng.uniform(-1, 1, np.shape(args[self.wrt[0]]))}
        if self.kind == "vjp":
            return {"d_y": rng.uniform(-1, 1, np.shape(fwd_value))}
        return {}


@dataclass(frozen=True)
class Task:
    name: str
    derivs: tuple[Deriv, ...]
    max_n: int | None = None           # cap for the forward function (and so for all)
    note: str = ""
    workload: Any = field(default=None, compare=False)

    def fits(self, n: int, d: Deriv | None = None) -> bool:
        caps = [c for c in (self.max_n, d.max_n if d else None) if c is not None]
        return all(n <= c for c in caps)

    def extra_points(self, sizes: list[int]) -> dict[int, tuple[str, ...]]:
        """The derivatives' target sizes that are not among `sizes` but lie within them,
        each with the keys of the derivatives measured there."""
        out: dict[int, tuple[str, ...]] = {}
        for d in self.derivs:
            for n in d.points:
                if sizes and min(sizes) <= n <= max(sizes) and n not in sizes and \
                        self.fits(n, d):
                    out[n] = out.get(n, ()) + (d.key,)
        return dict(sorted(out.items()))

    def cap(self, d: Deriv | None = None) -> int | None:
        caps = [c for c in (self.max_n, d.max_n if d else None) if c is not None]
        return min(caps) if caps else None


def _tasks() -> dict[str, Task]:
    G, H = "grad", "hessian"
    specs = [
        Task("qform", (Deriv(G, ("x",), "qform_grad"), Deriv(H, ("x",), "qform_hess"))),
        Task("qform_sum", (Deriv(G, ("x",), "qform_sum_grad"),),
             note="qform spelled `sum i, j. x[i] * A[i, j] * x[j]`"),
        Task("qform2", (Deriv("jvp", ("A",), "qform2_jvp"),), max_n=300,
             note="as written it materialises A^T A: O(N^3) until the simplifier reassociates"),
        Task("conv", (Deriv("vjp", ("x",)),)),
        Task("deconv_loss", (Deriv(G, ("x",), "deconv_grad"),)),
        Task("arap_residuals", (Deriv("jtjv", ("U", "V", "T"), "arap_gn"),), max_n=300,
             note="N is the image side: W = H = N"),
        Task("imgarap", (Deriv(G, ("U", "V", "T"), "imgarap_grad"),), max_n=300,
             note="N is the image side: W = H = N"),
        Task("arap_gn", (), max_n=300,
             note="J^T J v written as a def (a jvp then a vjp): f is itself a derivative"),
        Task("nbody", (Deriv(G, ("P",), "nbody_grad"), Deriv("hvp", ("P",), "nbody_hvp"))),
        Task("nnmatfac", (Deriv(G, ("W", "H"), "nnmatfac_grad"),)),
        Task("logreg", (Deriv(G, ("w",), "logreg_grad"),
                        Deriv(H, ("w",), "logreg_hess", 400, (400,)))),
        Task("matfac", (Deriv(G, ("U",), "matfac_grad"),
                        Deriv(H, ("U",), "matfac_hess", 200, (200,)))),
        Task("masked", (Deriv(G, ("A",), "masked_grad"),)),
        Task("embag", (Deriv(G, ("E", "w"), "embag_grad"),)),
        Task("gnn", (Deriv(G, ("X", "W"), "gnn_grad"),)),
        Task("laplace", (Deriv("vjp", ("u",)),)),
        Task("dirichlet", (Deriv(G, ("u",), "dirichlet_grad"),)),
        Task("upsample", (Deriv("vjp", ("x",)),),
             note="N x 8 images: the interpreter sums each quotient over a dense box"),
        Task("upsample_loss", (Deriv(G, ("x", "s"), "upsample_grad"),),
             note="N x 8 images: the interpreter sums each quotient over a dense box"),
        Task("trace_diag", (Deriv(G, ("x",), "trace_diag_grad"),)),
        Task("row_col", (Deriv(G, ("X",), "row_col_grad"),)),
        Task("skip_one", (Deriv(G, ("x",), "skip_one_grad"),)),
        Task("dead_code", (Deriv(G, ("x",), "dead_code_grad"),)),
        # SPEC 12: max/min reductions, selection
        Task("maxpool", (Deriv(G, ("X",), "maxpool_grad"),), note="N: the pooled side"),
        Task("attention", (Deriv(G, ("Q", "K", "V"), "attention_grad"),), max_n=1000,
             note="D = 4; the N x N score matrix is materialised"),
        Task("huber", (Deriv(G, ("w",), "huber_grad"),), note="N = 2M rows"),
        Task("fourier_fit", (Deriv(G, ("c",), "fourier_fit_grad"),), note="K = 8 terms"),
    ]
    workloads = load_numpy_ref().WORKLOADS
    out: dict[str, Task] = {}
    for t in specs:
        if t.name in workloads:  # a workload numpy_ref no longer has is not run
            out[t.name] = Task(t.name, t.derivs, t.max_n, t.note, workloads[t.name])
    missing = set(workloads) - set(out)
    for name in sorted(missing):  # a workload added to numpy_ref later is still run (f only)
        out[name] = Task(name, (), None, "no derivative registered", workloads[name])
    return out


TASKS: dict[str, Task] = _tasks()
