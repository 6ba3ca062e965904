"""Storage of relation-masked statements in the Numba CPU kernels (backends/common/storage.py,
docs/backends.md "Relations"): temporaries written and read only at a relation's members are
vectors of its members (coordinate vectors), and a pointwise statement over a relation whose
array is dense anyway runs, per call, as a dense pass reading the mask or as a scatter over
the coordinates, chosen by the relation's density.  Both forms, at every density (empty and
full relations, empty boxes), agree with the interpreter."""
from __future__ import annotations

import re
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, NanEmpty, assert_same, ci_examples, to_program
from tensorlang.ir import ast
from tensorlang.semantics.interp import interpret
from tensorlang.testing import random_args

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
numba_cpu_source = pytest.importorskip("tensorlang.backends.numba_cpu_source")

# DENSE_RATIO values that force one form: 0 never takes the dense pass (but on an empty
# box), a huge ratio takes it whenever the relation has a member
COORDINATES, DENSE = 0, 10 ** 12


def _load(file: str) -> Any:
    return tl.load(str(EXAMPLES / file))


def _source(fn: Any, **kw: Any) -> str:
    return numba_cpu.generated_source(fn.run_to("ssa"), **kw)


def test_matfac_temporaries_are_coordinate_vectors():
    """matfac's residual is computed and read at Om's members only: no N x M array; the
    product U V^T is computed in the loop that reads it (matfac f: the final sum; the
    gradient: the residual `v3`), and the gradient's residual in turn in the CSR walk of
    its rows that sums it (a chain, each member's row sums with the K index innermost,
    `sums_by_row`): no vector of Om's members is stored."""
    m = _load("matfac.tl")
    grad = _source(m["matfac_grad"])
    assert grad.count("#   (computed in the loop of ") == 2
    assert re.search(r"for _rbb\d+ in range\(rp1_Om\[", grad)   # the row's walk, in blocks
    assert re.search(r"_l\d+ = \(-2\.0 \* \(v_T\[i0, j0\] \+ \(-1\.0 \* _l\d+\)\)\)", grad)
    for name, vectors in (("matfac", 0), ("matfac_grad", 0)):
        src = _source(m[name])
        assert not re.search(r"np\.(empty|zeros)\(\(max\(0, n_N\), max\(0, n_M\)\)\)", src)
        assert "#   (computed in the loop of " in src, name
        assert re.search(r"_l\d+ = \(?_acc", src), name             # the product, a local
        vecs = re.findall(r"(v_v\d+) = np\.empty\(\(rc0_Om\.shape\[0\],\)\)", src)
        assert len(vecs) == vectors, name
        for v in vecs:
            assert re.search(rf"{v}\[_e\d+o\] = ", src), (name, v)   # written by position
            assert not re.search(rf"{v}\[[^]]*,", src), (name, v)     # never a 2-d access
            # read in the CSR walk of the same sorted coordinates
            assert re.search(rf"{v}\[_e\d+i\]", src), (name, v)
    # instrumented, each statement has its own loop (it counts its iterations), the
    # product stored as a vector
    src = _source(m["matfac"], instrument=True)
    assert " = np.empty((rc0_Om.shape[0],))" in src and "computed in the loop" not in src


def test_masked_gradient_chooses_a_dense_pass_by_density():
    src = _source(_load("masked.tl")["masked_grad"])
    assert f"rc0_E.shape[0] * {numba_cpu.DENSE_RATIO} >= (n_N) * (n_N)" in src
    assert "rd_E[i0, i1]" in src and "('dmask', 'E')" in src
    assert "_pn1 = max(0, rc0_E.shape[0] - (0))" in src        # the coordinate scatter
    assert "for _e1o in range(_chunk_lo, _chunk_hi):" in src
    assert "rd_E" not in _source(_load("masked.tl")["masked_grad"], instrument=True)
    # the dense pass selects without a branch: the value at every point, the mask as one
    # expression of `&` and `|` (no short-circuit `and`, `or`, no chained range test)
    body = src[src.index("def tl_body0"):src.index("@njit", src.index("def tl_body0"))]
    assert re.search(r"_dv\d+ = \(2\.0 \* v_A\[i0, i1\]\)", body), body
    assert "& rd_E[i0, i1])" in body and " and " not in body and " or " not in body, body


