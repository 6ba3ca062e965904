"""Exact cost formulas: the SPEC 3 cost of a program as a quasi-polynomial in its sizes.

`cost_formula(core, name, stage)` gives a `CostFormula`: adds, muls, calls and total, each a
`QuasiPolynomial` with exact rational coefficients (one polynomial per residue class of the
sizes modulo a period), valid on a stated domain (`N >= 1`).  Its `str()` is a Python
expression in the size names (`2*N**2 + N - 1`, `(N**2 + N % 2) // 2`).

How it is obtained (docs/cost-model.md, "Cost formulas", has the argument in full):

* Structure.  With sizes as parameters, the cost model counts lattice points of polyhedra
  cut out by the binder ranges and the affine brackets (the `max(0, m - 1)` of a sum nest is
  such a count plus the count of outer points whose nest is empty).  Such counting functions
  are piecewise quasi-polynomials of degree at most the number of counting binders in a nest
  (the dimension): for sizes past the constants of the program (`[j <= 2]`, `x[i + 2]`) the
  piece is one quasi-polynomial whose period divides the coefficients of the indices.
* Interpolation.  `degree_bound` (the nest depth of gen/sum binders with a non-constant
  extent), `period_bound` (lcm of the index coefficients in brackets and extents) and
  `threshold` (1 + the largest constant in a bracket or extent that mentions a variable) are
  read off the program.  Per residue class the formula is interpolated on a full tensor grid
  of `degree + 1` sizes per variable, all at least the threshold: a polynomial of that
  degree is determined by them, so under the structure above the formula is exact.
* Verification.  The formula is then checked against the cost model at further sizes
  (large, and with very unequal sizes, which is where a chamber boundary such as
  `min(N, K)` shows), and the domain is extended below the threshold one slab of sizes at a
  time while the formula still agrees on the whole slab.  Any disagreement is a `TLError`
  naming the sizes: a formula is never returned unchecked.

Programs with relation parameters have data-dependent costs and are refused.
"""
from __future__ import annotations

import itertools
import math
import random
import weakref
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.semantics.cost import Cost, cost_def
from tensorlang.syntax.errors import TLError

__all__ = ["QuasiPolynomial", "CostFormula", "cost_formula", "program_bounds",
           "CostFormulaError"]

Exps = tuple[int, ...]
Piece = dict[Exps, Fraction]
Number = int | Fraction


class CostFormulaError(TLError):
    """The cost of a program has no single formula (relations, or piecewise in the sizes)."""


# ---------------------------------------------------------------------------------------------
# Quasi-polynomials


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _clean(piece: Mapping[Exps, Fraction]) -> Piece:
    return {e: Fraction(c) for e, c in piece.items() if c != 0}


