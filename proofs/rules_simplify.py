"""Catalogue entries of the simplifier (SPEC 7, SPEC 10): one per rewrite rule of
`passes/simplify/rules_egg.RULES` and of the Python rules (`passes/simplify/rules_py`), and
the whole pass.

An instance is a small gen-pushed definition (the form `tssa.to_core` gives a Tensor-SSA
program) in which the rule has a redex.  `apply` runs *that rule only*, through the same
machinery as `simplify` (lowering, the egglog rule, extraction, conversion back through
`to_ssa`):

* clean rules, and the search rules' equalities in their cost-lowering orientation, are
  applied whatever the cost (`apply_rules(..., choose="new")`: the extracted term uses the
  nodes the rule made), on programs with size parameters: the check shows the rewrite keeps
  the meaning and does not raise the cost;
* `S-mul-assoc` and `S-licm` trade costs that depend on the sizes (which grouping, whether to
  hoist): their instances have literal sizes and `apply` extracts by the cost model, which
  then is exact -- the check shows the rule keeps the meaning and that choosing by the cost
  model does not raise the cost;
* the Python rules (`S-pred-canon`, `S-inline`, `S-sum-solve`, `S-fold-call`, `S-cse`) are
  functions on core programs (`passes/simplify/rules_py`).

The equalities the e-graph uses in both directions (`S-distribute`, `S-sum-add`,
`S-sum-factor`, `S-mul-assoc`) are registered in the orientation the schema states; meaning
is symmetric, and the whole-pass check (`simplify` on random programs) covers the
extraction's choices.
"""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import (Access, Add, Affine, Call, Cmp, Const, Def, Gen, Iverson, Let, Mul,
                            Param, Sum, TRel, TSize, Var, tensor)
from tensorlang.passes.simplify import apply_rules
from tensorlang.passes.simplify.encode import InlinePolicy
from tensorlang.passes.simplify.rules_egg import RULES as EGGLOG_RULES
from tensorlang.passes.simplify.rules_py import (canon_brackets, fold_calls,
                                                 inline_single_use, solve_sums)
from tensorlang.passes.ssa import to_ssa

N, M = Affine.var("N"), Affine.var("M")


def _aff(n: Affine | int) -> Affine:
    return n if isinstance(n, Affine) else Affine.lit(n)


def params(n: Affine | int, m: Affine | int, sizes: bool = True) -> tuple[Param, ...]:
    """s: R, x, z: R[n], y: R[m], B, C: R[n, m], E: rel(n, m) (with size parameters N, M
    when the dimensions are symbolic)."""
    out: list[Param] = []
    if sizes:
        out += [Param("N", TSize()), Param("M", TSize())]
    out += [Param("s", ast.REAL), Param("x", tensor([n])), Param("z", tensor([n])),
            Param("y", tensor([m])), Param("B", tensor([n, m])), Param("C", tensor([n, m])),
            Param("E", TRel((_aff(n), _aff(m))))]
    return tuple(out)


SYM = params(N, M)


def rd(name: str, *idx: Affine | str) -> ast.Expr:
    ix = tuple(Affine.var(i) if isinstance(i, str) else i for i in idx)
    return Access(Var(name), ix) if ix else Var(name)


class Draw:
    """Random sub-terms over the indices i (range n) and j (range m)."""

    def __init__(self, draw: Callable) -> None:
        self.draw = draw

    def pick(self, xs: list) -> Any:
        return self.draw(st.sampled_from(xs))

    def over_i(self) -> ast.Expr:
        return self.pick([rd("x", "i"), rd("z", "i"), Mul(rd("x", "i"), rd("z", "i")),
                          Call("sin", (rd("x", "i"),), ()), Add(rd("z", "i"), rd("s"))])

    def over_j(self) -> ast.Expr:
        return self.pick([rd("y", "j"), Mul(rd("y", "j"), rd("y", "j")),
                          Call("tanh", (rd("y", "j"),), ()), Add(rd("y", "j"), rd("s"))])

    def over_ij(self) -> ast.Expr:
        return self.pick([rd("B", "i", "j"), rd("C", "i", "j"),
                          Mul(rd("B", "i", "j"), rd("y", "j")),
                          Add(rd("B", "i", "j"), rd("C", "i", "j"))])

    def const(self) -> float:
        return self.pick([2.0, -1.0, 0.5, 3.0, -2.5])

    def cmps(self, n: Affine) -> list[ast.Pred]:
        """Comparisons of i that its range 0 <= i < n does not imply."""
        i = Affine.var("i")
        return [Cmp("<=", i, Affine.lit(0)), Cmp("<=", i, Affine.lit(1)),
                Cmp("<", Affine.lit(1), i), Cmp("==", i, Affine.lit(1)),
                Cmp("==", i, Affine.lit(2)), Cmp("<", i + 1, n), Cmp("<=", i + 3, n)]

    def cmp_i(self, n: Affine) -> ast.Pred:
        return self.pick(self.cmps(n))