def test_a_dense_pass_reads_a_shifted_operand_with_its_range_test():
    """The dense pass computes its value at every point of the box: a read that is in
    range only where the mask holds keeps its range test there (no read outside `x`)."""
    d = tl.parse("def s(N: size, E: rel(N, N), x: R[N, N]) -> R[N, N]:\n"
                 "    return gen i:N. gen j:N. [E(i, j) and i < N - 1] * x[i + 1, j]\n")["s"]
    src = _source(d)
    rng = np.random.default_rng(0)
    for n in (0, 1, 5):
        args = {"N": n, "E": rng.random((n, n)) < 0.7, "x": rng.standard_normal((n, n))}
        _check(d.core(), args, 1, jit=True)
        _check(d.core(), args, 1)
    assert "rd_E" in src
    assert re.search(r"_dv\d+ = \(v_x\[i0 \+ 1, i1\] if i0 \+ 1 < ", src), src


def _check(d: ast.Def, args: dict[str, Any], ratio: int | None, jit: bool = False) -> None:
    """`d` compiled with the dense pass's threshold `ratio` (None: as it is) agrees with the
    interpreter."""
    want = interpret(d, args)
    with pytest.MonkeyPatch.context() as m, tempfile.TemporaryDirectory() as tmp:
        if ratio is not None:
            m.setattr(numba_cpu, "DENSE_RATIO", ratio)
            m.setattr(numba_cpu_source, "DENSE_RATIO", ratio)
            # a kernel made with another threshold is neither found in nor left in the
            # caches (their keys are the program's text), in this process or on disk
            m.setattr(numba_cpu, "_COMPILED", {})
            m.setenv("TENSORLANG_CACHE_DIR", tmp)
        c = numba_cpu.compile_program(to_program(d), jit=jit)
        if not jit:
            m.setattr(np, "empty", NanEmpty())
        got = c(args)
    assert_same(got, want, atol=1e-9)


WORKLOADS = [("matfac.tl", "matfac"), ("matfac.tl", "matfac_grad"),
             ("masked.tl", "masked"), ("masked.tl", "masked_grad")]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(WORKLOADS), st.integers(0, 6), st.integers(0, 6),
       st.sampled_from([0.0, 0.02, 0.3, 1.0]), st.sampled_from([COORDINATES, DENSE, 40]),
       st.sampled_from(["bool", "coo"]), st.integers(0, 2 ** 16))
def test_masked_workloads_agree_with_the_interpreter(workload, n, k, density, ratio, enc,
                                                     seed):
    """matfac and masked, f and gradient, on relations of every density (empty, full), at
    sizes down to 0, in both forms (plain Python, unwritten storage nan)."""
    file, name = workload
    d = _load(file)[name].core()
    sizes = {"N": n, "M": max(0, n - 1), "K": k}
    args = random_args(d, {q.name: sizes[q.name] for q in d.params
                           if isinstance(q.type, ast.TSize)},
                       np.random.default_rng(seed), density=density, rel_encoding=enc)
    _check(d, args, ratio)


@pytest.mark.parametrize("workload,ratio", [(w, None) for w in WORKLOADS] + [
    (("masked.tl", "masked_grad"), COORDINATES), (("masked.tl", "masked_grad"), DENSE)])
def test_masked_workloads_compiled(workload, ratio):
    """The same in Numba (a 30% relation and an empty one; the gradient of masked, the one
    with a dense pass, in both forms)."""
    file, name = workload
    d = _load(file)[name].core()
    for density in (0.3, 0.0):
        args = random_args(d, {q.name: {"N": 9, "M": 7, "K": 3}[q.name] for q in d.params
                               if isinstance(q.type, ast.TSize)},
                           np.random.default_rng(3), density=density, rel_encoding="bool")
        _check(d, args, ratio, jit=True)


MASKS = ["E(i, j)", "E(i, j) and i != j", "E(i, j) and i + 1 < M", "E(i, j) and j <= i",
         "E(i, j) and (i == 0 or j + 2 <= N)", "F(j, i)", "E(i, j) and F(j, i)"]
