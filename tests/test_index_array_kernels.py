"""Relations and index arrays in the Numba kernels (issues 10 and 14): bounds checks read
the relation's sizes, not its mask (no mask is built per call when no point is tested);
`exists` over a relation is a CSR row test, over an index array's value a range test
(codegen_nest.row_test, index_array_exists); the engine's cost bound counts a gather's
members; and every kernel agrees with the interpreter on random index arrays, empty ones
included, and reports out-of-range entries and relations that are not index arrays."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS, assert_same
from tensorlang.ir import ast
from tensorlang.semantics import relation
from tensorlang.syntax.errors import ShapeError

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import codegen, codegen_nest  # noqa: E402

SOURCE = """
def rows(N: size, M: size, E: rel(N, M), x: R[N]) -> R[N]:
    return gen i:N. [exists j:M. E(i, j)] * x[i]

def cols(N: size, M: size, E: rel(N, M), y: R[M]) -> R[M]:
    return gen j:M. [exists i:N. E(i, j)] * y[j]

def shifted(N: size, M: size, E: rel(N, M), x: R[N]) -> R[N]:
    return gen i:N. [exists j:M + 1. E(i + 1, j)] * x[i]

def anywhere(N: size, M: size, E: rel(N, M), s: R) -> R:
    return [exists i:N. exists j:M. E(i, j)] * s

def narrow(N: size, M: size, E: rel(N, M), x: R[N]) -> R[N]:
    return gen i:N. [exists j:M - 1. E(i, j)] * x[i]

def bagged(B: size, K: size, V: size, tok: Z[B, K] in V, x: R[B]) -> R[B]:
    return gen b:B. [exists k:K. exists v:V. tok(b, k, v)] * x[b]

def used(B: size, K: size, V: size, tok: Z[B, K] in V, y: R[V]) -> R[V]:
    return gen v:V. [exists b:B. exists k:K. tok(b, k, v)] * y[v]

def gather(B: size, K: size, V: size, D: size, tok: Z[B, K] in V, E: R[V, D]) -> R[B, D]:
    return gen b:B, d:D. sum k:K. E[tok[b, k], d]

def scatter(B: size, K: size, V: size, D: size, tok: Z[B, K] in V, E: R[V, D],
            w: R[B, D]) -> R:
    return sum b:B, d:D. w[b, d] * (sum k:K. E[tok[b, k], d])

def window(B: size, K: size, V: size, tok: Z[B, K] in V, E: R[V, B]) -> R[B, B]:
    return gen b:B, c:B. [b <= c] * (sum k:K. E[tok[b, k], c])
"""
MODULE = tl.parse(SOURCE)
RELATION_DEFS = ("rows", "cols", "shifted", "anywhere", "narrow")
INDEX_DEFS = ("bagged", "used")


def kernel_source(name: str) -> str:
    return numba_cpu.generated_source(MODULE[name].run_to("ssa"))


def body(source: str) -> str:
    """The kernel's code without its comments (the SSA text is printed in comments)."""
    return "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("#"))


# -- the code ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rows", "cols", "shifted", "anywhere"])
def test_exists_over_a_relation_is_a_row_test(name):
    code = body(kernel_source(name))
    assert "_exists" not in code, code       # no flag loop
    assert "rm_E[" not in code               # nor a read of the mask
    assert ("rp0_E[" in code) if name != "anywhere" else ("rc0_E.shape[0] > 0" in code)


def test_exists_over_part_of_the_extent_stays_a_loop():
    # `exists j:M - 1` does not cover E's extent M: not a row test (a flag loop, exact)
    assert "_exists" in body(kernel_source("narrow"))


@pytest.mark.parametrize("name", INDEX_DEFS)
def test_exists_over_an_index_array(name):
    code = body(kernel_source(name))
    assert "_exists" not in code and "rm_tok[" not in code
    if name == "bagged":   # every bag has its K values: no test at all
        assert "rp0_tok" not in code and "rc0_tok" not in code
    else:                  # is v used: the row v of the inverse relation
        assert "rp0_tok[" in code


@pytest.mark.parametrize("fn", ["embag_grad", "gnn_grad", "embag", "gnn"])
def test_example_kernels_build_no_mask(fn):
    f = tl.load(str(EXAMPLES / "embedding.tl"))[fn]
    code = body(numba_cpu.generated_source(f.final_program()))
    assert "_exists" not in code
    assert "rm_" not in code.split("def tl_kernel", 1)[1].split(":", 1)[1]


def test_index_array_exists_rewrite_is_a_range_test():
    B, K, V = (ast.Affine.var(n) for n in "BKV")
    dims = {"tok": (B, K, V)}
    b, k, v = (ast.Affine.var(n) for n in ("b", "k0", "v0"))
    p = ast.Exists("v0", V, ast.Exists("k0", K, ast.RelCall("tok", (b, k, v))))
    got = codegen_nest.index_array_exists(p, dims, frozenset({"tok"}), ["B", "K", "V"])
    want = ast.pred_and(ast.Cmp("<=", ast.Affine.lit(0), b), ast.Cmp("<", b, B),
                        ast.Cmp("<", ast.Affine.lit(0), K))
    assert got == want
    # not an index array: unchanged (a row test when printed)
    assert codegen_nest.index_array_exists(p, dims, frozenset(), ["B", "K", "V"]) is p
    rt = codegen_nest.row_test(p, dims, ["B", "K", "V"])
    assert rt is not None and rt.pattern == ("tok", (0, 1, 2), 1) and rt.key == (b,)


