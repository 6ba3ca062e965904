"""The JAX backend (SPEC 14): Tensor SSA -> generated `jax.numpy` source -> `jax.jit` (XLA).

    compile_program(p: tssa.Program, mesh=None, shard=None) -> CompiledProgram
    generated_source(p) -> str              (what `tl show FILE FUNC --stage jax` prints)

The program (our derivative and simplifier have already run: XLA only executes) becomes ONE
function `tl_program(sizes..., inputs..., relations...)`, jitted once per program with the
sizes static (shapes depend on them) and kept in this process.  Per statement
`v = gen I. sum J. [P] * c * u1[A1] * u2[A2]` (docs/gpu-and-clusters.md):

  * a read `u[A]` whose every index is `c * i + o` for a distinct index i (or a constant)
    is static slices, reversals and pads (`jax_rt.tl_axes`); any other affine read is a
    gather of clipped indices from index grids (`tl_gather`); both give 0 out of range;
  * masks: the conjuncts of P over I alone are applied to the result (`jnp.where`), those
    over the indices of one operand to that operand, the others inside the sum.
    Comparisons are evaluated on index grids (`tl_iota`), a relation `R(a, b)` is a read
    of its boolean mask, `exists` an `any` over one more axis;
  * a contract/reduce whose mask has a conjunct `R(x1, ..., xk)` over distinct plain
    indices of an unsharded relation may run over R's stored tuples instead (a (nnz, k)
    coordinate argument): gathers at the coordinates, the rest of P per tuple, a segment
    sum / unique scatter into the generator box (`tl_scatter`); chosen at trace time when
    the tuples are few (`jax_rt.tl_sparse`), else the dense path below;
  * a contract/reduce whose remaining in-sum mask is trivial is ONE `jnp.einsum` (XLA's
    dot_general) of the aligned operands; otherwise a masked broadcast product summed over
    J.  A sum index read as `u[i - j + c]` (a stencil) may instead run over u's range
    (`sheared`), whichever box is smaller once the sizes are known;
  * const, add and map are element-wise `jnp` expressions under their masks; builtins are
    `jax_rt.FUNCS`.

Results are float / numpy arrays / tuples as the interpreter returns them.  With a `mesh`
and `shard={"A": ("data", None)}` the inputs are placed with `NamedSharding`s (others
replicated), XLA partitions the program (GSPMD), and results stay on the devices as
`jax.Array`s with the sharding XLA chose.
"""
from __future__ import annotations

import threading
import types
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tensorlang.ir import ast, build, canon
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.ir.ast import Affine, And, Cmp, Exists, Or, PFalse, Pred, PTrue, RelCall
from tensorlang.ir.tssa import Program
from tensorlang.semantics import interp
from tensorlang.syntax.errors import TLError

from .codegen import MASK, SIZE, VALUE, Namer, num, safe_comment

COORDS = "rc"   # role prefix of a relation's coordinate array (codegen.MASK: its mask)

BACKEND = "jax"
INDENT = "    "
ENTRY = "tl_program"
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

__all__ = ["compile_program", "generated_source", "CompiledProgram", "available"]


def available() -> tuple[bool, str]:
    """Whether jax imports (the backend's only requirement)."""
    try:
        import jax
    except Exception as err:  # noqa: BLE001 -- any failure to import means "not installed"
        return False, f"jax not importable ({type(err).__name__}: {err})"
    return True, jax.__version__


# ---------------------------------------------------------------------------------------------
# Source generation


@dataclass(frozen=True)
class _Scope:
    """Index names in scope while printing one statement: name -> (axis, size code)."""

    axes: dict[str, tuple[int, str]]
    box: str              # code of the tuple of the sizes of all axes
    top: bool             # the statement's own box (index grids are named locals)
    ranges: dict[str, Affine]   # the ranges of the indices (as in the program)
    tag: str = ""         # distinguishes the grids of a second named scope (`_o_i0`)
    # coordinate lowering: index -> (code of the (nnz, k) coordinate array, its column);
    # these indices all share axis 0 (one point per stored tuple of the relation)
    coords: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return len({axis for axis, _ in self.axes.values()})


