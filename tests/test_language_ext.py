"""SPEC 12, part A: max/min reductions, `if`/`where` selection, real powers and tensor
literals -- grammar, located errors, meaning (numpy), cost, derivatives against JAX (grad, jvp,
hessian; ties in max/min shared equally), every backend against the interpreter, printing."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from examples_util import ROOT, assert_same, run_under_cudasim
from tensorlang.ir import ast
from tensorlang.syntax.errors import ParseError, TypeCheckError
from tensorlang.syntax.parser import parse_expr, parse_module
from tensorlang.syntax.printer import to_tl

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

SRC = """
def rowmax(N: size, M: size, A: R[N, M]) -> R[N]:
    return gen i:N. max j:M. A[i, j]

def rowmin_loss(N: size, M: size, A: R[N, M]) -> R:
    return sum i:N. square(min j:M. A[i, j] * 2.0)

def pool(N: size, x: R[2 * N]) -> R:
    y[i:N] = max k:2. x[2 * i + k]
    return sum i:N. y[i] * y[i]

def logsumexp(N: size, x: R[N]) -> R:
    m = max j:N. x[j]
    return log(sum j:N. exp(x[j] - m)) + m

def piecewise(N: size, x: R[N], a: R) -> R:
    return sum i:N. if x[i] > a then x[i] * x[i] else 2.0 * x[i] - a

def compound(N: size, x: R[N], y: R[N]) -> R:
    return sum i:N. where(x[i] >= 0 and not y[i] < x[i] or i == 0, x[i] * y[i], y[i])

def equal(N: size, x: R[N], y: R[N]) -> R:
    return sum i:N. if x[i] == y[i] then x[i] else 3.0 * y[i]

def static_if(N: size, x: R[N]) -> R[N]:
    return gen i:N. if i < 2 then x[i] else -x[i]

def power(N: size, x: R[N], y: R[N]) -> R:
    return sum i:N. x[i] ** y[i] + pow(x[i], y[0])

def literal(x: R[3]) -> R:
    c = [1.0, -2.0, 0.5]
    return sum k:3. c[k] * x[k] * x[k]
