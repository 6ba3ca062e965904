"""The JAX backend (SPEC 14, backends/jax_backend.py) agrees with the interpreter (rtol 1e-9,
float64) on every example, their derivatives and random programs; its generated code is
deterministic and never contains program identifiers unchecked.

XLA compiles once per program and sizes, so the CI profile keeps the number of random
programs modest.  The 4-device sharding tests are in tests/test_jax_sharding.py.
"""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tokenize
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("jax")

import tensorlang as tl  # noqa: E402
from examples_util import (ATOL, EXAMPLES, ROOT, RTOL, WORKLOADS, assert_same,  # noqa: E402
                           derived_random_case, slow_params, to_program, workload_params)
from tensorlang.ir import ast  # noqa: E402
from tensorlang.ir import tssa  # noqa: E402
from tensorlang.ir.build import Builder  # noqa: E402
from tensorlang.semantics import builtins  # noqa: E402
from tensorlang.semantics.interp import interpret  # noqa: E402
from tensorlang.syntax.errors import ShapeError, TLError  # noqa: E402
from tensorlang.testing import differentiable_programs, programs, random_args  # noqa: E402
from tensorlang.backends import jax_backend, jax_rt  # noqa: E402
from tensorlang.passes import derive  # noqa: E402





# ---------------------------------------------------------------------------------------------
# Builtins


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.7, -3.7, 30.0, -30.0, 800.0, -800.0,
           1e-300, -1e-300, np.inf, -np.inf, np.nan]


def test_every_builtin_matches_the_interpreter_on_special_values():
    assert set(jax_rt.FUNCS) == set(builtins.BUILTIN_FUNCS)
    xs = np.array([a for a in SPECIAL for _ in SPECIAL])
    ys = np.array([b for _ in SPECIAL for b in SPECIAL])
    for name, spec in builtins.BUILTIN_FUNCS.items():
        args = [xs, ys, ys, xs][:spec.arity]
        exponents = [(c,) for c in (0.5, -0.5, 1.5, -1.5, -1.0, -2.0, 3.0, -3.0, 2.0, 0.0)]
        for params in (exponents if spec.nparams else [()]):
            want = np.asarray(builtins.apply(name, args, params), dtype=np.float64)
            got = np.asarray(jax_rt.tl_call(name, *args, *params))
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True,
                                       err_msg=f"{name}{params}")


# ---------------------------------------------------------------------------------------------
# Examples and their derivatives


# CI: the program the backend gets (simplified); the Tensor SSA before the simplifier (every
# example's other constructs, half of this test's time) with -m slow, as SLOW_WORKLOADS.
@pytest.mark.parametrize("name", workload_params())
@pytest.mark.parametrize("stage", [pytest.param("ssa", marks=pytest.mark.slow), "simplified"])
def test_example_agrees_with_the_interpreter(name, stage):
    w = WORKLOADS[name]
    p = tl.load(str(EXAMPLES / w.file))[w.func].run_to(stage)
    c = jax_backend.compile_program(p)
    core = tssa.to_core(p)
    for n in (0, 1, 2, 7):
        args = w.inputs(w.sizes(n), np.random.default_rng(n))
        assert_same(c(args), interpret(core, args))


def _derived_cases() -> list[tuple[str, str]]:
    return [(name, kind) for name in sorted(WORKLOADS) for kind in ("vjp", "jvp", "hessian")]


# SLOW_WORKLOADS, and the Hessians (the largest programs, 40% of this test's time), with -m
# slow: CI runs the Hessians written in the example files through the API
# (test_derived_defs_of_the_example_files_through_the_api) and random derived programs.
@pytest.mark.parametrize("name,kind", workload_params(_derived_cases(),
                                                      slow_if=lambda c: c[1] == "hessian"))
def test_derived_examples_agree_with_the_interpreter(name, kind):
    """Our derivatives of the examples (the derive stage on their SSA) on the jax backend."""
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    real = [q.name for q in d.params if isinstance(ast.scalar_of(q.type), ast.TReal)]
    if kind == "hessian" and d.ret != ast.REAL:
        pytest.skip("hessian needs a real-valued function")
    p = derive.derive(to_program(d), kind,
                      tuple(real[:1]) if kind == "hessian" else tuple(real))
    c = jax_backend.compile_program(p)
    core = tssa.to_core(p)
    for n in (0, 1, 4):
        base = w.inputs(w.sizes(n), np.random.default_rng(n))
        sizes = {q.name: base[q.name] for q in core.params if isinstance(q.type, ast.TSize)}
        extra = random_args(core, sizes, np.random.default_rng(n + 100))
        args = {q.name: base.get(q.name, extra[q.name]) for q in core.params}
        assert_same(c(args), interpret(core, args))


