"""Building Tensor-SSA programs (SPEC 5): statement constructors from arbitrary index names
(renamed to the canonical ones) and the `Builder`, which emits statements with CSE by
hash-consing.  The parser-free way to write SSA programs (passes, derivatives, tests).
"""
from __future__ import annotations

import itertools
from typing import Iterable, Mapping, Sequence, Union

from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, Param, Pred, PTrue, Type
from tensorlang.ir.tssa import (IX, AddRhs, AffineLike, BoxRhs, ConstRhs, ContractRhs, ExtremeRhs,
                                IndexRhs, Input, MapRhs,
                                Operand, Out, Program, ReduceRhs, Rhs, Stmt, aff, choose_ix,
                                dce, index_prefixes, input_name, is_real_tensor, leaf_paths,
                                out_leaves, project_type, renumber, var_prefix)


IndexList = Sequence[tuple[str, AffineLike]]
OperandLike = Union[Operand, tuple]


def _canon_names(ix: tuple[str, str, str], gen: IndexList,
                 sums: IndexList = ()) -> tuple[dict[str, Affine], tuple, tuple]:
    ren: dict[str, Affine] = {}
    for k, (name, _) in enumerate(gen):
        ren[name] = Affine.var(f"{ix[0]}{k}")
    for k, (name, _) in enumerate(sums):
        ren[name] = Affine.var(f"{ix[1]}{k}")
    if len(ren) != len(gen) + len(sums):
        raise ValueError("index names must be distinct")
    return ren, tuple(aff(s) for _, s in gen), tuple(aff(s) for _, s in sums)


def operand(x: OperandLike) -> Operand:
    """`Operand` from an Operand, `(var, [affine-likes])` or a scalar variable name."""
    if isinstance(x, Operand):
        return x
    if isinstance(x, str):
        return Operand(x, ())
    var, idx = x
    return Operand(var, tuple(aff(a) for a in idx))


def _ren_ops(ren: Mapping[str, Affine], ops: Iterable[OperandLike]) -> tuple[Operand, ...]:
    return tuple(operand(o).subst(ren) for o in ops)


def _ren_pred(ren: Mapping[str, Affine], p: Pred) -> Pred:
    return ast.subst(p, ren) if ren else p


