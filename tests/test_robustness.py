"""Robustness (issue 13): bad input of every kind ends in a result or a `TLError`, never in
another exception; and one test per "inputs and resources" / "newcomer" item.

The fuzz tests feed the front end random bytes, token soup, mutated examples and deep and
long programs; whatever parses is then shown at every stage up to Tensor SSA, costed and
interpreted on random inputs.  `exercise` lets only `TLError` through.
"""
from __future__ import annotations

import io
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang import api, cli, testing
from tensorlang.ir import ast
from tensorlang.repl import Repl
from tensorlang.semantics import memory
from tensorlang.syntax.errors import ResourceError, TLError

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tl"))
EXAMPLE_TEXT = {p.name: p.read_text() for p in EXAMPLES}
FUZZ_STAGES = ("parsed", "letlift", "pairelim", "genpush", "ssa", "derive")  # not egglog


def run_main(capsys, *argv: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# ---------------------------------------------------------------------------------------------
# The fuzz harness


def exercise(text: str, filename: str = "fuzz.tl", rng_seed: int = 0) -> str:
    """Parse, check, show, cost and interpret every function of `text` on small random
    inputs.  Returns "ok" or the first error's kind; anything but a `TLError` propagates."""
    try:
        module = tl.parse(text, filename)
    except TLError as err:
        _check_message(err)
        return err.kind
    rng = np.random.default_rng(rng_seed)
    for fn in module.functions:
        try:
            sizes = {p.name: 2 for p in fn.params if isinstance(p.type, ast.TSize)}
            for stage in FUZZ_STAGES:
                fn.show(stage)
            args = testing.random_args(fn.core(), sizes, rng)
            fn.cost({k: v for k, v in args.items()
                     if not isinstance(v, (float, tuple)) and np.ndim(v) == 0
                     or any(p.name == k and isinstance(p.type, ast.TRel) for p in fn.params)},
                    stage="ssa")
            with warnings.catch_warnings():
                warnings.simplefilter("error")   # numpy warnings are bugs here too
                fn.interpret(**args)
        except TLError as err:
            _check_message(err)
    return "ok"


def _check_message(err: TLError) -> None:
    text = str(err)
    assert text and "Traceback" not in text
    assert "\x1b" not in text  # never echo terminal escapes


_TOKENS = [
    "def", "f", "g", "x", "y", "N", "M", "i", "j", "k", "A", "R", "size", "rel", "gen", "sum",
    "let", "in", "return", "exists", "and", "or", "not", "grad", "jvp", "vjp", "hessian",
    "exp", "log", "sqrt", "max", "min", "if", "then", "else", "(", ")", "[", "]", ",", ":",
    ".", ".0", ".1", "=", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "**", "->",
    "0", "1", "2", "0.5", "1e308", "1e999", "-1", "99999999999999999999", "\n", "\n    ",
    "\n        ", "\t", " ", "#", "é", "\x1b[31m", "\\", "'", '"', "@", ";", "{", "}",
]



@given(st.binary(max_size=300))
def test_fuzz_random_bytes(tmp_path_factory, data):
    text = data.decode("utf-8", errors="replace")
    exercise(text)
    # and through the CLI, from a file (invalid UTF-8 included): exit 0 or 1, no internal error
    path = tmp_path_factory.mktemp("fuzz") / "f.tl"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    with _redirect(out, err):
        code = cli.main(["check", str(path)])
    assert code in (0, 1) and "internal error" not in err.getvalue()


@given(st.lists(st.sampled_from(_TOKENS), max_size=60))
def test_fuzz_token_soup(tokens):
    exercise(" ".join(tokens))
    exercise("def f(N: size, x: R[N], A: R[N, N]) -> R:\n    return " + " ".join(tokens))


def _mutate(text: str, ops: list[tuple[int, int, int]]) -> str:
    """Apply (kind, position, length) edits: delete, duplicate, swap with a token, insert."""
    for kind, pos, length in ops:
        if not text:
            break
        pos %= len(text)
        end = min(len(text), pos + length)
        if kind == 0:
            text = text[:pos] + text[end:]
        elif kind == 1:
            text = text[:end] + text[pos:end] + text[end:]
        elif kind == 2:
            text = text[:pos] + _TOKENS[length % len(_TOKENS)] + text[end:]
        else:
            text = text[:pos] + " " + _TOKENS[length % len(_TOKENS)] + " " + text[pos:]
    return text


@given(st.sampled_from(sorted(EXAMPLE_TEXT)),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.integers(0, 12)),
                min_size=1, max_size=4))