# stencil.tl's (upsample_grad's simplification: a third of this test's time) with -m slow;
# test_quasi_index runs upsample_loss's gradient on JAX in CI (docs/decisions.md, "CI time").
@pytest.mark.parametrize("path", slow_params(sorted(EXAMPLES.glob("*.tl")),
                                             lambda p: p.name == "stencil.tl"),
                         ids=lambda p: p.name)
def test_derived_defs_of_the_example_files_through_the_api(path):
    """Every derived def written in examples/*.tl, compiled with `compile("jax")`."""
    module = tl.load(str(path))
    for name in module.derived_names():
        fn = module[name]
        core = fn.core()
        sizes = {q.name: 3 for q in core.params if isinstance(q.type, ast.TSize)}
        args = random_args(core, sizes, np.random.default_rng(7))
        assert_same(fn.compile("jax")(**args), fn.interpret(**args))


# ---------------------------------------------------------------------------------------------
# Programs exercising every lowering, and random programs

FEATURES = [  # (name, type, definition)
    ("spmv", "R[N]", "spmv[i:N] = sum j:M. [E(i, j)] * A[i, j] * y[j]"),
    ("spmvt", "R[M]", "spmvt[j:M] = sum i:N. [E(i, j)] * A[i, j] * x[i]"),
    ("r3", "R[N]", "r3[i:N] = sum j:M, k:K. [F(j, i, k)] * X[j, i, k]"),
    ("mm", "R[N, K]", "mm[i:N, k:K] = sum j:M. A[i, j] * B[j, k]"),
    ("tc", "R[N, K]", "tc[i:N, k:K] = sum j:M. 2.0 * X[j, i, k] * B[j, k] * [i < N]"),
    ("stride", "R[N]", "stride[i:N] = x[2 * i] + x[2 * i + 1]"),
    ("quot", "R[N]", "quot[k:N] = sum i:N. [2 * i == k] * x[i]"),
    ("shift", "R[N]", "shift[i:N] = x[i - 1] - x[i + 1] + [exists t:N. i == 3 * t] * x[i]"),
    ("had", "R[N, M]", "had[i:N, j:M] = [E(i, j)] * A[i, j] * 2.0"),
    ("diag", "R", "diag = sum i:N, j:M. [i == j] * A[i, j]"),
    ("kern", "R[M]", "kern[k:M] = sum i:N, j:M. [2 * i + 3 * j == k] * A[i, j]"),
    ("sq", "R", "sq = sum i:M. y[i] * y[i]"),
    ("band", "R[N, N]", "band[i:N, j:N] = [i == j or i == j + 1] * x[i] + [j == i + 2] * x[j]"),
    ("rev", "R[N]", "rev[i:N] = x[N - 1 - i] * x[i]"),
    ("tri", "R[N]", "tri[i:N] = sum j:N. [j <= i] * x[j] * x[N - 1 - j]"),
    ("far", "R[N]", "far[i:N] = sum j:M. [E(i, j) and j <= i] * A[i, j] * y[M - 1 - j]"),
]