def gen_i(n: Affine, e: ast.Expr) -> ast.Expr:
    return Gen("i", n, e)


def program(ps: tuple[Param, ...], *binds: tuple[str, ast.Expr]) -> Def:
    body: ast.Expr = Var(binds[-1][0])
    for name, value in reversed(binds):
        body = Let(name, value, body)
    return Def("inst", ps, None, body)


def _args(draw: Callable, d: Def, literal: bool) -> dict[str, Any]:
    from tensorlang.testing import random_args
    sizes = {} if literal else {"N": draw(st.integers(0, 3)), "M": draw(st.integers(0, 3))}
    return random_args(d, sizes, draw(st.integers(0, 2**31 - 1)), rel_encoding="bool")


def instances(build: Callable[[Draw, Affine, Affine], list[tuple[str, ast.Expr]]],
              literal: bool = False) -> Callable[[], st.SearchStrategy]:
    """The strategy of (Def, args) whose bindings `build` makes (sizes N, M, or literal)."""
    def strategy() -> st.SearchStrategy:
        @st.composite
        def s(draw: Callable) -> tuple[Def, dict[str, Any]]:
            if literal:
                n, m = draw(st.integers(2, 4)), draw(st.integers(2, 4))
                ps, nn, mm = params(n, m, sizes=False), Affine.lit(n), Affine.lit(m)
            else:
                ps, nn, mm = SYM, N, M
            d = program(ps, *build(Draw(draw), nn, mm))
            return d, _args(draw, d, literal)
        return s()
    return strategy


# ---------------------------------------------------------------------------------------------
# Instances per rule


def _iv_false(g: Draw, n: Affine, m: Affine) -> list:
    c = g.draw(st.integers(0, 2))
    i = Affine.var("i")
    p, q = g.pick([(Cmp("==", i, Affine.lit(c)), Cmp("==", i, Affine.lit(c + 1))),
                   (Cmp("<=", i, Affine.lit(c)), Cmp("<", Affine.lit(c), i))])
    return [("b", gen_i(n, Iverson(p, Iverson(q, g.over_i()))))]


def _iv_and(g: Draw, n: Affine, m: Affine) -> list:
    p = g.cmp_i(n)
    q = g.draw(st.sampled_from([c for c in g.cmps(n) if c is not p]))
    return [("b", gen_i(n, Iverson(p, Iverson(q, rd(g.pick(["x", "z"]), "i")))))]


def _iv_implied(g: Draw, n: Affine, m: Affine) -> list:
    p = g.cmp_i(n)
    return [("t", gen_i(n, Iverson(p, g.over_i()))),
            ("b", gen_i(n, Iverson(p, rd("t", "i"))))]


def _iv_push(g: Draw, n: Affine, m: Affine) -> list:
    p = g.cmp_i(n)
    body = g.pick([Add(rd("x", "i"), rd("z", "i")), Call("sin", (rd("x", "i"),), ()),
                   Sum("j", m, rd("B", "i", "j"))])
    return [("b", gen_i(n, Iverson(p, body)))]


