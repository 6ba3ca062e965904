"""The reference interpreter (SPEC 2.2): the oracle every other part is tested against.

Design: vectorised over bound index variables.  Inside `d` enclosing index binders (`gen`,
`sum`, `exists`), the binder at nesting position `k` owns numpy axis `k`, and

    BATCHING INVARIANT: at depth d every array leaf of a value of type t has
    ndim == d + rank(t); its first d axes are batch axes, each of length 1 (the value does
    not depend on that index: numpy broadcasting) or the binder's extent; the remaining
    rank(t) axes are the tensor's own axes at full length.

So a scalar expression under `gen i:n. gen j:m.` is one array of shape (n|1, m|1); `gen`
turns its batch axis into a tensor axis (broadcast to full length), `sum` reduces it,
`exists` any-reduces it.  An index variable is an `arange` along its axis; affine accesses
are advanced-index gathers with a validity mask (zero extension); predicates are boolean
arrays of batch shape; `[p] * e` is `np.where`, so no value of `e` at a point where `p` is
false can leak (and `e` is not evaluated at all where `p` is false everywhere).  A `let` value
keeps the depth it was computed at; a read at a deeper depth inserts size-1 axes.

Index arithmetic and predicates are `grid`'s (the one evaluator of affine indices and
predicates over index boxes); an `Env` is a `grid.Box` plus the values in scope.

Values: R -> float, tensors -> float64 arrays (C order), pairs -> tuples; a tensor of pairs
is a pair of tensors (struct of arrays).  Tensor-SSA programs are evaluated through their
core definition (`evaluate_program`), so this is the one interpreter of both IRs.  The slow
scalar cross-check of the tests lives in tests/scalar_reference.py.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.tssa import soa_type
from tensorlang.semantics import boxes
from tensorlang.semantics import builtins
from tensorlang.semantics import grid
from tensorlang.semantics import relation
from tensorlang.syntax.errors import ShapeError, TLError

Value = Any   # np.ndarray leaf, or a tuple of Values (pair)


# ---------------------------------------------------------------------------------------------
# Environment


@dataclass(frozen=True)
class Env(grid.Box):
    """An index box (`grid.Box`: sizes, relations, bound indices) plus the program values in
    scope, each with the depth it was computed at."""

    vals: Mapping[str, tuple[Value, int]] = field(default_factory=dict)

    def bind_value(self, name: str, v: Value) -> "Env":
        return replace(self, vals={**self.vals, name: (v, self.depth)})


def _leaves(v: Value) -> list[np.ndarray]:
    return [v] if not isinstance(v, tuple) else [x for c in v for x in _leaves(c)]


def _map(f: Callable[[np.ndarray], np.ndarray], v: Value) -> Value:
    """Apply `f` to every array leaf of a (possibly nested) pair value."""
    return tuple(_map(f, c) for c in v) if isinstance(v, tuple) else f(v)


extent = grid.extent
eval_affine = grid.affine
eval_pred = grid.pred


# ---------------------------------------------------------------------------------------------
# Expressions (vectorised)


def _var(name: str, env: Env) -> Value:
    if name not in env.vals:
        raise TLError(f"unbound variable {name!r}")
    v, d0 = env.vals[name]
    extra = (1,) * (env.depth - d0)   # axes of binders entered since the value was bound
    return _map(lambda x: x.reshape(x.shape[:d0] + extra + x.shape[d0:]), v)


def _scalar_operand(v: Value, env: Env, what: str) -> np.ndarray:
    if isinstance(v, tuple) or v.ndim != env.depth:
        raise TLError(f"{what} needs scalar operands (tensor arithmetic must be elaborated)")
    return v


def _reduce_sum(v: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Sum of the n values along `axis` (a size-1 axis stands for n equal values).

    Pairwise: the summed axis is moved last and made contiguous, where numpy's `add.reduce`
    sums each row pairwise (error O(log n) ulps, not the O(n) of a left-to-right loop), so
    the oracle is exactly as accurate as `np.sum` of the same numbers.  The final `+ 0.0` is
    a loop's initial 0.0: it only turns a sum of negative zeros into +0.0 (and recip of it
    into +inf).
    """
    if n == 0:
        return np.zeros(v.shape[:axis] + v.shape[axis + 1:])
    full = np.broadcast_to(v, v.shape[:axis] + (n,) + v.shape[axis + 1:])
    rows = np.ascontiguousarray(np.moveaxis(full, axis, -1))
    return np.add.reduce(rows, axis=-1) + 0.0


