"""Derived functions (the pipeline's `derive` stage, passes/derive.py): signatures of SPEC
2.5, values against finite differences and closed forms, Hessians/Jacobians without a loop
over directional derivatives, derived programs that print, re-parse, cost and differentiate
again, the pathological suite's cost ratios as N grows, and derived functions as pipeline
inputs (`pipeline.Derivation`: stages, calls from defs, a front end that runs no pass).

The rule-level tests here differentiate the `ssa` stage of a program (`derive` below); what
users run -- the derivative of the program as compiled -- is tested at the end and in
tests/test_theorems.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.ir import ast, tssa
from tensorlang.syntax import ssa_printer
from tensorlang.semantics.cost import cost_program
from tensorlang.semantics.interp import evaluate_program
from tensorlang.ir.ast import DerivedDef
from tensorlang.semantics.cost import cost_def
from tensorlang.semantics.interp import interpret
from tensorlang.syntax.errors import TLError
from tensorlang import pipeline
from tensorlang.passes import derive as derive_stage
from tensorlang.proofs.theorems import flat, program_cost, run, to_program
from tensorlang.semantics.bounds import type_size
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.testing import differentiable_programs, random_value
from tensorlang.check.typecheck import derived_signature
from test_adjoint import fd_grad
from test_fwd import fd_jvp

KINDS = ("jvp", "vjp", "grad", "hvp", "hessian", "jacobian")


def derive(d: ast.Def | tssa.Program, kind: str, wrt: tuple[str, ...] = (),
           name: str | None = None) -> tssa.Program:
    """The derive stage's rules on the Tensor SSA of `d` (the `ssa` stage)."""
    return derive_stage.derive(to_program(d), kind, wrt, name)


def derive_def(d: ast.Def | tssa.Program, kind: str, wrt: tuple[str, ...] = ()) -> ast.Def:
    return tssa.to_core(derive(d, kind, wrt))


def example(name: str):
    w = WORKLOADS[name]
    return w, tl.load(str(EXAMPLES / w.file))[w.func].core()


def args_for(p: tssa.Program, base: dict, seed: int = 0) -> dict:
    """`base` plus random values for the derived program's extra parameters."""
    sizes = {k: v for k, v in base.items() if isinstance(v, int)}
    rng = np.random.default_rng(seed)
    out = {q.name: base[q.name] for q in p.params if q.name in base}
    for q in p.params:
        if q.name not in out:
            out[q.name] = random_value(q.type, sizes, rng)
    return out


# ---------------------------------------------------------------------------------------------
# Signatures


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_derived_signatures_follow_the_type_checker(name):
    w, d = example(name)
    p = to_program(d)
    real = [q.name for q in p.params if not isinstance(q.type, (ast.TSize, ast.TRel))]
    args = w.inputs(w.sizes(2), np.random.default_rng(0))
    for kind in KINDS:
        wrt = (real[0],) if kind in ("hvp", "hessian", "jacobian") else ()
        try:
            params, ret = derived_signature(DerivedDef("g", kind, p.name, wrt), p.params,
                                            p.ret)
        except TLError:
            with pytest.raises(TLError):
                derive(d, kind, wrt)
            continue
        g = derive(d, kind, wrt)
        assert g.params == tuple(params) and g.ret == ret
        assert is_tensor_ssa(g) is None, is_tensor_ssa(g)
        value = run(g, args_for(g, args))
        assert len(flat(value)) == _entries(ret, args)


def _entries(t, args) -> int:
    return type_size(t, {k: v for k, v in args.items() if isinstance(v, int)})


def test_derive_checks_its_arguments():
    _, d = example("qform")
    with pytest.raises(TLError):
        derive(d, "hessian", ("x", "A"))
    with pytest.raises(TLError):
        derive(d, "curl", ("x",))
    with pytest.raises(TLError):
        derive(d, "grad", ("N",))


# ---------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("name,x", [("qform", "x"), ("qform2", "A"), ("logreg", "w"),
                                    ("matfac", "U"), ("nbody", "P"), ("nnmatfac", "W"),
                                    ("deconv_loss", "w"), ("imgarap", "T"), ("masked", "A")])
def test_grad_matches_finite_differences(name, x):
    w, d = example(name)
    args = w.inputs(w.sizes(3), np.random.default_rng(1))
    p = to_program(d)
    g = run(derive(d, "grad", (x,)), args)
    np.testing.assert_allclose(g, fd_grad(p, args, x, 1.0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name,x", [("qform", "x"), ("logreg", "w"), ("nbody", "P"),
                                    ("matfac", "U"), ("nnmatfac", "H")])
