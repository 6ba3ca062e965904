"""The Python API of SPEC 9: `load`, `parse`, `Module`, `Function` and derived functions.

```python
import tensorlang as tl
m = tl.load("examples/qform.tl")
m.qform(x=x, A=A)              # sizes inferred from the shapes; or m.qform(N, x, A)
m.qform.cost(N=100)            # exact SPEC 3 cost of the program as it will run
print(m.qform.show("letlift"))
g = tl.grad(m.qform, "x")
```

A `Function` wraps one elaborated core `Def`.  Arguments are bound to parameters by name or
position; size parameters may always be omitted: they are inferred by unifying each
parameter's type with the shape of the value given (`bind_args`).  Values follow the
argument contract of docs/architecture.md.  Derived functions (`grad`, `jvp`, ...) have their
signatures from the type checker; their programs are the pipeline's `derive` stage (on the
base function as compiled).  Costs, kernels and listings always come from
`tensorlang.pipeline`: a stage that cannot handle a program raises, nothing falls back to an
earlier stage.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from tensorlang import cache, pipeline
from tensorlang.check import typecheck
from tensorlang.semantics import interp, memory, relation
from tensorlang.semantics.bounds import jvp_bound, type_size, vjp_bound
from tensorlang.semantics.relation import Relation
from tensorlang.syntax import limits
from tensorlang.ir.ast import (
    Affine, Def, DerivedDef, Param, TArr, TIndex, TPair, TReal, TRel, TSize, Type,
)
from tensorlang.syntax.errors import Loc, ResourceError, ShapeError, TLError

__all__ = [
    "load", "parse", "from_def", "Module", "Function", "DerivedFunction", "Compiled",
    "grad", "jvp", "vjp", "hvp", "hessian", "jacobian", "format_type", "format_affine",
    "signature", "bind_args", "infer_sizes", "BACKENDS", "Relation", "CallBinder",
]

BACKENDS: tuple[str, ...] = ("interp", "numba", "cuda", "jax")
CODE_STAGES: tuple[str, ...] = ("numba", "cuda", "jax")  # `show` stages that print generated source


# ---------------------------------------------------------------------------------------------
# Formatting of types and signatures (used by messages, the CLI and the REPL)


def format_type(t: Type | None) -> str:
    """A type in `.tl` syntax (`R[N, M]`, `(R, R[N])`, `size`, `rel(N)`); `?` when unknown."""
    return "?" if t is None else typecheck.format_type(t)


def format_affine(a: Affine) -> str:
    return typecheck.format_affine(a)


def signature(name: str, params: Sequence[Param], ret: Type | None) -> str:
    ps = ", ".join(f"{p.name}: {format_type(p.type)}" for p in params)
    return f"{name}({ps}) -> {format_type(ret)}"


# ---------------------------------------------------------------------------------------------
# Binding arguments: conversion and size inference


def _is_real_valued(t: Type) -> bool:
    if isinstance(t, TArr):
        return _is_real_valued(t.elem)
    if isinstance(t, TPair):
        return _is_real_valued(t.a) and _is_real_valued(t.b)
    return isinstance(t, TReal)


def _type_dims(t: Type) -> list[Affine]:
    """Every extent written in a type (array sizes, relation sizes)."""
    if isinstance(t, TArr):
        return [t.size, *_type_dims(t.elem)]
    if isinstance(t, TPair):
        return [*_type_dims(t.a), *_type_dims(t.b)]
    if isinstance(t, TRel):
        return list(t.sizes)
    return []


def _is_size(p: Param) -> bool:
    return isinstance(p.type, TSize)


MAX_SIZE = 2**63 - 1  # sizes, indices and costs are int64 in the interpreter and backends


class _Constraint:
    """Axis `axis` of the value at `path` of parameter `param` has extent `actual`."""

    __slots__ = ("dim", "actual", "param", "path", "axis")

    def __init__(self, dim: Affine, actual: int, param: Param, path: str, axis: int):
        self.dim, self.actual, self.param, self.path, self.axis = dim, actual, param, path, axis


class _Binder:
    """Converts the values given for one function's parameters and infers its sizes."""

    def __init__(self, fname: str, params: Sequence[Param],
                 locs: Mapping[str, Loc] | None = None):
        self.fname = fname
        self.params = tuple(params)
        self.locs = dict(locs or {})
        self.sizes: dict[str, int] = {}
        self.cons: list[_Constraint] = []
        self.shapes: dict[str, list[tuple[str, tuple[Affine, ...], tuple[int, ...]]]] = {}
        self.index_arrays: list[Param] = []

    def loc(self, p: Param) -> Loc | None:
        return self.locs.get(p.name)

    # -- conversion ------------------------------------------------------------------------

    def convert(self, p: Param, value: Any) -> Any:
        if isinstance(p.type, TSize):
            return self._size(p, value)
        if isinstance(p.type, TIndex):
            return self._index_array(p, value)
        if isinstance(p.type, TRel):
            return self._relation(p, value)
        return self._value(p, p.type, value, (), p.name)

    def _index_array(self, p: Param, value: Any) -> np.ndarray:
        """An integer array of the index array's shape; `index_coordinates` checks its
        entries and makes it the relation's coordinates once the sizes are known."""
        assert isinstance(p.type, TIndex)
        arr = np.asarray(value)
        if arr.dtype == np.bool_ or not (_integral_array(arr) or arr.size == 0):
            raise ShapeError(f"index array {p.name} of {self.fname}: expected integers of "
                             f"shape {self._expected_str(p.type.shape)}, got "
                             f"{_describe(value)}", self.loc(p))
        self._expect_shape(p, p.name, p.type.shape, arr.shape)
        self.index_arrays.append(p)
        return np.ascontiguousarray(arr, dtype=np.int64)

    def index_coordinates(self, out: dict[str, Any]) -> None:
        """Each index array in `out` (SPEC 12) checked against its range and replaced by the
        coordinates of its relation (what every stage takes for a relation)."""
        for p in self.index_arrays:
            assert isinstance(p.type, TIndex) and p.type.bound is not None
            bound = p.type.bound.subst(self.sizes)
            if not bound.is_const():
                continue  # a size left unknown: bind_args reports it
            arr = out[p.name]
            what = f"index array {p.name}: {format_type(p.type)} of {self.fname}"
            try:
                out[p.name] = interp.index_array_coordinates(p.name, arr, arr.shape,
                                                             bound.const, what)
            except ShapeError as err:
                raise ShapeError(err.message, self.loc(p)) from None

    def _size(self, p: Param, value: Any) -> int:
        if isinstance(value, (bool, np.bool_)) or not _is_integral(value):
            raise TLError(f"size {p.name} of {self.fname} must be a non-negative integer, "
                          f"got {_describe(value)}", self.loc(p))
        n = int(value)
        if n < 0:
            raise ShapeError(f"size {p.name} of {self.fname} must be non-negative, got {n}",
                             self.loc(p))
        if n > MAX_SIZE:
            raise ShapeError(f"size {p.name} of {self.fname} is {n}, beyond the largest size "
                             f"{MAX_SIZE} (2**63 - 1: sizes and indices are 64-bit integers)",
                             self.loc(p))
        self.sizes[p.name] = n
        return n

    def _value(self, p: Param, t: Type, value: Any, outer: tuple[Affine, ...],
               path: str) -> Any:
        dims = list(outer)
        while isinstance(t, TArr):
            dims.append(t.size)
            t = t.elem
        if isinstance(t, TPair):
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise TLError(f"argument {path} of {self.fname} must be a pair (a tuple of 2 "
                              f"values) for type {format_type(p.type)}, got "
                              f"{_describe(value)}", self.loc(p))
            return (self._value(p, t.a, value[0], tuple(dims), path + ".0"),
                    self._value(p, t.b, value[1], tuple(dims), path + ".1"))
        if not isinstance(t, TReal):
            raise TLError(f"parameter {p.name} of {self.fname} has an unsupported type "
                          f"{format_type(p.type)}", self.loc(p))
        arr = _as_float_array(value, path, self.fname, p, self.loc(p))
        if not dims:
            if arr.ndim != 0:
                raise ShapeError(f"argument {path} of {self.fname}: expected a scalar (R), "
                                 f"got an array of shape {_shape_str(arr.shape)}", self.loc(p))
            return float(arr)
        self._expect_shape(p, path, tuple(dims), arr.shape)
        return np.ascontiguousarray(arr)

    def _relation(self, p: Param, value: Any) -> Any:
        """A `Relation` (checked against the type's sizes), or the mask or coordinates given,
        checked in form: they become a `Relation` once the sizes are known (`relations`)."""
        assert isinstance(p.type, TRel)
        if isinstance(value, relation.Relation):
            self._expect_shape(p, p.name, p.type.sizes, value.shape)
            return value
        arity = len(p.type.sizes)
        arr = np.asarray(value)
        if arr.dtype == np.bool_:
            self._expect_shape(p, p.name, p.type.sizes, arr.shape)
            return value if isinstance(value, np.ndarray) else arr
        # Otherwise a coordinate list: one row of `arity` integers per member.
        if arr.size == 0:
            return np.zeros((0, arity), dtype=np.int64)
        if arr.ndim == 1 and arity == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2 or arr.shape[1] != arity or not _integral_array(arr):
            raise ShapeError(
                f"relation {p.name} of {self.fname}: expected a boolean mask of shape "
                f"{self._expected_str(p.type.sizes)} or a (k, {arity}) integer coordinate "
                f"array, got {_describe(value)}", self.loc(p))
        return value if isinstance(value, np.ndarray) else arr

    def relations(self, out: dict[str, Any]) -> None:
        """Make the relations in `out` `Relation`s of the shapes the sizes give (the
        coordinates are checked against them here)."""
        for p in self.params:
            if isinstance(p.type, TRel) and p.name in out:
                shape = tuple(int(d.evaluate(self.sizes)) for d in p.type.sizes)
                try:
                    out[p.name] = relation.from_value(out[p.name], shape)
                except ShapeError as err:
                    raise ShapeError(f"relation {p.name} of {self.fname}: {err.message}",
                                     self.loc(p)) from None

    def _expect_shape(self, p: Param, path: str, dims: tuple[Affine, ...],
                      shape: tuple[int, ...]) -> None:
        self.shapes.setdefault(p.name, []).append((path, dims, tuple(shape)))
        if len(shape) != len(dims):
            raise ShapeError(
                f"argument {path} of {self.fname}: expected shape {self._expected_str(dims)} "
                f"({len(dims)} dimension{'s' if len(dims) != 1 else ''}) for type "
                f"{format_type(p.type)}, got shape "
                f"{_shape_str(shape)}", self.loc(p))
        for axis, (dim, actual) in enumerate(zip(dims, shape)):
            self.cons.append(_Constraint(dim, int(actual), p, path, axis))

    # -- inference -------------------------------------------------------------------------

    def solve(self) -> None:
        """Infer sizes from the constraints, then check every constraint."""
        # Dimensions that are a single size variable determine it directly (first one wins,
        # so a later disagreeing argument is the one reported).
        for c in self.cons:
            name = c.dim.as_var()
            if name is not None and name not in self.sizes:
                self.sizes[name] = c.actual
        # Affine dimensions with one unknown left (`N + K - 1` once K is known) solve for it.
        progress = True
        while progress:
            progress = False
            for c in self.cons:
                rest = c.dim.subst(self.sizes)
                if len(rest.terms) != 1:
                    continue
                name, coeff = rest.terms[0]
                value, rem = divmod(c.actual - rest.const, coeff)
                if rem != 0 or value < 0:
                    self._mismatch(c)
                self.sizes[name] = value
                progress = True
        for c in self.cons:
            rest = c.dim.subst(self.sizes)
            if rest.is_const() and rest.const != c.actual:
                self._mismatch(c)

    def check_extents(self, names: Iterable[str]) -> None:
        """Every extent the types of parameters `names` name must be >= 0 at the sizes known
        (`R[N - K + 1]` with K > N + 1 has no value): a located error, not numpy's."""
        wanted = set(names)
        for p in self.params:
            if p.name not in wanted:
                continue
            for dim in _type_dims(p.type):
                if not all(name in self.sizes for name, _ in dim.terms):
                    continue
                extent = dim.evaluate(self.sizes)
                if extent < 0:
                    known = ", ".join(f"{n} = {self.sizes[n]}" for n in sorted(dim.vars()))
                    raise ShapeError(f"parameter {p.name} of {self.fname} has type "
                                     f"{format_type(p.type)}: the extent {format_affine(dim)} "
                                     f"is {extent} < 0 with {known}", self.loc(p))

    def _mismatch(self, c: _Constraint) -> None:
        shapes = [s for s in self.shapes[c.param.name] if s[0] == c.path]
        _, dims, actual = shapes[0]
        known = sorted(n for n in set().union(*(d.vars() for d in dims)) if n in self.sizes)
        where = ", ".join(f"{n} = {self.sizes[n]}" for n in known)
        raise ShapeError(
            f"argument {c.path} of {self.fname}: expected shape {self._expected_str(dims)} "
            f"(type {format_type(c.param.type)}{', ' + where if where else ''}), got shape "
            f"{_shape_str(actual)}", self.loc(c.param))

    def _expected_str(self, dims: Sequence[Affine]) -> str:
        out = []
        for d in dims:
            r = d.subst(self.sizes)
            out.append(str(r.const) if r.is_const() else format_affine(r))
        return "(" + ", ".join(out) + ("," if len(out) == 1 else "") + ")"