def _ev(e: ast.Expr, env: Env) -> Value:
    d = env.depth
    if isinstance(e, ast.Var):
        return _var(e.name, env)
    if isinstance(e, ast.Const):
        return np.full((1,) * d, e.value)
    if isinstance(e, ast.IndexValue):
        return grid.index_value(e.a, env)
    if isinstance(e, ast.Add):
        return np.asarray(_scalar_operand(_ev(e.a, env), env, "+")
                          + _scalar_operand(_ev(e.b, env), env, "+"))
    if isinstance(e, ast.Mul):
        return np.asarray(_scalar_operand(_ev(e.a, env), env, "*")
                          * _scalar_operand(_ev(e.b, env), env, "*"))
    if isinstance(e, ast.Call):
        f = builtins.lookup(e.fn, len(e.args), len(e.params))
        args = [_scalar_operand(_ev(a, env), env, e.fn) for a in e.args]
        return grid.batch(f.fn(*args, *e.params), d)
    if isinstance(e, ast.Pair):
        return (_ev(e.a, env), _ev(e.b, env))
    if isinstance(e, ast.Proj):
        v = _ev(e.e, env)
        if not isinstance(v, tuple):
            raise TLError("projection of a non-pair value", e.loc)
        return v[e.k]
    if isinstance(e, ast.Gen):
        n = extent(e.size, env)
        body = _ev(e.body, env.bind_index(e.idx, n))
        # The binder's batch axis d becomes the tensor's first axis, at full length.
        return _map(lambda x: np.broadcast_to(x, x.shape[:d] + (n,) + x.shape[d + 1:]), body)
    if isinstance(e, ast.Sum):
        n = extent(e.size, env)
        binders, summand = grid.sum_nest(e)
        quotient = grid.pinned_quotient(e.idx, {q for q, _ in binders}, summand, env) \
            if n > 0 else None
        if quotient is not None:     # one live term per point: evaluate just that one
            body = _ev(e.body, env.bind_pinned(e.idx, quotient))
            if isinstance(body, tuple) or body.ndim != d + 1:
                raise TLError("sum needs scalar operands (tensor arithmetic must be elaborated)")
            live = grid.to_depth((quotient >= 0) & (quotient < n), d)
            return np.where(live, _reduce_sum(body, 1, d), 0.0)
        body = _ev(e.body, env.bind_index(e.idx, n))
        if isinstance(body, tuple) or body.ndim != d + 1:
            raise TLError("sum needs scalar operands (tensor arithmetic must be elaborated)")
        return _reduce_sum(body, n, d)
    if isinstance(e, ast.Extremum):
        n = extent(e.size, env)
        if n <= 0:
            return np.full((1,) * d, e.EMPTY)
        body = _ev(e.body, env.bind_index(e.idx, n))
        if isinstance(body, tuple) or body.ndim != d + 1:
            raise TLError(f"{e.op} needs scalar operands (tensor arithmetic must be elaborated)")
        full = np.broadcast_to(body, body.shape[:d] + (n,) + body.shape[d + 1:])
        # NaN propagates (as numpy's and JAX's max do); the backends do the same.
        return np.asarray((np.max if e.op == "max" else np.min)(full, axis=d))
    if isinstance(e, ast.Access):
        idx = [eval_affine(a, env) for a in e.idx]
        v = _ev(e.e, env)
        for leaf in _leaves(v):
            if leaf.ndim < d + len(idx):
                raise TLError(f"access with {len(idx)} indices of a tensor of rank "
                              f"{leaf.ndim - d}", e.loc)
        return _map(lambda x: grid.gather(x, idx, d, d), v)
    if isinstance(e, ast.Iverson):
        mask = eval_pred(e.pred, env)
        if not mask.any():
            return _zero(e.e, env)          # e is not evaluated at all
        v = _ev(e.e, env)
        if mask.all():
            return v
        return _map(lambda x: np.where(mask.reshape(mask.shape + (1,) * (x.ndim - d)), x, 0.0),
                    v)
    if isinstance(e, ast.Let):
        while isinstance(e, ast.Let):   # statement chains iteratively: no deep recursion
            env = env.bind_value(e.name, _ev(e.value, env))
            e = e.body
        return _ev(e, env)
    if isinstance(e, ast.Box):
        if d:
            raise TLError(f"{e.fn} applies to whole tensors, not under gen/sum", e.loc)
        args = [_ev(a, env) for a in e.args]
        try:
            return boxes.evaluate(e.fn, e.part, args, e.label)
        except boxes.BoxError as err:
            raise boxes.BoxError(err.message, e.loc) from None
    if isinstance(e, ast.DefCall):
        raise TLError(f"call of {e.name!r} must be inlined (elaborate) before evaluation",
                      e.loc)
    raise TLError(f"cannot evaluate {type(e).__name__}")