class QuasiPolynomial:
    """A function of integer sizes: one polynomial (exact `Fraction` coefficients) per residue
    class of the sizes modulo `periods`.  Immutable; `+ - *` with numbers and each other."""

    __slots__ = ("names", "periods", "_pieces")

    def __init__(self, names: Sequence[str], periods: Sequence[int],
                 pieces: Mapping[tuple[int, ...], Mapping[Exps, Any]], reduce: bool = True):
        self.names = tuple(names)
        self.periods = tuple(int(p) for p in periods)
        if len(self.periods) != len(self.names):
            raise ValueError("one period per size name")
        classes = list(itertools.product(*(range(p) for p in self.periods)))
        self._pieces = {r: _clean(pieces.get(r, {})) for r in classes}
        if reduce:
            self._reduce_periods()

    # -- construction ----------------------------------------------------------------------

    @staticmethod
    def constant(c: Number) -> "QuasiPolynomial":
        return QuasiPolynomial((), (), {(): {(): Fraction(c)}})

    @staticmethod
    def variable(name: str) -> "QuasiPolynomial":
        return QuasiPolynomial((name,), (1,), {(0,): {(1,): Fraction(1)}})

    def _reduce_periods(self) -> None:
        """The smallest periods: a variable's period shrinks to a divisor when the pieces
        repeat with it (so a polynomial is shown as one)."""
        for k in range(len(self.names)):
            p = self.periods[k]
            for q in sorted(d for d in range(1, p) if p % d == 0):
                if all(self._pieces[r] == self._pieces[r[:k] + (r[k] % q,) + r[k + 1:]]
                       for r in self._pieces):
                    periods = self.periods[:k] + (q,) + self.periods[k + 1:]
                    self._pieces = {r: c for r, c in self._pieces.items() if r[k] < q}
                    self.periods = periods
                    break

    def pieces(self) -> dict[tuple[int, ...], Piece]:
        """residue class (one residue per size, modulo `periods`) -> {exponents: coeff}."""
        return {r: dict(c) for r, c in self._pieces.items()}

    def lift(self, names: Sequence[str], periods: Sequence[int]) -> "QuasiPolynomial":
        """The same function over `names` (a superset) with `periods` (multiples)."""
        names = tuple(names)
        pos = [names.index(n) for n in self.names]
        out = {}
        for r in itertools.product(*(range(p) for p in periods)):
            old = tuple(r[i] % self.periods[k] for k, i in enumerate(pos))
            piece = {}
            for e, c in self._pieces[old].items():
                full = [0] * len(names)
                for k, i in enumerate(pos):
                    full[i] = e[k]
                piece[tuple(full)] = c
            out[r] = piece
        return QuasiPolynomial(names, periods, out, reduce=False)

    def _common(self, other: "QuasiPolynomial") -> tuple["QuasiPolynomial", "QuasiPolynomial"]:
        names = self.names + tuple(n for n in other.names if n not in self.names)
        per = {n: 1 for n in names}
        for q in (self, other):
            for n, p in zip(q.names, q.periods):
                per[n] = _lcm(per[n], p)
        periods = tuple(per[n] for n in names)
        return self.lift(names, periods), other.lift(names, periods)

    # -- arithmetic ------------------------------------------------------------------------

    @staticmethod
    def _as_qp(x: Any) -> "QuasiPolynomial":
        if isinstance(x, QuasiPolynomial):
            return x
        if isinstance(x, (int, Fraction)):
            return QuasiPolynomial.constant(x)
        return NotImplemented

    def __add__(self, other: Any) -> "QuasiPolynomial":
        o = self._as_qp(other)
        if o is NotImplemented:
            return NotImplemented
        a, b = self._common(o)
        out = {}
        for r in a._pieces:
            piece = dict(a._pieces[r])
            for e, c in b._pieces[r].items():
                piece[e] = piece.get(e, Fraction(0)) + c
            out[r] = piece
        return QuasiPolynomial(a.names, a.periods, out)

    __radd__ = __add__

    def __neg__(self) -> "QuasiPolynomial":
        return self * -1

    def __sub__(self, other: Any) -> "QuasiPolynomial":
        o = self._as_qp(other)
        return NotImplemented if o is NotImplemented else self + (-o)

    def __rsub__(self, other: Any) -> "QuasiPolynomial":
        o = self._as_qp(other)
        return NotImplemented if o is NotImplemented else o + (-self)

    def __mul__(self, other: Any) -> "QuasiPolynomial":
        o = self._as_qp(other)
        if o is NotImplemented:
            return NotImplemented
        a, b = self._common(o)
        out = {}
        for r in a._pieces:
            piece: Piece = {}
            for e1, c1 in a._pieces[r].items():
                for e2, c2 in b._pieces[r].items():
                    e = tuple(x + y for x, y in zip(e1, e2))
                    piece[e] = piece.get(e, Fraction(0)) + c1 * c2
            out[r] = piece
        return QuasiPolynomial(a.names, a.periods, out)

    __rmul__ = __mul__

    def __pow__(self, k: int) -> "QuasiPolynomial":
        if not isinstance(k, int) or k < 0:
            raise TLError(f"a cost formula can only be raised to a natural power, not {k!r}")
        out = QuasiPolynomial.constant(1)
        for _ in range(k):
            out = out * self
        return out

    def __eq__(self, other: object) -> bool:
        o = self._as_qp(other) if isinstance(other, (int, Fraction, QuasiPolynomial)) else None
        if o is None:
            return NotImplemented
        d = self - o
        return all(not p for p in d._pieces.values())

    def __hash__(self) -> int:
        return hash(str(self))

    # -- evaluation ------------------------------------------------------------------------

    def evaluate(self, **sizes: int) -> Number:
        """The exact value (an int when it is integral) at the given sizes."""
        missing = [n for n in self.names if n not in sizes]
        if missing:
            raise TLError(f"cost formula needs the size{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(missing)}")
        vals = [int(sizes[n]) for n in self.names]
        piece = self._pieces[tuple(v % p for v, p in zip(vals, self.periods))]
        total = Fraction(0)
        for e, c in piece.items():
            term = c
            for v, k in zip(vals, e):
                term *= v ** k
            total += term
        return int(total) if total.denominator == 1 else total

    __call__ = evaluate

    # -- shape -----------------------------------------------------------------------------

    def is_polynomial(self) -> bool:
        return all(p == 1 for p in self.periods)

    def degree(self) -> int:
        """Total degree (-1 for the zero function)."""
        return max((sum(e) for p in self._pieces.values() for e in p), default=-1)

    def leading_term(self) -> "QuasiPolynomial":
        """The terms of the highest total degree."""
        d = self.degree()
        return QuasiPolynomial(self.names, self.periods, {
            r: {e: c for e, c in p.items() if sum(e) == d} for r, p in self._pieces.items()})

    def constant_ratio(self, other: "QuasiPolynomial") -> Fraction | None:
        """c when self == c * other (other not zero), else None."""
        a, b = self._common(other)
        ratio: Fraction | None = None
        for r in a._pieces:
            pa, pb = a._pieces[r], b._pieces[r]
            if set(pa) != set(pb):
                return None
            for e, c in pb.items():
                q = pa[e] / c
                if ratio is None:
                    ratio = q
                elif q != ratio:
                    return None
        return ratio

    def coefficient(self, exps: Mapping[str, int]) -> Fraction | None:
        """The coefficient of one monomial when it does not depend on residues (else None)."""
        e = tuple(int(exps.get(n, 0)) for n in self.names)
        values = {p.get(e, Fraction(0)) for p in self._pieces.values()}
        return values.pop() if len(values) == 1 else None

    # -- proofs ----------------------------------------------------------------------------

    def nonnegative_from(self, lower: Mapping[str, int]) -> bool:
        """True when proved >= 0 at every integer point with size n >= lower[n].

        Per residue class r, write each size as s = s0 + P*u (s0 the least value >= lower
        in the class, u >= 0 an integer); if every coefficient of the resulting polynomial in
        u is >= 0 the piece is non-negative.  A sufficient condition: False means "not
        proved", not "negative somewhere"."""
        for r, piece in self._pieces.items():
            subst: list[QuasiPolynomial] = []
            for k, name in enumerate(self.names):
                lo, p = int(lower.get(name, 0)), self.periods[k]
                s0 = lo + (r[k] - lo) % p
                subst.append(QuasiPolynomial.variable("u_" + name) * p + s0)
            acc = QuasiPolynomial.constant(0)
            for e, c in piece.items():
                term = QuasiPolynomial.constant(c)
                for q, k in zip(subst, e):
                    term = term * q ** k
                acc = acc + term
            if any(c < 0 for c in acc._pieces[next(iter(acc._pieces))].values()):
                return False
        return True

    # -- printing --------------------------------------------------------------------------

    def __str__(self) -> str:
        """A Python expression in the size names, exact under integer arithmetic."""
        q = 1
        for p in self._pieces.values():
            for c in p.values():
                q = _lcm(q, c.denominator)
        monos = sorted({e for p in self._pieces.values() for e in p},
                       key=lambda e: (-sum(e), tuple(-x for x in e)))
        terms: list[tuple[str, str]] = []  # (sign, text)
        for e in monos:
            coeffs = {r: int(p.get(e, Fraction(0)) * q) for r, p in self._pieces.items()}
            mono = "*".join(n if k == 1 else f"{n}**{k}"
                            for n, k in zip(self.names, e) if k)
            values = set(coeffs.values())
            if len(values) == 1:
                c = values.pop()
                if c == 0:
                    continue
                mag = abs(c)
                text = mono if mag == 1 and mono else (
                    f"{mag}*{mono}" if mono else str(mag))
                terms.append(("-" if c < 0 else "+", text))
            else:
                coef = self._periodic_text(coeffs)
                if " + " in coef or " - " in coef:
                    coef = f"({coef})"
                terms.append(("+", f"{coef}*{mono}" if mono else coef))
        if not terms:
            return "0"
        out = ("-" if terms[0][0] == "-" else "") + terms[0][1]
        for sign, text in terms[1:]:
            out += f" {sign} {text}"
        if q == 1:
            return out
        return f"({out}) {'//' if self.is_integer_valued() else '/'} {q}"

    def _periodic_text(self, coeffs: Mapping[tuple[int, ...], int]) -> str:
        """A coefficient that depends on residues, with `%`."""
        dep = [k for k in range(len(self.names)) if self.periods[k] > 1 and any(
            coeffs[r] != coeffs[r[:k] + (0,) + r[k + 1:]] for r in coeffs)]
        if len(dep) == 1:
            k = dep[0]
            name, p = self.names[k], self.periods[k]
            base = next(iter(coeffs))
            vals = [coeffs[base[:k] + (i,) + base[k + 1:]] for i in range(p)]
            step = vals[1] - vals[0]
            if all(vals[i] == vals[0] + step * i for i in range(p)):
                mod = f"({name} % {p})"
                tail = mod if abs(step) == 1 else f"{abs(step)}*{mod}"
                if vals[0] == 0:
                    return tail if step > 0 else f"-{tail}"
                return f"{vals[0]} {'+' if step > 0 else '-'} {tail}"
        seen: dict[tuple[int, ...], int] = {}
        for r, c in coeffs.items():
            seen[tuple(r[k] for k in dep)] = c
        counts: dict[int, int] = {}
        for c in seen.values():
            counts[c] = counts.get(c, 0) + 1
        base_value = max(counts, key=lambda c: (counts[c], c == seen[min(seen)]))
        out = str(base_value) if base_value else ""
        for key, c in sorted(seen.items()):
            delta = c - base_value
            if delta == 0:
                continue
            cond = "*".join(f"({self.names[k]} % {self.periods[k]} == {v})"
                            for k, v in zip(dep, key))
            term = cond if abs(delta) == 1 else f"{abs(delta)}*{cond}"
            if out:
                out += f" {'+' if delta > 0 else '-'} {term}"
            else:
                out = term if delta > 0 else f"-{term}"
        return out

    def is_integer_valued(self) -> bool:
        """Whether every value at integer sizes is an integer (then `str()` uses `//`).

        Checked per residue class on degree + 1 consecutive points of the class per size: a
        polynomial integral there is integral on the whole class (Newton form)."""
        for r, piece in self._pieces.items():
            degs = [max((e[k] for e in piece), default=0) for k in range(len(self.names))]
            axes = [[r[k] + self.periods[k] * j for j in range(degs[k] + 1)]
                    for k in range(len(self.names))]
            for point in itertools.product(*axes):
                if isinstance(self.evaluate(**dict(zip(self.names, point))), Fraction):
                    return False
        return True

    def __repr__(self) -> str:
        return f"QuasiPolynomial({str(self)!r})"