def test_hvp_and_hessian_agree_with_differences_of_the_gradient(name, x):
    w, d = example(name)
    args = w.inputs(w.sizes(3), np.random.default_rng(2))
    grad = derive(d, "grad", (x,))
    hvp = derive(d, "hvp", (x,))
    hess = run(derive(d, "hessian", (x,)), args)
    shape = np.shape(args[x])
    v = np.random.default_rng(3).uniform(-1, 1, shape)
    hv = run(hvp, {**args, "v": v})
    np.testing.assert_allclose(hv, fd_jvp(grad, args, [x], {x: v}).reshape(shape),
                               rtol=1e-5, atol=1e-7)
    n = int(np.prod(shape))
    np.testing.assert_allclose(hess.reshape(n, n) @ v.reshape(n), hv.reshape(n), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("body", ["tanh(x[i])", "sigmoid(x[i]) * x[i]", "tan(x[i])",
                                  "max(x[i] * x[i], y[i]) * x[i]",
                                  "min(sin(x[i]), x[i] * y[i])"])
def test_hvp_and_hessian_of_second_order_helpers_and_selections(body):
    """The second derivatives call d2tanh & co. and the selections (sel_ge, keep_ge,
    keep_gt): they agree with differences of the gradient, and hvp costs at most 4 grads."""
    src = f"def f(N: size, x: R[N], y: R[N]) -> R:\n    return sum i:N. {body}\n"
    d = tl.parse(src)["f"].core()
    grad, hvp = derive(d, "grad", ("x",)), derive(d, "hvp", ("x",))
    rng = np.random.default_rng(11)
    args = {"N": 5, "x": rng.uniform(-1, 1, 5), "y": rng.uniform(-1, 1, 5)}
    v = rng.uniform(-1, 1, 5)
    hv = run(hvp, {**args, "v": v})
    np.testing.assert_allclose(hv, fd_jvp(grad, args, ["x"], {"x": v}), rtol=1e-5, atol=1e-8)
    hess = run(derive(d, "hessian", ("x",)), args)
    np.testing.assert_allclose(hess @ v, hv, rtol=1e-10, atol=1e-12)
    for n in (5, 100):
        assert program_cost(hvp, {"N": n}) <= 4 * program_cost(grad, {"N": n})


def test_jacobian_matches_finite_differences():
    for name, x in [("conv", "x"), ("arap_residuals", "T")]:
        w, d = example(name)
        args = w.inputs(w.sizes(3), np.random.default_rng(4))
        p = to_program(d)
        jac = run(derive(d, "jacobian", (x,)), args)
        shape = np.shape(args[x])
        m = jac.reshape(-1, int(np.prod(shape)))
        for k in range(m.shape[1]):
            e = np.zeros(m.shape[1])
            e[k] = 1.0
            col = fd_jvp(p, args, [x], {x: e.reshape(shape)})
            np.testing.assert_allclose(m[:, k], col, rtol=1e-6, atol=1e-8)


def test_logistic_regression_hessian_closed_form():
    w, d = example("logreg")
    args = w.inputs(w.sizes(5), np.random.default_rng(6))
    H = run(derive(d, "hessian", ("w",)), args)
    X, y = args["X"], args["y"]
    s = 1.0 / (1.0 + np.exp(y * (X @ args["w"])))
    np.testing.assert_allclose(H, X.T @ np.diag(s * (1 - s)) @ X, rtol=1e-10, atol=1e-13)


def test_matrix_factorisation_hessian_closed_form():
    w, d = example("matfac")
    args = w.inputs(w.sizes(4), np.random.default_rng(7))
    args["Om"] = np.ones_like(args["Om"])            # the unmasked case of seed 000
    H = run(derive(d, "hessian", ("U",)), args)
    V = args["V"]
    N, K = args["U"].shape
    ref = 2.0 * np.einsum("ac,kl->akcl", np.eye(N), V.T @ V)
    np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-13)