def bind_args(fname: str, params: Sequence[Param], args: Sequence[Any],
              kwargs: Mapping[str, Any], need_values: bool = True,
              locs: Mapping[str, Loc] | None = None) -> dict[str, Any]:
    """Bind positional and keyword arguments to `params`, converting values and inferring sizes.

    Positional arguments go to the parameters not given by keyword, in order: either all of
    them, or only the non-size ones (sizes may be omitted).  With `need_values=False` only the
    sizes and relations are required (what the cost model needs).  `locs` locates the
    parameters in the source, for errors.
    """
    locs = locs or {}
    targets = positional_targets(fname, params, len(args), tuple(kwargs))
    given: dict[str, Any] = dict(kwargs)
    given.update({p.name: v for p, v in zip(targets, args)})
    out, binder = _convert_all(fname, params, given, locs)
    # values to be passed must have a shape; the cost model counts without them
    binder.check_extents(p.name for p in params if need_values or p.name in given)
    for p in params:
        if not _is_size(p) and p.name not in out and (need_values or isinstance(p.type, TRel)):
            what = "relation" if isinstance(p.type, TRel) else "argument"
            raise TLError(f"missing {what} {p.name}: {format_type(p.type)} of {fname}",
                          locs.get(p.name))
    unknown = [p for p in params if _is_size(p) and p.name not in binder.sizes]
    if unknown:
        names = ", ".join(p.name for p in unknown)
        raise TLError(f"cannot infer size{'s' if len(unknown) > 1 else ''} {names} of {fname} "
                      f"from the arguments: pass {', '.join(p.name + '=...' for p in unknown)}",
                      locs.get(unknown[0].name))
    out.update({p.name: binder.sizes[p.name] for p in params if _is_size(p)})
    binder.relations(out)
    return {p.name: out[p.name] for p in params if p.name in out}