# ---------------------------------------------------------------------------------------------
# Bounds read off the program


@dataclass(frozen=True)
class ProgramBounds:
    """What the fit needs to know about a program (see the module docstring)."""

    sizes: tuple[str, ...]
    degree: int      # nest depth of counting binders: bounds the total degree
    period: int      # lcm of index coefficients: the residue classes' period divides it
    threshold: int   # sizes from here on are past every constant of the program
    used: frozenset[str]  # the sizes the program mentions (others have degree 0)


def program_bounds(d: ast.Def) -> ProgramBounds:
    """Degree, period and threshold bounds of the costed program `d` (a core Def)."""
    sizes = tuple(p.name for p in d.params if isinstance(p.type, ast.TSize))
    rels = [p.name for p in d.params if isinstance(p.type, ast.TRel)]
    if rels:
        raise CostFormulaError(
            f"the cost of {d.name} depends on the relation{'s' if len(rels) > 1 else ''} "
            f"{', '.join(rels)} (their number of members), not only on sizes: it has no "
            f"formula in the sizes; use {d.name}.cost(...) with concrete relations", d.loc)
    size_set = frozenset(sizes)
    state = {"degree": 0, "period": 1, "threshold": 1, "used": set()}

    def affine(a: ast.Affine, indices: frozenset[str], counts: bool) -> None:
        state["used"].update(a.vars() & size_set)
        if not a.vars():
            return
        for name, c in a.terms:
            if name in indices:
                state["period"] = _lcm(state["period"], abs(c))
        if counts:
            state["threshold"] = max(state["threshold"], abs(a.const) + 1)

    def pred(p: ast.Pred, indices: frozenset[str]) -> None:
        if isinstance(p, ast.Cmp):
            affine(p.lhs - p.rhs, indices, True)
        elif isinstance(p, (ast.And, ast.Or)):
            pred(p.a, indices)
            pred(p.b, indices)
        elif isinstance(p, ast.Exists):
            affine(p.size, indices, True)
            pred(p.body, indices | {p.idx})
        elif isinstance(p, ast.RelCall):
            for a in p.args:
                affine(a, indices, False)

    def expr(e: ast.Node, indices: frozenset[str], depth: int) -> None:
        stack: list[tuple[ast.Node, frozenset[str], int]] = [(e, indices, depth)]
        while stack:
            n, idx, dep = stack.pop()
            if isinstance(n, (ast.Gen, ast.Sum, ast.Extremum)):
                affine(n.size, idx, True)
                dep += 0 if n.size.is_const() else 1
                state["degree"] = max(state["degree"], dep)
                stack.append((n.body, idx | {n.idx}, dep))
                continue
            if isinstance(n, ast.Iverson):
                pred(n.pred, idx)
                stack.append((n.e, idx, dep))
                continue
            if isinstance(n, ast.Access):
                for a in n.idx:
                    state["used"].update(a.vars() & size_set)
            for c in ast.children(n):
                if isinstance(c, ast.Expr):
                    stack.append((c, idx, dep))

    expr(d.body, frozenset(), 0)
    return ProgramBounds(sizes, state["degree"], state["period"], state["threshold"],
                         frozenset(state["used"]))


