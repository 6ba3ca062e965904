"""The Numba CUDA backend (SPEC 8): Tensor SSA -> one `numba.cuda.jit` kernel per (fused)
statement, one thread per output element, no atomics.

    available() -> bool                        a GPU, or the CUDA simulator, can run kernels
    compile_program(p: tssa.Program) -> CompiledProgram
    generated_source(p) -> str                 the readable kernel module
    compile_ptx_kernels(p, cc=(8, 0)) -> dict  every kernel compiled to PTX (NVVM, no GPU)

The decisions are the CPU backend's (`backends/codegen.py`: fusion of pointwise statements
used once into their consumer, zero-extension guards only where the index solver's facts do
not prove a read in range, the expression printer, identifier mangling; `codegen_nest.py`:
the summation loop nests from the index solver, relation coordinate lists as loop drivers).
What differs is the outer part of a statement, the generator indices I:

  * kernel `tl_k<n>` computes statement `v = gen I. sum J. [P] * ...` for the points of the
    box I, one thread each: thread `t = cuda.grid(1)` decodes its point row-major from t
    (`i_last = t % n_last`, ...), evaluates the conjuncts of P that do not mention J as a
    guard, runs the summation nest over J (index-solver bounds, relation drivers, guards)
    sequentially, and writes exactly its own element `v[i0, i1, ...]` (0.0 where the guard
    fails).  No thread reads what another writes, so there are no atomics and no races;
    the output array needs no zero fill.
  * a scalar statement is a one-thread kernel writing `v[0]`.  (A reduction to a scalar
    therefore runs on one GPU thread: SPEC 8 asks for one thread per output element.)

Launch configuration: a 1-D grid, `THREADS` (128) threads per block, or fewer when the
output has fewer elements; `ceil(elements / threads)` blocks; no launch for an empty output.
Kernels run in statement order on the default stream, so each sees its producers' results.

Data: every array stays on the device from its transfer (inputs) or allocation (statement
results, `cuda.device_array`, C order, float64) until the results are copied back at the end.
Sizes are int64 kernel arguments; real scalars (inputs and scalar statements) are 1-element
float64 device arrays, loaded once per thread (`v_x = s_x[0]`); a relation is passed as its
dense boolean mask (membership tests, bounds-checked) and, where a loop iterates it, as the
int64 coordinate list sorted by the known arguments plus a CSR row pointer (the CPU
backend's `pattern_arrays`).  A kernel receives only the arguments its body uses.

Builtins are the CPU backend's plain `math` code (`backends/scalar_builtins.py`) made
kernel-callable with `register_jitable`; generated modules import them from this module
(`from tensorlang.backends.numba_cuda import tl_exp`).  Integer `max`/`min` of loop bounds
become `tl_imax`/`tl_imin`: numba.cuda's builtin `max`/`min` are `*args` overloads that its
device-function compiler rejects (found by the PTX check below).  Under the simulator, which
runs kernels as Python, a builtin that would raise (`1/0`, `log(0)`, `exp(1000)`) gives
numpy's value (inf/nan), which is what the hardware computes.

`compile_ptx_kernels(p)` compiles every kernel with numba's real CUDA target to PTX (NVVM
from a CUDA toolkit; no GPU needed): the check that the generated code types and lowers for
hardware, which the simulator (plain Python) cannot give.

Kernel modules are written to the shared disk cache (`backends/kernel_cache.py`, backend
folder `numba_cuda`) keyed by the SSA text and the generator's sources, and compiled with
`cuda.jit(cache=True)`, so a second process on a GPU loads the compiled kernels.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import pathlib
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import interp, relation
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.ast import TRel
from tensorlang.ir.tssa import Program

from tensorlang.syntax.errors import NotYetSupported

from . import accumulate, box_stages, kernel_cache
from .codegen import MASK, SIZE, ProgramPlan, StmtPlan, plan_program, safe_comment
from .codegen_nest import part_steps, pred_code
from .numba_cpu import INDENT, check_index_array, pattern_arrays
from .numba_cpu_source import LoopContext, NumbaEmitter, SourceWriter
from .scalar_builtins import FUNCS

BACKEND = "numba_cuda"
THREADS = 128
SCALAR = "s"          # Namer role of the 1-element device arrays holding scalars
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MINMAX = re.compile(r"\b(max|min)\(")   # only the Python builtins: program names are mangled

__all__ = ["available", "compile_program", "generated_source", "compile_ptx_kernels",
           "CompiledProgram", "THREADS"]


def available() -> bool:
    """True when kernels can run here: a CUDA GPU, or the simulator
    (`NUMBA_ENABLE_CUDASIM=1` set before numba was imported)."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # no numba.cuda, or a broken driver installation
        return False