"""

M = tl.parse(SRC)


def jax_fns():
    return {
        "rowmax": lambda A: jnp.max(A, axis=1),
        "rowmin_loss": lambda A: jnp.sum(jnp.min(A * 2.0, axis=1) ** 2),
        "pool": lambda x: jnp.sum(jnp.max(x.reshape(-1, 2), axis=1) ** 2),
        "logsumexp": lambda x: jnp.log(jnp.sum(jnp.exp(x - jnp.max(x)))) + jnp.max(x),
        "piecewise": lambda x, a: jnp.sum(jnp.where(x > a, x * x, 2.0 * x - a)),
        "compound": lambda x, y: jnp.sum(jnp.where(
            ((x >= 0) & ~(y < x)) | (jnp.arange(x.shape[0]) == 0), x * y, y)),
        "equal": lambda x, y: jnp.sum(jnp.where(x == y, x, 3.0 * y)),
        "power": lambda x, y: jnp.sum(x ** y + x ** y[0]),
        "literal": lambda x: jnp.sum(jnp.array([1.0, -2.0, 0.5]) * x * x),
    }


def inputs(name: str, rng: np.random.Generator, ties: bool = False) -> dict:
    """Random inputs; with `ties`, repeated values (max/min ties, equal comparisons)."""
    def vec(*shape: int) -> np.ndarray:
        if ties:
            return rng.integers(-2, 3, size=shape).astype(np.float64)
        return rng.uniform(-1.5, 1.5, size=shape)

    if name in ("rowmax", "rowmin_loss"):
        return {"A": vec(4, 5)}
    if name == "pool":
        return {"x": vec(8)}
    if name == "logsumexp":
        return {"x": vec(6)}
    if name == "piecewise":
        return {"x": vec(6), "a": 0.25}
    if name in ("compound", "equal"):
        x = vec(6)
        y = x.copy() if ties else vec(6)
        if ties:
            y[::2] += 1.0
        return {"x": x, "y": y}
    if name == "power":
        return {"x": rng.uniform(0.5, 2.0, 5), "y": rng.uniform(-1.5, 1.5, 5)}
    return {"x": vec(3)}


SCALAR = ["rowmin_loss", "pool", "logsumexp", "piecewise", "compound", "equal", "power",
          "literal"]


# -- grammar -----------------------------------------------------------------------------------


def test_tensor_literal_and_iverson_bracket_are_told_apart():
    """A literal has a comma (`[e,]` for one element); `[p]` alone is an Iverson bracket."""
    lit = parse_expr("[1.0, 2.0, 3.0]")
    assert isinstance(lit, ast.Gen) and lit.size is ast.Affine.lit(3)
    one = parse_expr("[x,]")
    assert isinstance(one, ast.Gen) and one.size is ast.Affine.lit(1)
    assert isinstance(parse_expr("[i < 2]"), ast.Iverson)
    assert isinstance(parse_expr("[i < 2] * x"), ast.Iverson)
    prod = parse_expr("[1.0, 2.0] * y")            # a literal is a factor, not a guard
    assert isinstance(prod, ast.Mul) and isinstance(prod.a, ast.Gen)
    nested = parse_expr("[[1.0, 2.0], [3.0, 4.0]]")
    assert isinstance(nested, ast.Gen) and nested.size is ast.Affine.lit(2)
    with pytest.raises(ParseError, match="predicate"):
        parse_expr("[x]")                           # neither: a value with no comma
    f = tl.parse("def f(x: R) -> R[2, 2]:\n    return [[1.0, x], [x * x, 4.0]]\n").f
    assert_same(f.interpret(x=3.0), np.array([[1.0, 3.0], [9.0, 4.0]]))


def test_literal_index_name_avoids_capture():
    f = tl.parse("def f(lit_0: R) -> R[2]:\n    return [lit_0, 2.0 * lit_0]\n").f
    assert_same(f.interpret(lit_0=1.5), np.array([1.5, 3.0]))


@pytest.mark.parametrize("text", [
    "max j:N. x[j] + 1.0", "gen i:N. min j:N, k:M. A[i, j] * 2.0", "(max j:N. x[j]) * 2.0",
    "if x[i] > a then x[i] * 2.0 else -x[i]",
    "where(i < j and not (x > 1 or E(i, j)), a, sum k:N. y[k])",
    "if (sum k:N. y[k]) > 0 then gen i:N. x[i] else gen i:N. 0.0",
    "if exists k:N. i == 2 * k then 1.0 else 0.0", "max(a, b) + min(a, b)",
])
def test_new_forms_print_back_to_the_same_program(text):
    e = parse_expr(text)
    assert parse_expr(to_tl(e)) is e


def test_every_example_with_new_forms_round_trips():
    for name in ("maxpool.tl", "attention.tl", "piecewise.tl"):
        defs = parse_module((ROOT / "examples" / name).read_text())
        again = parse_module("\n\n".join(to_tl(d) for d in defs))
        assert tuple(again) == tuple(defs)


def test_keywords_are_not_names():
    for word in ("max", "min", "if", "then", "else", "not"):
        with pytest.raises(ParseError):
            parse_module(f"def f({word}: R) -> R:\n    return {word}\n")


# -- located errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("body, message", [
    ("gen i:N. if x[i] > 0 then x else x", "then branch"),
    ("max j:N. x", "body of max j must be R"),
    ("sum i:N. if E(i, i) or x[i] > 0 then 1.0 else 0.0", "not defined"),
])
def test_type_errors_are_located(body, message):
    src = f"def f(N: size, x: R[N]) -> R:\n    return {body}\n"
    with pytest.raises(TypeCheckError, match=message) as info:
        tl.parse(src).f.core()
    assert info.value.loc is not None and info.value.loc.line == 2


def test_not_of_a_relation_in_a_bracket_is_a_parse_error():
    with pytest.raises(ParseError, match="'not'"):
        parse_expr("[not E(i, j)] * x")


def test_not_of_a_relation_in_an_if_is_a_selection():
    f = tl.parse("def f(N: size, E: rel(N), x: R[N]) -> R[N]:\n"
                 "    return gen i:N. if not E(i) then x[i] else 0.0\n").f
    E = np.array([True, False, True])
    x = np.array([1.0, 2.0, 3.0])
    assert_same(f.interpret(E=E, x=x), np.array([0.0, 2.0, 0.0]))


# -- meaning and cost ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(jax_fns()))
@pytest.mark.parametrize("ties", [False, True])
def test_values_agree_with_jax(name, ties):
    args = inputs(name, np.random.default_rng(7), ties)
    fn = M[name]
    want = np.asarray(jax_fns()[name](*[jnp.asarray(v) for v in args.values()]))
    assert_same(np.asarray(fn.interpret(**args)), want)


def test_static_if_is_iverson_brackets_and_costs_nothing():
    f = M.static_if
    assert "sel_ge" not in f.show("parsed")
    assert_same(f.interpret(x=np.arange(4.0)), np.array([0.0, 1.0, -2.0, -3.0]))
    assert f.cost(stage="source", N=4).adds == 0


def test_empty_reductions_are_infinite():
    for be in ("interp", "numba", "jax"):
        got = M.rowmax.compile(be)(N=3, M=0, A=np.zeros((3, 0)))
        assert_same(np.asarray(got), np.full(3, -np.inf))
    f = tl.parse("def f(N: size, x: R[N]) -> R:\n    return min j:N. x[j]\n").f
    assert f.interpret(x=np.zeros(0)) == np.inf


def test_a_false_mask_around_an_empty_reduction_gives_zero():
    """`[0 < N] * max i:N. e` at N = 0 is 0: the mask is tested even where it coincides with
    the reduced range being non-empty (a sum may skip that test, a max may not)."""
    f = tl.parse("def f(N: size, x: R[N]) -> (R, R[2]):\n"
                 "    return ([0 < N] * (max i:N. x[i]), gen k:2. [k < N] * (min i:N. x[i]))\n").f
    for be in ("interp", "numba", "jax"):
        for n in (0, 1, 3):
            got = f.compile(be)(x=np.arange(float(n)))
            want = (0.0 if n == 0 else n - 1.0, [0.0 if k >= n else 0.0 for k in range(2)])
            assert_same(np.asarray(got[0]), np.asarray(want[0]))
            np.testing.assert_array_equal(np.asarray(got[1]), want[1])


def test_nan_propagates_in_every_backend():
    x = np.array([1.0, np.nan, 3.0, 0.5])
    for be in ("interp", "numba", "jax"):
        assert np.isnan(np.asarray(M.rowmax.compile(be)(A=x.reshape(1, 4)))).all()


def test_cost_of_a_reduction_is_n_minus_one_calls_per_point():
    c = M.rowmax.cost(stage="source", N=4, M=5)
    assert (c.adds, c.muls, c.calls) == (0, 0, 4 * 4)
    assert M.rowmax.cost(stage="source", N=4, M=0).calls == 0
    ssa = M.rowmax.cost(stage="ssa", N=4, M=5)
    assert ssa.total == c.total


# -- derivatives against JAX ---------------------------------------------------------------------


def _wrt(name: str) -> list[str]:
    return {"rowmin_loss": ["A"], "piecewise": ["x", "a"], "compound": ["x", "y"],
            "equal": ["x", "y"], "power": ["x", "y"]}.get(name, ["x"])


@pytest.mark.parametrize("name", SCALAR)
@pytest.mark.parametrize("ties", [False, True])
def test_grad_agrees_with_jax(name, ties):
    args = inputs(name, np.random.default_rng(3), ties)
    wrt = _wrt(name)
    g = tl.grad(M[name], *wrt)
    ref = jax.grad(jax_fns()[name], argnums=tuple(range(len(wrt))))(
        *[jnp.asarray(v) for v in args.values()])
    got = g.interpret(**args)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, ref):
        assert_same(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))


@pytest.mark.parametrize("name", SCALAR)
def test_jvp_agrees_with_jax(name):
    rng = np.random.default_rng(5)
    args = inputs(name, rng, ties=True)
    wrt = _wrt(name)
    tangents = {f"d_{x}": np.asarray(rng.standard_normal(np.shape(args[x])), dtype=np.float64)
                for x in wrt}
    tangents = {k: (float(v) if v.ndim == 0 else v) for k, v in tangents.items()}
    y, dy = tl.jvp(M[name], *wrt).interpret(**args, **tangents)
    order = list(args)
    primals = [jnp.asarray(v) for v in args.values()]
    tans = [jnp.asarray(tangents[f"d_{k}"]) if k in wrt else jnp.zeros_like(jnp.asarray(v))
            for k, v in args.items()]
    ry, rdy = jax.jvp(jax_fns()[name], primals, tans)
    assert order == list(args)
    assert_same(float(y), float(ry))
    assert_same(float(dy), float(rdy))


@pytest.mark.parametrize("name", ["logsumexp", "pool", "power", "piecewise", "literal"])
def test_hessian_agrees_with_jax(name):
    args = inputs(name, np.random.default_rng(11))
    h = tl.hessian(M[name], "x")
    ref = jax.hessian(jax_fns()[name], argnums=0)(*[jnp.asarray(v) for v in args.values()])
    assert_same(np.asarray(h.interpret(**args)), np.asarray(ref, dtype=np.float64))


def test_ties_share_the_cotangent_equally():
    g = tl.grad(M.pool, "x")
    x = np.array([3.0, 3.0, 1.0, 2.0])
    assert_same(g.interpret(x=x), np.array([3.0, 3.0, 0.0, 4.0]))


def test_adjoint_of_a_reduction_is_a_gather():
    """Every statement of the vjp is a Tensor-SSA primitive whose outputs are independent
    (no accumulation into memory): the adjoint of `max` reads back through the index solver."""
    from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa

    p = tl.grad(M.pool, "x").run_to("derive")
    assert is_tensor_ssa(p) is None
    assert "v0[i0:N] = max j0:2. x[2*i0 + j0]" in str(p)


# -- backends ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numba", "jax"])
@pytest.mark.parametrize("name", SCALAR + ["rowmax", "static_if"])
def test_backends_agree_with_the_interpreter(backend, name):
    args = inputs(name, np.random.default_rng(2), ties=True)
    for fn in (M[name], *([tl.grad(M[name], *_wrt(name))] if name in SCALAR else [])):
        want = fn.interpret(**args)
        got = fn.compile(backend)(**args)
        if isinstance(want, tuple):
            for a, b in zip(got, want):
                assert_same(np.asarray(a, dtype=np.float64), np.asarray(b))
        else:
            assert_same(np.asarray(got, dtype=np.float64), np.asarray(want))


CUDA_SCRIPT = """
import numpy as np, tensorlang as tl
m = tl.parse(open({path!r}).read().split('SRC = \"\"\"')[1].split('\"\"\"')[0])
rng = np.random.default_rng(0)
A = rng.integers(-2, 3, size=(3, 4)).astype(float)
for f, args in [(m.rowmax, dict(A=A)), (tl.grad(m.rowmin_loss, "A"), dict(A=A)),
                (m.rowmax, dict(N=2, M=0, A=np.zeros((2, 0)))),
                (tl.grad(m.piecewise, "x"), dict(x=rng.uniform(-1, 1, 4), a=0.1))]:
    got, want = f.compile("cuda")(**args), f.interpret(**args)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