# ---------------------------------------------------------------------------------------------
# Cost formulas


COMPONENTS = ("adds", "muls", "calls")
MAX_SAMPLES = 20000  # interpolation points: beyond this the fit is refused (too slow)
MAX_POINTS = 10 ** 7  # index points of one nest at the largest fitting size (memory, time)


@dataclass(frozen=True)
class CostFormula:
    """The exact cost of a function as formulas in its sizes, valid on `domain`.

    `str()` is the total as a Python expression; `adds`, `muls`, `calls`, `total` are
    `QuasiPolynomial`s.  `domain` maps each size to the least value the formula holds from
    (every size at least its bound); `evaluate(**sizes)` gives a `Cost`."""

    name: str
    stage: str
    sizes: tuple[str, ...]
    adds: QuasiPolynomial
    muls: QuasiPolynomial
    calls: QuasiPolynomial
    domain: Mapping[str, int]
    bounds: ProgramBounds
    checked_points: int

    @property
    def total(self) -> QuasiPolynomial:
        return self.adds + self.muls + self.calls

    def component(self, name: str) -> QuasiPolynomial:
        """`adds`, `muls`, `calls`, or `total` (also called `cost`)."""
        if name in ("total", "cost"):
            return self.total
        if name in COMPONENTS:
            return getattr(self, name)
        raise TLError(f"no cost component '{name}' (adds, muls, calls, total)")

    def __str__(self) -> str:
        return str(self.total)

    def evaluate(self, **sizes: int) -> Cost:
        vals = {n: sizes[n] for n in self.sizes if n in sizes}
        return Cost.of(*(int(getattr(self, c).evaluate(**vals)) for c in COMPONENTS))

    def holds_at(self, **sizes: int) -> bool:
        """Whether the sizes are in the formula's domain."""
        return all(int(sizes[n]) >= lo for n, lo in self.domain.items())

    def domain_text(self) -> str:
        parts = [f"{n} >= {lo}" for n, lo in self.domain.items() if lo > 0]
        return ", ".join(parts) if parts else "all sizes"

    def leading_term(self) -> QuasiPolynomial:
        return self.total.leading_term()

    def describe(self) -> str:
        """Several lines: each component, the leading term, the domain."""
        lines = [f"cost formula of {self.name} at stage {self.stage} "
                 f"(for {self.domain_text()}):"]
        for c in (*COMPONENTS, "total"):
            lines.append(f"  {c:<6} = {self.component(c)}")
        lines.append(f"  leading term: {self.leading_term()}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<CostFormula {self.name}: {self} for {self.domain_text()}>"


def _interpolate_1d(nodes: Sequence[int], values: Sequence[Fraction]) -> list[Fraction]:
    """Monomial coefficients of the polynomial through (nodes, values) (Newton form)."""
    n = len(nodes)
    coef = list(values)
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) / (nodes[i] - nodes[i - j])
    out = [Fraction(0)] * n
    for i in range(n - 1, -1, -1):  # Horner on the Newton basis
        shifted = [Fraction(0)] + out[:-1]
        out = [s - nodes[i] * o for s, o in zip(shifted, out)]
        out[0] += coef[i]
    return out


