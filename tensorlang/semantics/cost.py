"""The exact cost model of SPEC 3: scalar additions, multiplications and black-box calls.

    C(x) = C(c) = 0
    C(e1 * e2)      = C(e1) + C(e2) + (0 if Z(e1) or Z(e2) else 1)    (a multiplication)
    C(f(e1..ek))    = C(e1) + ... + C(ek) + 1                         (a call)
    C(e1 + e2)      = C(e1) + C(e2) + (0 if Z(e1) or Z(e2) else 1)    (an addition)
    C([p] * e)      = C(e) if p else 0
    C(gen i:n. e)   = sum over i of C(e)
    C(sum i1..ik. e) = sum over (i1..ik) of C(e) + max(0, m - 1)       (additions)
        the maximal nest of directly nested sums is costed jointly; m = number of index
        tuples at which e is not Z
    C(e[a]) = C(e);  C((e1, e2)) = C(e1) + C(e2);  C(e.k) = C(e)
    C(let x = e1 in e2) = C(e1) + C(e2)
    Z(e): e is [p]*e' with p false or Z(e'), or the constant 0, or let ... in e'' with
          Z(e''), or e1 + e2 with Z(e1) and Z(e2), or e1 * e2 with Z(e1) or Z(e2)

The refinement of SPEC 3 (products with a structural-zero factor are zero and their
multiplication is not executed; a bracket around a structural zero is zero) is what makes the
Tensor-SSA conversion cost-equal: SPEC 5 hoists an Iverson factor of a product into the
product's mask.  The counterexample is pinned in tests/test_cost.py and explained in
docs/cost-model.md.

Costs depend only on sizes and relations (predicates never read data), so they are computed
exactly and fast the way `interp` evaluates values: vectorised over bound index variables.
Under `d` enclosing binders a cost is an int64 array of shape (batch axes..., 3) holding
(adds, muls, calls) per index point (batch axes of length 1 where the cost does not depend on
that index), and Z is a boolean array of batch shape.  `cost_scalar_reference` is the same
model transcribed point by point, for tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.syntax.errors import TLError
from tensorlang.semantics.interp import Env, bind_args, eval_pred, eval_pred_scalar, extent

_ADD, _MUL, _CALL = np.eye(3, dtype=np.int64)


@dataclass(frozen=True)
class Cost:
    adds: int
    muls: int
    calls: int
    total: int
    per_binding: dict[str, "Cost"] = field(default_factory=dict, compare=False)

    @staticmethod
    def of(adds: int, muls: int, calls: int,
           per_binding: dict[str, "Cost"] | None = None) -> "Cost":
        return Cost(int(adds), int(muls), int(calls), int(adds + muls + calls),
                    dict(per_binding or {}))

    def __add__(self, other: "Cost") -> "Cost":
        return Cost.of(self.adds + other.adds, self.muls + other.muls,
                       self.calls + other.calls)

    def __str__(self) -> str:
        return f"adds={self.adds} muls={self.muls} calls={self.calls} total={self.total}"


# ---------------------------------------------------------------------------------------------
# Vectorised model


def _unit(v: np.ndarray, d: int) -> np.ndarray:
    return v.reshape((1,) * d + (3,))


def _zeros(d: int) -> np.ndarray:
    return np.zeros((1,) * d + (3,), dtype=np.int64)


def _reduce(a: np.ndarray, sizes: list[int], d: int) -> np.ndarray:
    """Sum `a` over its batch axes d, d+1, ... (one per entry of `sizes`), exactly.

    A length-1 axis stands for `n` equal entries, so it is multiplied by n instead of summed.
    """
    for k in reversed(range(len(sizes))):
        ax, n = d + k, sizes[k]
        a = a.sum(axis=ax) if a.shape[ax] != 1 else np.take(a, 0, axis=ax) * n
    return a


def zmask(e: A.Expr, env: Env) -> np.ndarray:
    """SPEC 3's Z(e) at every batch point (boolean array of batch shape)."""
    d = env.depth
    if isinstance(e, A.Const):
        return np.full((1,) * d, e.value == 0.0)
    if isinstance(e, A.Iverson):
        return ~eval_pred(e.pred, env) | zmask(e.e, env)
    if isinstance(e, A.Let):
        while isinstance(e, A.Let):    # predicates only read indices, sizes and relations
            e = e.body
        return zmask(e, env)
    if isinstance(e, A.Add):
        return zmask(e.a, env) & zmask(e.b, env)
    if isinstance(e, A.Mul):
        return zmask(e.a, env) | zmask(e.b, env)
    return np.zeros((1,) * d, dtype=bool)


