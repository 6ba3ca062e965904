"""Source generation of the Numba CPU backend: Tensor SSA -> the text of a kernel module
(docs/backends.md).  Split from `numba_cpu.py` so that loading a cached kernel does not
import the code generator and the index solver (start-up, docs/caching.md)."""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tensorlang.ir import ast, tssa
from tensorlang.ir.ast import Affine, Pred, PTrue
from tensorlang.ir.tssa import Program
from tensorlang.syntax import ssa_printer
from tensorlang.syntax.errors import NotYetSupported

from .codegen import (BUILTIN_PREFIX, MASK, SIZE, VALUE, BlasPlan, ExprPrinter, Namer,
                      ProgramPlan, RowPanel, StmtPlan, builtins_used, num, panel_code,
                      plan_program, plan_reads, safe_comment)
from .codegen_nest import (Assign, Facts, Guard, Lines, Loop, Part, RelNames, Step, part_steps,
                           pred_code)
from .gram import GramForm
from . import accumulate, kernel_cache, kernel_split, prange_bodies, sibling_fusion
from .common import allocation, storage
from .numba_cpu import (CHUNK_MIN, CHUNKS, CONSTS, COUNTS, DENSE_RATIO, INDENT, KERNEL,
                        PARALLEL)
from .scalar_builtins import FUNCS

# the mask argument of the statements' dense passes (`storage.dense_pass_candidates`)
DENSE_MASK = "rd"

__all__ = ["NumbaEmitter", "module_source", "abstract_source", "plan_program"]

# Kernels whose body is longer than SPLIT_LINES lines are cut into parts of about PART_LINES
# lines that Numba compiles one by one: its compile time grows faster than linearly with the
# size of a function (docs/backends.md, "Compile time").
SPLIT_LINES = 400
PART_LINES = 150
# Numba's parallel lowering costs about 0.3-0.5 s of compile time per `prange` loop (measured:
# a part with 18 loops, 8.0 s parallel, 2.3 s serial).  A kernel with more loops than this
# compiles serially (`prange` runs as `range`; the chunked reductions give the same sums).
# A loop that statements share (sibling_fusion) counts once per statement: its parallel
# region carries all their bodies, and a kernel whose nests are shared is no cheaper to
# lower in parallel than the same kernel with a nest per statement.
MAX_PARALLEL_LOOPS = 48
# A kernel with more distinct float constants than this keeps them as literals: each
# `tl_c[k]` read costs Numba about 2 ms of compile time, twice what a statement costs (a
# chain of 10,000 statements `y = y * 0.5 + x[k]`, each 0.5 a `tl_c` element of its own
# before equal constants shared one, compiled in 136 s), and a program that long gains
# nothing from sharing its module with programs differing only in constants.
MAX_CONSTANT_ARGS = 1_000
# Rows per strip of a row-panel product's reader where the product is stored whole (the
# strips then only set the parallel grain).
STRIP_ROWS = 16
# Points per block of a sum run by rows that reads its terms down a column
# (`NumbaEmitter._column_blocked`): each term's row is read over a run of this many points.
COLUMN_BLOCK = 16
COLUMN_ROWS = 32


class SourceWriter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def block(self, depth: int, lines: Sequence[str]) -> None:
        for ln in lines:
            self.lines.append(INDENT * depth + ln)


@dataclass
class LoopContext:
    """Per-statement emission state."""

    tag: str
    acc: str              # the accumulator the innermost body adds to
    closers: list[tuple[int, list[str]]]
    # the iteration counters of the statements whose bodies run in this nest (one but in a
    # nest of siblings; none: not instrumented)
    cnts: list[str] = field(default_factory=list)
    # a sum whose innermost plain loop may run as blocks (accumulate.block_loop); once it
    # does, the target of its terms ("": the counted `acc += term`) and the lines between
    # that body and the counted one (of a short loop)
    block: bool = False
    target: str = ""
    test_line: int = -1   # the line testing the loop's length against accumulate.SHORT_CHEAP
    inner_line: int = -1  # the loop over a block's terms
    loop: Loop | None = None   # the blocked loop (its head is the short case's too)
    middle: list[str] = field(default_factory=list)

    @property
    def cnt(self) -> str:
        """The counter of the statement (the only one), "" when not instrumented."""
        return self.cnts[0] if self.cnts else ""


