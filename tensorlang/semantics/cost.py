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
    C(max i:n. e)   = sum over i of C(e) + max(0, n - 1)               (calls; also min,
        SPEC 12: every point takes part, structural zeros included)
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
that index), and Z is a boolean array of batch shape.  The scalar cross-check (SPEC 3
transcribed point by point) is in tests/scalar_reference.py.

Index arithmetic, predicates and point counting are `grid`'s.  `prim_cost` is the cost of
one Tensor-SSA primitive, the only SSA cost (`cost_program` adds it up per statement).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.semantics import grid
from tensorlang.semantics.boxes import box_cost
from tensorlang.semantics.grid import Box, sum_nest
from tensorlang.semantics.interp import bind_args
from tensorlang.syntax.errors import TLError

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


def zmask(e: ast.Expr, env: Box) -> np.ndarray:
    """SPEC 3's Z(e) at every batch point (boolean array of batch shape)."""
    d = env.depth
    if isinstance(e, ast.Const):
        return np.full((1,) * d, e.value == 0.0)
    if isinstance(e, ast.Iverson):
        return ~grid.pred(e.pred, env) | zmask(e.e, env)
    if isinstance(e, ast.Let):
        while isinstance(e, ast.Let):    # predicates only read indices, sizes and relations
            e = e.body
        return zmask(e, env)
    if isinstance(e, ast.Add):
        return zmask(e.a, env) & zmask(e.b, env)
    if isinstance(e, ast.Mul):
        return zmask(e.a, env) | zmask(e.b, env)
    return np.zeros((1,) * d, dtype=bool)


def _cost(e: ast.Expr, env: Box) -> np.ndarray:
    d = env.depth
    if isinstance(e, (ast.Var, ast.Const, ast.IndexValue)):  # reads are free (SPEC 3)
        return _zeros(d)
    if isinstance(e, ast.Add):
        live = ~(zmask(e.a, env) | zmask(e.b, env))
        return _cost(e.a, env) + _cost(e.b, env) + live[..., None] * _unit(_ADD, d)
    if isinstance(e, ast.Mul):
        live = ~(zmask(e.a, env) | zmask(e.b, env))
        return _cost(e.a, env) + _cost(e.b, env) + live[..., None] * _unit(_MUL, d)
    if isinstance(e, ast.Call):
        out = _unit(_CALL, d)
        for a in e.args:
            out = out + _cost(a, env)
        return out
    if isinstance(e, ast.Pair):
        return _cost(e.a, env) + _cost(e.b, env)
    if isinstance(e, (ast.Proj, ast.Access)):
        return _cost(e.e, env)
    if isinstance(e, ast.Gen):
        inner = env.bind_index(e.idx, grid.extent(e.size, env))
        return grid.reduce_axes(_cost(e.body, inner), inner, d)
    if isinstance(e, ast.Sum):
        binders, body = sum_nest(e)
        inner, in_range = env, np.ones((1,) * d, dtype=bool)
        for k, (idx, size) in enumerate(binders):
            n = grid.extent(size, inner)
            later = {q for q, _ in binders[k:]}
            quotient = grid.pinned_quotient(idx, later, body, inner) if n > 0 else None
            if quotient is None:
                inner = inner.bind_index(idx, n)
            else:     # one live value of idx per point (grid.pinned_quotient)
                in_range = grid.to_depth(in_range, inner.depth) & \
                    grid.to_depth((quotient >= 0) & (quotient < n), inner.depth)
                inner = inner.bind_pinned(idx, quotient)
        live = grid.to_depth(in_range, inner.depth)
        adds = grid.sum_additions(~zmask(body, inner) & live, inner, d)
        return grid.reduce_axes(np.where(live[..., None], _cost(body, inner), 0), inner, d) \
            + adds[..., None] * _unit(_ADD, d)
    if isinstance(e, ast.Extremum):
        n = grid.extent(e.size, env)
        inner = env.bind_index(e.idx, n)
        return grid.reduce_axes(_cost(e.body, inner), inner, d) + \
            max(0, n - 1) * _unit(_CALL, d)
    if isinstance(e, ast.Iverson):
        mask = grid.pred(e.pred, env)
        if not mask.any():
            return _zeros(d)             # short-circuit: e is never evaluated
        return np.where(mask[..., None], _cost(e.e, env), 0)
    if isinstance(e, ast.Let):
        out = _zeros(d)
        while isinstance(e, ast.Let):    # statement chains iteratively: no deep recursion
            out = out + _cost(e.value, env)
            e = e.body
        return out + _cost(e, env)
    if isinstance(e, ast.Box):
        shapes = [tuple(grid.extent(a, env) for a in s) for s in e.shapes()]
        return np.array(box_cost(e.fn, e.part, shapes), dtype=np.int64).reshape((1,) * d + (3,))
    if isinstance(e, ast.DefCall):
        raise TLError(f"call of {e.name!r} must be inlined (elaborate) before costing", e.loc)
    raise TLError(f"cannot cost {type(e).__name__}")


