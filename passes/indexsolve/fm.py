"""Fourier-Motzkin elimination into loop bounds (seed 004 section 4.2, Algorithm 3).

A constraint is an `Affine` `a` meaning `a >= 0` over integer variables.  Eliminating the
variables innermost first gives, for each variable `v`, lower bounds `v >= ceil(e / c)` and
upper bounds `v <= floor(e / c)` (`c > 0`) in terms of the variables outside it, plus a
guard on the remaining (outer) parameters.

Exactness over the integers: level `v` keeps *every* constraint of its stage that mentions
`v`, in particular every original constraint whose innermost variable is `v`.  So the
integer points a bound nest enumerates are exactly the integer points of the original
system; FM's projection is only rational, which merely means an inner loop can be empty for
some outer point (never that it visits a point it should not).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Callable, Iterable, Iterator, Mapping

from tensorlang.ir.ast import Affine, Cmp, Pred, pred_and

NameFn = Callable[[str], str]


def _ident(name: str) -> str:
    return name


def ceil_div(a: int, c: int) -> int:
    return -((-a) // c)


def floor_div(a: int, c: int) -> int:
    return a // c


# ---------------------------------------------------------------------------------------------
# Constraints


def content(a: Affine) -> int:
    """gcd of the variable coefficients (0 for a constant)."""
    g = 0
    for _, c in a.terms:
        g = gcd(g, c)
    return g


def normalize(a: Affine) -> Affine | bool:
    """Tighten `a >= 0` for integer points: divide by the coefficient gcd, floor the constant.

    Returns True / False for constant constraints.
    """
    if a.is_const():
        return a.const >= 0
    g = content(a)
    if g == 1:
        return a
    return Affine(tuple((n, c // g) for n, c in a.terms), a.const // g)


def prune(cons: Iterable[Affine]) -> list[Affine] | None:
    """Normalized, de-duplicated constraints; of two with the same linear part the tighter
    one survives.  None when a constant constraint is violated."""
    best: dict[tuple, int] = {}
    for a in cons:
        n = normalize(a)
        if n is True:
            continue
        if n is False:
            return None
        assert isinstance(n, Affine)
        best[n.terms] = min(best.get(n.terms, n.const), n.const)
    return [Affine(terms, k) for terms, k in sorted(best.items())]


def constraint_to_pred(a: Affine) -> Pred:
    """`a >= 0` as a readable comparison (`j < n` rather than `n - 1 - j >= 0`)."""
    pos = Affine(tuple((n, c) for n, c in a.terms if c > 0), 0)
    neg = Affine(tuple((n, -c) for n, c in a.terms if c < 0), 0)
    k = a.const
    if k < 0:  # neg <= pos + k  <=>  neg < pos + k + 1, and the constant moves toward 0
        return Cmp("<", neg, pos + (k + 1))
    return Cmp("<=", neg, pos + k)


def constraints_pred(cons: Iterable[Affine]) -> Pred:
    return pred_and(*(constraint_to_pred(a) for a in cons))


# ---------------------------------------------------------------------------------------------
# Bounds


@dataclass(frozen=True)
class Bound:
    """`ceil(expr / div)` as a lower bound or `floor(expr / div)` as an upper bound."""

    expr: Affine
    div: int = 1

    def lower(self, env: Mapping[str, int]) -> int:
        return ceil_div(self.expr.evaluate(env), self.div)

    def upper(self, env: Mapping[str, int]) -> int:
        return floor_div(self.expr.evaluate(env), self.div)

    def lower_py(self, name: NameFn = _ident) -> str:
        if self.div == 1:
            return affine_to_python(self.expr, name)
        # (a + c - 1) // c == ceil(a / c) for every integer a when c > 0 (floor division).
        return f"({affine_to_python(self.expr + (self.div - 1), name)}) // {self.div}"

    def upper_py(self, name: NameFn = _ident) -> str:
        if self.div == 1:
            return affine_to_python(self.expr, name)
        return f"({affine_to_python(self.expr, name)}) // {self.div}"


@dataclass(frozen=True)
class LoopBound:
    """`max(ceil(l.expr / l.div)) <= var <= min(floor(u.expr / u.div))`."""

    var: str
    lower: tuple[Bound, ...]
    upper: tuple[Bound, ...]

    def range(self, env: Mapping[str, int]) -> range:
        if not self.lower or not self.upper:
            raise ValueError(f"index variable {self.var!r} is unbounded")
        lo = max(b.lower(env) for b in self.lower)
        hi = min(b.upper(env) for b in self.upper)
        return range(lo, hi + 1)

    def constraints(self) -> list[Affine]:
        """The bounds as constraints `a >= 0` (`c*v - e >= 0`, `e - c*v >= 0`)."""
        v = Affine.var(self.var)
        return ([v * b.div - b.expr for b in self.lower]
                + [b.expr - v * b.div for b in self.upper])

    def lower_py(self, name: NameFn = _ident) -> str:
        return _fold("max", [b.lower_py(name) for b in self.lower])

    def upper_py(self, name: NameFn = _ident) -> str:
        return _fold("min", [b.upper_py(name) for b in self.upper])

    def range_py(self, name: NameFn = _ident) -> str:
        """`range(lo, hi + 1)` as Python source (valid Numba)."""
        if not self.lower or not self.upper:
            raise ValueError(f"index variable {self.var!r} is unbounded")
        if len(self.upper) == 1 and self.upper[0].div == 1:
            stop = affine_to_python(self.upper[0].expr + 1, name)
        else:
            stop = f"{self.upper_py(name)} + 1"
        return f"range({self.lower_py(name)}, {stop})"


def _fold(fn: str, parts: list[str]) -> str:
    """`max(a, max(b, c))`: two-argument calls only, which every backend accepts."""
    out = parts[-1]
    for p in reversed(parts[:-1]):
        out = f"{fn}({p}, {out})"
    return out


@dataclass(frozen=True)
class BoundNest:
    """Loop bounds, outermost first, and the guard (`a >= 0` each) on outer parameters."""

    levels: tuple[LoopBound, ...]
    guard: tuple[Affine, ...]
    feasible: bool = True  # False: a constant constraint is violated, the nest is empty

    def __iter__(self) -> Iterator[LoopBound]:
        return iter(self.levels)

    def __len__(self) -> int:
        return len(self.levels)

    def __getitem__(self, k: int) -> LoopBound:
        return self.levels[k]

    def guard_pred(self) -> Pred:
        if not self.feasible:
            return Cmp("<", Affine.lit(0), Affine.lit(0))
        return constraints_pred(self.guard)

    def guard_holds(self, env: Mapping[str, int]) -> bool:
        return self.feasible and all(a.evaluate(env) >= 0 for a in self.guard)

    def points(self, env: Mapping[str, int]) -> Iterator[dict[str, int]]:
        """Every integer point of the nest under the parameter values `env`."""
        if not self.guard_holds(env):
            return
        yield from self._points(0, dict(env))

    def _points(self, k: int, env: dict[str, int]) -> Iterator[dict[str, int]]:
        if k == len(self.levels):
            yield {lv.var: env[lv.var] for lv in self.levels}
            return
        lv = self.levels[k]
        for v in lv.range(env):
            env[lv.var] = v
            yield from self._points(k + 1, env)
        env.pop(lv.var, None)


def _sorted(bounds: Iterable[Bound]) -> tuple[Bound, ...]:
    """Simplest bounds first (`max(0, K - 4)`), deterministically."""
    return tuple(sorted(bounds, key=lambda b: (len(b.expr.terms), b.expr.terms,
                                               b.expr.const, b.div)))


def fourier_motzkin(constraints: Iterable[Affine], var_order: list[str]) -> BoundNest:
    """Bounds for `var_order` (outermost first) from the constraints `a >= 0`.

    Variables not in `var_order` are parameters.  A variable bounded on one side only gets an
    empty bound list there (enumerating such a nest raises).
    """
    cons = prune(constraints)
    if cons is None:
        return BoundNest(tuple(LoopBound(v, (), ()) for v in var_order), (), feasible=False)
    levels: list[LoopBound] = []
    for v in reversed(var_order):
        lower, upper, rest = [], [], []
        for a in cons:
            c = a.coeff(v)
            (lower if c > 0 else upper if c < 0 else rest).append(a)
        levels.append(LoopBound(
            v,
            _sorted(Bound(Affine.var(v) * a.coeff(v) - a, a.coeff(v)) for a in lower),
            _sorted(Bound(a - Affine.var(v) * a.coeff(v), -a.coeff(v)) for a in upper)))
        # c1 v + r1 >= 0 and -c2 v + r2 >= 0 combine into c2 r1 + c1 r2 >= 0.
        rest += [lo * (-up.coeff(v)) + up * lo.coeff(v) for lo in lower for up in upper]
        pruned = prune(rest)
        if pruned is None:
            return BoundNest(tuple(LoopBound(u, (), ()) for u in var_order), (), feasible=False)
        cons = pruned
    levels.reverse()
    return BoundNest(_drop_dominated(levels), tuple(cons))


def _drop_dominated(levels: list[LoopBound]) -> tuple[LoopBound, ...]:
    """Remove bounds another bound of the same level always beats, given that outer loop
    variables with a constant lower bound >= 0 are non-negative (`max(0, i + 1)` ->
    `i + 1` inside `for i in range(0, ...)`)."""
    nonneg: set[str] = set()
    out: list[LoopBound] = []
    for lv in levels:
        def ge(a: Bound, b: Bound) -> bool:  # a.expr/a.div >= b.expr/b.div at every point
            d = a.expr * b.div - b.expr * a.div
            return d.const >= 0 and all(c > 0 and n in nonneg for n, c in d.terms)

        lower = _keep(lv.lower, lambda kept, b: ge(kept, b))
        upper = _keep(lv.upper, lambda kept, b: ge(b, kept))
        out.append(LoopBound(lv.var, lower, upper))
        if any(b.expr.is_const() and b.expr.const >= 0 for b in lower):
            nonneg.add(lv.var)
    return tuple(out)


def _keep(bounds: tuple[Bound, ...], beats: Callable[[Bound, Bound], bool]) -> tuple[Bound, ...]:
    dropped: set[int] = set()
    for k, b in enumerate(bounds):
        if any(o != k and o not in dropped and beats(bounds[o], b) for o in range(len(bounds))):
            dropped.add(k)
    return tuple(b for k, b in enumerate(bounds) if k not in dropped)


# ---------------------------------------------------------------------------------------------
# Printing


def affine_to_python(a: Affine, name: NameFn = _ident) -> str:
    """`2*i - j + 3`, `-k + 1`, `0`: a Python (and Numba) integer expression."""
    out = ""
    for n, c in a.terms:
        mag = abs(c)
        term = name(n) if mag == 1 else f"{mag}*{name(n)}"
        if not out:
            out = term if c > 0 else f"-{term}"
        else:
            out += f" + {term}" if c > 0 else f" - {term}"
    if not out:
        return str(a.const)
    if a.const > 0:
        out += f" + {a.const}"
    elif a.const < 0:
        out += f" - {-a.const}"
    return out
