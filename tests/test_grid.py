"""tensorlang.semantics.grid, the one evaluator of affine indices and predicates over index
boxes, against the scalar reference (tests/scalar_reference.py) on random predicates."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, strategies as st

from tensorlang.ir.ast import Affine, And, Cmp, Exists, Or, PFalse, PTrue, RelCall
from tensorlang.semantics import grid
from tensorlang.syntax.errors import TLError
from scalar_reference import eval_pred_scalar

NAMES = ("a", "b", "c")
N = Affine.var("N")


def _affine(names: tuple[str, ...]) -> st.SearchStrategy:
    """`c0 + c1*a + ... + k*N` with small coefficients (reads outside relations included)."""
    coeffs = st.tuples(*(st.integers(-2, 2) for _ in names))
    return st.builds(
        lambda cs, k, c: Affine(tuple((n, x) for n, x in zip(names, cs) if x), c) + N * k,
        coeffs, st.integers(-1, 1), st.integers(-3, 3))


def _preds(names: tuple[str, ...], depth: int = 2) -> st.SearchStrategy:
    aff = _affine(names)
    witness = names + ("t",)
    leaf = st.one_of(
        st.builds(Cmp, st.sampled_from(Cmp.OPS), aff, aff),
        st.builds(lambda x, y: RelCall("E", (x, y)), aff, aff),
        st.builds(lambda x, m: Exists("t", N + m, Cmp("==", x, Affine.var("t") * 2)),
                  aff, st.integers(-1, 1)),
        st.builds(lambda x: Exists("t", N, Cmp("<", x, Affine.var("t"))), _affine(witness)),
        st.just(PTrue()), st.just(PFalse()))
    if depth == 0:
        return leaf
    sub = _preds(names, depth - 1)
    return st.one_of(leaf, st.builds(And, sub, sub), st.builds(Or, sub, sub))


@st.composite
def boxes(draw: Any) -> tuple[tuple[str, ...], tuple[int, ...], int, np.ndarray]:
    k = draw(st.integers(0, 3))
    names = NAMES[:k]
    extents = tuple(draw(st.integers(0, 4)) for _ in names)
    n = draw(st.integers(0, 4))
    seed = draw(st.integers(0, 2 ** 16))
    rel = np.random.default_rng(seed).random((n + 1, 3)) < 0.5
    return names, extents, n, rel


def _box(names: tuple[str, ...], extents: tuple[int, ...], n: int, rel: np.ndarray) -> grid.Box:
    return grid.Box({"N": n}, {"E": rel}).bind_indices(zip(names, extents))


def _points(names: tuple[str, ...], extents: tuple[int, ...]) -> list[dict[str, int]]:
    return [dict(zip(names, pt)) for pt in itertools.product(*(range(e) for e in extents))]


@given(st.data())
def test_predicates_agree_with_the_scalar_reference(data: Any) -> None:
    names, extents, n, rel = data.draw(boxes())
    p = data.draw(_preds(names))
    box = _box(names, extents, n, rel)
    got = grid.pred(p, box)
    assert got.dtype == bool and got.ndim == len(names)
    full = np.broadcast_to(got, extents)
    for pt in _points(names, extents):
        want = eval_pred_scalar(p, {"N": n, "E": rel, **pt})
        assert full[tuple(pt[v] for v in names)] == want, (str(p), pt)
        assert grid.holds_at(p, {"N": n, "E": rel, **pt}) == want


@given(st.data())
def test_affine_agrees_with_affine_evaluate(data: Any) -> None:
    names, extents, n, rel = data.draw(boxes())
    a = data.draw(_affine(names))
    full = np.broadcast_to(grid.affine(a, _box(names, extents, n, rel)), extents)
    for pt in _points(names, extents):
        assert full[tuple(pt[v] for v in names)] == a.evaluate({"N": n, **pt})


@given(st.data())
def test_count_and_sum_additions_agree_with_the_scalar_reference(data: Any) -> None:
    names, extents, n, rel = data.draw(boxes())
    p = data.draw(_preds(names))
    first = data.draw(st.integers(0, len(names)))   # axes first.. are summed
    box = _box(names, extents, n, rel)
    holds = {tuple(pt.values()): eval_pred_scalar(p, {"N": n, "E": rel, **pt})
             for pt in _points(names, extents)}
    assert grid.total(grid.count(p, box), box) == sum(holds.values())
    assert grid.total(grid.count(grid.pred(p, box), box), box) == sum(holds.values())
    live: dict[tuple[int, ...], int] = {}
    for pt in itertools.product(*(range(e) for e in extents[:first])):
        live[pt] = 0
    for pt, h in holds.items():
        live[pt[:first]] += h
    want = sum(max(0, m - 1) for m in live.values())
    per_outer = grid.sum_additions(p, box, first)
    assert per_outer.ndim == first
    assert grid.total(per_outer, box) == want
    counts = np.broadcast_to(grid.count(p, box, first), extents[:first])
    for pt, m in live.items():
        assert counts[pt] == m


def test_relation_reads_outside_the_mask_are_false() -> None:
    rel = np.ones((2, 2), dtype=bool)
    box = grid.Box({}, {"E": rel}).bind_index("a", 4)
    p = RelCall("E", (Affine.var("a") - 1, Affine.lit(0)))
    assert grid.pred(p, box).tolist() == [False, True, True, False]


def test_errors_are_loud() -> None:
    box = grid.Box({"N": 3}, {"E": np.zeros((3,), dtype=bool)})
    with pytest.raises(TLError, match="unbound relation"):
        grid.pred(RelCall("F", (N,)), box)
    with pytest.raises(TLError, match="takes 1 indices"):
        grid.pred(RelCall("E", (N, N)), box)
    with pytest.raises(TLError, match="unbound index or size"):
        grid.affine(Affine.var("q"), box)
    with pytest.raises(TLError, match="depends on an index"):
        grid.extent(Affine.var("a"), box.bind_index("a", 2))
    with pytest.raises(TLError, match="boolean mask"):
        grid.holds_at(RelCall("E", (N,)), {"N": 0, "E": np.array([[0]])})
