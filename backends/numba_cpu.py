"""The Numba CPU backend (SPEC 8): Tensor SSA -> generated Python source -> `numba.njit`.

    compile_program(p: tssa.Program, instrument=False, *, jit=True) -> CompiledProgram
    generated_source(p, instrument=False) -> str

A program becomes ONE function `tl_kernel` (`@njit(parallel=<prange loops only>,
cache=True, error_model="numpy")`) in a generated module.  Per statement (decisions in
`backends/codegen.py`, loops in `backends/codegen_nest.py`; docs/backends.md):

  * inputs are kernel arguments; scalars are float locals; tensors are arrays allocated
    with `np.zeros` (the value where the statement's mask fails);
  * a statement's loops come from the index solver: equalities remove loops, inequalities
    narrow bounds, a relation call iterates the relation's coordinates (O(nnz)), and
    `or`/`exists`/other relation tests are guards;
  * the outermost generator loop is `prange`; a sum whose output has no generator loop
    (a scalar, or a point fixed by equalities) is split into a fixed number of chunks
    (independent of the thread count) reduced in parallel and added in chunk order;
  * pointwise statements used once are fused into their consumer; dense contractions of
    the BLAS shape call `np.dot` (through `numba_rt.tl_matmul`).

The kernel module (its float constants turned into the argument `tl_c`, long bodies cut
into separately compiled parts: `numba_cpu_source.py`) is written to the disk cache
(`backends/kernel_cache.py`, docs/caching.md) and imported from there: a second process
loads Numba's compiled code from the cache instead of compiling, and programs differing only
in constants share one module.  With `instrument=True` the kernel also takes a counter array
and adds, per statement, the number of innermost loop iterations it executed (BLAS calls add
m*n*k); `CompiledProgram.last_counts` reports them after each call.
"""
from __future__ import annotations

import threading
import types
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import interp
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.tssa import Program

from . import box_stages, kernel_cache

BACKEND = "numba_cpu"
INDENT = "    "
CHUNKS = 64          # parallel partial sums of a reduction without generator loop ...
CHUNK_MIN = 16       # ... each covering at least this many iterations of its first loop
KERNEL = "tl_kernel"
# Only `prange` loops become parallel: numpy calls (`np.zeros`) stay plain calls and adjacent
# loops are not fused by Numba, which halves compile time (docs/backends.md).
PARALLEL = ("{'prange': True, 'numpy': False, 'setitem': False, 'reduction': False, "
            "'comprehension': False, 'stencil': False, 'fusion': False, "
            "'inplace_binop': False}")
COUNTS = "tl_counts"
CONSTS = "tl_c"      # the kernel's float constants, an argument (numba_cpu_source.py)

__all__ = ["compile_program", "generated_source", "CompiledProgram", "plan_program"]


# ---------------------------------------------------------------------------------------------
# Source generation (backends/numba_cpu_source.py, imported only when a kernel is generated)


def generated_source(p: Program, instrument: bool = False, jit: bool = True) -> str:
    """The readable source of the kernel module for `p` (what `tl show --stage numba`
    prints); `compile_program` caches and imports the same code with its float constants
    as the argument `tl_c` (`numba_cpu_source.abstract_source`).  `jit=False`: the same
    code importing plain-Python stand-ins for Numba (see `compile_program`)."""
    from . import numba_cpu_source

    return numba_cpu_source.module_source(p, instrument, jit)


# ---------------------------------------------------------------------------------------------
# Compiled programs


