"""Relation values (tensorlang/semantics/relation.py, issue 14): every form agrees with the
mask, forms are built once and kept, coordinates are never densified unless a kernel tests
points, and every backend gives the interpreter's value whichever way a relation is given."""
from __future__ import annotations

import gc
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import assert_same, to_program
from tensorlang.semantics import interp, relation
from tensorlang.semantics.interp import interpret
from tensorlang.syntax.errors import ShapeError
from tensorlang.testing import programs

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")


@st.composite
def masks(draw: st.DrawFn) -> np.ndarray:
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    bits = draw(st.lists(st.booleans(), min_size=int(np.prod(shape)),
                         max_size=int(np.prod(shape))))
    return np.array(bits, dtype=bool).reshape(shape)


def reference_pattern(mask: np.ndarray, order: tuple[int, ...], nbound: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Members as sorted tuples with columns in `order`; per row of the first `nbound`
    columns (row-major), the offset of its first member."""
    rows = sorted(tuple(int(c[k]) for k in order) for c in zip(*np.nonzero(mask)))
    cols = np.array(rows, dtype=np.int64).reshape(-1, len(order))
    dims = [mask.shape[k] for k in order[:nbound]]
    starts = [0]
    for row in np.ndindex(*dims) if nbound else []:
        starts.append(starts[-1] + sum(1 for r in rows if r[:nbound] == row))
    return cols, np.array(starts if nbound else [0], dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(masks(), st.randoms(use_true_random=False))
def test_forms_agree_with_the_mask(mask, rnd):
    coords = np.argwhere(mask)
    shuffled = np.concatenate([coords, coords[: len(coords) // 2]])   # duplicates, any order
    shuffled = shuffled[rnd.sample(range(len(shuffled)), len(shuffled))]
    for rel in (relation.Relation(mask), relation.Relation(shuffled, mask.shape)):
        assert np.array_equal(rel.mask(), mask) and rel.mask().shape == mask.shape
        assert np.array_equal(rel.coords(), coords) and rel.nnz == len(coords)
        order = list(range(mask.ndim))
        rnd.shuffle(order)
        for nbound in range(mask.ndim + 1):
            cols, ptr = rel.pattern(tuple(order), nbound)
            want_cols, want_ptr = reference_pattern(mask, tuple(order), nbound)
            assert np.array_equal(cols, want_cols) and np.array_equal(ptr, want_ptr)
            assert rel.pattern(tuple(order), nbound)[0] is cols     # kept, not rebuilt
        assert not rel.mask().flags.writeable and not rel.coords().flags.writeable


def test_coordinates_are_kept_as_given_and_checked():
    coords = np.array([[0, 1], [2, 0]])
    rel = relation.Relation(coords, (3, 3))
    assert rel.forms() == ["coords"] and rel.nbytes == coords.nbytes
    coords[0, 0] = 2                           # the caller's array: the relation is a copy
    assert rel.coords()[0].tolist() == [0, 1]
    assert relation.Relation(np.array([[0.0, 1.0]]), (2, 2)).coords().tolist() == [[0, 1]]
    with pytest.raises(ShapeError, match=r"coordinate \(3, 0\) is outside shape \(3, 3\)"):
        relation.Relation(np.array([[3, 0]]), (3, 3))
    with pytest.raises(ShapeError, match="integer coordinate array"):
        relation.Relation(np.array([[0.5, 1.0]]), (2, 2))
    with pytest.raises(ShapeError, match="needs its shape"):
        relation.Relation(np.array([[0, 1]]))
    with pytest.raises(ShapeError, match="shape"):
        relation.from_value(relation.Relation(np.eye(2, dtype=bool)), (3, 3))


def test_only_immutable_arrays_are_kept():
    mask = np.eye(3, dtype=bool)
    assert relation.from_value(mask, (3, 3)) is not relation.from_value(mask, (3, 3))
    frozen = mask.copy()
    frozen.flags.writeable = False
    assert relation.is_immutable(frozen)
    assert relation.from_value(frozen, (3, 3)) is relation.from_value(frozen, (3, 3))
    view = mask[:]
    view.flags.writeable = False          # read-only, but its base is not
    assert not relation.is_immutable(view)
    assert relation.from_value(view, (3, 3)) is not relation.from_value(view, (3, 3))
    kept = len(relation._KEPT)
    del frozen
    gc.collect()
    assert len(relation._KEPT) == kept - 1   # an entry leaves with its array


MASKED = textwrap.dedent("""
    def masked(N: size, E: rel(N, N), A: R[N, N]) -> R:
        return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2
    def probe(N: size, E: rel(N, N), x: R[N]) -> R[N]:
        return gen i:N. [E(i, i + 1) or i == 0] * x[i]
    """)


def test_api_accepts_relations_and_converts_them_once():
    m = tl.parse(MASKED)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 5))
    mask = rng.random((5, 5)) < 0.4
    want = float((A ** 2)[mask & ~np.eye(5, dtype=bool)].sum())
    rel = tl.Relation(np.argwhere(mask)[::-1], (5, 5))   # coordinates, in any order
    for backend in ("numba", "interp"):
        f = m.masked.compile(backend)
        for value in (mask, np.argwhere(mask), rel, tl.Relation(mask)):
            assert f(E=value, A=A) == pytest.approx(want, rel=1e-12)
    forms = rel.forms()
    m.masked(E=rel, A=A)
    assert rel.forms() == forms                 # nothing built a second time
    fresh = tl.Relation(np.argwhere(mask), (5, 5))
    m.masked(E=fresh, A=A)
    assert "mask" not in fresh.forms()          # this kernel never tests a point
    with pytest.raises(tl.ShapeError, match=r"argument A of masked: expected shape \(4, 4\)"):
        m.masked(E=tl.Relation(np.eye(4, dtype=bool)), A=A)   # N = 4 from the relation
    with pytest.raises(tl.ShapeError, match=r"E of masked: expected shape \(5, 5\)"):
        m.masked(N=5, E=tl.Relation(np.eye(4, dtype=bool)), A=A)
    with pytest.raises(tl.ShapeError, match=r"relation E of masked: coordinate \(5, 0\)"):
        m.masked(E=np.array([[5, 0]]), A=A)
    x = rng.standard_normal(5)
    probe = m.probe.compile("numba")
    assert_same(probe(E=rel, x=x), m.probe.interpret(E=mask, x=x))


@settings(max_examples=40, deadline=None)
@given(programs(), st.sampled_from(["mask", "coords", "relation"]))
def test_random_programs_agree_whichever_way_relations_are_given(case, how):
    d, args = case
    sizes = {p.name: args[p.name] for p in d.params if isinstance(p.type, tl.api.TSize)}
    given_args = dict(args)
    for p in d.params:
        if isinstance(p.type, tl.api.TRel):
            shape = tuple(int(a.evaluate(sizes)) for a in p.type.sizes)
            rel = relation.from_value(   # (an index array's argument is its integer array)
                interp.index_array_relation(p.name, p.type, args[p.name], shape), shape)
            given_args[p.name] = {"mask": rel.mask().copy(), "coords": rel.coords().copy(),
                                  "relation": rel}[how]
    c = numba_cpu.compile_program(to_program(d), jit=False)
    assert_same(c(given_args), interpret(d, args), atol=1e-9)
