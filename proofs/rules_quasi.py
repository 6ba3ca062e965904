"""Catalogue entries for the lowering of SPEC 12's quasi-affine indices and index arrays.

`tensorlang.check.quasi` rewrites, in the front end, every `e // c`, `e % c` and `idx[a]` of
an index into affine constraints on fresh summation (or `exists`) variables.  Each rule below
draws random surface programs (text, through the parser and the type checker), and checks

* meaning: the interpreter on the lowered program equals the surface meaning evaluated point
  by point with `grid.quasi_value` (Python's floor division and remainder, entries of the
  index array, zero extension);
* cost: the lowered reads cost what a read costs, 0 (SPEC 3: the sum over the quotient has
  one live term), so the lowering never adds work;
* Q-adjoint: the vjp of such a read equals the transposed read computed by scattering in
  numpy, its program is in Tensor-SSA normal form (every statement a gather: no scatter, no
  atomics), and it keeps Theorem 6.55's bound.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from tensorlang import api
from tensorlang.ir import ast
from tensorlang.proofs.catalogue import Rule, Verdict, register, values_close
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.semantics import grid
from tensorlang.semantics.bounds import vjp_bound
from tensorlang.semantics.cost import cost_def

PASS = "quasi"

Instance = dict[str, Any]   # text, sizes, args (user form), kind


def _affine_text(draw: Callable, names: list[str]) -> str:
    terms = [f"{draw(st.sampled_from([1, 1, 2, -1]))} * {n}"
             for n in names if draw(st.booleans()) or n == names[0]]
    return f"({' + '.join(terms)} + {draw(st.integers(-3, 3))})"


@st.composite
def const_div(draw: Callable, op: str) -> Instance:
    """`gen i:G(, j:H). x[(a*i + b*j + c0) op c (op2 c2)]` with c, c2 positive constants."""
    n = draw(st.integers(0, 5))
    two = draw(st.booleans())
    names = ["i", "j"] if two else ["i"]
    e = _affine_text(draw, names)
    c = draw(st.integers(1, 4))
    text = f"({e} {op} {c})"
    if draw(st.booleans()):  # nested or combined forms
        text = draw(st.sampled_from([f"({text} // 2)", f"({text} % 3)", f"({text} + {e} % 2)",
                                     f"(2 * {text} - 1)"]))
    ext = draw(st.sampled_from(["N", "N + 2", "3"]))
    binds = "i:N + 1, j:2" if two else "i:N + 1"
    src = (f"def f(N: size, x: R[{ext}]) -> R[N + 1{', 2' if two else ''}]:\n"
           f"    return gen {binds}. x[{text}]\n")
    x = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(-1, 1, size=_eval(ext, n))
    return {"text": src, "sizes": {"N": n}, "args": {"N": n, "x": x}}


@st.composite
def size_mod(draw: Callable) -> Instance:
    """`gen i:N. x[(k*i + s) % N]` (and `//`): the quotient is a bounded constant."""
    n = draw(st.integers(0, 6))
    k, s = draw(st.sampled_from([(1, 1), (1, -1), (1, 0), (2, 0), (1, -2), (-1, 0), (2, 1)]))
    op = draw(st.sampled_from(["%", "%", "//"]))
    src = (f"def f(N: size, x: R[N]) -> R[N]:\n"
           f"    return gen i:N. x[({k} * i + {s}) {op} N]\n")
    x = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(-1, 1, size=n)
    return {"text": src, "sizes": {"N": n}, "args": {"N": n, "x": x}}


@st.composite
def index_array(draw: Callable) -> Instance:
    """`x[P[i]]`, `x[P[i, k] + 1]`, `x[P[N - 1 - i]]`, `A[P[i], Q[i]]` with random entries."""
    n, v = draw(st.integers(0, 5)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    form = draw(st.sampled_from(["plain", "shift", "reverse", "two", "matrix", "inferred"]))
    P = rng.integers(0, v, size=(n, 2) if form == "two" else n)
    Q = rng.integers(0, v, size=n)
    x = rng.uniform(-1, 1, size=(v, v) if form == "matrix" else v)
    body = {"plain": "x[P[i]]", "shift": "x[P[i] + 1]", "reverse": "x[P[N - 1 - i]]",
            "two": "x[P[i, 1]]", "matrix": "x[P[i], Q[i]]", "inferred": "x[P[i]]"}[form]
    ptype = "Z[N, 2] in V" if form == "two" else ("Z[N]" if form == "inferred" else "Z[N] in V")
    xtype = "R[V, V]" if form == "matrix" else "R[V]"
    src = (f"def f(N: size, V: size, P: {ptype}, Q: Z[N] in V, x: {xtype}) -> R[N]:\n"
           f"    return gen i:N. {body}\n")
    return {"text": src, "sizes": {"N": n, "V": v},
            "args": {"N": n, "V": v, "P": P, "Q": Q, "x": x}}


@st.composite
def compare(draw: Callable) -> Instance:
    """`gen i:N + 1. [e // c op k] * x[i]`, `[e % c == k]`, `[P[i] == j]`-style brackets."""
    n = draw(st.integers(0, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    e = _affine_text(draw, ["i"])
    c = draw(st.integers(1, 4))
    op = draw(st.sampled_from(["<", "<=", "==", ">", ">=", "!="]))
    lhs = draw(st.sampled_from([f"{e} // {c}", f"{e} % {c}", "P[i]", f"{e} % {c} + i // 2"]))
    rhs = draw(st.sampled_from(["1", "i - 1", "N - i", "0"]))
    P = rng.integers(0, n + 1, size=n + 1)
    x = rng.uniform(-1, 1, size=n + 1)
    src = (f"def f(N: size, P: Z[N + 1] in N + 1, x: R[N + 1]) -> R[N + 1]:\n"
           f"    return gen i:N + 1. [{lhs} {op} {rhs}] * x[i]\n")
    return {"text": src, "sizes": {"N": n}, "args": {"N": n, "P": P, "x": x}}


def _eval(size_text: str, n: int) -> int:
    return int(eval(size_text, {"N": n}))  # noqa: S307 -- texts built above


def _surface_def(text: str) -> ast.Def:
    from tensorlang.syntax.parser import parse_module

    (d,) = parse_module(text, "<rule>")
    return d


def _reference(inst: Instance) -> np.ndarray:
    """The surface program at every point, by `grid.quasi_value`."""
    d = _surface_def(inst["text"])
    body: Any = d.body
    binders = []
    while isinstance(body, ast.Gen):
        binders.append((body.idx, body.size))
        body = body.body
    args = inst["args"]
    sizes = {k: v for k, v in inst["sizes"].items()}
    arrays = {k: np.asarray(v) for k, v in args.items()
              if isinstance(v, np.ndarray) and np.issubdtype(np.asarray(v).dtype, np.integer)}
    shape = tuple(max(0, int(s.evaluate(sizes))) for _, s in binders)
    out = np.zeros(shape)
    for point in itertools.product(*(range(k) for k in shape)):
        env = {**sizes, **{name: v for (name, _), v in zip(binders, point)}}
        out[point] = _read(body, env, arrays, args)
    return out


def _read(e: Any, env: dict[str, int], arrays: dict[str, np.ndarray], args: dict) -> float:
    if isinstance(e, ast.Iverson):
        return _read(e.e, env, arrays, args) if _holds(e.pred, env, arrays) else 0.0
    assert isinstance(e, ast.Access) and isinstance(e.e, ast.Var)
    x = np.asarray(args[e.e.name])
    idx = [grid.quasi_value(a, env, arrays) for a in e.idx]
    if any(k is None or not 0 <= k < n for k, n in zip(idx, x.shape)):  # type: ignore
        return 0.0
    return float(x[tuple(idx)])


def _holds(p: Any, env: dict[str, int], arrays: dict[str, np.ndarray]) -> bool:
    if isinstance(p, ast.And):
        return _holds(p.a, env, arrays) and _holds(p.b, env, arrays)
    if isinstance(p, ast.Or):
        return _holds(p.a, env, arrays) or _holds(p.b, env, arrays)
    assert isinstance(p, ast.Cmp)
    a, b = grid.quasi_value(p.lhs, env, arrays), grid.quasi_value(p.rhs, env, arrays)
    if a is None or b is None:
        return False
    return {"<": a < b, "<=": a <= b, "==": a == b}[p.op]


def check_lowering(inst: Instance) -> Verdict:
    fn = api.parse(inst["text"], "<rule>").f
    got = fn.interpret(**inst["args"])
    want = _reference(inst)
    meaning = values_close(np.asarray(got), want)
    core = fn.core()
    cost = cost_def(core, fn.bind(**inst["args"])).total
    why = None
    if not meaning or cost:
        why = f"{inst['text']}lowered: {fn.show('parsed')}\nargs {inst['args']}\n" \
              f"got {got}, want {want}, cost {cost}"
    return Verdict(meaning, cost == 0, None, None, why)


def check_adjoint(inst: Instance) -> Verdict:
    """vjp(f, x) of a read through `//`, `%` or an index array: the transposed read."""
    fn = api.parse(inst["text"], "<rule>").f
    g = api.vjp(fn, "x")
    rng = np.random.default_rng(0)
    y = np.asarray(fn.interpret(**inst["args"]))
    dy = rng.uniform(-1, 1, size=y.shape)
    _, dx = g.interpret(**inst["args"], d_y=dy)
    # reference: <dy, J dx> == <J^T dy, dx> with J the (linear) read, by unit vectors
    x = np.asarray(inst["args"]["x"])
    want = np.zeros_like(x)
    for k in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[k] = 1.0
        want[k] = float(np.sum(dy * np.asarray(fn.interpret(**{**inst["args"], "x": e}))))
    meaning = values_close(np.asarray(dx), want)
    nf = is_tensor_ssa(g.run_to("derive")) is None
    cv = g.cost(**inst["args"], d_y=dy).total
    budget = vjp_bound(fn.cost(**inst["args"]).total, x.size, y.size)
    why = None if (meaning and cv <= budget and nf) else (
        f"{inst['text']}vjp: {g.show('simplified')}\ngot {dx}, want {want}, cost {cv} > "
        f"{budget}")
    return Verdict(meaning, cv <= budget, nf, cv / budget if budget else None, why)


def _register() -> None:
    register(Rule("Q-floordiv", PASS,
                  "x[e // c] -> sum q:n. [c*q <= e + c*K < c*q + c] * x[q - K]",
                  lambda: const_div("//"), check=check_lowering))
    register(Rule("Q-mod", PASS, "x[e % c] -> sum q:n. [c*q <= e' < c*q + c] * x[e' - c*q]",
                  lambda: const_div("%"), check=check_lowering))
    register(Rule("Q-mod-size", PASS,
                  "x[e % N] -> sum_{q=qlo..qhi} [N*q <= e < N*q + N] * x[e - N*q]",
                  size_mod, check=check_lowering))
    register(Rule("Q-index-array", PASS, "x[P[i]] -> sum t:m. [P(i, t)] * x[t]",
                  index_array, check=check_lowering))
    register(Rule("Q-compare", PASS,
                  "[e // c == k] -> [c*k <= e < c*k + c]; [P[i] == j] -> [P(i, j)]; "
                  "else exists q. [pin(q) and cmp]", compare, check=check_lowering))
    register(Rule("Q-adjoint", PASS,
                  "vjp of x[P[i]], x[e // c], x[e % N]: a gather over the inverse relation",
                  lambda: st.one_of(index_array(), const_div("//"), size_mod()),
                  check=check_adjoint))


_register()
