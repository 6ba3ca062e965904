"""The random-program generator (`tensorlang.testing`): coverage, well-typedness, NaN-freeness,
bounds, options, determinism, shrinking, and `random_args`."""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang import testing
from tensorlang.syntax.errors import ShapeError, TLError

typecheck = pytest.importorskip("tensorlang.check.typecheck")
interp = pytest.importorskip("tensorlang.semantics.interp")

N_COVER = 400      # draws for the coverage statistics (about a second)


def leaves(v: Any) -> Iterator[np.ndarray]:
    if isinstance(v, tuple):
        for c in v:
            yield from leaves(c)
    else:
        yield np.asarray(v, dtype=np.float64)


def max_abs(v: Any) -> float:
    return max((float(np.abs(x).max()) for x in leaves(v) if x.size), default=0.0)


def walk_env(e: ast.Node, env: Any) -> Iterator[tuple[ast.Node, Any]]:
    """Every sub-node with the type environment in force at it."""
    yield e, env
    if isinstance(e, (ast.Gen, ast.Sum, ast.Exists, ast.Extremum)):
        yield from walk_env(e.size, env)
        yield from walk_env(e.body, env.with_index(e.idx, e.size))
    elif isinstance(e, ast.Let):
        yield from walk_env(e.value, env)
        tv = typecheck.type_of(e.value, env)
        yield from walk_env(e.body, env.with_var(e.name, tv))
    else:
        for c in ast.children(e):
            yield from walk_env(c, env)


def check_program(d: ast.Def, args: dict[str, Any], budget: float = 1e3) -> Any:
    """Type-checks (core type_of and the module checker) and evaluates finitely within budget."""
    env = typecheck.param_env(d)
    assert typecheck.type_of(d.body, env) is d.ret
    checked = typecheck.check_module([d])
    assert checked.ret_types[d.name] is d.ret
    out = interp.interpret(d, args)
    for x in leaves(out):
        assert np.all(np.isfinite(x)), "NaN or inf in the output"
    assert max_abs(out) <= budget * (1 + 1e-12)
    return out


def features(d: ast.Def, args: dict[str, Any]) -> set[str]:
    """Tags for every construct, predicate form, type kind and index form that occurs."""
    out: set[str] = set()
    for p in d.params:
        t = p.type
        out.add("param:" + ("size" if isinstance(t, ast.TSize) else "rel" if isinstance(t, ast.TRel)
                            else "pair" if isinstance(t, ast.TPair) else
                            "tensor" if isinstance(t, ast.TArr) else "real"))
        for n in (ast.shape_of(t) if isinstance(t, ast.TArr) else ()):
            if n.const and n.terms:
                out.add("size:offset")
            if len(n.terms) >= 2:
                out.add("size:two_vars")
        if isinstance(t, ast.TSize) and args[p.name] == 0:
            out.add("size:zero")
        if isinstance(t, ast.TRel):
            out.add("rel:" + ("bool" if args[p.name].dtype == bool else "coo"))
    ret = d.ret
    out.add("ret:" + ("pair" if isinstance(ret, ast.TPair) else
                      "real" if isinstance(ret, ast.TReal) else
                      "pair_tensor" if isinstance(ast.scalar_of(ret), ast.TPair) else "tensor"))
    for e, env in walk_env(d.body, typecheck.param_env(d)):
        out.add(type(e).__name__)
        if isinstance(e, ast.Cmp):
            out.add("Cmp" + e.op)
        elif isinstance(e, ast.Call):
            out.add("call:" + e.fn)
        elif isinstance(e, ast.Let) and e.name not in ast.free_vars(e.body):
            out.add("let:dead")
        if isinstance(e, (ast.Gen, ast.Sum)):
            inside = {type(n) for n in ast.walk(e.body)}
            if isinstance(e, ast.Sum) and e.idx not in ast.free_names(e.body):
                out.add("sum:invariant")
            if ast.Let in inside:
                out.add("let_in:" + type(e).__name__)
            if isinstance(e, ast.Sum) and ast.Sum in inside:
                out.add("sum:nested")
        elif isinstance(e, ast.Exists) and isinstance(e.body, ast.Cmp) and \
                e.body.rhs.coeff(e.idx) == 2:
            out.add("exists:integrality")
        elif isinstance(e, ast.Iverson):
            t = typecheck.type_of(e, env)
            out.add("iverson:" + ("pair" if isinstance(t, ast.TPair) else
                                  "real" if isinstance(t, ast.TReal) else "tensor"))
        elif isinstance(e, ast.Access):
            t = typecheck.type_of(e, env)
            out.add("access:" + ("full" if isinstance(t, ast.TReal) else "partial"))
            if isinstance(e.e, ast.Access):
                out.add("access:nested")
            if not isinstance(e.e, ast.Var):
                out.add("access:of_expr")
            for a in e.idx:
                ivs = [(n, c) for n, c in a.terms if env.idx.get(n) is not None]
                sizes = [n for n, _ in a.terms if env.is_size(n)]
                if len(ivs) == 1 and ivs[0][1] == 1 and a.const and not sizes:
                    out.add("index:shift")
                if any(c == 2 for _, c in ivs):
                    out.add("index:scaled")
                if len(ivs) == 2:
                    out.add("index:two_vars")
                if len(ivs) == 1 and ivs[0][1] == -1 and sizes:
                    out.add("index:reverse")
                    if env.idx.get(ivs[0][0]) not in [ast.Affine.var(n) for n in sizes]:
                        out.add("index:reverse_other")   # `M - k - 1`, k over another size
                if len(ivs) == 1 and ivs[0][1] == 1 and abs(a.const) >= 2 and not sizes:
                    out.add("index:shift_far")
    return out