def test_qform_hessian_is_a_plus_a_transpose():
    w, d = example("qform")
    args = w.inputs(w.sizes(6), np.random.default_rng(8))
    H = derive(d, "hessian", ("x",))
    np.testing.assert_allclose(run(H, args), args["A"] + args["A"].T, rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# Costs: no loop over n directional derivatives


def test_qform_hessian_costs_n_squared():
    _, d = example("qform")
    h, hvp = derive(d, "hessian", ("x",)), derive(d, "hvp", ("x",))
    c100, c200 = (program_cost(h, {"N": n}) for n in (100, 200))
    assert c100 == 100 * 100 and c200 == 200 * 200          # one add per entry
    assert c200 / c100 == 4.0
    assert c100 < 100 * program_cost(hvp, {"N": 100}) / 50  # far below n hvps


def test_logreg_hessian_costs_the_closed_form():
    w, d = example("logreg")
    h, hvp = derive(d, "hessian", ("w",)), derive(d, "hvp", ("w",))
    for n in (20, 40):
        sizes = w.sizes(n)
        M, N = sizes["M"], sizes["N"]
        closed = 2 * N * N * M                               # X^T diag(.) X
        c = program_cost(h, sizes)
        assert c <= closed + 20 * M * N                      # plus O(M N) pointwise work
        assert c < N * program_cost(hvp, sizes) / 2


def test_matfac_hessian_costs_the_closed_form():
    w, d = example("matfac")
    h, hvp = derive(d, "hessian", ("U",)), derive(d, "hvp", ("U",))
    for n in (10, 20):
        sizes = w.sizes(n)
        args = {**sizes, "Om": np.ones((sizes["N"], sizes["M"]), dtype=bool)}
        N, M, K = sizes["N"], sizes["M"], sizes["K"]
        # 2 [i == i'] V[j, l] (N M K muls), then sum_j V[j, k] * that: N K^2 (2M - 1),
        # i.e. the closed form 2 delta (V^T V) per row of U -- not N K hvps
        assert program_cost(h, args) == N * K * K * (2 * M - 1) + N * M * K
        assert program_cost(h, args) < N * K * program_cost(hvp, args) / 10


# ---------------------------------------------------------------------------------------------
# Derived programs are ordinary programs


@pytest.mark.parametrize("kind,name,x", [("grad", "nbody", "P"), ("hessian", "qform", "x"),
                                         ("jvp", "conv", "w"), ("vjp", "matfac", "V"),
                                         ("hvp", "logreg", "w"), ("jacobian", "conv", "x")])
def test_derived_programs_print_parse_cost_and_run(kind, name, x):
    w, d = example(name)
    g = derive(d, kind, (x,))
    args = w.inputs(w.sizes(3), np.random.default_rng(9))
    full = args_for(g, args)
    text = ssa_printer.to_text(g)
    again = tl.parse(text)[g.name]
    np.testing.assert_allclose(flat(again.interpret(**full)), flat(run(g, full)), rtol=1e-12)
    sizes = {k: v for k, v in full.items() if not isinstance(v, (float, tuple))
             and not (isinstance(v, np.ndarray) and v.dtype == np.float64)}
    assert cost_def(tssa.to_core(g), sizes).total == cost_program(g, sizes).total
    np.testing.assert_allclose(flat(evaluate_program(g, full)), flat(run(g, full)), rtol=1e-12)


def test_derivatives_compose():
    """grad of grad, jvp of a derived Def, hessian of a derived program."""
    m = tl.parse("def f(x: R) -> R:\n    return sin(x) * x\n")
    d = m["f"].core()
    g = derive_def(d, "grad", ("x",))
    gg = derive(g, "grad", ("x",))
    x = 0.7
    assert run(gg, {"x": x}) == pytest.approx(2 * np.cos(x) - x * np.sin(x), rel=1e-12)
    _, dq = example("qform")
    hv = derive(derive_def(dq, "grad", ("x",)), "jvp", ("x",))
    rng = np.random.default_rng(0)
    a = {"N": 4, "x": rng.uniform(size=4), "A": rng.uniform(size=(4, 4)),
         "d_x": rng.uniform(size=4)}
    _, t = run(hv, a)
    np.testing.assert_allclose(t, (a["A"] + a["A"].T) @ a["d_x"], rtol=1e-12)
    w, dl = example("logreg")
    third = derive(derive_def(dl, "grad", ("w",)), "jacobian", ("w",))
    args = w.inputs(w.sizes(3), rng)
    np.testing.assert_allclose(run(third, args), run(derive(dl, "hessian", ("w",)), args),
                               rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# The pathological suite: bounded ratios as N grows


@pytest.mark.parametrize("name,x", [("trace_diag", "x"), ("row_col", "X"), ("skip_one", "x"),
                                    ("dead_code", "x"), ("deconv_loss", "x"),
                                    ("conv", "x")])
def test_pathological_cost_ratios_stay_bounded(name, x):
    w, d = example(name)
    p = to_program(d)
    kinds = ("jvp", "vjp") if name == "conv" else ("grad", "jvp", "vjp")
    progs = {k: derive(d, k, (x,)) for k in kinds}
    ratios: dict[str, list[float]] = {k: [] for k in kinds}
    for n in (10, 100, 1000):
        sizes = {k: v for k, v in w.sizes(n).items()}
        cf = program_cost(p, sizes)
        for k, g in progs.items():
            ratios[k].append(program_cost(g, sizes) / cf)
    for k, r in ratios.items():
        assert max(r) <= 4.0, (k, r)
        assert r[2] <= r[0] * 1.05 + 1e-9, (k, r)          # does not grow with N


@given(differentiable_programs())
def test_jacobian_hessian_and_hvp_of_random_programs(case):
    d, args, wrt = case
    p = to_program(d)
    x = wrt[0]
    if not isinstance(ast.scalar_of(p.param_types[x]), ast.TReal) or not isinstance(
            ast.scalar_of(p.ret), ast.TReal):
        return
    shape = np.shape(args[x])
    nx = int(np.prod(shape))
    if nx == 0:
        return
    cols = [np.eye(max(nx, 1))[c].reshape(shape) if shape else 1.0 for c in range(nx)]
    jac = np.asarray(run(derive(p, "jacobian", (x,)), args)).reshape(-1, nx)
    for c, e in enumerate(cols):
        fd = fd_jvp(p, args, [x], {x: e})
        np.testing.assert_allclose(jac[:, c], fd, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.abs(fd).max(initial=0.0)))
    if not isinstance(p.ret, ast.TReal):
        return
    hess = np.asarray(run(derive(p, "hessian", (x,)), args)).reshape(nx, nx)
    hvp, grad = derive(p, "hvp", (x,)), derive(p, "grad", (x,))
    for c, e in enumerate(cols):
        hv = flat(run(hvp, {**args, "v": e}))
        np.testing.assert_allclose(hess[:, c], hv, rtol=1e-9,
                                   atol=1e-9 * max(1.0, np.abs(hv).max(initial=0.0)))
        fd = fd_jvp(grad, args, [x], {x: e})
        np.testing.assert_allclose(hv, fd, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.abs(fd).max(initial=0.0)))