def _fit_class(grid: Sequence[Sequence[int]], values: Mapping[tuple[int, ...], int]) -> Piece:
    """Tensor-product interpolation: coefficients by exponent tuple."""
    # keyed by grid positions per axis; each pass turns one axis's positions into exponents
    table: dict[tuple[int, ...], Fraction] = {k: Fraction(v) for k, v in values.items()}
    for axis in range(len(grid)):
        nodes = grid[axis]
        new: dict[tuple[int, ...], Fraction] = {}
        rest_keys = {key[:axis] + key[axis + 1:] for key in table}
        for rest in rest_keys:
            vals = [table[rest[:axis] + (i,) + rest[axis:]] for i in range(len(nodes))]
            for e, c in enumerate(_interpolate_1d(nodes, vals)):
                new[rest[:axis] + (e,) + rest[axis:]] = c
        table = new
    return _clean(table)


def _grid_axes(t: int, residue: Sequence[int],
               periods: Sequence[int], degrees: Sequence[int]) -> list[list[int]]:
    axes = []
    for r, p, dgr in zip(residue, periods, degrees):
        first = t + (r - t) % p
        axes.append([first + p * j for j in range(dgr + 1)])
    return axes


_MEMO: "weakref.WeakKeyDictionary[ast.Def, dict[str, CostFormula]]" = \
    weakref.WeakKeyDictionary()


