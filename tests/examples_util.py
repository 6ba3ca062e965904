"""Access to examples/ and their numpy references for the tests."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _load_refs():
    spec = importlib.util.spec_from_file_location("numpy_ref", EXAMPLES / "numpy_ref.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numpy_ref"] = mod   # dataclasses look their module up while the file runs
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


numpy_ref = _load_refs()
WORKLOADS = numpy_ref.WORKLOADS
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.tl"))

# The hypothesis profile tests/conftest.py loads; a few heavy property tests draw fewer
# examples under "ci" (ci_examples).
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE",
                                    "ci" if os.environ.get("CI") else "dev")


def ci_examples(ci: int, other: int) -> int:
    """max_examples of a heavy property test: `ci` under the "ci" profile, else `other`."""
    return ci if HYPOTHESIS_PROFILE == "ci" else other


def slow_params(cases: Any, slow: Any) -> list[Any]:
    """`cases` as pytest parameters (a tuple case: one argument each), those for which
    `slow(case)` holds marked slow: CI runs the rest (docs/decisions.md, "CI time")."""
    import pytest

    return [pytest.param(*case if isinstance(case, tuple) else (case,), marks=pytest.mark.slow)
            if slow(case) else case for case in cases]


# The per-workload tests (each workload against the interpreter: Numba's instrumented kernels
# and their counted work, JAX on the example and its derivatives, the theorems' bounds, the
# plain-Python kernels of the derivatives) run every workload with `-m slow`; CI leaves out
# these six, each another function of an example file whose other functions stay
# (imgarap.tl: imgarap, which computes the residuals; embedding.tl: gnn; stencil.tl:
# dirichlet and upsample_loss, which call laplace and upsample; conv.tl: conv).  Compiling
# them was a third of those tests' time (docs/decisions.md, "CI time").
SLOW_WORKLOADS = frozenset({"arap_gn", "arap_residuals", "embag", "laplace", "upsample",
                            "deconv_loss"})


def workload_params(cases: Any = None, slow_if: Any = None) -> list[Any]:
    """`cases` (default: the workload names, sorted) as pytest parameters; a case whose
    workload (its first element, for a tuple) is in SLOW_WORKLOADS, or for which `slow_if`
    holds, is marked slow."""
    return slow_params(sorted(WORKLOADS) if cases is None else cases,
                       lambda c: (c[0] if isinstance(c, tuple) else c) in SLOW_WORKLOADS
                       or (slow_if is not None and slow_if(c)))


# Agreement of a backend with the interpreter (SPEC 8: rtol 1e-9 for float64)
RTOL, ATOL = 1e-9, 1e-12


def to_program(d: Any) -> Any:
    """The Tensor-SSA program of a core Def (through the pipeline)."""
    from tensorlang import pipeline

    return pipeline.run_to(d, "ssa")


def assert_same(got: Any, want: Any, atol: float = ATOL) -> None:
    """Same structure (float / float64 array / tuple) and values within rtol 1e-9."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, atol)
        return
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, np.ndarray):
        assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol, equal_nan=True)


def derived_random_case(case: Any, kind: str) -> tuple[Any, Any, dict[str, Any]]:
    """A random program's `kind` derivative (jvp/vjp), its core form and random inputs for it:
    what the backends' random-derivative tests compare with the interpreter."""
    from tensorlang.ir import ast, tssa
    from tensorlang.passes import derive
    from tensorlang.testing import random_args

    d, args, wrt = case
    p = derive.derive(to_program(d), kind, tuple(wrt))
    core = tssa.to_core(p)
    sizes = {q.name: args[q.name] for q in d.params if isinstance(q.type, ast.TSize)}
    return p, core, random_args(core, sizes, np.random.default_rng(0))


def run_under_cudasim(script: str, cache: pathlib.Path) -> None:
    """Run `script` in a fresh process under Numba's CUDA simulator (the simulator must be
    chosen before numba is imported); it must print "ok" last."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", TENSORLANG_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


class NanEmpty:
    """`np.empty` filling float arrays with nan, so that a kernel reading an element its
    storage plan left unwritten (backends/common/storage.py) gives a wrong result."""

    def __init__(self) -> None:
        self.orig = np.empty

    def __call__(self, shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> Any:
        out = self.orig(shape, dtype, *args, **kwargs)
        if out.dtype.kind == "f":
            out.fill(np.nan)
        return out