class CompiledProgram:
    """A compiled Tensor-SSA program: call it with the interpreter's argument dict (or
    keywords); the result is a float, an array, or a tuple, as `interpret` returns."""

    def __init__(self, program: Program, instrument: bool, source: str, key: str,
                 module: Any, path: Any, constants: tuple[float, ...] = (),
                 module_key: str = "") -> None:
        self.program = program
        self.instrument = instrument
        self.source = source          # the generated module (checked against its hash)
        self.key = key                # the program's key (its SSA text)
        self.module_key = module_key  # the module's (shared by programs differing in constants)
        self.constants = np.array(constants, dtype=np.float64)
        self.module = module
        self.kernel = getattr(module, KERNEL)
        self.path = path
        self._args: tuple[tuple[str, Any], ...] = module.TL_ARGS
        self._counted: list[str] = list(module.TL_COUNTED)
        self._sig = ast.Def(program.name, program.params, program.ret, ast.Const(0.0))
        self._inputs = program.inputs()
        self._rel_shapes = {q.name: q.type.sizes for q in program.params
                            if isinstance(q.type, ast.TRel)}
        self.last_counts: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._sealed = not module_key   # Numba's files are recorded after the first call

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program.name} (numba cpu{', instrumented' * self.instrument})>"

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        env = interp.bind_args(self._sig, given)
        kargs, counts = self._marshal(env)
        out = self.kernel(*kargs)
        if not self._sealed:
            self._seal()
        if counts is not None:
            self.last_counts = {v: int(c) for v, c in zip(self._counted, counts)}
        return self._result(out)

    def _marshal(self, env: interp.Env) -> tuple[list[Any], np.ndarray | None]:
        values: list[Any] = []
        counts: np.ndarray | None = None
        pats: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        for kind, key in self._args:
            if kind == "size":
                values.append(int(env.sizes[key]))
            elif kind == "input":
                values.append(self._input(env, key))
            elif kind == "mask":
                values.append(np.ascontiguousarray(env.rels[key], dtype=np.bool_))
            elif kind in ("coords", "ptr"):
                if key not in pats:
                    pats[key] = pattern_arrays(env.rels[key[0]], tuple(key[1]), key[2])
                values.append(pats[key][0 if kind == "coords" else 1])
            elif kind == "consts":
                values.append(self.constants)
            else:
                counts = np.zeros(len(self._counted), dtype=np.int64)
                values.append(counts)
        return values, counts

    def _input(self, env: interp.Env, var: str) -> Any:
        rhs = self._inputs[var]
        v = env.vals[rhs.param][0]
        for k in rhs.path:
            v = v[k]
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim == 0:
            return float(arr)
        return np.ascontiguousarray(arr)

    def _result(self, out: tuple) -> Any:
        leaves = self.program.output_vars()
        seen: set[str] = set()
        vals: dict[int, Any] = {}
        for k, (v, x) in enumerate(zip(leaves, out)):
            if isinstance(x, np.ndarray):
                if v in seen or v in self._inputs:
                    x = x.copy()   # results never alias an argument or each other
                vals[k] = x
            else:
                vals[k] = float(x)
            seen.add(v)
        pos = iter(range(len(leaves)))

        def build(o: tssa.Out) -> Any:
            return vals[next(pos)] if isinstance(o, str) else tuple(build(c) for c in o)

        return build(self.program.output)

    def _seal(self) -> None:
        """After the first call: when Numba compiled the kernel here (and so wrote its cache
        files), record their hashes so that later processes may load them."""
        self._sealed = True
        if self.cache_stats()["misses"]:
            kernel_cache.seal(BACKEND, self.module_key)

    # -- cache statistics --------------------------------------------------------------------

    def cache_stats(self) -> dict[str, int]:
        """Numba's counts for this kernel in this process: `hits` (loaded from the disk
        cache) and `misses` (compiled here)."""
        st = getattr(self.kernel, "stats", None)
        if st is None:
            return {"hits": 0, "misses": 0}
        return {"hits": int(sum(st.cache_hits.values())),
                "misses": int(sum(st.cache_misses.values()))}


def pattern_arrays(mask: np.ndarray, order: tuple[int, ...], nbound: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The coordinates of a relation, columns in `order`, sorted lexicographically, and the
    CSR row pointer over the first `nbound` columns (their flattened index)."""
    coords = np.argwhere(mask).astype(np.int64)
    cols = np.ascontiguousarray(coords[:, list(order)]) if coords.size else \
        np.zeros((0, len(order)), dtype=np.int64)
    if list(order) != sorted(order) and len(cols):
        idx = np.lexsort(cols.T[::-1])
        cols = np.ascontiguousarray(cols[idx])
    if not nbound:
        return cols, np.zeros(1, dtype=np.int64)
    dims = tuple(mask.shape[k] for k in order[:nbound])
    nrows = int(np.prod(dims, dtype=np.int64))
    keys = np.ravel_multi_index(tuple(cols[:, t] for t in range(nbound)), dims) \
        if len(cols) else np.zeros(0, dtype=np.int64)
    ptr = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=nrows), out=ptr[1:])
    return cols, ptr


_COMPILED: dict[str, CompiledProgram] = {}
_LOCK = threading.Lock()


def compile_program(p: Program, instrument: bool = False, *, jit: bool = True
                    ) -> CompiledProgram:
    """Compile a Tensor-SSA program for the CPU (kernels are cached in this process and on
    disk, keyed by `ssa_printer.to_text(p)`; see the module docstring).

    `jit=False` runs the generated code as plain Python (`prange` is `range`, builtins are
    the interpreter's numpy functions), without Numba and without the disk cache: slow,
    but it checks the code generator itself in milliseconds per program (tests, debugging).
    """
    if box_stages.has_boxes(p):  # LAPACK between kernels (backends/box_stages.py)
        return box_stages.StagedProgram(p, lambda q: compile_program(q, instrument, jit=jit))
    if not jit:
        source, consts = _abstract_source(p, instrument, jit=False)
        mod = types.ModuleType(f"tensorlang_kernels.python.{p.name}")
        exec(compile(source, f"<tensorlang kernel {p.name}>", "exec"), mod.__dict__)
        return CompiledProgram(p, instrument, source, "", mod, None, consts)
    text = ssa_printer.to_text(p)
    key = kernel_cache.kernel_key(text, BACKEND, "instrumented" if instrument else "plain")
    with _LOCK:
        hit = _COMPILED.get(key)
        if hit is not None and hit.program == p:
            return hit
        link = kernel_cache.load_link(BACKEND, key)
        if link is not None:
            module_key, consts = link
            source: Any = lambda: _abstract_source(p, instrument)[0]  # noqa: E731
        else:
            source, consts = _abstract_source(p, instrument)
            module_key = kernel_cache.kernel_key(source, BACKEND, "module")
        mod, path = kernel_cache.load_kernel_module(
            BACKEND, module_key, source, {"program": p.name, "instrumented": instrument})
        if link is None:
            kernel_cache.store_link(BACKEND, key, module_key, consts)
        out = CompiledProgram(p, instrument, mod.__tl_source__, key, mod, path, consts,
                              module_key)
        _COMPILED[key] = out
        return out


def _abstract_source(p: Program, instrument: bool, jit: bool = True
                     ) -> tuple[str, tuple[float, ...]]:
    # The generator is imported only here: a cached kernel loads without it.
    from . import numba_cpu_source

    return numba_cpu_source.abstract_source(p, instrument, jit)
