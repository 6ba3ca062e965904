"""SPEC 12, "indices as values": an index or size variable (or an affine expression of them)
used where a real is expected -- elaboration, located errors, meaning (numpy), cost, Tensor
SSA, derivatives against JAX (the index is a constant), every backend against the
interpreter, printing, the REPL, the random programs."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from examples_util import assert_same, run_under_cudasim
from tensorlang.ir import ast, tssa
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.syntax.errors import TypeCheckError
from tensorlang.syntax.parser import parse_module
from tensorlang.syntax.printer import to_tl
from tensorlang.testing import programs

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

SRC = """
def weighted(N: size, x: R[N]) -> R[N]:
    return gen i:N. i * x[i]

def positional(N: size, x: R[N]) -> R:
    return sum i:N. (i + 1) * x[i] * x[i]

def mean(N: size, x: R[N]) -> R:
    return (sum i:N. x[i]) * (1 / N)

def scaled(N: size, x: R[N]) -> R[N]:
    return gen i:N. x[i] / (N - 1)

def kernel(N: size, x: R[N]) -> R:
    return sum i:N, j:N. exp(-(i - j) * 0.5) * x[i] * x[j]

def square_index(N: size, x: R[N]) -> R:
    return sum i:N. i * i * x[i]

def selected(N: size, x: R[N]) -> R:
    return sum i:N. if x[i] > i - 2 then x[i] * x[i] else 2 * i - x[i]

def argmax_weight(N: size, x: R[N]) -> R:
    return max j:N. j * x[j]

def scaled_tensor(N: size, M: size, A: R[N, M]) -> R[N, M]:
    return M * A