EXPECTED = (
    {"Var", "Const", "Add", "Mul", "Call", "Pair", "Proj", "Gen", "Sum", "Access", "Iverson",
     "Max", "Min", "call:sel_ge", "IndexValue",
     "Let", "PTrue", "PFalse", "Cmp<", "Cmp<=", "Cmp==", "RelCall", "And", "Or", "Exists",
     "sum:nested", "let_in:Gen", "let_in:Sum", "exists:integrality",
     "iverson:real", "iverson:tensor", "iverson:pair",
     "access:full", "access:partial", "access:nested", "access:of_expr",
     "index:shift", "index:scaled", "index:two_vars", "index:reverse",
     "param:size", "param:real", "param:tensor", "param:pair", "param:rel",
     "ret:real", "ret:tensor", "ret:pair", "ret:pair_tensor",
     "size:zero", "size:offset", "size:two_vars", "rel:bool", "rel:coo"})


@pytest.fixture(scope="module")
def sample() -> list[tuple[ast.Def, dict[str, Any]]]:
    return testing.draw_examples(testing.programs(), N_COVER)


def test_every_construct_is_generated(sample: list) -> None:
    seen: Counter[str] = Counter()
    for d, args in sample:
        seen.update(features(d, args))
    missing = EXPECTED - set(seen)
    assert not missing, f"never generated in {len(sample)} draws: {sorted(missing)}"
    assert sum(k.startswith("call:") for k in seen) >= 12   # each one: test below


@pytest.mark.parametrize("fn", sorted(testing.GENERATED_BUILTINS))
def test_each_builtin_on_its_safe_domain(fn: str) -> None:
    found = 0
    for d, args in testing.draw_examples(testing.programs(builtins={fn}, real_output_only=True), 6):
        check_program(d, args)
        found += any(isinstance(n, ast.Call) and n.fn == fn for n in ast.walk(d.body))
    assert found >= 1


def test_sample_is_well_typed_finite_and_bounded(sample: list) -> None:
    assert len(sample) >= N_COVER // 2
    for d, args in sample:
        check_program(d, args)
        assert ast.Def(d.name, d.params, d.ret, d.body) is d  # plain core nodes
        assert not any(isinstance(n, ast.DefCall) for n in ast.walk(d.body))