def test_fuzz_mutated_examples(name, ops):
    exercise(_mutate(renamed(EXAMPLE_TEXT[name]), ops))


def renamed(text: str, suffix: str = "_fz") -> str:
    """The example with every def renamed: nodes are hash-consed and keep their first
    location, so a fuzzed copy of an unchanged def must not become the example's def."""
    for name in re.findall(r"^def\s+(\w+)", text, re.MULTILINE):
        text = re.sub(rf"\b{name}\b", f"{name}{suffix}", text)
    return text


@given(st.lists(st.sampled_from(_TOKENS), max_size=12))
def test_fuzz_repl_lines(tokens):
    """The REPL answers every line (errors included) with text, never an internal error."""
    r = Repl(seed=0)
    r.handle(":set N = 2")
    r.handle(":set x = rand(N)")
    for line in (" ".join(tokens), ":set y = " + " ".join(tokens), ":type " + " ".join(tokens),
                 ":cost " + " ".join(tokens)):
        assert "internal error" not in r.handle(line)
    r.finish()


H = "def f(N: size, x: R[N]) -> R:\n"


@pytest.mark.parametrize("text, outcome", [
    (H + "    return " + "(" * 1000 + "x[0]" + ")" * 1000 + "\n", "ok"),
    (H + "    return " + " + ".join(["x[0]"] * 200) + "\n", "ok"),
    (H + "".join(f"    y{k} = {f'y{k - 1}' if k else 'x[0]'} * 1.5\n" for k in range(200))
     + "    return y199\n", "ok"),
    (H + "    return " + "".join(f"sum i{k}:N. " for k in range(30)) + "x[i0]\n", "ok"),
    (H + "    return " + "-" * 100 + "x[0]\n", "ok"),
    (H + "    return " + "-" * 500 + "x[0]\n", "ok"),
    (H + "    return " + " + ".join(["x[0]"] * 1000) + "\n", "ok"),
    (H + "".join(f"    y{k} = {f'y{k - 1}' if k else 'x[0]'} * 1.5\n" for k in range(1000))
     + "    return y999\n", "ok"),
    (H + "    return " + "[true] * " * 1000 + "x[0]\n", "ok"),
    (H + "    return " + "".join(f"sum i{k}:N. " for k in range(33)) + "x[i0]\n",
     "limit exceeded"),
    (H + "    return " + "-" * 30_000 + "x[0]\n", "limit exceeded"),
])
def test_deep_and_long_programs(text, outcome):
    """Programs within the documented limits (tensorlang/syntax/limits.py) run; beyond them,
    a located `LimitError` (tests/test_deep.py has the sizes of issue 13)."""
    if outcome == "ok":
        m = tl.parse(text)
        sizes = {"N": 2} if "sum i29" in text else {"N": 3}
        m.f.interpret(**sizes, x=np.ones(sizes["N"]))
    else:
        with pytest.raises(TLError) as info:
            tl.parse(text)
        assert info.value.kind == outcome and info.value.loc is not None


@settings(max_examples=10)
@given(st.lists(st.tuples(st.sampled_from(["(", "-", "[0 < 1] * ", "sum i:N. ", "exp(",
                                           "let t = 2.0 in "]),
                          st.integers(1, 400)), min_size=1, max_size=4),
       st.integers(1, 400))
def test_fuzz_deep_and_long_programs(prefixes, statements):
    """Random mixes of nesting (brackets, signs, Iverson brackets, binders, calls, lets)
    inside long statement chains: every stage answers with a result or a `TLError` (a
    `LimitError` naming the limit beyond them), never a RecursionError."""
    opened = "".join(p * n for p, n in prefixes)
    closing = "".join(")" * (n * p.count("(")) for p, n in reversed(prefixes))
    body = "".join(f"    y{k} = y{k - 1} * 0.5\n" for k in range(1, statements))
    exercise(H + f"    y0 = {opened}x[0]{closing}\n" + body + f"    return y{statements - 1}\n")


@pytest.mark.slow
def test_exercise_runs_the_examples():
    """The harness itself: every example goes all the way through."""
    for path in EXAMPLES:
        assert exercise(path.read_text(), str(path)) == "ok", path.name


class _redirect:
    def __init__(self, out: io.StringIO, err: io.StringIO) -> None:
        self.out, self.err = out, err

    def __enter__(self) -> None:
        self.saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.out, self.err

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.saved