def _as_cost(v: np.ndarray, per_binding: dict[str, Cost] | None = None) -> Cost:
    adds, muls, calls = (int(x) for x in v.reshape(3))
    return Cost.of(adds, muls, calls, per_binding)


def cost_expr(e: ast.Expr, env: Box | Mapping[str, Any]) -> Cost:
    """Cost of `e` in a depth-0 environment (a `grid.Box`, or a mapping of size names to ints
    and relation names to boolean masks)."""
    if not isinstance(env, Box):
        env = Box(sizes={k: int(v) for k, v in env.items() if not isinstance(v, np.ndarray)},
                  rels={k: v for k, v in env.items() if isinstance(v, np.ndarray)})
    if env.depth != 0:
        raise TLError("cost_expr needs a depth-0 environment")
    return _as_cost(_cost(e, env))


def _statements(d: ast.Def) -> tuple[list[tuple[str, ast.Expr]], ast.Expr]:
    stmts: list[tuple[str, ast.Expr]] = []
    body = d.body
    while isinstance(body, ast.Let):
        stmts.append((body.name, body.value))
        body = body.body
    return stmts, body


def cost_def(d: ast.Def, args: Mapping[str, Any]) -> Cost:
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
# Tensor SSA: the cost of each primitive (SPEC 5), equal to the SPEC 3 cost of its core form


def prim_cost(rhs: tssa.Rhs, env: Box) -> tuple[int, int, int]:
    """(adds, muls, calls) of one right-hand side at the sizes and relations of `env` (a
    depth-0 box).  Equal to `cost_expr(tssa.rhs_to_expr(rhs), env)`: an add costs one
    addition where its mask and both supports hold, a map one call where its mask holds, a
    contraction its multiplications at every live (I, J) point and `max(0, m - 1)` additions
    per output point (m = live J points)."""
    if isinstance(rhs, (tssa.Input, tssa.ConstRhs, tssa.IndexRhs)):  # reads are free
        return (0, 0, 0)
    if isinstance(rhs, tssa.BoxRhs):
        return box_cost(rhs.fn, rhs.part,
                        [tuple(grid.extent(a, env) for a in s) for s in rhs.arg_shapes()])
    box = env.bind_indices(zip(rhs.gen_names(), (grid.extent(d, env) for d in rhs.dims)))
    if isinstance(rhs, tssa.AddRhs):
        live = grid.pred(rhs.pred, box)
        for support in rhs.supports:
            live = live & grid.pred(support, box)
        return (grid.total(grid.count(live, box), box), 0, 0)
    if isinstance(rhs, tssa.MapRhs):
        return (0, 0, grid.total(grid.count(rhs.pred, box), box))
    if isinstance(rhs, tssa.ExtremeRhs):
        n = grid.extent(rhs.sdims[0], box)
        return (0, 0, grid.total(grid.count(rhs.pred, box), box) * max(0, n - 1))
    first = box.depth
    box = box.bind_indices(zip(rhs.sum_names(), (grid.extent(d, box) for d in rhs.sdims)))
    live = grid.pred(rhs.pred, box)
    muls = grid.total(grid.count(live, box), box) * (len(rhs.operands) - 1 + (rhs.coeff != 1.0))
    adds = grid.total(grid.sum_additions(live, box, first), box) if rhs.sdims else 0
    return (adds, muls, 0)


@dataclass(frozen=True)
class SSACost:
    """SPEC 3 counts of an SSA program; `per_stmt[var] = (adds, muls, calls)`."""

    adds: int
    muls: int
    calls: int
    per_stmt: dict[str, tuple[int, int, int]]

    @property
    def total(self) -> int:
        return self.adds + self.muls + self.calls


def cost_program(p: tssa.Program, args: Mapping[str, Any]) -> SSACost:
    """The exact SPEC 3 cost of an SSA program (equal to `cost_def(tssa.to_core(p), args)`),
    per statement; value arguments in `args` are ignored."""
    env = bind_args(p, {k: v for k, v in args.items()
                        if k in {q.name for q in p.params}}, values=False)
    per = {s.var: prim_cost(s.rhs, env) for s in p.stmts}
    return SSACost(sum(c[0] for c in per.values()), sum(c[1] for c in per.values()),
                   sum(c[2] for c in per.values()), per)


def extreme_points(p: tssa.Program, args: Mapping[str, Any]) -> int:
    """E(p): the points the max/min reductions of an SSA program visit (live output points
    times the reduced extent), the measure of the per-reduction term in SPEC 6's bounds
    (`tensorlang.semantics.bounds`)."""
    stmts = [s for s in p.stmts if isinstance(s.rhs, tssa.ExtremeRhs)]
    if not stmts:
        return 0
    env = bind_args(p, {k: v for k, v in args.items()
                        if k in {q.name for q in p.params}}, values=False)
    total = 0
    for s in stmts:
        box = env.bind_indices(zip(s.rhs.gen_names(), (grid.extent(d, env) for d in s.rhs.dims)))
        total += grid.total(grid.count(s.rhs.pred, box), box) * grid.extent(s.rhs.sdims[0], box)
    return int(total)
