"""Slow, obviously-correct scalar references (tests only): SPEC 2.2 and SPEC 3 transcribed one
index point at a time, to cross-check the vectorised `grid`, interpreter and cost model.

Deliberately independent of `tensorlang.semantics.grid`: affine expressions through
`Affine.evaluate`, predicates and sums by Python recursion over index values.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import builtins
from tensorlang.semantics.grid import sum_nest
from tensorlang.semantics.interp import bind_args


def _ref_map(f: Callable[[Any], Any], v: Any) -> Any:
    return tuple(_ref_map(f, c) for c in v) if isinstance(v, tuple) else f(v)



def eval_pred_scalar(p: ast.Pred, env: Mapping[str, Any]) -> bool:
    """`p` at one point; `env` maps index and size names to ints, relations to masks."""
    if isinstance(p, ast.PTrue):
        return True
    if isinstance(p, ast.PFalse):
        return False
    if isinstance(p, ast.Cmp):
        lhs, rhs = p.lhs.evaluate(env), p.rhs.evaluate(env)
        return {"<": lhs < rhs, "<=": lhs <= rhs, "==": lhs == rhs}[p.op]
    if isinstance(p, ast.And):
        return eval_pred_scalar(p.a, env) and eval_pred_scalar(p.b, env)
    if isinstance(p, ast.Or):
        return eval_pred_scalar(p.a, env) or eval_pred_scalar(p.b, env)
    if isinstance(p, ast.RelCall):
        mask = env[p.name]
        pt = tuple(a.evaluate(env) for a in p.args)
        return all(0 <= a < n for a, n in zip(pt, mask.shape)) and bool(mask[pt])
    if isinstance(p, ast.Exists):
        return any(eval_pred_scalar(p.body, {**env, p.idx: i})
                   for i in range(max(0, p.size.evaluate(env))))
    raise TypeError(f"not a predicate: {p!r}")


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


def eval_scalar_reference(e: ast.Expr, env: Mapping[str, Any]) -> Any:
    """Slow, obviously-correct evaluation of `e`, one index value at a time.

    `env` maps sizes and bound indices to ints, relations to boolean masks, variables to
    floats, float64 arrays and tuples.  The zero of a type is found by evaluating and zeroing
    (the value itself is discarded, so nothing can leak).
    """
    ev = eval_scalar_reference
    if isinstance(e, ast.Var):
        return env[e.name]
    if isinstance(e, ast.Const):
        return e.value
    if isinstance(e, ast.IndexValue):   # SPEC 12: an index or size expression as a real
        return float(e.a.evaluate(env))
    if isinstance(e, ast.Add):
        return float(np.float64(ev(e.a, env)) + np.float64(ev(e.b, env)))
    if isinstance(e, ast.Mul):
        return float(np.float64(ev(e.a, env)) * np.float64(ev(e.b, env)))
    if isinstance(e, ast.Call):
        args = [np.float64(ev(a, env)) for a in e.args]
        return float(builtins.apply(e.fn, args, e.params))
    if isinstance(e, ast.Pair):
        return (ev(e.a, env), ev(e.b, env))
    if isinstance(e, ast.Proj):
        return ev(e.e, env)[e.k]
    if isinstance(e, ast.Gen):
        n = max(0, e.size.evaluate(env))
        if n == 0:
            shape_probe = ev(e.body, {**env, e.idx: 0})
            return _ref_map(lambda x: np.zeros((0,) + np.shape(x)), _ref_zero(shape_probe))
        return _ref_stack([ev(e.body, {**env, e.idx: i}) for i in range(n)])
    if isinstance(e, ast.Sum):
        acc = np.float64(0.0)
        for i in range(max(0, e.size.evaluate(env))):
            acc = acc + np.float64(ev(e.body, {**env, e.idx: i}))
        return float(acc)
    if isinstance(e, ast.Extremum):   # SPEC 12: -inf / +inf when empty, NaN propagates
        acc = np.float64(e.EMPTY)
        for i in range(max(0, e.size.evaluate(env))):
            v = np.float64(ev(e.body, {**env, e.idx: i}))
            if v != v or (v > acc if e.op == "max" else v < acc):
                acc = v
            if acc != acc:
                break
        return float(acc)
    if isinstance(e, ast.Access):
        return _ref_index(ev(e.e, env), tuple(a.evaluate(env) for a in e.idx))
    if isinstance(e, ast.Iverson):
        if eval_pred_scalar(e.pred, env):
            return ev(e.e, env)
        return _ref_zero(ev(e.e, env))
    if isinstance(e, ast.Let):
        while isinstance(e, ast.Let):
            env = {**env, e.name: ev(e.value, env)}
            e = e.body
        return ev(e, env)
    raise TypeError(f"cannot evaluate {type(e).__name__}")


def interpret_reference(d: ast.Def, args: Mapping[str, Any]) -> Any:
    """`interpret` through the scalar reference evaluator (tests only; slow)."""
    env = bind_args(d, args)
    flat: dict[str, Any] = {**env.sizes, **env.rels}
    flat.update({k: _export_ref(v) for k, (v, _) in env.vals.items()})
    with np.errstate(all="ignore"):
        return _export_ref(eval_scalar_reference(d.body, flat))


def _export_ref(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_export_ref(c) for c in v)
    return float(v) if np.ndim(v) == 0 else np.array(v, dtype=np.float64, order="C")



def z_scalar(e: ast.Expr, env: Mapping[str, Any]) -> bool:
    if isinstance(e, ast.Const):
        return e.value == 0.0
    if isinstance(e, ast.Iverson):
        return not eval_pred_scalar(e.pred, env) or z_scalar(e.e, env)
    if isinstance(e, ast.Let):
        while isinstance(e, ast.Let):
            e = e.body
        return z_scalar(e, env)
    if isinstance(e, ast.Add):
        return z_scalar(e.a, env) and z_scalar(e.b, env)
    if isinstance(e, ast.Mul):
        return z_scalar(e.a, env) or z_scalar(e.b, env)
    return False


def cost_scalar_reference(e: ast.Expr, env: Mapping[str, Any]) -> tuple[int, int, int]:
    """(adds, muls, calls) of `e`; `env` maps sizes and indices to ints, relations to masks."""
    def add(*cs: tuple[int, int, int]) -> tuple[int, int, int]:
        return (sum(c[0] for c in cs), sum(c[1] for c in cs), sum(c[2] for c in cs))

    c = cost_scalar_reference
    if isinstance(e, (ast.Var, ast.Const, ast.IndexValue)):   # reads are free (SPEC 3)
        return (0, 0, 0)
    if isinstance(e, ast.Add):
        live = not (z_scalar(e.a, env) or z_scalar(e.b, env))
        return add(c(e.a, env), c(e.b, env), (int(live), 0, 0))
    if isinstance(e, ast.Mul):
        live = not (z_scalar(e.a, env) or z_scalar(e.b, env))
        return add(c(e.a, env), c(e.b, env), (0, int(live), 0))
    if isinstance(e, ast.Call):
        return add(*(c(a, env) for a in e.args), (0, 0, 1))
    if isinstance(e, ast.Pair):
        return add(c(e.a, env), c(e.b, env))
    if isinstance(e, (ast.Proj, ast.Access)):
        return c(e.e, env)
    if isinstance(e, ast.Gen):
        return add((0, 0, 0), *(c(e.body, {**env, e.idx: i})
                                for i in range(max(0, e.size.evaluate(env)))))
    if isinstance(e, ast.Sum):
        binders, body = sum_nest(e)
        out, live = (0, 0, 0), 0
        for point in _tuples(binders, env):
            out = add(out, c(body, point))
            live += not z_scalar(body, point)
        return add(out, (max(0, live - 1), 0, 0))
    if isinstance(e, ast.Extremum):   # SPEC 12: max(0, n - 1) calls, every point counts
        n = max(0, e.size.evaluate(env))
        return add((0, 0, max(0, n - 1)), *(c(e.body, {**env, e.idx: i}) for i in range(n)))
    if isinstance(e, ast.Iverson):
        return c(e.e, env) if eval_pred_scalar(e.pred, env) else (0, 0, 0)
    if isinstance(e, ast.Let):
        out = (0, 0, 0)
        while isinstance(e, ast.Let):
            out = add(out, c(e.value, env))
            e = e.body
        return add(out, c(e, env))
    raise TypeError(f"cannot cost {type(e).__name__}")


def _tuples(binders: list[tuple[str, ast.Affine]], env: Mapping[str, Any]):
    """Every environment of the nest's index tuples (sizes may mention outer indices)."""
    if not binders:
        yield env
        return
    (idx, size), rest = binders[0], binders[1:]
    for i in range(max(0, size.evaluate(env))):
        yield from _tuples(rest, {**env, idx: i})