# ---------------------------------------------------------------------------------------------
# Inputs and resources


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """The examples with their defs renamed (`qform_rb`): the tests below check locations,
    and a def parsed earlier in the session from another file with the same text would keep
    that file's location (hash-consing; docs/decisions.md)."""
    d = tmp_path_factory.mktemp("examples")
    for name, text in EXAMPLE_TEXT.items():
        (d / name).write_text(renamed(text, "_rb"))
    return d


@pytest.fixture(scope="module")
def qform(own):
    return tl.load(own / "qform.tl")


@pytest.mark.parametrize("bad", [
    np.ones(3) + 1j,
    np.array(["2020-01-01"] * 3, dtype="datetime64[D]"),
    np.array(["1", "2", "3"]),
    np.array([1, "a", None], dtype=object),
])
def test_non_real_arrays_are_refused_naming_the_parameter(qform, bad):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning either: an error instead
        with pytest.raises(tl.ShapeError) as info:
            qform.qform_rb.interpret(x=bad, A=np.eye(3))
    assert "argument x of qform_rb" in info.value.message
    assert info.value.loc is not None and info.value.loc.line == 2
    with pytest.raises(tl.ShapeError, match="argument x of qform_rb"):
        qform.qform_rb(x=bad, A=np.eye(3))


def test_complex_scalar_is_refused():
    m = tl.parse("def f(a: R) -> R:\n    return a * a\n")
    with pytest.raises(tl.ShapeError, match="argument a of f"):
        m.f.interpret(a=1 + 2j)


def test_memory_estimate_refuses_with_the_statement_and_size(qform, monkeypatch):
    x, A = np.ones(300), np.ones((300, 300))
    est = memory.estimate(qform.qform_rb.core(), qform.qform_rb.bind(x=x, A=A))
    assert est.inputs == 8 * (300 + 300 * 300) and est.output == 8
    assert est.largest().entries == 300 * 300  # the working array of `sum j` under `gen i`
    monkeypatch.setenv(memory.ENV_VAR, "100K")
    for run in (lambda: qform.qform_rb.interpret(x=x, A=A),
                lambda: qform.qform_rb.compile("interp")(x=x, A=A),
                lambda: qform.qform_hess_rb(x=x, A=A)):
        with pytest.raises(ResourceError) as info:
            run()
        msg = str(info.value)
        assert "above the memory limit of 100.0 KiB" in msg and "statement" in msg
        assert "entries" in msg and "TENSORLANG_MAX_MEMORY" in msg
    monkeypatch.setenv(memory.ENV_VAR, "1G")
    assert qform.qform_rb.interpret(x=x, A=A) == pytest.approx(float(x @ A @ x))


def test_max_memory_option(capsys, own):
    path = own / "qform.tl"
    # the estimate of the backend that runs: compiled (numba, the default), the sum is a
    # loop and the input A (74.5 GiB) is what does not fit; the interpreter's also holds the
    # sum's N x N working array
    code, out, err = run_main(capsys, "run", path, "qform_rb", "--random", "N=100000",
                              "--max-memory", "1G")
    assert code == 1 and out == ""
    assert "qform.tl:3:" in err and "resource error" in err and "statement y" in err
    assert "inputs 74.5 GiB" in err and "100,000 entries" in err
    assert "internal error" not in err
    code, out, err = run_main(capsys, "run", path, "qform_rb", "--random", "N=100000",
                              "--max-memory", "1G", "--backend", "interp")
    assert code == 1 and out == ""
    assert "qform.tl:3:" in err and "resource error" in err and "statement y" in err
    assert "10,000,000,000 entries" in err and "internal error" not in err
    code, out, err = run_main(capsys, "run", path, "qform_rb", "--random", "N=10",
                              "--max-memory", "lots")
    assert code == 1 and "memory amount 'lots'" in err


def test_memory_amounts():
    assert memory.parse_amount("512") == 512
    assert memory.parse_amount("4G") == 4 * 2**30
    assert memory.parse_amount("1.5MiB") == int(1.5 * 2**20)
    with pytest.raises(TLError):
        memory.parse_amount("-3")