def _sum_nest(e: A.Sum) -> tuple[list[tuple[str, A.Affine]], A.Expr]:
    """The maximal nest `sum i1. sum i2. ... body` starting at `e`."""
    binders: list[tuple[str, A.Affine]] = []
    body: A.Expr = e
    while isinstance(body, A.Sum):
        binders.append((body.idx, body.size))
        body = body.body
    return binders, body


def _cost(e: A.Expr, env: Env) -> np.ndarray:
    d = env.depth
    if isinstance(e, (A.Var, A.Const)):
        return _zeros(d)
    if isinstance(e, A.Add):
        live = ~(zmask(e.a, env) | zmask(e.b, env))
        return _cost(e.a, env) + _cost(e.b, env) + live[..., None] * _unit(_ADD, d)
    if isinstance(e, A.Mul):
        live = ~(zmask(e.a, env) | zmask(e.b, env))
        return _cost(e.a, env) + _cost(e.b, env) + live[..., None] * _unit(_MUL, d)
    if isinstance(e, A.Call):
        out = _unit(_CALL, d)
        for a in e.args:
            out = out + _cost(a, env)
        return out
    if isinstance(e, A.Pair):
        return _cost(e.a, env) + _cost(e.b, env)
    if isinstance(e, (A.Proj, A.Access)):
        return _cost(e.e, env)
    if isinstance(e, A.Gen):
        n = extent(e.size, env)
        return _reduce(_cost(e.body, env.bind_index(e.idx, n)), [n], d)
    if isinstance(e, A.Sum):
        binders, body = _sum_nest(e)
        inner, sizes = env, []
        for idx, size in binders:
            sizes.append(extent(size, inner))
            inner = inner.bind_index(idx, sizes[-1])
        total = _reduce(_cost(body, inner), sizes, d)
        live = _reduce((~zmask(body, inner)).astype(np.int64)[..., None], sizes, d)[..., 0]
        return total + np.maximum(live - 1, 0)[..., None] * _unit(_ADD, d)
    if isinstance(e, A.Iverson):
        mask = eval_pred(e.pred, env)
        if not mask.any():
            return _zeros(d)             # short-circuit: e is never evaluated
        return np.where(mask[..., None], _cost(e.e, env), 0)
    if isinstance(e, A.Let):
        out = _zeros(d)
        while isinstance(e, A.Let):    # statement chains iteratively: no deep recursion
            out = out + _cost(e.value, env)
            e = e.body
        return out + _cost(e, env)
    if isinstance(e, A.DefCall):
        raise TLError(f"call of {e.name!r} must be inlined (elaborate) before costing", e.loc)
    raise TLError(f"cannot cost {type(e).__name__}")


def _as_cost(v: np.ndarray, per_binding: dict[str, Cost] | None = None) -> Cost:
    adds, muls, calls = (int(x) for x in v.reshape(3))
    return Cost.of(adds, muls, calls, per_binding)


def cost_expr(e: A.Expr, env: Env | Mapping[str, Any]) -> Cost:
    """Cost of `e` in a depth-0 environment (an `Env`, or a mapping of size names to ints
    and relation names to boolean masks)."""
    if not isinstance(env, Env):
        env = Env(sizes={k: int(v) for k, v in env.items() if not isinstance(v, np.ndarray)},
                  rels={k: v for k, v in env.items() if isinstance(v, np.ndarray)})
    if env.depth != 0:
        raise TLError("cost_expr needs a depth-0 environment")
    return _as_cost(_cost(e, env))


def _statements(d: A.Def) -> tuple[list[tuple[str, A.Expr]], A.Expr]:
    stmts: list[tuple[str, A.Expr]] = []
    body = d.body
    while isinstance(body, A.Let):
        stmts.append((body.name, body.value))
        body = body.body
    return stmts, body