def _zero(e: ast.Expr, env: Env) -> Value:
    """The zero of `e`'s type (size-1 batch axes), computed from shapes only."""
    d = env.depth
    if isinstance(e, ast.Var):
        v, d0 = env.vals[e.name] if e.name in env.vals else (None, 0)
        if v is None:
            raise TLError(f"unbound variable {e.name!r}")
        return _map(lambda x: np.zeros((1,) * d + x.shape[d0:]), v)
    if isinstance(e, (ast.Const, ast.IndexValue, ast.Add, ast.Mul, ast.Call, ast.Sum,
                      ast.Extremum)):
        return np.zeros((1,) * d)
    if isinstance(e, ast.Pair):
        return (_zero(e.a, env), _zero(e.b, env))
    if isinstance(e, ast.Proj):
        return _zero(e.e, env)[e.k]
    if isinstance(e, ast.Gen):
        n = extent(e.size, env)
        body = _zero(e.body, env.bind_index(e.idx, n))
        return _map(lambda x: np.zeros(x.shape[:d] + (n,) + x.shape[d + 1:]), body)
    if isinstance(e, ast.Access):
        k = len(e.idx)
        return _map(lambda x: np.zeros(x.shape[:d] + x.shape[d + k:]), _zero(e.e, env))
    if isinstance(e, ast.Iverson):
        return _zero(e.e, env)
    if isinstance(e, ast.Let):
        while isinstance(e, ast.Let):
            env = env.bind_value(e.name, _zero(e.value, env))
            e = e.body
        return _zero(e, env)
    raise TLError(f"cannot evaluate {type(e).__name__}")


def _export(v: Value) -> Any:
    """Depth-0 value -> user value: float for R, fresh C-order float64 arrays, tuples."""
    if isinstance(v, tuple):
        return tuple(_export(c) for c in v)
    if v.ndim == 0:
        return float(v)
    return np.array(v, dtype=np.float64, order="C", copy=True)


def eval_expr(e: ast.Expr, env: Env | Mapping[str, Any]) -> Any:
    """Evaluate `e`.  `env` is an `Env`, or a plain mapping: ints are sizes, boolean arrays
    are relation masks, everything else (floats, arrays, tuples) are values.

    With a plain mapping (or a depth-0 `Env`) the result is a user value (float, array,
    tuple); with a batched `Env` it is the raw batched value.
    """
    if not isinstance(env, Env):
        env = _env_from_mapping(env)
    with np.errstate(all="ignore"):
        v = _ev(e, env)
    return _export(v) if env.depth == 0 else v


def _env_from_mapping(m: Mapping[str, Any]) -> Env:
    sizes: dict[str, int] = {}
    rels: dict[str, np.ndarray] = {}
    vals: dict[str, tuple[Value, int]] = {}
    for name, v in m.items():
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            sizes[name] = int(v)
        elif isinstance(v, np.ndarray) and v.dtype == bool:
            rels[name] = v
        else:
            vals[name] = (_import_value(v), 0)
    return Env(sizes=sizes, rels=rels, vals=vals)


def _import_value(v: Any) -> Value:
    """A user value as a depth-0 value: tuples are pairs, everything else a float64 array."""
    if isinstance(v, tuple):
        return tuple(_import_value(c) for c in v)
    return np.asarray(v, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Arguments


def _shape(t: ast.Type, sizes: Mapping[str, int]) -> tuple[int, ...]:
    env = Env(sizes=sizes)
    return tuple(extent(n, env) for n in ast.shape_of(t))


def _check_value(name: str, t: ast.Type, v: Any, sizes: Mapping[str, int]) -> Value:
    if isinstance(t, ast.TPair):
        if not isinstance(v, (tuple, list)) or len(v) != 2:
            raise ShapeError(f"argument {name!r}: expected a pair, got {type(v).__name__}")
        return (_check_value(f"{name}.0", t.a, v[0], sizes),
                _check_value(f"{name}.1", t.b, v[1], sizes))
    expected = _shape(t, sizes)
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ShapeError(f"argument {name!r}: expected real numbers of shape {expected}, "
                         f"got {type(v).__name__}") from None
    if arr.shape != expected:
        raise ShapeError(f"argument {name!r}: expected shape {expected}, got shape {arr.shape}")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)  # (keeps 0-d as 0-d)