def test_source_size_is_capped(capsys, tmp_path):
    code, _, err = run_main(capsys, "check", "/dev/zero")
    assert code == 1 and "at most 8 MiB" in err
    big = tmp_path / "big.tl"
    big.write_text("#" * (api.MAX_SOURCE_BYTES + 1))
    with pytest.raises(ResourceError):
        tl.load(big)
    r = Repl(seed=0)
    assert "at most 8 MiB" in r.handle(f":load {big}")


def test_sizes_beyond_int64(capsys, qform):
    with pytest.raises(tl.ShapeError, match="beyond the largest size"):
        qform.qform_rb.cost(N=10**21)
    path = ROOT / "examples" / "qform.tl"
    code, _, err = run_main(capsys, "cost", path, "qform", "N=" + "1" + "0" * 21)
    assert code == 1 and "beyond the largest size" in err and "OverflowError" not in err
    # within int64 but with a count that is not: refused, not wrapped to a negative number
    code, out, err = run_main(capsys, "cost", path, "qform", "N=4000000000")
    assert code == 1 and "64-bit" in err and "-" not in out
    with pytest.raises(SystemExit):
        cli.main(["run", str(path), "qform", "--random", "N=" + "9" * 30])


def test_npz_with_object_array(capsys, tmp_path):
    np.savez(tmp_path / "obj.npz", x=np.array([1, "a", None], dtype=object))
    np.save(tmp_path / "c.npy", np.ones(3) + 1j)
    path = ROOT / "examples" / "qform.tl"
    code, _, err = run_main(capsys, "run", path, "qform", "--arg", f"x={tmp_path / 'obj.npz'}",
                            "--arg", "A=@rand")
    assert code == 1 and "value of x: cannot read" in err and "internal error" not in err
    code, _, err = run_main(capsys, "run", path, "qform", "--arg", f"x={tmp_path / 'c.npy'}",
                            "--arg", "A=@rand")
    assert code == 1 and "complex128 values" in err


def test_parameter_named_self_and_size_named_stage():
    m = tl.parse("def f(self: R) -> R:\n    return self * 2\n\n"
                 "def g(stage: size, x: R[stage]) -> R:\n    return sum i:stage. x[i]\n")
    assert m.f(self=1.5) == 3.0 and m.f.interpret(self=1.5) == 3.0
    assert m.f.compile("interp")(self=2.0) == 4.0
    assert m.g.cost(stage=3).adds == 2          # an int: the size, not a pipeline stage
    assert m.g.cost({"stage": 3}, stage="parsed").adds == 2
    assert Repl(seed=0).handle(":cost g stage=3") != ""


def test_terminal_escapes_are_not_echoed(capsys, tmp_path):
    src = tmp_path / "esc.tl"
    src.write_text("def f(N: size, x: R[N]) -> R:\n"
                   "    return sum i:N. x[j] # \x1b[2J\x1b[31mred\x07\n")
    code, _, err = run_main(capsys, "check", src)
    assert code == 1 and "\x1b" not in err and "\x07" not in err
    assert "\\x1b[2J" in err
    line, caret = err.splitlines()[1:3]
    assert caret.index("^") == line.index("j]")  # the caret still lines up
    weird = tmp_path / "a\x1bb.tl"
    weird.write_text("def f(x: R) -> R:\n    return y\n")
    code, _, err = run_main(capsys, "check", weird)
    assert code == 1 and "\x1b" not in err and "a\\x1bb.tl:" in err


# ---------------------------------------------------------------------------------------------
# Newcomer rough edges


def test_wrong_arity_with_a_size_argument():
    src = ("def g(N: size, x: R[N], y: R[N]) -> R:\n    return sum i:N. x[i] * y[i]\n\n"
           "def h(N: size, x: R[N]) -> R:\n    return g(N, x)\n")
    with pytest.raises(tl.TypeCheckError) as info:
        tl.parse(src)
    assert "g takes 3 argument(s)" in info.value.message and "found 2" in info.value.message
    assert "not a value" not in info.value.message
    assert (info.value.loc.line, info.value.loc.col) == (5, 12)


def test_repl_error_is_located_in_the_typed_line():
    r = Repl(seed=0)
    r.handle(f":load {ROOT / 'examples' / 'qform.tl'}")
    r.handle(":set N = 3")
    r.handle(":set A = rand(2, 2)")
    r.handle(":set x = rand(3)")
    out = r.handle("qform(N, x, A)")
    assert out.startswith("<repl>:1:") and "qform.tl" not in out


