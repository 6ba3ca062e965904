"""The derivative theorems of SPEC 6 / SPEC 10, checked on concrete programs.

Cost bounds (exact SPEC 3 cost of the Tensor-SSA programs via `cost_def(tssa.to_core(p))`):

  Theorem 6.1   C(jvp f) - C(f) <= 3 C(f)     the tangent statements cost at most three times
                                              the program (Leibniz: a product's tangent is two
                                              products and an add); with the primal the jvp
                                              program costs at most 4 C(f)
  Theorem 6.55  C(vjp f) <= 4 C(f) + size(inputs) + size(output)
                                              (size = number of scalar entries of the
                                              differentiated inputs and of the output)

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

from tensorlang.ir import ast as A
from tensorlang.ir import tssa
from tensorlang.ir.ast import Def, TReal, TSize
from tensorlang.semantics.cost import cost_def
from tensorlang.semantics.interp import interpret
from tensorlang.passes.adjoint import vjp_program
from tensorlang.passes.derived import to_program
from tensorlang.passes.fwd import jvp_program, wrt_params
from tensorlang.ir.tssa import Program

JVP_FACTOR = 3      # tangent part, Theorem 6.1
VJP_FACTOR = 4      # whole vjp program, Theorem 6.55


def program_cost(p: Program, args: Mapping[str, Any]) -> int:
    """Exact SPEC 3 cost (total) of a Tensor-SSA program."""
    return cost_def(tssa.to_core(p), _cost_args(p, args)).total


def _cost_args(p: Program, args: Mapping[str, Any]) -> dict[str, Any]:
    """Sizes and relations only (the cost model ignores values)."""
    out = {}
    for q in p.params:
        if isinstance(q.type, (TSize, A.TRel)) and q.name in args:
            out[q.name] = args[q.name]
    return out


def _sizes(p: Program, args: Mapping[str, Any]) -> dict[str, int]:
    return {q.name: int(args[q.name]) for q in p.params if isinstance(q.type, TSize)}


def type_size(t: A.Type, sizes: Mapping[str, int]) -> int:
    """Number of scalar entries of a value of type t."""
    if isinstance(t, TReal):
        return 1
    if isinstance(t, A.TPair):
        return type_size(t.a, sizes) + type_size(t.b, sizes)
    if isinstance(t, A.TArr):
        return max(0, int(t.size.evaluate(sizes))) * type_size(t.elem, sizes)
    return 0


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
    sizes = _sizes(p, args)
    s_in = sum(type_size(p.param_types[x], sizes) for x in xs)
    s_out = type_size(p.ret, sizes) if p.ret is not None else 0
    bounds = {"jvp": cf + JVP_FACTOR * cf, "vjp": VJP_FACTOR * cf + s_in + s_out}
    ratios = {"jvp": _ratio(cj, cf), "jvp_tangent": _ratio(cj - cf, cf),
              "vjp": _ratio(cv, cf), "vjp_io": _ratio(cv, VJP_FACTOR * cf + s_in + s_out)}
    ok = cj <= bounds["jvp"] and cv <= bounds["vjp"]
    return BoundReport(p.name, xs, cf, cj, cv, s_in, s_out, ratios, bounds, ok)


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
    gl = [grads] if len(xs) == 1 else _untuple(grads, len(xs))
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


def _untuple(v: Any, n: int) -> list[Any]:
    """The n components of a right-nested tuple."""
    out = []
    for _ in range(n - 1):
        out.append(v[0])
        v = v[1]
    out.append(v)
    return out


__all__ = ["BoundReport", "check_bounds", "DerivReport", "check_derivatives", "program_cost",
           "type_size", "run", "flat", "like", "axpy", "dense_points", "JVP_FACTOR", "VJP_FACTOR"]


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
