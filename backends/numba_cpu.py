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

The kernel module is written to the disk cache (`backends/kernel_cache.py`) keyed by the
SSA text, and imported from there: a second process loads Numba's compiled code from the
cache instead of compiling.  With `instrument=True` the kernel also takes a counter array
and adds, per statement, the number of innermost loop iterations it executed (BLAS calls add
m*n*k); `CompiledProgram.last_counts` reports them after each call.
"""
from __future__ import annotations

import threading
import types
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.semantics import interp
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.ast import Affine
from tensorlang.syntax.errors import NotYetSupported
from tensorlang.ir.tssa import Program

from . import kernel_cache
from .codegen import (MASK, SIZE, VALUE, BlasPlan, ExprPrinter, Namer, ProgramPlan, StmtPlan,
                      num, plan_program, safe_comment)
from .codegen_nest import Assign, Facts, Guard, Lines, Loop, RelNames, Step, part_steps
from .scalar_builtins import FUNCS

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

__all__ = ["compile_program", "generated_source", "CompiledProgram", "plan_program"]


# ---------------------------------------------------------------------------------------------
# Source generation


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def block(self, depth: int, lines: Sequence[str]) -> None:
        for ln in lines:
            self.lines.append(INDENT * depth + ln)


@dataclass
class _Ctx:
    """Per-statement emission state."""

    tag: str
    acc: str              # the accumulator the innermost body adds to
    closers: list[tuple[int, list[str]]]
    cnt: str = ""         # the iteration counter the innermost body increments ("": none)


class NumbaEmitter:
    def __init__(self, plan: ProgramPlan, instrument: bool, jit: bool = True) -> None:
        self.plan = plan
        self.p = plan.program
        self.instrument = instrument
        self.jit = jit
        self.nm = Namer()
        self.counter = [0]
        self.rels = RelNames(lambda r: self.nm.get(MASK, r), self._pattern_names)
        self.ex = ExprPrinter(plan, self.nm, self.rels, self.counter, INDENT)
        self.w = _Writer()
        self.counted = {s.var: k for k, s in enumerate(plan.counted())}

    # -- names -------------------------------------------------------------------------------

    def _pattern_names(self, pattern: tuple[str, tuple[int, ...], int]) -> tuple[str, str]:
        k = self.plan.patterns.index(pattern)
        rel = pattern[0]
        return self.nm.get(f"rc{k}", rel), self.nm.get(f"rp{k}", rel)

    def index(self, n: str) -> str:
        return self.nm.get(SIZE, n) if n in self.plan.sizes else self.nm.index(n)

    def var(self, v: str) -> str:
        return self.nm.get(VALUE, v)

    def aff(self, a: Affine) -> str:
        return self.ex.idx(a)

    def dim(self, a: Affine) -> str:
        if a.is_const():
            return str(max(0, a.const))
        return f"max(0, {self.aff(a)})"

    def shape(self, dims: Sequence[Affine]) -> str:
        parts = [self.dim(d) for d in dims]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    # -- arguments ---------------------------------------------------------------------------

    def arguments(self) -> list[tuple[str, str, Any]]:
        """(kind, code name, key) of each kernel argument, in order."""
        args: list[tuple[str, str, Any]] = []
        for name in self.plan.sizes:
            args.append(("size", self.nm.get(SIZE, name), name))
        for s in self.plan.stmts:
            if s.mode == "input":
                args.append(("input", self.var(s.var), s.var))
        for q in self.p.params:
            if isinstance(q.type, A.TRel):
                args.append(("mask", self.nm.get(MASK, q.name), q.name))
        for pat in self.plan.patterns:
            coords, ptr = self._pattern_names(pat)
            args.append(("coords", coords, pat))
            if pat[2]:
                args.append(("ptr", ptr, pat))
        if self.instrument:
            args.append(("counts", COUNTS, None))
        return args

    # -- program -----------------------------------------------------------------------------

    def source(self) -> str:
        w = self.w
        args = self.arguments()
        used = sorted({s.rhs.fn for s in self.plan.stmts if isinstance(s.rhs, tssa.MapRhs)
                       and s.mode in ("loops", "fused")})
        blas = any(s.mode == "blas" for s in self.plan.stmts)
        w(0, f"# Generated by tensorlang's Numba CPU backend "
             f"(version {kernel_cache.backend_version()}). Do not edit.")
        w(0, "# Tensor-SSA program:")
        for line in ssa_printer.to_text(self.p).splitlines():
            w(0, "#   " + safe_comment(line))
        w(0, "import math")
        w(0, "")
        w(0, "import numpy as np")
        missing = [fn for fn in used if fn not in FUNCS]
        if missing:
            raise NotYetSupported(f"the Numba backend has no scalar implementation of "
                                  f"{', '.join(missing)} (backends/scalar_builtins.py)")
        helpers = [f"tl_{fn}" for fn in used] + (["tl_matmul"] if blas else [])
        if self.jit:
            w(0, "from numba import njit, prange")
            if helpers:
                w(0, "from tensorlang.backends.numba_rt import " + ", ".join(helpers))
        else:  # plain Python with the interpreter's builtins (debugging, fast tests)
            w(0, "from tensorlang.backends.numba_rt import python_njit as njit, "
                 "python_prange as prange")
            if helpers:
                w(0, "from tensorlang.backends.numba_rt import " +
                  ", ".join(f"python_{h[3:]} as {h}" for h in helpers))
        w(0, "")
        # What the caller passes and what the counters mean (a cached module is used as
        # written, even if a later generator would order things differently).
        w(0, "TL_ARGS = " + repr(tuple((kind, key) for kind, _, key in args)))
        w(0, "TL_COUNTED = " + repr(tuple(s.var for s in self.plan.counted())))
        w(0, f"TL_PARALLEL = {PARALLEL}  # prange loops only")
        w(0, "")
        w(0, "")
        deco = len(w.lines)
        w(0, "")   # the decorator, once we know whether there is a parallel loop
        w(0, f"def {KERNEL}({', '.join(a[1] for a in args)}):")
        body_start = len(w.lines)
        for s in self.plan.stmts:
            if s.mode in ("loops", "blas"):
                w(1, "# " + safe_comment(ssa_printer.fmt_stmt(tssa.Stmt(s.var, s.rhs))))
                if s.mode == "blas":
                    assert s.blas is not None
                    self.emit_blas(s, s.blas)
                else:
                    self.emit_loops(s)
        outs = [self.var(v) for v in self.p.output_vars()]
        w(1, f"return ({', '.join(outs)},)")
        # parallel=True without a prange only costs compile time (and a Numba warning)
        parallel = any("prange(" in ln for ln in w.lines[body_start:])
        w.lines[deco] = (f'@njit(parallel={"TL_PARALLEL" if parallel else "False"}, '
                         f'cache=True, error_model="numpy")')
        legend = self.nm.legend()
        if legend:
            note = ["    # renamed: " + ", ".join(f"{g} = {safe_comment(o)!r}"
                                                  for g, o in legend)]
            w.lines[body_start:body_start] = note
        return "\n".join(w.lines) + "\n"

    # -- BLAS --------------------------------------------------------------------------------

    def emit_blas(self, s: StmtPlan, b: BlasPlan) -> None:
        w, rhs, name = self.w, s.rhs, self.var(s.var)
        k = self._tag(s)
        ranges = rhs.ranges()

        def prod(names: Sequence[str]) -> str:
            return " * ".join(self.dim(ranges[n]) for n in names) or "1"

        m, n, kk = f"_m{k}", f"_n{k}", f"_k{k}"
        assert not s.scalar  # (the BLAS rule needs a generator index)
        w(1, f"{name} = np.zeros({self.shape(rhs.dims)})")
        w(1, f"{m} = {prod(b.i_left)}")
        w(1, f"{kk} = {prod(rhs.sum_names())}")
        w(1, f"{n} = {prod(b.i_right)}")
        w(1, f"if {m} > 0 and {n} > 0 and {kk} > 0:")
        left = self._blas_operand(b.left.var, b.left_perm, f"({m}, {kk})")
        right = self._blas_operand(b.right.var, b.right_perm, f"({kk}, {n})")
        prod_expr = f"tl_matmul({left}, {right})"
        if rhs.coeff != 1.0:
            prod_expr = f"{num(rhs.coeff)} * {prod_expr}"
        w(2, f"_p{k} = {prod_expr}")
        dims = [ranges[g] for g in b.i_left + b.i_right]
        res = f"_p{k}.reshape({self.shape(dims)})"
        if b.out_perm != tuple(range(len(b.out_perm))):
            res = f"np.ascontiguousarray({res}.transpose({_tuple(b.out_perm)}))"
        w(2, f"{name} = {res}")
        if self.instrument:
            w(1, f"{COUNTS}[{self.counted[s.var]}] += {m} * {n} * {kk}")

    def _blas_operand(self, var: str, perm: tuple[int, ...], shape: str) -> str:
        arr = self.var(var)
        if perm != tuple(range(len(perm))):
            arr = f"np.ascontiguousarray({arr}.transpose({_tuple(perm)}))"
        return f"{arr}.reshape({shape})"

    # -- loops -------------------------------------------------------------------------------

    def _tag(self, s: StmtPlan) -> str:
        return str(self.plan.stmts.index(s))

    def emit_loops(self, s: StmtPlan) -> None:
        w, rhs, name = self.w, s.rhs, self.var(s.var)
        tag = self._tag(s)
        cnt = f"_cnt{tag}"
        assert s.outer is not None and s.facts is not None
        outers = [(part, part_steps(part, self.index, self.rels, self.counter, INDENT,
                                    tag + ("o" if len(s.outer) == 1 else f"o{a}"),
                                    s.body_facts(part)))
                  for a, part in enumerate(s.outer)]
        direct = s.scalar and s.inner is None and len(outers) == 1 and not outers[0][1]
        if not direct:  # (a scalar computed unconditionally is assigned once, below)
            w(1, f"{name} = " + ("0.0" if s.scalar else
                                 f"np.zeros({self.shape(rhs.dims)})"))
        if self.instrument:
            w(1, f"{cnt} = 0")
        store = name if s.scalar else \
            f"{name}[{', '.join(self.index(g) for g in rhs.gen_names())}]"
        for a, (opart, osteps) in enumerate(outers):
            otag = tag if len(outers) == 1 else f"{tag}_{a}"
            ctx = _Ctx(otag, f"_acc{tag}", [], cnt if self.instrument else "")
            if s.inner is None:  # pointwise: one value per point
                depth = self.steps(osteps, 1, "prange", ctx)
                self.body(depth, store, "=", rhs, s.body_facts(opart), ctx.cnt, sums=False)
            else:
                mode = "prange" if opart.has_loop() else "seq"
                depth = self.steps(osteps, 1, mode, ctx)
                w(depth, f"{ctx.acc} = 0.0")
                for b, ipart in enumerate(s.inner):
                    itag = otag if len(s.inner) == 1 else f"{otag}_{b}"
                    isteps = part_steps(ipart, self.index, self.rels, self.counter, INDENT,
                                        itag + "i", s.body_facts(opart, ipart))
                    ictx = _Ctx(itag, ctx.acc, [], ctx.cnt)
                    idepth = self.steps(isteps, depth, "seq" if mode == "prange" else "chunk",
                                        ictx)
                    self.body(idepth, ictx.acc, "+=", rhs, s.body_facts(opart, ipart),
                              ictx.cnt, sums=True)
                    self.close(ictx)
                w(depth, f"{store} = {ctx.acc}")
            self.close(ctx)
        if self.instrument:
            w(1, f"{COUNTS}[{self.counted[s.var]}] += {cnt}")

    def body(self, depth: int, target: str, op: str, rhs: tssa.Rhs, facts: Facts, cnt: str,
             sums: bool) -> None:
        """The innermost statement: `target = value` or `target += term`."""
        self.ex.reset()
        pre: list[str] = []
        if sums:
            value = self.ex.product(rhs.coeff, rhs.operands, facts, pre, facts)
        else:
            value = self.ex.pointwise(rhs, {}, facts, pre, facts)
        self.w.block(depth, pre)
        self.w(depth, f"{target} {op} {value}")
        if cnt:
            self.w(depth, f"{cnt} += 1")

    def close(self, ctx: _Ctx) -> None:
        while ctx.closers:
            depth, lines = ctx.closers.pop()
            self.w.block(depth, lines)

    def steps(self, steps: list[Step], depth: int, mode: str, ctx: _Ctx) -> int:
        """Print `steps` from `depth`; the first loop is `prange` (mode "prange"), a chunked
        parallel reduction into `ctx.acc` (mode "chunk") or a plain loop ("seq")."""
        w = self.w
        first = True
        for st in steps:
            if isinstance(st, Guard):
                w.block(depth, st.pre)
                w(depth, f"if {st.code}:")
                depth += 1
            elif isinstance(st, Lines):
                w.block(depth, st.lines)
            elif isinstance(st, Assign):
                if st.div == 1:
                    w(depth, f"{st.var} = {st.expr}")
                else:
                    w(depth, f"if ({st.expr}) % {st.div} == 0:")
                    depth += 1
                    w(depth, f"{st.var} = ({st.expr}) // {st.div}")
            else:
                assert isinstance(st, Loop)
                if first and mode == "chunk":
                    depth = self._chunk_loop(st, depth, ctx)
                elif first and mode == "prange":
                    depth = self._parallel_loop(st, depth, ctx)
                else:
                    w(depth, f"for {st.var} in range({st.lo}, {st.stop}):")
                    depth += 1
                w.block(depth, st.head)
                first = False
        return depth

    def _parallel_loop(self, st: Loop, depth: int, ctx: _Ctx) -> int:
        """`for v in prange(lo, stop)`.  Instrumented, each iteration counts into its own
        slot of an array summed after the loop (a reduction variable updated inside guards
        and nested loops is not reliably recognised by Numba's parfor pass)."""
        w, t = self.w, ctx.tag
        if not ctx.cnt:
            w(depth, f"for {st.var} in prange({st.lo}, {st.stop}):")
            return depth + 1
        lo, slots, it = f"_plo{t}", f"_pcnt{t}", f"_it{t}"
        w(depth, f"{lo} = {st.lo}")
        w(depth, f"{slots} = np.zeros(max(0, {st.stop} - {lo}), np.int64)")
        w(depth, f"for {st.var} in prange({lo}, {st.stop}):")
        w(depth + 1, f"{it} = 0")
        ctx.closers.append((depth, [f"{ctx.cnt} += {slots}.sum()"]))
        ctx.closers.append((depth + 1, [f"{slots}[{st.var} - {lo}] = {it}"]))
        ctx.cnt = it
        return depth + 1

    def _chunk_loop(self, st: Loop, depth: int, ctx: _Ctx) -> int:
        """`for v in range(lo, stop)` as at most CHUNKS parallel partial sums added in chunk
        order: the result does not depend on the number of threads."""
        w, t = self.w, ctx.tag
        lo, n, nc, part, c, a = (f"_lo{t}", f"_len{t}", f"_nc{t}", f"_part{t}", f"_c{t}",
                                 f"_a{t}")
        slots, it = f"_ccnt{t}", f"_it{t}"
        if st.lo.lstrip("-").isdigit():
            lo = st.lo
        else:
            w(depth, f"{lo} = {st.lo}")
        w(depth, f"{n} = max(0, {st.stop}{'' if lo == '0' else f' - {lo}'})")
        w(depth, f"{nc} = max(1, min({CHUNKS}, {n} // {CHUNK_MIN}))")
        w(depth, f"{part} = np.zeros({nc})")
        if ctx.cnt:
            w(depth, f"{slots} = np.zeros({nc}, np.int64)")
        w(depth, f"for {c} in prange({nc}):")
        w(depth + 1, f"{a} = 0.0")
        if ctx.cnt:
            w(depth + 1, f"{it} = 0")
        off = "" if lo == "0" else f"{lo} + "
        w(depth + 1, f"for {st.var} in range({off}({c} * {n}) // {nc}, "
                     f"{off}(({c} + 1) * {n}) // {nc}):")
        after = [f"for _d{t} in range({nc}):", f"{INDENT}{ctx.acc} += {part}[_d{t}]"]
        inside = [f"{part}[{c}] = {a}"]
        if ctx.cnt:
            after.append(f"{ctx.cnt} += {slots}.sum()")
            inside.append(f"{slots}[{c}] = {it}")
            ctx.cnt = it
        ctx.closers.append((depth, after))
        ctx.closers.append((depth + 1, inside))
        ctx.acc = a
        return depth + 2


def _tuple(t: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, t)) + ("," if len(t) == 1 else "") + ")"


