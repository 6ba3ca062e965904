"""The .tl parser (SPEC 2.3-2.5, docs/architecture.md "Sugar lowering done by the parser")."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from examples_util import EXAMPLE_FILES
from tensorlang.ir.ast import (
    BUILTINS, DERIVED_KINDS, Access, Add, Affine, And, Call, Cmp, Const, Def, DefCall,
    DerivedDef, Exists, Gen, Iverson, Let, Mul, Or, Pair, Param, PFalse, Proj, PTrue, RelCall,
    Sum, TArr, TPair, TReal, TRel, TSize, Var, tensor,
)
from tensorlang.syntax.errors import ParseError, TLError
from tensorlang.syntax.parser import (
    AFFINE_MSG, KEYWORDS, parse_affine, parse_expr, parse_module, parse_pred, parse_type,
)

a, b, c, d, x = (Var(n) for n in "abcdx")
i, j, k, N, M = (Affine.var(n) for n in ("i", "j", "k", "N", "M"))
ONE, NEG = Const(1.0), Const(-1.0)
P = Cmp("<", i, j)


def neg(e):
    return Mul(NEG, e)


def lit(n):
    return Affine.lit(n)


def parse_error(fn, text, filename="<input>"):
    with pytest.raises(ParseError) as info:
        fn(text, filename)
    return info.value


# ---------------------------------------------------------------------------------------------
# Atoms, literals and lexing


@pytest.mark.parametrize("text, value", [
    ("0", 0.0), ("42", 42.0), ("2.5", 2.5), ("1e3", 1000.0), ("1.5e-3", 0.0015),
    ("2E+2", 200.0), ("0.01", 0.01), ("-3", -3.0), ("-(2)", -2.0), ("- -2", 2.0),
    ("-1.0", -1.0), ("(((7)))", 7.0)])
def test_numeric_literals_become_float_consts(text, value):
    assert parse_expr(text) is Const(value)


def test_huge_literals():
    assert parse_expr("1e999") is Const(math.inf)
    assert parse_expr("9" * 400).value == math.inf
    assert parse_affine("1" * 30) is Affine.lit(int("1" * 30))
    assert "too large" in parse_error(parse_affine, "1" * 5000).message


def test_names_and_projections_lex_correctly():
    assert parse_expr("x") is x
    assert parse_expr("x_1") is Var("x_1")
    assert parse_expr("_t2") is Var("_t2")
    assert parse_expr("x.0.1") is Proj(Proj(x, 0), 1)
    assert parse_expr("x.1") is Proj(x, 1)
    assert parse_expr("(a, b).0") is Proj(Pair(a, b), 0)
    assert parse_expr("2.0.0") is Proj(Const(2.0), 0)


def test_binder_size_dot_is_not_a_float():
    assert parse_expr("gen i:2. x") is Gen("i", lit(2), x)
    assert parse_expr("gen i:2.x") is Gen("i", lit(2), x)
    assert parse_expr("sum i:N + 1. 2.5") is Sum("i", N + 1, Const(2.5))
    assert parse_expr("gen i:3. 0.5") is Gen("i", lit(3), Const(0.5))


def test_projection_index_must_be_0_or_1():
    err = parse_error(parse_expr, "x.2")
    assert ".0 or .1" in err.message and (err.loc.line, err.loc.col) == (1, 2)


def test_newlines_allowed_in_parse_expr_and_comments_ignored():
    assert parse_expr("a +\n  b  # comment\n") is Add(a, b)


# ---------------------------------------------------------------------------------------------
# Precedence and associativity


@pytest.mark.parametrize("text, expected", [
    ("a + b * c", Add(a, Mul(b, c))),
    ("a * b + c", Add(Mul(a, b), c)),
    ("a + b + c", Add(Add(a, b), c)),
    ("a * b * c", Mul(Mul(a, b), c)),
    ("a * (b * c)", Mul(a, Mul(b, c))),
    ("a + (b + c)", Add(a, Add(b, c))),
    ("a - b - c", Add(Add(a, neg(b)), neg(c))),
    ("a - (b - c)", Add(a, neg(Add(b, neg(c))))),
    ("-a * b", Mul(neg(a), b)),
    ("a * -b", Mul(a, neg(b))),
    ("-a ** 2", neg(Call("pow", (a,), (2.0,)))),
    ("(-a) ** 2", Call("pow", (neg(a),), (2.0,))),
    ("x[i] ** 2", Call("pow", (Access(x, (i,)),), (2.0,))),
    ("x[i].0", Proj(Access(x, (i,)), 0)),
    ("x.0[i]", Access(Proj(x, 0), (i,))),
    ("x[i][j]", Access(Access(x, (i,)), (j,))),
    ("x[i, j]", Access(x, (i, j))),
    ("exp(a)[i]", Access(Call("exp", (a,), ()), (i,))),
    ("(a, b, c)", Pair(a, Pair(b, c))),
    ("((a, b), c)", Pair(Pair(a, b), c)),
    ("(a)", a),
])
def test_precedence(text, expected):
    assert parse_expr(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("i < j or i < k and j < k", Or(P, And(Cmp("<", i, k), Cmp("<", j, k)))),
    ("(i < j or i < k) and j < k", And(Or(P, Cmp("<", i, k)), Cmp("<", j, k))),
    ("i < j and j < k and i < k", And(And(P, Cmp("<", j, k)), Cmp("<", i, k))),
    ("i + 1 <= 2*j - N", Cmp("<=", i + 1, j * 2 - N)),
    ("true", PTrue()), ("false", PFalse()), ("(true)", PTrue()),
])
def test_predicate_precedence(text, expected):
    assert parse_pred(text) is expected


def test_chained_comparisons_are_rejected():
    with pytest.raises(ParseError):
        parse_pred("i < j < k")


# ---------------------------------------------------------------------------------------------
# Sugar lowering (docs/architecture.md)


def test_subtraction_negation_division_power():
    assert parse_expr("a - b") is Add(a, Mul(Const(-1.0), b))
    assert parse_expr("-a") is Mul(Const(-1.0), a)
    assert parse_expr("-2") is Const(-2.0)
    assert parse_expr("a / b") is Mul(a, Call("recip", (b,), ()))
    assert parse_expr("a * b / c") is Mul(Mul(a, b), Call("recip", (c,), ()))
    assert parse_expr("a ** 3") is Call("pow", (a,), (3.0,))
    assert parse_expr("a ** -1.5") is Call("pow", (a,), (-1.5,))
    assert parse_expr("a ** (2)") is Call("pow", (a,), (2.0,))
    assert parse_expr("pow(a, 2)") is Call("pow", (a,), (2.0,))
    assert parse_expr("pow(a, -0.5)") is Call("pow", (a,), (-0.5,))


def test_a_real_exponent_is_exp_of_log():
    """SPEC 12: `x ** y` with a non-constant exponent is `exp(y * log(x))` (x > 0)."""
    b = Var("b")
    power = Call("exp", (Mul(b, Call("log", (a,), ())),), ())
    assert parse_expr("a ** b") is power
    assert parse_expr("pow(a, b)") is power
    two = Add(Const(1.0), Const(1.0))
    assert parse_expr("a ** (1 + 1)") is Call("exp", (Mul(two, Call("log", (a,), ())),), ())
    # `**` is right-associative: a ** (2 ** 3), and 2 ** 3 is the constant power pow(2, 3)
    assert parse_expr("a ** 2 ** 3") is Call(
        "exp", (Mul(Call("pow", (Const(2.0),), (3.0,)), Call("log", (a,), ())),), ())


def test_bare_bracket_is_times_one():
    assert parse_expr("[i < j]") is Iverson(P, ONE)
    assert parse_expr("[i < j] + a") is Add(Iverson(P, ONE), a)


@pytest.mark.parametrize("text, expected", [
    ("[i < j] * a", Iverson(P, a)),
    ("[i < j] * a * b", Iverson(P, Mul(a, b))),
    ("a * [i < j] * b", Mul(a, Iverson(P, b))),
    ("a * [i < j] * b * c", Mul(a, Iverson(P, Mul(b, c)))),
    ("a * b * [i < j] * c", Mul(Mul(a, b), Iverson(P, c))),
    ("a * [i < j]", Mul(a, Iverson(P, ONE))),
    ("[i < j] * [j < k]", Iverson(P, Iverson(Cmp("<", j, k), ONE))),
    ("[i < j] * a * [j < k] * b", Iverson(P, Mul(a, Iverson(Cmp("<", j, k), b)))),
    ("([i < j] * a) * b", Mul(Iverson(P, a), b)),
    ("([i < j]) * b", Mul(Iverson(P, ONE), b)),
    ("[i < j] * a + b", Add(Iverson(P, a), b)),
    ("b + [i < j] * a", Add(b, Iverson(P, a))),
    ("-[i < j] * a", Mul(neg(Iverson(P, ONE)), a)),
    ("[i < j] * (a + b)", Iverson(P, Add(a, b))),
    ("[i < j] * sum k:N. a * b", Iverson(P, Sum("k", N, Mul(a, b)))),
    ("a / [i < j]", Mul(a, Call("recip", (Iverson(P, ONE),), ()))),
    ("[i < j] / a * b", Iverson(P, Mul(Call("recip", (a,), ()), b))),
    ("[i < j] ** 2", Call("pow", (Iverson(P, ONE),), (2.0,))),
])
def test_bracket_guards_everything_to_its_right(text, expected):
    assert parse_expr(text) is expected


def test_comparison_sugar():
    assert parse_pred("i > j") is Cmp("<", j, i)
    assert parse_pred("i >= j") is Cmp("<=", j, i)
    assert parse_pred("i == j") is Cmp("==", i, j)
    assert parse_pred("i != j") is Or(Cmp("<", i, j), Cmp("<", j, i))


def test_multi_binders_nest():
    body = Access(x, (i, j))
    assert parse_expr("gen i:N, j:M. x[i, j]") is Gen("i", N, Gen("j", M, body))
    assert parse_expr("sum i:N, j:M. x[i, j]") is Sum("i", N, Sum("j", M, body))
    assert parse_pred("exists i:N, j:M. i == 2*j") is Exists("i", N, Exists(
        "j", M, Cmp("==", i, j * 2)))


def test_binders_extend_as_far_right_as_possible():
    s = Sum("i", N, Add(a, b))
    assert parse_expr("sum i:N. a + b") is s
    assert parse_expr("(sum i:N. a) + b") is Add(Sum("i", N, a), b)
    assert parse_expr("c * sum i:N. a + b") is Mul(c, s)
    assert parse_expr("c - sum i:N. a + b") is Add(c, neg(s))
    assert parse_expr("gen i:N. sum j:M. a * b") is Gen("i", N, Sum("j", M, Mul(a, b)))
    assert parse_expr("let y = a + b in y * c") is Let("y", Add(a, b), Mul(Var("y"), c))
    assert parse_expr("a + let y = b in y + c") is Add(a, Let("y", b, Add(Var("y"), c)))
    assert parse_expr("let y = sum i:N. a in y") is Let("y", Sum("i", N, a), Var("y"))
    assert parse_pred("i < j and exists t:N. i == 2*t or j < k") is And(
        P, Exists("t", N, Or(Cmp("==", i, Affine.var("t") * 2), Cmp("<", j, k))))


# ---------------------------------------------------------------------------------------------
# Calls, relations, affine positions


def test_builtin_calls_and_def_calls():
    assert parse_expr("exp(a)") is Call("exp", (a,), ())
    assert parse_expr("max(a, b)") is Call("max", (a, b), ())
    assert parse_expr("conv(N, x)") is DefCall("conv", (Var("N"), x))
    assert parse_expr("g()") is DefCall("g", ())
    for fn, (n_args, n_params) in BUILTINS.items():
        args = ", ".join(["a"] * n_args + ["2"] * n_params)
        assert parse_expr(f"{fn}({args})") is Call(fn, (a,) * n_args, (2.0,) * n_params)


@pytest.mark.parametrize("text, message", [
    ("exp(a, b)", "exp() takes 1 argument, got 2"),
    ("max(a)", "max() takes 2 arguments, got 1"),
    ("pow(a)", "pow() takes 2 arguments, got 1"),
    ("sqrt()", "sqrt() takes 1 argument, got 0"),
])
def test_builtin_arity(text, message):
    assert parse_error(parse_expr, text).message == message


def test_relation_calls_take_affine_arguments():
    assert parse_pred("E(i, j + 1)") is RelCall("E", (i, j + 1))
    assert parse_pred("E()") is RelCall("E", ())
    assert parse_expr("[E(2*i, j) and i != j]") is Iverson(
        And(RelCall("E", (i * 2, j)), Or(Cmp("<", i, j), Cmp("<", j, i))), ONE)


@pytest.mark.parametrize("text, expected", [
    ("i", Affine.var("i")), ("3", lit(3)), ("-i", -i), ("i + 2*j - 1", i + j * 2 - 1),
    ("2 * (i - 1)", i * 2 - 2), ("(i - 1) * 2", i * 2 - 2), ("-(i + j)", -(i + j)),
    ("i - i", lit(0)), ("2 * 3 * i", i * 6), ("(1 + 1) * i", i * 2), ("((i))", i)])
def test_affine(text, expected):
    assert parse_affine(text) is expected


@pytest.mark.parametrize("text, col", [
    ("x[i * j]", 3), ("x[1.5]", 3), ("x[f(i)]", 3), ("x[i / 2]", 3), ("x[y[i].0]", 3),
    ("x[(y[i])[j]]", 3),
    ("x[i, 2 * (j * k)]", 11), ("gen i:N * M. a", 7), ("[E(i * j)]", 4), ("[a < b.0]", 6),
    ("[exists t:N * N. true]", 11), ("x[[i < j]]", 3), ("x[(i, j)]", 3)])
def test_non_affine_is_a_located_error(text, col):
    err = parse_error(parse_expr, text)
    assert err.message.startswith(AFFINE_MSG)
    assert (err.loc.line, err.loc.col) == (1, col)


@pytest.mark.parametrize("text, message", [
    ("a < b", "a predicate is not a value"), ("true", "a predicate is not a value"),
    ("exists t:N. t < 1", "a predicate is not a value"),
    ("a and b", "a predicate is not a value"),
    ("[a]", "expected a predicate"), ("[1.0]", "expected a predicate"),
    ("[[i < j]]", "expected a predicate"), ("[(i < j, j < k)]", "expected a predicate"),
    ("[gen i:N. i < j]", "expected a predicate")])
def test_mode_errors(text, message):
    assert message in parse_error(parse_expr, text).message


# ---------------------------------------------------------------------------------------------
# Types


@pytest.mark.parametrize("text, expected", [
    ("R", TReal()), ("R[N]", tensor([N])), ("R[N, M]", TArr(N, TArr(M, TReal()))),
    ("R[N + K - 1]", tensor([N + Affine.var("K") - 1])), ("R[2*N, 3]", tensor([N * 2, 3])),
    ("(R, R[N])", TPair(TReal(), tensor([N]))),
    ("(R, R, R)", TPair(TReal(), TPair(TReal(), TReal()))),
    ("((R, R), R)", TPair(TPair(TReal(), TReal()), TReal())), ("(R)", TReal()),
    ("[N] (R, R)", TArr(N, TPair(TReal(), TReal()))),
    ("[N, M] R[3]", tensor([N, M, 3])), ("size", TSize()),
    ("rel(N, N)", TRel((N, N))), ("rel()", TRel(())), ("rel(N + 1)", TRel((N + 1,)))])
def test_types(text, expected):
    assert parse_type(text) is expected


def test_type_errors():
    err = parse_error(parse_type, "R[N * M]")
    assert err.message.startswith(AFFINE_MSG) and err.loc.col == 3
    assert "expected a type" in parse_error(parse_type, "Q").message
    assert "'Rx'" in parse_error(parse_type, "Rx").message


# ---------------------------------------------------------------------------------------------
# Definitions


QFORM = """\
# Quadratic form
def qform(N: size, x: R[N], A: R[N, N]) -> R:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]

