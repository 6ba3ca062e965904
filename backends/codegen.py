"""Backend-independent code generation decisions for Tensor-SSA programs.

`plan_program(p)` decides, for every statement of a `tssa.Program`, how it runs:

  * `input`  -- a kernel argument (a parameter leaf);
  * `fused`  -- not materialised: its value is computed inside its consumers
    (producer-consumer fusion, rules in `decide_fusion`);
  * `blas`   -- a dense contraction handed to a matrix product (rules in `blas_plan`);
    a weighted Gram product `X^T diag(d) X` to syrk (`gram.gram_form`, after
    `gram.factor_row_scalings` has brought such contractions to that form);
  * `loops`  -- a loop nest (`codegen_nest.plan_part`) writing an array, or a scalar local
    (a window gather, with `windows`, walked by window: `window_walk`).

`ExprPrinter` prints the scalar expressions of the loop bodies in Python syntax (valid for
Numba CPU and Numba CUDA device code): zero-extended reads (a guard only where the
solver's facts do not prove the read in range), fused producers inlined as conditional
expressions (`(value if mask else 0.0)`: `[p] * e` does not evaluate `e` where `p` fails),
and the primitives in the interpreter's evaluation order (`c * u1 * u2` left to right,
`(u1 if P1 else 0.0) + (u2 if P2 else 0.0)`), so that results round like the oracle's.

Every identifier in generated code comes from `Namer`: program names are accepted only when
they match a strict pattern and are then prefixed by their role, anything else gets a
numbered name, so no user text reaches generated code unchecked.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.canon import conjuncts as ast_conjuncts
from tensorlang.ir.ast import Affine, Cmp, Exists, PFalse, Pred, PTrue, TIndex, TRel, TSize
from tensorlang.ir.tssa import (AddRhs, ConstRhs, ContractRhs, ExtremeRhs, IndexRhs, Input,
                                MapRhs, Operand, Program, ReduceRhs, Rhs)
from tensorlang.passes.indexsolve import LoopBound

if TYPE_CHECKING:
    from .common.storage import CoordLayout
from .codegen_nest import (Facts, Part, RelNames, in_bounds, index_array_exists,
                           plan_alternatives, point_level, pred_code, row_test)
from .gram import GramForm, factor_row_scalings, gram_form
from .window_walk import reads_computed, window_form

# ---------------------------------------------------------------------------------------------
# Names

_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*\Z")
_PLAIN_INDEX = re.compile(r"[a-z][0-9]{1,6}\Z")
_SAFE_COMMENT = re.compile(r"[^A-Za-z0-9_ .,:;+\-*/()\[\]<>=!&|~^%@#'\"{}?]")

# Role prefixes.  Generated temporaries start with `_`, runtime helpers with `tl_`, modules
# are `np`/`math`/`numba`: none of them can be produced below.
SIZE, VALUE, INDEX, MASK = "n", "v", "x", "rm"


class Namer:
    """Generated identifiers for program names, by role."""

    def __init__(self) -> None:
        self._map: dict[tuple[str, str], str] = {}
        self._used: set[str] = set()

    def get(self, role: str, name: str) -> str:
        key = (role, name)
        hit = self._map.get(key)
        if hit is not None:
            return hit
        if role == INDEX and _PLAIN_INDEX.match(name):
            out = name                      # canonical SSA indices (i0, j1) stay readable
        elif _IDENT.match(name):
            out = f"{role}_{name}"
        else:                               # never paste an unchecked name
            out = f"{role}__{len(self._map)}"
        if out in self._used:
            raise AssertionError(f"generated name clash: {out}")
        self._used.add(out)
        self._map[key] = out
        return out

    def index(self, name: str) -> str:
        return self.get(INDEX, name)

    def legend(self) -> list[tuple[str, str]]:
        """(generated, original) for names that could not keep their spelling."""
        return [(v, k[1]) for k, v in self._map.items() if "__" in v]


def safe_comment(text: str) -> str:
    """One line of program text as a comment: characters outside a small safe set become
    `?`, so no newline (or anything else) can escape the comment."""
    return _SAFE_COMMENT.sub("?", text.replace("\n", " "))


def num(c: float) -> str:
    """A float literal (inf and nan through `math`)."""
    if math.isnan(c):
        return "math.nan"
    if math.isinf(c):
        return "math.inf" if c > 0 else "-math.inf"
    return repr(float(c))


# ---------------------------------------------------------------------------------------------
# Fusion and BLAS decisions


def is_pointwise(rhs: Rhs) -> bool:
    """A primitive without summation: one scalar computation per output point."""
    if isinstance(rhs, (ConstRhs, IndexRhs, AddRhs, MapRhs)):
        return True
    return isinstance(rhs, (ContractRhs, ReduceRhs)) and not rhs.sdims


def rank(rows: Sequence[Sequence[int]]) -> int:
    """Rank of an integer matrix (exact)."""
    m = [[Fraction(x) for x in r] for r in rows]
    r = 0
    ncols = len(m[0]) if m else 0
    for c in range(ncols):
        piv = next((k for k in range(r, len(m)) if m[k][c] != 0), None)
        if piv is None:
            continue
        m[r], m[piv] = m[piv], m[r]
        for k in range(len(m)):
            if k != r and m[k][c] != 0:
                f = m[k][c] / m[r][c]
                m[k] = [a - f * b for a, b in zip(m[k], m[r])]
        r += 1
    return r


def injective(idx: Sequence[Affine], names: Sequence[str], pred: Pred = PTrue()) -> bool:
    """The access `idx` takes distinct values at distinct points of `names` where `pred`
    holds: a fused producer is then evaluated at most once per point of its own index
    space by each consumer.  An index is determined by the access when it lies in the row
    space of its coefficient matrix (full column rank: every index is), or when two
    conjuncts of `pred` pin `s * x` to an interval shorter than `s` between affines of
    determined indices and sizes: `2 i <= j <= 2 i + 1` determines `i` from `j` (the
    adjoint of an upsampling reads its window `[2 i, 2 i + 1]` this way)."""
    if not names:
        return True
    known = [[a.coeff(n) for n in names] for a in idx]
    bounds: list[Affine] = []   # each: b <= 0
    for c in ast_conjuncts(pred):
        if isinstance(c, Cmp):
            b = c.lhs - c.rhs + (1 if c.op == "<" else 0)
            bounds += [b, -b] if c.op == "==" else [b]
    det: set[str] = set()
    while True:
        base = rank(known) if known else 0
        new = {n for k, n in enumerate(names) if n not in det and
               rank(known + [[int(j == k) for j in range(len(names))]]) == base}
        for x in names:
            if x in det or x in new:
                continue
            for lo in bounds:
                s = lo.coeff(x)
                if s > 0 and (lo.vars() & set(names)) - {x} <= det | new and any(
                        hi.coeff(x) == -s and (hi + lo).is_const() and -(hi + lo).const < s
                        for hi in bounds):
                    new.add(x)
                    break
        if not new:
            return len(det) == len(names)
        det |= new
        known += [[int(j == names.index(n)) for j in range(len(names))] for n in new]


@dataclass(frozen=True)
class BlasPlan:
    """`v[I] = c * sum J. L[..] * R[..]` as `(m x k) @ (k x n)`: `left_perm` orders L's
    axes as (I_left, J), `right_perm` R's as (J, I_right); `out_perm` takes the product's
    axes (I_left, I_right) to the generator order."""

    left: Operand
    right: Operand
    left_perm: tuple[int, ...]
    right_perm: tuple[int, ...]
    i_left: tuple[str, ...]
    i_right: tuple[str, ...]
    out_perm: tuple[int, ...]
    guard: Pred = PTrue()   # a condition on sizes only: where it fails, the result is 0


def blas_plan(rhs: Rhs, shapes: Mapping[str, tuple[Affine, ...]],
              sizes: Sequence[str] = ()) -> BlasPlan | None:
    """The BLAS form of a contraction, or None.  Conditions (docs/backends.md): a contract
    with summation indices, a predicate that holds at every point of the box or at none
    (true where its index ranges hold, else a condition on the `sizes` alone, such as
    the `[1 <= V]` derivatives leave: the call's guard), every access a list of distinct
    plain indices spanning the operand's whole axes (`u[j0, i1]`, so no zero extension or
    cropping), every summation index read by both operands, every generator index by
    exactly one, and at least one generator index (a matrix-vector or matrix-matrix
    product; a plain dot product stays a loop)."""
    if not isinstance(rhs, ContractRhs) or not rhs.sdims:
        return None
    guard = rhs.pred
    if not isinstance(guard, PTrue):
        guard = Facts.of(rhs.ranges(), sizes).simplify(guard)
        if ast.free_names(guard) - set(sizes) or isinstance(guard, PFalse):
            return None
    ranges = rhs.ranges()
    gens, sums = rhs.gen_names(), rhs.sum_names()
    vars_of: list[tuple[str, ...]] = []
    for o in rhs.operands:
        names = tuple(a.as_var() for a in o.idx)
        if any(n is None for n in names) or len(set(names)) != len(names):
            return None
        if len(names) != len(shapes[o.var]):
            return None
        if any(ranges.get(n) != d for n, d in zip(names, shapes[o.var])):  # type: ignore
            return None
        vars_of.append(names)  # type: ignore[arg-type]
    a, b = vars_of
    if any(j not in a or j not in b for j in sums):
        return None
    if any((g in a) == (g in b) for g in gens) or not gens:
        return None
    best: BlasPlan | None = None
    for (lo, lv), (ro, rv) in ((rhs.operands[0], a), (rhs.operands[1], b)), \
                              ((rhs.operands[1], b), (rhs.operands[0], a)):
        il = tuple(g for g in gens if g in lv)
        ir = tuple(g for g in gens if g in rv)
        lperm = tuple(lv.index(n) for n in il + sums)
        rperm = tuple(rv.index(n) for n in sums + ir)
        order = il + ir
        oper = tuple(order.index(g) for g in gens)
        cand = BlasPlan(lo, ro, lperm, rperm, il, ir, oper, guard)
        if best is None or _transposes(cand) < _transposes(best):
            best = cand
    return best


def absorbed_contract(p: Program, var: str) -> tuple[ContractRhs, str] | None:
    """A reduce of a pointwise product, `v[I] = c * sum J. u[A]` with
    `u[K] = c' * a[..] * b[..]` read only here, as the contraction
    `v[I] = c c' * sum J. a[..][K := A] * b[..][K := A]` (and the producer u), or None.
    The simplifier leaves `sum i, j. x[i] * A[i, j] * x[j]` in this shape; as a
    contraction it can go to BLAS instead of a strided loop over the fused product.
    Both masks must be `true` and the read `u[A]` a list of distinct plain indices spanning
    u's axes, so the composed operands read exactly what the producer read."""
    rhs = p.defs[var]
    if not isinstance(rhs, ReduceRhs) or not rhs.sdims or not isinstance(rhs.pred, PTrue):
        return None
    (o,) = rhs.operands
    prod = p.defs.get(o.var)
    if not isinstance(prod, ContractRhs) or prod.sdims or not isinstance(prod.pred, PTrue):
        return None
    if o.var in p.output_vars() or p.uses(o.var) != frozenset({var}):
        return None
    names = [a.as_var() for a in o.idx]
    ranges = rhs.ranges()
    if any(n is None for n in names) or len(set(names)) != len(names) or \
            any(ranges.get(n) != d for n, d in zip(names, prod.dims)):  # type: ignore
        return None
    sub = dict(zip(prod.gen_names(), o.idx))
    ops = [x.subst(sub) for x in prod.operands]
    return ContractRhs(rhs.ix, rhs.dims, rhs.sdims, PTrue(), rhs.coeff * prod.coeff, ops), \
        o.var


