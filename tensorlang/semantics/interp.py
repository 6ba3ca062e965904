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

Values: R -> float, tensors -> float64 arrays (C order), pairs -> tuples; a tensor of pairs
is a pair of tensors (struct of arrays).  `eval_scalar_reference` is a slow, purely scalar
evaluator used only by tests to cross-check the vectorised one.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.semantics import builtins as B
from tensorlang.syntax.errors import ShapeError, TLError

Value = Any   # np.ndarray leaf, or a tuple of Values (pair)


# ---------------------------------------------------------------------------------------------
# Environment


@dataclass(frozen=True)
class Env:
    """Evaluation environment.  `depth` is the number of enclosing index binders."""

    sizes: Mapping[str, int] = field(default_factory=dict)
    rels: Mapping[str, np.ndarray] = field(default_factory=dict)        # boolean masks
    vals: Mapping[str, tuple[Value, int]] = field(default_factory=dict)  # value, its depth
    idx: Mapping[str, tuple[int, int]] = field(default_factory=dict)     # axis, extent
    depth: int = 0

    def bind_index(self, name: str, n: int) -> "Env":
        """Enter a binder: `name` ranges over 0..n-1 along the new axis `depth`."""
        return replace(self, idx={**self.idx, name: (self.depth, n)}, depth=self.depth + 1)

    def bind_value(self, name: str, v: Value) -> "Env":
        return replace(self, vals={**self.vals, name: (v, self.depth)})


def _leaves(v: Value) -> list[np.ndarray]:
    return [v] if not isinstance(v, tuple) else [x for c in v for x in _leaves(c)]


def _map(f: Callable[[np.ndarray], np.ndarray], v: Value) -> Value:
    """Apply `f` to every array leaf of a (possibly nested) pair value."""
    return tuple(_map(f, c) for c in v) if isinstance(v, tuple) else f(v)


def _axis_range(n: int, axis: int, depth: int) -> np.ndarray:
    """0..n-1 laid along `axis` of a depth-`depth` batch shape."""
    shape = [1] * depth
    shape[axis] = n
    return np.arange(n, dtype=np.int64).reshape(shape)


def extent(a: A.Affine, env: Env) -> int:
    """The value of a size expression (binder extent or type dimension); negative -> 0."""
    v = eval_affine(a, env)
    if isinstance(v, np.ndarray):
        raise TLError(f"size {a} depends on an index variable")
    return max(0, int(v))


def eval_affine(a: A.Affine, env: Env) -> int | np.ndarray:
    """An int if `a` mentions no index variable, else an int64 array of batch rank."""
    out: int | np.ndarray = a.const
    for name, coeff in a.terms:
        if name in env.idx:
            axis, n = env.idx[name]
            out = out + coeff * _axis_range(n, axis, env.depth)
        elif name in env.sizes:
            out = out + coeff * env.sizes[name]
        else:
            raise TLError(f"unbound index or size variable {name!r}")
    return out


def _batch(x: Any, depth: int) -> np.ndarray:
    """A scalar or batch-rank array as an array with exactly `depth` (batch) axes."""
    x = np.asarray(x)
    return x.reshape((1,) * depth) if x.ndim == 0 else x


def eval_pred(p: A.Pred, env: Env) -> np.ndarray:
    """A boolean array with `env.depth` batch axes."""
    d = env.depth
    if isinstance(p, A.PTrue):
        return np.ones((1,) * d, dtype=bool)
    if isinstance(p, A.PFalse):
        return np.zeros((1,) * d, dtype=bool)
    if isinstance(p, A.Cmp):
        op = {"<": operator.lt, "<=": operator.le, "==": operator.eq}[p.op]
        return _batch(op(eval_affine(p.lhs, env), eval_affine(p.rhs, env)), d)
    if isinstance(p, A.And):
        return eval_pred(p.a, env) & eval_pred(p.b, env)
    if isinstance(p, A.Or):
        return eval_pred(p.a, env) | eval_pred(p.b, env)
    if isinstance(p, A.RelCall):
        if p.name not in env.rels:
            raise TLError(f"unbound relation {p.name!r}", p.loc)
        mask = env.rels[p.name]
        if len(p.args) != mask.ndim:
            raise TLError(f"relation {p.name!r} takes {mask.ndim} indices, got {len(p.args)}",
                          p.loc)
        got = _gather(mask, [eval_affine(a, env) for a in p.args], 0, d, fill=False)
        return _batch(got, d)
    if isinstance(p, A.Exists):
        n = extent(p.size, env)
        body = eval_pred(p.body, env.bind_index(p.idx, n))
        return np.any(np.broadcast_to(body, body.shape[:d] + (n,)), axis=d)
    raise TLError(f"not a predicate: {p!r}")


