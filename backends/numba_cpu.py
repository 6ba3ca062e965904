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

import dis
import threading
import types
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import interp, relation
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.tssa import Program

from . import kernel_cache

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
        used = _mask_reads(self.kernel, self._args)
        self._getters = [self._getter(kind, key, u) for (kind, key), u in zip(self._args, used)]
        self._counts_at = next((k for k, (kind, _) in enumerate(self._args)
                                if kind == "counts"), -1)
        # the threads of a call: decided per sizes (numba_rt.threads_for); imported here, before
        # any kernel runs, since it sets how Numba's workers wait
        from . import numba_rt

        self._rt = numba_rt
        self._parallel = jit_parallel(source, module)
        self._blas = "tl_matmul(" in self.source
        self._size_names = [q.name for q in program.params if isinstance(q.type, ast.TSize)]
        self._threaded = self._parallel or self._blas
        # per sizes: the thread count, negative when BLAS is to be capped at it
        self._threads: dict[tuple[int, ...], int] = {}
        leaves = program.output_vars()
        self._copy_leaf = [v in leaves[:k] or v in self._inputs for k, v in enumerate(leaves)]
        self._one_leaf = isinstance(program.output, str) and not self._copy_leaf[0]
        self.last_counts: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._sealed = not module_key   # Numba's files are recorded after the first call

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program.name} (numba cpu{', instrumented' * self.instrument})>"

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        env = interp.bind_args(self._sig, given)   # checks every argument
        bound: dict[str, Any] = {k: v for k, (v, _) in env.vals.items()}
        bound.update(env.sizes)
        bound.update({name: relation.from_value(given[name], tuple(mask.shape))
                      for name, mask in env.rels.items()})
        return self.call_bound(bound)

    def call_bound(self, bound: Mapping[str, Any]) -> Any:
        """Run on arguments already checked and converted (sizes as ints, float64 arrays,
        floats, pairs as tuples, relations as `Relation`s): the API's call path, whose
        binder checks each argument once (`__call__` checks a dict of arguments first)."""
        kargs = [get(bound) for get in self._getters]
        counts = None
        if self.instrument:
            counts = kargs[self._counts_at] = np.zeros(len(self._counted), dtype=np.int64)
        if self._threaded:
            key = tuple([bound[name] for name in self._size_names])
            threads = self._threads.get(key, 0)
            if not threads:
                if len(self._threads) > 64:
                    self._threads.clear()
                threads = self._threads[key] = self._rt.threads_for(
                    kernel_work(self.program, {n: int(bound[n]) for n in self._size_names}),
                    self._blas)
            # BLAS owns the threads where it runs: Numba's loops of such a kernel use one
            self._rt.use_threads(1 if self._blas else abs(threads))
            if threads < 0:    # a BLAS call to keep on fewer threads than BLAS would take
                with self._rt.BlasThreads(-threads):
                    out = self.kernel(*kargs)
            else:
                out = self.kernel(*kargs)
        else:
            out = self.kernel(*kargs)
        if not self._sealed:
            self._seal()
        if counts is not None:
            self.last_counts = {v: int(c) for v, c in zip(self._counted, counts)}
        return self._result(out)

    def _getter(self, kind: str, key: Any, used: bool) -> Callable[[Mapping[str, Any]], Any]:
        """How kernel argument (`kind`, `key`) is taken from the bound arguments."""
        if kind == "size":
            return lambda bound: int(bound[key])
        if kind == "input":
            rhs = self._inputs[key]
            return lambda bound: _leaf(bound[rhs.param], rhs.path)
        if kind == "mask":
            # a mask the kernel never reads is not built (coordinates stay coordinates)
            return (lambda bound: bound[key].mask()) if used else \
                (lambda bound: _no_mask(bound[key].arity))
        if kind in ("coords", "ptr"):
            name, order, nbound, part = key[0], tuple(key[1]), key[2], int(kind == "ptr")
            return lambda bound: bound[name].pattern(order, nbound)[part]
        if kind == "consts":
            return lambda bound: self.constants
        assert kind == "counts"
        return lambda bound: None   # made per call (`call_bound`)

    def _result(self, out: tuple) -> Any:
        """The kernel's outputs in the shape of the program's output.  Built without a
        closure that refers to itself: such a cycle would keep every output alive until the
        garbage collector runs, so each call would write fresh, page-faulting memory."""
        if self._one_leaf:   # (the usual case: one scalar or array, no copy needed)
            x = out[0]
            return x if isinstance(x, np.ndarray) else float(x)
        vals: list[Any] = []
        for x, copy in zip(out, self._copy_leaf):
            if isinstance(x, np.ndarray):
                vals.append(x.copy() if copy else x)  # never alias an argument or each other
            else:
                vals.append(float(x))
        return _assemble(self.program.output, iter(vals))

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
    """The coordinates of the relation `mask`, columns in `order`, sorted lexicographically,
    and the CSR row pointer over the first `nbound` columns (`Relation.pattern`)."""
    return relation.from_value(mask, tuple(mask.shape)).pattern(tuple(order), nbound)


def kernel_work(p: Program, sizes: Mapping[str, int]) -> int:
    """About how many element operations a call of `p`'s kernel does at `sizes`: per
    statement, the points of its box (output times summed extents; masks and relations not
    counted, so an upper bound).  What the parallel grain is decided on."""
    work = 0
    for s in p.stmts:
        if isinstance(s.rhs, tssa.Input):
            continue
        points = 1
        for d in (*s.rhs.dims, *s.rhs.sdims):
            points *= max(0, int(d.evaluate(sizes)))
        work += points
    return work


def jit_parallel(source: Any, module: Any) -> bool:
    """Whether the kernel module has a parallel loop (a kernel without one needs no threads)."""
    text = source if isinstance(source, str) else getattr(module, "__tl_source__", "")
    return getattr(module, "prange", range) is not range and "prange(" in text


def _leaf(v: Any, path: tuple[int, ...]) -> Any:
    """The value at `path` of an argument, as the kernel takes it: a float or a C-contiguous
    float64 array."""
    for k in path:
        v = v[k]
    if type(v) is float:
        return v
    if type(v) is np.ndarray and v.ndim and v.dtype == np.float64 and v.flags.c_contiguous:
        return v
    arr = np.asarray(v, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else np.ascontiguousarray(arr)


def _assemble(o: tssa.Out, leaves: Iterator[Any]) -> Any:
    return next(leaves) if isinstance(o, str) else tuple(_assemble(c, leaves) for c in o)


def _mask_reads(kernel: Any, args: tuple[tuple[str, Any], ...]) -> list[bool]:
    """Per kernel argument: False for a relation mask the kernel's code never reads."""
    fn = getattr(kernel, "py_func", kernel)
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    loads = {ins.argval for ins in dis.get_instructions(fn) if ins.opname.startswith("LOAD_")}
    return [kind != "mask" or names[i] in loads for i, (kind, _) in enumerate(args)]


def _no_mask(arity: int) -> np.ndarray:
    """A stand-in for a mask no kernel code reads (the same Numba type as a mask)."""
    hit = _NO_MASK.get(arity)
    if hit is None:
        hit = _NO_MASK[arity] = relation.frozen_array(np.zeros((0,) * arity, dtype=np.bool_))
    return hit


_NO_MASK: dict[int, np.ndarray] = {}


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