class NumbaEmitter:
    # sums merge their blocks through `numba_rt.tl_neumaier` (accumulate.merge)
    neumaier_call = True
    # relation-masked statements as coordinate vectors and dense passes (`common.storage`;
    # the CPU kernel's allocation and loops)
    relation_layouts = True
    # a sum's innermost plain loop runs as blocks of vectorisable terms (accumulate.block_loop)
    blocked_sums = True
    # coordinate loops read their members through `numba_rt.tl_nonneg` (`RelNames.nonneg`)
    nonneg_members = True
    # each prange loop's body is a function of its own (backends/prange_bodies.py)
    outline_parallel_bodies = True
    # a block of a sum computes its logs as `tl_log_normal`, again with `tl_log` when an
    # argument is outside (`_block_again`)
    fast_logs = True

    def __init__(self, plan: ProgramPlan, instrument: bool, jit: bool = True,
                 constants: bool = False) -> None:
        self.plan = plan
        self.p = plan.program
        self.instrument = instrument
        self.jit = jit
        # constants=True: float literals of the kernel become the argument `tl_c` (see
        # `abstract_constants`); `self.constants` lists their values, in slot order.
        self.constants_as_args = constants
        self.constants: list[float] = []
        self.nm = Namer()
        self.counter = [0]
        self.rels = RelNames(lambda r: self.nm.get(MASK, r), self._pattern_names,
                             plan.rel_dims, plan.patterns, plan.sizes,
                             accumulate.NONNEG if self.nonneg_members else "")
        self.ex = ExprPrinter(plan, self.nm, self.rels, self.counter, INDENT)
        if self.relation_layouts:
            self.ex.layouts = storage.coordinate_layouts(plan)
        # statements that choose per call between a dense pass and their coordinate loop
        # (instrumented kernels count the coordinate loop's iterations: SPEC 3's cost)
        self.dense = {} if instrument or not self.relation_layouts else \
            storage.dense_pass_candidates(plan, self.ex.layouts)
        self.w = SourceWriter()
        self.counted = {s.var: k for k, s in enumerate(plan.counted())}
        self.shared_loops = 0   # prange loops that n statements share count n - 1 times here
        # the statements whose nest is being printed, and the coordinate vectors computed
        # in their readers' loops (`source`)
        self.emitting: list[StmtPlan] = []
        self.inline: dict[str, str] = {}
        # a statement's position, its tag in local names (a dict: `list.index` is quadratic)
        self.positions = {s.var: k for k, s in enumerate(plan.stmts)}
        self._readers: dict[str, list[tuple[str, tuple[Any, ...]]]] | None = None
        # products computed in their reader's row loop (`codegen.RowPanel`; instrumented
        # kernels store them, as BLAS products, and count that), and while a reader's nest
        # is printed, its panels by the code name of the row loop (`_strip_loop`)
        self.row_panels: dict[str, RowPanel] = {} if instrument else dict(plan.panels)
        self.strips: dict[str, RowPanel] = {}
        # BLAS outside row panels, and when each row-panel product runs in panels (as code
        # of the size arguments): the kernel's threads at given sizes (`TL_BLAS`)
        self.blas_whole = False
        self.panel_tests: list[str] = []

    # -- names -------------------------------------------------------------------------------

    def _pattern_names(self, pattern: tuple[str, tuple[int, ...], int]) -> tuple[str, str]:
        k = self.plan.patterns.index(pattern)
        rel = pattern[0]
        return self.nm.get(f"rc{k}", rel), self.nm.get(f"rp{k}", rel)

    def index(self, n: str) -> str:
        if n in self.ex.rename:
            return self.ex.rename[n]
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
            if isinstance(q.type, ast.TRel):
                args.append(("mask", self.nm.get(MASK, q.name), q.name))
        for q in self.p.params:
            if q.name in self.dense.values():
                args.append(("dmask", self.nm.get(DENSE_MASK, q.name), q.name))
        for pat in self.plan.patterns:
            coords, ptr = self._pattern_names(pat)
            args.append(("coords", coords, pat))
            if pat[2]:
                args.append(("ptr", ptr, pat))
        if self.instrument:
            args.append(("counts", COUNTS, None))
        if self.constants_as_args:
            args.append(("consts", CONSTS, None))
        return args

    # -- program -----------------------------------------------------------------------------

    def source(self) -> str:
        w = self.w
        args = self.arguments()
        used = sorted(set().union(*(builtins_used(s.rhs) for s in self.plan.stmts
                                    if s.mode in ("loops", "fused"))))
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
        sums = any(s.mode == "loops" and s.inner is not None and
                   not isinstance(s.rhs, tssa.ExtremeRhs) for s in self.plan.stmts)
        gram = any(s.gram is not None for s in self.plan.stmts)
        helpers = [f"tl_{fn}" for fn in used] + (["tl_matmul"] if blas else []) + \
            (["tl_log_normal", "tl_log_outside"] if "log" in used and sums and
             self.blocked_sums and self.fast_logs else []) + \
            (["tl_matmul_into"] if self.row_panels else []) + \
            (["tl_gram"] if gram else []) + \
            ([accumulate.NEUMAIER] if sums and self.neumaier_call else []) + \
            ([accumulate.BLOCK_BUFFER, accumulate.ROW_BUFFER, accumulate.NONNEG,
              accumulate.BLOCK_CLOSE] if sums and self.blocked_sums else []) + \
            ([accumulate.NONNEG] if self.plan.patterns and self.rels.nonneg and
             not (sums and self.blocked_sums) else [])
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
        self.ex.hoistable = frozenset(s.var for s in self.plan.stmts if s.mode == "input")
        by_rows = self.row_grouped()
        # (a row's sums over a few static terms, nbody's three coordinates, may share)
        units = sibling_fusion.schedule(
            self.plan, alone=self.walks_by_rows(by_rows),
            exact=frozenset(v for v in by_rows
                            if not sibling_fusion.few_terms(self.plan.by_var[v])))
        # coordinate vectors computed in their reader's loop (instrumented: each statement
        # counts its own iterations)
        self.inline = {} if self.instrument else storage.inlined_coordinates(
            self.plan, self.ex.layouts, [u[0].var for u in units if len(u) == 1], by_rows)
        self.row_panels = {v: rp for v, rp in self.row_panels.items()
                           if rp.consumer not in self.inline}
        self.ex.panelled = frozenset(self.row_panels)
        # the arrays this kernel allocates, for the memory estimate of a call (read as text)
        arrays = allocation.kernel_arrays(self.plan, units, self.ex.layouts, self.inline,
                                          self._reads_of())
        w.lines.insert(deco - 3, "TL_ARRAYS = " + repr(tuple(a.literal() for a in arrays)))
        body_start += 1
        deco += 1
        for unit in units:
            for s in unit:
                w(1, "# " + safe_comment(ssa_printer.fmt_stmt(tssa.Stmt(s.var, s.rhs))))
            if unit[0].var in self.inline:
                w(1, f"#   (computed in the loop of {self.inline[unit[0].var]}, where it is read)")
                continue
            self.emitting = unit
            members = {s.var for s in unit}
            self.strips = {self.index(rp.row): rp for rp in self.row_panels.values()
                           if rp.consumer in members}
            if len(unit) > 1:
                self.emit_siblings(unit)
            elif unit[0].mode == "blas":
                assert unit[0].blas is not None
                self.emit_blas(unit[0], unit[0].blas)
            else:
                self.emit_loops(unit[0])
            self.ex.locals = {}
            self.strips, self.ex.panels = {}, {}
        outs = [self.var(v) for v in self.p.output_vars()]
        w(1, f"return ({', '.join(outs)},)")
        w.lines.insert(w.lines.index(f"TL_PARALLEL = {PARALLEL}  # prange loops only"),
                       "TL_BLAS = " + repr((self.blas_whole, tuple(self.panel_tests))))
        body_start += 1
        deco += 1
        if self.ex.hoisted:
            w.lines[body_start:body_start] = (
                [INDENT + "# the inputs' elements at constant indices, read once"] +
                [f"{INDENT}{local} = {read}" for read, local in self.ex.hoisted.items()])
        if self.constants_as_args:
            self.abstract_constants(body_start)
        loops = sum(ln.count("prange(") for ln in w.lines[body_start:]) + self.shared_loops
        self.allow_parallel = loops <= MAX_PARALLEL_LOOPS
        if self.outline_parallel_bodies and self.allow_parallel:   # (prange_bodies.py)
            funcs, w.lines[body_start:] = prange_bodies.outline(
                w.lines[body_start:], [a[1] for a in args],
                '@njit(parallel=False, cache=True, error_model="numpy")',
                distinct='@njit(parallel=False, cache=True, error_model="numpy", '
                         'pipeline_class=TlNoAlias)' if self.jit else "",
                vectors=frozenset({CONSTS}))
            w.lines[deco:deco] = funcs
            deco, body_start = deco + len(funcs), body_start + len(funcs)
            if any("pipeline_class=TlNoAlias" in ln for ln in funcs):
                at = w.lines.index("from numba import njit, prange") + 1
                w.lines.insert(at, "from tensorlang.backends.numba_rt import TlNoAlias")
                deco, body_start = deco + 1, body_start + 1
        if len(w.lines) - body_start > SPLIT_LINES:
            moved = self.split(deco, body_start, [a[1] for a in args])
            deco, body_start = deco + moved, body_start + moved
        if self.constants_as_args:
            w.lines[:] = _hoist_constants(w.lines)
            body_start = w.lines.index(f"def {KERNEL}({', '.join(a[1] for a in args)}):") + 1
            deco = body_start - 2
        # parallel=True without a prange only costs compile time (and a Numba warning)
        parallel = self.allow_parallel and any("prange(" in ln for ln in w.lines[body_start:])
        w.lines[deco] = (f'@njit(parallel={"TL_PARALLEL" if parallel else "False"}, '
                         f'cache=True, error_model="numpy")')
        legend = self.nm.legend()
        if legend:
            note = ["    # renamed: " + ", ".join(f"{g} = {safe_comment(o)!r}"
                                                  for g, o in legend)]
            w.lines[body_start:body_start] = note
        return "\n".join(w.lines) + "\n"

    def abstract_constants(self, body_start: int) -> None:
        """Replace each float literal of the kernel body (but 0.0, 1.0 and -1.0, which
        mostly mean "absent", "unit" and "negate") by `tl_c[k]`, an element of the argument
        `tl_c` (`_hoist_constants` later reads each into a local at the top of the function
        that uses it), and floats in comments by `c`: programs that differ only in their
        constants then share one module, one Numba compilation and one cache entry.  Equal
        constants are one element, so that LLVM still sees equal factors as equal and may
        share their products; programs share a module when their constants are equal in the
        same places.  A kernel with
        more than `MAX_CONSTANT_ARGS` distinct constants is left as it is."""
        w = self.w
        body = w.lines[body_start:]
        edits: dict[int, list[tuple[int, int, str]]] = {}
        slots: dict[float, int] = {}     # equal constants share an element (see above)
        reader = io.StringIO("\n".join(body) + "\n").readline
        tokens = [t for t in tokenize.generate_tokens(reader)
                  if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                    tokenize.DEDENT)]
        for k, tok in enumerate(tokens):
            row = tok.start[0] - 1
            if tok.type == tokenize.NUMBER and _is_float_literal(tok.string):
                value, start = float(tok.string), tok.start[1]
                # a unary minus belongs to the constant (`-0.5 * x` and `0.5 * x` share code)
                if k and tokens[k - 1].string == "-" and tokens[k - 1].end == tok.start and \
                        (k < 2 or tokens[k - 2].type == tokenize.COMMENT or
                         tokens[k - 2].string in _BEFORE_UNARY):
                    value, start = -value, tokens[k - 1].start[1]
                if value in (0.0, 1.0, -1.0):
                    continue
                if value not in slots:
                    slots[value] = len(self.constants)
                    self.constants.append(value)
                edits.setdefault(row, []).append((start, tok.end[1], f"{CONSTS}[{slots[value]}]"))
            elif tok.type == tokenize.COMMENT:
                edits.setdefault(row, []).append(
                    (tok.start[1], tok.end[1], _FLOAT.sub("c", tok.string)))
        if len(self.constants) > MAX_CONSTANT_ARGS:
            self.constants.clear()   # the literals stay (see MAX_CONSTANT_ARGS)
            return
        for row, changes in edits.items():
            line = body[row]
            for a, b, text in sorted(changes, reverse=True):
                line = line[:a] + text + line[b:]
            body[row] = line
        w.lines[body_start:] = body
        for k in range(body_start):
            if w.lines[k].lstrip().startswith("#"):
                w.lines[k] = _FLOAT.sub("c", w.lines[k])

    def split(self, deco: int, body_start: int, args: list[str]) -> int:
        """Move the body into `tl_part<k>` functions of about PART_LINES lines each, which
        Numba compiles separately (backends/kernel_split.py); the number of lines inserted
        before the kernel's decorator."""
        w = self.w
        cut = kernel_split.split_body(w.lines[body_start:], args, PART_LINES)
        if cut is None:
            return 0
        parts, body = cut
        out: list[str] = []
        for k, part in enumerate(parts):
            parallel = self.allow_parallel and any("prange(" in ln for ln in part.lines)
            out += [f'@njit(parallel={"TL_PARALLEL" if parallel else "False"}, cache=True, '
                    f'error_model="numpy")',
                    f"def tl_part{k}({', '.join(part.params)}):", *part.lines, "", ""]
        w.lines[body_start:] = body
        w.lines[deco:deco] = out
        return len(out)

    # -- BLAS --------------------------------------------------------------------------------

    def emit_blas(self, s: StmtPlan, b: BlasPlan) -> None:
        if s.gram is not None:
            self.emit_gram(s, s.gram, b.guard)
            return
        w, rhs, name = self.w, s.rhs, self.var(s.var)
        k = self._tag(s)
        ranges = rhs.ranges()
        m, n, kk = f"_m{k}", f"_n{k}", f"_k{k}"
        assert not s.scalar  # (the BLAS rule needs a generator index)
        w(1, f"{m} = {self._extent(ranges, b.i_left)}")
        w(1, f"{kk} = {self._extent(ranges, rhs.sum_names())}")
        w(1, f"{n} = {self._extent(ranges, b.i_right)}")
        d = 1
        if s.var in self.row_panels:   # in panels where `panel_runs`, else stored whole
            reader = self.row_panels[s.var].consumer
            runs, rows = panel_code(m, n, kk)
            w(1, f"_pan{k} = {runs}{self._size_guard(b.guard)}")
            w(1, f"if _pan{k}:")
            w(2, f"_R{k} = {rows}")
            w(2, f"{name} = np.empty((0, {n}))   # (by rows, in the loop of {reader})")
            w(1, "else:")
            w(2, f"_R{k} = {STRIP_ROWS}")
            d = 2
            # (the same test of the sizes, for the header: `TL_BLAS`)
            extents = (f"({self._extent(ranges, names)})"
                       for names in (b.i_left, b.i_right, rhs.sum_names()))
            self.panel_tests.append(panel_code(*extents)[0] + self._size_guard(b.guard))
        else:
            self.blas_whole = True
        w(d, f"if {m} > 0 and {n} > 0 and {kk} > 0{self._size_guard(b.guard)}:")
        left = self._blas_operand(b.left.var, b.left_perm, f"({m}, {kk})", len(b.i_left))
        right = self._blas_operand(b.right.var, b.right_perm, f"({kk}, {n})",
                                   len(rhs.sum_names()))
        prod_expr = f"tl_matmul({left}, {right})"
        if rhs.coeff != 1.0:
            prod_expr = f"{num(rhs.coeff)} * {prod_expr}"
        w(d + 1, f"_p{k} = {prod_expr}")
        dims = [ranges[g] for g in b.i_left + b.i_right]
        res = f"_p{k}.reshape({self.shape(dims)})"
        if b.out_perm != tuple(range(len(b.out_perm))):
            res = f"np.ascontiguousarray({res}.transpose({_tuple(b.out_perm)}))"
        w(d + 1, f"{name} = {res}")
        w(d, "else:")   # an empty product: no BLAS call, and the only fill
        w(d + 1, f"{name} = np.zeros({self.shape(rhs.dims)})")
        if self.instrument:
            w(1, f"{COUNTS}[{self.counted[s.var]}] += {m} * {n} * {kk}")

    def emit_gram(self, s: StmtPlan, g: GramForm, guard: Pred) -> None:
        """`v = c * X^T diag(d) X` (backends/gram.py) as `tl_gram`: syrk on the rows of X
        scaled by sqrt|d|, the rows with d < 0 subtracted."""
        self.blas_whole = True
        w, rhs, name = self.w, s.rhs, self.var(s.var)
        k = self._tag(s)
        ranges = rhs.ranges()
        m, kk = f"_m{k}", f"_k{k}"
        w(1, f"{m} = {self._extent(ranges, g.i_x)}")
        w(1, f"{kk} = {self._extent(ranges, rhs.sum_names())}")
        w(1, f"if {m} > 0 and {kk} > 0{self._size_guard(guard)}:")
        x = self._blas_operand(g.base.var, g.x_perm, f"({m}, {kk})", len(g.i_x))
        prod_expr = f"tl_gram({x}, {self.var(g.weight.var)}.reshape(({kk},)))"
        if g.coeff != 1.0:
            prod_expr = f"{num(g.coeff)} * {prod_expr}"
        w(2, f"_p{k} = {prod_expr}")
        dims = [ranges[n] for n in g.i_x + g.i_w]
        res = f"_p{k}.reshape({self.shape(dims)})"
        # the product is symmetric: (i_x, i_w) and (i_w, i_x) are the same array
        if g.out_perm != tuple(range(len(g.out_perm))) and \
                rhs.gen_names() != g.i_w + g.i_x:
            res = f"np.ascontiguousarray({res}.transpose({_tuple(g.out_perm)}))"
        w(2, f"{name} = {res}")
        w(1, "else:")
        w(2, f"{name} = np.zeros({self.shape(rhs.dims)})")
        if self.instrument:
            w(1, f"{COUNTS}[{self.counted[s.var]}] += {m} * {m} * {kk}")

    def _extent(self, ranges: Mapping[str, Affine], names: Sequence[str]) -> str:
        """The number of points of the indices `names` (a product of sizes)."""
        return " * ".join(self.dim(ranges[n]) for n in names) or "1"

    def _size_guard(self, guard: Pred) -> str:
        """` and <guard>` for a BLAS call's condition on sizes (none when it is true)."""
        if isinstance(guard, PTrue):
            return ""
        pre: list[str] = []     # sizes only: no `exists` flags
        out = f" and {self.ex.pred([guard], pre)}"
        assert not pre, pre
        return out

    def _blas_operand(self, var: str, perm: tuple[int, ...], shape: str, first: int
                      ) -> str:
        """Operand `var` as a matrix: its axes in `perm` order, the first `first` of them
        the rows."""
        arr = self.var(var)
        if perm == (1, 0) and first == 1:   # a matrix transposed: BLAS reads it in place
            return f"{arr}.T"
        if perm != tuple(range(len(perm))):
            arr = f"np.ascontiguousarray({arr}.transpose({_tuple(perm)}))"
        return f"{arr}.reshape({shape})"

    # -- loops -------------------------------------------------------------------------------

    def _tag(self, s: StmtPlan) -> str:
        return str(self.positions[s.var])

    def emit_loops(self, s: StmtPlan) -> None:
        if s.var not in self.dense:
            self.emit_nests(s)
            return
        # a dense pass over the box where the relation is dense enough, else the nests
        assert s.outer is not None and s.outer[0].driver is not None
        w, rhs, rel, tag = self.w, s.rhs, self.dense[s.var], self._tag(s)
        arity = len(self.plan.rel_dims[rel])
        box = " * ".join(f"({self.rels.dim(rel, k, self.index)})" for k in range(arity))
        coords = self.rels.pattern(s.outer[0].driver.pattern)[0]
        w(1, f"if {self.nm.get(DENSE_MASK, rel)}.size == {box} and "
             f"{coords}.shape[0] * {DENSE_RATIO} >= {box}:")
        w(2, f"{self.var(s.var)} = np.empty({self.shape(rhs.dims)})")
        loops: list[Step] = [Loop(self.index(g), "0", self.aff(d))
                             for g, d in zip(rhs.gen_names(), rhs.dims)]
        ctx = LoopContext(tag + "d", f"_acc{tag}", [], [])
        depth = self.steps(loops, 2, "prange", ctx)
        # (the pass's own relation through its `dmask` argument; any other, the mask)
        rels = RelNames(lambda r: self.nm.get(DENSE_MASK if r == rel else MASK, r),
                        self._pattern_names, self.plan.rel_dims, self.plan.patterns,
                        self.plan.sizes)
        cond = pred_code(tssa.conjuncts(rhs.pred), self.index, rels, self.counter, INDENT)
        assert not cond.pre, cond.pre   # (no `exists`: dense_pass_candidates)
        assert s.facts is not None
        store = self.store(s)
        # A select without a branch: the value computed at every point of the box (printed
        # with the box's facts only, so that each read carries the range test it needs
        # there) and the mask as one boolean expression without short-circuits.  A branch
        # on a random mask mispredicts at every few points: masked's gradient at N = 1000
        # and 30% density took 3.4 ms as `(v if m[i, j] and ... else 0.0)`, 0.5 ms so.
        flat = self._bitwise(rhs.pred, rel, rhs)
        pre: list[str] = []
        if flat is not None:
            self.ex.reset()
            box = Facts.of(dict(zip(rhs.gen_names(), rhs.dims)), s.facts.sizes)
            value = self.ex.pointwise(rhs, {}, box, pre, box)
        if flat is not None and not pre:
            w.block(depth, [f"_dv{tag} = {value}", f"{store} = (_dv{tag} if {flat} else 0.0)"])
        else:
            self.ex.reset()
            pre = []
            value = self.ex.pointwise(rhs, {}, s.facts, pre, s.facts)
            if pre:   # lines the value needs, run only where the mask holds
                w.block(depth, [f"if {cond.code}:", *[INDENT + ln for ln in pre],
                                f"{INDENT}{store} = {value}", "else:",
                                f"{INDENT}{store} = 0.0"])
            else:     # the value only where the mask holds
                w(depth, f"{store} = ({value} if {cond.code} else 0.0)")
        self.close(ctx)
        w(1, "else:")
        start = len(w.lines)
        self.emit_nests(s)
        w.lines[start:] = [INDENT + ln for ln in w.lines[start:]]

    def _bitwise(self, p: Pred, rel: str, rhs: tssa.Rhs) -> str | None:
        """`p` as one boolean expression of `&` and `|` over comparisons and reads of the
        dense pass's own mask (every term evaluated: no branch), when each read of the mask
        is at generator indices whose ranges are the relation's extents (in range at every
        point of the box); else None."""
        if isinstance(p, PTrue):
            return "True"
        if isinstance(p, (ast.And, ast.Or)):
            a, b = self._bitwise(p.a, rel, rhs), self._bitwise(p.b, rel, rhs)
            if a is None or b is None:
                return None
            return f"({a} {'&' if isinstance(p, ast.And) else '|'} {b})"
        if isinstance(p, ast.Cmp):
            return f"({self.aff(p.lhs)} {p.op} {self.aff(p.rhs)})"
        if isinstance(p, ast.RelCall) and p.name == rel:
            ranges = rhs.ranges()
            dims = self.plan.rel_dims[rel]
            names = [a.as_var() for a in p.args]
            if any(n is None or ranges.get(n) != d for n, d in zip(names, dims)):
                return None
            return f"{self.nm.get(DENSE_MASK, rel)}[{', '.join(self.index(n) for n in names)}]"
        return None

    def emit_nests(self, s: StmtPlan) -> None:
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
            w(1, f"{name} = " + ("0.0" if s.scalar else self.allocate(s)))
        if self.instrument:
            w(1, f"{cnt} = 0")
        for a, (opart, osteps) in enumerate(outers):
            otag = tag if len(outers) == 1 else f"{tag}_{a}"
            ctx = LoopContext(otag, f"_acc{tag}", [], [cnt] if self.instrument else [])
            if s.inner is None:  # pointwise: one value per point
                depth = self.steps(osteps, 1, "prange", ctx)
                self.body(depth, self.store(s), "=", rhs, s.body_facts(opart), ctx.cnt,
                          sums=False, plus_zero=s.store_at is not None)
            elif self.sums_by_row(s, opart, osteps, otag, ctx, name):
                pass
            else:   # a sum or a max/min: a reduction per point
                mode = "prange" if opart.has_loop() else "seq"
                depth = self.steps(osteps, 1, mode, ctx)
                total = self.reduce_at(s, opart, otag, depth, ctx.cnt, mode != "prange")
                w(depth, f"{self.store(s)} = {total}")
            self.close(ctx)
        if self.instrument:
            w(1, f"{COUNTS}[{self.counted[s.var]}] += {cnt}")

    def allocate(self, s: StmtPlan) -> str:
        """The allocation of array statement `s`: a coordinate vector (`storage.
        coordinate_layouts`), or its box without a fill where every element read is
        written (`storage.allocation`)."""
        layout = self.ex.layouts.get(s.var)
        if layout is not None:
            return f"np.empty(({self.rels.pattern(layout.pattern)[0]}.shape[0],))"
        return f"np.{storage.allocation(s, self.plan)}({self.shape(self.plan.dims(s))})"

    def store(self, s: StmtPlan) -> str:
        """Where the body of `s` stores its element (after its outer loops are printed)."""
        name = self.var(s.var)
        if s.scalar:
            return name
        gens = s.rhs.gen_names()
        if s.var in self.ex.layouts:
            return f"{name}[{self.ex.position(s.var, tuple(Affine.var(g) for g in gens))}]"
        if s.store_at is not None:   # a window gather walked by window (window_walk.py)
            return f"{name}[{', '.join(self.aff(a) for a in s.store_at)}]"
        return f"{name}[{', '.join(self.index(g) for g in gens)}]"

    def _row_group(self, s: StmtPlan, opart: Part, osteps: list[Step], otag: str,
                   counter: list[int]) -> tuple[Loop, list[Step]] | None:
        """Whether `sums_by_row` applies to `s` (nest `opart`, printed as `osteps`): its
        innermost outer loop and its inner steps (named with `counter`), else None."""
        if self.instrument or s.inner is None or len(s.inner) != 1 or len(s.outer or []) != 1 \
                or isinstance(s.rhs, tssa.ExtremeRhs) or len(osteps) < 2:
            return None
        last = osteps[-1]
        if not isinstance(last, Loop) or last.head or \
                not any(isinstance(st, Loop) for st in osteps[:-1]):
            return None
        ipart = s.inner[0]
        if not ipart.has_loop():
            return None
        isteps = part_steps(ipart, self.index, self.rels, counter, INDENT, otag + "i",
                            s.body_facts(opart, ipart))
        word = re.compile(rf"\b{re.escape(last.var)}\b")
        texts: list[str] = []
        for st in isteps:
            if isinstance(st, Guard):
                texts += [st.code, *st.pre]
            elif isinstance(st, Loop):
                texts += [st.lo, st.stop, *st.head]
            elif isinstance(st, Assign):
                texts.append(st.expr)
            else:
                texts += st.lines
        if any(word.search(t) for t in texts):
            return None
        return last, isteps

    def row_grouped(self) -> dict[str, str]:
        """Statement -> the generator index that `sums_by_row` makes innermost (its inner
        loops then run once per point of the other indices), for the statements it applies
        to: decided before printing (on scratch names), for `storage.inlined_coordinates`."""
        out: dict[str, str] = {}
        for s in self.plan.stmts:
            if s.mode != "loops" or s.inner is None or s.outer is None or len(s.outer) != 1 \
                    or s.var in self.dense:
                continue
            scratch = [self.counter[0]]
            tag = self._tag(s)
            osteps = part_steps(s.outer[0], self.index, self.rels, scratch, INDENT, tag + "o",
                                s.body_facts(s.outer[0]))
            grouped = self._row_group(s, s.outer[0], osteps, tag, scratch)
            if grouped is not None:
                names = [n for n in s.rhs.gen_names() if self.index(n) == grouped[0].var]
                if len(names) == 1:
                    out[s.var] = names[0]
        return out

    def walks_by_rows(self, by_rows: dict[str, str]) -> frozenset[str]:
        """The sums run by rows whose inner loop walks a relation's row (gnn's in-edges of
        a node): they keep a nest of their own (`sibling_fusion.schedule`).  A sum over a
        few static terms (nbody's three coordinates) stays in its shared nest, where its
        value is a local instead of an N x N array."""
        out = set()
        for s in self.plan.stmts:
            if s.var in by_rows and s.inner is not None and any(
                    part.driver is not None and not part.driver.lookup for part in s.inner):
                out.add(s.var)
        return frozenset(out)

    def sums_by_row(self, s: StmtPlan, opart: Part, osteps: list[Step], otag: str,
                    ctx: LoopContext, name: str) -> bool:
        """A sum whose inner loops do not depend on the innermost outer loop `g` (a gather
        `sum k. E[tok[b, k], d]`: the row of `b` is the same for every `d`) runs with `g`
        innermost: the inner loops once per outer point, every term added to an array
        of `g`'s sums (a contiguous, vectorisable loop), instead of walking the row again
        for each `g`.  Each element sees the same terms in the same order and its blocks
        close at the same counts (one count for all: no inner step depends on `g`), so the
        result is the per-point sum's bit for bit.  False (nothing printed) when it does
        not apply."""
        grouped = self._row_group(s, opart, osteps, otag, self.counter)
        if grouped is None:
            return False
        last, isteps = grouped
        if self._column_blocked(s, osteps, last, isteps):
            self._sums_by_row_blocked(s, opart, osteps, isteps, otag, ctx)
            return True
        g, ipart, itag = last.var, s.inner[0], otag + "i"
        w, rhs, t = self.w, s.rhs, otag
        acc, glo, glen = f"_acc{self._tag(s)}", f"_glo{t}", f"_glen{t}"
        depth = self.steps(osteps[:-1], 1, "prange", ctx)
        w(depth, f"{glo} = {last.lo}")
        w(depth, f"{glen} = max(0, {last.stop} - {glo})")
        # (on the stack when the row is short: no allocation per row)
        w.block(depth, [f"_buf{t} = {accumulate.ROW_BUFFER}(3 * {glen}) if {glen} <= "
                        f"{accumulate.ROW_MAX} else np.empty(3 * {glen})",
                        f"_buf{t}[:3 * {glen}] = 0.0",
                        f"{acc} = _buf{t}[:{glen}]", f"{acc}_s = _buf{t}[{glen}:2 * {glen}]",
                        f"{acc}_c = _buf{t}[2 * {glen}:3 * {glen}]",
                        f"{acc}_n = 0", f"{acc}_m = False"])
        ictx = LoopContext(itag, acc, [], [])
        at = f"{acc}[_g{t}]"
        merge = [f"for _g{t} in range({glen}):",
                 f"{INDENT}{acc}_s[_g{t}], {acc}_c[_g{t}] = "
                 f"{accumulate.NEUMAIER}({acc}_s[_g{t}], {acc}_c[_g{t}], {at})"]
        fold = [*merge, f"{acc}[:] = 0.0", f"{acc}_m = True"]
        last_in = isteps[-1]
        if isinstance(last_in, Loop) and sum(isinstance(st, Loop) for st in isteps) == 1:
            # the one inner loop (a CSR row's walk) in blocks of BLOCK iterations: a full
            # block folds where the count would reach BLOCK, so no count per term
            idepth = self.steps(isteps[:-1], depth, "seq", ictx)
            hi, b = f"_rbh{t}", f"_rbb{t}"
            w.block(idepth, [f"{hi} = {last_in.stop}",
                             f"for {b} in range({last_in.lo}, {hi}, {accumulate.BLOCK}):",
                             f"{INDENT}for {last_in.var} in range({b}, "
                             f"min({b} + {accumulate.BLOCK}, {hi})):"])
            w.block(idepth + 2, last_in.head)
            if last_in.position is not None:
                self.ex.positions[last_in.position] = last_in.var
                if self.inline:
                    self.inline_at(last_in.position, idepth + 2)
            w(idepth + 2, f"for {g} in range({glo}, {glo} + {glen}):")
            self.body(idepth + 3, f"{acc}[{g} - {glo}]", "+", rhs,
                      s.body_facts(opart, ipart), "", sums=True)
            w.block(idepth + 1, [f"if {b} + {accumulate.BLOCK} <= {hi}:",
                                 *[INDENT + ln for ln in fold]])
        else:
            idepth = self.steps(isteps, depth, "seq", ictx)
            w(idepth, f"for {g} in range({glo}, {glo} + {glen}):")
            self.body(idepth + 1, f"{acc}[{g} - {glo}]", "+", rhs,
                      s.body_facts(opart, ipart), "", sums=True)
            w.block(idepth, [f"{acc}_n += 1", f"if {acc}_n == {accumulate.BLOCK}:",
                             *[INDENT + ln for ln in fold], f"{INDENT}{acc}_n = 0"])
        self.close(ictx)
        store = self.store(s)
        tot = f"_tot{t}"
        # no block closed: each total is its one open block (merged into 0: itself)
        w.block(depth, [f"if not {acc}_m:",
                        f"{INDENT}for {g} in range({glo}, {glo} + {glen}):",
                        f"{INDENT * 2}{store} = {acc}[{g} - {glo}]",
                        "else:",
                        *[INDENT + ln for ln in merge],
                        f"{INDENT}for {g} in range({glo}, {glo} + {glen}):",
                        f"{INDENT * 2}_s{t} = {acc}_s[{g} - {glo}]",
                        f"{INDENT * 2}{tot} = _s{t} + {acc}_c[{g} - {glo}] "
                        f"if _s{t} - _s{t} == 0.0 else _s{t}",
                        f"{INDENT * 2}{store} = {tot}"])
        return True

    def _column_blocked(self, s: StmtPlan, osteps: list[Step], last: Loop,
                        isteps: list[Step]) -> bool:
        """Whether `sums_by_row` runs `s` over blocks of COLUMN_BLOCK points of its parallel
        loop `o` (`_sums_by_row_blocked`): its body reads an array down a column (the
        sum's index in a leading position, `o` in the last: nbody's `v11[j, i]` summed
        over `j`), each term a row apart, so that one point's walk touches a page per term
        (a TLB miss each) where a block's walk reads a run of `o`.  Only for the plain form
        whose results the block gives bit for bit: `o` the one outer loop but the group's,
        one inner loop whose start does not depend on `o` (all points of a block close
        their blocks of terms at the same indices), the inner steps before it guards."""
        loops = [st for st in osteps[:-1] if isinstance(st, Loop)]
        if len(loops) != 1 or loops[0] is not osteps[-2]:
            return False
        o, inner = loops[0], isteps[-1]
        if o.head or o.position is not None or o.var in self.strips or \
                not isinstance(inner, Loop) or inner.head or inner.position is not None or \
                not all(isinstance(st, Guard) for st in isteps[:-1]):
            return False
        word = re.compile(rf"\b{re.escape(o.var)}\b")
        if any(word.search(text) for text in (inner.lo, last.lo, last.stop)):
            return False
        names = s.rhs.gen_names() + s.rhs.sum_names()
        outer = {n for n in names if self.index(n) == o.var}
        walked = {n for n in names if self.index(n) == inner.var}
        for v, idx in plan_reads(s.rhs, self.plan):
            if len(idx) >= 2 and outer & {n for n, _ in idx[-1].terms} and \
                    walked & {n for a in idx[:-1] for n, _ in a.terms} and \
                    not walked & {n for n, _ in idx[-1].terms}:
                return True
        return False

    def _sums_by_row_blocked(self, s: StmtPlan, opart: Part, osteps: list[Step],
                             isteps: list[Step], otag: str, ctx: LoopContext) -> None:
        """`sums_by_row` over blocks of COLUMN_BLOCK points `o` of the parallel loop: per
        block, each point's guard and end of the inner loop, then the inner loop over the
        block's longest range, each term added to the sums of the points whose range has
        it (in the same order as point by point); a full block of terms of a point folds
        where its own walk would fold it, and each point stores its totals as there."""
        w, rhs, t, cb = self.w, s.rhs, otag, COLUMN_BLOCK
        o, last, inner = osteps[-2], osteps[-1], isteps[-1]
        assert isinstance(o, Loop) and isinstance(last, Loop) and isinstance(inner, Loop)
        g, j = last.var, inner.var
        acc, glo, glen = f"_acc{self._tag(s)}", f"_glo{t}", f"_glen{t}"
        lo, cs, ce, hi, uh, b, m = (f"_clo{t}", f"_cs{t}", f"_ce{t}", f"_ch{t}", f"_cu{t}",
                                    f"_rbb{t}", f"_cm{t}")
        depth = self.steps(osteps[:-2], 1, "prange", ctx)
        size = f"{cb} * {glen}"
        at = f"({o.var} - {cs}) * {glen} + {g} - {glo}"
        w.block(depth, [f"{lo} = {o.lo}",
                        f"for _cb{t} in prange((max(0, {o.stop} - {lo}) + {cb - 1}) // {cb}):",
                        f"{INDENT}{cs} = {lo} + _cb{t} * {cb}",
                        f"{INDENT}{ce} = min({cs} + {cb}, {o.stop})",
                        f"{INDENT}{glo} = {last.lo}",
                        f"{INDENT}{glen} = max(0, {last.stop} - {glo})",
                        f"{INDENT}_buf{t} = {accumulate.ROW_BUFFER}(3 * {size}) if {size} <= "
                        f"{accumulate.ROW_MAX} else np.empty(3 * {size})",
                        f"{INDENT}_buf{t}[:3 * {size}] = 0.0",
                        f"{INDENT}{acc} = _buf{t}[:{size}]",
                        f"{INDENT}{acc}_s = _buf{t}[{size}:2 * {size}]",
                        f"{INDENT}{acc}_c = _buf{t}[2 * {size}:3 * {size}]",
                        f"{INDENT}{hi} = np.empty({cb}, np.int64)",
                        f"{INDENT}{m} = np.zeros({cb}, np.bool_)",
                        f"{INDENT}{uh} = {inner.lo}",
                        f"{INDENT}for {o.var} in range({cs}, {ce}):"])
        depth += 2
        # each point's end of the inner loop (its start where a guard fails: no terms)
        w(depth, f"{hi}[{o.var} - {cs}] = {inner.lo}")
        gdepth = depth
        for st in isteps[:-1]:
            assert isinstance(st, Guard)
            w.block(gdepth, st.pre)
            w(gdepth, f"if {st.code}:")
            gdepth += 1
        w(gdepth, f"{hi}[{o.var} - {cs}] = {inner.stop}")
        w(depth, f"{uh} = max({uh}, {hi}[{o.var} - {cs}])")
        depth -= 1
        merge = [f"for {g} in range({glo}, {glo} + {glen}):",
                 f"{INDENT}{acc}_s[{at}], {acc}_c[{at}] = "
                 f"{accumulate.NEUMAIER}({acc}_s[{at}], {acc}_c[{at}], {acc}[{at}])"]
        w.block(depth, [f"for {b} in range({inner.lo}, {uh}, {accumulate.BLOCK}):",
                        f"{INDENT}for _jb{t} in range({b}, min({b} + {accumulate.BLOCK}, {uh}), "
                        f"{COLUMN_ROWS}):",
                        f"{INDENT * 2}for {o.var} in range({cs}, {ce}):"])
        w.block(depth + 3, [f"for {j} in range(_jb{t}, min(_jb{t} + {COLUMN_ROWS}, "
                            f"{hi}[{o.var} - {cs}])):",
                            f"{INDENT}for {g} in range({glo}, {glo} + {glen}):"])
        self.body(depth + 5, f"{acc}[{at}]", "+", rhs, s.body_facts(opart, s.inner[0]), "",
                  sums=True)
        w.block(depth + 1, [f"for {o.var} in range({cs}, {ce}):",
                            f"{INDENT}if {b} + {accumulate.BLOCK} <= {hi}[{o.var} - {cs}]:",
                            *[INDENT * 2 + ln for ln in merge],
                            f"{INDENT * 3}{acc}[{at}] = 0.0",
                            f"{INDENT * 2}{m}[{o.var} - {cs}] = True"])
        store, tot = self.store(s), f"_tot{t}"
        w.block(depth, [f"for {o.var} in range({cs}, {ce}):",
                        f"{INDENT}if not {m}[{o.var} - {cs}]:",
                        f"{INDENT * 2}for {g} in range({glo}, {glo} + {glen}):",
                        f"{INDENT * 3}{store} = {acc}[{at}]",
                        f"{INDENT}else:",
                        *[INDENT * 2 + ln for ln in merge],
                        f"{INDENT * 2}for {g} in range({glo}, {glo} + {glen}):",
                        f"{INDENT * 3}_s{t} = {acc}_s[{at}]",
                        f"{INDENT * 3}{tot} = _s{t} + {acc}_c[{at}] "
                        f"if _s{t} - _s{t} == 0.0 else _s{t}",
                        f"{INDENT * 3}{store} = {tot}"])

    def reduce_at(self, s: StmtPlan, opart: Part, otag: str, depth: int, cnt: str,
                  chunked: bool) -> str:
        """The lines of a reduction (sum, max, min) at one point of its outer nest, from
        `depth`; the expression of its value.  `chunked`: a sum's first inner loop runs as
        parallel chunks (a statement with no outer loop)."""
        w, rhs = self.w, s.rhs
        assert s.inner is not None
        acc = f"_acc{self._tag(s)}"
        extreme = isinstance(rhs, tssa.ExtremeRhs)
        # without inner loops each part adds at most one term, and loops a constant number
        # of iterations long (a window) fewer than SHORT, the length from which a sum's
        # innermost loop would run as blocks: fewer terms than a block, whose compensated
        # merge into 0 is the plain total bit for bit (0.0 + t, inf, nan alike)
        terms = [ipart.static_terms() for ipart in s.inner]
        few = not extreme and not chunked and None not in terms and \
            sum(terms) <= accumulate.BLOCK and max(terms, default=0) < accumulate.SHORT
        plain_unless_blocks = False   # (a short loop alone: only the blocks need the fold)
        w.block(depth, accumulate.extreme_init(acc, rhs.op) if extreme else
                [f"{acc} = 0.0"] if few else accumulate.init(acc))
        for b, ipart in enumerate(s.inner):
            itag = otag if len(s.inner) == 1 else f"{otag}_{b}"
            isteps = part_steps(ipart, self.index, self.rels, self.counter, INDENT,
                                itag + "i", s.body_facts(opart, ipart))
            ictx = LoopContext(itag, acc, [], [cnt] if cnt else [],
                               block=self.blocked_sums and not extreme and not few)
            idepth = self.steps(isteps, depth, "chunk" if chunked and not extreme else "seq",
                                ictx)
            if ictx.target:   # a blocked loop: each term into the block's buffer, or (a short
                # loop) added one by one
                # a block's logs as tl_log_normal, the block again with tl_log if an
                # argument is outside (not when instrumented: its terms would count twice)
                self.ex.normal_logs = [] if self.fast_logs and not ictx.cnt else None
                try:
                    term = self.body(idepth, ictx.target, "=", rhs,
                                     s.body_facts(opart, ipart), ictx.cnt, sums=True)
                    logs = self.ex.normal_logs
                finally:
                    self.ex.normal_logs = None
                if logs:
                    self._block_again(logs, idepth, ictx, rhs, s.body_facts(opart, ipart))
                if "tl_" in term or "/" in term:   # a call or a division: blocks pay sooner
                    w.lines[ictx.test_line] = w.lines[ictx.test_line].replace(
                        f" >= {accumulate.SHORT_CHEAP}", f" >= {accumulate.SHORT}", 1)
                w.block(idepth - 3, ictx.middle)
                if ictx.loop is not None:   # a coordinate loop's members, in the short case
                    w.block(idepth - 1, ictx.loop.head)
                    if ictx.loop.position is not None and self.inline:
                        self.inline_at(ictx.loop.position, idepth - 1)
                # the short loop as the sum's only loop adds fewer than a block's terms: no
                # block closes, so a plain addition gives the counted form's bits
                alone = not chunked and len(s.inner) == 1 and \
                    sum(isinstance(st, Loop) for st in isteps) == 1
                plain_unless_blocks = alone
                self.body(idepth - 1, ictx.acc, "+" if alone else "+=", rhs,
                          s.body_facts(opart, ipart), ictx.cnt, sums=True)
            else:
                self.body(idepth, ictx.acc, rhs.op if extreme else "+" if few else "+=", rhs,
                          s.body_facts(opart, ipart), ictx.cnt, sums=True)
            self.close(ictx)
        if extreme or few:
            return acc
        close, total = accumulate.result(acc, INDENT, self.neumaier_call)
        if plain_unless_blocks:
            # no block closed (the short case ran): the fold of the open block into 0 is
            # the block itself, bit for bit (a sum from 0.0 is never -0.0)
            w.block(depth, [f"{acc}_t = {acc}",
                            f"if not ({acc}_s == 0.0 and {acc}_c == 0.0):",
                            *[INDENT + line for line in close],
                            f"{INDENT}{acc}_t = {total}"])
            return f"{acc}_t"
        w.block(depth, close)
        return total

    def _reads_of(self) -> dict[str, list[tuple[str, tuple[Any, ...]]]]:
        """Per materialised value, its readers and accesses (`plan_reads` of every statement
        with a body; computed once)."""
        if self._readers is None:
            self._readers = {}
            for t in self.plan.stmts:
                if t.mode not in ("fused", "input"):
                    for v, idx in plan_reads(t.rhs, self.plan):
                        self._readers.setdefault(v, []).append((t.var, idx))
        return self._readers

    def emit_siblings(self, unit: list[StmtPlan]) -> None:
        """Statements whose outer nests print identically (`sibling_fusion.schedule`) as
        one nest: its body computes each member's element in turn (a reduction with its
        own inner loops), a value that a later member reads at the same point through a
        local; or statements that share a prefix of their nests (`emit_prefix_unit`).
        Instrumented, each member keeps its own iteration counter."""
        w, first = self.w, unit[0]
        tag = self._tag(first)
        cnts = [f"_cnt{self._tag(s)}" for s in unit]
        local_only = sibling_fusion.read_only_here(unit, self.plan, self._reads_of())
        for s in unit:
            if s.var not in local_only:
                w(1, f"{self.var(s.var)} = {self.allocate(s)}")
        if self.instrument:
            for cnt in cnts:
                w(1, f"{cnt} = 0")
        prefix = sibling_fusion.shared_steps(unit)
        ids = {s.var: sibling_fusion.identity(s) for s in unit}
        scope = sibling_fusion.in_scope(unit)
        reused = {v for s in unit[1:] for v, idx in plan_reads(s.rhs, self.plan)
                  if v in ids and idx == ids[v] and s.var in scope[v]}
        assert first.outer is not None
        start = len(w.lines)
        if prefix is not None:
            self.emit_prefix_unit(unit, prefix, cnts, local_only, reused)
        for a, part in enumerate(first.outer if prefix is None else ()):
            otag = tag if len(first.outer) == 1 else f"{tag}_{a}"
            steps = part_steps(part, self.index, self.rels, self.counter, INDENT,
                               tag + ("o" if len(first.outer) == 1 else f"o{a}"),
                               first.body_facts(part))
            ctx = LoopContext(otag, f"_acc{tag}", [], cnts if self.instrument else [])
            depth = self.steps(steps, 1, "prange", ctx)
            for m, s in enumerate(unit):
                assert s.outer is not None
                stag = self._tag(s) if len(first.outer) == 1 else f"{self._tag(s)}_{a}"
                self.member(s, s.outer[a], stag, depth, ctx.cnts[m] if ctx.cnts else "",
                            s.var in reused, s.var not in local_only)
            self.ex.locals = {}
            self.close(ctx)
        self.shared_loops += (len(unit) - 1) * sum(ln.count("prange(") for ln in w.lines[start:])
        if self.instrument:
            for s, cnt in zip(unit, cnts):
                w(1, f"{COUNTS}[{self.counted[s.var]}] += {cnt}")

    def emit_prefix_unit(self, unit: list[StmtPlan], prefix: sibling_fusion.Prefix,
                         cnts: list[str], local_only: frozenset[str], reused: set[str]
                         ) -> None:
        """A unit whose members share a prefix of their one nest (`sibling_fusion.
        shared_steps`): the guard conjuncts they all have and the shared steps once, then
        each member's other guard conjuncts, own steps and body in turn; a member with no
        steps of its own keeps its value in a local for later members (`reused`), or only
        there (`local_only`)."""
        w, first = self.w, unit[0]
        tag = self._tag(first)
        ctx = LoopContext(tag, f"_acc{tag}", [], cnts if self.instrument else [])
        assert first.outer is not None   # (the guard in a member's order: deterministic)
        common = [g for g in first.outer[0].nest.guard if g in prefix.guard]
        depth = self.steps(self._split_nest(first, common, prefix.cut, True), 1, "prange",
                           ctx)
        m = 0
        for run in sibling_fusion.groups(unit):
            assert run[0].outer is not None
            extra = [g for g in run[0].outer[0].nest.guard if g not in prefix.guard]
            own = self._split_nest(run[0], extra, prefix.cut, False)
            rtag = self._tag(run[0])
            mctx = LoopContext(rtag, f"_acc{rtag}", [], [])
            mdepth = self.steps(own, depth, "seq", mctx)
            for s in run:
                assert s.outer is not None
                self.member(s, s.outer[0], self._tag(s), mdepth,
                            ctx.cnts[m] if ctx.cnts else "", s.var in reused,
                            s.var not in local_only)
                m += 1
            self.close(mctx)
            if own:   # (the run's locals are out of scope after its own steps)
                for s in run:
                    self.ex.locals.pop((s.var, sibling_fusion.identity(s)), None)
        self.ex.locals = {}
        self.close(ctx)

    def member(self, s: StmtPlan, part: Part, stag: str, depth: int, cnt: str, local: bool,
               stored: bool) -> None:
        """The body of member `s` of a shared nest at one point of its nest `part`: its
        value stored (`stored`), and kept in a local for later members (`local`)."""
        store = self.store(s) if stored else ""
        name = f"_s{self._tag(s)}" if local else ""
        if s.inner is None:
            self.body(depth, store, "=", s.rhs, s.body_facts(part), cnt, sums=False,
                      local=name, plus_zero=s.store_at is not None)
        else:
            total = self.reduce_at(s, part, stag, depth, cnt, False)
            if name:
                self.w(depth, f"{name} = {total}")
                total = name
            if store:
                self.w(depth, f"{store} = {total}")
        if name:
            self.ex.locals[(s.var, sibling_fusion.identity(s))] = name

    def _split_nest(self, s: StmtPlan, guard: Sequence[Pred], cut: int, shared: bool
                    ) -> list[Step]:
        """The steps of `s`'s one nest with its guard replaced by the test of `guard`
        (conjuncts on the sizes): the test and the first `cut` other steps (`shared`), or
        the test and the steps after them."""
        assert s.outer is not None and len(s.outer) == 1
        part, tag = s.outer[0], self._tag(s)
        steps = part_steps(part, self.index, self.rels, self.counter, INDENT, tag + "o",
                           s.body_facts(part))[1 if part.nest.guard else 0:]
        test = [pred_code(list(guard), self.index, self.rels, self.counter, INDENT)] \
            if guard else []
        return test + (steps[:cut] if shared else steps[cut:])

    def body(self, depth: int, target: str, op: str, rhs: tssa.Rhs, facts: Facts, cnt: str,
             sums: bool, local: str = "", plus_zero: bool = False) -> str:
        """The innermost statement: `target = value` or `target += term` (`local`: a
        pointwise value is first assigned to that local, for later reads; `plus_zero`: the
        value plus 0.0, the one term of a window gather as its sum adds it); the value's
        expression."""
        self.ex.reset()
        pre: list[str] = []
        if sums:
            value = self.ex.product(rhs.coeff, rhs.operands, facts, pre, facts)
        else:
            value = self.ex.pointwise(rhs, {}, facts, pre, facts)
        if plus_zero:
            value = f"({value} + 0.0)"
        self.w.block(depth, pre)
        if local:
            self.w(depth, f"{local} = {value}")
            if target:   # (none: a fused member only later members read, `emit_siblings`)
                self.w(depth, f"{target} = {local}")
        elif op == "+=":   # a term of a sum: blocked, compensated (see accumulate.py)
            self.w.block(depth, accumulate.add(target, value, INDENT, self.neumaier_call))
        elif op == "+":    # one of a sum's few terms (`reduce_at`): a plain addition
            self.w(depth, f"{target} += {value}")
        elif op in ast.EXTREMA:   # a term of a max/min reduction
            self.w.block(depth, accumulate.extreme_update(target, op, value, INDENT))
        else:
            self.w(depth, f"{target} {op} {value}")
        if cnt:
            self.w(depth, f"{cnt} += 1")
        return value

    def close(self, ctx: LoopContext) -> None:
        while ctx.closers:
            depth, lines = ctx.closers.pop()
            self.w.block(depth, lines)

    def steps(self, steps: list[Step], depth: int, mode: str, ctx: LoopContext) -> int:
        """Print `steps` from `depth`; the first loop is `prange` (mode "prange"), a chunked
        parallel reduction into `ctx.acc` (mode "chunk") or a plain loop ("seq")."""
        w = self.w
        first = True
        for k, st in enumerate(steps):
            # the innermost loop of a sum, over an index's range: as blocks
            # (a coordinate loop too: its head lines and inlined vectors are printed again
            # in the short case's loop, `reduce_at`)
            blocked = ctx.block and k == len(steps) - 1 and isinstance(st, Loop)
            if blocked:
                ctx.loop = st
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
                if st.position is not None:
                    self.ex.positions[st.position] = st.var
                strips = st.var in self.strips and not blocked
                if first and mode == "chunk":
                    depth = self._chunk_loop(st, depth, ctx, blocked)
                elif first and mode == "prange":
                    depth = self._strip_loop(st, depth, True) if strips else \
                        self._parallel_loop(st, depth, ctx)
                elif blocked:
                    depth = self._block_loop(st.var, st.lo, st.stop, depth, ctx)
                elif strips:
                    depth = self._strip_loop(st, depth, False)
                else:
                    w(depth, f"for {st.var} in range({st.lo}, {st.stop}):")
                    depth += 1
                w.block(depth, st.head)
                first = False
                if st.position is not None and self.inline:
                    self.inline_at(st.position, depth)
        return depth

    def inline_at(self, loop: tuple[str, tuple[int, ...], tuple[str, ...]], depth: int
                  ) -> None:
        """At the top of coordinate loop `loop`'s body: the coordinate vectors that the
        statements being printed read at its member (`storage.inlined_coordinates`),
        computed into locals that their reads then use (with their own indices renamed to
        the loop's: the generators to its variables, the summation indices to fresh names);
        the vectors such a vector reads first (a chain)."""
        readers, self.emitting = self.emitting, []
        for u in readers:
            for v, reader in self.inline.items():
                if reader != u.var:
                    continue
                layout = self.ex.layouts[v]
                idx = tuple(Affine.var(loop[2][layout.args.index(g)]) for g in layout.gens)
                if not layout.position(idx, loop):
                    continue
                self.ex.locals[(v, idx)] = self._inline_value(v, loop, depth)
        self.emitting = readers

    def _strip_loop(self, st: Loop, depth: int, parallel: bool) -> int:
        """The reader's loop over the rows of a row-panel product (`codegen.RowPanel`) in
        strips of `_R` rows (`prange` over the strips when `parallel`): each strip first
        computes its rows of the product into a panel (one BLAS call), which the body
        reads; where the call stored the product whole (`_pan` false), the strips read it
        in place.  The rows are visited in the loop's order, so sums add the same terms in
        the same order."""
        w, rp = self.w, self.strips[st.var]
        s = self.plan.by_var[rp.producer]
        b = s.blas
        assert b is not None and not st.head and st.position is None
        k = self._tag(s)
        rows, buf, off, rs, end = f"_R{k}", f"_pb{k}", f"_po{k}", f"_rs{k}", f"_re{k}"
        alloc = f"{buf} = np.empty(({rows}, _n{k})) if _pan{k} else {self.var(s.var)}"
        if parallel:
            lo = f"_slo{k}"
            w.block(depth, [f"{lo} = {st.lo}",
                            f"for _s{k} in prange((max(0, {st.stop} - {lo}) + {rows} - 1) "
                            f"// {rows}):"])
            depth += 1
            w.block(depth, [f"{rs} = {lo} + _s{k} * {rows}", alloc])
        else:
            w.block(depth, [alloc, f"for {rs} in range({st.lo}, {st.stop}, {rows}):"])
            depth += 1
        right = self._blas_operand(b.right.var, b.right_perm, f"(_k{k}, _n{k})", 1)
        fill = [f"tl_matmul_into({self.var(b.left.var)}[{rs}:{end}], {right}, "
                f"{buf}[:{end} - {rs}])"]
        if s.rhs.coeff != 1.0:
            fill.append(f"{buf}[:{end} - {rs}] *= {num(s.rhs.coeff)}")
        w.block(depth, [f"{end} = min({rs} + {rows}, {st.stop})",
                        f"if _pan{k}:", *[INDENT + ln for ln in fill],
                        f"{off} = {rs} if _pan{k} else 0",
                        f"for {st.var} in range({rs}, {end}):"])
        self.ex.panels[rp.producer] = (buf, off)
        return depth + 1

    def _inline_value(self, v: str, loop: tuple[str, tuple[int, ...], tuple[str, ...]],
                      depth: int) -> str:
        """The lines computing coordinate vector `v` at the member of `loop` (whose
        arguments are the relation's, in order: `v`'s own loop has the same pattern), after
        those of the vectors inlined into `v`; the local holding it."""
        layout, vs = self.ex.layouts[v], self.plan.by_var[v]
        tag = self._tag(vs)
        code = {k: self.index(a) for k, a in enumerate(loop[2])}   # (outside any rename)
        mine: dict[tuple[str, tuple[Affine, ...]], str] = {}
        for w, reader in self.inline.items():
            if reader == v:
                (idx,) = [i for r, i in plan_reads(vs.rhs, self.plan) if r == w]
                mine[(w, idx)] = self._inline_value(w, loop, depth)
        rename = {g: code[k] for k, g in enumerate(layout.args)}
        rename.update({n: f"_r{tag}_{self.nm.index(n)}" for n in vs.rhs.sum_names()})
        positions, outer_locals = dict(self.ex.positions), self.ex.locals
        self.ex.rename, self.ex.locals = rename, mine
        local = f"_l{tag}"
        assert vs.outer is not None and vs.facts is not None
        if vs.inner is None:
            self.ex.reset()
            pre: list[str] = []
            value = self.ex.pointwise(vs.rhs, {}, vs.facts, pre, vs.facts)
            self.w.block(depth, pre)
        else:
            value = self.reduce_at(vs, vs.outer[0], tag, depth, "", False)
        self.w(depth, f"{local} = {value}")
        self.ex.rename, self.ex.locals = {}, outer_locals
        self.ex.positions = positions
        return local

    def _parallel_loop(self, st: Loop, depth: int, ctx: LoopContext) -> int:
        """`for v in prange(lo, stop)`.  Instrumented, each iteration counts into its own
        slot of an array summed after the loop (a reduction variable updated inside guards
        and nested loops is not reliably recognised by Numba's parfor pass)."""
        w, t = self.w, ctx.tag
        if not ctx.cnts:
            w(depth, f"for {st.var} in prange({st.lo}, {st.stop}):")
            return depth + 1
        lo, slots = f"_plo{t}", f"_pcnt{t}"
        its = [f"_it{t}"] if len(ctx.cnts) == 1 else \
            [f"_it{t}_{m}" for m in range(len(ctx.cnts))]
        w(depth, f"{lo} = {st.lo}")
        if len(its) == 1:
            w(depth, f"{slots} = np.zeros(max(0, {st.stop} - {lo}), np.int64)")
        else:
            w(depth, f"{slots} = np.zeros((max(0, {st.stop} - {lo}), {len(its)}), np.int64)")
        w(depth, f"for {st.var} in prange({lo}, {st.stop}):")
        w.block(depth + 1, [f"{it} = 0" for it in its])
        if len(its) == 1:
            ctx.closers.append((depth, [f"{ctx.cnt} += {slots}.sum()"]))
            ctx.closers.append((depth + 1, [f"{slots}[{st.var} - {lo}] = {its[0]}"]))
        else:
            ctx.closers.append((depth, [f"{c} += {slots}[:, {m}].sum()"
                                        for m, c in enumerate(ctx.cnts)]))
            ctx.closers.append((depth + 1, [f"{slots}[{st.var} - {lo}, {m}] = {it}"
                                            for m, it in enumerate(its)]))
        ctx.cnts = its
        return depth + 1

    def _block_again(self, logs: list[str], depth: int, ctx: LoopContext, rhs: tssa.Rhs,
                     facts: Facts) -> None:
        """After a block's body at `depth` that computed its logs as `tl_log_normal` of
        `logs`: the test of those arguments and the block again with `tl_log` (a zero, a
        subnormal, a negative number, an inf or a NaN among them; see numba_rt)."""
        w, flag = self.w, f"_tbx{ctx.tag}"
        w.lines.insert(ctx.inner_line, INDENT * (depth - 1) + f"{flag} = False")
        for arg in dict.fromkeys(logs):
            w(depth, f"{flag} |= {BUILTIN_PREFIX}log_outside({arg})")
        assert ctx.loop is not None
        w.block(depth - 1, accumulate.block_again(ctx.loop.var, ctx.tag, flag, INDENT))
        w.block(depth + 1, ctx.loop.head)
        if ctx.loop.position is not None and self.inline:
            self.inline_at(ctx.loop.position, depth + 1)
        self.body(depth + 1, ctx.target, "=", rhs, facts, "", sums=True)

    def _block_loop(self, var: str, lo: str, stop: str, depth: int, ctx: LoopContext) -> int:
        """`for var in range(lo, stop)`, the innermost loop of the sum into `ctx.acc`, as
        blocks (accumulate.block_loop): the body assigns its term to `ctx.target`, and
        `reduce_at` prints `ctx.middle` and the body of the short case after it."""
        opening, ctx.target, ctx.middle = accumulate.block_loop(
            ctx.acc, var, lo, stop, ctx.tag, INDENT, accumulate.SHORT_CHEAP)
        ctx.test_line = len(self.w.lines) + next(k for k, line in enumerate(opening)
                                                 if line.startswith("if "))
        assert opening[-2].lstrip().startswith("for ")
        ctx.inner_line = len(self.w.lines) + len(opening) - 2
        self.w.block(depth, opening)
        return depth + 3

    def _chunk_loop(self, st: Loop, depth: int, ctx: LoopContext, blocked: bool = False
                    ) -> int:
        """`for v in range(lo, stop)` as at most CHUNKS parallel partial sums added in chunk
        order: the result does not depend on the number of threads.  `blocked`: each
        chunk's loop runs as blocks (`_block_loop`)."""
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
        w.block(depth + 1, accumulate.init(a))
        if ctx.cnt:
            w(depth + 1, f"{it} = 0")
        off = "" if lo == "0" else f"{lo} + "
        start, stop = f"{off}({c} * {n}) // {nc}", f"{off}(({c} + 1) * {n}) // {nc}"
        strips = not blocked and st.var in self.strips
        if strips:
            body = self._strip_loop(Loop(st.var, start, stop), depth + 1, False)
        elif not blocked:
            w(depth + 1, f"for {st.var} in range({start}, {stop}):")
        after = [f"for _d{t} in range({nc}):", f"{INDENT}_p{t} = {part}[_d{t}]",
                 *[INDENT + ln for ln in accumulate.merge(ctx.acc, f"_p{t}", INDENT,
                                                          self.neumaier_call)]]
        close, total = accumulate.result(a, INDENT, self.neumaier_call)
        inside = [*close, f"{part}[{c}] = {total}"]
        if ctx.cnt:
            after.append(f"{ctx.cnt} += {slots}.sum()")
            inside.append(f"{slots}[{c}] = {it}")
            ctx.cnts = [it]
        ctx.closers.append((depth, after))
        ctx.closers.append((depth + 1, inside))
        ctx.acc = a
        if blocked:
            return self._block_loop(st.var, start, stop, depth + 1, ctx)
        return body if strips else depth + 2


