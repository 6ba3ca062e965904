"""Catalogue entries of the linear-algebra box rules (SPEC 13): FWD-cholesky ... ADJ-eigh.

An instance is one box statement on random inputs where the box is defined: a symmetric
positive definite A with well separated eigenvalues (cholesky, eigh), a lower-triangular
factor with a dominant diagonal (and junk above it, which the box must ignore: trisolve,
trisolve_t, cholesky_inverse), a full-rank C with at least as many columns as rows (lq); a
right-hand side that is a matrix or a vector; random sizes 1..3; a random non-empty set of
differentiated operands.  The checks are those of every derivative rule
(rules_derivative.check_jvp / check_vjp: primal kept, finite differences, the dot-product
test, Tensor SSA) with the per-box budgets of `semantics.boxes`:
tangent <= JVP_CONST[box] C(f) + |in| + |out|,  vjp <= VJP_CONST[box] C(f) + |in| + |out|.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, Param, tensor
from tensorlang.ir.build import Builder
from tensorlang.ir.tssa import Program
from tensorlang.passes.jvp import JVP_RULES
from tensorlang.passes.vjp import VJP_RULES
from tensorlang.semantics.bounds import type_size
from tensorlang.semantics.boxes import JVP_CONST, VJP_CONST, out_shape

from .catalogue import Rule
from .rules_derivative import Instance, check_jvp, check_vjp

N, M = Affine.var("N"), Affine.var("M")
PARAMS: tuple[Param, ...] = (
    Param("N", ast.TSize()), Param("M", ast.TSize()), Param("A", tensor([N, N])),
    Param("B", tensor([N, M])), Param("b", tensor([N])), Param("C", tensor([N, M])),
)
OPERANDS: dict[str, list[list[str]]] = {
    "cholesky": [["A"]], "cholesky_inverse": [["A"]], "eigh": [["A"]], "lq": [["C"]],
    "trisolve": [["A", "B"], ["A", "b"]], "trisolve_t": [["A", "B"], ["A", "b"]],
}


def _values(fn: str, n: int, m: int, rng: np.random.Generator) -> dict[str, Any]:
    if fn in ("cholesky", "eigh"):
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        a = (q * (1.0 + np.arange(n) + 0.3 * rng.random(n))) @ q.T
    else:   # a triangular factor (the box reads the lower triangle only)
        a = rng.uniform(-0.5, 0.5, (n, n)) + np.diag(rng.uniform(1.5, 2.5, n))
    c = rng.standard_normal((n, m)) + np.eye(n, m) * 2.0
    return {"N": n, "M": m, "A": a, "B": rng.standard_normal((n, m)),
            "b": rng.standard_normal(n), "C": c}


def box_instances(fn: str) -> st.SearchStrategy:
    @st.composite
    def strategy(draw: Callable) -> Instance:
        operands = draw(st.sampled_from(OPERANDS[fn]))
        part = draw(st.integers(0, 1)) if fn in ast.PAIR_BOXES else 0
        b = Builder(PARAMS)
        vs = [b.input(x) for x in operands]
        out = b.box(fn, part, out_shape(fn, part, [b.shapes[v] for v in vs]), vs,
                    ", ".join(operands))
        p = b.program(out, name="inst", ret=tensor(b.shapes[out]))
        n = draw(st.integers(1, 3))
        m = n + draw(st.integers(0, 2)) if fn == "lq" else draw(st.integers(1, 3))
        args = _values(fn, n, m, np.random.default_rng(draw(st.integers(0, 2**32 - 1))))
        wrt = [x for x in operands if draw(st.booleans())] or [operands[0]]
        return p, args, wrt
    return strategy()


def _io(p: Program, args: dict[str, Any], wrt: Sequence[str]) -> int:
    sizes = {"N": int(args["N"]), "M": int(args["M"])}
    return sum(type_size(p.param_types[x], sizes) for x in wrt) + type_size(p.ret, sizes)


def _box_fn(name: str) -> str:
    return name.split("-", 1)[1]


def box_rule(name: str) -> Rule:
    """The catalogue entry of FWD-<box> / ADJ-<box>."""
    fn = _box_fn(name)
    fwd = name.startswith("FWD-")
    table = JVP_RULES if fwd else VJP_RULES
    const = (JVP_CONST if fwd else VJP_CONST)[fn]

    def budget(p: Program, args: dict[str, Any], cf: int, wrt: Sequence[str]) -> int:
        return const * cf + _io(p, args, wrt)

    check = check_jvp if fwd else check_vjp
    return Rule(name, table.kind, table.rules[name].schema,
                lambda: box_instances(fn), check=lambda inst: check(name, inst, budget))


__all__ = ["box_instances", "box_rule", "PARAMS"]
