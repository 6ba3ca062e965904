"""Adjoint differentiation (passes/vjp/): vjp programs pass the dot-product test
against the jvp, agree with finite-difference gradients, and are gathers: the index solver
turns every contribution `gen K. sum I. [A(I) == K] ...` into a read of K's preimage."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.ir import tssa
from tensorlang.syntax import ssa_printer
from tensorlang.semantics.cost import cost_program
from tensorlang.passes.vjp import vjp_program
from tensorlang.passes.jvp import jvp_program
from tensorlang.proofs.theorems import (check_derivatives, dense_points, flat, program_cost, run,
                                        to_program)
from tensorlang.testing import differentiable_programs
from test_fwd import assert_ssa, fd_jvp

SEED_004 = """
def f4(N: size, M: size, K: size, a: R[N, K], b: R[M, K], c: R[N, N], d: R[N + K - 1]) -> R[N, M]:
    f[i:N, j:M] = exp(-(sum k:K. (a[i, k] + b[j, k]) ** 2 * c[i, i] + d[i + k] ** 3))
    return f
"""


def prog(src: str, name: str):
    return to_program(tl.parse(src)[name].core())


def fd_grad(p, args, x, dy, h=1e-6):
    """d<dy, f(x)>/dx by central differences, entry by entry."""
    base = np.asarray(args[x], dtype=float)
    out = np.zeros(base.shape)
    for k in np.ndindex(base.shape):
        e = np.zeros(base.shape)
        e[k] = 1.0
        out[k] = flat(dy) @ fd_jvp(p, args, [x], {x: e}, h)
    return out


# ---------------------------------------------------------------------------------------------
# Dot-product test and finite differences


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_vjp_of_every_example_passes_the_dot_product_test(name):
    w = WORKLOADS[name]
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    args = w.inputs(w.sizes(3), np.random.default_rng(5))
    report = check_derivatives(d, args, seed=5)
    assert report.ok, report


@given(differentiable_programs())
def test_vjp_of_random_programs_passes_the_dot_product_test(case):
    d, args, wrt = case
    p = to_program(d)
    v = vjp_program(p, wrt)
    assert_ssa(v)
    report = check_derivatives(p, args, wrt)
    assert report.dot_error < 1e-9 and report.primal_error == 0.0, report


def test_seed_004_example_gradients_match_finite_differences():
    p = prog(SEED_004, "f4")
    rng = np.random.default_rng(4)
    args = {"N": 3, "M": 2, "K": 3, "a": rng.uniform(-.5, .5, (3, 3)),
            "b": rng.uniform(-.5, .5, (2, 3)), "c": rng.uniform(0, .5, (3, 3)),
            "d": rng.uniform(-.5, .5, 5)}
    v = vjp_program(p)
    dy = rng.uniform(-1, 1, (3, 2))
    y, grads = run(v, {**args, "d_y": dy})
    np.testing.assert_array_equal(y, run(p, args))
    ga, (gb, (gc, gd)) = grads
    for x, g in zip("abcd", (ga, gb, gc, gd)):
        np.testing.assert_allclose(g, fd_grad(p, args, x, dy), rtol=1e-6, atol=1e-9)
    # c is read on its diagonal only: its gradient is diagonal
    assert np.all(gc[~np.eye(3, dtype=bool)] == 0.0)
    assert check_derivatives(p, args).ok


# ---------------------------------------------------------------------------------------------
# Gathers, never scatters


def test_strided_read_has_zero_adjoint_at_odd_positions():
    p = prog("def f(N: size, x: R[2 * N]) -> R[N]:\n    y[i:N] = sin(x[2 * i])\n"
             "    return y\n", "f")
    v = vjp_program(p)
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(-1, 1, 10), rng.uniform(-1, 1, 5)
    _, g = run(v, {"N": 5, "x": x, "d_y": dy})
    np.testing.assert_array_equal(g[1::2], 0.0)
    np.testing.assert_allclose(g[0::2], dy * np.cos(x[0::2]), rtol=1e-12)
    # the gather costs one multiplication per even position, no additions
    c = cost_program(v, {"N": 5})
    assert (c.adds, c.muls, c.calls) == (0, 5, 10)


@pytest.mark.parametrize("M", [2, 3, 5])
def test_block_read_x_of_M_i_plus_j(M):
    p = prog(f"def f(N: size, x: R[{M} * N]) -> R[N, {M}]:\n"
             f"    y[i:N, j:{M}] = exp(x[{M} * i + j])\n    return y\n", "f")
    v = vjp_program(p)
    rng = np.random.default_rng(M)
    n = 4
    x, dy = rng.uniform(-1, 1, M * n), rng.uniform(-1, 1, (n, M))
    _, g = run(v, {"N": n, "x": x, "d_y": dy})
    np.testing.assert_allclose(g, (dy * np.exp(x.reshape(n, M))).reshape(-1), rtol=1e-12)
    # every x entry has exactly one preimage: no additions anywhere in the adjoint
    for nn in (4, 40):
        c = cost_program(v, {"N": nn})
        assert c.adds == 0 and c.muls == M * nn


def test_diagonal_read():
    p = prog("def f(N: size, x: R[N, N]) -> R[N]:\n    y[i:N] = exp(x[i, i])\n"
             "    return y\n", "f")
    v = vjp_program(p)
    rng = np.random.default_rng(1)
    x, dy = rng.uniform(-1, 1, (4, 4)), rng.uniform(-1, 1, 4)
    _, g = run(v, {"N": 4, "x": x, "d_y": dy})
    np.testing.assert_allclose(g, np.diag(dy * np.exp(np.diag(x))), rtol=1e-12)
    adj = v.defs[v.output[1]]
    assert isinstance(adj, tssa.ContractRhs) and not adj.sdims  # a masked gather, no sum
    assert program_cost(v, {"N": 100}) == 200  # N exp calls (shared) + N products


def test_adjoint_of_convolution_is_a_correlation():
    """conv reads x[i + k]: the adjoint sums over the K taps that reach each x entry."""
    p = prog("def conv(N: size, K: size, x: R[N + K - 1], w: R[K]) -> R[N]:\n"
             "    out[i:N] = sum k:K. w[k] * x[i + k]\n    return out\n", "conv")
    v = vjp_program(p, ["x"])
    rng = np.random.default_rng(3)
    n, k = 6, 3
    x, w, dy = rng.uniform(-1, 1, n + k - 1), rng.uniform(-1, 1, k), rng.uniform(-1, 1, n)
    _, g = run(v, {"N": n, "K": k, "x": x, "w": w, "d_y": dy})
    np.testing.assert_allclose(g, np.convolve(dy, w), rtol=1e-12)
    adj = v.defs[v.output[1]]
    assert isinstance(adj, tssa.ContractRhs) and len(adj.sdims) == 1  # sum over the taps
    # the adjoint: N K muls and one add per live term beyond the first of each of the
    # N + K - 1 outputs -- no more than the convolution (N K muls, N (K - 1) adds)
    for n in (10, 100):
        args = {"N": n, "K": 5}
        adjoint = program_cost(v, args) - program_cost(p, args)
        assert adjoint == 2 * n * 5 - (n + 5 - 1) <= program_cost(p, args)


def test_adjoint_of_max_is_one_selection_call_per_argument():
    """ADJ-select: d_x += keep_ge(x, y, d_v), d_y += keep_gt(y, x, d_v) (one call each, no
    product with an indicator); a broadcast cotangent is read directly, the grad seed 1
    leaves the indicator ge(x, y)."""
    src = ("def f(N: size, x: R[N], y: R[N]) -> R[N, N]:\n"
           "    z[i:N, j:N] = max(x[i], y[j])\n    return z\n")
    p = prog(src, "f")
    v = vjp_program(p)
    assert_ssa(v)
    fns = sorted(s.rhs.fn for s in v.stmts if isinstance(s.rhs, tssa.MapRhs))
    assert fns == ["keep_ge", "keep_gt", "max"]
    assert not any(isinstance(s.rhs, tssa.ContractRhs) for s in v.stmts)
    rng = np.random.default_rng(8)
    a = {"N": 4, "x": rng.uniform(-1, 1, 4), "y": rng.uniform(-1, 1, 4)}
    dy = rng.uniform(-1, 1, (4, 4))
    _, (gx, gy) = run(v, {**a, "d_y": dy})
    np.testing.assert_allclose(gx, fd_grad(p, a, "x", dy), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gy, fd_grad(p, a, "y", dy), rtol=1e-6, atol=1e-9)
    s = prog("def f(N: size, x: R[N], y: R[N]) -> R:\n    return sum i:N. max(x[i], y[i])\n",
             "f")
    text = ssa_printer.to_text(vjp_program(s))
    assert "keep_ge(x[i0], y[i0], d_y)" in text and "keep_gt(y[i0], x[i0], d_y)" in text
    g = vjp_program(s, ["x"], seed="one", outputs="grads")
    assert [st.rhs.fn for st in g.stmts if isinstance(st.rhs, tssa.MapRhs)] == ["ge"]


def test_fan_out_becomes_one_guarded_add():
    p = prog("def f(N: size, x: R[N]) -> R[N]:\n"
             "    y[i:N] = [i < 3] * exp(x[i]) + sin(x[i])\n    return y\n", "f")
    v = vjp_program(p)
    adds = [s for s in v.stmts if isinstance(s.rhs, tssa.AddRhs)]
    assert len(adds) == 2  # the primal add and the adjoint's fan-in
    c = cost_program(v, {"N": 10})
    assert c.per_stmt[adds[-1].var][0] == 3  # counted only where both contributions live
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(-1, 1, 10), rng.uniform(-1, 1, 10)
    _, g = run(v, {"N": 10, "x": x, "d_y": dy})
    ref = dy * (np.cos(x) + np.where(np.arange(10) < 3, np.exp(x), 0.0))
    np.testing.assert_allclose(g, ref, rtol=1e-12)


def test_adjoint_of_dead_code_is_nothing_and_of_zero_is_dead_code():
    p = prog("def f(N: size, x: R[N], A: R[N, N], z: R[N]) -> R:\n"
             "    unused[i:N] = sum j:N. A[i, j] * x[j]\n"
             "    return sum i:N. x[i] * x[i]\n", "f")
    v = vjp_program(p, ["x", "A", "z"])
    assert all(o.var != "A" for s in v.stmts for o in s.rhs.operands)
    _, (gx, (gA, gz)) = run(v, {"N": 3, "x": np.ones(3), "A": np.ones((3, 3)),
                                "z": np.ones(3), "d_y": 1.0})
    np.testing.assert_array_equal(gA, 0.0)
    np.testing.assert_array_equal(gz, 0.0)
    np.testing.assert_allclose(gx, 2.0)
    for var in (v.output[1][1][0], v.output[1][1][1]):
        assert isinstance(v.defs[var], tssa.ConstRhs) and v.defs[var].value == 0.0


def test_only_active_variables_get_cotangents():
    p = prog("def f(N: size, x: R[N], A: R[N, N]) -> R:\n"
             "    y[i:N] = sum j:N. A[i, j] * x[j]\n    return sum i:N. x[i] * y[i]\n", "f")
    v = vjp_program(p, ["x"])
    # no statement computes a cotangent of A (it would cost N^2 more)
    assert program_cost(v, {"N": 50}) < program_cost(vjp_program(p, ["x", "A"]), {"N": 50})


def test_vjp_with_pair_valued_output_and_input():
    p = prog("def f(N: size, x: (R[N], R), y: R[N]) -> (R, R[N]):\n"
             "    return (sum i:N. x.0[i] * y[i], gen i:N. x.1 * exp(y[i]))\n", "f")
    v = vjp_program(p)
    assert ssa_printer.fmt_type(v.ret) == "((R, R[N]), ((R[N], R), R[N]))"
    rng = np.random.default_rng(0)
    args = {"N": 3, "x": (rng.uniform(-1, 1, 3), 0.5), "y": rng.uniform(-1, 1, 3)}
    assert check_derivatives(p, args).ok


def test_naive_rules_scatter_where_ours_gather():
    """Without the index solver the adjoint of the diagonal trace visits N^3 points."""
    p = to_program(tl.load(str(EXAMPLES / "pathological.tl"))["trace_diag"].core())
    ours, naive = vjp_program(p), vjp_program(p, naive=True)
    for n in (10, 40):
        assert dense_points(ours, {"N": n}) <= 2 * n * n + n
        assert dense_points(naive, {"N": n}) >= n ** 3
    rng = np.random.default_rng(0)
    a = {"N": 5, "x": rng.uniform(-1, 1, 5), "d_y": 0.7}
    np.testing.assert_allclose(flat(run(ours, a)), flat(run(naive, a)), rtol=1e-12)


def test_vjp_of_vjp_passes_the_dot_product_test():
    p = prog("def f(N: size, x: R[N]) -> R[N]:\n"
             "    y[i:N] = sum j:N. [j <= i] * tanh(x[j]) * x[i]\n    return y\n", "f")
    v = vjp_program(p, ["x"], outputs="grads")       # (x, d_y) -> J^T d_y
    rng = np.random.default_rng(0)
    args = {"N": 4, "x": rng.uniform(-1, 1, 4), "d_y": rng.uniform(-1, 1, 4)}
    assert check_derivatives(v, args, ["x", "d_y"]).ok
    vv = vjp_program(v, ["d_y"], cotangent_name="e", outputs="grads")  # (J^T)^T e = J e
    e = rng.uniform(-1, 1, 4)
    jv = jvp_program(p, ["x"], outputs="tangent")
    np.testing.assert_allclose(run(vv, {**args, "e": e}),
                               run(jv, {"N": 4, "x": args["x"], "d_x": e}), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Against JAX (optional)


def test_gradients_agree_with_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    rng = np.random.default_rng(0)
    w = WORKLOADS["logreg"]
    args = w.inputs(w.sizes(4), rng)
    d = tl.load(str(EXAMPLES / w.file))[w.func].core()
    v = vjp_program(to_program(d), ["w", "X"], outputs="both")
    _, (gw, gX) = run(v, {**args, "d_y": 1.0})

    def loss(wv, X):
        return jnp.sum(jnp.log(jnp.exp(-args["y"] * (X @ wv)) + 1.0))

    jw, jX = jax.grad(loss, argnums=(0, 1))(args["w"], args["X"])
    np.testing.assert_allclose(gw, np.asarray(jw), rtol=1e-10)
    np.testing.assert_allclose(gX, np.asarray(jX), rtol=1e-10)
    p4 = prog(SEED_004, "f4")
    a4 = {"N": 3, "M": 2, "K": 2, "a": rng.uniform(-.5, .5, (3, 2)),
          "b": rng.uniform(-.5, .5, (2, 2)), "c": rng.uniform(0, .5, (3, 3)),
          "d": rng.uniform(-.5, .5, 4)}
    dy = rng.uniform(-1, 1, (3, 2))

    def f4(a, b, c, dd):
        idx = np.arange(3)[:, None] + np.arange(2)[None, :]
        s = ((a[:, None, :] + b[None, :, :]) ** 2 * jnp.diag(c)[:, None, None]
             + (dd[idx] ** 3)[:, None, :]).sum(-1)
        return jnp.sum(jnp.exp(-s) * dy)

    ref = jax.grad(f4, argnums=(0, 1, 2, 3))(a4["a"], a4["b"], a4["c"], a4["d"])
    _, (ga, (gb, (gc, gd))) = run(vjp_program(p4), {**a4, "d_y": dy})
    for got, want in zip((ga, gb, gc, gd), ref):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-14)
