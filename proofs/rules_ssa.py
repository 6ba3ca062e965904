"""Catalogue entries of the Tensor-SSA conversion (SPEC 5, SPEC 10), and hypothesis
strategies drawing gen-pushed programs (SPEC 4 post-condition) with inputs.

One entry per conversion case of `passes/ssa.py` (`CASES`).  An entry's instances are
small gen-pushed definitions whose (single) binding has that case at its top, with the
sub-expressions drawn at random; `apply` is the conversion (`to_core(to_ssa(d))`), checked
to start with that case.  The conversion cases keep meaning and cost (equal); `SSA-cse`
and `SSA-dce` only remove statements (cost lowered).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from tensorlang import ast as A
from tensorlang import tssa
from tensorlang.ast import Affine, Cmp, Param, tensor
from tensorlang.passes.ssa import bindings, to_ssa

# ---------------------------------------------------------------------------------------------
# Random gen-pushed programs

N, M = Affine.var("N"), Affine.var("M")

# Builtins whose values stay finite on the bounded values these programs compute (the
# Iverson algebra is exact on finite reals; 0 * inf would tell hoisting apart).
SAFE_FNS: tuple[str, ...] = ("sin", "cos", "tanh", "sigmoid", "softplus", "abs", "relu",
                             "square", "max", "min", "pow")

PARAMS: tuple[Param, ...] = (
    Param("N", A.TSize()), Param("M", A.TSize()), Param("s", A.REAL),
    Param("x", tensor([N])), Param("y", tensor([M])), Param("B", tensor([N, M])),
    Param("E", A.TRel((N, M))), Param("q", A.TArr(N, A.TPair(A.REAL, A.REAL))),
)

# Real-valued reads: (name, projection path, shape)
READABLE: tuple[tuple[str, tuple[int, ...], tuple[Affine, ...]], ...] = (
    ("s", (), ()), ("x", (), (N,)), ("y", (), (M,)), ("B", (), (N, M)),
    ("q", (0,), (N,)), ("q", (1,), (N,)),
)


@dataclass
class _Gen:
    """State of one random program: names in use and readable bindings."""

    draw: Callable
    counter: itertools.count
    reads: list[tuple[str, tuple[int, ...], tuple[Affine, ...]]]
    no_sum: bool = False

    def name(self, stem: str) -> str:
        return f"{stem}{next(self.counter)}"


def _index(g: _Gen, scope: list[tuple[str, Affine]], size: Affine) -> Affine:
    """An affine index into a dimension of `size`: mostly in range, sometimes shifted."""
    same = [n for n, s in scope if s == size]
    choice = g.draw(st.integers(0, 5))
    if not scope or choice == 5:
        return Affine.lit(g.draw(st.integers(0, 1)))
    pool = same if same and choice < 3 else [n for n, _ in scope]
    v = Affine.var(g.draw(st.sampled_from(pool)))
    if choice == 3:
        return v + g.draw(st.sampled_from([-1, 1]))
    if choice == 4 and same:
        return size - 1 - v
    return v


def _affine(g: _Gen, scope: list[tuple[str, Affine]]) -> Affine:
    if not scope:
        return Affine.lit(g.draw(st.integers(0, 2)))
    v = Affine.var(g.draw(st.sampled_from([n for n, _ in scope])))
    return v * g.draw(st.sampled_from([1, 1, 2])) + g.draw(st.integers(-1, 1))


def _pred(g: _Gen, scope: list[tuple[str, Affine]], depth: int = 0) -> A.Pred:
    k = g.draw(st.integers(0, 9 if depth == 0 else 5))
    if k <= 4:
        op = g.draw(st.sampled_from(Cmp.OPS))
        return Cmp(op, _affine(g, scope), _affine(g, scope))
    if k == 5:
        return A.RelCall("E", (_index(g, scope, N), _index(g, scope, M)))
    if k == 6 and scope:
        t = g.name("t")
        v = Affine.var(g.draw(st.sampled_from([n for n, _ in scope])))
        return A.Exists(t, N, Cmp("==", v, Affine.var(t) * 2))
    if k == 7:
        return A.And(_pred(g, scope, depth + 1), _pred(g, scope, depth + 1))
    if k == 8:
        return A.Or(_pred(g, scope, depth + 1), _pred(g, scope, depth + 1))
    return Cmp("<=", _affine(g, scope), _affine(g, scope))


def _read(g: _Gen, scope: list[tuple[str, Affine]]) -> A.Expr:
    name, path, shape = g.draw(st.sampled_from(g.reads))
    base: A.Expr = A.Var(name)
    for k in path:
        base = A.Proj(base, k)
    if not shape:
        return base
    return A.Access(base, tuple(_index(g, scope, s) for s in shape))


def _scalar(g: _Gen, scope: list[tuple[str, Affine]], depth: int) -> A.Expr:
    k = g.draw(st.integers(0, 10 if depth > 0 else 2))
    if k <= 1:
        return _read(g, scope)
    if k == 2:
        return A.Const(g.draw(st.sampled_from([0.0, 1.0, 2.0, -1.0, 0.5])))
    sub = lambda: _scalar(g, scope, depth - 1)  # noqa: E731
    if k == 3:
        return A.Add(sub(), sub())
    if k in (4, 5):
        return A.Mul(sub(), sub())
    if k == 6:
        return A.Iverson(_pred(g, scope), sub())
    if k == 7:
        fn = g.draw(st.sampled_from(SAFE_FNS))
        nargs, nparams = A.BUILTINS[fn]
        params = (g.draw(st.sampled_from([2.0, 3.0])),) if nparams else ()
        return A.Call(fn, tuple(sub() for _ in range(nargs)), params)
    if g.no_sum:
        return A.Mul(sub(), sub())
    # k in 8..10: a sum (sometimes a nest, sometimes over a product of reads)
    sums = [(g.name("j"), g.draw(st.sampled_from([N, M])))]
    if k == 9:
        sums.append((g.name("j"), g.draw(st.sampled_from([N, M]))))
    inner = scope + sums
    if k == 10:
        body: A.Expr = A.Mul(_read(g, inner), _read(g, inner))
        if g.draw(st.booleans()):
            body = A.Iverson(_pred(g, inner), body)
    else:
        body = _scalar(g, inner, depth - 1)
    for name, size in reversed(sums):
        body = A.Sum(name, size, body)
    return body


def _binding(g: _Gen, depth: int) -> tuple[A.Expr, tuple[Affine, ...]]:
    shape = g.draw(st.sampled_from([(), (N,), (M,), (N, M)]))
    scope = [(g.name("i"), s) for s in shape]
    e = _scalar(g, scope, depth)
    for name, size in reversed(scope):
        e = A.Gen(name, size, e)
    return e, shape


@st.composite
def genpushed_programs(draw: Callable, max_bindings: int = 3, depth: int = 3,
                       min_size: int = 0, max_size: int = 3) -> tuple[A.Def, dict[str, Any]]:
    """A random definition in the gen push-out normal form, with random inputs."""
    g = _Gen(draw, itertools.count(), list(READABLE))
    lets: list[tuple[str, A.Expr]] = []
    for _ in range(draw(st.integers(1, max_bindings))):
        e, shape = _binding(g, depth)
        name = g.name("b")
        lets.append((name, e))
        g.reads.append((name, (), shape))
    outs = [draw(st.sampled_from(g.reads[len(READABLE):]))]
    if draw(st.booleans()):
        outs.append(draw(st.sampled_from(g.reads)))

    def leaf(r: tuple[str, tuple[int, ...], tuple[Affine, ...]]) -> A.Expr:
        name, path, shape = r
        scope = [(g.name("o"), s) for s in shape]
        e = _read(_Gen(draw, g.counter, [r]), scope) if not shape else None
        if e is None:
            base: A.Expr = A.Var(name)
            for k in path:
                base = A.Proj(base, k)
            e = A.Access(base, tuple(Affine.var(n) for n, _ in scope))
            for n, s in reversed(scope):
                e = A.Gen(n, s, e)
        return e

    body: A.Expr = leaf(outs[-1])
    for r in reversed(outs[:-1]):
        body = A.Pair(leaf(r), body)
    for name, value in reversed(lets):
        body = A.Let(name, value, body)
    d = A.Def("rand", PARAMS, None, body)
    return d, draw(inputs(min_size, max_size))


@st.composite
def inputs(draw: Callable, min_size: int = 0, max_size: int = 3) -> dict[str, Any]:
    """Random arguments for `PARAMS`."""
    n, m = draw(st.integers(min_size, max_size)), draw(st.integers(min_size, max_size))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return {
        "N": n, "M": m, "s": float(rng.uniform(-1.5, 1.5)),
        "x": rng.uniform(-1.5, 1.5, n), "y": rng.uniform(-1.5, 1.5, m),
        "B": rng.uniform(-1.5, 1.5, (n, m)), "E": rng.random((n, m)) < 0.5,
        "q": (rng.uniform(-1.5, 1.5, n), rng.uniform(-1.5, 1.5, n)),
    }