TERMS = ["A[i, j]", "sum k:K. U[i, k] * V[j, k]", "A[i, j] - sum k:K. U[i, k] * V[j, k]",
         "tanh(A[i, j]) * U[i, 0]", "A[i, j] * sum k:K. U[i, k] * U[i, k]"]
OUTER = ["sum i:N, j:M. [{m}] * ({t}) ** 2", "sum i:N, j:M. [{m}] * exp({t})",
         "sum i:N. sum j:M. [{m}] * sigmoid({t}) * ({t})"]


@settings(max_examples=ci_examples(20, 40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mask=st.sampled_from(MASKS), term=st.sampled_from(TERMS), outer=st.sampled_from(OUTER),
       wrt=st.sampled_from(["A", "U"]), n=st.integers(0, 5), m=st.integers(0, 5),
       k=st.integers(1, 3), density=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       ratio=st.sampled_from([COORDINATES, DENSE]), seed=st.integers(0, 2 ** 16))
def test_random_masked_programs_in_both_forms(mask, term, outer, wrt, n, m, k, density,
                                              ratio, seed):
    """Random relation-masked objectives and their gradients (the shapes of matfac and
    masked, varied: other masks, terms and reductions), on relations of several densities,
    in both forms (plain Python, unwritten storage nan; not instrumented: an instrumented
    kernel has no dense pass)."""
    body = outer.format(m=mask, t=term)
    src = (f"def f(N: size, M: size, K: size, E: rel(N, M), F: rel(M, N), A: R[N, M], "
           f"U: R[N, K], V: R[M, K]) -> R:\n    return {body}\ndef g = grad(f, {wrt})\n")
    mod = tl.parse(src)
    sizes = {"N": n, "M": m, "K": k}
    for name in ("f", "g"):
        d = mod[name].core()
        args = random_args(d, sizes, np.random.default_rng(seed), density=density)
        _check(d, args, ratio)


def test_a_sparse_coordinate_relation_is_not_densified():
    """The dense pass's mask is built only where the pass runs."""
    g = _load("masked.tl")["masked_grad"].compile("numba")
    rng = np.random.default_rng(0)
    n = 60
    A = rng.standard_normal((n, n))
    for density, dense in ((0.001, False), (0.3, True)):
        mask = rng.random((n, n)) < density
        rel = tl.Relation(np.argwhere(mask), (n, n))
        got = g(E=rel, A=A)
        assert_same(got, 2 * A * (mask & ~np.eye(n, dtype=bool)), atol=0)
        assert ("mask" in rel.forms()) == dense, density


def test_a_dense_pass_of_many_points_runs_on_the_jit_kernel():
    """The AOT image compiles the dense pass's select to a branch on the mask (60x slower
    at N = 1000): a call whose dense pass is large runs on the JIT kernel."""
    d = _load("masked.tl")["masked_grad"].core()
    c = numba_cpu.compile_program(to_program(d))
    rng = np.random.default_rng(0)
    for n, density, engine in ((200, 0.3, "jit"), (200, 0.001, "aot"), (20, 0.3, "aot")):
        mask = rng.random((n, n)) < density
        args = {"N": n, "E": tl.Relation(mask), "A": rng.standard_normal((n, n))}
        assert c.engine_for(args) == engine, (n, density)
        assert_same(c(args), 2 * args["A"] * (mask & ~np.eye(n, dtype=bool)), atol=0)


@pytest.mark.parametrize("ratio", [COORDINATES, DENSE, None])
def test_a_dense_pass_reads_another_relation_by_its_mask(ratio):
    """Only the relation of the pass's coordinate loop is read through the pass's own mask
    argument; another relation in the same mask is read through its mask."""
    d = tl.parse("def h(N: size, M: size, E: rel(N, M), F: rel(M, N), A: R[N, M]) -> R[N, M]:\n"
                 "    return gen i:N, j:M. [E(i, j) and F(j, i) and i != j] * tanh(A[i, j])\n"
                 )["h"].core()
    src = numba_cpu.generated_source(to_program(d))
    assert "rd_" in src and "rm_" in src
    for seed, density in enumerate((0.0, 0.5, 1.0)):
        _check(d, random_args(d, {"N": 5, "M": 4}, np.random.default_rng(seed),
                              density=density), ratio)
