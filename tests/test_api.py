"""The Python API (SPEC 9): modules, calls with size inference, results, cost, show, derived."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import api, pipeline
from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, Param, TSize

ROOT = pathlib.Path(__file__).resolve().parent.parent

SOURCE = """\
# small programs for the API tests
def qform(N: size, x: R[N], A: R[N, N]) -> R:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]

def conv(N: size, K: size, x: R[N + K - 1], w: R[K]) -> R[N]:
    out[i:N] = sum k:K. w[k] * x[i + k]
    return out

def loss(N: size, K: size, x: R[N + K - 1], w: R[K], b: R[N]) -> R:
    r = conv(N, K, x, w) - b
    return sum i:N. r[i] * r[i]

def stats(N: size, x: R[N]) -> (R, R[N]):
    s = sum i:N. x[i]
    return (s, gen i:N. x[i] * s)

def masked(N: size, E: rel(N, N), A: R[N, N]) -> R:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2

def scale(a: R, p: (R, R)) -> R:
    return a * p.0 + p.1

def qform_grad = grad(qform, x)
"""


@pytest.fixture(scope="module")
def m() -> api.Module:
    return tl.parse(SOURCE, "prog.tl")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


# -- modules -----------------------------------------------------------------------------------


def test_module_access(m):
    assert list(m) == ["qform", "conv", "loss", "stats", "masked", "scale", "qform_grad"]
    assert len(m) == 7 and "conv" in m
    assert m.qform is m["qform"] and m.qform.name == "qform"
    assert m.forward_names() == ["qform", "conv", "loss", "stats", "masked", "scale"]
    assert m.derived_names() == ["qform_grad"]
    assert m.last is m.qform_grad
    assert m.warnings == []
    with pytest.raises(KeyError, match="no function 'nope'.*qform"):
        m["nope"]
    with pytest.raises(AttributeError, match="nope"):
        m.nope


def test_load_file_and_errors(tmp_path):
    path = tmp_path / "q.tl"
    path.write_text(SOURCE)
    m = tl.load(path)
    assert m.filename == str(path) and m.qform.signature() == \
        "qform(N: size, x: R[N], A: R[N, N]) -> R"
    with pytest.raises(tl.TLError, match="cannot read"):
        tl.load(tmp_path / "missing.tl")
    bad = tmp_path / "bad.tl"
    # (a name used nowhere else: hash-consed nodes keep the location they were first built
    # with, so an identical subterm parsed earlier in this process would carry its location)
    bad.write_text("def f(N: size, x: R[N]) -> R:\n    return sum i:N. x[i] * y_undefined\n")
    with pytest.raises(tl.TypeCheckError) as err:
        tl.load(bad)
    assert f"{bad}:2:" in str(err.value) and "^" in str(err.value)
    with pytest.raises(tl.ParseError):
        tl.parse("def f(x: R) -> R\n    return x\n")


def test_warnings_are_collected():
    m = tl.parse("def f(N: size, xw: R[N]) -> R:\n    return sum i:N. xw[i + 1]\n", "w.tl")
    assert len(m.warnings) == 1
    assert "w.tl:2:" in str(m.warnings[0])


def test_example_qform_if_present():
    path = ROOT / "examples" / "qform.tl"
    if not path.exists():
        pytest.skip("examples/qform.tl not written yet")
    m = tl.load(path)
    x, A = np.arange(4.0), np.arange(16.0).reshape(4, 4)
    assert m.qform(x, A) == pytest.approx(x @ A @ x, rel=1e-12)


# -- calling -----------------------------------------------------------------------------------


def test_calls_keyword_positional_and_sizes(m, rng):
    x, A = rng.standard_normal(5), rng.standard_normal((5, 5))
    want = x @ A @ x
    for got in (m.qform(x=x, A=A), m.qform(x, A), m.qform(5, x, A), m.qform(x, A=A),
                m.qform(N=5, x=x, A=A), m.qform.interpret(x=x, A=A),
                m.qform.compile("interp")(x, A)):
        assert isinstance(got, float)
        assert got == pytest.approx(want, rel=1e-12)
    # lists and integer arrays are converted to float64
    assert m.qform([1, 2], [[1, 0], [0, 1]]) == 5.0


def test_affine_size_inference(m, rng):
    x, w, b = rng.standard_normal(7), rng.standard_normal(3), rng.standard_normal(5)
    out = m.conv(x, w)  # N from N + K - 1 = 7 once K = 3 is known
    ref = np.array([w @ x[i:i + 3] for i in range(5)])
    assert isinstance(out, np.ndarray) and out.shape == (5,)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    r = ref - b
    assert m.loss(x, w, b) == pytest.approx(r @ r, rel=1e-12)
    np.testing.assert_allclose(m.conv(N=5, K=3, x=x, w=w), ref, rtol=1e-12)


def test_shape_errors_name_parameter_expected_and_actual(m, rng):
    x, A = rng.standard_normal(3), rng.standard_normal((3, 4))
    with pytest.raises(tl.ShapeError) as err:
        m.qform(x, A)
    msg = str(err.value)
    assert "argument A of qform" in msg and "expected shape (3, 3)" in msg
    assert "got shape (3, 4)" in msg and "R[N, N]" in msg and "N = 3" in msg
    # located at the parameter's declaration (in a def first parsed here: hash-consed nodes
    # keep the location of their first parse, which may be another test's file)
    loc_m = tl.parse("# located\ndef only_in_loc_test(N: size, x: R[N],\n"
                     "                       A: R[N, N]) -> R:\n    return x[0] * A[0, 0]\n",
                     "loc.tl")
    with pytest.raises(tl.ShapeError) as err:
        loc_m.only_in_loc_test(x, A)
    assert str(err.value).startswith("loc.tl:3:24: shape error: argument A")
    assert str(err.value).endswith("A: R[N, N]) -> R:\n" + " " * 27 + "^" * 10)
    # affine: N = 5 from b, K = 3 from w, so x must have 5 + 3 - 1 = 7 entries
    with pytest.raises(tl.ShapeError, match=r"argument x of loss: expected shape \(7,\).*"
                                            r"got shape \(8,\)"):
        m.loss(np.zeros(8), np.zeros(3), np.zeros(5))
    with pytest.raises(tl.ShapeError, match=r"expected shape \(N, N\) \(2 dimensions\).*"
                                            r"got shape \(9,\)"):
        m.qform(A=np.zeros(9), x=np.zeros(3))
    with pytest.raises(tl.ShapeError, match="expected a scalar"):
        m.scale(np.zeros(2), (1.0, 2.0))
    with pytest.raises(tl.ShapeError, match="size N of qform must be non-negative"):
        m.qform(-1, np.zeros(0), np.zeros((0, 0)))
    with pytest.raises(tl.ShapeError, match=r"expected shape \(4,\)"):
        m.qform(4, np.zeros(3), np.zeros((4, 4)))  # an explicit size wins


def test_argument_errors(m):
    x, A = np.zeros(2), np.zeros((2, 2))
    with pytest.raises(tl.TLError, match="missing argument A"):
        m.qform(x=x)
    with pytest.raises(tl.TLError, match="no parameter 'B'"):
        m.qform(x=x, A=A, B=A)
    with pytest.raises(tl.TLError, match="takes 3 positional arguments"):
        m.qform(x)
    with pytest.raises(tl.TLError, match="missing argument w"):
        m.conv(x=np.zeros(4))
    with pytest.raises(tl.TLError, match="cannot infer sizes N, K of conv"):
        m.conv.cost()
    sig = tl.parse("def f(N: size, M: size, x: R[N + M]) -> R:\n    return x[0]\n").f
    with pytest.raises(tl.TLError, match="cannot infer sizes N, M of f"):
        sig(np.zeros(3))
    assert sig(np.arange(1.0, 4.0), N=1) == 1.0
    with pytest.raises(tl.TLError, match="must be a pair"):
        m.scale(1.0, 2.0)
    with pytest.raises(tl.TLError, match="must be a non-negative integer"):
        m.qform(2.5, x, A)


def test_result_types(m, rng):
    x = rng.standard_normal(4)
    s, v = m.stats(x)
    assert isinstance(s, float) and isinstance(v, np.ndarray)
    assert s == pytest.approx(x.sum(), rel=1e-12)
    np.testing.assert_allclose(v, x * x.sum(), rtol=1e-12)
    assert m.scale(2.0, (3.0, 4.0)) == 10.0
    assert m.scale(2, (3, 4)) == 10.0


def test_relations_as_masks_and_coordinates(m, rng):
    A = rng.standard_normal((4, 4))
    mask = np.zeros((4, 4), dtype=bool)
    coords = [(0, 1), (2, 2), (3, 0)]
    for i, j in coords:
        mask[i, j] = True
    want = A[0, 1] ** 2 + A[3, 0] ** 2
    assert m.masked(E=mask, A=A) == pytest.approx(want, rel=1e-12)
    assert m.masked(E=coords, A=A) == pytest.approx(want, rel=1e-12)
    assert m.masked(E=np.array(coords), A=A) == pytest.approx(want, rel=1e-12)
    assert m.masked(E=[], A=A) == 0.0
    with pytest.raises(tl.ShapeError, match="relation E of masked"):
        m.masked(E=np.zeros((3, 3)), A=A)
    with pytest.raises(tl.ShapeError, match=r"argument A of masked: expected shape \(3, 3\)"):
        m.masked(E=np.zeros((3, 3), dtype=bool), A=A)  # N = 3 from the mask


# -- cost, show, compile -----------------------------------------------------------------------


def test_cost_counts_and_per_binding(m):
    c = m.qform.cost(stage="source", N=10)
    # y: 10 rows of 10 muls and 9 adds; the result: 10 muls, 9 adds
    assert (c.adds, c.muls, c.calls, c.total) == (99, 110, 0, 209)
    assert c.per_binding["y"].total == 190 and c.per_binding["return"].total == 19
    assert m.qform.cost(stage="parsed", N=10) == c
    # default: the program as it will run; every stage keeps or lowers the cost
    assert m.qform.cost(N=10).total <= c.total
    # sizes can come from arrays; relations are needed
    assert m.qform.cost(stage="source", x=np.zeros(10)) == c
    mask = np.eye(3, dtype=bool) | np.eye(3, k=1, dtype=bool)
    assert m.masked.cost(stage="source", E=mask).calls == 2  # only the off-diagonal entries
    with pytest.raises(tl.TLError, match="missing relation E"):
        m.masked.cost(N=3)
    with pytest.raises(tl.TLError, match="cannot infer size N"):
        m.qform.cost()


def test_show_and_stages(m):
    text = m.qform.show()
    assert text.startswith("def qform(") and "sum" in text
    assert tl.parse(text).qform.source is m.qform.source  # printed source re-parses
    assert "Σ" in m.qform.show(unicode=True) or "∑" in m.qform.show(unicode=True)
    for stage in pipeline.STAGE_NAMES:
        assert m.conv.show(stage)
    with pytest.raises(tl.TLError, match="unknown stage 'nope'"):
        m.qform.show("nope")


def test_pipeline_stages_keep_meaning(m, rng):
    x, w = rng.standard_normal(6), rng.standard_normal(2)
    want = m.conv(x, w)
    args = m.conv.bind(x, w)
    from tensorlang.semantics.interp import interpret
    for stage in pipeline.STAGE_NAMES:
        got = interpret(pipeline.as_core(m.conv.run_to(stage)), args)
        np.testing.assert_allclose(got, want, rtol=1e-9)
    assert m.conv.run_to("letlift") is m.conv.run_to("letlift")  # memoised


def test_compile_backends(m):
    f = m.qform.compile("interp")
    assert f(np.ones(2), np.ones((2, 2))) == 4.0
    x, A = np.array([1.0, -2.0, 0.5]), np.arange(9.0).reshape(3, 3)
    fast = m.qform.compile("numba")
    assert fast is m.qform.compile("numba")            # compiled once
    assert fast(x, A) == pytest.approx(x @ A @ x, rel=1e-12)
    assert m.qform(x, A) == pytest.approx(x @ A @ x, rel=1e-12)   # numba is the default
    assert "def tl_kernel(" in m.qform.generated_source("numba")
    with pytest.raises(tl.TLError, match="unknown backend 'gpu'"):
        m.qform.compile("gpu")


def test_function_description(m):
    q = m.qform
    assert [p.name for p in q.params] == ["N", "x", "A"]
    assert q.ret_type is ast.REAL and q.source is q.source and isinstance(q.source, ast.Def)
    assert api.format_type(m.stats.ret_type) == "(R, R[N])"
    assert "qform(N: size" in repr(q)


# -- derived functions -------------------------------------------------------------------------


def test_derived_signatures(m):
    N = Affine.var("N")
    g = tl.grad(m.qform, "x")
    assert g.is_derived and g.ret_type is ast.tensor([N]) and g.params == m.qform.params
    assert tl.hessian(m.qform, "x").ret_type is ast.tensor([N, N])
    j = tl.jvp(m.qform, "A")
    assert [p.name for p in j.params] == ["N", "x", "A", "d_A"]
    assert j.ret_type is ast.TPair(ast.REAL, ast.REAL)
    v = tl.vjp(m.qform, "x", "A")
    assert v.params[-1].name == "d_y"
    assert v.ret_type is ast.TPair(ast.REAL, ast.TPair(ast.tensor([N]), ast.tensor([N, N])))
    assert tl.hvp(m.qform, "x").params[-1] == Param("v", ast.tensor([N]))
    assert tl.jacobian(m.conv, "w").ret_type is ast.tensor([N, Affine.var("K")])
    assert tl.grad(m.qform).ret_type is ast.TPair(ast.tensor([N]), ast.tensor([N, N]))
    gg = m.qform_grad
    assert gg.source.kind == "grad" and gg.base is m.qform and gg.ret_type is ast.tensor([N])


def test_derived_errors(m):
    with pytest.raises(tl.TLError, match="return R"):
        tl.grad(m.conv, "x")
    with pytest.raises(tl.TLError, match="not a parameter"):
        tl.grad(m.qform, "z")
    with pytest.raises(tl.TLError, match="real-valued"):
        tl.grad(m.qform, "N")


def test_derived_functions_run_show_and_cost(m):
    x, A = np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    g = tl.grad(m.qform, "x")
    np.testing.assert_allclose(g(x, A), (A + A.T) @ x, rtol=1e-12)
    np.testing.assert_allclose(m.qform_grad.interpret(x=x, A=A), (A + A.T) @ x, rtol=1e-12)
    assert "def qform_grad(" in g.show("ssa")
    cost = g.cost(N=3)
    base, bound, _ = g.cost_bound(N=3)
    assert base == m.qform.cost(N=3).total and cost.total <= bound
    h = tl.hessian(m.qform, "x")
    np.testing.assert_allclose(h(x, A), A + A.T, rtol=1e-12)
    with pytest.raises(tl.TypeCheckError, match="needs qform_grad to return R"):
        tl.grad(tl.grad(m.qform, "x"), "A")   # a gradient of a gradient needs an R output
    jg = tl.jvp(tl.grad(m.qform, "x"), "A")   # derived functions differentiate again
    y, dy = jg(x, A, A)
    np.testing.assert_allclose(dy, (A + A.T) @ x, rtol=1e-12)


# -- from_def (DSL users) ----------------------------------------------------------------------


def test_from_def():
    N = Affine.var("N")
    body = ast.Sum("i", N, ast.Mul(ast.Access(ast.Var("x"), (Affine.var("i"),)),
                                   ast.Access(ast.Var("x"), (Affine.var("i"),))))
    d = ast.Def("sumsq", (Param("N", TSize()), Param("x", ast.tensor([N]))), None, body)
    f = tl.from_def(d)
    assert f.ret_type is ast.REAL
    assert f(np.array([1.0, 2.0, 3.0])) == 14.0
    assert tl.grad(d, "x").ret_type is ast.tensor([N])
    with pytest.raises(tl.TLError, match="expects a tensorlang Def"):
        tl.from_def("def f")


def test_cost_runs_the_whole_pipeline_and_fails_loudly(monkeypatch):
    """No silent "stop earlier": a stage that cannot handle the program makes cost, show and
    compile raise instead of reporting an earlier stage's program as the one that runs."""
    import importlib

    ssa = importlib.import_module("tensorlang.passes.ssa")

    def refuse(d):
        raise tl.NotYetSupported("not this one")
    monkeypatch.setattr(ssa, "to_ssa", refuse)
    f = tl.parse("def only_here(N: size, v: R[N]) -> R:\n    return sum i:N. v[i] * 3.0\n")
    f = f.only_here
    assert f.default_stage() == "simplified"
    with pytest.raises(tl.NotYetSupported, match="not this one"):
        f.cost(N=4)
    assert f.cost(stage="genpush", N=4).muls == 4  # an earlier stage only when asked for
    with pytest.raises(tl.NotYetSupported, match="not this one"):
        f.show("ssa")
    with pytest.raises(tl.NotYetSupported, match="not this one"):
        f.compile("numba")