# ---------------------------------------------------------------------------------------------
# Derived functions in the pipeline: the `derive` stage differentiates the base as compiled

QFORM = ("def qform(N: size, x: R[N], A: R[N, N]) -> R:\n"
         "    return sum i:N, j:N. x[i] * A[i, j] * x[j]\n")


def test_derive_stage_differentiates_the_base_as_compiled():
    f = tl.parse(QFORM).qform
    g = tl.grad(f, "x")
    d = g.program()
    assert isinstance(d, pipeline.Derivation) and d.base is f.program()
    base = pipeline.run_to(f.program(), pipeline.FINAL)
    assert pipeline.run_to(d, "derive") == derive_stage.derive(base, "grad", ("x",),
                                                               "qform_grad")
    assert pipeline.run_to(d, "simplified") is pipeline.run_to(d, "simplified")  # memoised
    assert g.core() == tssa.to_core(pipeline.run_to(d, "derive"))
    for stage in pipeline.STAGE_NAMES:   # every stage of a derived function keeps its meaning
        assert g.show(stage)
    x, A = np.array([1.0, -2.0, 0.5]), np.arange(9.0).reshape(3, 3)
    want = (A + A.T) @ x
    for stage in ("parsed", "ssa", "derive", "simplified"):
        got = interpret(pipeline.as_core(g.run_to(stage)), {"N": 3, "x": x, "A": A})
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert g.default_stage() == pipeline.FINAL
    assert g.cost(N=3) == pipeline.cost(d, pipeline.FINAL, {"N": 3})


def test_derived_of_derived_runs_through_the_pipeline():
    f = tl.parse(QFORM).qform
    jg = tl.jvp(tl.grad(f, "x"), "x")
    d = jg.program()
    assert isinstance(d.base, pipeline.Derivation) and d.base.kind == "grad"
    x, A, v = np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0.5, -1.0])
    _, hv = jg(x, A, v)
    np.testing.assert_allclose(hv, (A + A.T) @ v, rtol=1e-12)


def test_calls_of_derived_functions_inline_the_derive_stage():
    m = tl.parse(QFORM + "def g = grad(qform, x)\n"
                 "def u(N: size, x: R[N], A: R[N, N]) -> R:\n"
                 "    return sum i:N. g(x, A)[i]\n")
    x, A = np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    assert m.u(x, A) == pytest.approx(float(np.sum((A + A.T) @ x)), rel=1e-12)
    assert m.u.cost(N=2).total <= m.u.cost(stage="source", N=2).total


def test_the_front_end_runs_no_pass():
    """Checking a module with derived defs (and a call of one, given the pipeline) imports
    no pass module: the derivative passes run in the pipeline, not in check/."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "from tensorlang.syntax import parser\n"
        "from tensorlang.check import typecheck\n"
        f"src = {QFORM!r} + 'def g = grad(qform, x)\\n'\n"
        "typecheck.check_module(parser.parse_module(src, 't.tl'), 't.tl')\n"
        "bad = [m for m in sys.modules if m.startswith('tensorlang.passes')]\n"
        "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_derivation_needs_a_program():
    with pytest.raises(TLError, match="differentiates core definitions"):
        pipeline.Derivation("grad", "qform", ("x",), "g")
    with pytest.raises(TLError, match="Tensor-SSA programs"):
        derive_stage.derive(tl.parse(QFORM).qform.core(), "grad", ("x",))
