"""Tensor SSA (ir/tssa, ir/canon, ir/build, syntax/ssa_printer): primitives, canonical forms,
to_core, cost, printer, helpers.  Every evaluation is compared with the slow scalar reference
on `to_core`, every `prim_cost` with the core cost of `to_core`."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, And, Cmp, Exists, Or, Param, PFalse, PTrue, RelCall, tensor
from tensorlang.ir.build import Builder, make_add, make_contract, make_reduce
from tensorlang.proofs.catalogue import values_close
from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa
from tensorlang.semantics import grid
from tensorlang.semantics.cost import cost_def, cost_program
from tensorlang.semantics.interp import evaluate_program
from tensorlang.syntax import ssa_printer
from scalar_reference import interpret_reference

N, M = Affine.var("N"), Affine.var("M")
i, j, k = Affine.var("i"), Affine.var("j"), Affine.var("k")
PARAMS = (Param("N", ast.TSize()), Param("M", ast.TSize()), Param("x", tensor([N])),
          Param("y", tensor([M])), Param("A", tensor([N, M])), Param("s", ast.REAL),
          Param("E", ast.TRel((N, M))))


def args(n: int = 4, m: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"N": n, "M": m, "x": rng.normal(size=n), "y": rng.normal(size=m),
            "A": rng.normal(size=(n, m)), "s": float(rng.normal()),
            "E": rng.random((n, m)) < 0.5}


def check(p: tssa.Program, a: dict) -> tuple:
    """evaluate_program == the scalar reference on to_core, and cost_program (prim_cost) ==
    cost_def(to_core); returns both."""
    core = tssa.to_core(p)
    got, ref = evaluate_program(p, a), interpret_reference(core, a)
    assert values_close(got, ref), (got, ref)
    c, cc = cost_program(p, a), cost_def(core, a)
    assert (c.adds, c.muls, c.calls) == (cc.adds, cc.muls, cc.calls), (c, cc)
    return got, c


# ---------------------------------------------------------------------------------------------
# Every primitive: meaning and exact cost


def test_input_and_const():
    b = Builder(PARAMS)
    x = b.input("x")
    c = b.const([("a", N)], 2.5, Cmp("<", Affine.var("a"), 2))
    p = b.program((x, c))
    (vx, vc), cost = check(p, args())
    assert np.array_equal(vx, args()["x"])
    assert np.array_equal(vc, [2.5, 2.5, 0.0, 0.0])
    assert cost.total == 0
    assert ssa_printer.to_text(p).splitlines()[1] == "    v0[i0:N] = [i0 <= 1] * 2.5"


def test_add_counts_only_where_both_supports_hold():
    b = Builder(PARAMS)
    x = b.input("x")
    v = b.add([("a", N)], (x, ["a"]), (x, [Affine.var("a") + 1]),
              supports=(Cmp("<", Affine.var("a"), 3), Cmp("<=", Affine.lit(1), Affine.var("a"))))
    p = b.program(v)
    a = args(n=6)
    got, cost = check(p, a)
    xx = a["x"]
    want = [(xx[t] if t < 3 else 0) + (xx[t + 1] if 1 <= t < 5 else 0) for t in range(6)]
    assert np.allclose(got, want)
    assert (cost.adds, cost.muls, cost.calls) == (2, 0, 0)  # t = 1, 2


def test_map_with_mask_and_params():
    b = Builder(PARAMS)
    x = b.input("x")
    v = b.map([("a", N)], "pow", [(x, ["a"])], Cmp("<", Affine.var("a"), 2), params=[3.0])
    w = b.map([("a", N)], "max", [(x, ["a"]), (x, [Affine.var("a") - 1])])
    p = b.program((v, w))
    a = args(n=5)
    (gv, gw), cost = check(p, a)
    assert np.allclose(gv, [a["x"][0] ** 3, a["x"][1] ** 3, 0, 0, 0])
    assert np.allclose(gw, np.maximum(a["x"], np.r_[0.0, a["x"][:-1]]))
    assert cost.calls == 2 + 5


def test_contract_is_a_masked_einsum():
    b = Builder(PARAMS)
    A_, y = b.input("A"), b.input("y")
    mv = b.contract([("a", N)], [("c", M)], (A_, ["a", "c"]), (y, ["c"]))
    tri = b.contract([("a", N)], [("c", M)], (A_, ["a", "c"]), (y, ["c"]),
                     Cmp("<=", Affine.var("c"), Affine.var("a")), coeff=2.0)
    p = b.program((mv, tri))
    a = args(n=4, m=3)
    (g1, g2), cost = check(p, a)
    assert np.allclose(g1, a["A"] @ a["y"])
    want = [2 * sum(a["A"][r, c] * a["y"][c] for c in range(3) if c <= r) for r in range(4)]
    assert np.allclose(g2, want)
    live = [min(r + 1, 3) for r in range(4)]  # terms of each triangular row
    assert cost.muls == 4 * 3 + 2 * sum(live)
    assert cost.adds == 4 * 2 + sum(n - 1 for n in live)


def test_coefficient_one_is_free_and_joint_sum_rule():
    b = Builder(PARAMS)
    A_ = b.input("A")
    total = b.reduce((), [("r", N), ("c", M)], (A_, ["r", "c"]))
    diag = b.reduce((), [("r", N), ("c", M)], (A_, ["r", "c"]),
                    Cmp("==", Affine.var("r"), Affine.var("c")))
    p = b.program((total, diag))
    a = args(n=4, m=3)
    (gt, gd), cost = check(p, a)
    assert np.isclose(gt, a["A"].sum()) and np.isclose(gd, np.trace(a["A"][:3, :3]))
    assert (cost.adds, cost.muls) == (4 * 3 - 1 + 3 - 1, 0)


def test_one_point_sum_is_a_zero_extended_read():
    """`sum j:n. [j == a] * x[j]` is `x[a]` with zero extension: no addition."""
    b = Builder(PARAMS)
    x = b.input("x")
    gather = b.reduce([("a", N)], [("c", N)], (x, ["c"]),
                      Cmp("==", Affine.var("c"), Affine.var("a") + 1))
    read = b.reduce([("a", N)], (), (x, [Affine.var("a") + 1]))
    p = b.program((gather, read))
    a = args(n=4)
    (g1, g2), cost = check(p, a)
    assert np.allclose(g1, np.r_[a["x"][1:], 0.0]) and np.allclose(g1, g2)
    assert cost.total == 0


def test_relation_masks_and_coordinates_agree():
    b = Builder(PARAMS)
    A_ = b.input("A")
    v = b.reduce((), [("r", N), ("c", M)], (A_, ["r", "c"]), RelCall("E", (Affine.var("r"),
                                                                             Affine.var("c"))))
    p = b.program(v)
    a = args()
    dense, cost = check(p, a)
    coords = np.argwhere(a["E"])
    assert np.isclose(evaluate_program(p, {**a, "E": coords}), dense)
    assert np.isclose(dense, a["A"][a["E"]].sum())
    assert cost.adds == max(0, int(a["E"].sum()) - 1)


def test_exists_predicates():
    b = Builder(PARAMS)
    x = b.input("x")
    t = Affine.var("t")
    even = Exists("t", N, Cmp("==", Affine.var("a"), t * 2))
    v = b.reduce([("a", N)], (), (x, ["a"]), even)
    p = b.program(v)
    a = args(n=5)
    got, _ = check(p, a)
    assert np.allclose(got, [a["x"][0], 0, a["x"][2], 0, a["x"][4]])
    assert "exists k0:N. i0 == 2*k0" in ssa_printer.to_text(p)


def test_pair_inputs_are_projections():
    q = Param("q", ast.TArr(N, ast.TPair(ast.REAL, ast.TPair(ast.REAL, ast.REAL))))
    b = Builder((Param("N", ast.TSize()), q))
    q0, q11 = b.input("q", (0,)), b.input("q", (1, 1))
    assert (q0, q11) == ("q_0", "q_1_1")
    v = b.add([("a", N)], (q0, ["a"]), (q11, ["a"]))
    p = b.program(v)
    rng = np.random.default_rng(1)
    a = {"N": 3, "q": (rng.normal(size=3), (rng.normal(size=3), rng.normal(size=3)))}
    got, _ = check(p, a)
    assert np.allclose(got, a["q"][0] + a["q"][1][1])
    assert p.shape("q_1_1") == (N,)


def test_zero_sizes():
    b = Builder(PARAMS)
    A_, y = b.input("A"), b.input("y")
    mv = b.contract([("a", N)], [("c", M)], (A_, ["a", "c"]), (y, ["c"]))
    tot = b.reduce((), [("a", N)], (mv, ["a"]))
    p = b.program((mv, tot))
    for n, m in [(0, 3), (3, 0), (0, 0)]:
        (g, t), cost = check(p, args(n, m))
        assert g.shape == (n,) and t == 0.0 and cost.muls == n * m


# ---------------------------------------------------------------------------------------------
# Canonical forms: equal statements are one node


def test_index_names_and_operand_order_are_canonical():
    r1 = make_contract([("p", N)], [("q", M)], ("A", ["p", "q"]), ("y", ["q"]),
                            Cmp("<", Affine.var("q"), Affine.var("p")))
    r2 = make_contract([("row", N)], [("col", M)], ("y", ["col"]), ("A", ["row", "col"]),
                            Cmp("<=", Affine.var("col") + 1, Affine.var("row")))
    assert r1 is r2
    a1 = make_add([("p", N)], ("x", ["p"]), ("y", ["p"]), supports=(PTrue(), Cmp(
        "<", Affine.var("p"), 2)))
    a2 = make_add([("z", N)], ("y", ["z"]), ("x", ["z"]), supports=(Cmp(
        "<=", Affine.var("z"), 1), PTrue()))
    assert a1 is a2


def test_summation_order_is_canonical():
    r1 = make_reduce((), [("a", N), ("b", M)], ("A", ["a", "b"]),
                          Cmp("<=", Affine.var("b"), Affine.var("a")))
    r2 = make_reduce((), [("b", M), ("a", N)], ("A", ["a", "b"]),
                          Cmp("<=", Affine.var("b"), Affine.var("a")))
    assert r1 is r2
    assert ssa_printer.fmt_rhs(r1) == "sum j0:N, j1:M. [j1 <= j0] * A[j0, j1]"


def test_builder_shares_equal_statements():
    b = Builder(PARAMS)
    x = b.input("x")
    v1 = b.map([("a", N)], "exp", [(x, ["a"])], Cmp("<", Affine.var("a"), 3))
    v2 = b.map([("b", N)], "exp", [(x, ["b"])], Cmp("<=", Affine.var("b"), 2))
    assert v1 == v2 and len(b.stmts) == 2
    raw = Builder(PARAMS, share=False)
    x = raw.input("x")
    assert raw.map([("a", N)], "exp", [(x, ["a"])]) != raw.map([("a", N)], "exp", [(x, ["a"])])


@pytest.mark.parametrize("p, q", [
    (Cmp("<", i, j), Cmp("<=", i + 1, j)),
    (Cmp("==", i, j + 1), Cmp("==", j + 1, i)),
    (Cmp("==", i * 2, j * 2 + 2), Cmp("==", i, j + 1)),          # gcd
    (Cmp("<=", i * 2, j * 2 + 1), Cmp("<=", i, j)),              # integer tightening
    (And(Cmp("<", i, j), RelCall("E", (i, j))), And(RelCall("E", (i, j)), Cmp("<", i, j))),
    (And(And(Cmp("<", i, j), Cmp("<", i, j)), PTrue()), Cmp("<", i, j)),
    (Or(Cmp("<", i, j), PFalse()), Cmp("<", i, j)),
    (And(Cmp("<=", Affine.lit(0), i), Cmp("<", i, N)), PTrue()),  # implied by the range
    (Cmp("<", i, Affine.lit(0)), PFalse()),                      # refuted by the range
    (Cmp("==", i, N), PFalse()),
    (Exists("t", N, Cmp("==", i, Affine.var("t") * 2)),
     Exists("u", N, Cmp("==", Affine.var("u") * 2, i))),
])
def test_predicate_canonical_forms(p, q):
    ranges = {"i": N, "j": M}
    assert tssa.canon_pred(p, ranges) is tssa.canon_pred(q, ranges)


_aff = st.builds(lambda a, b, c: Affine((("i", a), ("j", b)), c),
                 st.integers(-2, 2), st.integers(-2, 2), st.integers(-3, 3))


def _preds(depth: int = 2) -> st.SearchStrategy:
    leaf = st.one_of(st.builds(Cmp, st.sampled_from(Cmp.OPS), _aff, _aff),
                     st.builds(lambda a, b: RelCall("E", (a, b)), _aff, _aff),
                     st.builds(lambda a: Exists("t", N, Cmp("==", a, Affine.var("t") * 2)), _aff))
    if depth == 0:
        return leaf
    sub = _preds(depth - 1)
    return st.one_of(leaf, st.builds(And, sub, sub), st.builds(Or, sub, sub))


@given(_preds(), st.integers(0, 4), st.integers(0, 4), st.integers(0, 2 ** 16))
def test_canonical_predicates_keep_meaning_and_are_idempotent(p, n, m, seed):
    ranges = {"i": N, "j": M}
    c = tssa.canon_pred(p, ranges)
    assert tssa.canon_pred(c, ranges) is c
    box = grid.Box({"N": n, "M": m}, {"E": np.random.default_rng(seed).random((n, m)) < 0.5})
    box = box.bind_indices([("i", n), ("j", m)])
    assert np.array_equal(np.broadcast_to(grid.pred(p, box), (n, m)),
                          np.broadcast_to(grid.pred(c, box), (n, m)))


def test_index_prefixes_avoid_parameter_names():
    params = (Param("i0", ast.TSize()), Param("x", tensor([Affine.var("i0")])))
    b = Builder(params)
    assert b.ix != tssa.IX and b.ix[0] != "i"
    x = b.input("x")
    v = b.map([("a", Affine.var("i0"))], "sin", [(x, ["a"])])
    p = b.program(v)
    assert is_tensor_ssa(p) is None
    a = {"i0": 3, "x": np.arange(3.0)}
    got, _ = check(p, a)
    assert np.allclose(got, np.sin(a["x"]))


# ---------------------------------------------------------------------------------------------
# Printer, helpers, checker


def test_text_is_a_list_of_masked_einsums_and_parses_back():
    from tensorlang.api import parse

    b = Builder(PARAMS)
    A_, x = b.input("A"), b.input("x")
    v = b.contract([("a", N)], [("c", N)], ("A", ["a", "c"]), ("x", ["c"]),
                   Cmp("<=", Affine.var("a"), Affine.var("c")))
    w = b.reduce((), [("a", N)], (v, ["a"]), coeff=-1.0)
    p = b.program(w, "tri")
    text = ssa_printer.to_text(p)
    assert text.splitlines() == [
        "def tri(N: size, M: size, x: R[N], y: R[M], A: R[N, M], s: R, E: rel(N, M)):",
        "    v0[i0:N] = sum j0:N. [i0 <= j0] * A[i0, j0] * x[j0]",
        "    v1 = sum j0:N. -1.0 * v0[j0]",
        "    return v1"]
    assert "Σ j0:N. [i0 ≤ j0]·A[i0, j0]·x[j0]" in ssa_printer.to_text(p, unicode=True)
    a = args(n=3, m=3)
    f = parse(text)["tri"]
    assert values_close(f.interpret(**a), evaluate_program(p, a))


def test_helpers_users_shapes_dce_toposort():
    b = Builder(PARAMS)
    x, y = b.input("x"), b.input("y")
    outer = b.contract([("a", N), ("c", M)], (), (x, ["a"]), (y, ["c"]))
    dead = b.map([("a", N)], "exp", [(x, ["a"])])
    tot = b.reduce((), [("a", N), ("c", M)], (outer, ["a", "c"]))
    p = b.program(tot, prune=False, canonical_names=False)
    assert p.uses(x) == {outer, dead} and p.uses(outer) == {tot} and p.uses(tot) == frozenset()
    assert p.shape(outer) == (N, M) and p.shape(tot) == () and p.shape(x) == (N,)
    pruned = tssa.dce(p)
    assert dead not in pruned.defs and len(pruned.stmts) == 4
    shuffled = tssa.Program(p.name, p.params, tuple(reversed(p.stmts)), p.output, p.ret, p.ix)
    ordered = tssa.toposort(shuffled)
    pos = ordered.position
    assert pos[x] < pos[outer] < pos[tot] and pos[y] < pos[outer]
    assert values_close(evaluate_program(ordered, args()), evaluate_program(p, args()))
    clean = tssa.renumber(pruned)
    assert [s.var for s in clean.stmts if s.var not in ("x", "y")] == ["v0", "v1"]
    assert is_tensor_ssa(clean) is None
    assert is_tensor_ssa(p) is not None and "dead" in is_tensor_ssa(p)


def test_extend_builder_appends_and_shares():
    b = Builder(PARAMS)
    x = b.input("x")
    v = b.map([("a", N)], "exp", [(x, ["a"])])
    p = b.program(v)
    b2 = Builder.extend(p)
    assert b2.map([("z", N)], "exp", [(x, ["z"])]) == p.output
    w = b2.add([("z", N)], (p.output, ["z"]), (x, ["z"]))
    assert values_close(evaluate_program(b2.program(w), args()), np.exp(args()["x"]) + args()["x"])


def test_checker_rejects_violations():
    b = Builder(PARAMS, share=False)
    x = b.input("x")
    v1 = b.map([("a", N)], "exp", [(x, ["a"])])
    v2 = b.map([("a", N)], "exp", [(x, ["a"])])
    s = b.add([("a", N)], (v1, ["a"]), (v2, ["a"]))
    msg = is_tensor_ssa(b.program(s))
    assert msg is not None and "CSE" in msg
    b = Builder(PARAMS)
    x = b.input("x")
    copy = b.reduce([("a", N)], (), (x, ["a"]))
    msg = is_tensor_ssa(b.program(copy))
    assert msg is not None and "trivial" in msg
    bad = tssa.Program("f", PARAMS, (tssa.Stmt("v0", make_reduce(
        [("a", N)], (), ("x", ["a"]))),), "v0")
    msg = is_tensor_ssa(bad)
    assert msg is not None and "before it is defined" in msg


def test_builder_rejects_malformed_statements():
    b = Builder(PARAMS)
    x = b.input("x")
    with pytest.raises(ValueError):
        b.map([("a", N)], "exp", [(x, ["a", "a"])])        # wrong number of indices
    with pytest.raises(ValueError):
        b.map([("a", N)], "nosuchfn", [(x, ["a"])])
    with pytest.raises(ValueError):
        b.reduce([("a", N)], (), (x, ["a"]), coeff=0.0)    # zero coefficient: use a const
    with pytest.raises(ValueError):
        b.input("N")                                       # not a real tensor


def test_operand_reads_are_zero_extended():
    b = Builder(PARAMS)
    x = b.input("x")
    shifted = b.reduce([("a", Affine.lit(7))], (), (x, [Affine.var("a") - 2]))
    p = b.program(shifted)
    a = args(n=4)
    got, _ = check(p, a)
    assert np.allclose(got, [0, 0, *a["x"], 0])