def _gather(leaf: np.ndarray, idx: list[int | np.ndarray], leaf_depth: int, depth: int,
            fill: Any = 0.0) -> np.ndarray:
    """`leaf[idx]` per batch point, `fill` where any index is out of range (zero extension).

    `leaf` has `leaf_depth` batch axes (0 or `depth`) then the accessed axes; the result has
    `depth` batch axes then the remaining axes of `leaf`.
    """
    k = len(idx)
    dims = leaf.shape[leaf_depth:leaf_depth + k]
    rest = leaf.shape[leaf_depth + k:]
    if all(isinstance(a, (int, np.integer)) for a in idx):
        if all(0 <= a < n for a, n in zip(idx, dims)):   # plain indexing, keeps batch axes
            out = leaf[(slice(None),) * leaf_depth + tuple(int(a) for a in idx)]
        else:
            out = np.full(leaf.shape[:leaf_depth] + rest, fill, dtype=leaf.dtype)
        return out.reshape((1,) * (depth - leaf_depth) + out.shape)
    arrays = [_batch(a, depth) for a in idx]
    valid = np.ones((1,) * depth, dtype=bool)
    for a, n in zip(arrays, dims):
        valid = valid & (a >= 0) & (a < n)
    bshape = np.broadcast_shapes(valid.shape, leaf.shape[:leaf_depth])
    if 0 in dims or not valid.any():
        return np.full(bshape + rest, fill, dtype=leaf.dtype)
    # Batch axes of the leaf index themselves (0 where the leaf broadcasts along them).
    bidx = [_axis_range(leaf.shape[t], t, depth) if leaf.shape[t] != 1 else 0
            for t in range(leaf_depth)]
    cidx = [np.clip(a, 0, n - 1) for a, n in zip(arrays, dims)]
    out = leaf[tuple(bidx + cidx)]   # all indices advanced: shape = batch shape + rest
    if not valid.all():
        out = np.where(valid.reshape(valid.shape + (1,) * len(rest)), out,
                       np.asarray(fill, dtype=leaf.dtype))
    return out


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

    Added left to right from 0.0, as a backend's loop `acc = 0.0; acc += v` adds them
    (`cumsum` is sequential), so the oracle's rounding does not depend on numpy's
    pairwise-summation heuristics.  The final `+ 0.0` is the loop's initial 0.0: it only
    turns a sum of negative zeros into +0.0 (and recip of it into +inf).
    """
    if n == 0:
        return np.zeros(v.shape[:axis] + v.shape[axis + 1:])
    full = np.broadcast_to(v, v.shape[:axis] + (n,) + v.shape[axis + 1:])
    return np.take(np.cumsum(full, axis=axis), n - 1, axis=axis) + 0.0


def _ev(e: A.Expr, env: Env) -> Value:
    d = env.depth
    if isinstance(e, A.Var):
        return _var(e.name, env)
    if isinstance(e, A.Const):
        return np.full((1,) * d, e.value)
    if isinstance(e, A.Add):
        return np.asarray(_scalar_operand(_ev(e.a, env), env, "+")
                          + _scalar_operand(_ev(e.b, env), env, "+"))
    if isinstance(e, A.Mul):
        return np.asarray(_scalar_operand(_ev(e.a, env), env, "*")
                          * _scalar_operand(_ev(e.b, env), env, "*"))
    if isinstance(e, A.Call):
        f = B.lookup(e.fn, len(e.args), len(e.params))
        args = [_scalar_operand(_ev(a, env), env, e.fn) for a in e.args]
        return _batch(f.fn(*args, *e.params), d)
    if isinstance(e, A.Pair):
        return (_ev(e.a, env), _ev(e.b, env))
    if isinstance(e, A.Proj):
        v = _ev(e.e, env)
        if not isinstance(v, tuple):
            raise TLError("projection of a non-pair value", e.loc)
        return v[e.k]
    if isinstance(e, A.Gen):
        n = extent(e.size, env)
        body = _ev(e.body, env.bind_index(e.idx, n))
        # The binder's batch axis d becomes the tensor's first axis, at full length.
        return _map(lambda x: np.broadcast_to(x, x.shape[:d] + (n,) + x.shape[d + 1:]), body)
    if isinstance(e, A.Sum):
        n = extent(e.size, env)
        body = _ev(e.body, env.bind_index(e.idx, n))
        _scalar_operand(body, replace(env, depth=d + 1), "sum")
        return _reduce_sum(body, n, d)
    if isinstance(e, A.Access):
        idx = [eval_affine(a, env) for a in e.idx]
        v = _ev(e.e, env)
        for leaf in _leaves(v):
            if leaf.ndim < d + len(idx):
                raise TLError(f"access with {len(idx)} indices of a tensor of rank "
                              f"{leaf.ndim - d}", e.loc)
        return _map(lambda x: _gather(x, idx, d, d), v)
    if isinstance(e, A.Iverson):
        mask = eval_pred(e.pred, env)
        if not mask.any():
            return _zero(e.e, env)          # e is not evaluated at all
        v = _ev(e.e, env)
        if mask.all():
            return v
        return _map(lambda x: np.where(mask.reshape(mask.shape + (1,) * (x.ndim - d)), x, 0.0),
                    v)
    if isinstance(e, A.Let):
        while isinstance(e, A.Let):   # statement chains iteratively: no deep recursion
            env = env.bind_value(e.name, _ev(e.value, env))
            e = e.body
        return _ev(e, env)
    if isinstance(e, A.DefCall):
        raise TLError(f"call of {e.name!r} must be inlined (elaborate) before evaluation",
                      e.loc)
    raise TLError(f"cannot evaluate {type(e).__name__}")


def _zero(e: A.Expr, env: Env) -> Value:
    """The zero of `e`'s type (size-1 batch axes), computed from shapes only."""
    d = env.depth
    if isinstance(e, A.Var):
        v, d0 = env.vals[e.name] if e.name in env.vals else (None, 0)
        if v is None:
            raise TLError(f"unbound variable {e.name!r}")
        return _map(lambda x: np.zeros((1,) * d + x.shape[d0:]), v)
    if isinstance(e, (A.Const, A.Add, A.Mul, A.Call, A.Sum)):
        return np.zeros((1,) * d)
    if isinstance(e, A.Pair):
        return (_zero(e.a, env), _zero(e.b, env))
    if isinstance(e, A.Proj):
        return _zero(e.e, env)[e.k]
    if isinstance(e, A.Gen):
        n = extent(e.size, env)
        body = _zero(e.body, env.bind_index(e.idx, n))
        return _map(lambda x: np.zeros(x.shape[:d] + (n,) + x.shape[d + 1:]), body)
    if isinstance(e, A.Access):
        k = len(e.idx)
        return _map(lambda x: np.zeros(x.shape[:d] + x.shape[d + k:]), _zero(e.e, env))
    if isinstance(e, A.Iverson):
        return _zero(e.e, env)
    if isinstance(e, A.Let):
        while isinstance(e, A.Let):
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


