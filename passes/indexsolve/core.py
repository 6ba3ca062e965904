"""Shared machinery of the index solver: predicate atoms, exact division, solving affine
equality systems (seed 004 section 4.1 with the divisibility guard SPEC 6 requires), and the
parametrisation of a box of index variables cut by equalities (unit substitution first,
Smith normal form for what remains) that `eliminate_sum` and `loop_nest` both build on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd
from typing import Iterable, Mapping


from tensorlang.ir.ast import (
    Affine, And, Cmp, Exists, Or, Pred, PTrue, fresh, free_names, pred_and,
)

from .fm import content
from .snf import rank_of, smith_normal_form_full

# ---------------------------------------------------------------------------------------------
# Predicates


def eq_pred(e: Affine) -> Pred:
    """`e == 0` written with positive terms left, negative ones right (`K == L`)."""
    pos = Affine(tuple((n, c) for n, c in e.terms if c > 0), 0)
    neg = Affine(tuple((n, -c) for n, c in e.terms if c < 0), 0)
    if not pos.terms:
        pos, neg = neg, pos
        return Cmp("==", pos, neg + e.const)
    return Cmp("==", pos, neg - e.const)


@dataclass
class Atoms:
    """A conjunction split for the solver: equalities `e == 0` and inequalities `a >= 0` that
    mention the solved variables, and everything else (kept as predicates)."""

    eqs: list[Affine] = field(default_factory=list)
    ineqs: list[Affine] = field(default_factory=list)
    outer: list[Pred] = field(default_factory=list)     # no solved variable in it
    residual: list[Pred] = field(default_factory=list)  # relation calls, or, exists, ...


def split_atoms(atoms: Iterable[Pred], solved: set[str]) -> Atoms:
    out = Atoms()
    for a in atoms:
        touches = bool(free_names(a) & solved)
        if isinstance(a, Cmp) and touches:
            if a.op == "==":
                out.eqs.append(a.lhs - a.rhs)
            elif a.op == "<=":
                out.ineqs.append(a.rhs - a.lhs)
            else:
                out.ineqs.append(a.rhs - a.lhs - 1)
        elif touches:
            out.residual.append(a)
        else:
            out.outer.append(a)
    return out


# ---------------------------------------------------------------------------------------------
# Exact division and divisibility


@dataclass(frozen=True)
class Quotient:
    """A fresh integer `name == expr / modulus`, defined exactly when `modulus | expr`."""

    name: str
    modulus: int
    expr: Affine

    def divides(self, env: Mapping[str, int]) -> bool:
        return self.expr.evaluate(env) % self.modulus == 0

    def value(self, env: Mapping[str, int]) -> int:
        return self.expr.evaluate(env) // self.modulus

    def pred(self, avoid: Iterable[str] = (),
             bounds: Mapping[str, Affine] | None = None) -> Pred:
        return divisibility_pred(self.modulus, self.expr, avoid, bounds)


def divisibility_pred(m: int, e: Affine, avoid: Iterable[str] = (),
                      bounds: Mapping[str, Affine] | None = None) -> Pred:
    """`m | e` as a core predicate; `exists` ranges over 0..n-1, so the witness is offset.

    With `bounds` (each parameter p of e lies in `0..bounds[p]-1`, bounds affine in sizes),
    `exists t:hi-lo+1. e == m*(t + lo)` where `lo <= 0 <= hi` bound e (interval arithmetic),
    hence also e/m: the size is affine in sizes, as the type checker and the vectorised
    interpreter want.  Without bounds the sign is split and the witness range is e itself:
    `(0 <= e and exists t:e+1. e == m*t) or (e < 0 and exists t:1-e. -e == m*t)`.
    """
    if m == 1:
        return PTrue()
    t = fresh("t", set(avoid) | e.vars())
    tv = Affine.var(t)
    if bounds is not None and e.vars() <= set(bounds):
        lo, hi = Affine.lit(-abs(e.const)), Affine.lit(abs(e.const))
        for name, c in e.terms:
            top = bounds[name] - 1
            if c > 0:
                hi = hi + top * c
            else:
                lo = lo + top * c
        return Exists(t, hi - lo + 1, Cmp("==", e, (tv + lo) * m))
    pos = And(Cmp("<=", Affine.lit(0), e), Exists(t, e + 1, Cmp("==", e, tv * m)))
    neg = And(Cmp("<", e, Affine.lit(0)), Exists(t, 1 - e, Cmp("==", -e, tv * m)))
    return Or(pos, neg)


def exact_divide(m: int, e: Affine, avoid: set[str]) -> Affine | Quotient | None:
    """`e / m` (m > 0): an Affine when it always divides, a Quotient when it depends on the
    parameters, None when it never divides (gcd argument)."""
    g = gcd(m, content(e))
    if e.const % g:
        return None
    m2 = m // g
    e2 = Affine(tuple((n, c // g) for n, c in e.terms), e.const // g)
    if m2 == 1:
        return e2
    name = fresh("q", avoid)
    avoid.add(name)
    return Quotient(name, m2, e2)


# ---------------------------------------------------------------------------------------------
# Equality systems


@dataclass(frozen=True)
class Solution:
    """All integer solutions of an affine equality system.

    `values[u]` is affine in the parameters, the quotient names and the kernel names; the
    solutions are exactly these values for every integer choice of the kernel coordinates,
    provided `guard` holds (then each quotient divides exactly).
    """

    unknowns: tuple[str, ...]
    values: Mapping[str, Affine]
    kernel: tuple[str, ...]
    quotients: tuple[Quotient, ...]
    equalities: tuple[Affine, ...]   # cokernel conditions, each `== 0`, over the parameters
    guard: Pred

    def instantiate(self, env: Mapping[str, int], kernel: Mapping[str, int]) -> dict[str, int]:
        """A concrete solution (the guard must hold under `env`)."""
        full = dict(env)
        full.update(kernel)
        for q in self.quotients:
            full[q.name] = q.value(env)
        return {u: self.values[u].evaluate(full) for u in self.unknowns}


def _split_system(eqs: list[Affine], unknowns: list[str]) -> tuple[list[list[int]], list[Affine]]:
    """`A u = b`: coefficient rows and right-hand sides (affine in the parameters)."""
    zero = {u: 0 for u in unknowns}
    return ([[d.coeff(u) for u in unknowns] for d in eqs], [-(d.subst(zero)) for d in eqs])


@dataclass
class SNFSolve:
    """Raw result of solving `A u = b` by Smith normal form (used by all front ends)."""

    y: list[Affine | Quotient | None]   # per SNF coordinate: rank rows solved, kernel None
    V: list[list[int]]
    Vinv: list[list[int]]
    cokernel: list[Affine]
    feasible: bool


def snf_solve(eqs: list[Affine], unknowns: list[str], avoid: set[str]) -> SNFSolve:
    A, b = _split_system(eqs, unknowns)
    S, U, V, Vinv = smith_normal_form_full(A, len(unknowns))
    R = rank_of(S)
    bp = [sum((b[k] * U[r][k] for k in range(len(b))), Affine.lit(0)) for r in range(len(b))]
    cokernel: list[Affine] = []
    for e in bp[R:]:
        norm = _normalize_eq(e)
        if norm is False:
            return SNFSolve([], V, Vinv, [], False)
        if isinstance(norm, Affine):
            cokernel.append(norm)
    y: list[Affine | Quotient | None] = []
    for r in range(R):
        d = exact_divide(S[r][r], bp[r], avoid)
        if d is None:
            return SNFSolve([], V, Vinv, [], False)
        y.append(d)
    y += [None] * (len(unknowns) - R)
    return SNFSolve(y, V, Vinv, cokernel, True)


def _normalize_eq(e: Affine) -> Affine | bool:
    """`e == 0` divided by its content; True / False when constant or never satisfiable."""
    if e.is_const():
        return e.const == 0
    g = content(e)
    if e.const % g:
        return False
    return Affine(tuple((n, c // g) for n, c in e.terms), e.const // g)


def solve_equalities(eqs: list[tuple[Affine, Affine]], unknowns: list[str],
                     bounds: Mapping[str, Affine] | None = None) -> Solution | None:
    """Solve `lhs == rhs` (affine in `unknowns` and in parameters) over the integers.

    Smith normal form `S = U A V`: with `u = V y` the system reads `S y = U b`.  Rows past the
    rank give the cokernel guard (`(U b)_r == 0`); rank rows need `s_r | (U b)_r`, and
    `y_r = (U b)_r / s_r` is affine when the division is exact for every parameter value and
    a fresh quotient variable otherwise; the remaining `y` are the kernel coordinates.
    None when the system has no solution for any parameter value.  `bounds` (parameter ->
    size, the parameter lying in `0..size-1`) selects the size-bounded divisibility encoding
    (see `divisibility_pred`).
    """
    avoid = set(unknowns)
    for lhs, rhs in eqs:
        avoid |= lhs.vars() | rhs.vars()
    res = snf_solve([lhs - rhs for lhs, rhs in eqs], list(unknowns), avoid)
    if not res.feasible:
        return None
    coords: list[Affine] = []
    kernel: list[str] = []
    quotients: list[Quotient] = []
    for yr in res.y:
        if yr is None:
            z = fresh("z", avoid)
            avoid.add(z)
            kernel.append(z)
            coords.append(Affine.var(z))
        elif isinstance(yr, Quotient):
            quotients.append(yr)
            coords.append(Affine.var(yr.name))
        else:
            coords.append(yr)
    values = {u: sum((coords[r] * res.V[i][r] for r in range(len(coords))), Affine.lit(0))
              for i, u in enumerate(unknowns)}
    guard = pred_and(*(eq_pred(e) for e in res.cokernel),
                     *(q.pred(avoid, bounds) for q in quotients))
    return Solution(tuple(unknowns), values, tuple(kernel), tuple(quotients),
                    tuple(res.cokernel), guard)


# ---------------------------------------------------------------------------------------------
# Parametrisation of a box cut by equalities


@dataclass
class Parametrization:
    """`vars` in their box, cut by equalities, rewritten over free coordinates.

    `order`: the free coordinates, outermost first (kept original variables and fresh
    kernel / quotient coordinates); `values`: every eliminated variable as an affine
    expression of coordinates, parameters and `quotients`; `ineqs`: all constraints (boxes of
    every original variable included) over coordinates and parameters; `pinned`: per
    quotient coordinate (only with `quotient_coords`) its equality `e == 0`; `kept_eqs`:
    equalities left alone because solving them would not remove a variable.
    """

    order: list[str]
    sizes: dict[str, Affine]
    values: dict[str, Affine]
    ineqs: list[Affine]
    param_eqs: list[Affine]
    quotients: list[Quotient] = field(default_factory=list)
    pinned: dict[str, Affine] = field(default_factory=dict)
    kept_eqs: list[Affine] = field(default_factory=list)
    feasible: bool = True


def _substitute(par: Parametrization, m: Mapping[str, Affine]) -> None:
    par.values = {k: v.subst(m) for k, v in par.values.items()}
    par.ineqs = [a.subst(m) for a in par.ineqs]
    par.sizes = {k: v.subst(m) for k, v in par.sizes.items()}
    par.pinned = {k: v.subst(m) for k, v in par.pinned.items()}


def upper_bounds(vars_sizes: list[tuple[str, Affine]]) -> dict[str, Affine]:
    """Parameter-only upper bounds of each variable over its (nonempty) box, by interval
    arithmetic: a size may mention earlier variables, which lie in `0..ub`."""
    ub: dict[str, Affine] = {}
    for v, n in vars_sizes:
        top = Affine((), n.const - 1)
        for name, c in n.terms:
            if name in ub:
                top = top + (ub[name] * c if c > 0 else 0)
            elif any(name == w for w, _ in vars_sizes):
                raise ValueError(f"size of {v!r} mentions the inner variable {name!r}")
            else:
                top = top + Affine.var(name) * c
        ub[v] = top
    return ub


def parametrize(vars_sizes: list[tuple[str, Affine]], eqs: list[Affine], ineqs: list[Affine],
                avoid: set[str], *, quotient_coords: bool) -> Parametrization:
    """Eliminate variables from `eqs` (each `== 0`): unit coefficients by substitution (the
    innermost such variable first), the rest by Smith normal form.

    `quotient_coords` (for sums): a non-exact quotient becomes a coordinate with a cover size
    and a pinned equality, and the SNF step is skipped (`kept_eqs`) unless it removes a
    variable; otherwise (for loop nests) quotients are parameters in `quotients`.
    """
    names = [v for v, _ in vars_sizes]
    par = Parametrization(list(names), dict(vars_sizes), {}, list(ineqs), [])
    for v, n in vars_sizes:
        par.ineqs += [Affine.var(v), n - 1 - Affine.var(v)]
    pending = _sort_eqs(par, eqs, set(names))
    while par.feasible and pending:
        pick = _unit_pick(pending, par.order)
        if pick is None:
            break
        eq, v = pick
        c = eq.coeff(v)
        val = (eq - Affine.var(v) * c) * (-c)
        par.order.remove(v)
        _substitute(par, {v: val})
        par.values[v] = val
        pending = _sort_eqs(par, [e.subst({v: val}) for e in pending if e is not eq],
                            set(par.order))
    if par.feasible and pending:
        _snf_step(par, pending, vars_sizes, avoid, quotient_coords)
    return par


def _sort_eqs(par: Parametrization, eqs: list[Affine], active: set[str]) -> list[Affine]:
    """Equalities still involving active variables; the others become parameter guards."""
    out = []
    for e in eqs:
        if e.vars() & active:
            out.append(e)
            continue
        norm = _normalize_eq(e)
        if norm is False:
            par.feasible = False
        elif isinstance(norm, Affine):
            par.param_eqs.append(norm)
    return out


def _unit_pick(eqs: list[Affine], order: list[str]) -> tuple[Affine, str] | None:
    for v in reversed(order):
        for e in eqs:
            if abs(e.coeff(v)) == 1:
                return e, v
    return None


def _snf_step(par: Parametrization, eqs: list[Affine], vars_sizes: list[tuple[str, Affine]],
              avoid: set[str], quotient_coords: bool) -> None:
    X = [v for v in par.order if any(e.coeff(v) for e in eqs)]
    res = snf_solve(eqs, X, avoid)
    if not res.feasible:
        par.feasible = False
        return
    pinned_rows = sum(isinstance(y, Quotient) for y in res.y)
    kernel_rows = sum(y is None for y in res.y)
    if quotient_coords and pinned_rows + kernel_rows >= len(X):
        par.kept_eqs = eqs  # no variable would disappear: leave the equalities as guards
        return
    par.param_eqs += res.cokernel
    ub = upper_bounds(vars_sizes) if quotient_coords else {}
    sizes0 = dict(vars_sizes)
    coords: list[Affine] = []
    new_names: list[str] = []
    kept: set[str] = set()
    for r, yr in enumerate(res.y):
        if isinstance(yr, Affine):
            coords.append(yr)
            continue
        if isinstance(yr, Quotient) and not quotient_coords:
            par.quotients.append(yr)
            coords.append(Affine.var(yr.name))
            continue
        row = res.Vinv[r]
        sign = 1
        unit = [i for i, w in enumerate(row) if w]
        if len(unit) == 1 and row[unit[0]] == 1 and not (
                quotient_coords and sizes0[X[unit[0]]].vars() & set(sizes0)):
            # the coordinate is an original variable: keep its name (and its sum range)
            name, lo, size = X[unit[0]], Affine.lit(0), sizes0[X[unit[0]]]
            kept.add(name)
        else:
            name = fresh("z" if yr is None else "q", avoid)
            avoid.add(name)
            # Orient the coordinate so it grows with the original variables: the cover then
            # starts at 0 for the usual non-negative rows (nicer indices, same meaning).
            if sum(row) < 0:
                sign = -1
            lo, size = (_cover([sign * w for w in row], X, ub) if quotient_coords
                        else (Affine.lit(0), None))
        coord = (Affine.var(name) + lo) * sign
        coords.append(coord)
        new_names.append(name)
        if size is not None:
            par.sizes[name] = size
        if isinstance(yr, Quotient):
            par.pinned[name] = coord * yr.modulus - yr.expr
    values = {x: sum((coords[r] * res.V[i][r] for r in range(len(coords))), Affine.lit(0))
              for i, x in enumerate(X) if x not in kept}
    pos = max(par.order.index(x) for x in X)
    order = [v for v in par.order[:pos + 1] if v not in X] + new_names
    order += [v for v in par.order[pos + 1:] if v not in X]
    par.order = order
    _substitute(par, values)
    par.values.update(values)


def _cover(row: list[int], X: list[str], ub: Mapping[str, Affine]) -> tuple[Affine, Affine]:
    """Offset and size of `sum_i row[i] * X_i` over the box `0 <= X_i <= ub_i`."""
    lo, hi = Affine.lit(0), Affine.lit(0)
    for w, x in zip(row, X):
        if w > 0:
            hi = hi + ub[x] * w
        elif w < 0:
            lo = lo + ub[x] * w
    return lo, hi - lo + 1