def _transposes(b: BlasPlan) -> int:
    return sum(p != tuple(range(len(p))) for p in (b.left_perm, b.right_perm, b.out_perm))


# A chain of fused producers nests one expression per link (a few brackets each); Python
# parses at most 200 nested brackets, so a longer chain is materialised every this many links.
MAX_FUSED_CHAIN = 16

# A pointwise producer read by several statements is still fused into each of them (its
# value recomputed per read) when its whole inlined expression is at most this many
# arithmetic operations: recomputing a difference `P[i, c] - P[j, c]` or a product with a
# stored factor costs less than writing an N x N x 3 array and reading it back twice
# (nbody's gradient: two 96 MB temporaries at N = 2000, above glibc's mmap threshold, so
# fresh pages on every call).
MAX_DUPLICATED_OPS = 12
# Builtins that compile to a few arithmetic instructions (no division, no libm call):
# a producer calling them may be recomputed per consumer.
DUPLICABLE_CALLS = frozenset({"square", "abs", "relu", "step", "sign", "max", "min", "ge",
                              "gt", "sel_ge", "keep_ge", "keep_gt"})


def inline_ops(rhs: Rhs, fused_ops: Mapping[str, int]) -> int | None:
    """Arithmetic operations of a pointwise primitive's printed value, its fused operands'
    expressions included (`fused_ops`: the same count for each fused producer); None when
    it calls a builtin outside `DUPLICABLE_CALLS`."""
    inner = sum(fused_ops.get(o.var, 0) for o in rhs.operands)
    if isinstance(rhs, (ConstRhs, IndexRhs)):
        return 0
    if isinstance(rhs, AddRhs):
        return 1 + inner
    if isinstance(rhs, MapRhs):
        if not builtins_used(rhs) <= DUPLICABLE_CALLS:
            return None
        return len(builtins_used(rhs)) + inner
    assert isinstance(rhs, (ContractRhs, ReduceRhs))
    return max(0, len(rhs.operands) - 1) + (rhs.coeff != 1.0) + inner