def simulating() -> bool:
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


# ---------------------------------------------------------------------------------------------
# Source generation


@dataclass(frozen=True)
class KernelInfo:
    name: str                           # the kernel's function name in the module
    var: str                            # the statement variable it writes
    args: tuple[tuple[str, Any], ...]   # (kind, key): size/array/scalar/mask/coords/ptr/out


class CudaEmitter(NumbaEmitter):
    """The CPU emitter's names, expression printer and step printer, with one kernel per
    statement instead of one function for the program."""

    neumaier_call = False   # (device code: the merges stay inline)
    relation_layouts = False   # (one dense array per statement, allocated by the host)
    blocked_sums = False       # (one thread per output point: its sums stay counted)
    nonneg_members = False     # (numba_rt.tl_nonneg is a CPU intrinsic)
    outline_parallel_bodies = False   # (a CPU kernel's prange loops)

    def __init__(self, plan: ProgramPlan) -> None:
        super().__init__(plan, instrument=False)
        self.kernels: list[KernelInfo] = []

    def source(self) -> str:
        out: list[str] = [
            "# Generated by tensorlang's Numba CUDA backend "
            f"(version {backend_version()}). Do not edit.",
            "# One kernel per statement, one thread per output element (1-D grid).",
            "# Tensor-SSA program:"]
        out += ["#   " + safe_comment(line) for line in ssa_printer.to_text(self.p).splitlines()]
        kernels: list[str] = []
        for s in self.plan.stmts:
            if s.mode == "loops":
                kernels += ["", ""] + self.kernel(s, len(self.kernels))
            else:
                assert s.mode in ("input", "fused"), s.mode   # BLAS is off for CUDA
        used = sorted(set(_TOKEN.findall("\n".join(kernels))) & set(HELPERS))
        out += ["import math", "", "from numba import cuda"]
        if used:
            out.append("from tensorlang.backends.numba_cuda import " + ", ".join(used))
        legend = self.nm.legend()
        if legend:
            out.append("# renamed: " + ", ".join(f"{g} = {safe_comment(o)!r}"
                                                 for g, o in legend))
        out += ["", "# (kernel, variable written, arguments (kind, key)) in launch order",
                "TL_KERNELS = " + repr(tuple((k.name, k.var, k.args) for k in self.kernels))]
        return "\n".join(out + kernels) + "\n"

    # -- one kernel --------------------------------------------------------------------------

    def kernel(self, s: StmtPlan, number: int) -> list[str]:
        rhs, tag = s.rhs, str(number)
        self.w = w = SourceWriter()
        dims = [self.dim(d) for d in rhs.dims]
        gens = [self.index(g) for g in rhs.gen_names()]
        w(1, "_t = cuda.grid(1)")
        for k, d in enumerate(dims):
            w(1, f"_d{k} = {d}")
        w(1, f"if _t < {' * '.join(f'_d{k}' for k in range(len(dims))) or '1'}:")
        loads_at = len(w.lines)
        if len(gens) > 1:  # the thread's point of the box I, row-major
            w(2, "_r = _t")
            for k in reversed(range(1, len(gens))):
                w(2, f"{gens[k]} = _r % _d{k}")
                w(2, f"_r = _r // _d{k}")
        if gens:
            w(2, f"{gens[0]} = {'_r' if len(gens) > 1 else '_t'}")
        if s.outer:   # else no feasible nest over I: the mask never holds, all zeros
            self.thread_body(s, tag)
        else:
            w(2, "_val = 0.0")
        store = f"{self.nm.get(SCALAR, s.var)}[0]" if s.scalar else \
            f"{self.var(s.var)}[{', '.join(gens)}]"
        w(2, f"{store} = _val")
        args, loads = self.signature(s, w.lines)
        w.lines[loads_at:loads_at] = [INDENT * 2 + ln for ln in loads]
        # numba.cuda's builtin max/min take *args, which its device-function compiler
        # rejects: integer bounds (the dims above, the index solver's) use inline helpers.
        w.lines = [_MINMAX.sub(r"tl_i\1(", ln) for ln in w.lines]
        name = f"tl_k{number}"
        self.kernels.append(KernelInfo(name, s.var, tuple((kind, key) for kind, _, key in args)))
        head = ["# " + safe_comment(ssa_printer.fmt_stmt(tssa.Stmt(s.var, rhs))),
                "@cuda.jit(cache=True)",
                f"def {name}({', '.join(code for _, code, _ in args)}):"]
        return head + w.lines

    def thread_body(self, s: StmtPlan, tag: str) -> None:
        """`_val = <value>` under the guard of the mask's conjuncts over I; for a sum,
        `_acc` accumulates over the J nests of the plan (alternatives that together visit
        each point of J's conjuncts once)."""
        rhs, w = s.rhs, self.w
        assert s.facts is not None
        snames = set(rhs.sum_names())
        outer = [c for c in tssa.conjuncts(rhs.pred) if not (ast.free_names(c) & snames)]
        ctx = LoopContext(tag, "_acc", [])
        guard = [pred_code(outer, self.index, self.rels, self.counter, INDENT)] if outer else []
        if guard:
            w(2, "_val = 0.0")
        depth = self.steps(guard, 2, "seq", ctx)
        if s.inner is None:
            self.body(depth, "_val", "=", rhs, s.facts, "", sums=False)
        elif isinstance(rhs, tssa.ExtremeRhs):
            w.block(depth, accumulate.extreme_init("_acc", rhs.op))
            for b, part in enumerate(s.inner):
                steps = part_steps(part, self.index, self.rels, self.counter, INDENT,
                                   f"{tag}i{b}")
                ictx = LoopContext(f"{tag}_{b}", "_acc", [])
                idepth = self.steps(steps, depth, "seq", ictx)
                self.body(idepth, "_acc", rhs.op, rhs, s.facts.add(part.conj), "", sums=True)
                self.close(ictx)
            w(depth, "_val = _acc")
        else:
            w.block(depth, accumulate.init("_acc"))
            for b, part in enumerate(s.inner):
                steps = part_steps(part, self.index, self.rels, self.counter, INDENT,
                                   f"{tag}i{b}")
                ictx = LoopContext(f"{tag}_{b}", "_acc", [])
                idepth = self.steps(steps, depth, "seq", ictx)
                self.body(idepth, "_acc", "+=", rhs, s.facts.add(part.conj), "", sums=True)
                self.close(ictx)
            close, total = accumulate.result("_acc", INDENT)
            w.block(depth, close)
            w(depth, f"_val = {total}")
        self.close(ctx)

    def signature(self, s: StmtPlan, lines: list[str]
                  ) -> tuple[list[tuple[str, str, Any]], list[str]]:
        """The kernel's parameters (kind, code name, key) -- the names its body uses, then
        its output -- and the loads of the scalars it reads."""
        code = [ln for ln in lines if not ln.lstrip().startswith("#")]
        used = set(_TOKEN.findall("\n".join(code)))
        args: list[tuple[str, str, Any]] = []
        loads: list[str] = []
        for n in self.plan.sizes:
            if self.nm.get(SIZE, n) in used:
                args.append(("size", self.nm.get(SIZE, n), n))
        for t in self.plan.stmts:
            if t.mode not in ("input", "loops") or t.var == s.var \
                    or self.var(t.var) not in used:
                continue
            if t.scalar:
                buf = self.nm.get(SCALAR, t.var)
                args.append(("scalar", buf, t.var))
                loads.append(f"{self.var(t.var)} = {buf}[0]")
            else:
                args.append(("array", self.var(t.var), t.var))
        for q in self.p.params:
            if isinstance(q.type, TRel) and self.nm.get(MASK, q.name) in used:
                args.append(("mask", self.nm.get(MASK, q.name), q.name))
        for pat in self.plan.patterns:
            coords, ptr = self._pattern_names(pat)
            if coords in used:
                args.append(("coords", coords, pat))
            if ptr in used:
                args.append(("ptr", ptr, pat))
        out = self.nm.get(SCALAR, s.var) if s.scalar else self.var(s.var)
        args.append(("out", out, s.var))
        return args, loads