def _iv_sum(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", gen_i(n, Sum("j", m, Iverson(g.cmp_i(n), g.over_ij()))))]


def _box_drop(g: Draw, n: Affine, m: Affine) -> list:
    a = g.pick([Call("sin", (rd("x", "i"),), ()), Add(rd("x", "i"), rd("z", "i"))])
    return [("b", gen_i(n, Sum("j", m, Mul(a, g.over_j()))))]


def _mul_zero(g: Draw, n: Affine, m: Affine) -> list:
    e = g.over_i()
    return [("b", gen_i(n, g.pick([Mul(Const(0.0), e), Mul(e, Const(0.0))])))]


def _mul_one(g: Draw, n: Affine, m: Affine) -> list:
    e = g.over_i()
    return [("b", gen_i(n, g.pick([Mul(Const(1.0), e), Mul(e, Const(1.0))])))]


def _add_zero(g: Draw, n: Affine, m: Affine) -> list:
    e = g.over_i()
    return [("b", gen_i(n, g.pick([Add(Const(0.0), e), Add(e, Const(0.0))])))]


def _sum_zero(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", gen_i(n, Add(Sum("j", m, Const(0.0)), g.over_i())))]


def _fold(g: Draw, n: Affine, m: Affine) -> list:
    a, b, e = g.const(), g.const(), g.over_i()
    return [("b", gen_i(n, g.pick([Mul(Const(a), Mul(Const(b), e)),
                                   Add(Mul(Const(a), Const(b)), e),
                                   Mul(Add(Const(a), Const(b)), e)])))]


def _sum_factor(g: Draw, n: Affine, m: Affine) -> list:
    # a read, not a computed term: those are pinned to the loop over j (S-box-drop frees them)
    a, b = g.pick([rd("x", "i"), rd("z", "i")]), g.over_j()
    return [("b", gen_i(n, Sum("j", m, g.pick([Mul(a, b), Mul(b, a)]))))]


def _sum_push(g: Draw, n: Affine, m: Affine) -> list:
    a = g.pick([rd("x", "i"), rd("z", "i")])
    return [("b", gen_i(n, Mul(a, Sum("j", m, g.over_ij()))))]


def _mul_comm(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", gen_i(n, Mul(g.over_i(), rd("x", "i"))))]


def _add_comm(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", gen_i(n, Add(g.over_i(), rd("z", "i"))))]


def _sum_swap(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", Sum("i", n, Sum("j", m, Mul(g.over_ij(), g.over_i()))))]


def _factor(g: Draw, n: Affine, m: Affine) -> list:
    a = g.over_i()
    b, c = rd("x", "i"), g.pick([rd("z", "i"), Call("cos", (rd("z", "i"),), ())])
    return [("b", gen_i(n, Add(Mul(a, b), Mul(a, c))))]


def _sum_split(g: Draw, n: Affine, m: Affine) -> list:
    return [("b", gen_i(n, Sum("j", m, Add(g.over_ij(), g.over_j()))))]


def _assoc(g: Draw, n: Affine, m: Affine) -> list:
    # (B[i,j] * y[j]) * c(j): grouping y[j] * c(j) computes it once per j, not per (i, j)
    c = g.pick([rd("y", "j"), Call("tanh", (rd("y", "j"),), ()), Add(rd("y", "j"), rd("s"))])
    return [("b", gen_i(n, Gen("j", m, Mul(Mul(rd(g.pick(["B", "C"]), "i", "j"), rd("y", "j")),
                                          c))))]


def _licm(g: Draw, n: Affine, m: Affine) -> list:
    inv = g.pick([Mul(rd("s"), rd("s")), Call("exp", (rd("s"),), ()),
                  Sum("j", m, rd("y", "j"))])
    return [("b", gen_i(n, Mul(g.over_i(), inv)))]


def _pred_canon(g: Draw, n: Affine, m: Affine) -> list:
    i = Affine.var("i")
    noise = g.pick([Cmp("<", i, n), Cmp("<=", Affine.lit(0), i), Cmp("<", i, n + 1)])
    p = ast.And(noise, g.cmp_i(n))
    return [("b", gen_i(n, Iverson(p, g.over_i())))]


def _inline(g: Draw, n: Affine, m: Affine) -> list:
    t = g.pick([Sum("j", m, Mul(rd("B", "i", "j"), rd("y", "j"))),
                Iverson(g.cmp_i(n), g.over_i()), Mul(rd("x", "i"), rd("s"))])
    return [("t", gen_i(n, t)), ("b", gen_i(n, Mul(rd("t", "i"), g.over_i())))]


def _sum_solve(g: Draw, n: Affine, m: Affine) -> list:
    i, k = Affine.var("i"), Affine.var("k")
    pin = g.pick([Cmp("==", k, i), Cmp("==", k + 1, i), Cmp("==", k, Affine.lit(1)),
                  Cmp("==", k + k, i)])
    return [("b", gen_i(n, Sum("k", n, Iverson(pin, Mul(rd("x", "k"), rd("z", "i"))))))]


def _fold_call(g: Draw, n: Affine, m: Affine) -> list:
    fn = g.pick(["sin", "exp", "tanh", "square"])
    return [("b", gen_i(n, Mul(Call(fn, (Const(g.const()),), ()), g.over_i())))]


def _cse(g: Draw, n: Affine, m: Affine) -> list:
    e = g.over_i()
    return [("t", gen_i(n, e)), ("u", gen_i(n, e)),
            ("b", gen_i(n, Add(rd("t", "i"), rd("u", "i"))))]


# ---------------------------------------------------------------------------------------------
# apply functions


def egglog_apply(rule: str, choose: str = "new") -> Callable[[Def], Def]:
    def apply(d: Def) -> Def:
        return apply_rules(d, [rule], choose=choose)
    return apply


def licm_apply(d: Def) -> Def:
    return apply_rules(d, [], choose="cost",
                       policy=InlinePolicy(enabled=False, solve=False, licm=True))


def cse_apply(d: Def) -> Def:
    """The lowering and conversion alone: equal statements become one (hash-consing in the
    e-graph and in `to_ssa`)."""
    binds = []
    body = d.body
    while isinstance(body, Let):
        binds.append(body.value)
        body = body.body
    if len(set(map(id, binds))) == len(binds):
        raise ValueError("S-cse needs two equal bindings")
    return tssa.to_core(to_ssa(d))


PYTHON_RULES: dict[str, tuple[str, Callable, Callable[[Def], Def], bool]] = {
    # name: (schema, instance builder, apply, literal sizes)
    "S-pred-canon": ("[p] -> [canon(p)]: comparisons implied by the index ranges dropped, "
                     "refuted ones make the bracket 0", _pred_canon, canon_brackets, False),
    "S-inline": ("u[A] (u = gen I. e read once) -> [0 <= A < n] * e{I := A}", _inline,
                 inline_single_use, False),
    "S-sum-solve": ("sum j. [j == a and q] * e -> [0 <= a < n and q{j:=a}] * e{j:=a} "
                    "(index solver)", _sum_solve, solve_sums, False),
    "S-fold-call": ("f(c1, ..) -> c (a call of constants is evaluated)", _fold_call,
                    fold_calls, False),
    "S-licm": ("gen I. e(I) * t, t not over I -> u = t; gen I. e(I) * u  (chosen by cost)",
               _licm, licm_apply, True),
    "S-cse": ("v1 = rhs; v2 = rhs -> one statement (hash-consing)", _cse, cse_apply, False),
}

EGGLOG_INSTANCES: dict[str, tuple[Callable, str, bool]] = {
    # name: (instance builder, extraction, literal sizes)
    "S-iv-false": (_iv_false, "new", False),
    "S-iv-and": (_iv_and, "new", False),
    "S-iv-implied": (_iv_implied, "new", False),
    "S-iv-push": (_iv_push, "new", False),
    "S-iv-sum": (_iv_sum, "new", False),
    "S-box-drop": (_box_drop, "new", False),
    "S-mul-zero": (_mul_zero, "new", False),
    "S-mul-one": (_mul_one, "new", False),
    "S-add-zero": (_add_zero, "new", False),
    "S-sum-zero": (_sum_zero, "new", False),
    "S-fold": (_fold, "new", False),
    "S-distribute": (_factor, "new", False),
    "S-sum-add": (_sum_split, "new", False),
    "S-sum-factor": (_sum_factor, "new", False),
    "S-sum-push": (_sum_push, "cost", True),
    "S-mul-comm": (_mul_comm, "new", False),
    "S-add-comm": (_add_comm, "new", False),
    "S-mul-assoc": (_assoc, "cost", True),
    "S-sum-swap": (_sum_swap, "new", False),
}

ORIENTED: dict[str, str] = {   # the direction the catalogue checks, for the equalities
    "S-distribute": "a * b + a * c -> a * (b + c)",
    "S-sum-add": "sum j. (a + b) -> [n_j >= 1] * (sum j. a + sum j. b)  (a, b dense)",
    "S-sum-factor": "sum j. a * b -> [n_j >= 1] * a * sum j. b  (j not free in a)",
    "S-sum-push": "a * sum j. b <-> sum j. a * b  (j not free in a), chosen by cost",
    "S-mul-assoc": "(a * b) * c <-> a * (b * c), chosen by cost",
    "S-mul-comm": "a * b -> b * a",
    "S-add-comm": "a + b -> b + a",
    "S-sum-swap": "sum j. sum k. e -> sum k. sum j. e",
}

SIMPLIFY_RULES: tuple[str, ...] = tuple(EGGLOG_INSTANCES) + tuple(PYTHON_RULES)


def schema(name: str) -> str:
    if name in PYTHON_RULES:
        return PYTHON_RULES[name][0]
    return ORIENTED.get(name, EGGLOG_RULES[name].schema)


def _register() -> None:
    from .catalogue import PassEntry, Rule, register, register_pass
    assert set(EGGLOG_INSTANCES) == {r for r in EGGLOG_RULES if EGGLOG_RULES[r].group != "analysis"}
    for name, (build, choose, literal) in EGGLOG_INSTANCES.items():
        register(Rule(name, "simplify", schema(name), instances(build, literal),
                      egglog_apply(name, choose)))
    for name, (text, build, apply, literal) in PYTHON_RULES.items():
        register(Rule(name, "simplify", text, instances(build, literal), apply))

    from tensorlang import pipeline
    from tensorlang.passes.simplify import simplify

    from .normal_forms_ssa import is_tensor_ssa
    register_pass(PassEntry(
        "simplify", lambda d: tssa.to_core(pipeline.run_to(d, "ssa")),
        lambda d: simplify(to_ssa(d), strict=True).program, is_tensor_ssa, tssa.to_core))


_register()

__all__ = ["SIMPLIFY_RULES", "PYTHON_RULES", "EGGLOG_INSTANCES", "schema", "instances",
           "params", "SYM"]
