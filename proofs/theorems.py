"""The derivative theorems of SPEC 6 / SPEC 10, checked on concrete programs.

Cost bounds (exact SPEC 3 cost of the Tensor-SSA programs via `cost_def(tssa.to_core(p))`),
at two levels:

* `check_bounds(p, args)`: the derivative rules (passes/jvp/, passes/vjp/) on one
  Tensor-SSA program `p`: the derivative costs within the bound of the program it was
  derived from.
* `check_compiled_bounds(f, args)`: the promise users rely on, end to end: the derivative as
  compiled (`pipeline.run_to(Derivation(...), FINAL)`, what `.cost()` of a derived function
  reports) within the bound of the function as compiled (`f.cost()`).  The pipeline's
  `derive` stage differentiates the simplified program, so this follows from the first check
  on simplified programs and the simplifier never raising a cost; it is checked directly.

`check_theorems(max_examples, examples)` runs both on random programs and on every example
(what `tl prove` reports).  The bounds themselves live in `tensorlang.semantics.bounds`:

  Theorem 6.1   C(jvp f) - C(f) <= 3 C(f)     the tangent statements cost at most three times
                                              the program (Leibniz: a product's tangent is two
                                              products and an add); with the primal the jvp
                                              program costs at most 4 C(f)
  Theorem 6.55  C(vjp f) <= 4 C(f) + size(inputs) + size(output)
                                              (size = number of scalar entries of the
                                              differentiated inputs and of the output)

  both plus 4 E(f) where f has max/min reductions (E(f): the points they visit; SPEC 12's
  equal split of ties cannot meet a multiple of C(f), see `tensorlang.semantics.bounds`)

Why the jvp bound is stated for the tangent part: `f(x, y) = x * y` costs 1 and its jvp
must return `(x*y, x*dy + y*dx)`, which needs 2 multiplications and 1 addition besides the
primal product, so `C(jvp f) = 4 C(f)` and no rule set can do better (see
docs/derivatives.md; the paper's proof counts the "new differential expressions" at three
times the original, primal separate).  The check is exact, never loosened: a failing report
names the program and the costs.

Correctness (the oracle is the interpreter on `tssa.to_core`): the jvp agrees with central
finite differences, the vjp satisfies the dot-product test `<vjp(dy), dx> == <dy, jvp(dx)>`,
and both derived programs return the primal value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tensorlang import pipeline
from tensorlang.ir import ast, tssa
from tensorlang.ir.ast import Def, TRel, TSize
from tensorlang.ir.tssa import Program
from tensorlang.passes.vjp import vjp_program
from tensorlang.passes.jvp import is_real_valued, jvp_program, wrt_params
from tensorlang.semantics.bounds import jvp_bound, type_size, vjp_bound
from tensorlang.semantics.cost import cost_def, extreme_points
from tensorlang.semantics.interp import interpret


def to_program(d: Def | Program) -> Program:
    """The Tensor-SSA program of `d` (the pipeline's `ssa` stage); SSA programs as they are."""
    return d if isinstance(d, Program) else pipeline.run_to(d, "ssa")


def program_cost(p: Program, args: Mapping[str, Any]) -> int:
    """Exact SPEC 3 cost (total) of a Tensor-SSA program."""
    return cost_def(tssa.to_core(p), _cost_args(p, args)).total


def _cost_args(p: Program, args: Mapping[str, Any]) -> dict[str, Any]:
    """Sizes and relations only (the cost model ignores values)."""
    out = {}
    for q in p.params:
        if isinstance(q.type, (TSize, TRel)) and q.name in args:
            out[q.name] = args[q.name]
    return out


def _sizes(p: Program, args: Mapping[str, Any]) -> dict[str, int]:
    return {q.name: int(args[q.name]) for q in p.params if isinstance(q.type, TSize)}


@dataclass(frozen=True)
class BoundReport:
    """Costs of f, its jvp and its vjp (all wrt inputs), and the theorem checks."""

    name: str
    wrt: tuple[str, ...]
    cost_f: int
    cost_jvp: int
    cost_vjp: int
    size_in: int
    size_out: int
    ratios: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, int] = field(default_factory=dict)
    ok: bool = True
    extreme: int = 0              # E(f): points f's max/min reductions visit

    def __str__(self) -> str:
        r = ", ".join(f"{k}={v:.3g}" for k, v in self.ratios.items())
        verdict = "ok" if self.ok else "VIOLATED"
        return (f"{self.name} wrt {', '.join(self.wrt)}: C(f)={self.cost_f} "
                f"C(jvp)={self.cost_jvp} (bound {self.bounds['jvp']}) "
                f"C(vjp)={self.cost_vjp} (bound {self.bounds['vjp']}); {r}; {verdict}")