def _nest(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"({items[0]}, {_nest(items[1:])})"


FEATURES_TL = (
    "def features(N: size, M: size, K: size, E: rel(N, M), F: rel(M, N, K), A: R[N, M],\n"
    f"             B: R[M, K], X: R[M, N, K], x: R[N], y: R[M]) -> "
    f"{_nest([t for _, t, _ in FEATURES])}:\n"
    + "".join(f"    {d}\n" for _, _, d in FEATURES)
    + f"    return {_nest([n for n, _, _ in FEATURES])}\n")

FEATURE_SIZES = [dict(N=0, M=0, K=0), dict(N=1, M=2, K=0), dict(N=5, M=4, K=3),
                 dict(N=7, M=9, K=2)]


@pytest.mark.parametrize("stage", ["ssa", "simplified"])
def test_lowering_features_agree_with_the_interpreter(stage):
    fn = tl.parse(FEATURES_TL)["features"]
    c = jax_backend.compile_program(fn.run_to(stage))
    for sizes in FEATURE_SIZES:
        for enc in ("bool", "coo"):
            args = random_args(fn.core(), sizes, np.random.default_rng(1), rel_encoding=enc)
            assert_same(c(args), interpret(fn.core(), args))


def test_generated_code_shape():
    """Plain contractions are einsums, shifts are slices, stencils gathers, and dense
    relation masks (a sharded relation) are applied to an operand so the product stays an
    einsum."""
    m = tl.load(str(EXAMPLES / "matfac.tl"))
    src = jax_backend.generated_source(m.matfac_grad.final_program(), frozenset({"Om"}))
    assert "jnp.einsum('ac,bc->ab', v_U, v_V)" in src
    assert "tl_mask(rm_Om, v_v3)" in src and "tl_sum(" not in src
    assert "coordinates of" not in src and "rc_Om" not in src
    conv = tl.load(str(EXAMPLES / "conv.tl")).conv.generated_source("jax")
    assert "tl_gather(v_x, ((i0 + j0),)" in conv
    # the adjoint of a convolution (a correlation over a band) sums over w's range, not N
    conv_vjp = jax_backend.generated_source(derive.derive(
        tl.load(str(EXAMPLES / "conv.tl")).conv.run_to("ssa"), "vjp", ("x",)))
    assert "if math.prod(_s1) < math.prod(_b1):" in conv_vjp
    assert "_s1 = (max(0, (n_K + n_N - 1)), max(0, n_K))" in conv_vjp
    shift = tl.parse("def s(N: size, x: R[N]) -> R[N]:\n    return gen i:N. x[i + 1]\n")
    assert "tl_axes(v_x, ((0, 1, 1),)" in shift.s.generated_source("jax")


def _check_random(d: ast.Def, args: dict[str, Any]) -> None:
    p = to_program(d)
    c = jax_backend.compile_program(p)
    assert_same(c(args), interpret(d, args), atol=1e-9)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(max_size=8))
def test_random_programs_sweep(case):
    _check_random(*case)


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(differentiable_programs(), st.sampled_from(["jvp", "vjp"]))
def test_derived_random_programs(case, kind):
    """Our jvp/vjp of random programs on XLA."""
    p, core, a = derived_random_case(case, kind)
    assert_same(jax_backend.compile_program(p)(a), interpret(core, a), atol=1e-9)


# ---------------------------------------------------------------------------------------------
# API, CLI, calling convention, identifiers


def test_api_compile_and_results():
    fn = tl.parse("""
def f(N: size, x: R[N], s: R, p: ([N] (R, R))) -> (R[N], (R[N], (R, R[N]))):
    return (x, (x, (s * s, gen i:N. p[i].0 * p[i].1)))
""")["f"]
    c = fn.compile("jax")
    assert fn.compile("jax") is c
    x = np.arange(3.0)
    args = {"N": 3, "x": x, "s": 2.0, "p": (np.ones(3), np.full(3, 2.0))}
    got = c(**args)
    assert_same(got, fn.interpret(**args))
    assert got[0] is not x and got[0] is not got[1][0]      # results never alias
    got[0][0] = 5.0                                           # and are writeable
    with pytest.raises(ShapeError):
        c(N=4, x=x, s=2.0, p=(np.ones(3), np.ones(3)))
    with pytest.raises(TLError):
        fn.compile("numba", shard={"x": ("data",)})