def decide_fusion(p: Program, blas: set[str]) -> set[str]:
    """Statements computed inside their consumers instead of being materialised: pointwise,
    not scalar, not an output, not read by a BLAS call, each consumer reading it through
    one distinct access that is injective over the consumer's indices (so a consumer
    computes each of its points at most once), and either read by exactly one statement or
    cheap to recompute in each (`MAX_DUPLICATED_OPS`, `DUPLICABLE_CALLS`)."""
    outs = set(p.output_vars())
    fused: set[str] = set()
    chain: dict[str, int] = {}  # fused producers nested inside each statement's expression
    ops: dict[str, int] = {}    # arithmetic operations of each fused statement's expression
    for s in p.stmts:
        rhs = s.rhs
        if isinstance(rhs, Input) or s.var in outs or not rhs.dims or not is_pointwise(rhs):
            continue
        depth = 1 + max((chain.get(o.var, 0) for o in rhs.operands), default=0)
        if depth > MAX_FUSED_CHAIN:  # materialise: the expression would nest too deeply
            continue
        users = p.uses(s.var)
        if not users or users & blas:
            continue
        n_ops = inline_ops(rhs, ops)
        if len(users) > 1 and (n_ops is None or n_ops > MAX_DUPLICATED_OPS):
            continue
        if all(_fusable_read(s.var, p.defs[c]) for c in users):
            fused.add(s.var)
            chain[s.var] = depth
            ops[s.var] = n_ops if n_ops is not None else MAX_DUPLICATED_OPS + 1
    return fused


def _fusable_read(var: str, consumer: Rhs) -> bool:
    """`consumer` reads `var` through one distinct access, injective over its indices."""
    reads = {o for o in consumer.operands if o.var == var}
    if len(reads) != 1:
        return False
    (o,) = reads
    return injective(o.idx, consumer.gen_names() + consumer.sum_names(), consumer.pred)


# ---------------------------------------------------------------------------------------------
# Statement plans


@dataclass
class StmtPlan:
    var: str
    rhs: Rhs
    mode: str                       # input | fused | blas | loops
    scalar: bool
    blas: BlasPlan | None = None
    gram: GramForm | None = None     # a blas statement run as a weighted Gram product (syrk)
    outer: list[Part] | None = None  # nests binding the generator indices (alternatives)
    inner: list[Part] | None = None  # nests binding the summation indices (sums only)
    facts: Facts | None = None       # what holds in every innermost body
    # a window gather walked by window (`window_walk`): `rhs` is its product over the
    # windows and offsets, stored at these indices of the output's box
    store_at: tuple[Affine, ...] | None = None

    def body_facts(self, outer: Part, inner: Part | None = None) -> Facts:
        assert self.facts is not None
        return self.facts.add(outer.conj + (inner.conj if inner is not None else ()))