def test_dsl_functions():
    dsl = pytest.importorskip("tensorlang.dsl")
    N = dsl.size("N")
    x, A = dsl.param("x", dsl.R[N]), dsl.param("A", dsl.R[N, N])
    y = dsl.bind("y", dsl.gen(N, lambda i: dsl.sum(N, lambda j: A[i, j] * x[j])))
    d = dsl.function("qform", [N, x, A], dsl.sum(N, lambda i: x[i] * y[i]), ret=dsl.R)
    q = tl.from_def(d)
    assert q.source is tl.parse(SOURCE).qform.source  # the same core Def as the parser's
    xs, As = np.arange(3.0), np.ones((3, 3))
    assert q(xs, As) == pytest.approx(xs @ As @ xs)
    twice = dsl.function("twice", [N, x, A], 2.0 * dsl.call(d, N, x, A))
    assert tl.from_def(twice, earlier=[q])(xs, As) == pytest.approx(2 * xs @ As @ xs)


# -- the call path (issue 14) ------------------------------------------------------------------


def test_results_are_freed_without_the_garbage_collector(m, rng):
    """No reference cycle holds a result: dropping the last reference frees it at once."""
    import gc
    import weakref

    x, A = rng.standard_normal(4), rng.standard_normal((4, 4))
    calls = [lambda: m.qform_grad(x=x, A=A), lambda: m.stats(x=x)[1],
             lambda: m.stats.compile("interp")(x=x)[1]]
    for call in calls:
        call()                                   # compiled and warm
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for call in calls:
            out = call()
            assert isinstance(out, np.ndarray)
            ref = weakref.ref(out)
            del out
            assert ref() is None
    finally:
        if was_enabled:
            gc.enable()