print("ok")
"""


def test_cuda_backend_under_the_simulator(tmp_path):
    run_under_cudasim(CUDA_SCRIPT.format(path=__file__), tmp_path)


# -- REPL ----------------------------------------------------------------------------------------


def test_repl_evaluates_the_new_forms():
    from tensorlang.repl import Repl

    r = Repl(seed=1)
    assert r.handle(":set x = rand(4)") == "x : R[4]"
    x = r.values["x"].value
    assert float(r.handle("max j:4. x[j]")) == pytest.approx(x.max(), rel=1e-12)
    assert float(r.handle("min j:4. x[j]")) == pytest.approx(x.min(), rel=1e-12)
    assert float(r.handle("sum j:4. if x[j] > 0 then x[j] else 0.0")) == \
        pytest.approx(np.maximum(x, 0.0).sum(), rel=1e-12)
    assert float(r.handle("sum j:3. [1.0, 5.0, 2.0][j]")) == 8.0
    assert float(r.handle("2.0 ** x[0]")) == pytest.approx(2.0 ** x[0], rel=1e-12)
    assert r.handle(":type [1.0, 2.0]") == "R[2]"
    assert {"max", "min", "if", "then", "else", "not", "where"} <= set(r.completions())


# -- index conditions: quasi-affine, index arrays, compound (SPEC 12) ------------------------------

INDEX_IF = """
def parity(N: size, x: R[N]) -> R[N]:
    return gen i:N. if i % 2 == 0 then x[i] else -x[i]