def positional_targets(fname: str, params: Sequence[Param], nargs: int,
                       keywords: tuple[str, ...]) -> tuple[Param, ...]:
    """The parameters `nargs` positional arguments go to when `keywords` are given by name:
    those not given by keyword, in order, either all of them or only the non-size ones."""
    _check_names(fname, params, keywords)
    if not nargs:
        return ()
    rest = [p for p in params if p.name not in keywords]
    values = [p for p in rest if not _is_size(p)]
    if nargs == len(rest):
        return tuple(rest)
    if nargs == len(values):
        return tuple(values)
    raise TLError(f"{fname} takes {len(rest)} positional arguments "
                  f"({', '.join(p.name for p in rest)}) or {len(values)} without the "
                  f"sizes; got {nargs}")


class CallBinder:
    """`bind_args` for one function, compiled for its calls.

    A call's arguments are described by their form (how many positional, which keywords)
    and, per value, its shape and dtype (a size's value itself).  The first call of a
    description binds through `bind_args` (every check, sizes solved from the affine
    constraints); what it found is kept as a plan: the sizes, and per parameter the
    conversion left to do (none for a float64 C-contiguous array).  Later calls with the
    same description run the plan: nothing is solved or checked twice.  Relations are
    converted on every call unless given as a `Relation` or a read-only array
    (semantics/relation.py); values whose description is not cheap (lists, other objects)
    always take the full path."""

    MAX_PLANS = 64

    def __init__(self, fname: str, params: Sequence[Param],
                 locs: Callable[[], Mapping[str, Loc]]) -> None:
        self.fname = fname
        self.params = tuple(params)
        self.locs = locs
        self.plans: dict[tuple[Any, ...], _Plan] = {}
        self.forms: dict[tuple[int, tuple[str, ...]],
                         tuple[tuple[Param, ...], tuple[Callable[[Any], Any], ...]]] = {}

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return self.bind_keyed(args, kwargs)[1]

    def bind_keyed(self, args: Sequence[Any], kwargs: Mapping[str, Any]
                   ) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
        """(the call's description, or None when it has none; the bound arguments): what
        the bound arguments' sizes and bytes are a function of."""
        form = (len(args), tuple(kwargs))
        shape = self.forms.get(form)
        if shape is None:
            targets = positional_targets(self.fname, self.params, *form)
            targets += tuple(next(p for p in self.params if p.name == k) for k in kwargs)
            shape = (targets, tuple(_size_key if _is_size(p) else _value_key for p in targets))
            if len(self.forms) < self.MAX_PLANS:
                self.forms[form] = shape
        targets, keyers = shape
        values = (*args, *kwargs.values()) if kwargs else args
        key = (form, *[keyer(v) for keyer, v in zip(keyers, values)])
        plan = self.plans.get(key) if None not in key else None
        if plan is not None:
            try:
                return key, {name: conv(values[at]) if at >= 0 else conv
                             for name, at, conv in plan}
            except ShapeError:
                pass   # (coordinates outside the box) reported, located, by the full path
        bound = bind_args(self.fname, self.params, args, kwargs, locs=self.locs())
        if None not in key:
            if len(self.plans) >= self.MAX_PLANS:
                self.plans.clear()
            self.plans[key] = _plan(targets, bound)
            return key, bound
        return None, bound


# a call plan: per bound parameter in order, (name, the position of its value among the
# call's values and its conversion; or -1 and its value, for a size)
_Plan = tuple[tuple[str, int, Any], ...]


def _plan(targets: tuple[Param, ...], bound: Mapping[str, Any]) -> _Plan:
    sizes = {name: v for name, v in bound.items() if isinstance(v, int)}
    at = {p.name: k for k, p in enumerate(targets)}
    out = []
    for name in bound:
        p = next(q for q in targets if q.name == name) if name in at else None
        if p is None or _is_size(p):
            out.append((name, -1, bound[name]))
        else:
            out.append((name, at[name], _converter(p.type, sizes)))
    return tuple(out)