def test_indentation_error_on_its_own_line():
    with pytest.raises(tl.ParseError) as info:
        tl.parse("def g(N: size, x: R[N]) -> R:\n    y = 1.0\n      return y\n")
    assert "unexpected indentation" in info.value.message
    assert (info.value.loc.line, info.value.loc.col) == (3, 7)


def test_undefined_index_is_located_at_the_access():
    tl.load(ROOT / "examples" / "qform.tl")  # interns `x[j]` with qform.tl's location
    with pytest.raises(tl.TypeCheckError) as info:
        tl.parse("def f(N: size, x: R[N]) -> R:\n    return x[j]\n", "f.tl")
    assert info.value.loc.source.name == "f.tl"
    assert (info.value.loc.line, info.value.loc.col) == (2, 14)
    with pytest.raises(tl.TypeCheckError) as info:
        tl.parse("def f(N: size, x: R[N]) -> R:\n    y = 2.0  # x[k]\n"
                 "    return sum i:N. x[i + k]\n", "f.tl")
    assert (info.value.loc.line, info.value.loc.col) == (3, 27)


def test_cost_columns_stay_apart(capsys):
    code, out, _ = run_main(capsys, "cost", ROOT / "examples" / "qform.tl", "qform",
                            "N=100000000")
    assert code == 0
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split() == ["total", "9,999,999,999,999,999", "10,000,000,100,000,000", "0",
                             "20,000,000,099,999,999"]


def test_cost_bound_at_every_stage(capsys):
    """`--stage parsed` of a derived function once printed a false VIOLATED; the derivative
    now differentiates the original as compiled (main), so its bound holds at every stage."""
    path = ROOT / "examples" / "qform2.tl"
    for stage in ("parsed", "ssa", "derive", "simplified"):
        code, out, _ = run_main(capsys, "cost", path, "qform2_jvp", "N=6", "--stage", stage)
        assert code == 0 and "(ok)" in out and "VIOLATED" not in out
        assert "original qform2 as compiled (simplified)" in out


def test_nan_from_random_inputs_is_explained(capsys, own):
    path = own / "nnmatfac.tl"
    code, out, err = run_main(capsys, "run", path, "nnmatfac_rb", "--random", "N=3",
                              "--random", "M=3", "--random", "K=2")
    assert code == 0 and out.strip() == "nan"
    assert "warning: the result of nnmatfac_rb contains NaN" in err
    assert "nnmatfac.tl:4:" in err and "[-1, 1]" in err
    src = ("def f(N: size, x: R[N]) -> R:\n    y = gen i:N. x[i] * 2.0\n"
           "    z = gen i:N. log(y[i])\n    return sum i:N. z[i]\n")
    fn = tl.parse(src, "n.tl").f
    warning = cli.nan_warning(fn, {"N": 2, "x": np.array([1.0, -1.0])}, float("nan"))
    assert "first NaN appears in statement z at n.tl:3:" in warning
    quiet = cli.nan_warning(fn, {"N": 2, "x": np.array([1.0, -1.0])}, float("nan"),
                            random_inputs=False)
    assert "statement z" in quiet and "[-1, 1]" not in quiet
    assert cli.nan_warning(fn, {"N": 1, "x": np.array([np.nan])}, float("nan")) == ""


def test_warnings_only_for_the_function_run(capsys, tmp_path):
    src = tmp_path / "w.tl"
    src.write_text("def noisy(N: size, x: R[N]) -> R:\n    return sum i:N. x[i + 1]\n\n"
                   "def quiet(x: R) -> R:\n    return x * 2\n")
    code, _, err = run_main(capsys, "check", src)
    assert "warning" in err  # the file has a warning ...
    code, out, err = run_main(capsys, "run", src, "quiet", "--arg", "x=1.5")
    assert code == 0 and out.strip() == "3.0" and "warning" not in err  # ... not about quiet
    code, _, err = run_main(capsys, "run", src, "noisy", "--random", "N=3")
    assert code == 0 and "w.tl:2:" in err and "warning" in err


def test_zero_size_errors_are_located(capsys, own):
    path = own / "conv.tl"
    code, _, err = run_main(capsys, "run", path, "--random", "N=0", "--random", "K=0")
    assert code == 1 and "internal error" not in err
    col = (own / "conv.tl").read_text().splitlines()[6].index("x: R[N + K - 1]") + 1
    assert f"conv.tl:7:{col}: shape error" in err and "K + N - 1 is -1 < 0" in err
    with pytest.raises(tl.ShapeError) as info:
        tl.load(path).conv_rb.interpret(N=0, K=0, x=np.zeros(0), w=np.zeros(0))
    assert info.value.loc is not None