def check_bounds(d: Def | Program, args: Mapping[str, Any],
                 wrt: Sequence[str] | None = None) -> BoundReport:
    """Cost the program, its jvp and its vjp for the sizes/relations in `args` and check
    Theorem 6.1 (`C(jvp) <= C(f) + 3 C(f)`) and Theorem 6.55
    (`C(vjp) <= 4 C(f) + size(inputs) + size(output)`)."""
    p = to_program(d)
    xs = wrt_params(p, wrt)
    cf = program_cost(p, args)
    taken = {q.name for q in p.params}
    tnames = {x: _fresh(f"d_{x}", taken) for x in xs}
    cj = program_cost(jvp_program(p, xs, tangent_names=tnames), args)
    cv = program_cost(vjp_program(p, xs, cotangent_name=_fresh("d_y", taken)), args)
    return _report(p, xs, cf, cj, cv, args)


def check_compiled_bounds(f: pipeline.Program, args: Mapping[str, Any],
                          wrt: Sequence[str] | None = None) -> BoundReport:
    """Theorems 6.1 and 6.55 end to end: the jvp and vjp of `f` (in `wrt`, default every
    real-valued input) as compiled -- the whole pipeline, `derive` and `simplified`
    included -- against the bound of `f` as compiled.  These are the costs `.cost(**sizes)`
    of the function and of its derived functions report."""
    p = pipeline.run_to(f, "ssa")
    xs = wrt_params(p, wrt)
    cost_args = _cost_args(p, args)
    cf = pipeline.cost(f, pipeline.FINAL, cost_args).total
    jvp = pipeline.Derivation("jvp", f, tuple(xs), f"{p.name}_jvp")
    vjp = pipeline.Derivation("vjp", f, tuple(xs), f"{p.name}_vjp")
    cj = pipeline.cost(jvp, pipeline.FINAL, cost_args).total
    cv = pipeline.cost(vjp, pipeline.FINAL, cost_args).total
    return _report(p, xs, cf, cj, cv, args)


def _report(p: Program, xs: Sequence[str], cf: int, cj: int, cv: int,
            args: Mapping[str, Any]) -> BoundReport:
    """The theorem checks of costs `cf`, `cj`, `cv` of f (SSA program `p`), its jvp and vjp
    in `xs`: the bounds of `tensorlang.semantics.bounds`, with f's E(f)."""
    sizes = _sizes(p, args)
    s_in = sum(type_size(p.param_types[x], sizes) for x in xs)
    s_out = type_size(p.ret, sizes) if p.ret is not None else 0
    e = extreme_points(p, _cost_args(p, args))
    bounds = {"jvp": jvp_bound(cf, e), "vjp": vjp_bound(cf, s_in, s_out, e)}
    ratios = {"jvp": _ratio(cj, cf), "jvp_tangent": _ratio(cj - cf, cf),
              "vjp": _ratio(cv, cf), "vjp_io": _ratio(cv, bounds["vjp"])}
    ok = cj <= bounds["jvp"] and cv <= bounds["vjp"]
    return BoundReport(p.name, tuple(xs), cf, cj, cv, s_in, s_out, ratios, bounds, ok, e)


def _ratio(a: int, b: int) -> float:
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return a / b


# ---------------------------------------------------------------------------------------------
# Numerical checks


def run(p: Program, args: Mapping[str, Any]) -> Any:
    """The interpreter (the oracle) on the program's core form."""
    names = {q.name for q in p.params}
    return interpret(tssa.to_core(p), {k: v for k, v in args.items() if k in names})


