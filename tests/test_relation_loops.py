"""Relation-driven loops of the Numba CPU kernels (issue 14; docs/backends.md "Storage" and
"Summation accuracy"): a relation-driven sum's coordinate loop runs as blocks; a chain of
coordinate vectors is computed in the CSR walk that reads the last (matfac's gradient in one
pass); coordinates are read as non-negative; and each `prange` body is a function of its own
(`backends/prange_bodies.py`).  Compiled kernels agree with the interpreter on random
relation-masked programs, at sizes where both the block and the short forms run."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, assert_same, slow_params, to_program
from tensorlang.semantics.interp import interpret
from tensorlang.testing import random_args

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import prange_bodies  # noqa: E402


def _source(fn) -> str:
    return numba_cpu.generated_source(fn.run_to("ssa"))


def test_matfac_sum_runs_its_coordinate_loop_as_blocks():
    """matfac f: the terms of the relation-driven sum go into a block buffer (the product
    computed first in the block loop's body), and the short case reads the same members."""
    src = _source(tl.load(str(EXAMPLES / "matfac.tl"))["matfac"])
    body = src.split("def tl_body0", 1)[1].split("\ndef ", 1)[0]
    assert re.search(r"_e\d+i = tl_nonneg\(_tbj\d+\)", body)
    assert re.search(r"_tb\d+\[_tbj\d+ - _tbb\d+\] = tl_square\(", body)
    assert body.count("j0 = tl_nonneg(rc0_Om[tl_nonneg(_e") == 2   # blocks, short loop
    assert re.search(r"for _pc0 in prange\(_pk0\):\n        tl_body0\(0 \+ \(_pc0 \* _pn0\)", src)
    assert "def tl_body0(_chunk_lo, _chunk_hi, " in src
    assert "    for _c7 in range(_chunk_lo, _chunk_hi):" in src


def test_matfac_gradient_is_one_pass_over_the_rows():
    src = _source(tl.load(str(EXAMPLES / "matfac.tl"))["matfac_grad"])
    assert src.count("prange(") == 1 and "rc0_Om[" not in src and "rc0_Om.shape" not in src
    assert "np.empty((rc" not in src


CHAINS = [
    # matfac's shape: the residual's square, its gradient in U and in V
    ("sum i:N, j:M. [E(i, j)] * (A[i, j] - sum k:K. U[i, k] * V[j, k]) ** 2", "U"),
    ("sum i:N, j:M. [E(i, j)] * (A[i, j] - sum k:K. U[i, k] * V[j, k]) ** 2", "V"),
    ("sum i:N, j:M. [E(i, j)] * tanh(A[i, j] * sum k:K. U[i, k] * V[j, k])", "U"),
    ("sum i:N, j:M. [E(i, j)] * exp(A[i, j]) * (sum k:K. U[i, k] * V[j, k]) ** 2", "U"),
    ("sum i:N, j:M. [E(i, j) and i != j] * (A[i, j] - sum k:K. U[i, k] * V[j, k]) ** 2",
     "U"),
]


# CI compiles the matfac chain and its gradient in U (on both engines); the gradient in V,
# the tanh and exp chains (the same loops around other scalar code) and the chain under
# `E(i, j) and i != j` run with -m slow (docs/decisions.md, "CI time").
@pytest.mark.parametrize("body,wrt", slow_params(CHAINS, lambda c: c != CHAINS[0]))
def test_relation_loops_compiled_agree_with_the_interpreter(body, wrt):
    """Compiled (Numba), f and gradient, on relations of several densities, at sizes whose
    coordinate chunks and CSR rows are long enough for blocks (and rows too short)."""
    src = (f"def f(N: size, M: size, K: size, E: rel(N, M), A: R[N, M], U: R[N, K], "
           f"V: R[M, K]) -> R:\n    return {body}\ndef g = grad(f, {wrt})\n")
    mod = tl.parse(src)
    for name in ("f", "g"):
        d = mod[name].core()
        c = numba_cpu.compile_program(to_program(d))
        for seed, (n, m, density) in enumerate(((40, 37, 0.3), (30, 200, 0.9), (7, 5, 0.2),
                                                (0, 3, 0.5), (20, 20, 0.0))):
            args = random_args(d, {"N": n, "M": m, "K": 3}, np.random.default_rng(seed),
                               density=density)
            # (the serial image for one program: it runs the same code, a body a call)
            for engine in ("jit", "aot") if body == CHAINS[0][0] and wrt == "U" else ("jit",):
                c.engine = engine
                assert_same(c(args), interpret(d, args), atol=1e-9)


# -- prange_bodies.outline ------------------------------------------------------------------

DECO = "@njit(parallel=False)"


def test_a_parallel_body_becomes_a_function_of_the_names_it_reads():
    body = ["    out = np.empty(n)",
            "    s = 2.0",
            "    for i in prange(0, n):",
            "        t = x[i] * s",
            "        out[i] = t + t",
            "    return (out,)"]
    funcs, new = prange_bodies.outline(body, ["n", "x"], DECO)
    assert funcs[:3] == [DECO, "def tl_body0(_chunk_lo, _chunk_hi, out, s, x):",
                         "    for i in range(_chunk_lo, _chunk_hi):"]
    assert funcs[3:5] == ["        t = x[i] * s", "        out[i] = t + t"]
    assert new[2:6] == ["    _pn0 = max(0, n - (0))", "    _pk0 = max(1, min(64, _pn0))",
                        "    for _pc0 in prange(_pk0):",
                        "        tl_body0(0 + (_pc0 * _pn0) // _pk0, "
                        "0 + ((_pc0 + 1) * _pn0) // _pk0, out, s, x)"]
    ns: dict = {"np": np, "prange": range, "njit": lambda **kw: (lambda f: f)}
    exec("\n".join(funcs + ["def k(n, x):", *new]), ns)
    for n in (0, 1, 4, 63, 64, 65, 200):   # chunks of every iteration, each once
        assert_same(ns["k"](n, np.arange(float(n)))[0], 4.0 * np.arange(float(n)), atol=0)


def test_bodies_whose_arrays_may_share_memory_keep_the_plain_decorator():
    """`distinct` (Numba's noalias pipeline) only for a body none of whose arguments may be
    a view of another: a transpose, a slice, a choice between arrays or a reshape shares."""
    views = ["    a = np.empty(n)", "    b = a.T", "    c = np.zeros(n)",
             "    d = c if n > 0 else x", "    e = np.ascontiguousarray(x)",
             "    f = c.reshape((n,))", "    g = np.empty(n)", "    t = x[0]"]
    group = prange_bodies.may_share(__import__("ast").parse(
        "\n".join(ln[4:] for ln in views)))
    assert group("a") == group("b") and group("c") == group("d") == group("x") == group("f")
    assert group("e") == group("x") and group("t") == group("x")
    assert len({group("a"), group("c"), group("g")}) == 3
    body = views + ["    for i in prange(0, n):", "        g[i] = a[i] + b[i]",
                    "    for i in prange(0, n):", "        a[i] = g[i] * 2.0",
                    "    return (g,)"]
    funcs, _ = prange_bodies.outline(body, ["n", "x"], DECO, distinct="@distinct")
    decorators = [funcs[k - 1] for k, f in enumerate(funcs) if f.startswith("def ")]
    assert decorators == [DECO, "@distinct"]   # (a, b, g: a shares; a, g: distinct)


def test_an_element_of_the_constants_is_no_view_of_them():
    """`v4 = tl_c[0]` reads a float out of the kernel's constants (`vectors`): it shares no
    memory with them, so a body given both still gets the noalias decorator (nbody's
    gradient and Hessian-vector product lost it, and with it their vectorised pair loop:
    26 -> 11 ms); a slice of them is still a view."""
    lines = ["v4 = tl_c[0]", "w = tl_c[1:3]"]
    group = prange_bodies.may_share(__import__("ast").parse("\n".join(lines)),
                                    frozenset({"tl_c"}))
    assert group("v4") != group("tl_c") and group("w") == group("tl_c")
    plain = prange_bodies.may_share(__import__("ast").parse("\n".join(lines)))
    assert plain("v4") == plain("tl_c")
    body = ["    v4 = tl_c[0]", "    for i in prange(0, n):", "        y[i] = v4 * x[i] + tl_c[1]",
            "    return (y,)"]
    for vectors, deco in ((frozenset({"tl_c"}), "@distinct"), (frozenset(), DECO)):
        funcs, _ = prange_bodies.outline(body, ["n", "x", "y", "tl_c"], DECO,
                                         distinct="@distinct", vectors=vectors)
        assert funcs[0] == deco


def test_every_body_of_the_example_kernels_is_noalias():
    """With their constants as arguments (the cached form), every outlined body of the
    examples' kernels gets the noalias pipeline (their arrays are distinct)."""
    from tensorlang.backends import numba_cpu_source

    for name in ("nbody_grad", "nbody_hvp"):
        text, consts = numba_cpu_source.abstract_source(
            tl.load(str(EXAMPLES / "nbody.tl"))[name].final_program())
        assert consts and text.count("@njit(parallel=False") == \
            text.count("pipeline_class=TlNoAlias)") > 0, name


def test_a_body_with_a_carried_value_or_a_value_read_later_stays():
    carried = ["    s = 0.0", "    for i in prange(0, n):", "        s += x[i]", "    return (s,)"]
    later = ["    for i in prange(0, n):", "        t = x[i]", "    y = t", "    return (y,)"]
    for body in (carried, later):
        funcs, new = prange_bodies.outline(body, ["n", "x"], DECO)
        assert funcs == [] and new == body


def test_parallel_bodies_inside_guards_are_numbered_in_order():
    body = ["    if n > 0:",
            "        for i in prange(0, n):",
            "            a[i] = 1.0",
            "    for j in prange(0, n):",
            "        b[j] = a[j]",
            "    return (b,)"]
    funcs, new = prange_bodies.outline(body, ["n", "a", "b"], DECO)
    assert [f for f in funcs if f.startswith("def ")] == [
        "def tl_body0(_chunk_lo, _chunk_hi, a):", "def tl_body1(_chunk_lo, _chunk_hi, a, b):"]
    assert new[3:5] == ["        for _pc0 in prange(_pk0):",
                        "            tl_body0(0 + (_pc0 * _pn0) // _pk0, "
                        "0 + ((_pc0 + 1) * _pn0) // _pk0, a)"]
    assert new[7] == "    for _pc1 in prange(_pk1):"
