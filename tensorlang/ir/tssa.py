"""Tensor SSA (SPEC 5): the IR of derivatives, the simplifier and the backends.

A `Program` is the original definition's parameters, a list of statements `v = rhs` in
dependency order, and an output (a variable, or a right-nested pair tree of variables).
Every right-hand side is ONE masked primitive over generator indices I and summation
indices J, with a predicate P over I and J and affine accesses A:

    input     v = x  or  x.0.1                                     `Input`
    const     v = gen I. [P] * c                                   `ConstRhs`
    add       v = gen I. [P] * ([P1] * u1[A1] + [P2] * u2[A2])     `AddRhs`
    map       v = gen I. [P] * f(u1[A1], ...)                      `MapRhs`
    contract  v = gen I. sum J. [P] * c * u1[A1] * u2[A2]          `ContractRhs`
    reduce    v = gen I. sum J. [P] * c * u1[A1]                   `ReduceRhs`
    box       v = fn(u1, ...).part  (SPEC 13: cholesky, trisolve..)  `BoxRhs`
    extreme   v = gen I. [P] * max j. u1[A1]   (or min)            `ExtremeRhs`
    index     v = gen I. a(I)   (an index value, SPEC 12)          `IndexRhs`

Canonical conventions (enforced by the node constructors, so that structurally equal
statements are the same interned node and CSE is a dictionary lookup):

  * generator index k is named `ix[0] + str(k)` (default `i0, i1, ...`), summation index k
    `ix[1] + str(k)` (`j0, ...`), an `exists` bound at nesting depth d `ix[2] + str(d)`
    (`k0, ...`).  `ix` is chosen per program so that it never clashes with a parameter.
  * add operands (with their supports) and contract operands are in a fixed total order,
    and the summation indices of contract/reduce are permuted to the least such form;
  * predicates are canonical: `and`/`or` flattened, deduplicated and sorted; comparisons
    become `L <= R` or `L == R` with integer-tightened coefficients and a fixed sign;
    comparisons implied (or refuted) by the index ranges are dropped (or become false).

An operand `u[A]` reads with zero extension (SPEC 2.2): out of `u`'s range it is 0, which
is what `sum j:n. [j == a] * u[j]` means.  In an add, `P1`/`P2` are the operands' supports
(where they are structurally non-zero): the addition is counted only where both hold.
`to_core` turns a program into the equivalent core `Def` (a `let` per statement): its
meaning, and a form whose SPEC 3 cost is exactly the cost of the primitives (`c *` with
c == 1 is omitted, a contraction costs its multiplications where P holds and
`max(0, m - 1)` additions per output point, m = number of J points where P holds; an add
costs one addition where P, P1 and P2 hold, a map one call where P holds).

Elsewhere: `ir.canon` (canonical predicates, the node order), `ir.build` (the `Builder`
and the `make_*` constructors), `syntax.ssa_printer` (text), `semantics.interp`
(`evaluate_program`) and `semantics.cost` (`prim_cost`, `cost_program`).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence, Union

from tensorlang.ir import ast
from tensorlang.ir.ast import (Affine, And, Node, Param, PFalse, Pred, PTrue, TArr, TPair,
                               TReal, TSize, Type)
from tensorlang.ir.canon import assemble, canon_pred, conjuncts, node_key

IX: tuple[str, str, str] = ("i", "j", "k")
"""Default prefixes of generator, summation and `exists` index names."""

Out = Union[str, tuple]
"""An output: a variable name, or a pair `(Out, Out)` (n-tuples nest to the right)."""

AffineLike = Union[Affine, int, str]


def aff(x: AffineLike) -> Affine:
    """An `Affine` from an Affine, an integer literal or an index/size name."""
    if isinstance(x, Affine):
        return x
    if isinstance(x, str):
        return Affine.var(x)
    return Affine.lit(int(x))

# ---------------------------------------------------------------------------------------------
# Right-hand sides


class Operand(Node):
    """`var[idx]`: a zero-extended affine read of a statement variable (`var` if scalar)."""

    __slots__ = ("var", "idx")
    _fields = ("var", "idx")
    var: str
    idx: tuple[Affine, ...]

    @classmethod
    def _norm(cls, var: str, idx: Iterable[AffineLike] = ()) -> tuple:
        return (str(var), tuple(aff(a) for a in idx))

    def rename(self, mapping: Mapping[str, str]) -> "Operand":
        return Operand(mapping.get(self.var, self.var), self.idx)

    def subst(self, mapping: Mapping[str, Affine]) -> "Operand":
        return Operand(self.var, tuple(a.subst(mapping) for a in self.idx))


class Rhs(Node):
    """Base of statement right-hand sides.  Uniform views: `dims`, `sdims`, `pred`,
    `operands`, `coeff`, and `gen_names()` / `sum_names()`."""

    __slots__ = ()
    kind: ClassVar[str] = ""
    dims: tuple[Affine, ...] = ()
    sdims: tuple[Affine, ...] = ()
    operands: tuple[Operand, ...] = ()
    ix: tuple[str, str, str] = IX

    @property
    def pred(self) -> Pred:  # overridden by a field where the primitive has a mask
        return PTrue()

    @property
    def coeff(self) -> float:
        return 1.0

    def gen_names(self) -> tuple[str, ...]:
        return tuple(f"{self.ix[0]}{k}" for k in range(len(self.dims)))

    def sum_names(self) -> tuple[str, ...]:
        return tuple(f"{self.ix[1]}{k}" for k in range(len(self.sdims)))

    def gen_ids(self) -> tuple[Affine, ...]:
        """The generator indices as affines (the identity access `v[i0, i1, ...]`)."""
        return tuple(Affine.var(n) for n in self.gen_names())

    def sum_ids(self) -> tuple[Affine, ...]:
        return tuple(Affine.var(n) for n in self.sum_names())

    def ranges(self) -> dict[str, Affine]:
        return dict(zip(self.gen_names() + self.sum_names(), self.dims + self.sdims))

    def with_operands(self, ops: Sequence[Operand]) -> "Rhs":
        """The same primitive reading other operands (re-canonicalised)."""
        vals = [tuple(ops) if f == "operands" else getattr(self, f) for f in self._fields]
        return type(self)(*vals)

    def rename_vars(self, mapping: Mapping[str, str]) -> "Rhs":
        if not self.operands:
            return self
        return self.with_operands([o.rename(mapping) for o in self.operands])


def index_prefixes(ix: Iterable[str]) -> tuple[str, str, str]:
    t = tuple(str(s) for s in ix)
    if len(t) != 3 or len(set(t)) != 3:
        raise ValueError(f"bad index prefixes {t!r}")
    return t  # type: ignore[return-value]


def _ranges(ix: tuple[str, str, str], dims: Sequence[Affine],
            sdims: Sequence[Affine] = ()) -> dict[str, Affine]:
    out = {f"{ix[0]}{k}": d for k, d in enumerate(dims)}
    out.update({f"{ix[1]}{k}": d for k, d in enumerate(sdims)})
    return out


class Input(Rhs):
    """`v = x` or `v = x.0.1`: a parameter, or a projection path into a pair parameter."""

    __slots__ = ("param", "path")
    _fields = ("param", "path")
    kind = "input"
    param: str
    path: tuple[int, ...]

    @classmethod
    def _norm(cls, param: str, path: Iterable[int] = ()) -> tuple:
        path = tuple(int(k) for k in path)
        if any(k not in (0, 1) for k in path):
            raise ValueError(f"bad projection path {path}")
        return (str(param), path)


class ConstRhs(Rhs):
    """`v = gen I. [P] * c`.  A zero constant is canonically unmasked."""

    __slots__ = ("ix", "dims", "pred", "value")
    _fields = ("ix", "dims", "pred", "value")
    kind = "const"
    value: float

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred,
              value: float) -> tuple:
        ix, dims = index_prefixes(ix), tuple(aff(d) for d in dims)
        value = float(value)
        pred = canon_pred(pred, _ranges(ix, dims), ix[2])
        if value == 0.0 or isinstance(pred, PFalse):
            value, pred = 0.0, PTrue()
        return (ix, dims, pred, value)


def _add_key(pair: tuple[Pred, Operand]) -> tuple:
    return node_key(pair[1]) + node_key(pair[0])


class AddRhs(Rhs):
    """`v = gen I. [P] * ([P1] * u1[A1] + [P2] * u2[A2])`; `supports` = (P1, P2)."""

    __slots__ = ("ix", "dims", "pred", "supports", "operands")
    _fields = ("ix", "dims", "pred", "supports", "operands")
    kind = "add"
    supports: tuple[Pred, Pred]

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred,
              supports: Iterable[Pred], operands: Iterable[Operand]) -> tuple:
        ix, dims = index_prefixes(ix), tuple(aff(d) for d in dims)
        rng = _ranges(ix, dims)
        pred = canon_pred(pred, rng, ix[2])
        outer = {id(q) for q in conjuncts(pred)}
        sups = []
        for s in supports:  # conjuncts already in the mask are redundant in a support
            s = canon_pred(s, rng, ix[2])
            if not isinstance(s, PFalse):
                s = assemble(And, [q for q in conjuncts(s) if id(q) not in outer], PTrue())
            sups.append(s)
        ops = tuple(operands)
        if len(sups) != 2 or len(ops) != 2:
            raise ValueError("add takes two supports and two operands")
        pairs = sorted(zip(sups, ops), key=_add_key)
        return (ix, dims, pred, (pairs[0][0], pairs[1][0]), (pairs[0][1], pairs[1][1]))


class MapRhs(Rhs):
    """`v = gen I. [P] * f(u1[A1], ...)` for a builtin `f` with constant `params`."""

    __slots__ = ("ix", "dims", "pred", "fn", "params", "operands")
    _fields = ("ix", "dims", "pred", "fn", "params", "operands")
    kind = "map"
    fn: str
    params: tuple[float, ...]

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], pred: Pred, fn: str,
              params: Iterable[float], operands: Iterable[Operand]) -> tuple:
        ix, dims = index_prefixes(ix), tuple(aff(d) for d in dims)
        params, ops = tuple(float(c) for c in params), tuple(operands)
        arity = ast.BUILTINS.get(fn)
        if arity is None or arity != (len(ops), len(params)):
            raise ValueError(f"bad builtin call {fn}/{len(ops)} with {len(params)} params")
        return (ix, dims, canon_pred(pred, _ranges(ix, dims), ix[2]), fn, params, ops)


class SumRhs(Rhs):
    """Shared canonicalisation of contract and reduce: the least form over the orderings of
    the summation indices and of the (commutative) operands."""

    __slots__ = ()
    _arity: ClassVar[int] = 0
    _MAX_PERM: ClassVar[int] = 5  # beyond 5! orderings keep the given order of J

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], sdims: Iterable[AffineLike],
              pred: Pred, coeff: float, operands: Iterable[Operand]) -> tuple:
        ix = index_prefixes(ix)
        dims, sdims = tuple(aff(d) for d in dims), tuple(aff(d) for d in sdims)
        ops, coeff = tuple(operands), float(coeff)
        if len(ops) != cls._arity:
            raise ValueError(f"{cls.kind} takes {cls._arity} operand(s), got {len(ops)}")
        if coeff == 0.0:  # `0 * u` is a structural zero to SPEC 3: write a const instead
            raise ValueError(f"{cls.kind} with coefficient 0")
        jn = [f"{ix[1]}{k}" for k in range(len(sdims))]
        perms: Iterable[tuple[int, ...]] = (
            itertools.permutations(range(len(sdims))) if len(sdims) <= cls._MAX_PERM
            else [tuple(range(len(sdims)))])
        best: tuple | None = None
        for perm in perms:
            ren = {jn[perm[k]]: Affine.var(jn[k]) for k in range(len(sdims)) if perm[k] != k}
            sd = tuple(sdims[perm[k]] for k in range(len(sdims)))
            pr = canon_pred(ast.subst(pred, ren) if ren else pred, _ranges(ix, dims, sd), ix[2])
            ren_ops = tuple(o.subst(ren) if ren else o for o in ops)
            for order in set(itertools.permutations(ren_ops)):
                cand = (order, sd, pr)  # accesses first: J in order of first use
                key = node_key(cand)
                if best is None or key < best[0]:
                    best = (key, cand)
        assert best is not None
        order, sd, pr = best[1]
        return (ix, dims, sd, pr, coeff, order)


class ContractRhs(SumRhs):
    """`v = gen I. sum J. [P] * c * u1[A1] * u2[A2]`: a masked binary einsum."""

    __slots__ = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    _fields = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    kind = "contract"
    _arity = 2


class ReduceRhs(SumRhs):
    """`v = gen I. sum J. [P] * c * u1[A1]`: a masked unary einsum (J empty: a masked,
    scaled gather)."""

    __slots__ = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    _fields = ("ix", "dims", "sdims", "pred", "coeff", "operands")
    kind = "reduce"
    _arity = 1


class BoxRhs(Rhs):
    """`v = fn(u1, ...).part`: a linear-algebra black box (SPEC 13, `semantics.boxes`) on
    whole variables (operands with empty access; leading dimensions batch).  `dims` is the
    output shape, `ranks`/`arg_dims` the operands' shapes (concatenated: the cost depends on
    them), `label` the source text of the arguments (for error messages)."""

    __slots__ = ("fn", "part", "dims", "label", "ranks", "arg_dims", "operands")
    _fields = ("fn", "part", "dims", "label", "ranks", "arg_dims", "operands")
    kind = "box"
    fn: str
    part: int
    label: str
    ranks: tuple[int, ...]
    arg_dims: tuple[Affine, ...]

    @classmethod
    def _norm(cls, fn: str, part: int, dims: Iterable[AffineLike], label: str,
              ranks: Iterable[int], arg_dims: Iterable[AffineLike],
              operands: Iterable[Operand]) -> tuple:
        ops = tuple(operands)
        ranks = tuple(int(r) for r in ranks)
        if fn not in ast.BOX_NAMES or any(o.idx for o in ops) or len(ranks) != len(ops):
            raise ValueError(f"bad box statement {fn}({ops})")
        return (str(fn), int(part), tuple(aff(d) for d in dims), str(label), ranks,
                tuple(aff(d) for d in arg_dims), ops)

    def arg_shapes(self) -> list[tuple[Affine, ...]]:
        return ast.split_dims(self.ranks, self.arg_dims)


class ExtremeRhs(Rhs):
    """`v = gen I. [P] * max j:n. u1[A1]` (`op` "max" or "min", SPEC 12): one reduced index,
    a mask over I only (every j takes part: the operand's zeros are values), -inf (+inf)
    where n = 0.  Costs max(0, n - 1) calls per output point where P holds."""

    __slots__ = ("ix", "dims", "sdims", "pred", "op", "operands")
    _fields = ("ix", "dims", "sdims", "pred", "op", "operands")
    kind = "extreme"
    op: str

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], sdims: Iterable[AffineLike],
              pred: Pred, op: str, operands: Iterable[Operand]) -> tuple:
        ix = index_prefixes(ix)
        dims, sdims = tuple(aff(d) for d in dims), tuple(aff(d) for d in sdims)
        ops = tuple(operands)
        if len(sdims) != 1 or len(ops) != 1 or op not in ast.EXTREMA:
            raise ValueError(f"bad extreme: {op} over {len(sdims)} indices of {len(ops)} "
                             "operands")
        pred = canon_pred(pred, _ranges(ix, dims), ix[2])
        if f"{ix[1]}0" in ast.free_names(pred):
            raise ValueError("the mask of a max/min reduction ranges over I only")
        return (ix, dims, sdims, pred, str(op), ops)


class IndexRhs(Rhs):
    """`v = gen I. a(I)`: an affine expression `value` of the generator indices and sizes as a
    real (an iota; SPEC 12, "indices as values").  No operands and no mask: it costs nothing
    (index arithmetic is free, SPEC 3) and is a constant for differentiation (no tangent, no
    cotangent).  `to_core` gives `gen I. IndexValue(a)`."""

    __slots__ = ("ix", "dims", "value")
    _fields = ("ix", "dims", "value")
    kind = "index"
    value: Affine

    @classmethod
    def _norm(cls, ix: Iterable[str], dims: Iterable[AffineLike], value: AffineLike) -> tuple:
        ix, dims = index_prefixes(ix), tuple(aff(d) for d in dims)
        value, gens = aff(value), {f"{ix[0]}{k}" for k in range(len(dims))}
        if any(n not in gens and any(n.startswith(p) and n[len(p):].isdigit() for p in ix)
               for n in value.vars()):
            raise ValueError(f"index value {value} reads indices that are not generators")
        return (ix, dims, value)


KINDS: dict[str, type] = {c.kind: c for c in (Input, ConstRhs, AddRhs, MapRhs, ContractRhs,
                                              ReduceRhs, ExtremeRhs, BoxRhs, IndexRhs)}


class Stmt(Node):
    """`var = rhs`."""

    __slots__ = ("var", "rhs")
    _fields = ("var", "rhs")
    var: str
    rhs: Rhs

# ---------------------------------------------------------------------------------------------
# Types of parameters


def project_type(t: Type, path: Sequence[int]) -> Type:
    """The type of `x.k1.k2...` for `x : t` in struct-of-arrays form
    (`[n](t1, t2) ~ ([n]t1, [n]t2)`)."""
    for k in path:
        t = _proj1(t, k)
    return t


def _proj1(t: Type, k: int) -> Type:
    if isinstance(t, TPair):
        return t.a if k == 0 else t.b
    if isinstance(t, TArr):
        return TArr(t.size, _proj1(t.elem, k))
    raise ValueError(f"projection .{k} of non-pair type {t!r}")


def leaf_paths(t: Type) -> list[tuple[int, ...]]:
    """Projection paths from a (struct-of-arrays) type to its real-tensor leaves."""
    s = ast.scalar_of(t)
    if isinstance(s, TPair):
        return [(0,) + p for p in leaf_paths(_proj1(t, 0))] + \
               [(1,) + p for p in leaf_paths(_proj1(t, 1))]
    return [()]


def soa_type(t: Type) -> Type:
    """The struct-of-arrays form of a type: `[n](t1, t2)` becomes `([n]t1, [n]t2)`."""
    if isinstance(ast.scalar_of(t), TPair):
        return TPair(soa_type(_proj1(t, 0)), soa_type(_proj1(t, 1)))
    return t


def is_real_tensor(t: Type) -> bool:
    return isinstance(ast.scalar_of(t), TReal)

# ---------------------------------------------------------------------------------------------
# Programs


@dataclass(frozen=True)
class Program:
    """A Tensor-SSA program.  Statement variables are distinct; a plain input statement is
    named after its parameter (`x = x`), an input projection `x_0_1 = x.0.1`."""

    name: str
    params: tuple[Param, ...]
    stmts: tuple[Stmt, ...]
    output: Out
    ret: Type | None = None
    ix: tuple[str, str, str] = IX

    @cached_property
    def defs(self) -> dict[str, Rhs]:
        return {s.var: s.rhs for s in self.stmts}

    @cached_property
    def position(self) -> dict[str, int]:
        return {s.var: k for k, s in enumerate(self.stmts)}

    @cached_property
    def param_types(self) -> dict[str, Type]:
        return {p.name: p.type for p in self.params}

    def size_params(self) -> list[str]:
        return [p.name for p in self.params if isinstance(p.type, TSize)]

    def shape(self, var: str) -> tuple[Affine, ...]:
        """The shape of a statement variable (its generator sizes)."""
        return self.shapes[var]

    @cached_property
    def shapes(self) -> dict[str, tuple[Affine, ...]]:
        out: dict[str, tuple[Affine, ...]] = {}
        for s in self.stmts:
            if isinstance(s.rhs, Input):
                out[s.var] = ast.shape_of(project_type(self.param_types[s.rhs.param],
                                                       s.rhs.path))
            else:
                out[s.var] = s.rhs.dims
        return out

    @cached_property
    def users(self) -> dict[str, frozenset[str]]:
        """For every variable, the statements (their variables) that read it."""
        acc: dict[str, set[str]] = {s.var: set() for s in self.stmts}
        for s in self.stmts:
            for o in s.rhs.operands:
                acc.setdefault(o.var, set()).add(s.var)
        return {k: frozenset(v) for k, v in acc.items()}

    def uses(self, var: str) -> frozenset[str]:
        return self.users.get(var, frozenset())

    def output_vars(self) -> list[str]:
        return list(out_leaves(self.output))

    def inputs(self) -> dict[str, Input]:
        return {s.var: s.rhs for s in self.stmts if isinstance(s.rhs, Input)}

    def __str__(self) -> str:
        from tensorlang.syntax.ssa_printer import to_text   # the printer imports this module
        return to_text(self)


def out_leaves(out: Out) -> Iterable[str]:
    if isinstance(out, str):
        yield out
    else:
        for o in out:
            yield from out_leaves(o)


def _map_out(out: Out, f: Callable[[str], str]) -> Out:
    return f(out) if isinstance(out, str) else tuple(_map_out(o, f) for o in out)


def dce(p: Program) -> Program:
    """Drop statements the output does not (transitively) read."""
    live = set(p.output_vars())
    keep: list[Stmt] = []
    for s in reversed(p.stmts):
        if s.var in live:
            keep.append(s)
            live.update(o.var for o in s.rhs.operands)
    return Program(p.name, p.params, tuple(reversed(keep)), p.output, p.ret, p.ix)


def toposort(p: Program) -> Program:
    """Statements in dependency order (stable: keeps the given order where it is valid)."""
    defs = p.defs
    done: set[str] = set()
    order: list[Stmt] = []
    stmt_of = {s.var: s for s in p.stmts}

    def visit(v: str, stack: set[str]) -> None:
        if v in done:
            return
        if v in stack:
            raise ValueError(f"cyclic definition of {v}")
        stack.add(v)
        for o in defs[v].operands:
            if o.var not in defs:
                raise ValueError(f"{v} reads undefined {o.var}")
            visit(o.var, stack)
        stack.discard(v)
        done.add(v)
        order.append(stmt_of[v])

    for s in p.stmts:
        visit(s.var, set())
    return Program(p.name, p.params, tuple(order), p.output, p.ret, p.ix)


def prefix_ok(prefix: str, taken: Iterable[str]) -> bool:
    pat = re.compile(re.escape(prefix) + r"[0-9]+")
    return not any(pat.fullmatch(t) for t in taken)


def choose_ix(taken: Iterable[str]) -> tuple[str, str, str]:
    """Index prefixes whose names `<prefix><digits>` clash with none of `taken`."""
    taken = list(taken)
    for cand in itertools.chain([IX], ((f"i{n}_", f"j{n}_", f"k{n}_") for n in itertools.count())):
        if all(prefix_ok(c, taken) for c in cand):
            return cand
    raise AssertionError("unreachable")


def var_prefix(taken: Iterable[str]) -> str:
    taken = list(taken)
    for cand in itertools.chain(["v", "t", "w"], (f"v{n}_" for n in itertools.count())):
        if prefix_ok(cand, taken):
            return cand
    raise AssertionError("unreachable")


def input_name(param: str, path: Sequence[int], taken: Iterable[str]) -> str:
    """The statement variable of input `param.path` (the parameter itself when no path)."""
    if not path:
        return param
    base = param + "_" + "_".join(str(k) for k in path)
    name, taken = base, set(taken)
    while name in taken:
        name += "_"
    return name


def renumber(p: Program) -> Program:
    """Canonical statement names: inputs keep their names, the others become `v0, v1, ...`
    in statement order (operands re-sorted by the constructors)."""
    taken = [q.name for q in p.params] + [s.var for s in p.stmts if isinstance(s.rhs, Input)]
    vp = var_prefix(taken)
    mapping: dict[str, str] = {}
    k = 0
    for s in p.stmts:
        if isinstance(s.rhs, Input):
            mapping[s.var] = s.var
        else:
            mapping[s.var] = f"{vp}{k}"
            k += 1
    stmts = tuple(Stmt(mapping[s.var], s.rhs.rename_vars(mapping)) for s in p.stmts)
    return Program(p.name, p.params, stmts, _map_out(p.output, lambda v: mapping[v]),
                   p.ret, p.ix)

# ---------------------------------------------------------------------------------------------
# to_core: the equivalent core definition (a let per statement)


def _read(o: Operand) -> ast.Expr:
    return ast.Access(ast.Var(o.var), o.idx) if o.idx else ast.Var(o.var)


def _iv(p: Pred, e: ast.Expr) -> ast.Expr:
    return e if isinstance(p, PTrue) else ast.Iverson(p, e)


def _wrap(binder: type, names: Sequence[str], sizes: Sequence[Affine], e: ast.Expr) -> ast.Expr:
    for name, size in reversed(list(zip(names, sizes))):
        e = binder(name, size, e)
    return e


def _product(coeff: float, ops: Sequence[Operand]) -> ast.Expr:
    """`c * u1 * u2` left-associated; `c` omitted when it is 1 (it costs nothing)."""
    factors: list[ast.Expr] = ([] if coeff == 1.0 else [ast.Const(coeff)]) + [_read(o) for o in ops]
    out = factors[0]
    for f in factors[1:]:
        out = ast.Mul(out, f)
    return out


def rhs_to_expr(rhs: Rhs) -> ast.Expr:
    """The core expression of one right-hand side (its free variables: operands, sizes,
    relations, and for inputs the parameter)."""
    if isinstance(rhs, Input):
        e: ast.Expr = ast.Var(rhs.param)
        for k in rhs.path:
            e = ast.Proj(e, k)
        return e
    if isinstance(rhs, ConstRhs):
        body: ast.Expr = _iv(rhs.pred, ast.Const(rhs.value))
    elif isinstance(rhs, IndexRhs):
        body = ast.IndexValue(rhs.value)
    elif isinstance(rhs, AddRhs):
        (s1, s2), (o1, o2) = rhs.supports, rhs.operands
        body = _iv(rhs.pred, ast.Add(_iv(s1, _read(o1)), _iv(s2, _read(o2))))
    elif isinstance(rhs, MapRhs):
        body = _iv(rhs.pred, ast.Call(rhs.fn, tuple(_read(o) for o in rhs.operands), rhs.params))
    elif isinstance(rhs, BoxRhs):
        return ast.Box(rhs.fn, rhs.part, tuple(ast.Var(o.var) for o in rhs.operands),
                       rhs.label, rhs.ranks, rhs.arg_dims)
    elif isinstance(rhs, SumRhs):
        body = _wrap(ast.Sum, rhs.sum_names(), rhs.sdims,
                     _iv(rhs.pred, _product(rhs.coeff, rhs.operands)))
    elif isinstance(rhs, ExtremeRhs):
        body = _iv(rhs.pred, ast.EXTREMA[rhs.op](rhs.sum_names()[0], rhs.sdims[0],
                                                 _read(rhs.operands[0])))
    else:
        raise TypeError(f"not a right-hand side: {rhs!r}")
    return _wrap(ast.Gen, rhs.gen_names(), rhs.dims, body)


def _out_expr(out: Out) -> ast.Expr:
    if isinstance(out, str):
        return ast.Var(out)
    a, b = out
    return ast.Pair(_out_expr(a), _out_expr(b))


def to_core(p: Program) -> ast.Def:
    """The equivalent core `Def`: `let v = <rhs> in ...` per statement (plain inputs are the
    parameters themselves and get no `let`).  Interpreter and cost model evaluate SSA
    programs through this."""
    body = _out_expr(p.output)
    for s in reversed(p.stmts):
        if isinstance(s.rhs, Input) and not s.rhs.path and s.var == s.rhs.param:
            continue
        body = ast.Let(s.var, rhs_to_expr(s.rhs), body)
    return ast.Def(p.name, p.params, p.ret, body)