def relation_mask(name: str, v: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A relation argument (a `Relation`, boolean mask, or `(k, arity)` integer coordinates)
    as a mask (semantics/relation.py)."""
    try:
        return relation.from_value(v, shape).mask()
    except ShapeError as err:
        raise ShapeError(f"relation {name!r}: {err.message}") from None


def index_array_coordinates(name: str, v: Any, shape: tuple[int, ...], bound: int,
                            what: str | None = None) -> np.ndarray:
    """An index-array argument (`idx: Z[n...] in m`, SPEC 12) as the `(k, arity)` coordinates
    of its relation `{(i..., idx[i...])}`; `ShapeError` naming the parameter and the first
    entry outside `0 <= idx[i...] < m`."""
    return index_array_rel(name, v, shape, bound, what).coords()


def index_array_rel(name: str, v: Any, shape: tuple[int, ...], bound: int,
                    what: str | None = None) -> relation.Relation:
    """`index_array_coordinates` as a `Relation` (built in O(nnz), entries checked once)."""
    what = what or f"index array {name!r}"
    arr = np.asarray(v)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or (
            np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr)))):
        raise ShapeError(f"{what}: expected integers of shape {shape}, got {arr.dtype} array")
    if arr.shape != shape:
        raise ShapeError(f"{what}: expected shape {shape}, got shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    outside = (arr < 0) | (arr >= bound)
    if outside.any():
        at = tuple(int(k) for k in np.argwhere(outside)[0])
        where = ", ".join(str(k) for k in at)
        raise ShapeError(f"{what}: entry {name}[{where}] = {int(arr[at])} is outside the "
                         f"range it indexes, 0 <= {name}[...] < {bound}")
    return relation.index_array(arr, bound)


def index_array_relation(name: str, t: ast.Type, v: Any, shape: tuple[int, ...]) -> Any:
    """An index array's argument as its relation: the user's integer array (exactly the
    array's shape, `shape[:-1]`) is turned into coordinates, entries checked; a relation
    (mask or coordinates, what the API passes on) is returned as it is."""
    if not isinstance(t, ast.TIndex):
        return v
    arr = np.asarray(v) if not isinstance(v, relation.Relation) else None
    if arr is not None and arr.dtype != bool and arr.shape == shape[:-1] and \
            np.issubdtype(arr.dtype, np.integer):
        return index_array_rel(name, arr, shape[:-1], shape[-1])
    return v


def _size_arg(name: str, v: Any) -> int:
    try:
        if isinstance(v, bool):
            raise TypeError
        n = operator.index(v)
    except TypeError:
        raise TLError(f"size argument {name!r} must be an integer, got {v!r}") from None
    if n < 0:
        raise TLError(f"size argument {name!r} must be non-negative, got {n}")
    return n


def bind_args(d: ast.Def | tssa.Program, args: Mapping[str, Any], values: bool = True) -> Env:
    """Check and normalise the arguments of `d` (a core `Def` or an SSA `Program`: its name
    and parameters) into a depth-0 `Env`.

    With `values=False` (cost model) only sizes and relations are needed; value arguments are
    ignored.
    """
    params = {p.name: p for p in d.params}
    unknown = [k for k in args if k not in params]
    if unknown:
        raise TLError(f"{d.name}: unexpected argument(s) {', '.join(map(repr, unknown))}; "
                      f"parameters are {', '.join(params)}")
    sizes: dict[str, int] = {}
    for p in d.params:
        if isinstance(p.type, ast.TSize):
            if p.name not in args:
                raise TLError(f"{d.name}: missing size argument {p.name!r}")
            sizes[p.name] = _size_arg(p.name, args[p.name])
    rels: dict[str, np.ndarray] = {}
    vals: dict[str, tuple[Value, int]] = {}
    for p in d.params:
        if isinstance(p.type, ast.TSize) or (not values and not isinstance(p.type, ast.TRel)):
            continue
        if p.name not in args:
            raise TLError(f"{d.name}: missing argument {p.name!r}")
        try:
            if isinstance(p.type, ast.TRel):
                env = Env(sizes=sizes)
                shape = tuple(extent(n, env) for n in p.type.sizes)
                rels[p.name] = relation_mask(p.name, index_array_relation(
                    p.name, p.type, args[p.name], shape), shape)
            else:
                vals[p.name] = (_check_value(p.name, soa_type(p.type), args[p.name], sizes), 0)
        except ShapeError as err:
            raise ShapeError(f"{d.name}: {err.message}", p.loc) from None
    return Env(sizes=sizes, rels=rels, vals=vals)


def interpret(d: ast.Def, args: Mapping[str, Any]) -> Any:
    """Run `d` on `args` (name -> int size, float, array, tuple, relation)."""
    env = bind_args(d, args)
    with np.errstate(all="ignore"):
        return _export(_ev(d.body, env))


def evaluate_program(p: tssa.Program, args: Mapping[str, Any]) -> Any:
    """Run a Tensor-SSA program: SPEC 5 gives each primitive its meaning as a core
    expression (`tssa.to_core`), so an SSA program means exactly its core definition."""
    return interpret(tssa.to_core(p), args)


__all__ = ["Env", "interpret", "evaluate_program", "eval_expr", "eval_pred", "eval_affine",
           "extent", "bind_args", "relation_mask", "soa_type", "index_array_coordinates",
           "index_array_relation", "index_array_rel"]