def eval_expr(e: A.Expr, env: Env | Mapping[str, Any]) -> Any:
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
    return Env(sizes, rels, vals)


def _import_value(v: Any) -> Value:
    """A user value as a depth-0 value: tuples are pairs, everything else a float64 array."""
    if isinstance(v, tuple):
        return tuple(_import_value(c) for c in v)
    return np.asarray(v, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Arguments


def soa_type(t: A.Type) -> A.Type:
    """The run-time type: `[n](t1, t2)` is represented as `([n]t1, [n]t2)`."""
    if isinstance(t, A.TArr):
        elem = soa_type(t.elem)
        if isinstance(elem, A.TPair):
            return A.TPair(soa_type(A.TArr(t.size, elem.a)), soa_type(A.TArr(t.size, elem.b)))
        return A.TArr(t.size, elem)
    if isinstance(t, A.TPair):
        return A.TPair(soa_type(t.a), soa_type(t.b))
    return t


def _shape(t: A.Type, sizes: Mapping[str, int]) -> tuple[int, ...]:
    env = Env(sizes=sizes)
    return tuple(extent(n, env) for n in A.shape_of(t))


def _check_value(name: str, t: A.Type, v: Any, sizes: Mapping[str, int]) -> Value:
    if isinstance(t, A.TPair):
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
    """A relation argument (boolean mask, or `(k, arity)` integer coordinates) as a mask."""
    arr = np.asarray(v)
    if arr.dtype == bool:
        if arr.shape != shape:
            raise ShapeError(f"relation {name!r}: expected a boolean mask of shape {shape}, "
                             f"got shape {arr.shape}")
        return arr
    arity = len(shape)
    if arr.size == 0:
        arr = arr.reshape(0, arity)
    if arity == 1 and arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 2 or arr.shape[1] != arity:
        raise ShapeError(f"relation {name!r}: expected a boolean mask of shape {shape} or a "
                         f"(k, {arity}) integer coordinate array, got {arr.dtype} array of "
                         f"shape {arr.shape}")
    inside = np.all((arr >= 0) & (arr < np.array(shape, dtype=np.int64)), axis=1)
    if not inside.all():
        bad = tuple(int(c) for c in arr[~inside][0])
        raise ShapeError(f"relation {name!r}: coordinate {bad} is outside shape {shape}")
    mask = np.zeros(shape, dtype=bool)
    mask[tuple(arr.T)] = True
    return mask


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


def bind_args(d: A.Def, args: Mapping[str, Any], values: bool = True) -> Env:
    """Check and normalise the arguments of `d` into a depth-0 `Env`.

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
        if isinstance(p.type, A.TSize):
            if p.name not in args:
                raise TLError(f"{d.name}: missing size argument {p.name!r}")
            sizes[p.name] = _size_arg(p.name, args[p.name])
    rels: dict[str, np.ndarray] = {}
    vals: dict[str, tuple[Value, int]] = {}
    for p in d.params:
        if isinstance(p.type, A.TSize) or (not values and not isinstance(p.type, A.TRel)):
            continue
        if p.name not in args:
            raise TLError(f"{d.name}: missing argument {p.name!r}")
        try:
            if isinstance(p.type, A.TRel):
                env = Env(sizes=sizes)
                shape = tuple(extent(n, env) for n in p.type.sizes)
                rels[p.name] = relation_mask(p.name, args[p.name], shape)
            else:
                vals[p.name] = (_check_value(p.name, soa_type(p.type), args[p.name], sizes), 0)
        except ShapeError as err:
            raise ShapeError(f"{d.name}: {err.message}", p.loc) from None
    return Env(sizes, rels, vals)


def interpret(d: A.Def, args: Mapping[str, Any]) -> Any:
    """Run `d` on `args` (name -> int size, float, array, tuple, relation)."""
    env = bind_args(d, args)
    with np.errstate(all="ignore"):
        return _export(_ev(d.body, env))


# ---------------------------------------------------------------------------------------------
# Scalar reference evaluator (tests only): direct recursion over index values.


def eval_pred_scalar(p: A.Pred, env: Mapping[str, Any]) -> bool:
    """`p` at one point; `env` maps index and size names to ints, relations to masks."""
    if isinstance(p, A.PTrue):
        return True
    if isinstance(p, A.PFalse):
        return False
    if isinstance(p, A.Cmp):
        lhs, rhs = p.lhs.evaluate(env), p.rhs.evaluate(env)
        return {"<": lhs < rhs, "<=": lhs <= rhs, "==": lhs == rhs}[p.op]
    if isinstance(p, A.And):
        return eval_pred_scalar(p.a, env) and eval_pred_scalar(p.b, env)
    if isinstance(p, A.Or):
        return eval_pred_scalar(p.a, env) or eval_pred_scalar(p.b, env)
    if isinstance(p, A.RelCall):
        mask = env[p.name]
        pt = tuple(a.evaluate(env) for a in p.args)
        return all(0 <= a < n for a, n in zip(pt, mask.shape)) and bool(mask[pt])
    if isinstance(p, A.Exists):
        return any(eval_pred_scalar(p.body, {**env, p.idx: i})
                   for i in range(max(0, p.size.evaluate(env))))
    raise TLError(f"not a predicate: {p!r}")


def _ref_zero(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_ref_zero(c) for c in v)
    return 0.0 if np.ndim(v) == 0 else np.zeros(np.shape(v))


def _ref_stack(vs: list[Any]) -> Any:
    if isinstance(vs[0], tuple):
        return tuple(_ref_stack([v[k] for v in vs]) for k in range(2))
    return np.array(vs, dtype=np.float64)


def _ref_index(v: Any, idx: tuple[int, ...]) -> Any:
    if isinstance(v, tuple):
        return tuple(_ref_index(c, idx) for c in v)
    if all(0 <= a < n for a, n in zip(idx, v.shape)):
        out = v[idx]
        return float(out) if np.ndim(out) == 0 else out
    rest = v.shape[len(idx):]
    return 0.0 if not rest else np.zeros(rest)


def eval_scalar_reference(e: A.Expr, env: Mapping[str, Any]) -> Any:
    """Slow, obviously-correct evaluation of `e`, one index value at a time.

    `env` maps sizes and bound indices to ints, relations to boolean masks, variables to
    floats, float64 arrays and tuples.  The zero of a type is found by evaluating and zeroing
    (the value itself is discarded, so nothing can leak).
    """
    ev = eval_scalar_reference
    if isinstance(e, A.Var):
        return env[e.name]
    if isinstance(e, A.Const):
        return e.value
    if isinstance(e, A.Add):
        return float(np.float64(ev(e.a, env)) + np.float64(ev(e.b, env)))
    if isinstance(e, A.Mul):
        return float(np.float64(ev(e.a, env)) * np.float64(ev(e.b, env)))
    if isinstance(e, A.Call):
        args = [np.float64(ev(a, env)) for a in e.args]
        return float(B.apply(e.fn, args, e.params))
    if isinstance(e, A.Pair):
        return (ev(e.a, env), ev(e.b, env))
    if isinstance(e, A.Proj):
        return ev(e.e, env)[e.k]
    if isinstance(e, A.Gen):
        n = max(0, e.size.evaluate(env))
        if n == 0:
            shape_probe = ev(e.body, {**env, e.idx: 0})
            return _map(lambda x: np.zeros((0,) + np.shape(x)), _ref_zero(shape_probe))
        return _ref_stack([ev(e.body, {**env, e.idx: i}) for i in range(n)])
    if isinstance(e, A.Sum):
        acc = np.float64(0.0)
        for i in range(max(0, e.size.evaluate(env))):
            acc = acc + np.float64(ev(e.body, {**env, e.idx: i}))
        return float(acc)
    if isinstance(e, A.Access):
        return _ref_index(ev(e.e, env), tuple(a.evaluate(env) for a in e.idx))
    if isinstance(e, A.Iverson):
        if eval_pred_scalar(e.pred, env):
            return ev(e.e, env)
        return _ref_zero(ev(e.e, env))
    if isinstance(e, A.Let):
        while isinstance(e, A.Let):
            env = {**env, e.name: ev(e.value, env)}
            e = e.body
        return ev(e, env)
    raise TLError(f"cannot evaluate {type(e).__name__}")


def interpret_reference(d: A.Def, args: Mapping[str, Any]) -> Any:
    """`interpret` through the scalar reference evaluator (tests only; slow)."""
    env = bind_args(d, args)
    flat: dict[str, Any] = {**env.sizes, **env.rels}
    flat.update({k: _export(v) for k, (v, _) in env.vals.items()})
    with np.errstate(all="ignore"):
        return _export_ref(eval_scalar_reference(d.body, flat))


def _export_ref(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_export_ref(c) for c in v)
    return float(v) if np.ndim(v) == 0 else np.array(v, dtype=np.float64, order="C")


__all__ = ["Env", "interpret", "eval_expr", "eval_pred", "eval_affine", "extent", "bind_args",
           "relation_mask", "soa_type", "eval_scalar_reference", "eval_pred_scalar",
           "interpret_reference"]