def make_const(gen: IndexList, value: float, pred: Pred = PTrue(), ix: Iterable[str] = IX
               ) -> ConstRhs:
    ix = index_prefixes(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return ConstRhs(ix, dims, _ren_pred(ren, pred), value)


def make_index(gen: IndexList, value: AffineLike, ix: Iterable[str] = IX) -> IndexRhs:
    """`gen I. value` for an affine `value` of the indices `gen` and sizes (an iota)."""
    ix = index_prefixes(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return IndexRhs(ix, dims, aff(value).subst(ren))


def make_add(gen: IndexList, a: OperandLike, b: OperandLike, pred: Pred = PTrue(),
             supports: tuple[Pred, Pred] = (PTrue(), PTrue()), ix: Iterable[str] = IX
             ) -> AddRhs:
    ix = index_prefixes(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return AddRhs(ix, dims, _ren_pred(ren, pred),
                  tuple(_ren_pred(ren, s) for s in supports), _ren_ops(ren, (a, b)))


def make_map(gen: IndexList, fn: str, args: Sequence[OperandLike], pred: Pred = PTrue(),
             params: Sequence[float] = (), ix: Iterable[str] = IX) -> MapRhs:
    ix = index_prefixes(ix)
    ren, dims, _ = _canon_names(ix, gen)
    return MapRhs(ix, dims, _ren_pred(ren, pred), fn, params, _ren_ops(ren, args))


def make_contract(gen: IndexList, sums: IndexList, a: OperandLike, b: OperandLike,
                  pred: Pred = PTrue(), coeff: float = 1.0, ix: Iterable[str] = IX
                  ) -> ContractRhs:
    ix = index_prefixes(ix)
    ren, dims, sdims = _canon_names(ix, gen, sums)
    return ContractRhs(ix, dims, sdims, _ren_pred(ren, pred), coeff, _ren_ops(ren, (a, b)))


def make_extreme(gen: IndexList, size: AffineLike, op: str, a: OperandLike,
                 pred: Pred = PTrue(), ix: Iterable[str] = IX, sum_name: str = "") -> ExtremeRhs:
    """`gen I. [pred] * op j:size. a` (op "max" / "min"); `sum_name` is the reduced index's
    name in `a` (default: the canonical one)."""
    ix = index_prefixes(ix)
    sums = [(sum_name or f"{ix[1]}0", size)]
    ren, dims, sdims = _canon_names(ix, gen, sums)
    return ExtremeRhs(ix, dims, sdims, _ren_pred(ren, pred), op, _ren_ops(ren, [a]))


def make_reduce(gen: IndexList, sums: IndexList, a: OperandLike, pred: Pred = PTrue(),
                coeff: float = 1.0, ix: Iterable[str] = IX) -> ReduceRhs:
    ix = index_prefixes(ix)
    ren, dims, sdims = _canon_names(ix, gen, sums)
    return ReduceRhs(ix, dims, sdims, _ren_pred(ren, pred), coeff, _ren_ops(ren, (a,)))

# ---------------------------------------------------------------------------------------------
# Builder


class Builder:
    """Builds programs statement by statement; with `share` (default) an emitted right-hand
    side equal to an earlier one returns the earlier variable (CSE by hash-consing).

    The `const`/`add`/`map`/`contract`/`reduce` helpers take index lists `[(name, size)]`
    with any names and operands `(var, [affines or names])`; they rename to the canonical
    index names.  This is the parser-free way to write SSA programs (tests, derivatives).
    """

    def __init__(self, params: Sequence[Param], *, share: bool = True,
                 ix: Iterable[str] | None = None) -> None:
        self.params: list[Param] = list(params)
        self.share = share
        self._ptypes = {q.name: q.type for q in self.params}
        self._taken: set[str] = set(self._ptypes)
        leaves = [input_name(q.name, path, self._taken) for q in self.params
                  for path in leaf_paths(q.type) if path and is_real_tensor(
                      project_type(q.type, path))]
        self._taken.update(leaves)
        self.ix = index_prefixes(ix) if ix is not None else choose_ix(self._taken)
        self._vp = var_prefix(self._taken)
        self._count = itertools.count()
        self.stmts: list[Stmt] = []
        self.shapes: dict[str, tuple[Affine, ...]] = {}
        self.defs: dict[str, Rhs] = {}
        self._by_rhs: dict[Rhs, str] = {}

    @staticmethod
    def extend(p: Program, *, share: bool = True) -> "Builder":
        """A builder that starts with the statements of `p` (to append to it)."""
        b = Builder(p.params, share=share, ix=p.ix)
        for s in p.stmts:
            b._add(s.var, s.rhs, p.shapes[s.var])
        b._taken.update(s.var for s in p.stmts)
        return b

    def add_param(self, param: Param) -> None:
        if param.name in self._ptypes:
            raise ValueError(f"duplicate parameter {param.name}")
        for path in leaf_paths(param.type):
            if path:
                self._taken.add(input_name(param.name, path, self._taken))
        self.params.append(param)
        self._ptypes[param.name] = param.type
        self._taken.add(param.name)

    # -- emission --------------------------------------------------------------------------

    def _add(self, var: str, rhs: Rhs, shape: tuple[Affine, ...]) -> None:
        self.stmts.append(Stmt(var, rhs))
        self.shapes[var] = shape
        self.defs[var] = rhs
        self._by_rhs.setdefault(rhs, var)

    def _fresh(self) -> str:
        while True:
            name = f"{self._vp}{next(self._count)}"
            if name not in self._taken and name not in self.defs:
                return name

    def input(self, param: str, path: Sequence[int] = ()) -> str:
        """The variable holding input `param.path` (emitted once, whatever `share` says)."""
        rhs = Input(param, tuple(path))
        hit = self._by_rhs.get(rhs)
        if hit is not None:
            return hit
        if param not in self._ptypes:
            raise ValueError(f"no parameter {param}")
        t = project_type(self._ptypes[param], rhs.path)
        if not is_real_tensor(t):
            raise ValueError(f"input {param}{''.join('.' + str(k) for k in path)} is not a "
                             f"real tensor")
        var = input_name(param, rhs.path, (set(self._ptypes) | set(self.defs)) - {param})
        self._add(var, rhs, ast.shape_of(t))
        return var

    def emit(self, rhs: Rhs) -> str:
        """Append `v = rhs` (or reuse an equal statement) and return v."""
        if isinstance(rhs, Input):
            return self.input(rhs.param, rhs.path)
        if self.share:
            hit = self._by_rhs.get(rhs)
            if hit is not None:
                return hit
        for o in rhs.operands:
            shape = self.shapes.get(o.var)
            if shape is None:
                raise ValueError(f"operand {o.var} is not defined")
            if len(shape) != len(o.idx) and not isinstance(rhs, BoxRhs):
                raise ValueError(f"{o.var} has {len(shape)} dimensions, read with {len(o.idx)}")
        var = self._fresh()
        self._add(var, rhs, rhs.dims)
        return var

    def const(self, gen: IndexList, value: float, pred: Pred = PTrue()) -> str:
        return self.emit(make_const(gen, value, pred, self.ix))

    def index(self, gen: IndexList, value: AffineLike) -> str:
        return self.emit(make_index(gen, value, self.ix))

    def add(self, gen: IndexList, a: OperandLike, b: OperandLike, pred: Pred = PTrue(),
            supports: tuple[Pred, Pred] = (PTrue(), PTrue())) -> str:
        return self.emit(make_add(gen, a, b, pred, supports, self.ix))

    def map(self, gen: IndexList, fn: str, args: Sequence[OperandLike], pred: Pred = PTrue(),
            params: Sequence[float] = ()) -> str:
        return self.emit(make_map(gen, fn, args, pred, params, self.ix))

    def contract(self, gen: IndexList, sums: IndexList, a: OperandLike, b: OperandLike,
                 pred: Pred = PTrue(), coeff: float = 1.0) -> str:
        return self.emit(make_contract(gen, sums, a, b, pred, coeff, self.ix))

    def reduce(self, gen: IndexList, sums: IndexList, a: OperandLike, pred: Pred = PTrue(),
               coeff: float = 1.0) -> str:
        return self.emit(make_reduce(gen, sums, a, pred, coeff, self.ix))

    def box(self, fn: str, part: int, dims: Sequence[Affine], args: Sequence[str],
            label: str = "") -> str:
        """`v = fn(args).part` (a linear-algebra box on whole variables; `dims` from
        `semantics.boxes.out_shape`)."""
        shapes = [self.shapes[a] for a in args]
        return self.emit(BoxRhs(fn, part, tuple(dims), label, tuple(len(s) for s in shapes),
                                tuple(d for s in shapes for d in s),
                                tuple(Operand(a, ()) for a in args)))

    def extreme(self, gen: IndexList, size: AffineLike, op: str, a: OperandLike,
                pred: Pred = PTrue(), sum_name: str = "") -> str:
        return self.emit(make_extreme(gen, size, op, a, pred, self.ix, sum_name))

    def program(self, output: Out, name: str = "f", ret: Type | None = None, *,
                prune: bool = True, canonical_names: bool = True) -> Program:
        """The program so far with this output; `prune` drops dead statements,
        `canonical_names` renumbers the statement variables."""
        for v in out_leaves(output):
            if v not in self.defs:
                raise ValueError(f"output {v} is not defined")
        p = Program(name, tuple(self.params), tuple(self.stmts), output, ret, self.ix)
        if prune:
            p = dce(p)
        return renumber(p) if canonical_names else p
