"""Loop nests for code generators: the integer points of a box where a predicate holds.

`loop_nest(vars_sizes, pred)` solves the affine equalities of the conjunction (each removes
a loop: the variable is assigned an affine expression of the loops outside it; an exact
division becomes a quotient assignment guarded by divisibility), turns the affine
inequalities and the boxes into Fourier-Motzkin bounds, and keeps relation calls and the
non-convex parts (`or`, `exists`) as residual guards, checked as soon as their variables are
bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from tensorlang.ir.ast import (
    Affine, And, Cmp, Exists, Or, PFalse, Pred, PTrue, RelCall, binder_name, free_names, walk,
)

from tensorlang.ir.canon import conjuncts
from tensorlang.semantics.grid import holds_at

from .core import eq_pred, parametrize, split_atoms
from .fm import Bound, LoopBound, NameFn, affine_to_python, constraint_to_pred
from .fm import fourier_motzkin

RelFn = Callable[[str, list[str]], str]


@dataclass(frozen=True)
class Level:
    """One level of a nest: a loop over `var`, or an assignment `var = value.expr //
    value.div` (the level is skipped unless `value.div` divides `value.expr`); `guards` are
    checked once `var` is bound."""

    var: str
    loop: LoopBound | None = None
    value: Bound | None = None
    guards: tuple[Pred, ...] = ()


@dataclass(frozen=True)
class LoopNest:
    """`guard` (parameters only) then `levels`, outermost first; `vars` are the statement's
    index variables, the coordinates `points` reports."""

    vars: tuple[str, ...]
    guard: tuple[Pred, ...]
    levels: tuple[Level, ...]
    feasible: bool = True

    def points(self, env: Mapping[str, Any]) -> Iterator[dict[str, int]]:
        """Every point the nest visits, under parameter (and relation) values `env`."""
        if not self.feasible:
            return
        scope = dict(env)
        if all(holds_at(g, scope) for g in self.guard):
            yield from self._walk(0, scope)

    def _walk(self, k: int, env: dict[str, Any]) -> Iterator[dict[str, int]]:
        if k == len(self.levels):
            yield {v: env[v] for v in self.vars}
            return
        lv = self.levels[k]
        if lv.loop is not None:
            values: Iterable[int] = lv.loop.range(env)
        else:
            assert lv.value is not None
            num = lv.value.expr.evaluate(env)
            values = (num // lv.value.div,) if num % lv.value.div == 0 else ()
        for x in values:
            env[lv.var] = x
            if all(holds_at(g, env) for g in lv.guards):
                yield from self._walk(k + 1, env)

    def loop_vars(self) -> list[str]:
        return [lv.var for lv in self.levels if lv.loop is not None]

    def to_python(self, body: str | list[str], indent: str = "    ",
                  name: NameFn | None = None, rel: RelFn | None = None) -> str:
        """Python (Numba-compatible) source of the nest around `body` (lines at the
        innermost level).  `name` maps identifiers; `rel(name, args)` prints a relation
        test (default: a bounds-checked read of a boolean array)."""
        nm = name or (lambda s: s)
        lines: list[str] = []
        body_lines = body.splitlines() if isinstance(body, str) else list(body)
        if not self.feasible:
            return "pass"
        counter = [0]  # numbers the flags of `exists` tests
        depth = _emit_guards(self.guard, 0, lines, indent, nm, rel, counter)
        for lv in self.levels:
            pad = indent * depth
            if lv.loop is not None:
                lines.append(f"{pad}for {nm(lv.var)} in {lv.loop.range_py(nm)}:")
                depth += 1
            else:
                assert lv.value is not None
                expr = affine_to_python(lv.value.expr, nm)
                if lv.value.div == 1:
                    lines.append(f"{pad}{nm(lv.var)} = {expr}")
                else:
                    lines.append(f"{pad}if ({expr}) % {lv.value.div} == 0:")
                    lines.append(f"{pad}{indent}{nm(lv.var)} = ({expr}) // {lv.value.div}")
                    depth += 1
            depth = _emit_guards(lv.guards, depth, lines, indent, nm, rel, counter)
        lines += [indent * depth + b for b in body_lines] or [indent * depth + "pass"]
        return "\n".join(lines)


def _emit_guards(guards: Iterable[Pred], depth: int, lines: list[str], indent: str,
                 name: NameFn, rel: RelFn | None, counter: list[int] | None = None) -> int:
    guards = list(guards)
    if not guards:
        return depth
    counter = counter if counter is not None else [0]
    pre: list[str] = []
    pad = indent * depth
    expr = " and ".join(pred_to_python(g, name, rel, pre, pad, indent, counter) for g in guards)
    lines += pre
    lines.append(f"{pad}if {expr}:")
    return depth + 1


def pred_to_python(p: Pred, name: NameFn | None = None, rel: RelFn | None = None,
                   pre: list[str] | None = None, pad: str = "", indent: str = "    ",
                   counter: list[int] | None = None) -> str:
    """A Python boolean expression for `p`.  An `exists` is computed first by a loop that
    sets a flag (appended to `pre`, at indentation `pad`), since Numba has no generators."""
    nm = name or (lambda s: s)
    pre = pre if pre is not None else []
    counter = counter if counter is not None else [0]
    if isinstance(p, PTrue):
        return "True"
    if isinstance(p, PFalse):
        return "False"
    if isinstance(p, Cmp):
        return f"{affine_to_python(p.lhs, nm)} {p.op} {affine_to_python(p.rhs, nm)}"
    if isinstance(p, (And, Or)):
        op = " and " if isinstance(p, And) else " or "
        return ("(" + pred_to_python(p.a, nm, rel, pre, pad, indent, counter) + op
                + pred_to_python(p.b, nm, rel, pre, pad, indent, counter) + ")")
    if isinstance(p, RelCall):
        args = [affine_to_python(a, nm) for a in p.args]
        return rel(p.name, args) if rel else _default_rel(nm(p.name), args)
    if isinstance(p, Exists):
        counter[0] += 1
        flag = f"_exists{counter[0]}"
        pre.append(f"{pad}{flag} = False")
        pre.append(f"{pad}for {nm(p.idx)} in range({affine_to_python(p.size, nm)}):")
        inner: list[str] = []
        cond = pred_to_python(p.body, nm, rel, inner, pad + indent, indent, counter)
        pre += inner
        pre += [f"{pad}{indent}if {cond}:", f"{pad}{indent * 2}{flag} = True",
                f"{pad}{indent * 2}break"]
        return flag
    raise TypeError(f"not a predicate: {p!r}")


def _default_rel(r: str, args: list[str]) -> str:
    checks = [f"0 <= {a} < {r}.shape[{k}]" for k, a in enumerate(args)]
    return "(" + " and ".join(checks + [f"{r}[{', '.join(args)}]"]) + ")"


def _all_names(p: Pred) -> set[str]:
    out = set(free_names(p))
    for n in walk(p):
        b = binder_name(n)
        if b is not None:
            out.add(b)
    return out


def loop_nest(index_vars_with_sizes: list[tuple[str, Affine | int]], pred: Pred) -> LoopNest:
    """The loops visiting exactly the points of the box `0 <= v < n` (outermost first) where
    `pred` holds; every other variable is a parameter."""
    vars_sizes = [(v, n if isinstance(n, Affine) else Affine.lit(n))
                  for v, n in index_vars_with_sizes]
    names = [v for v, _ in vars_sizes]
    avoid = set(names) | _all_names(pred)
    for _, n in vars_sizes:
        avoid |= n.vars()
    parts = split_atoms(conjuncts(pred), set(names))
    empty = LoopNest(tuple(names), (), (), feasible=False)
    if any(isinstance(p, PFalse) for p in parts.outer):
        return empty
    par = parametrize(vars_sizes, parts.eqs, parts.ineqs, avoid, quotient_coords=False)
    if not par.feasible:
        return empty
    bounds = fourier_motzkin(par.ineqs, par.order)
    if not bounds.feasible:
        return empty
    levels: list[Level] = [Level(q.name, value=Bound(q.expr, q.modulus))
                           for q in par.quotients]
    levels += list(Level(lb.var, loop=lb) for lb in bounds.levels)
    for v in names:  # eliminated variables, right after the levels they depend on
        if v in par.values:
            val = par.values[v]
            pos = _depth(val.vars(), levels)
            levels.insert(pos + 1, Level(v, value=Bound(val, 1)))
    top: list[Pred] = []
    items = (list(parts.outer) + [eq_pred(e) for e in par.param_eqs]
             + [constraint_to_pred(a) for a in bounds.guard] + list(parts.residual))
    extra: dict[int, list[Pred]] = {}
    for p in items:
        pos = _depth(free_names(p), levels)
        (top if pos < 0 else extra.setdefault(pos, [])).append(p)
    levels = [Level(lv.var, lv.loop, lv.value, lv.guards + tuple(extra.get(k, ())))
              for k, lv in enumerate(levels)]
    return LoopNest(tuple(names), tuple(top), tuple(levels))


def _depth(used: Iterable[str], levels: list[Level]) -> int:
    """Index of the innermost level binding one of `used` (-1: none)."""
    used = set(used)
    return max((k for k, lv in enumerate(levels) if lv.var in used), default=-1)