@dataclass
class ProgramPlan:
    program: Program
    stmts: list[StmtPlan]
    fused: set[str]
    sizes: list[str]                               # size parameter names
    rel_dims: dict[str, tuple[Affine, ...]]
    patterns: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)
    panels: dict[str, "RowPanel"] = field(default_factory=dict)   # by producer

    @property
    def by_var(self) -> dict[str, StmtPlan]:
        return {s.var: s for s in self.stmts}

    def dims(self, s: StmtPlan) -> tuple[Affine, ...]:
        """The box of statement `s`'s array (a window walk's rhs ranges over its windows)."""
        return s.rhs.dims if s.store_at is None else self.program.shapes[s.var]

    def counted(self) -> list[StmtPlan]:
        """Statements with their own loops or BLAS call (the instrumented ones)."""
        return [s for s in self.stmts if s.mode in ("loops", "blas")]


def plan_reads(rhs: Rhs, plan: ProgramPlan) -> list[tuple[str, tuple[Affine, ...]]]:
    """The materialised values (arrays and scalars) a statement's body reads, through its
    fused producers too, each with its access in the statement's indices, in first-read
    order without repeats."""
    out: list[tuple[str, tuple[Affine, ...]]] = []
    seen: set[tuple[str, tuple[Affine, ...]]] = set()

    def visit(r: Rhs, sub: Mapping[str, Affine]) -> None:
        for o in r.operands:
            idx = tuple(a.subst(sub) for a in o.idx) if sub else o.idx
            if o.var in plan.fused:
                prod = plan.program.defs[o.var]
                visit(prod, dict(zip(prod.gen_names(), idx)))
            elif (o.var, idx) not in seen:
                seen.add((o.var, idx))
                out.append((o.var, idx))
    visit(rhs, {})
    return out


def plan_program(p: Program, use_blas: bool = True, use_relations: bool = True,
                 windows: bool = False) -> ProgramPlan:
    """How every statement of `p` runs (module docstring); `windows`: window gathers
    walked by window (`window_walk`, the CPU kernels not instrumented)."""
    sizes = [q.name for q in p.params if isinstance(q.type, TSize)]
    rel_dims = {q.name: tuple(q.type.sizes) for q in p.params if isinstance(q.type, TRel)}
    p = with_index_array_facts(p, rel_dims, sizes)
    if use_blas:
        p = factor_row_scalings(p)
    arrays = frozenset(q.name for q in p.params if isinstance(q.type, TIndex))
    blas: dict[str, BlasPlan] = {}
    grams: dict[str, GramForm] = {}         # weighted Gram products (syrk)
    composed: dict[str, ContractRhs] = {}   # reduces of products run as contractions
    absorbed: set[str] = set()              # their producers (computed by the BLAS call)
    if use_blas:
        for s in p.stmts:
            if isinstance(s.rhs, Input):
                continue
            b = blas_plan(s.rhs, p.shapes, sizes)
            if b is None:
                ab = absorbed_contract(p, s.var)
                if ab is not None:
                    b = blas_plan(ab[0], p.shapes, sizes)
                    if b is not None:
                        composed[s.var] = ab[0]
                        absorbed.add(ab[1])
            if b is not None:
                blas[s.var] = b
                g = gram_form(p, s.var) if s.var not in composed else None
                if g is not None:
                    grams[s.var] = g
    fused = decide_fusion(p, set(blas))
    for c in composed.values():  # the BLAS call reads these arrays: they cannot be fused
        fused -= {o.var for o in c.operands}
    for g in grams.values():     # syrk reads X and d; the scaled operand is never stored
        fused -= {g.base.var, g.weight.var}
        absorbed.add(g.scaled)
    fused |= absorbed
    plans: list[StmtPlan] = []
    patterns: list[tuple[str, tuple[int, ...], int]] = []
    for s in p.stmts:
        rhs = s.rhs
        scalar = not p.shapes[s.var]
        if isinstance(rhs, Input):
            plans.append(StmtPlan(s.var, rhs, "input", scalar))
            continue
        if s.var in fused:
            plans.append(StmtPlan(s.var, rhs, "fused", scalar))
            continue
        if s.var in blas:
            plans.append(StmtPlan(s.var, composed.get(s.var, rhs), "blas", scalar,
                                  blas=blas[s.var], gram=grams.get(s.var)))
            continue
        walk = window_form(rhs) if windows and not scalar and \
            reads_computed(rhs, p.defs, fused) else None
        plans.append(_loop_plan(s.var, walk.rhs if walk else rhs, scalar, sizes, rel_dims,
                                use_relations, arrays))
        if walk is not None:
            plans[-1].store_at = walk.store_at
        for part in (plans[-1].outer or []) + (plans[-1].inner or []):
            if part.driver is not None and part.driver.pattern not in patterns:
                patterns.append(part.driver.pattern)
    if use_relations:   # the patterns of `exists` that are CSR row tests (codegen_nest)
        for s in p.stmts:
            for q in _quantifiers(s.rhs):
                rt = row_test(q, rel_dims, sizes)
                if rt is not None and rt.pattern not in patterns:
                    patterns.append(rt.pattern)
    plan = ProgramPlan(p, plans, fused, sizes, rel_dims, patterns)
    plan.panels = row_panels(plan)
    return plan