def cost_formula(core: ast.Def, name: str | None = None, stage: str = "parsed",
                 seed: int = 0) -> CostFormula:
    """The exact cost formula of the core program `core` (the program at `stage`).

    Raises `CostFormulaError` for programs with relations, and when the cost is not one
    quasi-polynomial on a domain of the form `size >= bound` (the verification found sizes
    where the fitted formula disagrees with the cost model: the message names them)."""
    memo = _MEMO.setdefault(core, {})
    key = f"{name}|{stage}|{seed}"
    if key not in memo:
        memo[key] = _build(core, name or core.name, stage, seed)
    return memo[key]


def _build(core: ast.Def, name: str, stage: str, seed: int) -> CostFormula:
    b = program_bounds(core)
    cache: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def cost_at(point: tuple[int, ...]) -> tuple[int, int, int]:
        if point not in cache:
            c = cost_def(core, dict(zip(b.sizes, point)))
            cache[point] = (c.adds, c.muls, c.calls)
        return cache[point]

    degrees = [b.degree if n in b.used else 0 for n in b.sizes]
    periods = [b.period if n in b.used else 1 for n in b.sizes]
    t = b.threshold
    top = t + (b.degree + 1) * b.period
    if top ** b.degree > MAX_POINTS:
        raise CostFormulaError(
            f"the cost formula of {name} would be fitted at sizes up to {top} (its brackets "
            f"have constants up to {t - 1}), where a nest of depth {b.degree} has more than "
            f"{MAX_POINTS} index points: use .cost(...) at concrete sizes")
    needed = math.prod(p * (dg + 1) for p, dg in zip(periods, degrees))
    if needed > MAX_SAMPLES:
        raise CostFormulaError(
            f"the cost formula of {name} would need the cost at {needed} sizes (degree "
            f"{b.degree}, period {b.period}, {len(b.sizes)} sizes; at most {MAX_SAMPLES}): "
            f"use .cost(...) at concrete sizes")
    formulas = _fit(b, t, periods, degrees, cost_at)
    rng = random.Random(seed)
    _verify(b, name, t, periods, degrees, formulas, cost_at, rng)
    domain = _extend_domain(b, t, periods, degrees, formulas, cost_at)
    adds, muls, calls = formulas
    return CostFormula(name, stage, b.sizes, adds, muls, calls, domain, b, len(cache))


