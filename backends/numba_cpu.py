"""The Numba CPU backend (SPEC 8): Tensor SSA -> generated Python source -> `numba.njit`.

    compile_program(p: tssa.Program, instrument=False, *, jit=True) -> CompiledProgram
    generated_source(p, instrument=False) -> str

A program becomes ONE function `tl_kernel` (`@njit(parallel=<prange loops only>,
cache=True, error_model="numpy")`) in a generated module.  Per statement (decisions in
`backends/codegen.py`, loops in `backends/codegen_nest.py`; docs/backends.md):

  * inputs are kernel arguments; scalars are float locals; tensors are arrays allocated
    with `np.zeros` (the value where the statement's mask fails);
  * a statement's loops come from the index solver: equalities remove loops, inequalities
    narrow bounds, a relation call iterates the relation's coordinates (O(nnz); an index
    array read at known indices is a lookup), `exists` over a relation is a CSR row test
    (over an index array's value, a range test), and `or`/other relation tests are guards;
  * the outermost generator loop is `prange`; a sum whose output has no generator loop
    (a scalar, or a point fixed by equalities) is split into a fixed number of chunks
    (independent of the thread count) reduced in parallel and added in chunk order;
  * pointwise statements used once, or cheap, are fused into their consumers; dense
    contractions of the BLAS shape call `np.dot` (through `numba_rt.tl_matmul`).

The kernel module (its float constants turned into the argument `tl_c`, long bodies cut
into separately compiled parts: `numba_cpu_source.py`) is written to the disk cache
(`backends/kernel_cache.py`, docs/caching.md) and imported from there: a second process
loads Numba's compiled code from the cache instead of compiling, and programs differing only
in constants share one module.  With `instrument=True` the kernel also takes a counter array
and adds, per statement, the number of innermost loop iterations it executed (BLAS calls add
m*n*k); `CompiledProgram.last_counts` reports them after each call.
"""
from __future__ import annotations

import ast as pyast
import hashlib
import math
import os
import threading
import types
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import interp, memory, relation
from tensorlang.ir import tssa
from tensorlang.ir.canon import conjuncts
from tensorlang.syntax import ssa_printer
from tensorlang.syntax.errors import ShapeError, TLError
from tensorlang.ir.tssa import Program

from . import box_stages, heap, kernel_cache, size_constants
from .size_constants import SMALL

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
# A pointwise statement masked by a relation whose array is dense anyway (an output, or read
# off the relation's members) runs as one streaming pass over its box, reading the mask,
# when the relation holds at least 1/DENSE_RATIO of its box; below, as a scatter over the
# coordinates into a zero-filled array (docs/backends.md, "Relations"): measured at
# N = 2000 on `[i != j and E(i, j)] * 2 A`, one thread, the coordinate scatter takes 0.8,
# 1.3, 2.8, 8.5, 15 ms at densities 0.1%, 1%, 3%, 10%, 30%; the dense pass 2.1-2.4 ms at all.
DENSE_RATIO = 40
# The AOT image (pycc: a generic x86-64 target) compiles the dense pass's select to a branch
# on the mask: 24 ms at N = 1000 and 30% density where the JIT kernel takes 0.4 ms.  A call
# whose dense pass covers more than this many points runs on the JIT kernel.
DENSE_AOT_MAX = 1 << 14
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

    text = numba_cpu_source.module_source(p, instrument, jit)
    return text + engine_note(text) if jit else text


def engine_note(text: str) -> str:
    """Which engine runs the kernel module `text` under "auto" (a comment for `tl show`)."""
    from .aot_cpu import Header

    header = Header.of(text)
    if header.parts:
        return ("# Engine (docs/caching.md): Numba's JIT kernel runs every call (a kernel "
                "cut into parts has no AOT image unless $TENSORLANG_ENGINE=aot).\n")
    if not header.parallel and not header.blas:
        return ("# Engine (docs/caching.md): the AOT image of this module (the same serial "
                "code) runs every call.\n")
    changes = ", ".join(what for what, there in (("prange as range", header.parallel),
                                                 ("loops for BLAS", header.blas)) if there)
    return (f"# Engines (docs/caching.md): calls of at most {AOT_MAX_WORK} operations "
            f"(SPEC 3 cost) run the serial AOT image of this module ({changes}); larger "
            f"calls run Numba's parallel JIT kernel, with any size of at most {SMALL} "
            f"compiled in (backends/size_constants.py).  ${ENV_ENGINE}=jit|aot fixes one.\n")