def _size_key(v: Any) -> Any:
    """What binding a size depends on: its value (None: not a number, the full path)."""
    return (type(v), v) if isinstance(v, (int, float, np.integer, np.floating)) else None


def _value_key(v: Any) -> Any:
    """What binding a value depends on: its shape and dtype; None when that is not cheap to
    tell (the call takes the full path)."""
    if type(v) is np.ndarray:
        return (v.shape, v.dtype)
    if type(v) is relation.Relation:
        return ("rel", v.shape, v.nbytes)
    if isinstance(v, (float, int, np.floating, np.integer)):
        return type(v)
    if type(v) is tuple and len(v) == 2:
        a, b = _value_key(v[0]), _value_key(v[1])
        return None if a is None or b is None else ("pair", a, b)
    return None


def _converter(t: Type, sizes: Mapping[str, int], arrayed: bool = False
               ) -> Callable[[Any], Any]:
    """How a plan converts a value of type `t` (the checks were made by the first call); a
    tensor of pairs is a pair of tensors."""
    if isinstance(t, TIndex):   # an integer array: checked whenever its entries change
        return _IndexArrayMemo(tuple(int(d.evaluate(sizes)) for d in t.sizes))
    if isinstance(t, TRel):
        shape = tuple(int(d.evaluate(sizes)) for d in t.sizes)
        return lambda v: relation.from_value(v, shape)
    if isinstance(t, TArr):
        return _converter(t.elem, sizes, True)
    if isinstance(t, TPair):
        first, second = _converter(t.a, sizes, arrayed), _converter(t.b, sizes, arrayed)
        return lambda v: (first(v[0]), second(v[1]))
    return _as_array if arrayed else float


class _IndexArrayMemo:
    """An index array's relation (entries checked), kept for the next call while the array
    given has the same entries: comparing them is O(n) without a sort, a fraction of building
    the relation and its CSR forms again (an embedding bag's 16,000 tokens: about 10 us
    against 0.26 ms).  The kept array is a copy, so changing the given one in place is seen."""

    __slots__ = ("shape", "memo")

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.memo: tuple[np.ndarray, relation.Relation] | None = None

    def __call__(self, v: Any) -> relation.Relation:
        memo = self.memo   # (one read: another thread may replace it)
        if memo is not None and type(v) is np.ndarray and v.dtype == memo[0].dtype and \
                v.shape == memo[0].shape and np.array_equal(v, memo[0]):
            return memo[1]
        rel = interp.index_array_rel("", v, self.shape[:-1], self.shape[-1])
        if type(v) is np.ndarray:
            self.memo = (v.copy(), rel)
        return rel


def _as_array(v: Any) -> np.ndarray:
    if type(v) is np.ndarray and v.dtype == np.float64 and v.flags.c_contiguous:
        return v
    return np.ascontiguousarray(v, dtype=np.float64)


def infer_sizes(fname: str, params: Sequence[Param], given: Mapping[str, Any],
                locs: Mapping[str, Loc] | None = None) -> dict[str, int]:
    """The sizes given or implied by the shapes of the values in `given` (others may be missing)."""
    _check_names(fname, params, given)
    _, binder = _convert_all(fname, params, given, locs)
    binder.check_extents(p.name for p in params)  # the values not given are made from these
    return {p.name: binder.sizes[p.name] for p in params
            if _is_size(p) and p.name in binder.sizes}


def _check_names(fname: str, params: Sequence[Param], given: Iterable[str]) -> None:
    names = {p.name for p in params}
    for name in given:
        if name not in names:
            raise TLError(f"{fname} has no parameter '{name}' "
                          f"(parameters: {', '.join(p.name for p in params)})")


def _convert_all(fname: str, params: Sequence[Param], given: Mapping[str, Any],
                 locs: Mapping[str, Loc] | None) -> tuple[dict[str, Any], _Binder]:
    binder = _Binder(fname, params, locs)
    out: dict[str, Any] = {}
    for p in sorted(params, key=lambda p: not _is_size(p)):  # sizes first: they are facts
        if p.name in given:
            out[p.name] = binder.convert(p, given[p.name])
    binder.solve()
    binder.index_coordinates(out)
    return out, binder


def param_locs(d: Def, filename: str | None = None) -> dict[str, Loc]:
    """Where each parameter of `d` is declared in its source (`name: type`), for errors.

    Found by scanning the source text from the def's own location: `Param` nodes are
    hash-consed, so the `loc` a Param carries is that of its first occurrence anywhere
    (`N: size` of an earlier def).  Empty when `d` has no trustworthy location (built in
    Python, or first parsed from another file than `filename`).
    """
    loc = d.loc
    if loc is None or loc.source is None or not loc.source.text:
        return {}
    if filename is not None and loc.source.name != filename:
        return {}
    text = loc.source.text
    lines = text.splitlines(keepends=True)
    start = text.find("(", sum(len(x) for x in lines[:loc.line - 1]) + loc.col - 1)
    if start < 0:
        return {}
    spans: list[tuple[int, int]] = []
    depth, seg, pos = 1, start + 1, start + 1
    while pos < len(text) and depth:
        ch = text[pos]
        if ch == "#":
            pos = text.find("\n", pos)
            pos = len(text) if pos < 0 else pos
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if (depth == 1 and ch == ",") or depth == 0:
            spans.append((seg, pos))
            seg = pos + 1
        pos += 1
    out: dict[str, Loc] = {}
    for p, (a, b) in zip(d.params, spans):
        seg_text = text[a:b]
        a += len(seg_text) - len(seg_text.lstrip())
        b -= len(seg_text) - len(seg_text.rstrip())
        if not text.startswith(p.name, a):
            return {}  # the text is not this def's header
        line = text.count("\n", 0, a) + 1
        col = a - (text.rfind("\n", 0, a) + 1) + 1
        end = col + (b - a) if "\n" not in text[a:b] else None
        out[p.name] = Loc(loc.source, line, col, end)
    return out if len(out) == len(d.params) else {}


def _is_integral(v: Any) -> bool:
    if isinstance(v, (int, np.integer)):
        return True
    if isinstance(v, (float, np.floating)):
        return float(v).is_integer()
    return False


def _integral_array(arr: np.ndarray) -> bool:
    if np.issubdtype(arr.dtype, np.integer):
        return True
    if np.issubdtype(arr.dtype, np.floating):
        return bool(np.all(np.mod(arr, 1) == 0))
    return False