class JaxEmitter:
    def __init__(self, p: Program, dense: frozenset[str] = frozenset()) -> None:
        self.p = p
        self.dense = dense                   # relations kept as boolean masks (sharded)
        self.used: set[tuple[str, str]] = set()   # ("mask" | "coords", relation) read
        self.nm = Namer()
        self.sizes = set(p.size_params())
        self.rel_sizes = {q.name: q.type.sizes for q in p.params if isinstance(q.type, ast.TRel)}
        self.lines: list[str] = []
        self.grids: dict[str, str] = {}      # index grids the current statement uses
        self.fns: set[str] = set()

    # -- names and affine code ---------------------------------------------------------------

    def var(self, v: str) -> str:
        return self.nm.get(VALUE, v)

    def size(self, n: str) -> str:
        return self.nm.get(SIZE, n)

    def affine(self, a: Affine, scope: _Scope | None) -> str:
        """`a` as code: sizes are Python ints, indices are grids of the scope."""
        parts: list[str] = []
        for name, c in a.terms:
            if name in self.sizes:
                t = self.size(name)
            else:
                if scope is None or name not in scope.axes:
                    raise TLError(f"index {name!r} out of scope in the JAX backend")
                t = self.grid(name, scope)
            parts.append(t if c == 1 else f"{c} * {t}" if c > 0 else
                         f"-{t}" if c == -1 else f"{c} * {t}")
        if a.const or not parts:
            parts.append(str(a.const))
        out = parts[0]
        for t in parts[1:]:
            out += f" - {t[1:]}" if t.startswith("-") else f" + {t}"
        return out if len(parts) == 1 else f"({out})"

    def dim(self, a: Affine) -> str:
        return str(max(0, a.const)) if a.is_const() else f"max(0, {self.affine(a, None)})"

    def grid(self, name: str, scope: _Scope) -> str:
        if name in scope.coords:
            arr, col = scope.coords[name]
            return f"tl_coord({arr}, {col}, {scope.rank})"
        axis, size = scope.axes[name]
        if scope.top:
            code = self.nm.index(name)
            if scope.tag:      # (generated names never start with `_`: no clash)
                code = f"_{scope.tag}_{code}"
            self.grids[code] = f"tl_iota({size}, {axis}, {scope.rank})"
            return code
        return f"tl_iota({size}, {axis}, {scope.rank})"

    def offset(self, a: Affine) -> str:
        """The size-only part of an affine index (a Python int at trace time)."""
        sizes_only = Affine(tuple((n, c) for n, c in a.terms if n in self.sizes), a.const)
        return self.affine(sizes_only, None)

    # -- reads -------------------------------------------------------------------------------

    def read(self, arr: str, idx: Sequence[Affine], scope: _Scope,
             shape: Sequence[Affine]) -> tuple[str, tuple[int, ...]]:
        """`arr[idx]` with zero extension: (code, the box axis of each axis of the result).
        `shape` is the array's shape: a read of each axis by its own index over the same
        range is the array itself (its axes in access order); other reads give increasing
        box axes."""
        if not idx:
            return arr, ()
        per: list[list[tuple[str, int]]] = [
            [(n, c) for n, c in a.terms if n not in self.sizes] for a in idx]
        used = sorted({scope.axes[n][0] for comp in per for n, _ in comp})
        names = [comp[0][0] for comp in per if comp]
        plain = [a.as_var() for a in idx]
        if any(n in scope.coords for comp in per for n, _ in comp):
            pass      # indices at the relation's coordinates: a gather (below)
        elif all(v is not None and v in scope.axes for v in plain) and \
                len(set(plain)) == len(plain) and \
                all(scope.ranges[v] == d for v, d in zip(plain, shape)):
            return arr, tuple(scope.axes[v][0] for v in plain)   # (any order: a transpose)
        elif all(len(comp) <= 1 for comp in per) and len(names) == len(set(names)):
            spec = []
            for a, comp in zip(idx, per):
                if comp:
                    n, c = comp[0]
                    spec.append(f"({scope.axes[n][0]}, {c}, {self.offset(a)})")
                else:
                    spec.append(f"(-1, 0, {self.offset(a)})")
            return (f"tl_axes({arr}, ({', '.join(spec)},), {scope.box}, "
                    f"{_tuple(used)})", tuple(used))
        comps = ", ".join(self.affine(a, scope) for a in idx)
        shape = ", ".join(f"{scope.box}[{p}]" for p in used)
        return (f"tl_gather({arr}, ({comps},), ({shape}{',' if len(used) == 1 else ''}))",
                tuple(used))

    def operand(self, o: tssa.Operand, scope: _Scope) -> tuple[str, tuple[int, ...]]:
        return self.read(self.var(o.var), o.idx, scope, self.p.shape(o.var))

    def expanded(self, o: tssa.Operand, scope: _Scope) -> str:
        code, axes = self.operand(o, scope)
        return self.expand(code, axes, scope.rank)

    @staticmethod
    def expand(code: str, axes: tuple[int, ...], rank: int) -> str:
        if axes == tuple(range(rank)):
            return code
        if not axes:
            return code
        return f"tl_expand({code}, {_tuple(axes)}, {rank})"

    # -- predicates --------------------------------------------------------------------------

    def pred(self, p: Pred, scope: _Scope) -> str:
        if isinstance(p, PTrue):
            return "True"
        if isinstance(p, PFalse):
            return "False"
        if isinstance(p, Cmp):
            op = {"<=": "<=", "<": "<", "==": "=="}[p.op]
            return f"({self.affine(p.lhs, scope)} {op} {self.affine(p.rhs, scope)})"
        if isinstance(p, And):
            return "(" + " & ".join(self.pred(q, scope) for q in canon.conjuncts(p)) + ")"
        if isinstance(p, Or):
            return "(" + " | ".join(self.pred(q, scope) for q in canon.disjuncts(p)) + ")"
        if isinstance(p, RelCall):
            self.used.add(("mask", p.name))
            code, axes = self.read(self.nm.get(MASK, p.name), p.args, scope,
                                   self.rel_sizes[p.name])
            return self.expand(code, axes, scope.rank)
        if isinstance(p, Exists):
            size = self.dim(p.size)
            axes = dict(scope.axes)
            axes[p.idx] = (scope.rank, size)
            inner = _Scope(axes, f"({scope.box} + ({size},))", False,
                           {**scope.ranges, p.idx: p.size}, coords=scope.coords)
            return f"tl_exists({self.pred(p.body, inner)}, {inner.box})"
        raise TypeError(f"not a predicate: {p!r}")

    # -- statements --------------------------------------------------------------------------

    def stmt(self, s: tssa.Stmt, k: int) -> list[str]:
        rhs, name = s.rhs, self.var(s.var)
        if isinstance(rhs, tssa.BoxRhs):  # SPEC 13: jax.scipy.linalg (jax_rt.tl_box)
            args = ", ".join(self.var(o.var) for o in rhs.operands)
            return [f"# {safe_comment(ssa_printer.fmt_stmt(s))}",
                    f"{name} = tl_box({rhs.fn!r}, {rhs.part}, {args})"]
        self.grids = {}
        box = f"_b{k}"
        gen = rhs.gen_names()
        sizes = rhs.dims + rhs.sdims
        body: list[str] = []
        shape = _tuple_code([f"{box}[{p}]" for p in range(len(gen))])
        boxes = [f"{box} = {_tuple_code([self.dim(d) for d in sizes])}"]
        rel = None
        alt = self.sheared(rhs) if isinstance(rhs, (tssa.ContractRhs, tssa.ReduceRhs)) \
            else None
        rel = self.coordinate_relation(rhs)
        if rel is not None:
            # the stored tuples when they are few enough (trace time: nnz is a shape),
            # else the dense path below
            sbox, points = self.coordinate_sum(rhs, rel, name, box, shape)
            boxes.append(sbox)
            body = [f"if tl_sparse({box}c, {box}):", INDENT + points, "else:"]
        if alt is not None:
            # A stencil's sum also runs over the range of one of its shifted reads: take
            # the smaller box when the sizes are known (trace time).
            sbox = f"_s{k}"
            boxes.append(f"{sbox} = {_tuple_code([self.dim(d) for d in alt.dims + alt.sdims])}")
            dense = [f"if math.prod({sbox}) < math.prod({box}):",
                     *[INDENT + ln for ln in self.summation(alt, name, sbox, shape, "s")],
                     "else:",
                     *[INDENT + ln for ln in self.summation(rhs, name, box, shape, "")]]
            body = body + [INDENT + ln for ln in dense] if body else dense
        elif isinstance(rhs, (tssa.ContractRhs, tssa.ReduceRhs)):
            dense = self.summation(rhs, name, box, shape, "")
            body = body + [INDENT + ln for ln in dense] if body else dense
        elif isinstance(rhs, tssa.ExtremeRhs):
            # the operand over the box (I, j), reduced along j; -inf / +inf when j is empty
            axes = {n: (p, f"{box}[{p}]") for p, n in enumerate(gen + rhs.sum_names())}
            inner = _Scope(axes, box, True, rhs.ranges())
            full = f"tl_full({self.expanded(rhs.operands[0], inner)}, {box})"
            empty = num(ast.EXTREMA[rhs.op].EMPTY)
            red = f"jnp.{rhs.op}({full}, axis=-1, initial={empty})"
            outer = _Scope({n: (p, f"{box}[{p}]") for p, n in enumerate(gen)},
                           f"{box}[:{len(gen)}]", True, rhs.ranges(), "o")
            body = [f"{name} = tl_full({self.masked(rhs.pred, red, outer)}, {shape})"]
        else:
            scope = _Scope({n: (p, f"{box}[{p}]") for p, n in enumerate(gen)}, box, True,
                           rhs.ranges())
            if isinstance(rhs, tssa.ConstRhs):
                value = num(rhs.value)
            elif isinstance(rhs, tssa.IndexRhs):  # an index value: integer grids, as reals
                value = self.affine(rhs.value, scope)
            elif isinstance(rhs, tssa.AddRhs):
                (s1, s2), (o1, o2) = rhs.supports, rhs.operands
                value = (f"{self.masked(s1, self.expanded(o1, scope), scope)} + "
                         f"{self.masked(s2, self.expanded(o2, scope), scope)}")
            elif isinstance(rhs, tssa.MapRhs):
                self.fns.add(rhs.fn)
                args = [self.expanded(o, scope) for o in rhs.operands] + \
                    [num(c) for c in rhs.params]
                value = f"tl_call({rhs.fn!r}, {', '.join(args)})"
            else:
                raise TypeError(f"not a right-hand side: {rhs!r}")
            body = [f"{name} = tl_full({self.masked(rhs.pred, value, scope)}, {shape})"]
        head = [f"# {safe_comment(ssa_printer.fmt_stmt(s))}"]
        if self.has_relation(rhs.pred):
            head.append("# relations: " + (f"coordinates of {rel.name} when sparse, else "
                                            "dense masks" if rel else "dense masks"))
        head += boxes
        head += [f"{g} = {code}" for g, code in self.grids.items()]
        return head + body

    def masked(self, p: Pred, value: str, scope: _Scope) -> str:
        if isinstance(p, PTrue):
            return value
        return f"tl_mask({self.pred(p, scope)}, {value})"

    def sheared(self, rhs: tssa.Rhs) -> tssa.Rhs | None:
        """`sum j. ... u[i - j + c] ...` summed over `t = i - j + c` in u's range instead of
        j's (j := i + c - t, j's range becomes a mask): the stencil's band as a box of
        N x K points instead of N x N.  None when no read has this form."""
        gen, sums = rhs.gen_names(), rhs.sum_names()
        ranges = rhs.ranges()
        taken = set(ast.free_names(rhs.pred)) | set(self.sizes) | set(ranges) | {
            n for o in rhs.operands for a in o.idx for n in a.vars()}
        tname = next(f"t{k}" for k in range(len(taken) + 1) if f"t{k}" not in taken)
        t = Affine.var(tname)
        for jn in sums:
            for o in rhs.operands:
                for k, a in enumerate(o.idx):
                    sign = a.coeff(jn)
                    others = [n for n, _ in a.terms if n != jn and n not in self.sizes]
                    if abs(sign) != 1 or not others or any(n not in gen for n in others):
                        continue
                    rest = a - Affine.var(jn) * sign          # a = sign * j + rest
                    jval = (t - rest) * sign
                    sub = {jn: jval}
                    pred = And(ast.subst(rhs.pred, sub),
                               And(Cmp("<=", Affine.lit(0), jval),
                                   Cmp("<=", jval + 1, ranges[jn])))
                    ops = [op.subst(sub) for op in rhs.operands]
                    gens = list(zip(gen, rhs.dims))
                    sumlist = [(tname, self.p.shape(o.var)[k]) if n == jn else (n, d)
                               for n, d in zip(sums, rhs.sdims)]
                    if isinstance(rhs, tssa.ContractRhs):
                        return build.make_contract(gens, sumlist, ops[0], ops[1], pred,
                                                  rhs.coeff, rhs.ix)
                    return build.make_reduce(gens, sumlist, ops[0], pred, rhs.coeff, rhs.ix)
        return None

    @staticmethod
    def has_relation(p: Pred) -> bool:
        if isinstance(p, RelCall):
            return True
        if isinstance(p, (And, Or)):
            return JaxEmitter.has_relation(p.a) or JaxEmitter.has_relation(p.b)
        return isinstance(p, Exists) and JaxEmitter.has_relation(p.body)

    def coordinate_relation(self, rhs: tssa.Rhs) -> RelCall | None:
        """The relation conjunct of a summation's mask to iterate by its coordinates: the
        first `R(a1, ..., ak)` whose arguments are distinct plain indices of the statement
        (a generator or summation index each) and whose relation is not sharded.  None: the
        dense path (statements without a sum too: a masked `where` over their box moves no
        more data than a gather and a scatter at the stored tuples would)."""
        if not isinstance(rhs, (tssa.ContractRhs, tssa.ReduceRhs)) or not rhs.sum_names():
            return None
        names = set(rhs.gen_names()) | set(rhs.sum_names())
        for q in canon.conjuncts(rhs.pred):
            if not isinstance(q, RelCall) or not q.args or q.name in self.dense:
                continue
            plain = [a.as_var() for a in q.args]
            if all(v is not None and v in names for v in plain) and \
                    len(set(plain)) == len(plain):
                return q
        return None

    def coordinate_sum(self, rhs: tssa.Rhs, rel: RelCall, name: str, box: str,
                       shape: str) -> tuple[str, str]:
        """`gen I. sum J. [R(x) and P] * c * u1[A1] * u2[A2]` at the nnz stored tuples of R:
        the operands are gathered at the coordinates (axis 0) over a box of the other
        indices (generators, then sums), P is evaluated per point, the other sums are
        summed, and the points are scatter-added into the generator box by their generator
        coordinates (`tl_scatter`; segment sums, unique when every x is a generator).
        Returns (the line of the points' box, the statement)."""
        self.used.add(("coords", rel.name))
        gen, sums = rhs.gen_names(), rhs.sum_names()
        ranges = rhs.ranges()
        xs = [a.as_var() for a in rel.args]
        arr = self.nm.get(COORDS, rel.name)
        sizes = dict(zip(gen + sums, [f"{box}[{p}]" for p in range(len(gen + sums))]))
        free_gen = [n for n in gen if n not in xs]
        free_sum = [n for n in sums if n not in xs]
        axes = {n: (0, f"{arr}.shape[0]") for n in xs}
        for p, n in enumerate(free_gen + free_sum):
            axes[n] = (p + 1, sizes[n])
        sbox = f"{box}c"
        line = f"{sbox} = " + _tuple_code([f"{arr}.shape[0]"] +
                                          [sizes[n] for n in free_gen + free_sum])
        scope = _Scope(axes, sbox, False, ranges,
                       coords={n: (arr, m) for m, n in enumerate(xs)})
        rest: list[Pred] = [q for q in canon.conjuncts(rhs.pred) if q != rel]
        # a stored tuple outside an index's range is no point of the sum
        rest += [Cmp("<=", Affine.var(x) + 1, ranges[x])
                 for x, d in zip(xs, self.rel_sizes[rel.name]) if ranges[x] != d]
        pred: Pred = PTrue()
        for q in rest:
            pred = q if isinstance(pred, PTrue) else And(pred, q)
        coeff = "" if rhs.coeff == 1.0 else f"{num(rhs.coeff)} * "
        prod = coeff + " * ".join(self.expanded(o, scope) for o in rhs.operands)
        cols = [m for m, x in enumerate(xs) if x in gen]
        order = [xs[m] for m in cols] + free_gen
        perm = tuple(order.index(n) for n in gen)
        ordered = cols == list(range(len(cols)))        # a prefix: lexicographic order
        unique = len(cols) == len(xs)
        value = (f"tl_scatter({self.masked(pred, prod, scope)}, {sbox}, {len(free_sum)}, "
                 f"{arr}, {_tuple(tuple(cols))}, "
                 f"{_tuple_code([sizes[xs[m]] for m in cols])}, {_tuple(perm)}, "
                 f"{ordered}, {unique})")
        return line, f"{name} = tl_full({value}, {shape})"

    def summation(self, rhs: tssa.Rhs, name: str, box: str, shape: str,
                  tag: str) -> list[str]:
        gen, sums = rhs.gen_names(), rhs.sum_names()
        ni = len(gen)
        full = _Scope({n: (p, f"{box}[{p}]") for p, n in enumerate(gen + sums)}, box, True,
                      rhs.ranges(), tag)
        outer_scope = _Scope({n: (p, f"{box}[{p}]") for p, n in enumerate(gen)},
                             f"{box}[:{ni}]", True, rhs.ranges(), tag + "o")
        outer: list[Pred] = []
        inner: list[Pred] = []
        for q in canon.conjuncts(rhs.pred):
            (inner if ast.free_names(q) & set(sums) else outer).append(q)
        reads = [self.operand(o, full) for o in rhs.operands]
        # An in-sum conjunct over the axes of one operand masks that operand (exact on
        # finite values, like the SSA conversion's hoisting): the product stays an einsum.
        left: list[Pred] = []
        for q in inner:
            qa = {full.axes[n][0] for n in ast.free_names(q) if n in full.axes}
            k = next((k for k, (_, axes) in enumerate(reads) if qa <= set(axes)), None)
            if k is None:
                left.append(q)
                continue
            code, axes = reads[k]
            sub = _Scope({n: (axes.index(a), f"{box}[{a}]") for n, (a, _) in full.axes.items()
                          if a in axes}, _tuple_code([f"{box}[{a}]" for a in axes]), False,
                         full.ranges)
            reads[k] = (f"tl_mask({self.pred(q, sub)}, {code})", axes)
        inner = left
        mentioned = set().union(*(set(a) for _, a in reads))
        for q in inner:
            mentioned |= {full.axes[n][0] for n in ast.free_names(q) if n in full.axes}
        sum_axes = [p for p in range(ni, ni + len(sums)) if p in mentioned]
        unread = [p for p in range(ni, ni + len(sums)) if p not in mentioned]
        coeff = "" if rhs.coeff == 1.0 else f"{num(rhs.coeff)} * "
        lines: list[str] = []
        out_axes = tuple(p for p in range(ni) if p in mentioned)
        broadcast = True      # value: rank ni, size 1 on the axes it does not depend on
        if not inner and not sum_axes:       # element-wise: a broadcast product
            value = coeff + " * ".join(self.expand(code, axes, ni) for code, axes in reads)
        elif not inner and len(mentioned) <= len(LETTERS):
            ins = ",".join("".join(LETTERS[p] for p in axes) for _, axes in reads)
            spec = f"{ins}->{''.join(LETTERS[p] for p in out_axes)}"
            value = f"jnp.einsum({spec!r}, {', '.join(code for code, _ in reads)})"
            value = coeff + value
            broadcast = False
        else:
            rank = full.rank
            factors = [self.expand(code, axes, rank) for code, axes in reads]
            prod = coeff + " * ".join(factors)
            pred: Pred = PTrue()
            for q in inner:  # every in-sum conjunct left (three or more included)
                pred = q if isinstance(pred, PTrue) else And(pred, q)
            value = f"tl_sum({self.masked(pred, prod, full)}, {_tuple(tuple(range(ni, rank)))})"
        if unread:
            count = " * ".join(f"{box}[{p}]" for p in unread)
            value = f"tl_summed({value}, {count})"
        if not broadcast:
            value = self.expand(value, out_axes, ni)
        outer_pred = PTrue()
        for q in outer:
            outer_pred = q if isinstance(outer_pred, PTrue) else And(outer_pred, q)
        lines.append(f"{name} = tl_full({self.masked(outer_pred, value, outer_scope)}, {shape})")
        return lines

    # -- the module --------------------------------------------------------------------------

    def arguments(self) -> list[tuple[str, str, str]]:
        """(kind, code name, key) of each argument of `tl_program`, in order."""
        args: list[tuple[str, str, str]] = []
        for q in self.p.params:
            if isinstance(q.type, ast.TSize):
                args.append(("size", self.size(q.name), q.name))
        for s in self.p.stmts:
            if isinstance(s.rhs, tssa.Input):
                args.append(("input", self.var(s.var), s.var))
        for q in self.p.params:
            if not isinstance(q.type, ast.TRel):
                continue
            coords = ("coords", q.name) in self.used
            if ("mask", q.name) in self.used or not coords:
                args.append(("mask", self.nm.get(MASK, q.name), q.name))
            if coords:
                args.append(("coords", self.nm.get(COORDS, q.name), q.name))
        return args

    def source(self) -> str:
        body: list[str] = []
        k = 0
        for s in self.p.stmts:
            if isinstance(s.rhs, tssa.Input):
                continue
            body += self.stmt(s, k)
            k += 1
        args = self.arguments()     # (after the body: which relations are read how)
        missing = sorted(self.fns - set(_runtime_funcs()))
        if missing:
            raise TLError(f"the JAX backend has no implementation of {', '.join(missing)} "
                          f"(backends/jax_rt.py)")
        outs = [self.var(v) for v in self.p.output_vars()]
        lines = ["# Generated by tensorlang's JAX backend. Do not edit.",
                 "# Tensor-SSA program:"]
        lines += ["#   " + safe_comment(ln) for ln in ssa_printer.to_text(self.p).splitlines()]
        lines += ["import math", "", "import jax.numpy as jnp", "",
                  "from tensorlang.backends.jax_rt import (tl_axes, tl_box, tl_call, tl_coord, "
                  "tl_exists, tl_expand,",
                  "                                        tl_full, tl_gather, tl_iota, tl_mask, "
                  "tl_scatter, tl_sparse,",
                  "                                        tl_sum, tl_summed)", "",
                  "TL_ARGS = " + repr(tuple((kind, key) for kind, _, key in args)), "", ""]
        lines.append(f"def {ENTRY}({', '.join(a[1] for a in args)}):")
        legend = self.nm.legend()
        if legend:
            lines.append(INDENT + "# renamed: " + ", ".join(
                f"{g} = {safe_comment(o)!r}" for g, o in legend))
        lines += [INDENT + ln for ln in body]
        lines.append(INDENT + f"return ({', '.join(outs)},)")
        return "\n".join(lines) + "\n"