def test_binders_are_unique_and_distinct_from_params(sample: list) -> None:
    for d, _ in sample:
        binders = [ast.binder_name(n) for n in ast.walk(d.body) if ast.binder_name(n)]
        params = {p.name for p in d.params}
        assert len(binders) == len(set(binders)), binders
        assert not params & set(binders)


@settings(max_examples=40, deadline=None)
@given(testing.programs(max_size=3, max_depth=6, budget=8.0))
def test_tight_budget_holds_in_deep_programs(prog: tuple[ast.Def, dict]) -> None:
    d, args = prog
    check_program(d, args, budget=8.0)


@settings(deadline=None)
@given(testing.differentiable_programs())
def test_differentiable_programs(prog: tuple[ast.Def, dict, list[str]]) -> None:
    d, args, wrt = prog
    check_program(d, args, budget=1e2)
    fns = {n.fn for n in ast.walk(d.body) if isinstance(n, ast.Call)}
    assert not fns & testing.KINKED
    params = {p.name: p.type for p in d.params}
    assert wrt and len(set(wrt)) == len(wrt)
    assert all(testing.is_real_tensor(params[x]) for x in wrt)
    # Smooth in the wrt inputs: central differences at two step sizes agree.
    def at(h: float) -> list[np.ndarray]:
        moved = {**args, **{x: args[x] + h for x in wrt}}
        return list(leaves(interp.interpret(d, moved)))

    for up, down, up2, down2 in zip(at(1e-3), at(-1e-3), at(1e-4), at(-1e-4)):
        g1, g2 = (up - down) / 2e-3, (up2 - down2) / 2e-4
        assert np.all(np.abs(g1 - g2) <= 1e-2 * (1 + np.abs(g2)))


@settings(deadline=None)
@given(testing.programs(real_output_only=True, no_pairs=True, no_relations=True, lets=False,
                  builtins={"exp", "log", "square"}))
def test_options_restrict_what_is_generated(prog: tuple[ast.Def, dict]) -> None:
    d, args = prog
    check_program(d, args)
    assert d.ret is ast.REAL
    types = [p.type for p in d.params]
    assert not any(isinstance(t, ast.TRel) for t in types)
    assert not any(isinstance(t, ast.TPair) or isinstance(ast.scalar_of(t), ast.TPair)
                   for t in types)
    for n in ast.walk(d.body):
        assert not isinstance(n, (ast.Pair, ast.Proj, ast.Let, ast.RelCall))
        if isinstance(n, ast.Call):
            assert n.fn in {"exp", "log", "square"}


def test_soa_projections_option_generates_projections_of_pair_tensors() -> None:
    found = False
    for d, args in testing.draw_examples(testing.programs(soa_projections=True), 60):
        out = interp.interpret(d, args)  # meaningful on the struct-of-arrays representation
        assert all(np.all(np.isfinite(x)) for x in leaves(out))
        found = found or any(isinstance(e, ast.Proj) and isinstance(e.e, ast.Gen)
                             for e in ast.walk(d.body))
    assert found


def test_draws_are_deterministic() -> None:
    a = testing.draw_examples(testing.programs(), 15)
    b = testing.draw_examples(testing.programs(), 15)
    assert len(a) == len(b)
    for (d1, x1), (d2, x2) in zip(a, b):
        assert d1 is d2
        assert x1.keys() == x2.keys()
        for k in x1:
            assert all(np.array_equal(u, v) for u, v in zip(leaves(x1[k]), leaves(x2[k])))


@pytest.mark.slow
def test_shrinking_gives_small_programs() -> None:
    def n_nodes(d: ast.Def) -> int:
        return sum(1 for n in ast.walk(d.body) if isinstance(n, ast.Expr))

    quiet = settings(database=None, derandomize=True, max_examples=100,
                     suppress_health_check=list(HealthCheck))
    d, _ = find(testing.programs(), lambda p: any(isinstance(n, ast.Call) and n.fn == "log"
                                            for n in ast.walk(p[0].body)), settings=quiet)
    assert n_nodes(d) <= 4, d                 # log(1.0) * 0.0
    assert len(d.params) == 1 and d.ret is ast.REAL