def _as_float_array(value: Any, path: str, fname: str, p: Param,
                    loc: Loc | None) -> np.ndarray:
    if isinstance(value, (tuple, str, bytes)) or value is None:
        raise TLError(f"argument {path} of {fname} must be a number or a numpy array for type "
                      f"{format_type(p.type)}, got {_describe(value)}", loc)
    kind = np.asarray(value).dtype.kind if not isinstance(value, np.ndarray) else value.dtype.kind
    if kind not in _REAL_KINDS:
        # numpy would drop an imaginary part (with only a ComplexWarning) and turn dates and
        # numeric strings into numbers: refuse instead of guessing.
        raise ShapeError(f"argument {path} of {fname} must hold real numbers for type "
                         f"{format_type(p.type)}, got {_describe(value)}", loc)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TLError(f"argument {path} of {fname} is not numeric: {_describe(value)}",
                      loc) from None


# numpy dtype kinds accepted as real values: bool, signed and unsigned integers, floats
_REAL_KINDS = frozenset("biuf")


def _shape_str(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"a {v.dtype} array of shape {_shape_str(v.shape)}"
    if isinstance(v, (tuple, list)):
        return f"a {type(v).__name__} of length {len(v)}"
    text = repr(v)
    return f"{type(v).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def to_python(value: Any) -> Any:
    """Results as the API promises them: float for R, numpy array for tensors, tuple for pairs."""
    if isinstance(value, (tuple, list)):
        return tuple(to_python(v) for v in value)
    if isinstance(value, np.ndarray):
        return float(value) if value.ndim == 0 else value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return value


# ---------------------------------------------------------------------------------------------
# Functions


def _at_def(fn: "Function", *args: Any, **kwargs: Any) -> Loc | None:
    """Where a program too deep for the compiler is reported: at its def."""
    return getattr(fn.source, "loc", None)


class Function:
    """A tensorlang function: an elaborated core `Def` with its signature.

    Call it like a Python function (`f(x=x, A=A)`, `f(x, A)`, `f(N, x, A)`); sizes are
    inferred from shapes.  `interpret`, `cost`, `show` and `compile` expose the pipeline.
    """

    _binder: "CallBinder | None" = None   # made on the first call

    def __init__(self, d: Def, ret_type: Type | None = None,
                 module: "Module | None" = None) -> None:
        self._def = d
        self._ret = ret_type if ret_type is not None else d.ret
        self.module = module
        self._locs: dict[str, Loc] | None = None  # parameter locations, found on first need
        self._compiled: dict[str, Compiled] = {}

    # -- description -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._def.name

    @property
    def params(self) -> tuple[Param, ...]:
        return self._def.params

    @property
    def ret_type(self) -> Type | None:
        return self._ret

    @property
    def source(self) -> Def | DerivedDef:
        """The definition this function was made from (a core `Def`)."""
        return self._def

    @property
    def is_derived(self) -> bool:
        return False

    def signature(self) -> str:
        return signature(self.name, self.params, self.ret_type)

    def __repr__(self) -> str:
        return f"<tensorlang function {self.signature()}>"

    # -- running ---------------------------------------------------------------------------

    def bind(self, /, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The complete argument dict (sizes inferred) the interpreter and backends take
        (a `CallBinder`: a call like an earlier one in shapes runs its plan)."""
        return self.call_binder().bind(args, kwargs)

    def call_binder(self) -> "CallBinder":
        if self._binder is None:
            self._binder = CallBinder(self.name, self.params, self.param_locs)
        return self._binder

    def param_locs(self) -> dict[str, Loc]:
        """Where the parameters are declared (for errors about arguments)."""
        if self._locs is None:
            filename = self.module.filename if self.module is not None else None
            self._locs = param_locs(self._def, filename)
        return self._locs

    def program(self) -> pipeline.Program:
        """What the pipeline compiles: the core `Def` (a `Derivation` for derived functions)."""
        return self._def

    def core(self) -> Def:
        """The core `Def` as written (for a derived function: its derivative program)."""
        found = getattr(self, "_core", None)  # kept: a call must not start a worker
        if found is None:
            found = self._core = limits.run(pipeline.run_to, self.program(), "parsed",
                                            where=_at_def(self))
        return found

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        run = self._compiled.get(default_backend()) or self.compile(default_backend())
        return run(*args, **kwargs)

    @limits.entry(_at_def)
    def interpret(self, /, *args: Any, **kwargs: Any) -> Any:
        """Run the reference interpreter on the program as written."""
        core = self.core()
        bound = self.bind(*args, **kwargs)
        memory.check(core, bound, self.name)
        return to_python(interp.interpret(core, bound))

    def compile(self, backend: str = "numba", *, mesh: Any = None,
                shard: Mapping[str, Sequence[Any]] | None = None) -> "Compiled":
        """A callable running this function on `backend` ("numba", "cuda", "jax" or "interp").

        Compiled backends run the program as it comes out of the pipeline (Tensor SSA,
        simplified); compiled callables are kept, so compiling twice is free.  `mesh` (a
        `jax.sharding.Mesh`) and `shard` (parameter -> partition spec, `{"A": ("data",
        None)}`) place the inputs of the jax backend across devices (SPEC 14); its results
        are then `jax.Array`s left on the devices."""
        if backend not in BACKENDS:
            raise TLError(f"unknown backend '{backend}' (backends: {', '.join(BACKENDS)})")
        if (mesh is not None or shard) and backend != "jax":
            raise TLError(f"mesh and shard are options of the jax backend, not of '{backend}'")
        hit = None if mesh is not None or shard else self._compiled.get(backend)
        if hit is not None:
            return hit
        return limits.run(self._compile, backend, mesh, shard, where=_at_def(self))

    def _compile(self, backend: str, mesh: Any,
                 shard: Mapping[str, Sequence[Any]] | None) -> "Compiled":
        if mesh is not None or shard:
            return Compiled(self, backend, _backend_module(backend).compile_program(
                pipeline.run_to(self.program(), pipeline.FINAL), mesh=mesh, shard=shard))
        if backend == "interp":
            core = self.core()
            run = interp.interpret
            out = Compiled(self, backend, lambda args: run(core, args))
        else:
            out = Compiled(self, backend,
                           _backend_module(backend).compile_program(self.final_program()))
        self._compiled[backend] = out
        return out

    @limits.entry(_at_def)
    def generated_source(self, backend: str = "numba") -> str:
        """The source a compiled backend generates for this function (`tl show --stage numba`)."""
        return _backend_module(backend).generated_source(self.final_program())

    @limits.entry(_at_def)
    def final_program(self) -> Any:
        """The program as it will run (after `pipeline.FINAL`), from the front
        cache when this definition was compiled before (see `final_program`)."""
        return final_program(self)

    def cache_text(self) -> str:
        """What the front cache keys this function on: its elaborated core Def, exactly
        (callees are inlined into it, so their text is part of it)."""
        return "def\n" + cache.structure_text(self._def)

    # -- inspection ------------------------------------------------------------------------

    @limits.entry(_at_def)
    def run_to(self, stage: str) -> Any:
        """The program after `stage` of the pipeline (a core Def or a Tensor-SSA program)."""
        return pipeline.run_to(self.program(), stage)

    @limits.entry(_at_def)
    def show(self, stage: str = "parsed", unicode: bool = False) -> str:
        """The program at `stage` as text (`.tl` syntax, or Unicode notation); `stage`
        "numba" or "cuda": the kernel source that backend generates (as `tl show`)."""
        if stage in CODE_STAGES:
            return self.generated_source(stage)
        return pipeline.show(self.program(), stage, unicode=unicode)

    @limits.entry(_at_def)
    def cost(self, given: Mapping[str, Any] | None = None, /, stage: Any = None,
             **args: Any) -> Any:
        """Exact SPEC 3 cost for the given sizes (and relations; arrays give their sizes).

        `stage=None` costs the program as it will run (`default_stage()`: the end of the
        pipeline, simplifier included); `stage="source"` the program as written.  A stage
        that cannot handle the program raises (`NotYetSupported`): the cost is never that of
        an earlier stage in disguise.  The arguments may also come as a mapping
        (`f.cost({"N": 100})`); a parameter named `stage` is given that way, or as
        `stage=INT` (a stage is always a name).
        """
        args = {**(given or {}), **args}
        if stage is not None and not isinstance(stage, str) and \
                any(p.name == "stage" for p in self.params):
            args["stage"], stage = stage, None
        bound = bind_args(self.name, self.params, (), args, need_values=False,
                          locs=self.param_locs())
        return pipeline.cost(self.program(), stage or self.default_stage(), bound)

    def default_stage(self) -> str:
        """The stage `cost` uses by default: the program as it will run."""
        return pipeline.FINAL

    @limits.entry(_at_def)
    def cost_formula(self, stage: str | None = None) -> Any:
        """The exact cost at `stage` (default: as it will run) as formulas in the sizes: a
        `CostFormula` (tensorlang/semantics/cost_formula.py; `str()` is the total as a Python
        expression, `.adds/.muls/.calls/.total`, `.domain`).  Relations raise a TLError."""
        from tensorlang.semantics.cost_formula import cost_formula

        name = pipeline.stage(stage).name if stage else self.default_stage()
        try:
            return cost_formula(pipeline.as_core(self.run_to(name)), self.name, name)
        except TLError as err:
            err.loc = err.loc or self.source.loc  # the staged program has no locations
            raise


class Compiled:
    """A function bound to a backend: call it with the same arguments as the `Function`."""

    def __init__(self, fn: Function, backend: str, run: Callable[[dict[str, Any]], Any]):
        self.function = fn
        self.backend = backend
        self._run = run
        # the numba backend runs arguments checked once, by the binder, without a second check
        self._run_bound = getattr(run, "call_bound", run)
        self._binder = fn.call_binder()
        # what a pass could not do for the program this runs (the CLI prints them)
        self.warnings: tuple[str, ...] = pass_failures(fn) if backend != "interp" else ()
        self._memory_def: Def | None = None
        # per call description: the memory estimate and its total
        # (and the member counts of the relations its coordinate vectors are indexed by)
        self._estimates: dict[Any, tuple[memory.Estimate, int, tuple]] = {}

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        key, bound = self._binder.bind_keyed(args, kwargs)
        hit = self._estimates.get(key) if key is not None else None
        if hit is None or (key is not None and hit[2] and
                           memory.relation_members(self._arrays(), bound) != hit[2]):
            est = self.estimate(bound)
            arrays = self._arrays()
            hit = (est, est.total, memory.relation_members(arrays, bound) if arrays else ())
            if key is not None:
                if len(self._estimates) >= CallBinder.MAX_PLANS:
                    self._estimates.clear()
                self._estimates[key] = hit
        cap = memory.limit()
        if cap is not None and hit[1] > cap:
            memory.check_estimate(hit[0], self.function.name)  # raises, before any allocation
        if self.backend == "interp":  # the interpreter recurses over the program
            return to_python(limits.run(self._run, bound, where=_at_def(self.function)))
        return to_python(self._run_bound(bound))

    def estimate(self, bound: Mapping[str, Any]) -> memory.Estimate:
        """The memory estimate of a call on `bound` (bound arguments; a relation or array
        not made yet counts its type): on the Numba backend the arrays its kernels allocate
        (`backends/common/allocation.py`, read from their headers), on another compiled
        backend every statement's array and no sum working arrays, on the interpreter its
        own working arrays too (`semantics/memory.py`)."""
        return memory.estimate(self._estimated(), bound, compiled=self.backend != "interp",
                               arrays=self._arrays())

    def _arrays(self) -> tuple[memory.Allocation, ...] | None:
        return getattr(self._run, "arrays", None) if self.backend == "numba" else None

    def _estimated(self) -> Def:
        if self._memory_def is None:  # kept: no worker per call
            self._memory_def = limits.run(memory_program, self.function, self.backend,
                                          where=_at_def(self.function))
        return self._memory_def

    def __repr__(self) -> str:
        return f"<{self.function.name} compiled for {self.backend}>"


def memory_program(fn: Function, backend: str) -> Def:
    """The program a memory estimate reads: the def as written (its statements located in
    the source), but for a derived function on a compiled backend the final program from
    the front cache, so that a warm call derives nothing."""
    if backend == "interp" or not fn.is_derived:
        return fn.core()
    return pipeline.as_core(final_program(fn))


def default_backend() -> str:
    """The backend a call of a Function uses (SPEC 9: Numba CPU)."""
    return "numba"


def _backend_module(backend: str) -> Any:
    """The code generator of a compiled backend (imported on first use: numba is slow to load)."""
    if backend == "numba":
        from tensorlang.backends import numba_cpu

        return numba_cpu
    if backend == "cuda":
        from tensorlang.backends import numba_cuda

        if not numba_cuda.available():
            raise TLError("the cuda backend needs a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1 set "
                          "before numba is imported, for the simulator)")
        return numba_cuda
    if backend == "jax":
        from tensorlang.backends import jax_backend

        ok, why = jax_backend.available()
        if not ok:
            raise TLError(f"the jax backend needs jax: {why}")
        return jax_backend
    raise TLError(f"backend '{backend}' generates no source (backends: numba, cuda, jax)")


# ---------------------------------------------------------------------------------------------
# The front cache (SPEC 15, docs/caching.md)

_FINAL_PROGRAMS: dict[str, Any] = {}
_FINAL_FAILURES: dict[str, tuple[str, ...]] = {}   # key -> what a pass could not do


def final_program(fn: Function) -> Any:
    """`fn`'s program after the last pipeline stage (`pipeline.FINAL`).

    Kept in this process and on disk (`tensorlang/cache.py`), keyed by the version of
    tensorlang's code and `fn.cache_text()` (the elaborated Def, or the derivation and its
    base): a warm process goes from `.tl` text to the program without running derivation or
    the simplifier (nor importing egglog).  Only Tensor-SSA programs are stored (what the
    compiled backends run)."""
    key = cache.key_of("final program", fn.cache_text())
    prog = _FINAL_PROGRAMS.get(key)
    if prog is None:
        prog = cache.get_program(key)
        if prog is None:
            prog = pipeline.run_to(fn.program(), pipeline.FINAL)
            report = pipeline.report(fn.program(), pipeline.FINAL)
            failures = tuple(report.failures) if report is not None else ()
            if failures:  # not stored: every process runs the pass again and says so
                _FINAL_FAILURES[key] = failures
            else:
                cache.put_program(key, prog)
        _FINAL_PROGRAMS[key] = prog
    return prog


def pass_failures(fn: Function) -> tuple[str, ...]:
    """Why a pass left `fn`'s final program as its input was (the simplifier failed, outside
    strict mode); empty when every pass did its job.  A program with failures is never
    written to the disk cache, so a warm process reports them again."""
    final_program(fn)
    return _FINAL_FAILURES.get(cache.key_of("final program", fn.cache_text()), ())


# ---------------------------------------------------------------------------------------------
# Derived functions (SPEC 2.5)


class DerivedFunction(Function):
    """`kind(base, wrt...)` (SPEC 2.5): its program is the pipeline's `derive` stage on the
    base function as compiled; it runs, prints, costs and differentiates like any other."""

    def __init__(self, source: DerivedDef, base: Function, params: Sequence[Param],
                 ret_type: Type | None, module: "Module | None" = None) -> None:
        self._src = source
        self.base = base
        self._params = tuple(params)
        self._ret = ret_type
        self.module = module
        self._locs = None  # its parameters are declared by its base function
        self._compiled = {}
        # Held here: the pipeline memoises per live program, so the derivative and its
        # simplification are computed once per derived function.
        self._derivation = pipeline.Derivation(self.kind, base.program(), self.wrt, self.name)

    @property
    def name(self) -> str:
        return self._src.name

    @property
    def params(self) -> tuple[Param, ...]:
        return self._params

    @property
    def source(self) -> DerivedDef:
        return self._src

    @property
    def kind(self) -> str:
        return self._src.kind

    @property
    def wrt(self) -> tuple[str, ...]:
        return self._src.wrt

    @property
    def is_derived(self) -> bool:
        return True

    def describe(self) -> str:
        return f"{self.kind}({', '.join((self.base.name,) + self.wrt)})"

    def program(self) -> pipeline.Program:
        """The derivation the pipeline compiles (its `derive` stage differentiates the base
        as compiled)."""
        return self._derivation

    def param_locs(self) -> dict[str, Loc]:
        """The base function's declarations of the parameters they share (tangents and
        cotangents are declared nowhere)."""
        if self._locs is None:
            base = self.base.param_locs()
            self._locs = {p.name: base[p.name] for p in self.params if p.name in base}
        return self._locs

    def cache_text(self) -> str:
        """The derivation and its base function's text: no derivative is computed for it."""
        return f"{self.kind}({', '.join(self.wrt)}) as {self.name}\n{self.base.cache_text()}"

    @limits.entry(_at_def)
    def cost_bound(self, given: Mapping[str, Any] | None = None, /,
                   **args: Any) -> tuple[int, int | None, str]:
        """(C(f) of the base function as compiled, the theorem's bound on this function's
        cost or None, the bound's formula) for the given sizes and relations (SPEC 6); they
        may come as a mapping (a size may be named `stage`)."""
        args = {**(given or {}), **args}
        cf = self.base.cost(args).total
        sizes = {p.name: int(args[p.name]) for p in self.base.params
                 if _is_size(p) and p.name in args}
        xs = self.wrt or tuple(p.name for p in self.base.params if p.name in
                               {q.name for q in self.params} and _is_real_valued(p.type))
        s_in = sum(type_size(p.type, sizes) for p in self.base.params if p.name in xs)
        s_out = type_size(self.base.ret_type, sizes) if self.base.ret_type else 0
        from tensorlang.semantics.cost import extreme_points

        # E(f), the points f's max/min reductions visit (semantics/bounds.py): 0 for most f
        e = extreme_points(self.base.run_to("ssa"), args)
        plus = " + 4 E(f)" if e else ""
        if self.kind == "jvp":
            return cf, jvp_bound(cf, e), f"C(f) + 3 C(f){plus}"
        if self.kind in ("vjp", "grad"):
            return cf, vjp_bound(cf, s_in, s_out, e), f"4 C(f) + |in| + |out|{plus}"
        if self.kind == "hvp":  # jvp of grad: (1 + 3) (4 C(f) + |in| + |out|) (+ 4 E(f) twice)
            return (cf, jvp_bound(vjp_bound(cf, s_in, s_out, e), e),
                    f"4 (4 C(f) + |in| + |out|{plus}){plus}")
        return cf, None, "none (materialised; see docs/derivatives.md)"

    def __repr__(self) -> str:
        return f"<tensorlang derived function {self.signature()} = {self.describe()}>"