# -- the engine's bound --------------------------------------------------------------------


def test_cost_bound_of_a_gather_counts_members_not_the_box():
    p = MODULE["gather"].run_to("ssa")
    sizes = {"B": 1000, "K": 8, "V": 1000, "D": 16}
    dense = numba_cpu.cost_bound(p, sizes)
    members = numba_cpu.cost_bound(p, sizes, {"tok": 1000 * 8})
    # the gather: B * K members (each read by D outputs), a multiplication and an addition
    # per point; the dense box is V times larger
    assert members == 2 * 1000 * 8 * 16
    assert dense == 1000 * members
    # a bound: never below the exact cost on a random index array
    rng = np.random.default_rng(1)
    args = {**sizes, "tok": rng.integers(0, 1000, (1000, 8)), "E": np.zeros((1000, 16))}
    assert members >= MODULE["gather"].cost(args, stage="ssa").total


# -- values --------------------------------------------------------------------------------


@st.composite
def relation_case(draw):
    n, m = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    bits = draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m))
    mask = np.array(bits, dtype=bool).reshape(n, m)
    how = draw(st.sampled_from(["mask", "coords", "relation"]))
    given = {"mask": mask, "coords": np.argwhere(mask),
             "relation": relation.Relation(mask)}[how]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    return {"N": n, "M": m, "E": given, "x": rng.uniform(-1, 1, n),
            "y": rng.uniform(-1, 1, m), "s": float(rng.uniform(-1, 1))}


@settings(max_examples=40, deadline=None)
@given(relation_case())
def test_relation_tests_agree_with_the_interpreter(args):
    for name in RELATION_DEFS:
        f = MODULE[name]
        a = {p.name: args[p.name] for p in f.params}
        kernel = numba_cpu.compile_program(f.run_to("ssa"), jit=False)
        assert_same(kernel(a), f.compile("interp")(**a), atol=1e-12)


@st.composite
def index_case(draw):
    b, k, v = draw(st.integers(0, 5)), draw(st.integers(0, 3)), draw(st.integers(1, 6))
    tok = np.array(draw(st.lists(st.integers(0, v - 1), min_size=b * k, max_size=b * k)),
                   dtype=np.int64).reshape(b, k)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    return {"B": b, "K": k, "V": v, "D": 2, "tok": tok, "x": rng.uniform(-1, 1, b),
            "y": rng.uniform(-1, 1, v), "E": rng.uniform(-1, 1, (v, 2))}


@settings(max_examples=40, deadline=None)
@given(index_case())
def test_index_array_tests_agree_with_the_interpreter(args):
    for name in (*INDEX_DEFS, "gather"):
        f = MODULE[name]
        a = {p.name: args[p.name] for p in f.params}
        kernel = numba_cpu.compile_program(f.run_to("ssa"), jit=False)
        assert_same(kernel(a), f.compile("interp")(**a), atol=1e-12)
        assert_same(f.compile("numba")(**a), f.compile("interp")(**a), atol=1e-12)


@pytest.mark.parametrize("fn", ["embag_grad", "gnn_grad"])
def test_compiled_gradients_agree_on_random_index_arrays(fn):
    m = tl.load(str(EXAMPLES / "embedding.tl"))
    w = WORKLOADS[fn.removesuffix("_grad")]
    f = m[fn]
    for n in (0, 1, 7, 40):
        args = w.inputs(w.sizes(n), np.random.default_rng(n))
        a = {p.name: args[p.name] for p in f.params}
        assert_same(f.compile("numba")(**a), f.compile("interp")(**a))


def test_out_of_range_entries_and_non_index_arrays_are_reported():
    f = MODULE["bagged"]
    kernel = numba_cpu.compile_program(f.run_to("ssa"), jit=False)
    args = {"B": 2, "K": 2, "V": 3, "x": np.ones(2)}
    with pytest.raises(ShapeError, match=r"tok\[1, 0\] = 3"):
        f.compile("numba")(**args, tok=np.array([[0, 1], [3, 2]]))
    with pytest.raises(ShapeError, match="tok"):
        kernel({**args, "tok": np.array([[0, 1], [-1, 2]])})
    # a relation given for an index array must have one member per index
    two = np.zeros((2, 2, 3), dtype=bool)
    two[0, 0, :2] = True
    two[0, 1, 0] = two[1, 0, 0] = two[1, 1, 0] = True
    with pytest.raises(ShapeError, match="index array 'tok'"):
        kernel({**args, "tok": two})
    one = relation.index_array(np.array([[0, 1], [2, 2]]), 3)
    assert_same(kernel({**args, "tok": one.mask()}), np.ones(2))