"""
M = tl.parse(SRC)
NAMES = ["weighted", "positional", "mean", "scaled", "kernel", "square_index", "selected",
         "argmax_weight", "scaled_tensor"]


def reference(name: str, a: dict) -> object:
    """Independent numpy implementations."""
    if name == "scaled_tensor":
        return a["A"].shape[1] * a["A"]
    x = a["x"]
    n = x.shape[0]
    i = np.arange(n, dtype=float)
    if name == "weighted":
        return i * x
    if name == "positional":
        return float(np.sum((i + 1) * x * x))
    if name == "mean":
        return float(np.sum(x) / n)
    if name == "scaled":
        return x / (n - 1)
    if name == "kernel":
        return float(x @ np.exp(-(i[:, None] - i[None, :]) * 0.5) @ x)
    if name == "square_index":
        return float(np.sum(i * i * x))
    if name == "selected":
        return float(np.sum(np.where(x > i - 2, x * x, 2 * i - x)))
    if name == "argmax_weight":
        return float(np.max(i * x))
    raise KeyError(name)


def jax_fn(name: str):
    def weights(n: int):
        return jnp.arange(n, dtype=jnp.float64)
    return {
        "positional": lambda x: jnp.sum((weights(x.shape[0]) + 1) * x * x),
        "mean": lambda x: jnp.sum(x) / x.shape[0],
        "kernel": lambda x: x @ jnp.exp(-(weights(x.shape[0])[:, None]
                                          - weights(x.shape[0])[None, :]) * 0.5) @ x,
        "square_index": lambda x: jnp.sum(weights(x.shape[0]) ** 2 * x),
        "selected": lambda x: jnp.sum(jnp.where(x > weights(x.shape[0]) - 2, x * x,
                                                2 * weights(x.shape[0]) - x)),
        "argmax_weight": lambda x: jnp.max(weights(x.shape[0]) * x),
    }[name]


SCALAR = ["positional", "mean", "kernel", "square_index", "selected", "argmax_weight"]


def inputs(name: str, rng: np.random.Generator, n: int = 5) -> dict:
    if name == "scaled_tensor":
        return {"A": rng.uniform(-1, 1, (n, 3))}
    return {"x": rng.uniform(-2, 2, n)}


# -- elaboration and errors ----------------------------------------------------------------------


def test_an_affine_expression_is_one_index_value():
    body = M.weighted.core().body
    assert body is ast.Gen("i", ast.Affine.var("N"), ast.Mul(
        ast.IndexValue(ast.Affine.var("i")),
        ast.Access(ast.Var("x"), (ast.Affine.var("i"),))))
    f = tl.parse("def f(N: size, x: R[N]) -> R:\n    return sum i:N. (2*i - N + 1) * x[i]\n").f
    values = [n for n in ast.walk(f.core()) if isinstance(n, ast.IndexValue)]
    assert values == [ast.IndexValue(ast.Affine.var("i") * 2 - ast.Affine.var("N") + 1)]
    # `i * i` is not affine: a real product of two index values (decided, docs/tutorial.md)
    f = M.square_index.core()
    assert sum(isinstance(n, ast.Mul) for n in ast.walk(f)) == 2


@pytest.mark.parametrize("body, message, col", [
    ("sum i:N. x[i] * j", "undefined variable j", 28),
    ("sum i:N. x[i] * (i * N2)", "undefined variable N2", 33),
    ("sum i:N. x[i] * E", "E is a relation, not a value", 28),
    ("sum i:N. idx[i] * x[i]", "idx is a relation, not a value", 21),
])
def test_what_is_not_an_index_value_is_a_located_error(body, message, col):
    src = ("def f(N: size, x: R[N], E: rel(N), idx: Z[N] in N) -> R:\n"
           f"    return {body}\n")
    with pytest.raises(TypeCheckError, match=message) as info:
        tl.parse(src, "f.tl")
    # (a hash-consed name keeps its first location: the caret may mark an enclosing node)
    assert info.value.loc.line == 2 and 12 <= info.value.loc.col <= col


def test_an_index_out_of_scope_is_an_error_also_in_core_input():
    d = ast.Def("f", (ast.Param("N", ast.TSize()),), None,
                ast.IndexValue(ast.Affine.var("i")))
    from tensorlang.check.typecheck import check_module
    with pytest.raises(TypeCheckError, match="index value"):
        check_module([d])


# -- meaning, cost, SSA --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_meaning_matches_numpy(name):
    args = inputs(name, np.random.default_rng(1))
    got = M[name].interpret(**args)
    assert_same(np.asarray(got, dtype=np.float64), np.asarray(reference(name, args)),
                atol=1e-12)


def test_reading_an_index_value_costs_nothing():
    c = M.positional.cost(stage="source", N=6)
    assert (c.adds, c.muls, c.calls) == (5, 12, 0)   # (i + 1) is free, as index arithmetic
    assert M.square_index.cost(stage="source", N=6).muls == 12   # i * i is a product
    for stage in ("ssa", "simplified"):
        assert M.positional.cost(stage=stage, N=6).total <= c.total


def test_tensor_ssa_reads_an_iota():
    p = M.kernel.run_to("ssa")
    assert is_tensor_ssa(p) is None
    iotas = [s.rhs for s in p.stmts if isinstance(s.rhs, tssa.IndexRhs)]
    assert iotas and all(not r.operands for r in iotas)
    assert "(-i0 + i1)" in str(p)
    # the cost of an iota statement is 0
    from tensorlang.semantics.cost import cost_program
    per = cost_program(p, {"N": 4}).per_stmt
    assert all(per[s.var] == (0, 0, 0) for s in p.stmts if isinstance(s.rhs, tssa.IndexRhs))


def test_the_simplifier_keeps_index_values(monkeypatch):
    monkeypatch.setenv("TENSORLANG_STRICT", "1")
    for name in SCALAR:
        f = M[name]
        p = f.run_to("simplified")
        assert is_tensor_ssa(p) is None
        args = inputs(name, np.random.default_rng(4))
        assert_same(np.asarray(f.interpret(**args)), np.asarray(reference(name, args)))


# -- derivatives against JAX ---------------------------------------------------------------------


@pytest.mark.parametrize("name", SCALAR)
def test_grad_agrees_with_jax(name):
    args = inputs(name, np.random.default_rng(3))
    g = tl.grad(M[name], "x")
    want = jax.grad(jax_fn(name))(jnp.asarray(args["x"]))
    for backend in ("interp", "numba", "jax"):
        assert_same(np.asarray(g.compile(backend)(**args), dtype=np.float64),
                    np.asarray(want, dtype=np.float64))


@pytest.mark.parametrize("name", SCALAR)
def test_jvp_agrees_with_jax(name):
    rng = np.random.default_rng(5)
    args = inputs(name, rng)
    dx = rng.standard_normal(args["x"].shape)
    y, dy = tl.jvp(M[name], "x").interpret(**args, d_x=dx)
    ry, rdy = jax.jvp(jax_fn(name), (jnp.asarray(args["x"]),), (jnp.asarray(dx),))
    assert_same(np.asarray(y), np.asarray(ry, dtype=np.float64))
    assert_same(np.asarray(dy), np.asarray(rdy, dtype=np.float64))


def test_hessian_agrees_with_jax():
    args = inputs("kernel", np.random.default_rng(6))
    h = tl.hessian(M.kernel, "x").interpret(**args)
    assert_same(np.asarray(h), np.asarray(jax.hessian(jax_fn("kernel"))(
        jnp.asarray(args["x"])), dtype=np.float64))


def test_derivatives_meet_the_bounds():
    from tensorlang.proofs.theorems import check_bounds
    for name in SCALAR:
        args = inputs(name, np.random.default_rng(7))
        rep = check_bounds(M[name].run_to("simplified"), {"N": 5, **args})
        assert rep.ok, (name, rep)


# -- backends ------------------------------------------------------------------------------------


def test_a_blas_product_reads_a_materialised_index_value():
    """`sum i, j. exp(-(i - j) / 2) x[i] x[j]` runs as a matrix product reading the kernel
    matrix: the producer of an absorbed product is materialised, not fused (it was lost)."""
    D = tl.parse("def k(N: size, x: R[N], D: R[N, N]) -> R:\n"
                 "    return sum i:N, j:N. exp(D[i, j] * 0.5) * x[i] * x[j]\n").k
    rng = np.random.default_rng(8)
    args = {"x": rng.uniform(-1, 1, 6), "D": rng.uniform(-1, 1, (6, 6))}
    assert_same(np.asarray(D.compile("numba")(**args)), np.asarray(D.interpret(**args)))
    assert "tl_matmul" in M.kernel.generated_source("numba")


@pytest.mark.parametrize("backend", ["numba", "jax"])
@pytest.mark.parametrize("name", NAMES)
def test_backends_agree_with_the_interpreter_and_numpy(backend, name):
    for n in (0, 1, 5):
        if name in ("scaled", "mean", "argmax_weight") and n < 2:
            continue    # 0 * (1 / 0) and the max of nothing: not compared here
        args = inputs(name, np.random.default_rng(n), n)
        want = M[name].interpret(**args)
        got = M[name].compile(backend)(**args)
        assert_same(np.asarray(got, dtype=np.float64), np.asarray(want))
        assert_same(np.asarray(got, dtype=np.float64), np.asarray(reference(name, args)),
                    atol=1e-12)


CUDA_SCRIPT = """
import numpy as np, tensorlang as tl
m = tl.parse(open({path!r}).read().split('SRC = \"\"\"')[1].split('\"\"\"')[0])
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, 4)
for f in (m.weighted, m.kernel, m.selected, tl.grad(m.kernel, "x"), m.argmax_weight):
    got, want = f.compile("cuda")(x=x), f.interpret(x=x)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