def _plan(p: Program) -> ProgramPlan:
    # No BLAS: every contraction is a kernel of its own (no np.dot on the device).
    return plan_program(p, use_blas=False)


def generated_source(p: Program) -> str:
    """The readable source of the kernel module for `p` (what `compile_program` caches and
    imports)."""
    return CudaEmitter(_plan(p)).source()


@lru_cache(maxsize=1)
def backend_version() -> str:
    """The shared generator version plus a hash of this file."""
    own = pathlib.Path(__file__).read_bytes()
    return hashlib.sha256(kernel_cache.backend_version().encode() + own).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Device functions of the builtins (imported by generated modules: PEP 562 module getattr)


def _imax(a: int, b: int) -> int:
    return a if a > b else b


def _imin(a: int, b: int) -> int:
    return a if a < b else b


# Helpers generated code may import: the builtins (float semantics of tensorlang.semantics.builtins)
# and integer max/min for loop bounds.
HELPERS: dict[str, Callable[..., Any]] = {f"tl_{fn}": f for fn, f in FUNCS.items()}
HELPERS.update(tl_imax=_imax, tl_imin=_imin)
_DEVICE: dict[str, Any] = {}
_DEVICE_LOCK = threading.Lock()


def __getattr__(name: str) -> Any:
    if name in HELPERS:   # PEP 562: `from tensorlang.backends.numba_cuda import tl_exp`
        return device_function(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def device_function(name: str) -> Any:
    """Helper `name` for kernels (made once per process): `register_jitable`, which the
    CUDA target compiles into the kernels that call it; under the simulator a plain Python
    function, with IEEE results for the builtins."""
    with _DEVICE_LOCK:
        hit = _DEVICE.get(name)
        if hit is None:
            py = HELPERS[name]
            if simulating():
                hit = _ieee(py, name[3:]) if name[3:] in FUNCS else py
            else:
                from numba.extending import register_jitable
                hit = register_jitable(py)
            _DEVICE[name] = hit
        return hit


def _ieee(py: Callable[..., float], fn: str) -> Callable[..., float]:
    """For the simulator: Python's `math` raises where the GPU returns inf/nan; then take
    the value from the interpreter's numpy implementation."""
    from tensorlang.semantics import builtins
    nargs = ast.BUILTINS[fn][0]

    def run(*args: float) -> float:
        try:
            return py(*args)
        except (ArithmeticError, ValueError):
            ops = [np.float64(a) for a in args[:nargs]]
            return float(builtins.apply(fn, ops, [float(c) for c in args[nargs:]]))

    run.__name__ = py.__name__
    return run


# ---------------------------------------------------------------------------------------------
# Compiled programs


class CompiledProgram:
    """A compiled Tensor-SSA program: call it with the interpreter's argument dict (or
    keywords); the result is a float, an array, or a tuple, as `interpret` returns."""

    def __init__(self, program: Program, source: str, key: str, module: Any, path: Any
                 ) -> None:
        self.program = program
        self.source = source          # as generated now (the cached file is the same text)
        self.key = key
        self.module = module
        self.path = path
        self.kernels: list[tuple[Any, KernelInfo]] = [
            (getattr(module, name), KernelInfo(name, var, args))
            for name, var, args in module.TL_KERNELS]
        self._sig = ast.Def(program.name, program.params, program.ret, ast.Const(0.0))
        self._inputs = program.inputs()

    def __repr__(self) -> str:
        mode = "simulator" if simulating() else "gpu"
        return f"<CompiledProgram {self.program.name} (numba cuda, {mode})>"

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        from numba import cuda
        env = interp.bind_args(self._sig, dict(args or {}, **kwargs))
        for q in self.program.params:
            if q.name in env.rels:
                check_index_array(q.name, q.type, relation.from_value(
                    env.rels[q.name], tuple(env.rels[q.name].shape)))
        dev: dict[str, Any] = {v: cuda.to_device(self._input(env, v)) for v in self._inputs}
        extra: dict[tuple[str, Any], Any] = {}   # masks and relation patterns, on demand
        for kernel, info in self.kernels:
            shape = self._shape(info.var, env.sizes)
            out = cuda.device_array(shape or (1,), dtype=np.float64)
            total = math.prod(shape)
            if total:
                values = [self._arg(kind, key, env, dev, extra, out) for kind, key in info.args]
                threads = min(THREADS, total)
                kernel[(total + threads - 1) // threads, threads](*values)
            dev[info.var] = out
        return self._result(dev)

    def _shape(self, var: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(max(0, int(d.evaluate(sizes))) for d in self.program.shapes[var])

    def _arg(self, kind: str, key: Any, env: interp.Env, dev: dict[str, Any],
             extra: dict[tuple[str, Any], Any], out: Any) -> Any:
        from numba import cuda
        if kind == "size":
            return int(env.sizes[key])
        if kind in ("array", "scalar"):
            return dev[key]
        if kind == "out":
            return out
        hit = extra.get((kind, key))
        if hit is None:
            if kind == "mask":
                hit = cuda.to_device(np.ascontiguousarray(env.rels[key], dtype=np.bool_))
            else:
                rel, order, nbound = key
                coords, ptr = pattern_arrays(env.rels[rel], tuple(order), nbound)
                hit = cuda.to_device(coords if kind == "coords" else ptr)
            extra[(kind, key)] = hit
        return hit

    def _input(self, env: interp.Env, var: str) -> np.ndarray:
        rhs = self._inputs[var]
        v = env.vals[rhs.param][0]
        for k in rhs.path:
            v = v[k]
        arr = np.asarray(v, dtype=np.float64)
        return np.ascontiguousarray(arr.reshape(1) if arr.ndim == 0 else arr)

    def _result(self, dev: Mapping[str, Any]) -> Any:
        def build(o: tssa.Out) -> Any:
            if not isinstance(o, str):
                return tuple(build(c) for c in o)
            host = dev[o].copy_to_host()   # a fresh array per output leaf: no aliasing
            return float(host[0]) if not self.program.shapes[o] else host

        return build(self.program.output)


_COMPILED: dict[str, CompiledProgram] = {}
_LOCK = threading.Lock()


def compile_program(p: Program) -> CompiledProgram:
    """Compile a Tensor-SSA program to CUDA kernels (cached in this process and on disk,
    keyed by `ssa_printer.to_text(p)`)."""
    if box_stages.has_boxes(p):
        names = sorted({s.rhs.fn for s in p.stmts if isinstance(s.rhs, tssa.BoxRhs)})
        raise NotYetSupported(f"{p.name}: the CUDA backend has no linear-algebra boxes yet "
                              f"({', '.join(names)}: cuSOLVER is not wired in); compile with "
                              "backend='numba' (LAPACK between kernels) or backend='jax'")
    text = ssa_printer.to_text(p)
    key = kernel_cache.kernel_key(text, BACKEND, backend_version())
    with _LOCK:
        hit = _COMPILED.get(key)
        if hit is not None and hit.program == p:
            return hit
        source = generated_source(p)
        mod, path = kernel_cache.load_kernel_module(
            BACKEND, key, source, {"program": safe_comment(p.name)})
        out = CompiledProgram(p, source, key, mod, path)
        _COMPILED[key] = out
        return out


# ---------------------------------------------------------------------------------------------
# PTX: check the kernels against the real CUDA target without a GPU


def compile_ptx_kernels(p: Program, cc: tuple[int, int] = (8, 0)) -> dict[str, str]:
    """Every kernel of `p` compiled to PTX for compute capability `cc`, with the argument
    types `CompiledProgram` launches it with: numba's real CUDA target (typing, lowering,
    NVVM), not the simulator.  Needs a CUDA toolkit (NVVM, libdevice), not a GPU: numba
    compiles the helpers a kernel calls for "the current device", which here is stood in
    for by one of compute capability `cc`.  Returns kernel name -> PTX."""
    if simulating():
        raise RuntimeError("compile_ptx_kernels needs the real CUDA target, not the simulator")
    from numba import cuda, types
    c = compile_program(p)
    out: dict[str, str] = {}
    with _assumed_device(cc):
        for kernel, info in c.kernels:
            sig = tuple(_arg_type(kind, key, p, types) for kind, key in info.args)
            out[info.name] = cuda.compile_ptx(kernel.py_func, sig, cc=cc)[0]
    return out


@contextlib.contextmanager
def _assumed_device(cc: tuple[int, int]) -> Iterator[None]:
    from numba import cuda
    from numba.cuda import dispatcher
    if cuda.is_available():
        yield
        return

    class Device:
        compute_capability = cc

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = Device
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def _arg_type(kind: str, key: Any, p: Program, types: Any) -> Any:
    if kind == "size":
        return types.int64
    if kind in ("coords", "ptr"):
        return types.Array(types.int64, 2 if kind == "coords" else 1, "C")
    if kind == "mask":
        return types.Array(types.boolean, len(p.param_types[key].sizes), "C")
    return types.Array(types.float64, max(1, len(p.shapes[key])), "C")

