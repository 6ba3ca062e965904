"""The index solver (SPEC 6, seed 004 sections 4-5): integer linear algebra on affine
indices.

* `smith_normal_form(M)` -> `(S, U, V)` with `S = U M V`;
* `solve_equalities(eqs, unknowns)` -> `Solution` (guard, particular solution, kernel);
* `fourier_motzkin(constraints, var_order)` -> `BoundNest` (ceil/floor loop bounds);
* `eliminate_sum(e)`: a `sum` nest against the affine equalities of its Iverson guards, so
  that an adjoint is a gather; `eliminate_sums(e)` applies it everywhere in an expression;
* `solve_for(pred, var)`: a unit-coefficient equality of a conjunction, solved for `var`;
* `loop_nest(vars_sizes, pred)` -> `LoopNest`: the loops a code generator emits.

The helpers live in the modules `snf` (Smith normal form), `fm` (Fourier-Motzkin, bound
printing), `core` (equality systems, parametrisation) and `loops` (loop nests); this
package exports the public API (sum elimination and `solve_for` are defined here).  See
docs/indexsolve.md.  May import `tensorlang.ir` and `tensorlang.semantics.grid` only (no
other pass): the derivative passes, the simplifier and the backends build on it.
"""
from __future__ import annotations

from tensorlang.ir.ast import (
    Affine, Cmp, Const, Expr, Iverson, Node, Pred, PTrue, Sum, binder_name, fresh, free_names,
    map_fields, pred_and, rename_index, subst, walk,
)
from tensorlang.ir.canon import conjuncts
from tensorlang.semantics.grid import holds_at as eval_pred

from .core import (
    Parametrization, Quotient, Solution, divisibility_pred, eq_pred, parametrize,
    solve_equalities, split_atoms, upper_bounds,
)
from .fm import (
    Bound, BoundNest, LoopBound, affine_to_python, ceil_div, constraint_to_pred,
    constraints_pred, floor_div, fourier_motzkin,
)
from .snf import determinant, ext_gcd, smith_normal_form
from .loops import Level, LoopNest, loop_nest, pred_to_python

__all__ = [
    "smith_normal_form", "ext_gcd", "determinant",
    "Solution", "Quotient", "solve_equalities", "divisibility_pred",
    "Bound", "LoopBound", "BoundNest", "fourier_motzkin", "ceil_div", "floor_div",
    "affine_to_python", "constraint_to_pred", "constraints_pred",
    "eliminate_sum", "eliminate_sums", "solve_for",
    "Level", "LoopNest", "loop_nest", "pred_to_python", "eval_pred", "all_names",
]


def all_names(e: Node) -> set[str]:
    """Every identifier in `e`, free or bound (fresh names must avoid all of them)."""
    out: set[str] = set(free_names(e))
    for n in walk(e):
        b = binder_name(n)
        if b is not None:
            out.add(b)
    return out


# ---------------------------------------------------------------------------------------------
# Sum elimination


def _collect(e: Expr, avoid: set[str]) -> tuple[list[tuple[str, Affine]], list[Pred], Expr]:
    """The Sum/Iverson spine of `e`: summed variables with sizes, guard atoms, body.

    An inner binder whose name is already in use by the spine (a variable or a free name of
    an atom or size) is renamed, so the joint nest means the same as the nested one.
    """
    vars_sizes: list[tuple[str, Affine]] = []
    atoms: list[Pred] = []
    seen: set[str] = set()
    cur = e
    while isinstance(cur, (Sum, Iverson)):
        if isinstance(cur, Iverson):
            atoms += conjuncts(cur.pred)
            seen |= free_names(cur.pred)
            cur = cur.e
            continue
        if cur.idx in seen:
            new = fresh(cur.idx, avoid | seen)
            avoid.add(new)
            cur = Sum(new, cur.size, rename_index(cur.body, cur.idx, new), loc=cur.loc)
        vars_sizes.append((cur.idx, cur.size))
        seen |= {cur.idx} | cur.size.vars()
        cur = cur.body
    return vars_sizes, atoms, cur