def cost_def(d: A.Def, args: Mapping[str, Any]) -> Cost:
    """Exact cost of `d` for the given sizes and relations (value arguments are ignored).

    `per_binding` has one entry per top-level statement (a name bound twice gets `name#2`,
    ...) plus `"return"`, in program order; their totals add up to the whole cost.
    """
    env = bind_args(d, args, values=False)
    stmts, ret = _statements(d)
    per: dict[str, Cost] = {}
    total = _zeros(0)
    for name, value in stmts:
        c = _cost(value, env)
        key, k = name, 1
        while key in per:
            k += 1
            key = f"{name}#{k}"
        per[key] = _as_cost(c)
        total = total + c
    c = _cost(ret, env)
    per["return"] = _as_cost(c)
    return _as_cost(total + c, per)


# ---------------------------------------------------------------------------------------------
# Scalar reference (tests only): SPEC 3 transcribed one index point at a time.


def z_scalar(e: A.Expr, env: Mapping[str, Any]) -> bool:
    if isinstance(e, A.Const):
        return e.value == 0.0
    if isinstance(e, A.Iverson):
        return not eval_pred_scalar(e.pred, env) or z_scalar(e.e, env)
    if isinstance(e, A.Let):
        while isinstance(e, A.Let):
            e = e.body
        return z_scalar(e, env)
    if isinstance(e, A.Add):
        return z_scalar(e.a, env) and z_scalar(e.b, env)
    if isinstance(e, A.Mul):
        return z_scalar(e.a, env) or z_scalar(e.b, env)
    return False


def cost_scalar_reference(e: A.Expr, env: Mapping[str, Any]) -> tuple[int, int, int]:
    """(adds, muls, calls) of `e`; `env` maps sizes and indices to ints, relations to masks."""
    def add(*cs: tuple[int, int, int]) -> tuple[int, int, int]:
        return (sum(c[0] for c in cs), sum(c[1] for c in cs), sum(c[2] for c in cs))

    c = cost_scalar_reference
    if isinstance(e, (A.Var, A.Const)):
        return (0, 0, 0)
    if isinstance(e, A.Add):
        live = not (z_scalar(e.a, env) or z_scalar(e.b, env))
        return add(c(e.a, env), c(e.b, env), (int(live), 0, 0))
    if isinstance(e, A.Mul):
        live = not (z_scalar(e.a, env) or z_scalar(e.b, env))
        return add(c(e.a, env), c(e.b, env), (0, int(live), 0))
    if isinstance(e, A.Call):
        return add(*(c(a, env) for a in e.args), (0, 0, 1))
    if isinstance(e, A.Pair):
        return add(c(e.a, env), c(e.b, env))
    if isinstance(e, (A.Proj, A.Access)):
        return c(e.e, env)
    if isinstance(e, A.Gen):
        return add((0, 0, 0), *(c(e.body, {**env, e.idx: i})
                                for i in range(max(0, e.size.evaluate(env)))))
    if isinstance(e, A.Sum):
        binders, body = _sum_nest(e)
        out, live = (0, 0, 0), 0
        for point in _tuples(binders, env):
            out = add(out, c(body, point))
            live += not z_scalar(body, point)
        return add(out, (max(0, live - 1), 0, 0))
    if isinstance(e, A.Iverson):
        return c(e.e, env) if eval_pred_scalar(e.pred, env) else (0, 0, 0)
    if isinstance(e, A.Let):
        out = (0, 0, 0)
        while isinstance(e, A.Let):
            out = add(out, c(e.value, env))
            e = e.body
        return add(out, c(e, env))
    raise TLError(f"cannot cost {type(e).__name__}")


def _tuples(binders: list[tuple[str, A.Affine]], env: Mapping[str, Any]):
    """Every environment of the nest's index tuples (sizes may mention outer indices)."""
    if not binders:
        yield env
        return
    (idx, size), rest = binders[0], binders[1:]
    for i in range(max(0, size.evaluate(env))):
        yield from _tuples(rest, {**env, idx: i})