def _fit(b: ProgramBounds, t: int, periods: Sequence[int], degrees: Sequence[int],
         cost_at: Callable[[tuple[int, ...]], tuple[int, int, int]]
         ) -> tuple[QuasiPolynomial, ...]:
    pieces: list[dict[tuple[int, ...], Piece]] = [{}, {}, {}]
    for residue in itertools.product(*(range(p) for p in periods)):
        axes = _grid_axes(t, residue, periods, degrees)
        values: list[dict[tuple[int, ...], int]] = [{}, {}, {}]
        for pos in itertools.product(*(range(len(a)) for a in axes)):
            c = cost_at(tuple(a[i] for a, i in zip(axes, pos)))
            for k in range(3):
                values[k][pos] = c[k]
        for k in range(3):
            pieces[k][residue] = _fit_class(axes, values[k])
    return tuple(QuasiPolynomial(b.sizes, periods, pieces[k]) for k in range(3))


def _mismatch(b: ProgramBounds, name: str, point: tuple[int, ...],
              formulas: Sequence[QuasiPolynomial], actual: tuple[int, int, int]) -> str | None:
    sizes = dict(zip(b.sizes, point))
    got = tuple(f.evaluate(**sizes) for f in formulas)
    if got == actual:
        return None
    where = ", ".join(f"{n}={v}" for n, v in sizes.items())
    return (f"the cost of {name} is not one quasi-polynomial in its sizes for sizes >= "
            f"{b.threshold} (it is piecewise, e.g. min(N, K), where sizes compare with each "
            f"other): the formula fitted gives (adds, muls, calls) = {got} at {where} but the "
            f"cost model gives {actual}; use .cost(...) at concrete sizes")


def _verify(b: ProgramBounds, name: str, t: int, periods: Sequence[int],
            degrees: Sequence[int], formulas: Sequence[QuasiPolynomial],
            cost_at: Callable[[tuple[int, ...]], tuple[int, int, int]],
            rng: random.Random) -> None:
    """Check the fit at sizes it was not fitted on: one point past the grid per class, random
    larger points, and points where one size is much larger than the others."""
    k = len(b.sizes)
    if k == 0:
        return
    top = [t + (dg + 1) * p for dg, p in zip(degrees, periods)]
    points: set[tuple[int, ...]] = set()
    for residue in itertools.product(*(range(p) for p in periods)):
        axes = _grid_axes(t, residue, periods, degrees)
        points.add(tuple(a[-1] + p for a, p in zip(axes, periods)))
        points.add(tuple(a[-1] + p * rng.randint(1, 6) for a, p in zip(axes, periods)))
    for _ in range(6):
        points.add(tuple(rng.randint(t, hi + 12) for hi in top))
    if k > 1:
        for big in range(k):  # unequal sizes: where chamber boundaries (min(N, K)) show
            points.add(tuple(t + 3 * (hi + 4) if i == big else t + (i % 2)
                             for i, hi in enumerate(top)))
            points.add(tuple(t if i == big else t + 2 * (hi + 3) for i, hi in enumerate(top)))
    for point in sorted(points):
        msg = _mismatch(b, name, point, formulas, cost_at(point))
        if msg is not None:
            raise CostFormulaError(msg)


def _extend_domain(b: ProgramBounds, t: int, periods: Sequence[int], degrees: Sequence[int],
                   formulas: Sequence[QuasiPolynomial],
                   cost_at: Callable[[tuple[int, ...]], tuple[int, int, int]]
                   ) -> dict[str, int]:
    """Lower each size's bound below the threshold while the formula agrees on the whole
    slab of the box [low, top]^k at the new value (top: the end of the fitting grid, so each
    slab holds a full interpolation grid of the other sizes)."""
    k = len(b.sizes)
    low = [t] * k
    top = [t + (dg + 1) * p - 1 for dg, p in zip(degrees, periods)]
    for i in range(k):
        while low[i] > 0:
            v = low[i] - 1
            ranges = [range(low[j], top[j] + 1) if j != i else range(v, v + 1)
                      for j in range(k)]
            if any(_mismatch(b, "", p, formulas, cost_at(p)) is not None
                   for p in itertools.product(*ranges)):
                break
            low[i] = v
    return dict(zip(b.sizes, low))