def eliminate_sum(e: Expr) -> Expr:
    """Remove the summed variables of the Sum/Iverson spine of `e` that its affine equalities
    determine (SPEC 6 steps 1-3).

    Unit coefficients are substituted (`sum j:n. [j == a and q] * b` ->
    `[0 <= a and a < n and q{j:=a}] * b{j:=a}`); general coefficients go through the Smith
    normal form, with the cokernel equalities as a guard and the remaining sums running over
    kernel coordinates (and over a quotient coordinate pinned by `s*q == e` where an exact
    division is needed) with cover sizes; the Fourier-Motzkin bounds of the remaining sums
    form one Iverson bracket around the body, the parameter-only guard one bracket outside
    the sums.  `Const(0.0)` when the equalities never hold; `e` itself when no summed
    variable can be removed.
    """
    avoid = all_names(e)
    vars_sizes, atoms, body = _collect(e, avoid)
    names = {v for v, _ in vars_sizes}
    parts = split_atoms(atoms, names)
    if not vars_sizes or not parts.eqs:
        return e
    par = parametrize(vars_sizes, parts.eqs, parts.ineqs, avoid, quotient_coords=True)
    if not par.feasible:
        return Const(0.0)
    if len(par.order) == len(vars_sizes) and not par.values:
        return e  # nothing determined (e.g. only `2*i == K`): already as solved as it gets
    return _rebuild(par, vars_sizes, parts.outer, parts.residual, body)


def _rebuild(par: Parametrization, vars_sizes: list[tuple[str, Affine]], outer: list[Pred],
             residual: list[Pred], body: Expr) -> Expr:
    _scope_sizes(par, vars_sizes)
    nest = fourier_motzkin(par.ineqs, par.order)
    if not nest.feasible:
        return Const(0.0)
    depth = {v: k for k, v in enumerate(par.order)}
    level_atoms: list[list[Pred]] = [[] for _ in par.order]
    top: list[Pred] = list(outer) + [eq_pred(e) for e in par.param_eqs]
    top += [constraint_to_pred(a) for a in nest.guard]

    def place(p: Pred) -> None:
        ds = [depth[n] for n in free_names(p) if n in depth]
        (level_atoms[max(ds)] if ds else top).append(p)

    for k, lv in enumerate(nest.levels):
        implied = {Affine.var(lv.var), par.sizes[lv.var] - 1 - Affine.var(lv.var)}
        level_atoms[k] += [constraint_to_pred(a) for a in lv.constraints() if a not in implied]
        if lv.var in par.pinned:
            level_atoms[k].append(eq_pred(par.pinned[lv.var]))
    for eq in par.kept_eqs:
        place(eq_pred(eq))
    for p in residual:
        place(subst(p, par.values))
    out: Expr = subst(body, par.values) if par.values else body
    # One bracket innermost, outer levels' bounds first: brackets between the sums would
    # split the nest that SPEC 3 costs jointly (a sum of all-zero inner sums would count
    # additions the original nest does not).
    guard = pred_and(*(a for atoms in level_atoms for a in atoms))
    if not isinstance(guard, PTrue):
        out = Iverson(guard, out)
    for k in reversed(range(len(par.order))):
        out = Sum(par.order[k], par.sizes[par.order[k]], out)
    guard = pred_and(*top)
    return out if isinstance(guard, PTrue) else Iverson(guard, out)


def _scope_sizes(par: Parametrization, vars_sizes: list[tuple[str, Affine]]) -> None:
    """A kept sum whose size now mentions itself or an inner coordinate (`sum j:i+1` after
    `i := -2*j`) runs over a parameter-only cover instead; its exact box constraint is
    already among the inequalities and becomes a guard."""
    ub: dict[str, Affine] | None = None
    for pos, v in enumerate(par.order):
        if par.sizes[v].vars() & set(par.order[pos:]):
            ub = ub if ub is not None else upper_bounds(vars_sizes)
            par.sizes[v] = ub[v] + 1


def eliminate_sums(e: Expr) -> Expr:
    """`eliminate_sum` at every sum of `e` (an expression or a whole `Def`), innermost
    first."""
    memo: dict[int, Node] = {}

    def go(n: Node) -> Node:
        if isinstance(n, (Affine, Pred)):
            return n
        hit = memo.get(id(n))
        if hit is not None:
            return hit
        out = map_fields(n, go)
        if isinstance(out, Sum):
            out = eliminate_sum(out)
        memo[id(n)] = out
        return out

    return go(e)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Predicate-level helper


def solve_for(pred: Pred, var: str) -> tuple[Affine, Pred] | None:
    """`(a, rest)` with `pred <=> var == a and rest` and `var` free in neither, from an
    equality of the top-level conjunction in which `var` has coefficient +-1; else None."""
    atoms = conjuncts(pred)
    for k, atom in enumerate(atoms):
        if not (isinstance(atom, Cmp) and atom.op == "=="):
            continue
        d = atom.lhs - atom.rhs
        c = d.coeff(var)
        if abs(c) != 1:
            continue
        val = (d - Affine.var(var) * c) * (-c)
        rest = pred_and(*(subst(a, {var: val}) for i, a in enumerate(atoms) if i != k))
        return val, rest
    return None