def test_index_array_relation_is_built_sorted_and_checked():
    rng = np.random.default_rng(0)
    for shape in [(6, 3), (5,), (2, 3, 4), (0, 3), (3, 0)]:
        values = rng.integers(0, 7, shape)
        rel = relation.index_array(values, 7)
        want = relation.Relation(np.argwhere(np.eye(7, dtype=bool)[values]), (*shape, 7))
        assert np.array_equal(rel.coords(), want.coords()) and rel.shape == (*shape, 7)
        assert relation.is_index_array(rel)
    assert not relation.is_index_array(relation.Relation(np.zeros((2, 3), dtype=bool)))


def test_patterns_of_wide_relations():
    """Columns beyond 2**16 values take the comparison sort, the others a radix sort."""
    rng = np.random.default_rng(2)
    shape = (3, 70_000, 5)
    coords = np.stack([rng.integers(0, n, 400) for n in shape], axis=1)
    rel = relation.Relation(coords, shape)
    for order in [(1, 0, 2), (2, 1, 0), (0, 2, 1), (1, 2, 0)]:
        for nbound in range(4):
            cols, ptr = rel.pattern(order, nbound)
            want = rel.coords()[:, list(order)]
            want = want[np.lexsort(want.T[::-1])]
            assert np.array_equal(cols, want)
            dims = [shape[k] for k in order[:nbound]]
            if nbound:
                keys = np.ravel_multi_index(want[:, :nbound].T, dims)
                assert np.array_equal(np.diff(ptr), np.bincount(keys, minlength=np.prod(dims)))


def test_plan_registers_the_row_test_patterns():
    plan = codegen.plan_program(MODULE["used"].run_to("ssa"))
    assert ("tok", (2, 0, 1), 1) in plan.patterns


# -- loops: lookups, rows of sums, BLAS under size guards ---------------------------------


def test_index_array_read_at_known_indices_is_a_lookup():
    f = tl.load(str(EXAMPLES / "embedding.tl"))["gnn"]
    source = numba_cpu.generated_source(f.final_program())   # (simplified)
    assert "('coords', ('src', (0, 1), 0))" in source      # C-order coordinates, no CSR
    code = body(source)
    assert "rp0_src" not in code and re.search(r"= tl_nonneg\(rc0_src\[i\d, 1\]\)", code)
    assert "tl_matmul" in code and "1 <= n_V" in code       # the `[1 <= V]` contraction


@pytest.mark.parametrize("name", ["gather", "window"])
def test_gathers_sum_a_row_at_a_time(name):
    assert "_buf" in body(kernel_source(name))


@pytest.mark.parametrize("same", [False, True])
def test_row_sums_agree_when_their_blocks_close(same):
    """The adjoint in E sums every (b, k) reading row v: with every token the same, row 0
    has B K = 400 terms, so the blocks of 128 close (and the compensated totals are used)."""
    f = tl.grad(MODULE["scatter"], "E")
    source = body(numba_cpu.generated_source(f.run_to("ssa")))
    assert "_buf" in source
    rng = np.random.default_rng(3)
    B, K, V, D = 100, 4, 5, 3
    tok = np.zeros((B, K), dtype=np.int64) if same else rng.integers(0, V, (B, K))
    args = {"B": B, "K": K, "V": V, "D": D, "tok": tok, "E": rng.uniform(-1, 1, (V, D)),
            "w": rng.uniform(-1, 1, (B, D)) * 1e3}
    want = f.compile("interp")(**args)
    assert_same(f.compile("numba")(**args), want)
    kernel = numba_cpu.compile_program(f.run_to("ssa"), jit=False)
    assert_same(kernel(args), want)


@settings(max_examples=30, deadline=None)
@given(index_case())
def test_windowed_row_sums_agree_with_the_interpreter(args):
    f = MODULE["window"]
    rng = np.random.default_rng(args["B"])
    a = {"B": args["B"], "K": args["K"], "V": args["V"], "tok": args["tok"],
         "E": rng.uniform(-1, 1, (args["V"], args["B"]))}
    assert_same(f.compile("numba")(**a), f.compile("interp")(**a), atol=1e-12)


def test_an_index_array_given_again_reuses_its_relation_and_a_changed_one_does_not():
    """The API keeps the relation of the last index array given (api._IndexArrayMemo): an
    array with the same entries reuses it, one changed in place is converted again (and
    still checked)."""
    w = WORKLOADS["embag"]
    f = tl.load(str(EXAMPLES / w.file))[w.func]
    args = w.inputs(w.sizes(6), np.random.default_rng(3))
    tok = args["tok"]
    first = f(**args)
    assert first == f(**{**args, "tok": tok.copy()})
    tok[0, 0] = (tok[0, 0] + 1) % args["V"]          # in place: the kept copy differs
    assert_same(f(**args), f.interpret(**args))
    assert f(**args) != first
    tok[0, 0] = args["V"]                              # out of range: still an error
    with pytest.raises(ShapeError, match="outside the range"):
        f(**args)