def flat(v: Any) -> np.ndarray:
    """All scalar entries of a value (floats, arrays, nested tuples) as one vector."""
    if isinstance(v, tuple):
        parts = [flat(x) for x in v]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(v, dtype=np.float64).reshape(-1)


def like(v: Any, rng: np.random.Generator) -> Any:
    """A random value with the structure of v (uniform in [-1, 1])."""
    if isinstance(v, tuple):
        return tuple(like(x, rng) for x in v)
    if isinstance(v, (float, int, np.floating)):
        return float(rng.uniform(-1.0, 1.0))
    return rng.uniform(-1.0, 1.0, size=np.shape(v))


def axpy(a: float, x: Any, y: Any) -> Any:
    """y + a x on value trees."""
    if isinstance(y, tuple):
        return tuple(axpy(a, xi, yi) for xi, yi in zip(x, y))
    if isinstance(y, (float, int, np.floating)):
        return float(y) + a * float(x)
    return np.asarray(y, dtype=np.float64) + a * np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class DerivReport:
    """Errors of the derivative checks (relative, max-norm); `ok` when all are small."""

    fd_error: float       # jvp tangent vs central finite differences
    dot_error: float      # <vjp(dy), dx> vs <dy, jvp(dx)>
    primal_error: float   # the y returned by jvp and vjp vs the program's
    ok: bool