def test_calls_bind_once_per_shape(m, rng, monkeypatch):
    """A call shaped like an earlier one runs its binding plan: no size is solved and no
    argument checked again (by the binder or the backend); errors are still found."""
    from tensorlang.semantics import interp

    x, A = rng.standard_normal(3), rng.standard_normal((3, 3))
    m = tl.parse(SOURCE, "prog.tl")      # no plans from earlier tests
    f = m.qform
    f(x=x, A=A)
    full, backend = [], []
    real_bind, real_interp = api.bind_args, interp.bind_args
    monkeypatch.setattr(api, "bind_args", lambda *a, **k: full.append(1) or real_bind(*a, **k))
    monkeypatch.setattr(interp, "bind_args",
                        lambda *a, **k: backend.append(1) or real_interp(*a, **k))
    for _ in range(3):
        assert f(x=x, A=A) == pytest.approx(float(x @ A @ x), rel=1e-12)
    assert f(x, A) == pytest.approx(float(x @ A @ x), rel=1e-12)        # positional form
    assert len(full) == 1 and not backend
    x4, A4 = rng.standard_normal(4), rng.standard_normal((4, 4))
    assert f(x=x4, A=A4) == pytest.approx(float(x4 @ A4 @ x4), rel=1e-12)   # new shapes
    assert f(x=x4.astype(np.float32), A=A4) == pytest.approx(
        float(x4.astype(np.float32) @ A4 @ x4.astype(np.float32)), rel=1e-6)
    assert f(x=A4[:, 0], A=A4) == pytest.approx(float(A4[:, 0] @ A4 @ A4[:, 0]), rel=1e-12)
    assert len(full) == 3
    with pytest.raises(tl.ShapeError, match=r"argument A of qform: expected shape \(4, 4\)"):
        f(x=x4, A=A)                      # a planned shape, wrong in combination
    with pytest.raises(tl.ShapeError, match="argument A of qform"):
        f(N=4, x=x4, A=A)
    mask = np.eye(3, dtype=bool)
    coords = np.argwhere(mask)
    assert m.masked(E=coords, A=A) == 0.0
    with pytest.raises(tl.ShapeError, match=r"relation E of masked: coordinate \(3, 0\)"):
        m.masked(E=np.array([[3, 0], [0, 0], [1, 1]]), A=A)   # the planned shape, bad data
    with pytest.raises(tl.ShapeError, match="must hold real numbers"):
        f(x=x.astype(complex), A=A)


def test_index_arrays_take_the_binding_plan_with_their_entries_checked():
    """A call like an earlier one runs its plan: an index array is still turned into its
    relation's coordinates (an (N, 3) integer array is not read as coordinates) and its
    entries are checked on every call."""
    m = tl.parse("def f(N: size, M: size, idx: Z[N, 3] in M, x: R[M]) -> R[N]:\n"
                 "    return gen i:N. sum k:3. x[idx[i, k]]\n")
    x = np.arange(6.0)
    rng = np.random.default_rng(0)
    for backend in ("numba", "interp"):
        f = m.f.compile(backend)
        for _ in range(3):
            idx = rng.integers(0, 3, size=(4, 3))   # (also valid coordinates of the box)
            np.testing.assert_allclose(f(idx=idx, x=x), x[idx].sum(axis=1))
        bad = idx.copy()
        bad[2, 1] = 6
        with pytest.raises(tl.ShapeError, match=r"idx\[2, 1\] = 6"):
            f(idx=bad, x=x)