def generated_source(p: Program, instrument: bool = False, jit: bool = True) -> str:
    """The readable source of the kernel module for `p` (what `tl show --stage numba`
    prints); the same text `compile_program` caches and imports.  `jit=False`: the same
    code importing plain-Python stand-ins for Numba (see `compile_program`)."""
    return NumbaEmitter(plan_program(p), instrument, jit).source()


# ---------------------------------------------------------------------------------------------
# Compiled programs


class CompiledProgram:
    """A compiled Tensor-SSA program: call it with the interpreter's argument dict (or
    keywords); the result is a float, an array, or a tuple, as `interpret` returns."""

    def __init__(self, program: Program, instrument: bool, source: str, key: str,
                 module: Any, path: Any) -> None:
        self.program = program
        self.instrument = instrument
        self.source = source          # as generated now (the cached file may be older)
        self.key = key
        self.module = module
        self.kernel = getattr(module, KERNEL)
        self.path = path
        self._args: tuple[tuple[str, Any], ...] = module.TL_ARGS
        self._counted: list[str] = list(module.TL_COUNTED)
        self._sig = A.Def(program.name, program.params, program.ret, A.Const(0.0))
        self._inputs = program.inputs()
        self._rel_shapes = {q.name: q.type.sizes for q in program.params
                            if isinstance(q.type, A.TRel)}
        self.last_counts: dict[str, int] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program.name} (numba cpu{', instrumented' * self.instrument})>"

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        env = interp.bind_args(self._sig, given)
        kargs, counts = self._marshal(env)
        out = self.kernel(*kargs)
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
                    pats[key] = _pattern_arrays(env.rels[key[0]], tuple(key[1]), key[2])
                values.append(pats[key][0 if kind == "coords" else 1])
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

    # -- cache statistics --------------------------------------------------------------------

    def cache_stats(self) -> dict[str, int]:
        """Numba's counts for this kernel in this process: `hits` (loaded from the disk
        cache) and `misses` (compiled here)."""
        st = getattr(self.kernel, "stats", None)
        if st is None:
            return {"hits": 0, "misses": 0}
        return {"hits": int(sum(st.cache_hits.values())),
                "misses": int(sum(st.cache_misses.values()))}


def _pattern_arrays(mask: np.ndarray, order: tuple[int, ...], nbound: int
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
    if not jit:
        source = generated_source(p, instrument, jit=False)
        mod = types.ModuleType(f"tensorlang_kernels.python.{p.name}")
        exec(compile(source, f"<tensorlang kernel {p.name}>", "exec"), mod.__dict__)
        return CompiledProgram(p, instrument, source, "", mod, None)
    text = ssa_printer.to_text(p)
    key = kernel_cache.kernel_key(text, BACKEND, "instrumented" if instrument else "plain")
    with _LOCK:
        hit = _COMPILED.get(key)
        if hit is not None and hit.program == p:
            return hit
        source = generated_source(p, instrument)
        mod, path = kernel_cache.load_kernel_module(
            BACKEND, key, source, {"program": safe_comment(p.name), "instrumented": instrument})
        out = CompiledProgram(p, instrument, source, key, mod, path)
        _COMPILED[key] = out
        return out