# ---------------------------------------------------------------------------------------------
# Row panels: a small-K matrix product computed in its reader's row loop

# A product `P[i, j] = c * sum k. L[i, k] * R[k, j]` read by one loop statement only at
# `P[g, ..]`, `g` that statement's first loop, need not be stored whole: its reader's loop
# over `g` runs in strips of `PANEL_ROWS` rows (fewer when a row is long: a panel of at most
# `PANEL_ELEMS` elements, 256 KB, stays in the second-level cache), and each strip first
# computes its rows of P with one BLAS call into a panel buffer that its body then reads.
# The N x M product is then never written to memory and read back (nnmatfac's `W H` with
# K = 5 at N = M = 2000: 32 MB each way, a third of the time of f).  Whether a call runs
# so is decided at run time, from the sizes (`panel_runs`): a product with a long summed
# axis is bound by its flops, and BLAS on a panel of a few rows repacks R for every strip
# (measured, one thread, N = M = 2000, a BLAS call per panel of 4-64 rows against one
# call and a pass over the result: 0.67x the time at K = 5, 0.76x at K = 16, 0.9-1.25x at
# K = 64, 1.05-2.3x at K = 256); a product that fits in the cache anyway (at most
# PANEL_ELEMS elements) is one BLAS call, as is one with short rows (a BLAS call per few
# elements).  Elsewhere the product is stored as before and
# the strips read it in place.
PANEL_MAX_K = 32
PANEL_MIN_N = 256      # shorter rows: a BLAS call per few elements
PANEL_ROWS = 64
PANEL_ELEMS = 32768


@dataclass(frozen=True)
class RowPanel:
    producer: str      # a BLAS statement (2-D, one summed index, rows from its left operand)
    consumer: str      # its only reader, a loop statement
    row: str           # the consumer's index over the producer's rows (its first loop)


def panel_runs(m: int, n: int, k: int) -> bool:
    """Whether a row-panel product (`RowPanel`) of `m x k` by `k x n` runs in panels."""
    return 0 < k <= PANEL_MAX_K and n >= PANEL_MIN_N and m * n > PANEL_ELEMS