def g = grad(qform, x)
"""


def test_qform_module():
    f, g = parse_module(QFORM, "qform.tl")
    A, y = Var("A"), Var("y")
    body = Let("y", Gen("i", N, Sum("j", N, Mul(Access(A, (i, j)), Access(x, (j,))))),
               Sum("i", N, Mul(Access(x, (i,)), Access(y, (i,)))))
    assert f is Def("qform", (Param("N", TSize()), Param("x", tensor([N])),
                              Param("A", tensor([N, N]))), TReal(), body)
    assert g is DerivedDef("g", "grad", "qform", ("x",))


def test_statements_become_nested_lets():
    text = ("def f(N: size, x: R[N]):\n    s = sum i:N. x[i]\n    out[i:N, j:N] = s\n"
            "    t = out\n    return t\n")
    (f,) = parse_module(text)
    s, out, t = Var("s"), Var("out"), Var("t")
    assert f.ret is None
    assert f.body is Let("s", Sum("i", N, Access(x, (i,))),
                         Let("out", Gen("i", N, Gen("j", N, s)), Let("t", out, t)))


def test_tensor_statement_is_let_gen():
    (f,) = parse_module("def f(N: size) -> R[N]:\n    out[i:N] = 1\n    return out\n")
    (g,) = parse_module("def f(N: size) -> R[N]:\n    out = gen i:N. 1\n    return out\n")
    assert f is g


def test_one_line_bodies_and_layout():
    (f,) = parse_module("def sq(x: R) -> R: return x * x")
    assert f is Def("sq", (Param("x", TReal()),), TReal(), Mul(x, x))
    (h,) = parse_module("def h(): return 1.0\n")
    assert h.params == () and h.ret is None and h.body is ONE
    crlf = "def sq(x: R) -> R:\r\n    y = x\r\n    return y * x\r\n"
    tabs = "def sq(x: R) -> R:\n\ty = x\n\treturn y * x"
    comments = ("# head\n\ndef sq(x: R) -> R:  # trailing\n    # inside\n\n    y = x  # c\n"
                "        # deeper comment line\n    return y * x\n# tail")
    multiline = "def sq(x: R) -> R:\n    y = (\n  x\n)\n    return (y *\n        x)\n"
    forms = [parse_module(t)[0] for t in (crlf, tabs, comments, multiline)]
    assert all(f2 is forms[0] for f2 in forms)
    assert forms[0].body is Let("y", x, Mul(Var("y"), x))


def test_empty_modules():
    assert parse_module("") == []
    assert parse_module("# nothing\n\n   \n") == []


@pytest.mark.parametrize("kind", DERIVED_KINDS)
def test_derived_defs(kind):
    (dd,) = parse_module(f"def g = {kind}(f, x, y)")
    assert dd is DerivedDef("g", kind, "f", ("x", "y"))
    assert parse_module(f"def g = {kind}(f)")[0] is DerivedDef("g", kind, "f", ())


def test_unknown_derived_kind():
    err = parse_error(parse_module, "def g = gradient(f, x)")
    assert "unknown derived function 'gradient'" in err.message
    assert (err.loc.line, err.loc.col) == (1, 9)


def test_param_and_return_types():
    (f,) = parse_module("def f(N: size, K: size, x: R[N + K - 1], E: rel(N, N), "
                        "p: (R, R[N])) -> R[N]: return x")
    K = Affine.var("K")
    assert [p.type for p in f.params] == [TSize(), TSize(), tensor([N + K - 1]),
                                          TRel((N, N)), TPair(TReal(), tensor([N]))]
    assert f.ret is tensor([N])


@pytest.mark.parametrize("word", sorted(KEYWORDS))
def test_keywords_are_reserved(word):
    for text in (f"def f({word}: R) -> R: return 1", f"def {word}(x: R): return x",
                 f"def f(x: R):\n    {word} = x\n    return x\n",
                 f"def f(x: R): return let {word} = x in x"):
        with pytest.raises(ParseError):
            parse_module(text)


def test_keyword_use_as_name_message():
    err = parse_error(parse_expr, "let in = 1 in 2")
    assert "'in' is a keyword" in err.message and err.loc.col == 5


def test_keyword_glued_to_a_word():
    for text, col in (("x andy", 3), ("[i < j andy]", 8), ("let y = 1 in2", 11)):
        err = parse_error(parse_expr, text)
        assert err.message.startswith("unexpected name") and err.loc.col == col


def test_R_is_only_special_in_types():
    (f,) = parse_module("def f(R: R[N]) -> R: return R[0]")
    assert f.params[0] is Param("R", tensor([N])) and f.body is Access(Var("R"), (lit(0),))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_parse(path):
    text = path.read_text()
    defs = parse_module(text, str(path))
    names = [line.split()[1].split("(")[0] for line in text.splitlines()
             if line.startswith("def ")]
    assert [d.name for d in defs] == names


# ---------------------------------------------------------------------------------------------
# Locations and error messages


def test_nodes_carry_locations():
    text = "def locfn(q1: R) -> R:\n    zz1 = q1 + 2\n    return zz1 * q1\n"
    (f,) = parse_module(text, "loc.tl")
    assert (f.loc.source.name, f.loc.line, f.loc.col) == ("loc.tl", 1, 1)
    let = f.body
    assert (let.loc.line, let.loc.col) == (2, 5)
    assert (let.value.loc.line, let.value.loc.col, let.value.loc.end_col) == (2, 11, 17)
    assert (let.body.loc.line, let.body.loc.col) == (3, 12)
    assert (f.params[0].loc.line, f.params[0].loc.col) == (1, 11)


@pytest.mark.parametrize("text, line, col, message", [
    ("def f(x: R) -> R: return f(x, )", 1, 31, "unexpected ')', expected an expression"),
    ("def f(x: R) -> R:\n    y = x +\n    return y\n", 2, 12,
     "unexpected end of line, expected an expression"),
    ("def f(x: R) -> R:\n    y = x\n  return y\n", 3, 3,
     "unindent does not match any outer indentation level"),
    ("def f(x: R) -> R:\n    y = x\n", 2, 10, "a def body must end with a 'return' statement"),
    ("def f(x: R) -> R:\n", 1, 18, "unexpected end of input, expected an indented block"),
    ("def f(x: R) -> R:\n    return x\n        y = 2\n", 3, 9, "unexpected indentation"),
    ("def f(x: R) -> R: return x\nx = 3\n", 2, 1, "unexpected name 'x', expected 'def'"),
    ("def f(x: Q) -> R: return x", 1, 10, "unexpected name 'Q', expected a type"),
    ("def f(x: R) -> R: return a @ b", 1, 28, "unexpected character '@'"),
    ("def f(x: R) -> R:\n    return sum i:N x\n", 2, 20, "unexpected name 'x'"),
    ("def f(x: R) -> R: return ((x)", 1, 30, "unexpected end of input, expected ')'"),
    ("def f(x: R) -> R: return x)", 1, 27, "unexpected ')'"),
    ("def f(x: R) -> R: return é", 1, 26, "unexpected character 'é'"),
    ("def def(x: R) -> R: return x", 1, 5, "'def' is a keyword"),
])
def test_error_locations_and_messages(text, line, col, message):
    err = parse_error(parse_module, text, "bad.tl")
    assert message in err.message
    assert (err.loc.line, err.loc.col) == (line, col)
    shown = str(err)
    assert shown.startswith(f"bad.tl:{line}:{col}: parse error: ")
    source_line = text.splitlines()[line - 1]
    assert f"\n    {source_line}\n    {' ' * (col - 1)}^" in shown


def test_errors_never_leak_lark_exceptions():
    for text in ("(", ")", "]", "def", "def f(", "\t\tdef", "x:", "@", "\x00", "def f(x: R) ->"):
        for fn in (parse_module, parse_expr, parse_type):
            with pytest.raises(ParseError):
                fn(text)


# ---------------------------------------------------------------------------------------------
# Robustness: any text gives a result or a TLError, never anything else


def _total(text: str) -> None:
    for fn in (parse_module, parse_expr, parse_type, parse_pred, parse_affine):
        try:
            fn(text)
        except TLError as err:
            assert isinstance(err, ParseError)
            assert err.loc is not None
            str(err)


@given(st.text(max_size=120))
def test_random_text_only_raises_parse_errors(text):
    _total(text)


_ALPHABET = st.sampled_from(list("()[]{},.:=+-*/<>!#\n\t 0123456789ijNx_R") + [
    "def ", "return ", "gen ", "sum ", "let ", " in ", " and ", " or ", "exists ", "**",
    "size", "rel", "true", "false", "    ", "\n    ", "->", "é", "\r\n"])
_EXAMPLE_TEXTS = [p.read_text() for p in EXAMPLE_FILES]


@st.composite
def _mutated_programs(draw):
    text = draw(st.sampled_from(_EXAMPLE_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        lo = draw(st.integers(0, n))
        hi = draw(st.integers(lo, min(n, lo + 8)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if op == "delete":
            text = text[:lo] + text[hi:]
        elif op == "insert":
            text = text[:lo] + draw(_ALPHABET) + text[lo:]
        elif op == "replace":
            text = text[:lo] + draw(_ALPHABET) + text[hi:]
        else:
            text = text[:hi] + text[lo:hi] + text[hi:]
    return text


@given(_mutated_programs())
def test_mutated_programs_only_raise_parse_errors(text):
    _total(text)


@pytest.mark.parametrize("text", [
    "(" * 500 + "x" + ")" * 500, "-(" * 500 + "x" + ")" * 500, "-" * 2000 + "x",
    "[(" * 300 + "i < j" + ")]" * 300, "x" + "[i" * 400 + "]" * 400, "sum i:N. " * 600 + "x",
    "(" * 5000, "exp(" * 500 + "x" + ")" * 500, "let a = 1 in " * 500 + "a",
    "[" * 1000 + "i < j" + "]" * 1000, "(" * 300 + "a, " * 300 + "b" + ")" * 300])
def test_deep_nesting_is_a_parse_error_or_a_result(text):
    _total(text)
    _total(f"def f(x: R) -> R:\n    return {text}\n")


def test_long_flat_chains_parse():
    e = parse_expr(" + ".join(["x"] * 3000))
    assert isinstance(e, Add) and e.b is x
    e = parse_expr(" - ".join(["x"] * 3000) + " * " + " * ".join(["x"] * 3000))
    assert isinstance(e, Add)