def _rel(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> float:
    if a.size == 0 and b.size == 0:
        return 0.0
    den = max(1.0, scale, float(np.max(np.abs(b))) if b.size else 0.0)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        same = np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(
            np.nan_to_num(a), np.nan_to_num(b), rtol=1e-6, atol=1e-6)
        return 0.0 if same else float("inf")
    return float(np.max(np.abs(a - b))) / den if a.size else 0.0


def check_derivatives(d: Def | Program, args: Mapping[str, Any],
                      wrt: Sequence[str] | None = None, *, seed: int = 0, h: float = 1e-6,
                      fd_tol: float = 1e-5, dot_tol: float = 1e-9) -> DerivReport:
    """jvp vs central differences, the dot-product test and the primal values."""
    p = to_program(d)
    xs = wrt_params(p, wrt)
    rng = np.random.default_rng(seed)
    args = dict(args)
    y = run(p, args)
    taken = {q.name for q in p.params}
    tnames = {x: _fresh(f"d_{x}", taken) for x in xs}
    ct = _fresh("d_y", taken | set(tnames.values()))
    dx = {x: like(args[x], rng) for x in xs}
    jv = run(jvp_program(p, xs, tangent_names=tnames),
             {**args, **{tnames[x]: dx[x] for x in xs}})
    y_j, ty = jv
    plus = run(p, {**args, **{x: axpy(h, dx[x], args[x]) for x in xs}})
    minus = run(p, {**args, **{x: axpy(-h, dx[x], args[x]) for x in xs}})
    fd = (flat(plus) - flat(minus)) / (2 * h)
    fd_err = _rel(flat(ty), fd, 1.0)
    dy = like(y, rng)
    vj = run(vjp_program(p, xs, cotangent_name=ct), {**args, ct: dy})
    y_v, grads = vj
    from tensorlang.testing import untuple

    gl = [grads] if len(xs) == 1 else untuple(grads, len(xs))
    lhs = sum(float(flat(g) @ flat(dx[x])) for g, x in zip(gl, xs))
    rhs = float(flat(dy) @ flat(ty))
    dot_err = abs(lhs - rhs) / max(1.0, abs(lhs), abs(rhs))
    prim = max(_rel(flat(y_j), flat(y)), _rel(flat(y_v), flat(y)))
    ok = fd_err <= fd_tol and dot_err <= dot_tol and prim <= 1e-12
    return DerivReport(fd_err, dot_err, prim, ok)


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


__all__ = ["BoundReport", "check_bounds", "check_compiled_bounds", "DerivReport",
           "check_derivatives", "program_cost", "type_size", "run", "flat", "like", "axpy",
           "dense_points", "to_program", "TheoremReport", "check_theorems"]


def dense_points(p: Program, args: Mapping[str, Any]) -> int:
    """Index points a dense evaluation visits: sum over statements of |I| * |J| (what a
    backend without the index solver's loop bounds would iterate over)."""
    sizes = _sizes(p, args)
    total = 0
    for s in p.stmts:
        if isinstance(s.rhs, tssa.Input):
            continue
        n = 1
        for a in tuple(s.rhs.dims) + tuple(s.rhs.sdims):
            n *= max(0, int(a.evaluate(sizes)))
        total += n
    return total


# ---------------------------------------------------------------------------------------------
# The theorem table of `tl prove`


@dataclass(frozen=True)
class TheoremReport:
    """One theorem checked at one level on one family of programs."""

    theorem: str            # "6.1 jvp" or "6.55 vjp"
    level: str              # "rules" (derivative of the SSA program) or "compiled" (end to end)
    programs: str           # "random" or "examples"
    instances: int          # (program, sizes) pairs checked
    worst_ratio: float      # max over instances of C(derivative) / bound (<= 1 when ok)
    violations: tuple[str, ...] = ()   # one line per failing instance (BoundReport text)
    source: tuple[str, ...] = ()       # the .tl source of the first failing programs

    @property
    def ok(self) -> bool:
        return not self.violations


def check_theorems(max_examples: int = 25, examples: bool = True) -> list[TheoremReport]:
    """Theorems 6.1 and 6.55 at both levels (rules, compiled) on `max_examples` random
    programs of `tensorlang.testing.theorem_programs()` (the same on every run) and, with
    `examples`, on every function of examples/*.tl at two sizes: four reports per family."""
    from tensorlang.testing import draw_examples, theorem_programs

    families: list[tuple[str, list[tuple[Def, dict[str, Any]]]]] = []
    cases = draw_examples(theorem_programs(), max_examples)
    families.append(("random", [(d, args) for d, args in cases]))
    if examples:
        families.append(("examples", example_cases()))
    out: list[TheoremReport] = []
    for family, items in families:
        rows: dict[tuple[str, str], list[tuple[float, str | None, Def]]] = {}
        for d, args in items:
            for level, check in (("rules", check_bounds), ("compiled", check_compiled_bounds)):
                r = check(d, args)
                for kind, theorem in (("jvp", "6.1 jvp"), ("vjp", "6.55 vjp")):
                    cost = r.cost_jvp if kind == "jvp" else r.cost_vjp
                    bad = None if cost <= r.bounds[kind] else f"{r} at {_show_sizes(args)}"
                    rows.setdefault((theorem, level), []).append(
                        (_ratio(cost, r.bounds[kind]), bad, d))
        for (theorem, level), got in rows.items():
            bad = [(msg, d) for _, msg, d in got if msg is not None]
            out.append(TheoremReport(
                theorem, level, family, len(got), max((x for x, _, _ in got), default=0.0),
                tuple(msg for msg, _ in bad), tuple(_source(d) for _, d in bad[:3])))
    return out


def example_cases(sizes: Sequence[int] = (2, 5)) -> list[tuple[Def, dict[str, Any]]]:
    """Every written (not derived) function of examples/*.tl with real-valued inputs, with
    random inputs at each of `sizes` (every size parameter takes that value)."""
    import pathlib

    import tensorlang
    from tensorlang.api import load
    from tensorlang.testing import random_args

    folder = pathlib.Path(tensorlang.__file__).resolve().parent.parent / "examples"
    files = sorted(folder.glob("*.tl"))
    if not files:
        raise FileNotFoundError(f"no examples/*.tl next to the tensorlang package ({folder})")
    out = []
    for path in files:
        module = load(path)
        for fn in module.functions:
            if fn.is_derived or not any(is_real_valued(q.type) for q in fn.params):
                continue
            d = fn.core()
            for n in sizes:
                values = {q.name: n for q in d.params if isinstance(q.type, TSize)}
                out.append((d, random_args(d, values, np.random.default_rng(n))))
    return out


def _show_sizes(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int)) or "no sizes"


def _source(d: Def) -> str:
    from tensorlang.syntax.printer import to_tl

    return to_tl(d)
