"""Cost contracts: `requires cost <= BOUND` on a def or a derived def (docs/testing.md).

    def g = grad(f, x) requires cost <= 4 * cost(f) + N
    def f(N: size, x: R[N]) -> R requires muls <= N: ...

The measure is `cost` (the total), `adds`, `muls` or `calls` of the function as it will run;
BOUND is an expression in integer (or decimal) constants, the function's size names,
`+ - *`, `**` with a natural exponent, and `cost(g)` / `adds(g)` / `muls(g)` / `calls(g)` of
other functions of the module (as they will run).

`check_module` decides each contract:

1. Proof by formulas.  With the exact cost formulas (semantics/cost_formula.py) of the
   function and of every function the bound mentions, `BOUND - measure` is a quasi-polynomial;
   per residue class it is written in the shifted sizes `s = s0 + P*u` (u >= 0) and the
   contract is proved for every size in the formulas' domain when all its coefficients are
   >= 0.  Sizes below that domain are a finite set per size: they are checked with the cost
   model on the small-size grid (each size 0 .. max(domain + 4, 8)).
2. When the sign is not proved, the formula is evaluated on the grid of sizes domain ..
   domain + GRID_SPAN (at most GRID_POINTS points); a violation found there is confirmed with
   the cost model and reported.  None found: the contract is reported as checked on that grid,
   not proved.
3. Without formulas (relations: the cost depends on the relation's members; or a cost that
   is piecewise in the sizes) the cost model itself is checked on the grid of sizes
   0 .. GRID_SPAN (at most GRID_POINTS points), with, for relations, the full relation, the
   empty one and a random one (density 1/2, seed 0) at each size point.

A broken contract is a `ContractError` at the clause, with the sizes of a counterexample
(the smallest found) and both sides' values there.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics.cost_formula import CostFormulaError, QuasiPolynomial
from tensorlang.syntax import parser, printer
from tensorlang.syntax.errors import Loc, Source, TLError

__all__ = ["ContractError", "ContractResult", "Clause", "contracts_of", "check_contract",
           "check_function_contract", "check_module", "GRID_SPAN", "GRID_POINTS"]

GRID_SPAN = 24        # sizes checked: from the lower end up to this much more
GRID_POINTS = 2000    # at most this many size points per check (fewer per size when k > 1)
CONCRETE_POINTS = 300  # ... when every point costs a run of the cost model


class ContractError(TLError):
    """A contract that does not hold (or cannot be read): located at its clause."""

    kind = "contract error"

    def __init__(self, message: str, loc: Loc | None = None,
                 counterexample: Mapping[str, int] | None = None):
        super().__init__(message, loc)
        self.counterexample = dict(counterexample or {})


@dataclass(frozen=True)
class ContractResult:
    """How a contract was decided."""

    function: str
    clause: Clause
    proved_from: Mapping[str, int] | None   # proved for all sizes >= these (None: not proved)
    checked: str                            # what was checked on a grid, in words
    error: ContractError | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def contract(self) -> ast.Contract:
        return self.clause.contract

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        clause = f"{self.function}: requires {self.clause.text}"
        if self.error is not None:
            return f"{clause}: BROKEN"
        if self.proved_from is not None:
            dom = ", ".join(f"{n} >= {v}" for n, v in self.proved_from.items() if v > 0)
            where = f"for all sizes with {dom}" if dom else "for all sizes"
            tail = f"; {self.checked}" if self.checked else ""
            return f"{clause}: proved {where} (cost formulas){tail}"
        return f"{clause}: not proved; {self.checked}"


@dataclass(frozen=True)
class Clause:
    """A contract with the place and text it is written at.  (AST nodes are hash-consed:
    a `Contract` node's own `loc` is that of the first identical clause parsed anywhere, so
    the place is found again in each source.)"""

    contract: ast.Contract
    loc: Loc | None
    text: str

    @staticmethod
    def of(c: "ast.Contract | Clause") -> "Clause":
        if isinstance(c, Clause):
            return c
        return Clause(c, c.loc, f"{c.measure} {c.op} {printer.to_tl(c.bound)}")

    @property
    def measure(self) -> str:
        return self.contract.measure

    @property
    def op(self) -> str:
        return self.contract.op

    @property
    def bound(self) -> ast.Expr:
        return self.contract.bound


def _locate(text: str, filename: str, name: str, c: Clause) -> Clause:
    """The clause of def `name` in `text`: from `requires` to the end of its line (less a
    final `:` and comment)."""
    src = Source(filename, text)
    m = re.search(rf"^def\s+{re.escape(name)}\b", text, re.M)
    start = -1
    if m is not None:
        found = re.compile(r"\brequires\b").search(text, m.end())
        start = found.start() if found is not None else -1
    if start < 0:
        return Clause.of(c)
    stop = text.find("\n", start)
    line_text = text[start:stop if stop >= 0 else len(text)].split("#", 1)[0].rstrip()
    if line_text.endswith(":"):
        line_text = line_text[:-1].rstrip()
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    body = " ".join(line_text[len("requires"):].split())
    return Clause(c, Loc(src, line, col, col + len(line_text)), body)


def contracts_of(text: str, filename: str = "<input>") -> list[tuple[str, Clause]]:
    """(function name, clause) for every def of the source that has a contract, in order."""
    return [(d.name, _locate(text, filename, d.name, d.requires))
            for d in parser.parse_module(text, filename) if d.requires is not None]


# ---------------------------------------------------------------------------------------------
# The bound, over formulas or numbers


def _bound_value(c: Clause, sizes: Sequence[str], size: Callable[[str], Any],
                 measure_of: Callable[[str, str], Any]) -> Any:
    """BOUND evaluated with `size(name)` for size names and `measure_of(measure, fn)` for
    `cost(fn)` (quasi-polynomials or exact numbers alike)."""

    def go(e: ast.Node) -> Any:
        if isinstance(e, ast.Const):
            return Fraction(repr(e.value))
        if isinstance(e, ast.Var):
            if e.name not in sizes:
                raise ContractError(f"unknown name {e.name!r} in the contract: a bound may use "
                                    f"the sizes ({', '.join(sizes) or 'none'}) and cost(f)",
                                    c.loc)
            return size(e.name)
        if isinstance(e, ast.Add):
            return go(e.a) + go(e.b)
        if isinstance(e, ast.Mul):
            return go(e.a) * go(e.b)
        if isinstance(e, ast.Call) and e.fn == "pow" and len(e.args) == 1:
            k = e.params[0]
            if k != int(k) or k < 0:
                raise ContractError(f"a contract's exponent must be a natural number, not {k}",
                                    c.loc)
            return go(e.args[0]) ** int(k)
        if isinstance(e, ast.DefCall) and e.name in ast.Contract.MEASURES:
            if len(e.args) != 1 or not isinstance(e.args[0], ast.Var):
                raise ContractError(f"{e.name}(...) takes the name of one function", c.loc)
            return measure_of(e.name, e.args[0].name)
        raise ContractError("a contract's bound is made of numbers, sizes, + - * **, and "
                            "cost(f), adds(f), muls(f), calls(f)", c.loc)

    return go(c.bound)


def _size_names(fn: Any) -> list[str]:
    return [p.name for p in fn.params if isinstance(p.type, ast.TSize)]


def _relations(fn: Any) -> list[ast.Param]:
    return [p for p in fn.params if isinstance(p.type, ast.TRel)]


Resolver = Callable[[str], Any]


def _lookup(resolve: Resolver, name: str, c: Clause) -> Any:
    try:
        return resolve(name)
    except KeyError:
        raise ContractError(f"the contract names {name!r}, which is not a function of the "
                            f"module", c.loc) from None


def _component(cost: Any, measure: str) -> int:
    return int(cost.total if measure == "cost" else getattr(cost, measure))


# ---------------------------------------------------------------------------------------------
# Grids


def _grid(lows: Sequence[int], span: int, budget: int) -> list[tuple[int, ...]]:
    """Size points from `lows` up, each size over at most `span + 1` values and at most
    `budget` points in all, smallest (by sum) first."""
    k = len(lows)
    if k == 0:
        return [()]
    per = max(2, min(span + 1, int(round(budget ** (1.0 / k)))))
    pts = list(itertools.product(*(range(lo, lo + per) for lo in lows)))
    pts.sort(key=lambda p: (sum(p), p))
    return pts


def _grid_text(names: Sequence[str], points: Sequence[tuple[int, ...]]) -> str:
    if not points:
        return ""
    if not names:
        return "checked (no sizes)"
    ranges = [f"{n} in {min(p[i] for p in points)}..{max(p[i] for p in points)}"
              for i, n in enumerate(names)]
    count = f"{len(points)} point{'s' if len(points) != 1 else ''}"
    return f"checked on the grid {', '.join(ranges)} ({count})"


# ---------------------------------------------------------------------------------------------
# Checking


def check_contract(module: Any, name: str, c: "Clause | ast.Contract") -> ContractResult:
    """Decide one contract of `module[name]` (see the module docstring)."""
    c = Clause.of(c)
    return check_function_contract(_lookup(module.__getitem__, name, c), c,
                                   module.__getitem__)


def check_function_contract(fn: Any, c: "Clause | ast.Contract",
                            resolve: Resolver) -> ContractResult:
    """Decide contract `c` for the function `fn`; `resolve(name)` finds the functions the
    bound names (`cost(f)`), raising KeyError for unknown names."""
    c = Clause.of(c)
    sizes = _size_names(fn)
    try:
        return _check_by_formulas(resolve, fn, sizes, c)
    except CostFormulaError as err:
        note = err.message.split(":")[0]
    return _check_concrete(resolve, fn, sizes, c, [0] * len(sizes), CONCRETE_POINTS, None,
                           (note,))


def _check_by_formulas(resolve: Resolver, fn: Any, sizes: list[str],
                       c: Clause) -> ContractResult:
    own = fn.cost_formula()
    formulas = [own]

    def measure_of(measure: str, other: str) -> QuasiPolynomial:
        g = _lookup(resolve, other, c)
        missing = [s for s in _size_names(g) if s not in sizes]
        if missing:
            raise ContractError(f"{measure}({other}) depends on the size "
                                f"{', '.join(missing)}, which {fn.name} does not have", c.loc)
        f = g.cost_formula()
        formulas.append(f)
        return f.component(measure)

    bound = _bound_value(c, sizes, QuasiPolynomial.variable, measure_of)
    if not isinstance(bound, QuasiPolynomial):
        bound = QuasiPolynomial.constant(bound)
    diff = bound - own.component(c.measure)
    if c.op == "<":   # values of diff lie in (1/q) Z: diff > 0 iff diff >= 1/q
        q = 1
        for piece in diff.pieces().values():
            for coeff in piece.values():
                q = math.lcm(q, coeff.denominator)
        diff = diff - Fraction(1, q)
    domain = {s: max(f.domain.get(s, 0) for f in formulas) for s in sizes}
    lows = [domain[s] for s in sizes]
    if diff.nonnegative_from(domain):
        below = _below_domain_points(lows)
        res = _check_concrete(resolve, fn, sizes, c, lows, 0, below, ())
        checked = (_grid_text(sizes, below).replace("checked on the grid",
                                                    "smaller sizes checked on the grid")
                   if below else "")
        return ContractResult(fn.name, c, domain, checked, res.error)
    # Not proved: look for the smallest violation, with the formulas on the grid of the
    # domain (confirmed with the cost model) and with the cost model below the domain.
    points = _grid(lows, GRID_SPAN, GRID_POINTS)
    below = _below_domain_points(lows)
    for p in sorted(points + below, key=lambda p: (sum(p), p)):
        in_domain = all(v >= lo for v, lo in zip(p, lows))
        if in_domain and diff.evaluate(**dict(zip(sizes, p))) >= 0:
            continue
        err = _violation(resolve, fn, sizes, c, p)
        if err is not None:
            return ContractResult(fn.name, c, None, _grid_text(sizes, points + below), err)
    checked = _grid_text(sizes, points) + " with the cost formulas (sign not proved " \
        "symbolically)"
    if below:
        checked += "; smaller sizes " + _grid_text(sizes, below)
    return ContractResult(fn.name, c, None, checked)


def _below_domain_points(lows: Sequence[int]) -> list[tuple[int, ...]]:
    """Points with some size below its domain bound, every size in 0 .. max(bound + 4, 8)."""
    if not any(lows):
        return []
    his = [max(lo + 4, 8) for lo in lows]
    pts = [p for p in itertools.product(*(range(h + 1) for h in his))
           if any(v < lo for v, lo in zip(p, lows))]
    pts.sort(key=lambda p: (sum(p), p))
    return pts


def _check_concrete(resolve: Resolver, fn: Any, sizes: list[str], c: Clause,
                    lows: Sequence[int], budget: int, points: list[tuple[int, ...]] | None,
                    notes: tuple[str, ...]) -> ContractResult:
    """The contract with the cost model itself at each point (of `points`, or of the grid)."""
    if points is None:
        points = _grid(lows, GRID_SPAN, budget)
    for p in points:
        err = _violation(resolve, fn, sizes, c, p)
        if err is not None:
            return ContractResult(fn.name, c, None, _grid_text(sizes, points), err, notes)
    text = _grid_text(sizes, points)
    if _relations(fn):
        text += " with the full, the empty and a random relation at each point"
    if notes:
        text += f" (no cost formula: {notes[0]})"
    return ContractResult(fn.name, c, None, text, None, notes)


def _relation_choices(fn: Any, point: Mapping[str, int]) -> Iterable[dict[str, Any]]:
    rels = _relations(fn)
    if not rels:
        yield {}
        return
    rng = np.random.default_rng(0)
    shapes = {r.name: tuple(int(a.evaluate(point)) for a in r.type.sizes) for r in rels}
    for make in (lambda s: np.ones(s, dtype=bool), lambda s: np.zeros(s, dtype=bool),
                 lambda s: rng.random(s) < 0.5):
        yield {n: make(tuple(max(0, d) for d in s)) for n, s in shapes.items()}


def _violation(resolve: Resolver, fn: Any, sizes: list[str], c: Clause,
               point: tuple[int, ...]) -> ContractError | None:
    """The error at `point` if the contract fails there (exact cost model values)."""
    at = dict(zip(sizes, point))
    for rels in _relation_choices(fn, at):
        value = _component(fn.cost(**at, **rels), c.measure)

        def measure_of(measure: str, other: str) -> Fraction:
            g = _lookup(resolve, other, c)
            args = {s: at[s] for s in _size_names(g)}
            args.update({r.name: rels[r.name] for r in _relations(g) if r.name in rels})
            return Fraction(_component(g.cost(**args), measure))

        bound = Fraction(_bound_value(c, sizes, lambda s: Fraction(at[s]), measure_of))
        holds = value <= bound if c.op == "<=" else value < bound
        if not holds:
            where = ", ".join(f"{n}={v}" for n, v in at.items()) or "any sizes"
            extra = " (with the relations " + ", ".join(
                f"{n} of {int(np.count_nonzero(m))} members" for n, m in rels.items()) + ")" \
                if rels else ""
            shown = bound if bound.denominator != 1 else int(bound)
            return ContractError(
                f"contract of {fn.name} broken: {c.text} fails at {where}{extra}: "
                f"{c.measure} = {value}, bound = {shown}", c.loc, at)
    return None


def check_module(module: Any) -> list[ContractResult]:
    """Decide every contract of a loaded module (`api.Module`: its `text` is re-read for the
    clauses, which the elaborated defs do not carry).  Errors are in each result's `error`;
    a contract that cannot be read raises its `ContractError`."""
    out = []
    for name, c in contracts_of(module.text, module.filename):
        out.append(check_contract(module, name, c))
    return out