def halves(N: size, x: R[N]) -> R:
    return sum i:N. if i // 2 == 1 or not (i % 3 != 0) then x[i] * x[i] else 2.0 * x[i]

def both(N: size, M: size, A: R[N, M]) -> R[N, M]:
    return gen i:N, j:M. if i < 2 and j >= 1 then A[i, j] else 0.5 * A[i, j]

def picked(N: size, M: size, idx: Z[N], x: R[M]) -> R:
    return sum i:N. if idx[i] == 0 or x[idx[i]] > 0.5 then x[idx[i]] * x[idx[i]] else x[0]
"""
IF_M = tl.parse(INDEX_IF)


def _index_if_case(name: str, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    """Inputs and the numpy value of the INDEX_IF function `name`."""
    i = np.arange(7)
    x = rng.uniform(-1.5, 1.5, 7)
    if name == "parity":
        return {"x": x}, np.where(i % 2 == 0, x, -x)
    if name == "halves":
        return {"x": x}, float(np.where((i // 2 == 1) | (i % 3 == 0), x * x, 2 * x).sum())
    if name == "both":
        A = rng.uniform(-1, 1, (4, 3))
        ii, jj = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
        return {"A": A}, np.where((ii < 2) & (jj >= 1), A, 0.5 * A)
    idx = rng.integers(0, 5, 7)
    y = rng.uniform(-1, 1, 5)
    sel = (idx == 0) | (y[idx] > 0.5)
    return {"idx": idx, "x": y}, float(np.where(sel, y[idx] ** 2, y[0]).sum())


@pytest.mark.parametrize("name", ["parity", "halves", "both", "picked"])
def test_index_conditions_with_quasi_indices_and_index_arrays(name):
    """`if i % 2 == 0`, `if i // 2 == 1 or not (i % 3 != 0)`, `if i < 2 and j >= 1`,
    `if idx[i] == 0 or ...`: values against numpy on every backend."""
    args, want = _index_if_case(name, np.random.default_rng(3))
    fn = IF_M[name]
    for backend in ("interp", "numba", "jax"):
        got = fn.compile(backend)(**args)
        assert_same(got if isinstance(want, float) else np.asarray(got), want)


@pytest.mark.parametrize("name", ["parity", "halves", "both"])
def test_index_only_conditions_stay_static(name):
    """Negated before lowering, a quasi-affine condition's else branch is a bracket too: no
    selection call, no cost for the condition."""
    assert "sel_ge" not in IF_M[name].show("parsed")


def test_index_conditions_print_back_and_differentiate():
    defs = parse_module(INDEX_IF)
    assert tuple(parse_module("\n\n".join(to_tl(d) for d in defs))) == tuple(defs)
    args, _ = _index_if_case("halves", np.random.default_rng(4))
    g = tl.grad(IF_M.halves, "x")(**args)
    i, x = np.arange(7), args["x"]
    assert_same(np.asarray(g), np.where((i // 2 == 1) | (i % 3 == 0), 2 * x, 2.0))


def test_a_value_in_a_modulo_is_a_located_error():
    with pytest.raises(TypeCheckError, match="index-array parameter") as info:
        tl.parse("def f(N: size, x: R[N]) -> R[N]:\n"
                 "    return gen i:N. if x[i] % 2 == 0 then x[i] else 0.0\n").f.core()
    assert info.value.loc is not None and info.value.loc.line == 2