def _derive(kind: str, f: "Function | Def", wrt: Sequence[str], name: str | None) -> Function:
    fn = f if isinstance(f, Function) else from_def(f)
    if fn.ret_type is None:
        raise TLError(f"{kind}({fn.name}): the return type of {fn.name} is unknown")
    src = DerivedDef(name or f"{fn.name}_{kind}", kind, fn.name, tuple(wrt))
    params, ret = typecheck.derived_signature(src, fn.params, fn.ret_type)
    return DerivedFunction(src, fn, params, ret, fn.module)


def grad(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """Gradient of a real-valued function in the inputs `wrt` (all real inputs if none)."""
    return _derive("grad", f, wrt, name)


def jvp(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """Forward derivative: `(y, d_y)` from tangents `d_x` of the inputs `wrt`."""
    return _derive("jvp", f, wrt, name)


def vjp(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """Reverse derivative: `(y, d_x1, ...)` from a cotangent `d_y`."""
    return _derive("vjp", f, wrt, name)


def hvp(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """Hessian-vector product `H v` in the input `wrt` (forward over reverse)."""
    return _derive("hvp", f, wrt, name)


def hessian(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """The materialised Hessian in the input `wrt`."""
    return _derive("hessian", f, wrt, name)


def jacobian(f: "Function | Def", *wrt: str, name: str | None = None) -> Function:
    """The materialised Jacobian in the input `wrt`."""
    return _derive("jacobian", f, wrt, name)


# ---------------------------------------------------------------------------------------------
# Modules


class Module(Mapping):
    """The functions of a `.tl` source, in source order: `m.qform`, `m["qform"]`, `for name
    in m`, `m.functions`, plus the checker's `warnings`."""

    def __init__(self, functions: Mapping[str, Function], warnings: Sequence[Any] = (),
                 filename: str = "<string>", text: str = "") -> None:
        self._functions = dict(functions)
        self.warnings = list(warnings)
        self.filename = filename
        self.text = text
        for fn in self._functions.values():
            fn.module = self

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def __getattr__(self, name: str) -> Function:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._functions[name]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def _missing(self, name: str) -> str:
        return (f"{self.filename} defines no function '{name}' "
                f"(functions: {', '.join(self._functions) or 'none'})")

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._functions))

    @property
    def functions(self) -> list[Function]:
        return list(self._functions.values())

    def forward_names(self) -> list[str]:
        """Names of the functions written out (not derived)."""
        return [n for n, f in self._functions.items() if not f.is_derived]

    def derived_names(self) -> list[str]:
        return [n for n, f in self._functions.items() if f.is_derived]

    @property
    def last(self) -> Function:
        """The last function defined (the CLI's default)."""
        if not self._functions:
            raise TLError(f"{self.filename} defines no functions")
        return list(self._functions.values())[-1]

    def __repr__(self) -> str:
        return f"<tensorlang module {self.filename}: {', '.join(self._functions)}>"


_CHECKED: dict[str, Any] = {}


def check_source(text: str, filename: str = "<string>") -> Any:
    """Parse and type-check `text`: the checker's `CheckedModule`.

    Kept in this process and on disk (`cache.put_checked`), keyed by the code version, the
    file name (locations name it) and the text: a warm process, or the REPL given the same
    text again, neither imports the parser nor parses, checks or elaborates (SPEC 15)."""
    key = cache.key_of("checked module", filename, text)
    checked = _CHECKED.get(key)
    if checked is None:
        # On the worker: unpickling, checking and pickling all recurse as deep as the program.
        checked = _CHECKED[key] = limits.run(lambda: _load_or_check(key, text, filename))
    return checked


def _load_or_check(key: str, text: str, filename: str) -> Any:
    checked = cache.get_checked(key)
    if checked is None:
        from tensorlang.syntax import parser   # Lark: imported only to parse

        checked = typecheck.check_module(parser.parse_module(text, filename), filename,
                                         derive=pipeline.derived_core)
        cache.put_checked(key, checked)
    return checked


def module_from_checked(checked: Any, filename: str = "<string>", text: str = "") -> Module:
    """Wrap a `CheckedModule` (core Defs, derived defs with their signatures) as a `Module`."""
    defs = _as_dict(checked.defs)
    derived = _as_dict(getattr(checked, "derived", {}))
    order = list(getattr(checked, "order", None) or [*defs, *derived])
    ret_types = dict(getattr(checked, "ret_types", {}) or {})
    derived_types = dict(getattr(checked, "derived_types", {}) or {})
    functions: dict[str, Function] = {}
    for name in order:
        if name in defs:
            d = defs[name]
            functions[name] = Function(d, ret_types.get(name) or d.ret)
        elif name in derived:
            functions[name] = _derived_from_checked(derived[name], functions,
                                                     derived_types.get(name))
    return Module(functions, list(getattr(checked, "warnings", ()) or ()), filename, text)


def _as_dict(items: Any) -> dict[str, Any]:
    if isinstance(items, Mapping):
        return dict(items)
    return {x.name: x for x in items}


def _derived_from_checked(dd: DerivedDef, functions: Mapping[str, Function],
                          sig: Any) -> DerivedFunction:
    base = functions.get(dd.fn)
    if base is None:  # the checker guarantees the base is earlier; be explicit if not
        raise TLError(f"{dd.name}: {dd.fn} is not defined before it", dd.loc)
    if sig is None:
        sig = typecheck.derived_signature(dd, base.params, base.ret_type)
    params, ret = sig
    return DerivedFunction(dd, base, params, ret)


def parse(source_text: str, filename: str = "<string>") -> Module:
    """Parse and type-check `.tl` source text."""
    return module_from_checked(check_source(source_text, filename), filename, source_text)


MAX_SOURCE_BYTES = 8 * 2**20  # a .tl source larger than this is refused (`tl check /dev/zero`)


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of a `.tl` file: UTF-8, at most `MAX_SOURCE_BYTES` (read no further, so a
    device or a huge file cannot exhaust memory)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError as err:
        raise TLError(f"cannot read {path}: {err.strerror or err}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise ResourceError(f"cannot read {path}: a source file may have at most "
                            f"{MAX_SOURCE_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TLError(f"cannot read {path}: not UTF-8 text (byte {err.start})") from None


def load(path: str | os.PathLike[str]) -> Module:
    """Load a `.tl` file."""
    path = os.fspath(path)
    return parse(read_source(path), path)


def from_def(d: Def, earlier: Sequence["Def | Function"] = ()) -> Function:
    """A `Function` from a `Def` built in Python (`tl.dsl`): type-checked and elaborated.
    `earlier`: the defs (or Functions) it calls."""
    if not isinstance(d, Def):
        raise TLError(f"from_def expects a tensorlang Def, got {type(d).__name__}")
    defs = [e.source if isinstance(e, Function) else e for e in earlier]
    checked = limits.run(typecheck.check_module, [*defs, d], "<dsl>",
                       derive=pipeline.derived_core, where=d.loc)
    return module_from_checked(checked, "<dsl>")[d.name]