def test_tuple_results_are_named(capsys, tmp_path):
    path = ROOT / "examples" / "nnmatfac.tl"
    code, out, _ = run_main(capsys, "run", path, "nnmatfac_grad", "--random", "N=2",
                            "--random", "M=2", "--random", "K=2", "--out", tmp_path / "g.npz")
    assert code == 0 and out.startswith("d_W =") and "\nd_H =" in out and "result." not in out
    with np.load(tmp_path / "g.npz") as z:
        assert sorted(z.keys()) == ["d_H", "d_W"]
    m = tl.parse("def f(x: R) -> (R, R):\n    a = x * 2\n    b = x * 3\n    return (a, b)\n"
                 "def j = jvp(f, x)\n")
    assert cli.result_names(m.f) == ["a", "b"]
    assert cli.result_names(m.j) == ["y", "d_y"]
    assert cli.format_result((1.0, 2.0), ["a", "b"]) == "a = 1.0\nb = 2.0"
    # n-tuples nest to the right; a pair inside a component is labelled by projection
    assert cli.format_result((1.0, (2.0, 3.0)), ["a", "b", "c"]) == "a = 1.0\nb = 2.0\nc = 3.0"
    assert cli.format_result(((1.0, 2.0), 3.0), ["a", "b"]) == "a.0 = 1.0\na.1 = 2.0\nb = 3.0"
    assert cli.format_result((1.0, 2.0)) == "result.0 = 1.0\nresult.1 = 2.0"


def test_readme_python_snippet_runs():
    import re

    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    assert "source" in readme and ":show f [STAGE]" in Repl().handle(":help")
    assert "source" in Repl().handle(":help")
    out = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_show_numba_from_the_api(qform):
    assert qform.qform_rb.show("numba") == qform.qform_rb.generated_source("numba")
    assert qform.qform_rb.show("source") == qform.qform_rb.show("parsed")


def test_bench_writes_to_a_user_directory(monkeypatch, tmp_path):
    from bench import build_parser
    from bench.command import results_dir

    monkeypatch.setenv("TENSORLANG_BENCH_DIR", str(tmp_path / "b"))
    assert results_dir(build_parser().parse_args(["--quick"])) == str(tmp_path / "b")
    monkeypatch.delenv("TENSORLANG_BENCH_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert results_dir(build_parser().parse_args(["--quick"])) == \
        str(tmp_path / "c" / "tensorlang" / "bench")
    assert results_dir(build_parser().parse_args(["--out", "here"])) == "here"
    assert results_dir(build_parser().parse_args(["--doc"])) == str(ROOT / "bench")


def test_repl_rand_in_expressions_and_fresh_seeds():
    r = Repl(seed=3)
    r.handle(":set N = 2")
    out = r.handle("sum i:N. rand(N)[i] * 0.0 + 1.0")
    assert out == "2.0"
    assert r.handle(":set y = rand(2) + rand(2)") == "y : R[2]"
    assert not any(n.startswith("rand") for n in r.values)
    draws = set()
    for _ in range(3):
        s = Repl()
        s.handle(":set z = rand()")
        draws.add(s.values["z"].value)
    assert len(draws) == 3  # a different stream each session
    a, b = Repl(seed=5), Repl(seed=5)
    a.handle(":set z = rand()"), b.handle(":set z = rand()")
    assert a.values["z"].value == b.values["z"].value


def test_piped_repl_exits_1_after_an_error():
    ok = subprocess.run([sys.executable, "-m", "tensorlang", "repl"], input="1.0 + 2.0\n",
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.strip() == "3.0"
    bad = subprocess.run([sys.executable, "-m", "tensorlang", "repl"],
                         input="1.0 +\n2.0 * 2.0\n", capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert bad.returncode == 1 and "parse error" in bad.stdout and "4.0" in bad.stdout


def test_unicode_output_says_it_is_not_source(capsys):
    code, out, _ = run_main(capsys, "show", ROOT / "examples" / "qform.tl", "qform",
                            "--unicode")
    assert code == 0 and out.splitlines()[0] == cli.UNICODE_HEADER and "Σ" in out
    code, out, _ = run_main(capsys, "show", ROOT / "examples" / "qform.tl", "qform")
    assert tl.parse(out).qform.show().strip() == out.strip()  # plain output parses back
