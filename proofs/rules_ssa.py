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

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Cmp, Param, tensor
from tensorlang.passes.ssa import bindings, to_ssa

# ---------------------------------------------------------------------------------------------
# Random gen-pushed programs

N, M = Affine.var("N"), Affine.var("M")

# Builtins whose values stay finite on the bounded values these programs compute (the
# Iverson algebra is exact on finite reals; 0 * inf would tell hoisting apart).
SAFE_FNS: tuple[str, ...] = ("sin", "cos", "tanh", "sigmoid", "softplus", "abs", "relu",
                             "square", "max", "min", "pow")

PARAMS: tuple[Param, ...] = (
    Param("N", ast.TSize()), Param("M", ast.TSize()), Param("s", ast.REAL),
    Param("x", tensor([N])), Param("y", tensor([M])), Param("B", tensor([N, M])),
    Param("E", ast.TRel((N, M))), Param("q", ast.TArr(N, ast.TPair(ast.REAL, ast.REAL))),
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


def _index_value(g: _Gen, scope: list[tuple[str, Affine]]) -> ast.IndexValue:
    """An index value (SPEC 12): an affine of the indices in scope, or a size."""
    a = _affine(g, scope)
    return ast.IndexValue(a if a.terms else a + Affine.var(g.draw(st.sampled_from(["N", "M"]))))


def _pred(g: _Gen, scope: list[tuple[str, Affine]], depth: int = 0) -> ast.Pred:
    k = g.draw(st.integers(0, 9 if depth == 0 else 5))
    if k <= 4:
        op = g.draw(st.sampled_from(Cmp.OPS))
        return Cmp(op, _affine(g, scope), _affine(g, scope))
    if k == 5:
        return ast.RelCall("E", (_index(g, scope, N), _index(g, scope, M)))
    if k == 6 and scope:
        t = g.name("t")
        v = Affine.var(g.draw(st.sampled_from([n for n, _ in scope])))
        return ast.Exists(t, N, Cmp("==", v, Affine.var(t) * 2))
    if k == 7:
        return ast.And(_pred(g, scope, depth + 1), _pred(g, scope, depth + 1))
    if k == 8:
        return ast.Or(_pred(g, scope, depth + 1), _pred(g, scope, depth + 1))
    return Cmp("<=", _affine(g, scope), _affine(g, scope))


def _read(g: _Gen, scope: list[tuple[str, Affine]]) -> ast.Expr:
    name, path, shape = g.draw(st.sampled_from(g.reads))
    base: ast.Expr = ast.Var(name)
    for k in path:
        base = ast.Proj(base, k)
    if not shape:
        return base
    return ast.Access(base, tuple(_index(g, scope, s) for s in shape))


def _scalar(g: _Gen, scope: list[tuple[str, Affine]], depth: int) -> ast.Expr:
    k = g.draw(st.integers(0, 10 if depth > 0 else 2))
    if k <= 1:
        return _read(g, scope)
    if k == 2:
        if g.draw(st.integers(0, 2)) == 0:
            return _index_value(g, scope)
        return ast.Const(g.draw(st.sampled_from([0.0, 1.0, 2.0, -1.0, 0.5])))
    sub = lambda: _scalar(g, scope, depth - 1)  # noqa: E731
    if k == 3:
        return ast.Add(sub(), sub())
    if k in (4, 5):
        return ast.Mul(sub(), sub())
    if k == 6:
        return ast.Iverson(_pred(g, scope), sub())
    if k == 7:
        fn = g.draw(st.sampled_from(SAFE_FNS))
        nargs, nparams = ast.BUILTINS[fn]
        params = (g.draw(st.sampled_from([2.0, 3.0])),) if nparams else ()
        return ast.Call(fn, tuple(sub() for _ in range(nargs)), params)
    if g.no_sum:
        return ast.Mul(sub(), sub())
    # k in 8..10: a sum (sometimes a nest, sometimes over a product of reads)
    sums = [(g.name("j"), g.draw(st.sampled_from([N, M])))]
    if k == 9:
        sums.append((g.name("j"), g.draw(st.sampled_from([N, M]))))
    inner = scope + sums
    if k == 10:
        body: ast.Expr = ast.Mul(_read(g, inner), _read(g, inner))
        if g.draw(st.booleans()):
            body = ast.Iverson(_pred(g, inner), body)
    else:
        body = _scalar(g, inner, depth - 1)
    for name, size in reversed(sums):
        body = ast.Sum(name, size, body)
    return body


def _binding(g: _Gen, depth: int) -> tuple[ast.Expr, tuple[Affine, ...]]:
    shape = g.draw(st.sampled_from([(), (N,), (M,), (N, M)]))
    scope = [(g.name("i"), s) for s in shape]
    e = _scalar(g, scope, depth)
    for name, size in reversed(scope):
        e = ast.Gen(name, size, e)
    return e, shape


@st.composite
def genpushed_programs(draw: Callable, max_bindings: int = 3, depth: int = 3,
                       min_size: int = 0, max_size: int = 3) -> tuple[ast.Def, dict[str, Any]]:
    """A random definition in the gen push-out normal form, with random inputs."""
    g = _Gen(draw, itertools.count(), list(READABLE))
    lets: list[tuple[str, ast.Expr]] = []
    for _ in range(draw(st.integers(1, max_bindings))):
        e, shape = _binding(g, depth)
        name = g.name("b")
        lets.append((name, e))
        g.reads.append((name, (), shape))
    outs = [draw(st.sampled_from(g.reads[len(READABLE):]))]
    if draw(st.booleans()):
        outs.append(draw(st.sampled_from(g.reads)))

    def leaf(r: tuple[str, tuple[int, ...], tuple[Affine, ...]]) -> ast.Expr:
        name, path, shape = r
        scope = [(g.name("o"), s) for s in shape]
        e = _read(_Gen(draw, g.counter, [r]), scope) if not shape else None
        if e is None:
            base: ast.Expr = ast.Var(name)
            for k in path:
                base = ast.Proj(base, k)
            e = ast.Access(base, tuple(Affine.var(n) for n, _ in scope))
            for n, s in reversed(scope):
                e = ast.Gen(n, s, e)
        return e

    body: ast.Expr = leaf(outs[-1])
    for r in reversed(outs[:-1]):
        body = ast.Pair(leaf(r), body)
    for name, value in reversed(lets):
        body = ast.Let(name, value, body)
    d = ast.Def("rand", PARAMS, None, body)
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


# ---------------------------------------------------------------------------------------------
# Catalogue entries: one per conversion case

RESTRICTED = frozenset({"log", "sqrt", "recip", "tan", "dtan", "pow"})


def _top(g: _Gen, scope: list[tuple[str, Affine]], case: str) -> ast.Expr:
    """A scalar expression whose outermost construct is the given conversion case."""
    sub = lambda: _scalar(g, scope, 1)  # noqa: E731
    if case == "SSA-read":
        return _read(g, scope)
    if case == "SSA-const":
        return ast.Const(g.draw(st.sampled_from([1.0, -2.5, 0.0, 3.0])))
    if case == "SSA-index":
        return _index_value(g, scope)
    if case == "SSA-iverson":
        return ast.Iverson(_pred(g, scope), _scalar(g, scope, 2))
    if case == "SSA-add":
        return ast.Add(_scalar(g, scope, 2), _scalar(g, scope, 2))
    if case == "SSA-contract":
        return ast.Mul(_scalar(g, scope, 2), _scalar(g, scope, 2))
    if case == "SSA-map":
        fn = g.draw(st.sampled_from(sorted(ast.BUILTINS)))
        nargs, nparams = ast.BUILTINS[fn]
        params = (g.draw(st.sampled_from([2.0, 0.5, -1.0])),) if nparams else ()
        args = []
        for _ in range(nargs):  # restricted domains: positive (or bounded) arguments
            a = sub()
            if fn in RESTRICTED:
                if fn in ("tan", "dtan"):
                    a = ast.Call("tanh", (a,), ())
                else:
                    a = ast.Add(ast.Call("square", (a,), ()), ast.Const(1.0))
            args.append(a)
        return ast.Call(fn, tuple(args), params)
    if case in ("SSA-sum-contract", "SSA-reduce"):
        sums = [(g.name("j"), g.draw(st.sampled_from([N, M])))
                for _ in range(g.draw(st.integers(1, 2)))]
        inner = scope + sums
        if case == "SSA-sum-contract":
            body: ast.Expr = ast.Mul(_scalar(g, inner, 1), _scalar(g, inner, 1))
        else:
            body = g.draw(st.sampled_from(["read", "map", "add"]))
            body = {"read": lambda: _read(g, inner),
                    "map": lambda: ast.Call("sin", (_scalar(g, inner, 1),), ()),
                    "add": lambda: ast.Add(_scalar(g, inner, 1), _scalar(g, inner, 1))}[body]()
        if g.draw(st.booleans()):
            body = ast.Iverson(_pred(g, inner), body)
        for name, size in reversed(sums):
            body = ast.Sum(name, size, body)
        return body
    if case == "SSA-extreme":   # max/min over one index (SPEC 12), zeros of brackets included
        j, n = g.name("j"), g.draw(st.sampled_from([N, M]))
        inner = scope + [(j, n)]
        body = g.draw(st.sampled_from(["read", "map", "add"]))
        body = {"read": lambda: _read(g, inner),
                "map": lambda: ast.Call("sin", (_scalar(g, inner, 1),), ()),
                "add": lambda: ast.Add(_scalar(g, inner, 1), _scalar(g, inner, 1))}[body]()
        if g.draw(st.booleans()):
            body = ast.Iverson(_pred(g, inner), body)
        return g.draw(st.sampled_from([ast.Max, ast.Min]))(j, n, body)
    raise KeyError(case)


def _wrap_gens(scope: list[tuple[str, Affine]], e: ast.Expr) -> ast.Expr:
    for name, size in reversed(scope):
        e = ast.Gen(name, size, e)
    return e


def _eta(name: str, shape: tuple[Affine, ...], g: _Gen) -> ast.Expr:
    """`gen o. name[o]` (gen push-out's form of returning a variable)."""
    scope = [(g.name("o"), s) for s in shape]
    read: ast.Expr = ast.Access(ast.Var(name), tuple(Affine.var(n) for n, _ in scope)) if shape \
        else ast.Var(name)
    return _wrap_gens(scope, read)


def case_instances(case: str) -> st.SearchStrategy:
    """Gen-pushed definitions `let b = gen I. <case at the top> in gen o. b[o]` (for
    SSA-trivial, SSA-cse and SSA-dce: programs with an alias, a repeated binding, a dead
    binding), with inputs."""

    @st.composite
    def strategy(draw: Callable) -> tuple[ast.Def, dict[str, Any]]:
        g = _Gen(draw, itertools.count(), list(READABLE))
        shape = draw(st.sampled_from([(), (N,), (M,), (N, M)]))
        scope = [(g.name("i"), s) for s in shape]
        if case in ("SSA-gen", "SSA-trivial"):
            src = draw(st.sampled_from([r for r in READABLE if r[2] == shape] or
                                       [("s", (), ())]))
            shape = src[2]
            scope = [(g.name("i"), s) for s in shape]
            g.reads = [src]
            first = _wrap_gens(scope, _read(g, scope) if case == "SSA-gen" else
                               _eta_read(src, scope))
            g.reads = list(READABLE) + [("b0", (), shape)]
            scope2 = [(g.name("i"), s) for s in shape]
            body = ast.Let("b0", first,
                           _wrap_gens(scope2, ast.Call("sin", (_read(g, scope2),), ())))
        else:
            top = "SSA-add" if case in ("SSA-cse", "SSA-dce") else case
            e = _wrap_gens(scope, _top(g, scope, top))
            out = _eta("b0", shape, g)
            if case == "SSA-cse":  # the same binding twice, both read
                out = _wrap_gens(scope, ast.Add(
                    ast.Access(ast.Var("b0"), tuple(Affine.var(n) for n, _ in scope)) if scope
                    else ast.Var("b0"),
                    ast.Access(ast.Var("b1"), tuple(Affine.var(n) for n, _ in scope)) if scope
                    else ast.Var("b1")))
                body = ast.Let("b0", e, ast.Let("b1", e, out))
            elif case == "SSA-dce":  # a dead binding
                dead = _wrap_gens(scope, _scalar(g, scope, 2))
                body = ast.Let("b0", e, ast.Let("b1", dead, out))
            else:
                body = ast.Let("b0", e, out)
        return ast.Def("inst", PARAMS, None, body), draw(inputs())

    return strategy()


def _eta_read(src: tuple[str, tuple[int, ...], tuple[Affine, ...]],
              scope: list[tuple[str, Affine]]) -> ast.Expr:
    name, path, shape = src
    base: ast.Expr = ast.Var(name)
    for k in path:
        base = ast.Proj(base, k)
    return ast.Access(base, tuple(Affine.var(n) for n, _ in scope)) if shape else base


_TOP_TYPES: dict[str, tuple[type, ...]] = {
    "SSA-read": (ast.Access, ast.Var, ast.Proj), "SSA-const": (ast.Const,),
    "SSA-index": (ast.IndexValue,),
    "SSA-iverson": (ast.Iverson,), "SSA-add": (ast.Add,), "SSA-contract": (ast.Mul,),
    "SSA-map": (ast.Call,), "SSA-sum-contract": (ast.Sum,), "SSA-reduce": (ast.Sum,),
    "SSA-extreme": (ast.Max, ast.Min),
}


def _first_body(d: ast.Def) -> ast.Expr:
    binds, _ = bindings(d)
    if not binds:
        raise ValueError("no binding")
    e = binds[0][1]
    while isinstance(e, ast.Gen):
        e = e.body
    return e


def _sum_body(e: ast.Expr) -> ast.Expr:
    while isinstance(e, ast.Sum):
        e = e.body
    while isinstance(e, ast.Iverson):
        e = e.e
    return e


def make_apply(case: str) -> Callable[[ast.Def], ast.Def]:
    """The conversion of an instance of `case` (checked to be one), as a core Def."""

    def apply(d: ast.Def) -> ast.Def:
        if case in _TOP_TYPES:
            top = _first_body(d)
            if not isinstance(top, _TOP_TYPES[case]):
                raise ValueError(f"{case} does not apply: the binding is a {type(top).__name__}")
            if case == "SSA-sum-contract" and not isinstance(_sum_body(top), ast.Mul):
                raise ValueError("SSA-sum-contract needs a sum of a product")
            if case == "SSA-reduce" and isinstance(_sum_body(top), ast.Mul):
                raise ValueError("SSA-reduce needs a sum of a non-product")
        binds, out = bindings(d)
        if case in ("SSA-gen", "SSA-trivial") and not isinstance(
                _first_body(d), (ast.Access, ast.Var, ast.Proj)):
            raise ValueError(f"{case} does not apply: the first binding is not a read")
        if case == "SSA-cse" and len({id(e) for _, e in binds}) == len(binds):
            raise ValueError("SSA-cse does not apply: no two bindings are equal")
        if case == "SSA-dce":
            read = set().union(ast.free_vars(out), *(ast.free_vars(e) for _, e in binds))
            if all(name in read for name, _ in binds):
                raise ValueError("SSA-dce does not apply: every binding is read")
        share = case == "SSA-cse"
        prune = case == "SSA-dce"
        return tssa.to_core(to_ssa(d, share=share, prune=prune))

    return apply


SCHEMAS: dict[str, str] = {
    "SSA-read": "gen I. x[A] -> v = x (input), read as the operand x[A]",
    "SSA-const": "gen I. [P] * c -> v = gen I. [P] * c (const); 0 is the structural zero",
    "SSA-index": "gen I. a(I) -> v = gen I'. a(I') (index), read as v[I'] (I': the indices "
                 "a mentions)",
    "SSA-iverson": "gen I. [P] * ([p] * s) -> s converted under mask P and p, guard p",
    "SSA-add": "gen I. [P] * (s1 + s2) -> v = gen I. [P] * ([G1] * u1[A1] + [G2] * u2[A2])",
    "SSA-contract": "gen I. [P] * (s1 * s2) -> v = gen I. [P and G1 and G2] * c * u1[A1] * u2[A2]",
    "SSA-map": "gen I. [P] * f(s1, ..) -> u_k = gen I. [P] * s_k; v = gen I. [P] * f(u1[I], ..)",
    "SSA-sum-contract": "gen I. [P] * sum J. s1 * s2 -> v = gen I. sum J. [P and G] * c * u1[A1] * u2[A2]",
    "SSA-reduce": "gen I. [P] * sum J. s -> u = gen I, J. [P] * s; v = gen I. sum J. [P and G] * u[I, J]",
    "SSA-extreme": "gen I. [P] * max j. s -> u = gen I, j. s (exact); v = gen I. [P] * max j. "
                   "u[I, j]  (also min)",
    "SSA-gen": "let x = gen I. s in e -> v = <statement of s over I>; e{x := v}",
    "SSA-trivial": "v = gen I. u[I] (u of shape I) -> v := u (statement dropped)",
    "SSA-cse": "v1 = rhs; v2 = rhs -> v1 = rhs; v2 := v1 (hash-consing)",
    "SSA-dce": "v = rhs, v not read by the output -> (dropped)",
}


def _register() -> None:
    try:
        from .catalogue import PassEntry, Rule, register, register_pass
    except ImportError:  # the catalogue is optional for the strategies above
        return
    for case, schema in SCHEMAS.items():
        register(Rule(case, "ssa", schema, (lambda c=case: case_instances(c)),
                      make_apply(case)))
    from tensorlang import pipeline

    from .normal_forms_ssa import is_tensor_ssa
    register_pass(PassEntry("ssa", lambda d: pipeline.run_to(d, pipeline.previous("ssa")),
                            to_ssa, is_tensor_ssa, tssa.to_core))


_register()