# ---------------------------------------------------------------------------------------------
# Compiled programs


ENGINES = ("auto", "jit", "aot")
ENV_ENGINE = "TENSORLANG_ENGINE"
# "auto" runs a parallel or BLAS kernel as an AOT image only while its exact cost (SPEC 3
# operations) at the call's sizes is at most this: ~10 ms of serial work, less than Numba's
# own start-up (docs/caching.md, "Engines").
AOT_MAX_WORK = 1_000_000
# Above this bound the engine is chosen on the bound (JIT): the exact cost would take longer
# than the call (about 0.1 s here).
EXACT_COST_MAX_POINTS = 1 << 24


class CompiledProgram:
    """A compiled Tensor-SSA program: call it with the interpreter's argument dict (or
    keywords); the result is a float, an array, or a tuple, as `interpret` returns.

    Two engines run the same kernel module (docs/caching.md, "Engines"): "jit", Numba's
    parallel kernel (`self.kernel`, loaded from Numba's disk cache or compiled), and "aot",
    its serial ahead-of-time image (backends/aot_cpu.py), which loads without importing
    Numba.  `engine` ("auto", "jit" or "aot"; default `$TENSORLANG_ENGINE`, else "auto")
    fixes the choice or leaves it to `engine_for`; `last_engine` says which ran last."""

    def __init__(self, program: Program, instrument: bool, source: str, key: str,
                 module: Any, path: Any, constants: tuple[float, ...] = (),
                 module_key: str = "", engine: str = "jit") -> None:
        from .aot_cpu import Header

        self.program = program
        self.instrument = instrument
        self.source = source          # the generated module (checked against its hash)
        self.key = key                # the program's key (its SSA text)
        self.module_key = module_key  # the module's (shared by programs differing in constants)
        self.constants = np.array(constants, dtype=np.float64)
        self._module = module         # the JIT module, once loaded (None: not yet)
        self.path = path
        header = Header.of(source)
        self._args: tuple[tuple[str, Any], ...] = header.args
        self._counted: list[str] = list(header.counted)
        # the arrays the kernel allocates (the memory estimate of a call, `Compiled.estimate`)
        self.arrays = tuple(memory.Allocation.of_literal(a) for a in header.arrays)
        # The image is serial and loop-only: "auto" weighs the call only when it is not the
        # same code as the JIT kernel.  A kernel cut into parts runs on the JIT: pycc builds
        # each part twice (Numba's JIT compiles every `@njit` callee before linking it into
        # the image), so its image costs more than twice the JIT's compile time.
        self._aot_same = not header.parallel and not header.blas
        self._jit_only = header.parts
        self._dense_rels = sorted({key for kind, key in self._args if kind == "dmask"})
        self.engine = engine if module_key else "jit"
        self._images: dict[tuple[Any, ...], Any] = {}
        self._work: dict[tuple[int, ...], int] = {}
        self.last_engine: str | None = None
        self._sig = ast.Def(program.name, program.params, program.ret, ast.Const(0.0))
        self._inputs = program.inputs()
        self._rel_names = [q.name for q in program.params if isinstance(q.type, ast.TRel)]
        self._size_names = [q.name for q in program.params if isinstance(q.type, ast.TSize)]
        # per kernel argument, how it is taken from the bound arguments (made on the first
        # call, from the module's text: a mask the kernel never reads is not built)
        self._getters: list[Callable[[Mapping[str, Any]], Any]] | None = None
        self._counts_at = next((k for k, (kind, _) in enumerate(self._args)
                                if kind == "counts"), -1)
        self._blas = header.blas
        self._blas_at = header.blas_at
        # (a plain-Python module, `jit=False`, has no threads to set)
        self._threaded = bool(module_key) and (header.parallel or header.blas)
        self._rt: Any = None   # numba_rt (thread policy), imported before the first JIT call
        # per sizes: the JIT kernel to run (generic, or with small sizes compiled in:
        # backends/size_constants.py) and the thread count, negative when BLAS is to be
        # capped at it
        self._jit_plans: dict[tuple[int, ...], tuple[Any, int]] = {}
        self._variants: dict[tuple[tuple[str, int], ...], Any] = {}
        leaves = program.output_vars()
        self._copy_leaf = [v in leaves[:k] or v in self._inputs for k, v in enumerate(leaves)]
        self._one_leaf = isinstance(program.output, str) and not self._copy_leaf[0]
        self.last_counts: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._sealed = not module_key   # Numba's files are recorded after the first call

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program.name} (numba cpu{', instrumented' * self.instrument})>"

    # -- the two engines ---------------------------------------------------------------------

    @property
    def module(self) -> Any:
        """The JIT kernel's module (imported, with Numba, on first use)."""
        if self._module is None:
            self._module, _ = kernel_cache.load_kernel_module(
                BACKEND, self.module_key, self.source,
                {"program": self.program.name, "instrumented": self.instrument})
        return self._module

    @property
    def kernel(self) -> Any:
        """The JIT kernel (Numba's dispatcher)."""
        return getattr(self.module, KERNEL)

    def engine_for(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> str:
        """The engine a call with these arguments runs on: "jit" or "aot"."""
        return self._choose(self._bound(dict(args or {}, **kwargs)))

    def _choose(self, bound: Mapping[str, Any]) -> str:
        if self.engine != "auto":
            return self.engine
        if self._jit_only:
            return "jit"
        if any(dense_pass(bound[r]) and math.prod(bound[r].shape) > DENSE_AOT_MAX
               for r in self._dense_rels):
            return "jit"
        if self._aot_same:
            return "aot"
        sizes = tuple([int(bound[n]) for n in self._size_names])
        work = self._work.get(sizes)
        if work is None:
            if len(self._work) > 64:
                self._work.clear()
            named = {n: int(bound[n]) for n in self._size_names}
            # first a bound from the sizes alone (with relations: however many entries they
            # have); the exact cost only where it decides and is cheap to evaluate (it
            # visits every point of each statement's box: a gather `x[i // 2]` has N^2)
            work = cost_bound(self.program, named)
            if not self._rel_names and AOT_MAX_WORK < work <= EXACT_COST_MAX_POINTS:
                work = self._cost(named)
            self._work[sizes] = work
        if self._rel_names and work > AOT_MAX_WORK:
            # the relations' members bound the masked statements (not the exact cost: that
            # evaluates every point of the dense box, longer than a gather's whole call)
            nnz = tuple([bound[n].nnz for n in self._rel_names])
            work = self._work.get((*sizes, *nnz, -1))   # (-1: keys with members)
            if work is None:
                work = self._work[(*sizes, *nnz, -1)] = cost_bound(
                    self.program, {n: int(bound[n]) for n in self._size_names},
                    dict(zip(self._rel_names, nnz)))
        return "aot" if work <= AOT_MAX_WORK else "jit"

    def _cost(self, args: Mapping[str, Any]) -> int:
        """The exact SPEC 3 cost of a call at these sizes and relation masks."""
        from tensorlang.semantics.cost import cost_program

        return cost_program(self.program, args).total

    def _image(self, kargs: list[Any]) -> Any:
        """The AOT image's kernel for arguments of these types (loaded, or built here)."""
        # keyed per call by the arguments' Numba-relevant traits (cheap); the image's name is
        # their digest, taken only when this process first meets them
        traits = tuple([(a.dtype.num, a.ndim, a.flags.c_contiguous, a.flags.writeable)
                        if type(a) is np.ndarray else type(a) for a in kargs])
        fn = self._images.get(traits)
        if fn is None:
            variant = _type_key(kargs)
            module = kernel_cache.load_aot(BACKEND, self.module_key, variant)
            if module is None:
                from . import aot_cpu

                kernel_cache.store_aot(BACKEND, self.module_key, variant,
                                       aot_cpu.build(self.source, kargs))
                module = kernel_cache.load_aot(BACKEND, self.module_key, variant)
                if module is None:
                    raise RuntimeError(f"the AOT image of kernel {self.module_key} "
                                       f"did not load after it was built")
            fn = self._images[traits] = getattr(module, KERNEL)
        return fn

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        return self.call_bound(self._bound(given))

    def _bound(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments checked (`interp.bind_args`) and converted as `call_bound` takes them."""
        env = interp.bind_args(self._sig, given)
        bound: dict[str, Any] = {k: v for k, (v, _) in env.vals.items()}
        bound.update(env.sizes)
        types = {q.name: q.type for q in self.program.params}
        for name, mask in env.rels.items():   # (an index array's value: its integer array)
            shape = tuple(mask.shape)
            bound[name] = relation.from_value(
                interp.index_array_relation(name, types[name], given[name], shape), shape)
            check_index_array(name, types[name], bound[name])
        return bound

    def call_bound(self, bound: Mapping[str, Any]) -> Any:
        """Run on arguments already checked and converted (sizes as ints, float64 arrays,
        floats, pairs as tuples, relations as `Relation`s): the API's call path, whose
        binder checks each argument once (`__call__` checks a dict of arguments first)."""
        getters = self._getters or self._make_getters()
        kargs = [get(bound) for get in getters]
        counts = None
        if self.instrument:
            counts = kargs[self._counts_at] = np.zeros(len(self._counted), dtype=np.int64)
        engine = self.last_engine = self._choose(bound)
        if engine == "aot":   # the image is serial: no thread policy
            out = self._image(kargs)(*kargs)
        else:
            out = self._run_jit(bound, kargs)
            if not self._sealed:
                self._seal()
        if counts is not None:
            self.last_counts = {v: int(c) for v, c in zip(self._counted, counts)}
        return self._result(out)

    def _make_getters(self) -> list[Callable[[Mapping[str, Any]], Any]]:
        used = _mask_reads(self.source, self._args)
        self._getters = [self._getter(kind, key, u) for (kind, key), u in zip(self._args, used)]
        return self._getters

    def _run_jit(self, bound: Mapping[str, Any], kargs: list[Any]) -> Any:
        """The JIT kernel on `kargs`, on the threads its work at these sizes is worth."""
        if self._rt is None:
            # imported before the first parallel kernel runs: it sets how Numba's workers wait
            from . import numba_rt

            self._rt = numba_rt
        key = tuple([bound[name] for name in self._size_names])
        plan = self._jit_plans.get(key)
        if plan is None:
            if len(self._jit_plans) > 64:
                self._jit_plans.clear()
            sizes = {n: int(bound[n]) for n in self._size_names}
            work = kernel_work(self.program, sizes)
            blas = self._blas and self._whole_blas(sizes)
            plan = self._jit_plans[key] = (
                self._jit_kernel(sizes, work),
                self._rt.threads_for(work, blas) if self._threaded else 0,
                heap.heap_bytes([a.box_entries(sizes) for a in self.arrays]), blas)
        kernel, threads, on_heap, blas = plan
        if on_heap:   # arrays above glibc's mmap threshold: from the heap (heap.py)
            with heap.ArraysOnHeap(on_heap):
                return self._run_threads(kernel, threads, blas, kargs)
        return self._run_threads(kernel, threads, blas, kargs)

    def _whole_blas(self, sizes: Mapping[str, int]) -> bool:
        """Whether a call at `sizes` makes a BLAS call outside row panels (`TL_BLAS`): a
        product computed in panels inside the parallel loop of its reader is small (a few
        rows), so Numba's loops keep their threads and each BLAS call runs on one."""
        whole, tests = self._blas_at
        if whole:
            return True
        env = {name: sizes[key] for name, (kind, key) in
               zip(_kernel_params(self.source), self._args) if kind == "size"}
        return not all(eval(t, {"__builtins__": {}, "max": max, "min": min}, env)
                       for t in tests)

    def _run_threads(self, kernel: Any, threads: int, blas: bool, kargs: list[Any]) -> Any:
        """`kernel` on `threads` (`numba_rt.threads_for`; 0: a serial kernel); `blas`: it
        calls BLAS outside row panels at these sizes."""
        if threads == 0:
            return kernel(*kargs)
        # BLAS owns the threads where it runs: Numba's loops of such a kernel use one
        self._rt.use_threads(1 if blas else abs(threads))
        if threads < 0:    # a BLAS call to keep on fewer threads than BLAS would take
            with self._rt.BlasThreads(-threads):
                return kernel(*kargs)
        if self._blas and threads > 1:   # row panels only: one BLAS thread per Numba thread
            with self._rt.BlasThreads(1):
                return kernel(*kargs)
        return kernel(*kargs)

    def _jit_kernel(self, sizes: Mapping[str, int], work: int) -> Any:
        """The JIT kernel for a call at `sizes` doing about `work` operations: in a call too
        large for the AOT image, the sizes of at most `SMALL` compiled in
        (a kernel module per such size tuple, at most `size_constants.VARIANTS`)."""
        if work <= AOT_MAX_WORK:
            return self.kernel
        params = dict(zip(_kernel_params(self.source), self._args))
        small = tuple((name, sizes[key]) for name, (kind, key) in params.items()
                      if kind == "size" and sizes.get(key, SMALL + 1) <= SMALL)
        if not small:
            return self.kernel
        hit = self._variants.get(small)
        if hit is None:
            if len(self._variants) >= size_constants.VARIANTS:
                return self.kernel
            text = size_constants.with_constant_sizes(self.source, dict(small))
            key = kernel_cache.kernel_key(text, BACKEND, "module")
            module, _ = kernel_cache.load_kernel_module(
                BACKEND, key, text, {"program": self.program.name,
                                     "instrumented": self.instrument, "sizes": dict(small)})
            hit = self._variants[small] = _SealAfterCall(getattr(module, KERNEL), key)
        return hit

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
        if kind == "dmask":
            # the mask of a statement's dense pass: built only where the pass runs (the
            # kernel tests the same density, and that it was given the whole mask)
            return lambda bound: bound[key].mask() if dense_pass(bound[key]) else \
                _no_mask(bound[key].arity)
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
        st = getattr(self.kernel, "stats", None) if self._module is not None else None
        if st is None:
            return {"hits": 0, "misses": 0}
        return {"hits": int(sum(st.cache_hits.values())),
                "misses": int(sum(st.cache_misses.values()))}


class _SealAfterCall:
    """A specialised JIT kernel that records its cache files after its first call (as
    `CompiledProgram._seal` does for the generic kernel)."""

    def __init__(self, kernel: Any, key: str) -> None:
        self.kernel, self.key = kernel, key

    def __call__(self, *kargs: Any) -> Any:
        out = self.kernel(*kargs)
        if self.key:
            st = getattr(self.kernel, "stats", None)
            if st is not None and sum(st.cache_misses.values()):
                kernel_cache.seal(BACKEND, self.key)
            self.key = ""
        return out


def check_index_array(name: str, t: ast.Type, rel: relation.Relation) -> None:
    """A relation given for an index array must be one: the kernels take `exists v.
    idx(i..., v)` as true for every in-range i (codegen.with_index_array_facts)."""
    if isinstance(t, ast.TIndex) and not relation.is_index_array(rel):
        raise ShapeError(f"index array {name!r}: the relation given has not exactly one "
                         f"member per index of shape {rel.shape[:-1]}")


def pattern_arrays(mask: np.ndarray, order: tuple[int, ...], nbound: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The coordinates of the relation `mask`, columns in `order`, sorted lexicographically,
    and the CSR row pointer over the first `nbound` columns (`Relation.pattern`)."""
    return relation.from_value(mask, tuple(mask.shape)).pattern(tuple(order), nbound)


def cost_bound(p: Program, sizes: Mapping[str, int],
               nnz: Mapping[str, int] | None = None) -> int:
    """An upper bound of `p`'s SPEC 3 cost at `sizes` whatever its relations hold: per
    statement, every point of its box live (a contraction: its multiplications and one
    addition per point).  A box statement counts as unbounded.  With `nnz` (members per
    relation), a statement masked by a relation call `R(i, j, ...)` on distinct indices of
    its box counts at most nnz(R) points per value of its other indices: the bound of an
    index-array gather is its entries, not the dense box (no mask is looked at)."""
    work = 0
    for s in p.stmts:
        if isinstance(s.rhs, (tssa.Input, tssa.ConstRhs, tssa.IndexRhs)):
            continue
        if isinstance(s.rhs, tssa.BoxRhs):
            return 1 << 62
        extents = dict(zip((*s.rhs.gen_names(), *s.rhs.sum_names()),
                           (max(0, int(d.evaluate(sizes))) for d in (*s.rhs.dims,
                                                                      *s.rhs.sdims))))
        points = math.prod(extents.values())
        for c in conjuncts(s.rhs.pred) if nnz else ():
            if not isinstance(c, ast.RelCall) or c.name not in nnz:
                continue
            names = [a.terms[0][0] for a in c.args
                     if not a.const and len(a.terms) == 1 and a.terms[0][1] == 1]
            if len(names) == len(c.args) == len(set(names)) and set(names) <= set(extents):
                rest = math.prod(n for k, n in extents.items() if k not in names)
                points = min(points, nnz[c.name] * rest)
        work += points * (len(s.rhs.operands) + 1 if isinstance(s.rhs, tssa.SumRhs) else 1)
    return work


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


def dense_pass(rel: relation.Relation) -> bool:
    """Whether statements masked by `rel` run as a dense pass (see DENSE_RATIO)."""
    return rel.nnz * DENSE_RATIO >= math.prod(rel.shape)


def _mask_reads(source: str, args: tuple[tuple[str, Any], ...]) -> list[bool]:
    """Per kernel argument: False for a relation mask the kernel's code never reads (read from
    the module's text, so that neither engine needs Numba to know)."""
    kernel = _kernel_def(source)
    names = [a.arg for a in kernel.args.args]
    loads = {node.id for stmt in kernel.body for node in pyast.walk(stmt)
             if isinstance(node, pyast.Name) and isinstance(node.ctx, pyast.Load)}
    return [kind != "mask" or names[i] in loads for i, (kind, _) in enumerate(args)]


def _kernel_def(source: str) -> pyast.FunctionDef:
    return next(node for node in pyast.parse(source).body
                if isinstance(node, pyast.FunctionDef) and node.name == KERNEL)


def _kernel_params(source: str) -> list[str]:
    """The kernel's parameter names, in the order of its header's TL_ARGS."""
    return [a.arg for a in _kernel_def(source).args.args]


def _no_mask(arity: int) -> np.ndarray:
    """A stand-in for a mask no kernel code reads (the same Numba type as a mask)."""
    hit = _NO_MASK.get(arity)
    if hit is None:
        hit = _NO_MASK[arity] = relation.frozen_array(np.zeros((0,) * arity, dtype=np.bool_))
    return hit


_NO_MASK: dict[int, np.ndarray] = {}


_COMPILED: dict[tuple[str, str], CompiledProgram] = {}
_LOCK = threading.Lock()


def compile_program(p: Program, instrument: bool = False, *, jit: bool = True,
                    engine: str | None = None) -> CompiledProgram:
    """Compile a Tensor-SSA program for the CPU (kernels are cached in this process and on
    disk, keyed by `ssa_printer.to_text(p)`; see the module docstring).  `engine`: see
    `CompiledProgram` (nothing is compiled or imported here: each engine is loaded, or built,
    on the first call that runs on it).

    `jit=False` runs the generated code as plain Python (`prange` is `range`, builtins are
    the interpreter's numpy functions), without Numba and without the disk cache: slow,
    but it checks the code generator itself in milliseconds per program (tests, debugging).
    """
    heap.keep_freed_memory()    # a call's arrays reuse the last call's memory (heap.py)
    if box_stages.has_boxes(p):  # LAPACK between kernels (backends/box_stages.py)
        fixed = engine or os.environ.get(ENV_ENGINE)   # else large calls' kernels on the JIT
        return box_stages.StagedProgram(
            p, lambda q: compile_program(q, instrument, jit=jit, engine=engine),
            None if fixed or not jit else
            (lambda q: compile_program(q, instrument, jit=jit, engine="jit")), AOT_MAX_WORK)
    if not jit:
        source, consts = _abstract_source(p, instrument, jit=False)
        mod = types.ModuleType(f"tensorlang_kernels.python.{p.name}")
        exec(compile(source, f"<tensorlang kernel {p.name}>", "exec"), mod.__dict__)
        return CompiledProgram(p, instrument, source, "", mod, None, consts)
    setting = _engine_setting(engine, instrument, True)
    text = ssa_printer.to_text(p)
    key = kernel_cache.kernel_key(text, BACKEND, "instrumented" if instrument else "plain")
    with _LOCK:
        hit = _COMPILED.get((key, setting))
        if hit is not None and hit.program == p:
            return hit
        link = kernel_cache.load_link(BACKEND, key)
        if link is not None:
            module_key, consts = link
            source: Any = lambda: _abstract_source(p, instrument)[0]  # noqa: E731
        else:
            source, consts = _abstract_source(p, instrument)
            module_key = kernel_cache.kernel_key(source, BACKEND, "module")
        checked = kernel_cache.kernel_text(BACKEND, module_key, source,
                                           {"program": p.name, "instrumented": instrument})
        if link is None:
            kernel_cache.store_link(BACKEND, key, module_key, consts)
        path = kernel_cache.kernel_dir(BACKEND) / f"tl_{module_key}.py"
        out = CompiledProgram(p, instrument, checked, key, None, path, consts, module_key,
                              setting)
        _COMPILED[(key, setting)] = out
        return out


def _engine_setting(engine: str | None, instrument: bool, cached: bool) -> str:
    """The engine setting of a compiled program: the argument, else `$TENSORLANG_ENGINE`,
    else "auto"; an instrumented kernel runs on the JIT unless "aot" is asked for, and a
    plain-Python one (`jit=False`, no cache entry) has no image."""
    setting = engine or os.environ.get(ENV_ENGINE) or "auto"
    if setting not in ENGINES:
        raise TLError(f"unknown engine {setting!r} (${ENV_ENGINE}; engines: "
                      f"{', '.join(ENGINES)})")
    if not cached or (instrument and setting == "auto"):
        return "jit"
    return setting


def _type_key(kargs: list[Any]) -> str:
    """The kernel arguments' types (an AOT image is compiled for one signature)."""
    parts = []
    for a in kargs:
        if isinstance(a, np.ndarray):
            # read-only arrays (relations: semantics/relation.py) are their own Numba type
            parts.append(f"{a.dtype.str}{a.ndim}{'C' if a.flags.c_contiguous else 'A'}"
                         f"{'' if a.flags.writeable else 'R'}")
        else:
            parts.append("i" if isinstance(a, (int, np.integer)) else "f")
    return "s" + hashlib.sha256(",".join(parts).encode()).hexdigest()[:12]


def _abstract_source(p: Program, instrument: bool, jit: bool = True
                     ) -> tuple[str, tuple[float, ...]]:
    # The generator is imported only here: a cached kernel loads without it.
    from . import numba_cpu_source

    return numba_cpu_source.abstract_source(p, instrument, jit)