def _runtime_funcs() -> list[str]:
    from . import jax_rt

    return list(jax_rt.FUNCS)


def _tuple(t: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, t)) + ("," if len(t) == 1 else "") + ")"


def _tuple_code(items: Sequence[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def generated_source(p: Program, dense: frozenset[str] = frozenset()) -> str:
    """The readable source of the module for `p` (what `tl show --stage jax` prints); the
    same text `compile_program` runs.  `dense`: relations read only as boolean masks (the
    sharded ones)."""
    return JaxEmitter(p, dense).source()


# ---------------------------------------------------------------------------------------------
# Compiled programs


class _Jitted:
    """The generated module of one program and its jitted entry (shared by every
    `CompiledProgram` of that program, whatever its mesh)."""

    def __init__(self, p: Program, dense: frozenset[str]) -> None:
        import jax

        from . import jax_rt  # noqa: F401 -- sets jax_enable_x64 before anything is traced

        self.source = generated_source(p, dense)
        self.module = types.ModuleType(f"tensorlang_kernels.jax.{safe_comment(p.name)}")
        exec(compile(self.source, f"<tensorlang jax program {safe_comment(p.name)}>", "exec"),
             self.module.__dict__)
        self.args: tuple[tuple[str, str], ...] = self.module.TL_ARGS
        static = tuple(k for k, (kind, _) in enumerate(self.args) if kind == "size")
        self.fn = jax.jit(getattr(self.module, ENTRY), static_argnums=static)


class CompiledProgram:
    """A Tensor-SSA program jitted by XLA: call it with the interpreter's argument dict (or
    keywords).  Without a mesh the result is a float, a numpy array or a tuple, as
    `interpret` returns; with a mesh the leaves are `jax.Array`s left on the devices."""

    def __init__(self, program: Program, jitted: _Jitted, mesh: Any = None,
                 shard: Mapping[str, Sequence[Any]] | None = None) -> None:
        self.program = program
        self.source = jitted.source
        self.module = jitted.module
        self.jitted = jitted
        self.mesh = mesh
        self.shard = dict(shard or {})
        self._sig = ast.Def(program.name, program.params, program.ret, ast.Const(0.0))
        self._inputs = program.inputs()
        self._shardings = self._check_shard() if mesh is not None else {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = f", mesh {dict(self.mesh.shape)}" if self.mesh is not None else ""
        return f"<CompiledProgram {self.program.name} (jax{where})>"

    def _check_shard(self) -> dict[str, Any]:
        from jax.sharding import NamedSharding, PartitionSpec

        params = {q.name: q for q in self.program.params}
        names = set(self.mesh.axis_names)
        out: dict[str, Any] = {}
        for key, spec in self.shard.items():
            q = params.get(key)
            if q is None or isinstance(q.type, ast.TSize):
                raise TLError(f"shard: {key!r} is not a tensor or relation parameter of "
                              f"{self.program.name}")
            spec = tuple(spec)
            rank = len(q.type.sizes) if isinstance(q.type, ast.TRel) else \
                len(ast.shape_of(q.type))
            if len(spec) > rank:
                raise TLError(f"shard: {key!r} has {rank} dimension(s), the spec {spec!r} "
                              f"names {len(spec)}")
            for axis in spec:
                for a in (axis if isinstance(axis, tuple) else (axis,)):
                    if a is not None and a not in names:
                        raise TLError(f"shard: mesh has no axis {a!r} (axes: "
                                      f"{', '.join(map(str, self.mesh.axis_names))})")
            out[key] = NamedSharding(self.mesh, PartitionSpec(*spec))
        out[""] = NamedSharding(self.mesh, PartitionSpec())   # everything else: replicated
        return out

    # -- calling -----------------------------------------------------------------------------

    def __call__(self, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
        given = dict(args or {}, **kwargs)
        env = interp.bind_args(self._sig, given)
        values = self._marshal(env)
        out = self.jitted.fn(*values)
        return self._result(out)

    def prepared(self, args: Mapping[str, Any]) -> Any:
        """A thunk running the jitted program on `args` already placed on the devices and
        waiting for the result (`block_until_ready`): what benchmarks time."""
        import jax

        env = interp.bind_args(self._sig, dict(args))
        values = self._marshal(env)
        fn = self.jitted.fn
        return lambda: jax.block_until_ready(fn(*values))

    def lower(self, args: Mapping[str, Any]) -> Any:
        """`jax.jit(...).lower` on these arguments (to inspect XLA's HLO and shardings)."""
        env = interp.bind_args(self._sig, dict(args))
        return self.jitted.fn.lower(*self._marshal(env))

    def _marshal(self, env: interp.Env) -> list[Any]:
        import jax
        import jax.numpy as jnp

        values: list[Any] = []
        for kind, key in self.jitted.args:
            if kind == "size":
                values.append(int(env.sizes[key]))
                continue
            if kind == "input":
                rhs = self._inputs[key]
                v = env.vals[rhs.param][0]
                for k in rhs.path:
                    v = v[k]
                arr, param = np.asarray(v, dtype=np.float64), rhs.param
            elif kind == "coords":
                # the stored tuples, lexicographically sorted and distinct (argwhere of the
                # bound mask, whichever encoding was given): (nnz, k) int64
                arr, param = np.argwhere(env.rels[key]).astype(np.int64), ""
            else:
                arr, param = np.ascontiguousarray(env.rels[key], dtype=np.bool_), key
            if self.mesh is None:
                values.append(jnp.asarray(arr))
            else:
                sharding = self._shardings.get(param, self._shardings[""])
                values.append(jax.device_put(arr, sharding))
        return values

    def _result(self, out: tuple) -> Any:
        if self.mesh is not None:
            leaves = list(out)
        else:
            leaves = [float(x) if np.ndim(x) == 0 else np.array(x, dtype=np.float64)
                      for x in out]
        pos = iter(leaves)

        def build(o: tssa.Out) -> Any:
            return next(pos) if isinstance(o, str) else tuple(build(c) for c in o)

        return build(self.program.output)


_JITTED: dict[tuple[str, frozenset[str]], _Jitted] = {}
_LOCK = threading.Lock()


def compile_program(p: Program, mesh: Any = None,
                    shard: Mapping[str, Sequence[Any]] | None = None) -> CompiledProgram:
    """Jit a Tensor-SSA program with XLA (once per program text in this process; XLA
    compiles once per combination of sizes and input shardings).  `mesh`: a
    `jax.sharding.Mesh`; `shard`: parameter name -> `PartitionSpec` entries over its
    dimensions (mesh axis names or None), e.g. `{"T": ("data", None)}`."""
    if shard and mesh is None:
        raise TLError("shard needs a mesh (compile(backend='jax', mesh=..., shard=...))")
    # a sharded relation stays a boolean mask (its coordinate list has no row layout)
    rels = {q.name for q in p.params if isinstance(q.type, ast.TRel)}
    dense = frozenset(k for k in (shard or {}) if k in rels) if mesh is not None else frozenset()
    key = (ssa_printer.to_text(p), dense)
    with _LOCK:
        hit = _JITTED.get(key)
        if hit is None:
            hit = _JITTED[key] = _Jitted(p, dense)
    return CompiledProgram(p, hit, mesh, shard)


# ---------------------------------------------------------------------------------------------
# Meshes for `tl run --devices N`


def request_host_devices(n: int) -> None:
    """Ask XLA for `n` CPU devices (`--xla_force_host_platform_device_count`); XLA reads the
    flag when jax initialises its backends, so this only helps before the first use."""
    import os

    flag = f"--xla_force_host_platform_device_count={int(n)}"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + flag).strip()


def data_mesh(n: int, axis: str = "data") -> Any:
    """A one-axis mesh over the first `n` devices of the default platform."""
    import jax
    from jax.sharding import Mesh

    devices = jax.devices()
    if n < 1 or n > len(devices):
        raise TLError(f"{n} device(s) asked for, {len(devices)} available "
                      f"({devices[0].platform}); on CPU set XLA_FLAGS="
                      f"--xla_force_host_platform_device_count={n} before jax starts")
    return Mesh(np.array(devices[:n]), (axis,))


def row_shard(params: Sequence[ast.Param], sizes: Mapping[str, int], n: int,
              axis: str = "data") -> dict[str, tuple[Any, ...]]:
    """Shard the first dimension of every tensor and relation parameter over `axis` where
    it divides evenly by `n` (the rest are replicated)."""
    out: dict[str, tuple[Any, ...]] = {}
    for q in params:
        dims = q.type.sizes if isinstance(q.type, ast.TRel) else (
            ast.shape_of(q.type) if isinstance(q.type, ast.TArr) else ())
        if dims and int(dims[0].evaluate(sizes)) % n == 0:
            out[q.name] = (axis,) + (None,) * (len(dims) - 1)
    return out


def to_host(value: Any) -> Any:
    """Results left on devices as numpy values (float for 0-d), tuples kept."""
    if isinstance(value, tuple):
        return tuple(to_host(v) for v in value)
    arr = np.asarray(value, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr
