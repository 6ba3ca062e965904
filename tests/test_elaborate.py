"""Elaboration: tensor sugar to `gen`, inlining of earlier defs, `is_core`; every result is
compared with a hand-written core program (structurally up to bound names, and by the
interpreter)."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlang.ir.ast import (
    REAL, Access, Add, Affine, Call, Cmp, Const, Def, DefCall, Gen, IndexValue, Iverson, Let, Mul,
    Pair, Proj, RelCall, Sum, TPair, TRel, Var, walk,
)
from tensorlang.check.elaborate import elaborate_def, elaborate_expr, is_core
from tensorlang.syntax.errors import TypeCheckError
from tensorlang.semantics.interp import interpret
from tensorlang.check.typecheck import TypeEnv, check_def, check_module

from test_typecheck import conv_def, qform_def, L, P, R, acc, aff, canon, gen, lt, size, sum_

RNG = np.random.default_rng(0)


def core_of(d: Def, *earlier: Def) -> Def:
    """The elaborated def (earlier defs checked first)."""
    m = check_module([*earlier, d])
    out = m.defs[d.name]
    assert is_core(out)
    return out


def same_meaning(a: Def, b: Def, args: dict) -> None:
    np.testing.assert_allclose(interpret(a, args), interpret(b, args), rtol=1e-12, atol=1e-12)


def assert_alpha(a, b) -> None:
    assert canon(a) is canon(b), f"\n{a}\n!=\n{b}"


def vec(n: int) -> np.ndarray:
    return RNG.uniform(-1, 1, n)


def vec_params() -> tuple:  # built on demand (see test_typecheck.qform_def)
    return (size("N"), P("x", R("N")), P("y", R("N")), P("s", REAL))


VEC_ARGS = {"N": 5, "x": vec(5), "y": vec(5), "s": 0.7}


def vdef(body, ret=None, params=None, name="f") -> Def:
    return Def(name, params or vec_params(), ret, body)


# ---------------------------------------------------------------------------------------------
# Tensor sugar


def test_tensor_add_expands_to_gen():
    got = core_of(vdef(Add(Var("x"), Var("y"))))
    want = gen("i", "N", Add(acc("x", "i"), acc("y", "i")))
    assert_alpha(got.body, want)
    assert got.ret is R("N")
    same_meaning(got, vdef(want), VEC_ARGS)


def test_scalar_times_tensor_either_side():
    for body in (Mul(Var("s"), Var("x")), Mul(Var("x"), Var("s"))):
        got = core_of(vdef(body))
        a, b = (Var("s"), acc("x", "i")) if body.a is Var("s") else (acc("x", "i"), Var("s"))
        assert_alpha(got.body, gen("i", "N", Mul(a, b)))
        same_meaning(got, vdef(gen("i", "N", Mul(Var("s"), acc("x", "i")))), VEC_ARGS)


def test_subtraction_and_negation_as_the_parser_lowers_them():
    # x - y  ->  x + (-1.0) * y
    got = core_of(vdef(Add(Var("x"), Mul(Const(-1.0), Var("y")))))
    want = gen("i", "N", Add(acc("x", "i"), Mul(Const(-1.0), acc("y", "i"))))
    assert_alpha(got.body, want)
    same_meaning(got, vdef(want), VEC_ARGS)


def test_matrix_sugar_and_nesting():
    params = (size("N"), size("M"), P("A", R("N", "M")), P("B", R("N", "M")), P("s", REAL))
    body = Mul(Add(Var("A"), Mul(Var("s"), Var("B"))), Var("A"))  # (A + s B) .* A
    got = core_of(Def("f", params, None, body))
    want = gen("i", "N", gen("j", "M", Mul(
        Add(acc("A", "i", "j"), Mul(Var("s"), acc("B", "i", "j"))), acc("A", "i", "j"))))
    assert_alpha(got.body, want)
    args = {"N": 3, "M": 4, "A": RNG.uniform(-1, 1, (3, 4)), "B": RNG.uniform(-1, 1, (3, 4)),
            "s": -1.5}
    same_meaning(got, Def("f", params, None, want), args)


def test_indices_are_pushed_into_operands():
    # sum i. (x + y)[i]  ->  sum i. x[i] + y[i]     (no gen is built)
    got = core_of(vdef(sum_("i", "N", acc(Add(Var("x"), Var("y")), "i"))))
    assert_alpha(got.body, sum_("i", "N", Add(acc("x", "i"), acc("y", "i"))))
    # an operand that is a gen is indexed by substitution
    g = gen("k", "N", Call("exp", (acc("x", "k"),), ()))
    got = core_of(vdef(Add(g, Var("y"))))
    want = gen("i", "N", Add(Call("exp", (acc("x", "i"),), ()), acc("y", "i")))
    assert_alpha(got.body, want)
    same_meaning(got, vdef(want), VEC_ARGS)
    assert not any(isinstance(n, Access) and isinstance(n.e, Gen) for n in walk(got.body))


def test_partial_access_of_sugar():
    params = (size("N"), size("M"), P("A", R("N", "M")), P("B", R("N", "M")))
    got = core_of(Def("f", params, None, acc(Add(Var("A"), Var("B")), "0")))
    assert_alpha(got.body, gen("j", "M", Add(acc("A", "0", "j"), acc("B", "0", "j"))))
    assert got.ret is R("M")


def test_unprovable_index_into_sugar_keeps_zero_extension():
    # (x + y)[i + 1] for i < N is out of range at i = N - 1: a warning; reads of x and y give 0
    # there, so no guard is needed
    body = gen("i", "N", acc(Add(Var("x"), Var("y")), "i + 1"))
    m = check_module([vdef(body)])
    assert_alpha(m.defs["f"].body, gen("i", "N", Add(acc("x", "i + 1"), acc("y", "i + 1"))))
    assert len(m.warnings) == 1
    # (s * x)[i + 1]: s * 0 is nan for s = inf, so the element is guarded
    body = gen("i", "N", acc(Mul(Var("s"), Var("x")), "i + 1"))
    got = core_of(vdef(body))
    assert_alpha(got.body, gen("i", "N", Iverson(lt("i + 1", "N"),
                                                 Mul(Var("s"), acc("x", "i + 1")))))
    naive = vdef(gen("i", "N", acc(gen("j", "N", Mul(Var("s"), acc("x", "j"))), "i + 1")))
    same_meaning(got, naive, dict(VEC_ARGS, s=float("inf")))


def test_gen_operand_with_unprovable_index_gets_a_guard():
    # (gen k:N. s * x[k]) indexed by the user at i + 1 through tensor arithmetic
    g = gen("k", "N", Mul(Var("s"), acc("x", "k")))
    body = gen("i", "N", acc(Add(g, Var("y")), "i + 1"))
    got = core_of(vdef(body))
    args = dict(VEC_ARGS, s=float("inf"))  # inf * 0 would be nan without the guard
    want = vdef(gen("i", "N", Iverson(lt("i + 1", "N"), Add(
        Mul(Var("s"), acc("x", "i + 1")), acc("y", "i + 1")))))
    same_meaning(got, want, args)
    assert np.isfinite(interpret(got, args)[-1])


def test_costly_operands_are_evaluated_once():
    total = sum_("j", "N", acc("x", "j"))
    got = core_of(vdef(Mul(total, Var("y"))))
    assert isinstance(got.body, Let)  # let t = sum j. x[j] in gen i. t * y[i]
    assert_alpha(got.body, Let("t", total, gen("i", "N", Mul(Var("t"), acc("y", "i")))))
    same_meaning(got, vdef(gen("i", "N", Mul(total, acc("y", "i")))), VEC_ARGS)
    # free scalars (constants, reads) are used in place
    got = core_of(vdef(Mul(acc("x", "0"), Var("y"))))
    assert isinstance(got.body, Gen)


def test_iverson_and_let_with_sugar():
    body = Iverson(Cmp("<=", aff("1"), aff("N")), Add(Var("x"), Var("y")))
    got = core_of(vdef(body))
    want = Iverson(Cmp("<=", aff("1"), aff("N")), gen("i", "N", Add(acc("x", "i"),
                                                                     acc("y", "i"))))
    assert_alpha(got.body, want)
    body = Let("z", Add(Var("x"), Var("y")), Mul(Var("s"), Var("z")))
    got = core_of(vdef(body))
    same_meaning(got, vdef(gen("i", "N", Mul(Var("s"), Add(acc("x", "i"), acc("y", "i"))))),
                 VEC_ARGS)


def test_pairs_and_projections_are_kept():
    body = Pair(Add(Var("x"), Var("y")), Proj(Pair(Var("s"), Var("s")), 0))
    got = core_of(vdef(body))
    assert got.ret is TPair(R("N"), REAL)
    assert is_core(got)


def test_shape_mismatch_names_both_shapes():
    params = (size("N"), size("M"), P("x", R("N")), P("z", R("M")))
    bad = Add(Var("x"), Var("z"), loc=L(4, 11))
    with pytest.raises(TypeCheckError, match=r"shape mismatch in \+: R\[N\] and R\[M\]") as info:
        check_module([Def("f", params, None, bad)])
    assert (info.value.loc.line, info.value.loc.col) == (4, 11)
    with pytest.raises(TypeCheckError, match=r"shape mismatch in \*: R\[N\] and R\[M\]"):
        check_module([Def("f", params, None, Mul(Var("x"), Var("z")))])


def test_sugar_errors():
    with pytest.raises(TypeCheckError, match=r"cannot add R\[N\] and R: tensor \+ needs two "
                                             "tensors of the same shape"):
        check_module([vdef(Add(Var("x"), Var("s")))])
    with pytest.raises(TypeCheckError, match=r"operands of \* must be R or tensors of R, found "
                                             r"\(R, R\)"):
        check_module([vdef(Mul(Var("s"), Pair(Var("s"), Var("s"))))])
    with pytest.raises(TypeCheckError, match=r"argument 1 of exp: expected R, found R\[N\]"):
        check_module([vdef(Call("exp", (Var("x"),), ()))])
    with pytest.raises(TypeCheckError, match=r"the body of sum i must be R, found R\[N\]"):
        check_module([vdef(sum_("i", "N", Add(Var("x"), Var("y"))))])


def test_is_core():
    assert is_core(qform_def())
    assert not is_core(vdef(Add(Var("x"), Var("y"))))
    assert not is_core(vdef(DefCall("g", (Var("x"),))))
    assert not is_core(vdef(Var("x"), ret=REAL))  # wrong declared type
    assert is_core(elaborate_def(vdef(Add(Var("x"), Var("y")))))


def test_elaborate_expr_in_an_environment():
    env = TypeEnv.of_params(vec_params())
    e, t = elaborate_expr(Mul(Var("s"), Add(Var("x"), Var("y"))), env)
    assert t is R("N")
    assert_alpha(e, gen("i", "N", Mul(Var("s"), Add(acc("x", "i"), acc("y", "i")))))


# ---------------------------------------------------------------------------------------------
# Inlining

def scale_def() -> Def:
    return Def("scale", (size("N"), P("v", R("N")), P("c", REAL)), R("N"),
               Let("t", Mul(Var("c"), Var("c")), gen("i", "N", Mul(Var("t"), acc("v", "i")))))


def test_inline_simple_call():
    user = vdef(DefCall("scale", (Var("N"), Var("x"), Var("s"))))
    got = core_of(user, scale_def())
    want = Let("t", Mul(Var("s"), Var("s")), gen("i", "N", Mul(Var("t"), acc("x", "i"))))
    assert_alpha(got.body, want)
    assert got.ret is R("N")
    same_meaning(got, vdef(want), VEC_ARGS)


def test_inline_binds_expression_arguments_with_let():
    arg = Add(Var("s"), Const(1.0))
    got = core_of(vdef(DefCall("scale", (Var("x"), arg))), scale_def())
    want = Let("c", arg, Let("t", Mul(Var("c"), Var("c")),
                             gen("i", "N", Mul(Var("t"), acc("x", "i")))))
    assert_alpha(got.body, want)
    same_meaning(got, vdef(want), VEC_ARGS)


def test_inline_avoids_capture():
    # the callee binds `t` and `i`; the caller passes arguments mentioning its own t and i
    params = (size("N"), P("x", R("N")), P("t", REAL))
    user = Def("u", params, None,
               gen("i", "N", Sum("j", aff("N"), Mul(
                   acc(DefCall("scale", (Var("x"), Add(Var("t"), Mul(acc("x", "i"),
                                                                      Const(1.0))))), "j"),
                   Const(1.0)))))
    got = core_of(user, scale_def())
    args = {"N": 4, "x": vec(4), "t": 0.3}
    x, t = args["x"], args["t"]
    expected = np.array([((t + x[i]) ** 2) * x.sum() for i in range(4)])
    np.testing.assert_allclose(interpret(got, args), expected, rtol=1e-12)


def test_inline_callee_binder_named_like_a_caller_variable():
    # callee `scale` has a statement t; the caller has a statement t too, used after the call
    user = Def("u", vec_params(), None,
               Let("t", Add(Var("s"), Const(2.0)),
                   Let("r", DefCall("scale", (Var("x"), Var("t"))),
                       gen("k", "N", Add(acc("r", "k"), Mul(Var("t"), acc("y", "k")))))))
    got = core_of(user, scale_def())
    x, y, s = VEC_ARGS["x"], VEC_ARGS["y"], VEC_ARGS["s"]
    np.testing.assert_allclose(interpret(got, VEC_ARGS), (s + 2) ** 2 * x + (s + 2) * y,
                               rtol=1e-12)
    # every binder is distinct after inlining
    names = [n.name for n in walk(got.body) if isinstance(n, Let)]
    assert len(names) == len(set(names))


def test_inline_sizes_substituted_and_omitted():
    params = (size("M"), size("J"), P("a", R("M + J - 1")), P("k", R("J")))
    explicit = Def("u", params, None, DefCall("conv", (Var("M"), Var("J"), Var("a"), Var("k"))))
    omitted = Def("u", params, None, DefCall("conv", (Var("a"), Var("k"))))
    got1, got2 = core_of(explicit, conv_def()), core_of(omitted, conv_def())
    assert got1.body is got2.body or canon(got1.body) is canon(got2.body)
    assert got1.ret is R("M")
    want = gen("i", "M", sum_("q", "J", Mul(acc("k", "q"), acc("a", "i + q"))))
    assert_alpha(got1.body, Let("out", want, Var("out")))
    args = {"M": 4, "J": 3, "a": vec(6), "k": vec(3)}
    same_meaning(got1, Def("u", params, None, want), args)


def test_inline_size_expressions_as_arguments():
    # conv(N, 2, x, w) with x: R[N + 1], w: R[2]
    params = (size("N"), P("x", R("N + 1")), P("w", R("2")))
    got = core_of(Def("u", params, None,
                      DefCall("conv", (Var("N"), Const(2.0), Var("x"), Var("w")))), conv_def())
    assert got.ret is R("N")
    # the size inferred by solving N + K - 1 = N + 1 with K = 2
    got2 = core_of(Def("u", params, None, DefCall("conv", (Var("x"), Var("w")))), conv_def())
    assert canon(got.body) is canon(got2.body)


def test_inline_relation_parameters_are_renamed():
    callee = Def("masked", (size("N"), P("E", TRel((aff("N"), aff("N")))), P("A", R("N", "N"))),
                 REAL, sum_("i", "N", sum_("j", "N", Iverson(RelCall("E", (aff("i"), aff("j"))),
                                                             acc("A", "i", "j")))))
    params = (size("M"), P("F", TRel((aff("M"), aff("M")))), P("B", R("M", "M")))
    got = core_of(Def("u", params, None, DefCall("masked", (Var("F"), Var("B")))), callee)
    assert_alpha(got.body, sum_("i", "M", sum_("j", "M", Iverson(
        RelCall("F", (aff("i"), aff("j"))), acc("B", "i", "j")))))
    mask = RNG.random((3, 3)) < 0.5
    B = RNG.uniform(-1, 1, (3, 3))
    assert interpret(got, {"M": 3, "F": mask, "B": B}) == pytest.approx(B[mask].sum())


def test_inline_of_inline_and_sugar_on_results():
    # deconv_loss: r = conv(N, K, x, w) - b ; sum_i r[i] * r[i]
    params = (size("N"), size("K"), P("x", R("N + K - 1")), P("w", R("K")), P("b", R("N")))
    loss = Def("deconv_loss", params, REAL, Let(
        "r", Add(DefCall("conv", (Var("N"), Var("K"), Var("x"), Var("w"))),
                 Mul(Const(-1.0), Var("b"))),
        sum_("i", "N", Mul(acc("r", "i"), acc("r", "i")))))
    outer = Def("twice", params, None,
                Add(DefCall("deconv_loss", (Var("x"), Var("w"), Var("b"))),
                    DefCall("deconv_loss", (Var("x"), Var("w"), Var("b")))))
    m = check_module([conv_def(), loss, outer])
    assert m.warnings == []
    for d in m.defs.values():
        assert is_core(d)
    args = {"N": 5, "K": 3, "x": vec(7), "w": vec(3), "b": vec(5)}
    r = np.correlate(args["x"], args["w"], mode="valid") - args["b"]
    assert interpret(m.defs["deconv_loss"], args) == pytest.approx(r @ r, rel=1e-12)
    assert interpret(m.defs["twice"], args) == pytest.approx(2 * (r @ r), rel=1e-12)
    # the convolution is computed once, not once per element of r
    conv_loops = [n for n in walk(m.defs["deconv_loss"].body) if isinstance(n, Sum)]
    assert len(conv_loops) == 2


def test_call_errors():
    with pytest.raises(TypeCheckError, match="f calls itself: recursion is not allowed"):
        check_module([vdef(DefCall("f", (Var("x"),)))])
    later = vdef(Var("x"), name="later")
    with pytest.raises(TypeCheckError, match="later is not defined before this point"):
        check_module([vdef(DefCall("later", (Var("x"),))), later])
    with pytest.raises(TypeCheckError, match="unknown function nowhere"):
        check_module([vdef(DefCall("nowhere", (Var("x"),)))])


def test_call_arity_and_argument_types():
    with pytest.raises(TypeCheckError, match=r"scale takes 3 argument\(s\) \(N: size, v: R\[N\], "
                                             r"c: R\), or 2 without the sizes; found 1"):
        check_module([scale_def(), vdef(DefCall("scale", (Var("x"),)))])
    bad = Var("s", loc=L(8, 20))
    with pytest.raises(TypeCheckError, match=r"argument 3 of scale \(parameter c\): expected R, "
                                             r"found R\[N\]"):
        check_module([scale_def(), vdef(DefCall("scale", (Var("N"), Var("x"), Var("y"))))])
    with pytest.raises(TypeCheckError, match=r"argument 2 of scale \(parameter v\): expected "
                                             r"R\[N\], found R"):
        check_module([scale_def(), vdef(DefCall("scale", (bad, Var("s"))))])
    params = (size("N"), size("M"), P("x", R("N")))
    with pytest.raises(TypeCheckError, match=r"argument 2 of scale \(parameter v\): expected "
                                             r"R\[M\], found R\[N\]"):
        check_module([scale_def(), Def("u", params, None,
                                 DefCall("scale", (Var("M"), Var("x"), Const(1.0))))])
    with pytest.raises(TypeCheckError, match=r"argument 1 of scale \(parameter N: size\): s must "
                                             "be affine in size variables"):
        check_module([scale_def(), vdef(DefCall("scale", (Var("s"), Var("x"), Const(1.0))))])


def test_sizes_that_cannot_be_inferred():
    f = Def("first", (size("N"), size("K"), P("x", R("N + K"))), None, acc("x", "0"))
    user = vdef(DefCall("first", (Var("x"),)))
    with pytest.raises(TypeCheckError, match="cannot infer the size N of first from its "
                                             "arguments; pass the sizes explicitly"):
        check_module([f, user])
    # given explicitly it is fine (N + K = N with K = 0)
    got = core_of(vdef(DefCall("first", (Var("N"), Const(0.0), Var("x")))), f)
    assert interpret(got, VEC_ARGS) == pytest.approx(VEC_ARGS["x"][0])


def test_elaboration_keeps_core_programs_unchanged():
    from tensorlang.testing import draw_examples, programs
    for d, args in draw_examples(programs(max_depth=3), 10):
        assert elaborate_def(d).body is d.body
        assert check_def(d).core.body is d.body


# ---------------------------------------------------------------------------------------------
# Property: sugar means its naive expansion, on random operands

from hypothesis import given, strategies as st  # noqa: E402

from tensorlang.ir.ast import shape_of, tensor  # noqa: E402
from tensorlang.testing import expressions, random_args, scopes, types  # noqa: E402


@given(st.data())
def test_sugar_means_its_naive_expansion(data):
    sc = data.draw(scopes(max_size=3, max_params=2))
    t = data.draw(types(sc, rank=2, pairs=0))
    if not shape_of(t):
        t = tensor([Affine.lit(3)])
    a = data.draw(expressions(sc, t, max_depth=2))
    b = data.draw(expressions(sc, t, max_depth=2))
    s = data.draw(expressions(sc, REAL, max_depth=2))
    kind = data.draw(st.sampled_from(["add", "mul", "scale_left", "scale_right"]))
    qs = tuple(Affine.var(f"q{k}") for k in range(len(shape_of(t))))
    at, bt = Access(a, qs), Access(b, qs)
    sugar, elem = {
        "add": (Add(a, b), Add(at, bt)),
        "mul": (Mul(a, b), Mul(at, bt)),
        "scale_left": (Mul(s, a), Mul(s, at)),
        "scale_right": (Mul(a, s), Mul(at, s)),
    }[kind]
    naive = elem
    for q, n in reversed(list(zip(qs, shape_of(t)))):
        naive = Gen(q.as_var(), n, naive)
    got = core_of(Def("f", sc.params, None, sugar))
    want = Def("f", sc.params, None, naive)
    args = random_args(want, sc.sizes, data.draw(st.integers(0, 2 ** 16)))
    np.testing.assert_allclose(interpret(got, args), interpret(want, args), rtol=1e-9,
                               atol=1e-12, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# From .tl text: elaborated programs against hand-written core programs


def text_module(text: str):
    parser = pytest.importorskip("tensorlang.syntax.parser")
    return check_module(parser.parse_module(text, "e.tl"), "e.tl")


def test_text_sugar_matches_hand_expanded_core():
    m = text_module("def f(N: size, M: size, A: R[N, M], B: R[N, M], s: R) -> R[N, M]:\n"
                    "    return s * A - B / 2.0 + A * B\n\n"
                    "def g(N: size, M: size, A: R[N, M], B: R[N, M], s: R) -> R[N, M]:\n"
                    "    h = recip(2.0)\n"
                    "    return gen i:N, j:M. s * A[i, j] - B[i, j] * h + A[i, j] * B[i, j]\n")
    f, g = m.defs["f"], m.defs["g"]
    # `/ 2.0` is `* recip(2.0)`: a call, so it is computed once outside the gen
    assert_alpha(f.body, g.body)
    args = {"N": 2, "M": 3, "A": RNG.uniform(-1, 1, (2, 3)), "B": RNG.uniform(-1, 1, (2, 3)),
            "s": 0.5}
    same_meaning(f, g, args)


def test_text_inlining_with_capture():
    m = text_module(
        "def scale(N: size, v: R[N], c: R) -> R[N]:\n"
        "    t = c * c\n"
        "    out[i:N] = t * v[i]\n"
        "    return out\n\n"
        "def user(N: size, x: R[N], t: R) -> R[N]:\n"
        "    out[i:N] = sum j:N. scale(x, t + x[i])[j]\n"
        "    return out\n\n"
        "def by_hand(N: size, x: R[N], t: R) -> R[N]:\n"
        "    out[i:N] = sum j:N. (t + x[i]) * (t + x[i]) * x[j]\n"
        "    return out\n")
    args = {"N": 4, "x": vec(4), "t": 0.25}
    same_meaning(m.defs["user"], m.defs["by_hand"], args)
    assert not any(isinstance(n, DefCall) for n in walk(m.defs["user"].body))


def test_text_conv_example_with_and_without_sizes():
    m = text_module(
        "def conv(N: size, K: size, x: R[N + K - 1], w: R[K]) -> R[N]:\n"
        "    out[i:N] = sum k:K. w[k] * x[i + k]\n"
        "    return out\n\n"
        "def loss(N: size, K: size, x: R[N + K - 1], w: R[K], b: R[N]) -> R:\n"
        "    r = conv(N, K, x, w) - b\n"
        "    return sum i:N. r[i] * r[i]\n\n"
        "def loss2(N: size, K: size, x: R[N + K - 1], w: R[K], b: R[N]) -> R:\n"
        "    r = conv(x, w) - b\n"
        "    return sum i:N. r[i] * r[i]\n")
    assert m.warnings == []
    args = {"N": 6, "K": 3, "x": vec(8), "w": vec(3), "b": vec(6)}
    r = np.correlate(args["x"], args["w"], mode="valid") - args["b"]
    assert interpret(m.defs["loss"], args) == pytest.approx(r @ r, rel=1e-12)
    assert canon(m.defs["loss"].body) is canon(m.defs["loss2"].body)


def test_text_call_errors_with_locations():
    parser = pytest.importorskip("tensorlang.syntax.parser")
    text = ("def f(N: size, x: R[N]) -> R[N]:\n    return x\n\n"
            "def g(M: size, y: R[M], s: R) -> R[M]:\n    return f(M, s)\n")
    with pytest.raises(TypeCheckError) as info:
        check_module(parser.parse_module(text, "e.tl"), "e.tl")
    assert info.value.message == ("argument 2 of f (parameter x): expected R[M], found R")
    assert info.value.loc.line == 5
    text = "def f(x: R) -> R:\n    return g(x)\n\ndef g(x: R) -> R:\n    return x\n"
    with pytest.raises(TypeCheckError, match="g is not defined before this point") as info:
        check_module(parser.parse_module(text, "e.tl"), "e.tl")
    assert info.value.loc.line == 2


def test_sizes_and_indices_are_values():
    # SPEC 12: a size or index where a real is expected is an index value (a tensor times a
    # size is scaled by it); an affine expression of them is one value (index arithmetic is
    # free); anything else is real arithmetic on index values
    got = core_of(vdef(Mul(Var("N"), Var("x"))))
    assert_alpha(got.body, gen("i", "N", Mul(IndexValue(Affine.var("N")), acc("x", "i"))))
    i = Affine.var("i")
    two_i_plus_1 = Add(Mul(Const(2.0), Var("i")), Const(1.0))
    got = core_of(vdef(gen("i", "N", Mul(two_i_plus_1, acc("x", "i")))))
    assert_alpha(got.body, gen("i", "N", Mul(IndexValue(i * 2 + 1), acc("x", "i"))))
    got = core_of(vdef(gen("i", "N", Mul(Var("i"), Var("i")))))
    assert_alpha(got.body, gen("i", "N", Mul(IndexValue(i), IndexValue(i))))
    with pytest.raises(TypeCheckError, match="undefined variable nope"):
        check_module([vdef(Var("nope"))])
    params = vec_params() + (P("E", TRel((Affine.var("N"),))),)
    with pytest.raises(TypeCheckError, match="E is a relation, not a value"):
        check_module([vdef(Mul(Var("E"), Var("s")), params=params)])