def panel_rows(n: int) -> int:
    """Rows of a panel of a product with rows of `n` elements."""
    return max(1, min(PANEL_ROWS, PANEL_ELEMS // max(1, n)))


def panel_code(m: str, n: str, k: str) -> tuple[str, str]:
    """`panel_runs` and `panel_rows` as code, of the names of m, n and k."""
    return (f"0 < {k} <= {PANEL_MAX_K} and {n} >= {PANEL_MIN_N} and {m} * {n} > {PANEL_ELEMS}",
            f"max(1, min({PANEL_ROWS}, {PANEL_ELEMS} // {n}))")


def row_panels(plan: ProgramPlan) -> dict[str, RowPanel]:
    """The products computed in their reader's row loop (see `PANEL_MAX_K`), by producer."""
    p = plan.program
    outs = set(p.output_vars())
    readers: dict[str, list[tuple[str, tuple[Affine, ...]]]] = {}
    for t in plan.stmts:
        if t.mode not in ("fused", "input"):
            for v, idx in plan_reads(t.rhs, plan):
                readers.setdefault(v, []).append((t.var, idx))
    by_var = plan.by_var
    out: dict[str, RowPanel] = {}
    for s in plan.stmts:
        b = s.blas
        if s.mode != "blas" or b is None or s.gram is not None or s.var in outs or \
                len(b.i_left) != 1 or len(b.i_right) != 1 or len(s.rhs.sum_names()) != 1 \
                or b.left_perm != (0, 1) or b.out_perm != (0, 1):
            continue
        users = {c for c, _ in readers.get(s.var, [])}
        if len(users) != 1:
            continue
        (c,) = users
        cp = by_var[c]
        g = _first_loop(cp)
        if cp.mode != "loops" or g is None or \
                cp.rhs.ranges().get(g) != p.shapes[s.var][0]:
            continue
        if c not in {rp.consumer for rp in out.values()} and \
                all(idx[0] == Affine.var(g) and idx[1].coeff(g) == 0
                    for v, idx in readers[s.var]):
            out[s.var] = RowPanel(s.var, c, g)
    return out


def _first_loop(s: StmtPlan) -> str | None:
    """The index of the first loop a loop statement's nest prints (the outer nest's, else
    its sum's), when that nest is the statement's only one, without a relation driver, and
    the loop is not the innermost of a sum (those run as blocks); else None."""
    if not s.outer or len(s.outer) != 1 or s.outer[0].driver is not None:
        return None
    levels = _loop_levels(s.outer[0])
    if levels:
        return levels[0]
    if not s.inner or len(s.inner) != 1 or s.inner[0].driver is not None:
        return None
    levels = _loop_levels(s.inner[0])
    return levels[0] if len(levels) > 1 else None


def _loop_levels(part: Part) -> list[str]:
    """The indices of a nest's loops that run over more than one value, outermost first."""
    return [lv.var for lv in part.nest.levels
            if isinstance(lv.loop, LoopBound) and point_level(lv.loop) is None]


def with_index_array_facts(p: Program, rel_dims: Mapping[str, tuple[Affine, ...]],
                           sizes: Sequence[str]) -> Program:
    """`p` with `exists v. idx(i..., v)` over an index array's value a range test of the i
    (`codegen_nest.index_array_exists`).  Done here, from the parameters' types, rather
    than in a pass: it holds only for arguments bound as index arrays (each entry checked
    when bound), which is what a backend receives; the program's meaning over arbitrary
    relations (the interpreter's, the passes') is left alone."""
    arrays = frozenset(q.name for q in p.params if isinstance(q.type, TIndex))
    if not arrays:
        return p

    def rewrite(q: Pred) -> Pred:
        return index_array_exists(q, rel_dims, arrays, sizes)
    stmts = []
    for s in p.stmts:
        rhs = s.rhs
        fields = getattr(rhs, "_fields", ())
        if "pred" in fields:
            vals = [rewrite(getattr(rhs, f)) if f == "pred" else
                    tuple(rewrite(x) for x in getattr(rhs, f)) if f == "supports" else
                    getattr(rhs, f) for f in fields]
            if any(v is not getattr(rhs, f) and v != getattr(rhs, f)
                   for v, f in zip(vals, fields)):
                rhs = type(rhs)(*vals)
        stmts.append(s if rhs is s.rhs else tssa.Stmt(s.var, rhs))
    return dataclasses.replace(p, stmts=tuple(stmts))


def _quantifiers(rhs: Rhs) -> list[Exists]:
    """The outermost `exists` of a statement's mask and supports."""
    out: list[Exists] = []
    todo = [rhs.pred, *getattr(rhs, "supports", ())]
    while todo:
        q = todo.pop()
        if isinstance(q, Exists):
            out.append(q)
        elif isinstance(q, (ast.And, ast.Or)):
            todo += [q.a, q.b]
    return out


def _loop_plan(var: str, rhs: Rhs, scalar: bool, sizes: list[str],
               rel_dims: dict[str, tuple[Affine, ...]], use_relations: bool,
               arrays: frozenset[str] = frozenset()) -> StmtPlan:
    gens = list(zip(rhs.gen_names(), rhs.dims))
    sums = list(zip(rhs.sum_names(), rhs.sdims))
    conj = tssa.conjuncts(rhs.pred)
    facts = Facts.of(rhs.ranges(), sizes, [rhs.pred])
    around = Facts.of(rhs.ranges(), sizes)
    if not sums:
        if isinstance(rhs, AddRhs):
            conj = conj + _live(rhs, facts)
        outer = plan_alternatives(gens, conj, rel_dims, sizes, use_relations, facts=around,
                                  index_arrays=arrays)
        return StmtPlan(var, rhs, "loops", scalar, outer=outer, facts=facts)
    snames = {n for n, _ in sums}
    oconj = [c for c in conj if not (ast.free_names(c) & snames)]
    iconj = [c for c in conj if ast.free_names(c) & snames]
    # An empty sum is 0, so a sum's mask may lean on its reduced index being in range; an
    # empty max/min is -inf/+inf, so its mask (over I only) must be tested as it stands.
    ofacts = Facts.of(dict(gens), sizes) if isinstance(rhs, ExtremeRhs) else around
    outer = plan_alternatives(gens, oconj, rel_dims, sizes, use_relations, facts=ofacts,
                              index_arrays=arrays)
    inner = plan_alternatives(sums, iconj, rel_dims, sizes, use_relations,
                              facts=around.add(oconj), index_arrays=arrays)
    return StmtPlan(var, rhs, "loops", scalar, outer=outer, inner=inner, facts=facts)


def _live(rhs: AddRhs, facts: Facts) -> list[Pred]:
    """`[P1 or P2]`: an add is zero where neither operand is live, so its nest needs only
    visit the union of the supports (split into two thin nests when both pin indices)."""
    s1, s2 = rhs.supports
    if facts.implies(s1) or facts.implies(s2):
        return []
    return [ast.Or(s1, s2)]


# ---------------------------------------------------------------------------------------------
# Scalar expressions


BUILTIN_PREFIX = "tl_"

# Strength reduction of `pow(x, c)` for the exponents derivatives produce most (SPEC 16,
# issue 14 cause 6): products, `recip` and `sqrt` instead of `math.pow` (a libm call of
# 20-40 ns; nbody's gradient spent a third of its time in `pow(d2, -0.5)`).  The kernels pass
# their float constants as arguments (`numba_cpu_source.abstract_constants`), so `tl_pow`'s
# own branches on `c` are not folded by the compiler; these forms are.  Each agrees with
# numpy's `power` on the special values (inf, nan, +-0.0: `recip(-0.0)` squared is +inf
# like `(-0.0) ** -2`) and within an ulp or two elsewhere.  0.5 and 2.0 are `tl_pow`'s own
# branches, bit for bit.  The fractional negative powers take the short form for x > 0 and
# numpy's value, a constant, elsewhere (`_NON_POSITIVE`: -0.0, -inf, negatives and nan,
# where it does not follow from sqrt and recip; a `tl_pow` call there would be speculated:
# the compiler treats the intrinsic as free of side effects and if-converts the branch,
# which doubled nbody's Hessian-vector product).  `recip(sqrt(x))` is then the same value
# as the `recip` of a `sqrt(x)` computed beside it, which the compiler computes once (one
# division for nbody's x^-0.5, sqrt(x)^-2 and sqrt(x)^-3).  A form that uses `x` more than
# once (`REPEATS_X`) is printed with `x` a plain read or a local computed before the
# expression (`ExprPrinter.once`).
_NON_POSITIVE = "(math.inf if {x} == 0.0 else (0.0 if {x} == -math.inf else math.nan))"
POWERS: dict[float, str] = {
    0.5: "{p}sqrt({x})",
    2.0: "{p}square({x})",
    4.0: "{p}square({p}square({x}))",
    -1.0: "{p}recip({x})",
    -2.0: "{p}square({p}recip({x}))",
    -3.0: "({p}square({p}recip({x})) * {p}recip({x}))",
    -0.5: "({p}recip({p}sqrt({x})) if {x} > 0.0 else " + _NON_POSITIVE + ")",
    -1.5: "({p}recip({x} * {p}sqrt({x})) if {x} > 0.0 else " + _NON_POSITIVE + ")",
}
REPEATS_X = frozenset(c for c, form in POWERS.items() if form.count("{x}") > 1)
_PLAIN_READ = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[A-Za-z0-9_ ,+\-*]*\])?\Z")