def _tuple(t: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, t)) + ("," if len(t) == 1 else "") + ")"


def module_source(p: Program, instrument: bool = False, jit: bool = True) -> str:
    """The kernel module's text (see `numba_cpu.generated_source`)."""
    return NumbaEmitter(plan_program(p, windows=not instrument), instrument, jit).source()


def abstract_source(p: Program, instrument: bool = False, jit: bool = True
                    ) -> tuple[str, tuple[float, ...]]:
    """The kernel module with its float constants as the argument `tl_c`, and their values:
    what `compile_program` caches and compiles."""
    emitter = NumbaEmitter(plan_program(p, windows=not instrument), instrument, jit,
                           constants=True)
    text = emitter.source()
    return text, tuple(emitter.constants)


_CONST_READ = re.compile(rf"\b{CONSTS}\[(\d+)\]")


def _hoist_constants(lines: list[str]) -> list[str]:
    """In each function of the module, read the constants it uses (`tl_c[k]`) into locals
    `tl_c<k>` once, at its top, so no loop reloads them."""
    out: list[str] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        out.append(line)
        k += 1
        if not line.startswith("def "):
            continue
        end = k
        while end < len(lines) and (not lines[end] or lines[end][0] in " #"):
            end += 1
        body = lines[k:end]
        used = sorted({int(m) for ln in body for m in _CONST_READ.findall(ln)})
        out += [f"{INDENT}{CONSTS}{c} = {CONSTS}[{c}]" for c in used]
        out += [_CONST_READ.sub(rf"{CONSTS}\1", ln) for ln in body]
        k = end
    return out


# Tokens after which a `-` is unary.
_BEFORE_UNARY = frozenset("( [ , = + - * / % ** // < > <= >= == != : return if else and or "
                          "not in".split())
# A float literal in a comment (the SSA listing): digits with a point or an exponent, with
# its unary minus.
_FLOAT = re.compile(r"(?<![\w.])-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
                    r"|\d+[eE][+-]?\d+)(?![\w.])")


def _is_float_literal(token: str) -> bool:
    low = token.lower()
    return not low.startswith("0x") and not low.endswith("j") and ("." in low or "e" in low)