def test_cli_run_and_show(tmp_path):
    qform = str(EXAMPLES / "qform.tl")
    run = subprocess.run([sys.executable, "-m", "tensorlang", "run", qform, "qform",
                          "--random", "N=5", "--backend", "jax"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    ref = subprocess.run([sys.executable, "-m", "tensorlang", "run", qform, "qform",
                          "--random", "N=5", "--backend", "interp"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert float(run.stdout) == pytest.approx(float(ref.stdout), rel=1e-12)
    show = subprocess.run([sys.executable, "-m", "tensorlang", "show", qform, "qform_hess",
                           "--stage", "jax"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert show.returncode == 0, show.stderr
    assert show.stdout.startswith("# Generated by tensorlang's JAX backend")
    assert show.stdout == subprocess.run(
        [sys.executable, "-m", "tensorlang", "show", qform, "qform_hess", "--stage", "jax"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={"PYTHONHASHSEED": "123", **__import__("os").environ}).stdout   # deterministic


def test_identifiers_in_generated_code_are_generated():
    bad = "x; import os\nos.system('echo pwned')"
    b = Builder([ast.Param("N", ast.TSize()),
                      ast.Param(bad, ast.tensor([ast.Affine.var("N")])),
                      ast.Param("E r", ast.TRel((ast.Affine.var("N"), ast.Affine.var("N"))))])
    xv = b.input(bad)
    v = b.reduce([("i", "N")], [("j", "N")], (xv, ["j"]),
                 pred=ast.RelCall("E r", (ast.Affine.var("i"), ast.Affine.var("j"))))
    p = b.program(v, name="g(h)", ret=ast.tensor([ast.Affine.var("N")]))
    src = jax_backend.generated_source(p)
    names = {t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
             if t.type == tokenize.NAME}
    assert not any("pwned" in n or n == "os" for n in names)
    for line in src.splitlines():
        code = line.split("#", 1)[0]
        assert "pwned" not in code or code.lstrip().startswith("TL_ARGS")
    mask = np.random.default_rng(0).random((4, 4)) < 0.5
    args = {"N": 4, bad: np.arange(4.0), "E r": mask}
    assert_same(jax_backend.compile_program(p)(args), interpret(tssa.to_core(p), args))


def test_jitted_once_per_program():
    fn = tl.load(str(EXAMPLES / "qform.tl")).qform
    p = fn.run_to("simplified")
    a = jax_backend.compile_program(p)
    b = jax_backend.compile_program(p)
    assert a.jitted is b.jitted


# ---------------------------------------------------------------------------------------------
# Relations iterated by their coordinates (a gather at the stored tuples, a segment sum)


def test_summations_under_a_relation_run_over_its_coordinates():
    m = tl.load(str(EXAMPLES / "matfac.tl"))
    src = m.matfac_grad.generated_source("jax")
    # U V^T at the observed entries only (a scatter of unique, sorted coordinates), and the
    # gradient a segment sum over the rows of the observed entries
    assert src.count("# relations: coordinates of Om when sparse, else dense masks") == 2
    assert src.count("if tl_sparse(") == 2
    assert "# relations: dense masks" in src           # element-wise statements
    assert ", rc_Om, (0, 1), (_b0[0], _b0[1]), (0, 1), True, True)" in src
    assert ", rc_Om, (0,), (_b4[0],), (0, 1), True, False)" in src
    assert src.count("jnp.einsum") == 2                # the dense alternatives
    masked_src = tl.load(str(EXAMPLES / "masked.tl")).masked.generated_source("jax")
    assert "# relations: coordinates of E" in masked_src
    assert ", rc_E, (), (), (), True, False)" in masked_src   # a plain sum over the points
    # the relation's arguments must be plain indices: `E(i, i + 1)` stays dense
    shifted = tl.parse("def s(N: size, E: rel(N, N), A: R[N, N]) -> R[N]:\n"
                       "    return gen i:N. sum j:N. [E(i, j + 1)] * A[i, j]\n")
    assert "# relations: dense masks" in shifted.s.generated_source("jax")
    assert "rc_E" not in shifted.s.generated_source("jax")


def test_cli_shows_the_coordinate_lowering():
    out = subprocess.run([sys.executable, "-m", "tensorlang.cli", "show",
                          str(EXAMPLES / "masked.tl"), "masked", "--stage", "jax"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "# relations: coordinates of E" in out and "tl_scatter(" in out


@contextlib.contextmanager
def sparse_fraction(fraction: float) -> Iterator[None]:
    """Summations under a relation take the coordinate path when their points are at most
    `fraction` of the dense box (1e18: always); the choice is made at trace time, hence
    the cleared caches."""
    import jax

    old = jax_rt.SPARSE_FRACTION
    jax_rt.SPARSE_FRACTION = fraction
    jax.clear_caches()
    try:
        yield
    finally:
        jax_rt.SPARSE_FRACTION = old
        jax.clear_caches()


ALWAYS = 1e18


RELATION_DEFS = (
    "def f(N: size, M: size, K: size, E: rel(N, M), A: R[N, K], B: R[M, K], C: R[N, M],\n"
    "      x: R[M]) -> (R[N, M], (R[N, K], (R[M], R))):\n"
    "    return (gen i:N, j:M. sum k:K. [E(i, j)] * A[i, k] * B[j, k] * C[i, j],\n"
    "            (gen i:N, k:K. sum j:M. [E(i, j) and j + 1 <= i] * B[j, k] * x[j + 1],\n"
    "             (gen j:M. sum i:N. [E(i, j)] * C[i, j] * A[i - 1, 0],\n"
    "              sum i:N, j:M. [E(i, j)] * C[i, j] * C[i, j])))\n")


@pytest.mark.parametrize("fraction", [ALWAYS, jax_rt.SPARSE_FRACTION])
@pytest.mark.parametrize("density", [0.0, 1.0, 0.3, 0.05])
@pytest.mark.parametrize("encoding", ["bool", "coo"])
def test_coordinate_lowering_agrees_with_the_interpreter(density, encoding, fraction):
    m = tl.parse(RELATION_DEFS)
    assert m.f.generated_source("jax").count("# relations: coordinates of E") == 4
    with sparse_fraction(fraction):
        fn = m.f.compile(backend="jax")
        for seed in range(2):
            sizes = {"N": 7, "M": 5, "K": 3}
            args = random_args(m.f.core(), sizes, np.random.default_rng(seed),
                               density=density, rel_encoding=encoding)
            assert_same(fn(**args), m.f.interpret(**args))


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(max_size=6))
def test_random_programs_with_relations(case):
    """Random programs with relation parameters (boolean or coordinate-list inputs, as
    drawn), whichever path each relation statement takes."""
    d, args = case
    if any(isinstance(q.type, ast.TRel) for q in d.params):
        _check_random(d, args)


INDEX_RANGES = {"i": "N", "j": "M", "k": "K"}
FACTORS = ["A[i, j]", "B[i, k]", "C[j, k]", "B[i + 1, k]", "C[M - 1 - j, k]", "A[i, 0]",
           "A[2 * i, j]", "tanh(C[j, k])", "x[j + 1]"]
CONDITIONS = ["true", "i != j", "j + 1 <= i", "k <= i", "i + j < N"]


@st.composite
def relation_sums(draw: Any) -> tuple[str, dict[str, int], float, str]:
    """`gen G. sum S. [E(i, j) and P] * F1 * F2`: i and j each generated or summed."""
    names = ["i", "j", "k"]
    summed = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    gens = [n for n in names if n not in summed]
    factors = draw(st.lists(st.sampled_from(FACTORS), min_size=1, max_size=2))
    cond = draw(st.sampled_from(CONDITIONS))
    body = f"sum {', '.join(f'{n}:{INDEX_RANGES[n]}' for n in sorted(summed))}. " \
           f"[E(i, j) and {cond}] * {' * '.join(factors)}"
    ret = "R"
    if gens:
        body = f"gen {', '.join(f'{n}:{INDEX_RANGES[n]}' for n in gens)}. {body}"
        ret = f"R[{', '.join(INDEX_RANGES[n] for n in gens)}]"
    text = ("def f(N: size, M: size, K: size, E: rel(N, M), A: R[N, M], B: R[N, K], "
            f"C: R[M, K], x: R[M]) -> {ret}:\n    return {body}\n")
    sizes = {n: draw(st.integers(0, 5)) for n in ("N", "M", "K")}
    return text, sizes, draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])), \
        draw(st.sampled_from(["bool", "coo"]))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(relation_sums())
def test_random_relation_sums_over_coordinates(case):
    text, sizes, density, encoding = case
    m = tl.parse(text)
    assert "# relations: coordinates of E" in m.f.generated_source("jax")
    args = random_args(m.f.core(), sizes, np.random.default_rng(5), density=density,
                       rel_encoding=encoding)
    with sparse_fraction(ALWAYS):
        assert_same(m.f.compile(backend="jax")(**args), m.f.interpret(**args))


def test_sharded_relations_stay_dense_masks():
    """With a mesh, a sharded relation keeps its boolean mask (same program, a second jitted
    module); an unsharded one still runs over its coordinates (replicated)."""
    fn = tl.load(str(EXAMPLES / "matfac.tl")).matfac_grad
    mesh = jax_backend.data_mesh(1)
    sizes = {"N": 6, "M": 5, "K": 2}
    args = random_args(fn.core(), sizes, np.random.default_rng(2), density=0.4)
    want = fn.interpret(**args)
    for shard, coords in (({"U": ("data", None)}, True), ({"Om": ("data", None)}, False)):
        c = jax_backend.compile_program(fn.final_program(), mesh, shard)
        assert ("coordinates of Om" in c.source) == coords == ("rc_Om" in c.source)
        with sparse_fraction(ALWAYS):
            assert_same(jax_backend.to_host(c(args)), want)
        assert_same(jax_backend.to_host(fn.compile(backend="jax", mesh=mesh, shard=shard)(
            **args)), want)