def builtins_used(rhs: Rhs) -> set[str]:
    """The builtins the printed form of a map calls (`pow` may print as others)."""
    if not isinstance(rhs, MapRhs):
        return set()
    if rhs.fn == "pow" and rhs.params[0] in POWERS:
        return set(re.findall(r"\{p\}(\w+)\(", POWERS[rhs.params[0]]))
    return {rhs.fn}


class ExprPrinter:
    """Python expressions for statement bodies.  `pre` collects lines that must run before
    the expression (flags of `exists` tests, values of fused producers read twice)."""

    def __init__(self, plan: ProgramPlan, namer: Namer, rels: RelNames, counter: list[int],
                 indent: str = "    ") -> None:
        self.plan = plan
        self.p = plan.program
        self.nm = namer
        self.rels = rels
        self.counter = counter
        self.indent = indent
        self.tmp = 0
        self._memo: dict[Operand, str] = {}
        # (statement, access) -> a local holding that element, computed earlier in the same
        # body (sibling loop fusion, backends/sibling_fusion.py)
        self.locals: dict[tuple[str, tuple[Affine, ...]], str] = {}
        # Checked reads at constant indices of these arrays (the kernel's inputs, set by the
        # emitter) are read once, at the top of the kernel, into the locals `hoisted` names
        # (text of the read -> local): each checked read is a branch, and Numba's compile
        # time grows faster than linearly with the branches of a function.
        self.hoistable: frozenset[str] = frozenset()
        # while not None, logs print as `log_normal` and their arguments are collected here
        # (a block of a sum, numba_cpu_source `_block_again`)
        self.normal_logs: list[str] | None = None
        self.hoisted: dict[str, str] = {}
        # Temporaries stored as coordinate vectors (set by the emitter, `storage.
        # coordinate_layouts`), and the position variable of each coordinate loop printed
        # so far, by `codegen_nest.Loop.position` (the emitter registers a loop as it prints
        # it; the plan proved that each read of such a temporary is inside a loop at its
        # member, which is then the latest one registered under that key)
        self.layouts: Mapping[str, CoordLayout] = {}
        self.positions: dict[tuple[str, tuple[int, ...], tuple[str, ...]], str] = {}
        # index name -> code name, while a statement is printed inside another's loop
        self.rename: dict[str, str] = {}
        # products computed in row panels (`RowPanel`; the emitter's choice), and those whose
        # panel is in scope (set as a strip of the reader's row loop is printed): producer
        # -> (the panel buffer, its first row)
        self.panelled: frozenset[str] = frozenset()
        self.panels: dict[str, tuple[str, str]] = {}

    def var(self, v: str) -> str:
        return self.nm.get(VALUE, v)

    def idx(self, a: Affine) -> str:
        from tensorlang.passes.indexsolve import affine_to_python
        return affine_to_python(a, self._index_name)

    def _index_name(self, n: str) -> str:
        if n in self.rename:
            return self.rename[n]
        return self.nm.get(SIZE, n) if n in self.plan.sizes else self.nm.index(n)

    def pred(self, preds: Sequence[Pred], pre: list[str]) -> str:
        g = pred_code(preds, self._index_name, self.rels, self.counter, self.indent)
        pre += g.pre
        return g.code

    # -- reads -------------------------------------------------------------------------------

    def operand(self, o: Operand, facts: Facts, pre: list[str], base: Facts) -> str:
        if not o.idx:
            return self.var(o.var)
        if o.var in self.plan.fused:
            return self.fused(o.var, o.idx, facts, pre, base)
        local = self.locals.get((o.var, o.idx))
        if local is not None:
            return local
        name = self.var(o.var)
        if o.var in self.layouts:
            return f"{name}[{self.position(o.var, o.idx)}]"
        ix = [self.idx(a) for a in o.idx]
        dims = self.p.shapes[o.var]
        if o.var in self.panelled:   # a row of the strip's panel (`RowPanel`)
            if o.var not in self.panels:
                raise AssertionError(f"{o.var} is read outside a strip of its row panel")
            if not facts.implies(Cmp("<=", Affine.lit(0), o.idx[0])) or \
                    not facts.implies(Cmp("<", o.idx[0], dims[0])):
                raise AssertionError(f"{o.var}'s row panel read at a row out of range")
            name, first = self.panels[o.var]
            ix[0] = f"{ix[0]} - {first}"
        read = f"{name}[{', '.join(ix)}]"
        checks: list[str] = []
        for k, (a, n) in enumerate(zip(o.idx, dims)):
            lo = not facts.implies(Cmp("<=", Affine.lit(0), a))
            hi = not facts.implies(Cmp("<", a, n))
            if lo and hi:
                checks.append(f"0 <= {ix[k]} < {name}.shape[{k}]")
            elif lo:
                checks.append(f"0 <= {ix[k]}")
            elif hi:
                checks.append(f"{ix[k]} < {name}.shape[{k}]")
        if not checks:
            return read
        checked = f"({read} if {' and '.join(checks)} else 0.0)"
        if o.var in self.hoistable and all(a.is_const() for a in o.idx):
            return self.hoisted.setdefault(checked, f"_in{len(self.hoisted)}")
        return checked

    def position(self, v: str, idx: Sequence[Affine]) -> str:
        """The position variable of the coordinate loop at whose member `v` (a coordinate
        vector) is accessed at `idx`; loud when there is none (the plan proved one)."""
        layout = self.layouts[v]
        for loop, var in self.positions.items():
            if layout.position(idx, loop):
                return var
        raise AssertionError(f"{v}{list(map(str, idx))} is read outside a loop over the "
                             f"coordinates of {layout.rel}")

    def fused(self, v: str, idx: Sequence[Affine], facts: Facts, pre: list[str],
              base: Facts) -> str:
        rhs = self.p.defs[v]
        sub = dict(zip(rhs.gen_names(), idx))
        conds = in_bounds(idx, rhs.dims) + tssa.conjuncts(ast.subst(rhs.pred, sub))
        need: list[Pred] = []
        for c in conds:
            c = facts.simplify(c)
            if isinstance(c, PFalse):
                return "0.0"        # the producer is zero wherever this read happens
            if not isinstance(c, PTrue):
                need.append(c)
        value = self.pointwise(rhs, sub, facts.add(conds), pre, base)
        if not need:
            return value
        return f"({value} if {self.pred(need, pre)} else 0.0)"

    # -- primitives --------------------------------------------------------------------------

    def pointwise(self, rhs: Rhs, sub: Mapping[str, Affine], facts: Facts, pre: list[str],
                  base: Facts) -> str:
        """The value of a pointwise primitive at the point `sub` (its mask holds there)."""
        ops = [o.subst(sub) if sub else o for o in rhs.operands]
        if isinstance(rhs, ConstRhs):
            return num(rhs.value)
        if isinstance(rhs, IndexRhs):  # an index value: the integer index arithmetic as a real
            return f"float({self.idx(rhs.value.subst(sub) if sub else rhs.value)})"
        if isinstance(rhs, AddRhs):
            parts = []
            for s, o in zip(rhs.supports, ops):
                sp = facts.simplify(ast.subst(s, sub) if sub else s)
                if isinstance(sp, PTrue):
                    parts.append(self._read(o, ops, facts, pre, base))
                elif isinstance(sp, PFalse):
                    parts.append("0.0")   # as the interpreter: where(false, u, 0.0) + ...
                else:
                    inner = self._read(o, ops, facts.add([sp]), pre, base)
                    parts.append(f"({inner} if {self.pred(tssa.conjuncts(sp), pre)} "
                                 f"else 0.0)")
            return f"({parts[0]} + {parts[1]})"
        if isinstance(rhs, MapRhs):
            if rhs.fn == "pow" and rhs.params[0] in REPEATS_X:
                x = self.once(ops[0], facts, pre, base)
                return POWERS[rhs.params[0]].format(x=x, p=BUILTIN_PREFIX)
            args = [self._read(o, ops, facts, pre, base) for o in ops]
            if rhs.fn == "pow" and rhs.params[0] in POWERS:
                return POWERS[rhs.params[0]].format(x=args[0], p=BUILTIN_PREFIX)
            if rhs.fn == "log" and self.normal_logs is not None:
                self.normal_logs.append(args[0])
                return f"{BUILTIN_PREFIX}log_normal({args[0]})"
            args += [num(c) for c in rhs.params]
            return f"{BUILTIN_PREFIX}{rhs.fn}({', '.join(args)})"
        return self.product(rhs.coeff, ops, facts, pre, base)

    def product(self, coeff: float, ops: Sequence[Operand], facts: Facts, pre: list[str],
                base: Facts) -> str:
        """`c * u1 * u2`, left to right, `c` omitted when 1 (as `tssa.to_core` writes it)."""
        factors = ([] if coeff == 1.0 else [num(coeff)])
        factors += [self._read(o, ops, facts, pre, base) for o in ops]
        return factors[0] if len(factors) == 1 else "(" + " * ".join(factors) + ")"

    def _read(self, o: Operand, ops: Sequence[Operand], facts: Facts, pre: list[str],
              base: Facts) -> str:
        """An operand; a fused producer read twice by the same primitive is computed once
        into a local (with the body's facts only, since the local is unconditional)."""
        if o.var in self.plan.fused and sum(x == o for x in ops) > 1:
            return self._local(o, pre, base)
        return self.operand(o, facts, pre, base)

    def once(self, o: Operand, facts: Facts, pre: list[str], base: Facts) -> str:
        """An operand whose text may be repeated: a plain read (no guard), or else a local
        computed before the expression (with the body's facts only: it is unconditional)."""
        first: list[str] = []
        text = self.operand(o, facts, first, base)
        if _PLAIN_READ.match(text):
            pre += first
            return text
        return self._local(o, pre, base)

    def _local(self, o: Operand, pre: list[str], base: Facts) -> str:
        """`o` computed once into a local before the expression (with the body's facts only,
        since the local is unconditional)."""
        if o not in self._memo:
            self.tmp += 1
            name = f"_f{self.tmp}"
            pre.append(f"{name} = {self.operand(o, base, pre, base)}")
            self._memo[o] = name
        return self._memo[o]

    def reset(self) -> None:
        """Forget hoisted locals (call at the start of each statement body)."""
        self._memo = {}