# ---------------------------------------------------------------------------------------------
# Pieces: scopes, expressions, predicates, indices


@st.composite
def scoped_expr(draw: Any) -> tuple[testing.Scope, ast.Type, testing.Typed]:
    sc = draw(testing.scopes(max_size=4))
    t = draw(testing.types(sc))
    te = draw(testing.typed_expressions(sc, t, max_depth=3, budget=50.0))
    return sc, t, te


@settings(deadline=None)
@given(scoped_expr(), st.integers(0, 2 ** 32 - 1))
def test_expressions_in_a_scope(case: tuple, seed: int) -> None:
    sc, t, te = case
    assert te.type is t
    d = sc.make_def(te.expr, t)
    assert typecheck.type_of(te.expr, typecheck.param_env(d)) is t
    out = interp.interpret(d, sc.args(d, seed))
    assert max_abs(out) <= te.bound <= 50.0


@settings(deadline=None)
@given(st.data())
def test_expressions_under_binders_and_lets(data: st.DataObject) -> None:
    sc = data.draw(testing.scopes(max_size=3))
    n = ast.Affine.var(next(iter(sc.sizes))) if sc.sizes else ast.Affine.lit(3)
    i = sc.fresh("i")
    inner = sc.with_index(i, n)
    e1 = data.draw(testing.typed_expressions(inner, ast.REAL, budget=10.0))
    x = inner.fresh("i")   # a fresh name even when it looks like an index
    body = data.draw(testing.expressions(inner.with_var(x, ast.REAL, e1.bound), ast.REAL,
                                         budget=10.0))
    p = data.draw(testing.predicates(inner))
    a = data.draw(testing.indices(sc, n))           # outside the gen: sizes and constants only
    assert a.vars() <= set(sc.sizes)
    e = ast.Gen(i, n, ast.Iverson(p, ast.Let(x, e1.expr, body)))
    d = sc.make_def(ast.Access(e, (a,)))
    checked = typecheck.check_module([d])
    assert checked.ret_types["f"] is ast.REAL
    interp.interpret(d, sc.args(d, 1))


def test_scope_helpers() -> None:
    n = ast.Affine.var("N")
    sc = testing.Scope.of([ast.Param("N", ast.TSize()), ast.Param("x", ast.tensor([n])),
                           ast.Param("E", ast.TRel((n,)))], {"N": 4})
    assert sc.sizes == {"N": 4} and set(sc.rels) == {"E"} and set(sc.vars) == {"x"}
    assert sc.value(ast.Affine.var("N") * 2 - 1) == 7
    assert sc.fresh("x") == "x1" and sc.fresh("y") == "y"
    assert sc.with_index("i", 3).fresh("i") == "i1"


# ---------------------------------------------------------------------------------------------
# random_args


def mk(params: list[tuple[str, ast.Type]]) -> ast.Def:
    return ast.Def("g", tuple(ast.Param(n, t) for n, t in params), None, ast.Const(0.0))


N, K = ast.Affine.var("N"), ast.Affine.var("K")


def test_random_args_shapes_and_encodings() -> None:
    pt = ast.tensor([N], ast.TPair(ast.REAL, ast.tensor([K])))
    d = mk([("N", ast.TSize()), ("K", ast.TSize()), ("x", ast.tensor([N + K - 1])), ("s", ast.REAL),
            ("p", ast.TPair(ast.REAL, ast.tensor([N, 2]))), ("q", pt),
            ("E", ast.TRel((N, K)))])
    args = testing.random_args(d, {"N": 3, "K": 2}, 5)
    assert args["N"] == 3 and args["K"] == 2
    assert args["x"].shape == (4,) and args["x"].dtype == np.float64
    assert isinstance(args["s"], float) and -1 <= args["s"] <= 1
    assert isinstance(args["p"][0], float) and args["p"][1].shape == (3, 2)
    assert args["q"][0].shape == (3,) and args["q"][1].shape == (3, 2)   # struct of arrays
    interp.interpret(d, args)                                             # accepted as is
    boolean = testing.random_args(d, {"N": 3, "K": 2}, 5, rel_encoding="bool")["E"]
    coo = testing.random_args(d, {"N": 3, "K": 2}, 5, rel_encoding="coo")["E"]
    assert boolean.dtype == bool and boolean.shape == (3, 2)
    assert coo.ndim == 2 and coo.shape[1] == 2 and np.issubdtype(coo.dtype, np.integer)
    assert np.array_equal(np.argwhere(boolean), coo)                      # same relation
    again = testing.random_args(d, {"N": 3, "K": 2}, np.random.default_rng(5))
    assert all(np.array_equal(u, v) for k in args
               for u, v in zip(leaves(args[k]) if k != "E" else [args[k]],
                               leaves(again[k]) if k != "E" else [again[k]]))