print("ok")
"""


def test_cuda_backend_under_the_simulator(tmp_path):
    run_under_cudasim(CUDA_SCRIPT.format(path=__file__), tmp_path)


# -- printing, REPL, random programs -------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_printing_round_trips_through_the_checker(name):
    f = M[name]
    text = to_tl(f.core())
    again = tl.parse(text)[name].core()
    assert again is f.core(), text


def test_printed_index_values():
    assert "(i + 1) * x[i]" in to_tl(M.positional.core())
    assert "exp((-i + j) * 0.5)" in to_tl(M.kernel.core())
    (d,) = parse_module(to_tl(M.weighted.core()))
    assert isinstance(d.body, ast.Gen)


def test_repl_uses_indices_as_values():
    from tensorlang.repl import Repl

    r = Repl(seed=1)
    assert r.handle(":set x = rand(4)") == "x : R[4]"
    x = r.values["x"].value
    assert float(r.handle("sum i:4. (i + 1) * x[i]")) == \
        pytest.approx(float(np.sum(np.arange(1, 5) * x)), rel=1e-12)
    r.handle("def w(N: size, x: R[N]) -> R:")
    r.handle("    return sum i:N. i * x[i] / N")
    assert r.handle("").startswith("defined w(")
    assert float(r.handle("w(4, x)")) == pytest.approx(float(np.arange(4) @ x / 4), rel=1e-12)


def test_the_generator_produces_index_values():
    from tensorlang.testing import draw_examples
    found = sum(any(isinstance(n, ast.IndexValue) for n in ast.walk(d))
                for d, _ in draw_examples(programs(), 40))
    assert found >= 5