def test_random_args_size_zero_and_errors() -> None:
    d = mk([("N", ast.TSize()), ("x", ast.tensor([N, N])), ("E", ast.TRel((N,)))])
    args = testing.random_args(d, {"N": 0}, 0, rel_encoding="coo")
    assert args["x"].shape == (0, 0) and args["E"].shape == (0, 1)
    with pytest.raises(TLError, match="size parameter N"):
        testing.random_args(d, {}, 0)
    with pytest.raises(ShapeError):
        testing.random_args(d, {"N": -1}, 0)
    with pytest.raises(ShapeError):
        testing.random_args(mk([("N", ast.TSize()), ("x", ast.tensor([N - 1]))]), {"N": 0}, 0)
    with pytest.raises(ValueError):
        testing.random_args(d, {"N": 1}, 0, rel_encoding="dense")


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        testing.programs(builtins={"nope"})
    with pytest.raises(TypeError):
        testing.programs(colour="blue")


# ---------------------------------------------------------------------------------------------
# theorem_programs(): the shapes the end-to-end cost theorems are checked on


THEOREM_EXPECTED = {"let:dead", "sum:invariant", "sum:nested", "let_in:Gen", "let_in:Sum",
                    "index:reverse", "index:reverse_other", "index:shift", "index:shift_far",
                    "index:two_vars", "Let", "Gen", "Sum", "Access", "Add", "Mul", "Call",
                    "Max", "Min"}


def test_theorem_programs_signature_and_constructs() -> None:
    sample = testing.draw_examples(testing.theorem_programs(), 120)
    seen: Counter[str] = Counter()
    statements = 0
    n, m = ast.Affine.var("N"), ast.Affine.var("M")
    for d, args in sample:
        check_program(d, args)
        assert [(p.name, p.type) for p in d.params] == [
            ("N", ast.TSize()), ("M", ast.TSize()), ("x", ast.tensor([n])),
            ("y", ast.tensor([m])), ("A", ast.tensor([n, m])), ("s", ast.REAL)]
        assert d.ret in (ast.REAL, ast.tensor([n]), ast.tensor([m]))
        assert 2 <= args["N"] <= 5 and 2 <= args["M"] <= 5
        seen.update(features(d, args))
        statements += isinstance(d.body, ast.Let) and d.body.name.startswith("T")
    missing = THEOREM_EXPECTED - set(seen)
    assert not missing, f"never generated in {len(sample)} draws: {sorted(missing)}"
    assert statements >= 10


@pytest.mark.parametrize("strategy", ["differentiable_programs", "programs"])
def test_dead_lets_invariant_sums_and_mixed_indices(strategy: str) -> None:
    """On by default in differentiable_programs(), on request in programs()."""
    options = {} if strategy == "differentiable_programs" else {
        "dead_lets": True, "invariant_sums": True, "mixed_indices": True}
    seen: Counter[str] = Counter()
    for case in testing.draw_examples(getattr(testing, strategy)(**options), 150):
        d, args = case[0], case[1]
        check_program(d, args, budget=1e3)
        seen.update(features(d, args))
    missing = {"let:dead", "sum:invariant", "index:reverse_other", "index:shift_far"} - set(seen)
    assert not missing, sorted(missing)
