"""Deep and long programs (issue 13): 10,000 statements, 10,000 terms, 1,000 chained defs and
1,000 nested brackets check and run, on the interpreter and on Numba; beyond the documented
limits (tensorlang/syntax/limits.py) a located `LimitError`, never a `RecursionError`."""
from __future__ import annotations

import math
import re
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import cli, testing
from tensorlang.syntax import limits, parser
from tensorlang.syntax.errors import LimitError, ParseError

X = np.array([1.0, 2.0])
# f(x) for each family, x = (1, 2): y_k = y_{k-1} / 2 + 2 tends to 4 from y_0 = 2.5, the
# chained defs from g0 = 1; the sum alternates 1 and 2; the brackets keep x[0].
EXPECTED = {"statements": lambda n: 4 - 1.5 * 0.5 ** (n - 1),
            "terms": lambda n: 1.5 * n - 0.5 * (n % 2),
            "defs": lambda n: 4 - 3 * 0.5 ** (n - 1),
            "brackets": lambda n: 1.0}


def check_and_run(family: str, n: int, backends: tuple[str, ...]) -> None:
    text = testing.DEEP_PROGRAMS[family](n)
    f = tl.parse(text).f
    want = EXPECTED[family](n)
    assert f.interpret(N=2, x=X) == pytest.approx(want, rel=1e-12)
    for backend in backends:
        assert f.compile(backend)(N=2, x=X) == pytest.approx(want, rel=1e-12), backend


@pytest.mark.parametrize("family, n", [("statements", 1000), ("terms", 1000),
                                       ("brackets", 1000), ("defs", 100)])
def test_deep_programs_check_and_interpret(family, n):
    check_and_run(family, n, ())


@pytest.mark.parametrize("family, n", [("statements", 200), ("terms", 200),
                                       ("brackets", 200), ("defs", 50)])
def test_deep_programs_on_numba(family, n):
    check_and_run(family, n, ("numba",))


@pytest.mark.slow
@pytest.mark.parametrize("family, n", [("statements", 10_000), ("terms", 10_000),
                                       ("defs", 1000)])
def test_the_sizes_of_issue_13(family, n):
    check_and_run(family, n, ())


@pytest.mark.slow
@pytest.mark.parametrize("family, n", [("statements", 1000), ("brackets", 1000)])
def test_long_programs_on_numba(family, n):
    check_and_run(family, n, ("numba",))


def test_the_parser_runs_deep_from_any_caller():
    """The parser's own entry points need no API around them."""
    assert parser.parse_expr("(" * 3000 + "x" + ")" * 3000) is parser.parse_expr("x")
    assert sys.getrecursionlimit() < limits.RECURSION_LIMIT  # restored afterwards


HEAD = "def f(N: size, x: R[N]) -> R:\n"


def test_too_many_binders_is_a_located_limit_error():
    ok = HEAD + "    return " + "".join(f"sum i{k}:N. " for k in range(32)) + "x[i0]\n"
    assert tl.parse(ok).f.interpret(N=1, x=np.ones(1)) == 1.0
    bad = HEAD + "    return " + "".join(f"sum i{k}:N. " for k in range(33)) + "x[i0]\n"
    with pytest.raises(LimitError, match="the limit is 32") as info:
        tl.parse(bad)
    assert info.value.loc.line == 2 and bad.splitlines()[1][info.value.loc.col - 1:] \
        .startswith("sum i32")


def test_binders_added_by_inlining_are_counted():
    inner = "def g(N: size, x: R[N]) -> R:\n    return " + \
        "".join(f"sum j{k}:N. " for k in range(20)) + "x[j0]\n"
    outer = HEAD + "    return " + "".join(f"sum i{k}:N. " for k in range(20)) + "g(N, x)\n"
    with pytest.raises(LimitError, match="after inlining") as info:
        tl.parse(inner + outer)
    assert info.value.loc is not None and info.value.loc.line >= 3


def test_nesting_beyond_the_limit_is_a_located_limit_error():
    text = HEAD + "    return " + "-" * (limits.MAX_DEPTH + 10) + "x[0]\n"
    with pytest.raises(LimitError, match="25,000 levels") as info:
        tl.parse(text)
    assert info.value.loc.line == 2


@pytest.mark.slow
def test_nesting_beyond_the_stack_is_a_located_limit_error():
    """Far beyond the limit, the parser's own tree conversion gives up: still located."""
    text = HEAD + "    return " + "-" * (limits.RECURSION_LIMIT + 10) + "x[0]\n"
    with pytest.raises(LimitError, match="nested too deeply") as info:
        tl.parse(text)
    assert (info.value.loc.line, info.value.loc.col) == (2, 12)


def test_the_cli_reports_a_limit_with_a_caret(tmp_path, capsys):
    path = tmp_path / "deep.tl"
    path.write_text(HEAD + "    return " + "".join(f"sum i{k}:N. " for k in range(40))
                    + "x[i0]\n")
    assert cli.main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:" in err and "limit exceeded" in err and "^" in err
    assert "Traceback" not in err and "internal error" not in err


def test_a_recursion_error_in_the_worker_becomes_a_limit_error():
    def endless(k: int) -> int:
        return endless(k + 1)

    with pytest.raises(LimitError, match="program too deep"):
        limits.run(endless, 0)


def test_the_worker_runs_nested_calls_inline_and_keeps_errors():
    assert limits.run(lambda: (limits.inside(), limits.run(limits.inside))) == (True, True)
    assert not limits.inside()
    with pytest.raises(ParseError):
        limits.run(parser.parse_expr, "(")


def test_checking_benchmark_reports_time_per_unit():
    from bench import checking

    data = checking.run(sizes=(100, 200), repeat=1)
    assert set(data) == {"sizes", "statements", "terms", "defs"}
    assert data["defs"]["units"] == [10, 20]
    assert all(len(data[f]["per_unit_us"]) == 2 and data[f]["spread"] > 0
               for f in ("statements", "terms", "defs"))
    assert "us/unit" in checking.describe(data) and "defs n" in checking.describe(data)



def vector_chain(n: int) -> str:
    """n statements `y{k}[i:N] = y{k-1}[i] * 0.5 + x[i]`: a chain the code generator fuses."""
    return ("def f(N: size, x: R[N]) -> R[N]:\n" + "".join(
        f"    y{k}[i:N] = {f'y{k - 1}' if k else 'x'}[i] * 0.5 + x[i]\n" for k in range(n))
        + f"    return y{n - 1}\n")


def test_a_long_fused_chain_generates_valid_python():
    """Fusing 130 statements into one expression nested past Python's 200 brackets; the
    generator materialises every `MAX_FUSED_CHAIN` links instead."""
    from tensorlang.backends import codegen

    f = tl.parse(vector_chain(130)).f
    source = f.generated_source("numba")
    compile(source, "kernel.py", "exec")
    # materialised: stored, or kept in a local of a shared nest when only later members of
    # the nest read it (docs/backends.md, sibling loop fusion)
    stores = re.findall(r"^\s+(?:v_\w+\[i0\]|_s\d+) = ", source, re.MULTILINE)
    assert 130 // codegen.MAX_FUSED_CHAIN <= len(stores) < 130


@pytest.mark.slow
def test_a_long_fused_chain_runs_on_numba():
    f = tl.parse(vector_chain(130)).f
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(f.compile("numba")(x=x), f.interpret(x=x), rtol=1e-12)


_RLIMIT = """
import resource
import numpy as np
import tensorlang as tl
from tensorlang import testing
from tensorlang.syntax.errors import LimitError

# room for the small program, not for the worker's 1 GiB stack
vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
f = tl.parse(testing.DEEP_PROGRAMS["statements"](50)).f
print(f.interpret(N=2, x=np.array([1.0, 2.0])))
try:
    tl.parse(testing.DEEP_PROGRAMS["brackets"](5000))
    print("parsed")
except LimitError as err:
    print("LimitError", err.loc is not None)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and RLIMIT_AS")
def test_a_memory_rlimit_that_refuses_the_deep_worker(tmp_path):
    """Where an address-space limit refuses the worker's large stack, the work runs on the
    caller's thread: ordinary programs still check and run, and a program too deep for the
    default stack ends in a located LimitError (not a RecursionError or a crash)."""
    import os
    import subprocess

    env = dict(os.environ, TENSORLANG_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", _RLIMIT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    small, deep = r.stdout.strip().splitlines()
    assert float(small) == pytest.approx(EXPECTED["statements"](50), rel=1e-12)
    assert deep == "LimitError True"
    assert tl.parse(testing.DEEP_PROGRAMS["brackets"](5000)) is not None  # on the worker


# ---------------------------------------------------------------------------------------------
# Running long programs on the default backend (Numba), from the CLI and the API, with a fresh
# cache; docs/tutorial.md "Limits" has the times.

def _deep_file(tmp_path, family: str, n: int):
    path = tmp_path / f"{family}{n}.tl"
    path.write_text(testing.DEEP_PROGRAMS[family](n))
    np.save(tmp_path / "x.npy", X)
    return path


def _run_cli_and_api(tmp_path, capsys, monkeypatch, family: str, n: int) -> None:
    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path / "cache"))
    path = _deep_file(tmp_path, family, n)
    want = EXPECTED[family](n)
    assert cli.main(["run", str(path), "f", "--arg", "N=2", "--arg",
                     f"x={tmp_path / 'x.npy'}"]) == 0
    out, err = capsys.readouterr()
    assert float(out.strip().splitlines()[-1]) == pytest.approx(want, rel=1e-12)
    assert "Traceback" not in err and "internal error" not in err
    f = tl.load(str(path))["f"]
    assert f(N=2, x=X) == pytest.approx(want, rel=1e-12)
    assert f.interpret(N=2, x=X) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("family, n", [("statements", 300), ("terms", 1000), ("defs", 100),
                                       ("brackets", 300)])
def test_long_programs_run_on_the_default_backend(tmp_path, capsys, monkeypatch, family, n):
    _run_cli_and_api(tmp_path, capsys, monkeypatch, family, n)


@pytest.mark.slow
@pytest.mark.parametrize("family, n", [("statements", 10_000), ("terms", 10_000),
                                       ("defs", 1000), ("brackets", 1000)])
def test_the_sizes_of_issue_13_run_on_the_default_backend(tmp_path, capsys, monkeypatch,
                                                          family, n):
    _run_cli_and_api(tmp_path, capsys, monkeypatch, family, n)


def test_constant_reads_of_inputs_are_hoisted():
    """`x[0]` read by 300 statements is one checked read (one branch) at the kernel's top:
    Numba's compile time grows with the branches of a function."""
    f = tl.parse(testing.DEEP_PROGRAMS["terms"](300)).f
    source = f.generated_source("numba")
    assert source.count("if 0 < v_x.shape[0] else 0.0") == 1
    assert source.count("if 1 < v_x.shape[0] else 0.0") == 1
    from tensorlang.backends import numba_cpu

    plain = numba_cpu.compile_program(f.final_program(), jit=False)
    for x in (X, np.array([3.0])):  # x[1] outside: reads 0 as the interpreter
        assert plain(N=len(x), x=x) == pytest.approx(f.interpret(N=len(x), x=x), rel=1e-12)


def test_straight_line_statements_weigh_less_in_the_split():
    from tensorlang.backends import kernel_split

    straight = [f"    v{k} = (v{k - 1} + 1.0)" if k else "    v0 = 1.0" for k in range(1000)]
    branchy = [f"    v{k} = (a[0] if 0 < n else 0.0)" for k in range(1000)]
    cut_straight = kernel_split.split_body(straight + ["    return (v999,)"], ["a", "n"], 150)
    cut_branchy = kernel_split.split_body(branchy + ["    return (v999,)"], ["a", "n"], 150)
    assert cut_straight is not None and cut_branchy is not None
    assert len(cut_branchy[0]) == 7            # a line with a branch weighs one: 1000 / 150
    assert len(cut_straight[0]) == math.ceil(1000 * kernel_split.STRAIGHT / 150)


def test_many_constants_stay_literals(monkeypatch):
    from tensorlang.backends import numba_cpu, numba_cpu_source

    f = tl.parse(testing.DEEP_PROGRAMS["statements"](40)).f
    p = f.final_program()
    text, constants = numba_cpu_source.abstract_source(p)
    assert constants == (0.5,) and text.count("tl_c[0]") >= 1   # 40 equal: one argument
    monkeypatch.setattr(numba_cpu_source, "MAX_CONSTANT_ARGS", 0)   # (distinct ones count)
    text, constants = numba_cpu_source.abstract_source(p)
    assert constants == () and "tl_c[" not in text and "0.5" in text
    plain = numba_cpu.compile_program(p, jit=False)
    assert plain(N=2, x=X) == pytest.approx(EXPECTED["statements"](40), rel=1e-12)


def test_programs_beyond_the_simplifier_limit_run_unsimplified(monkeypatch):
    from tensorlang.passes.simplify import simplify

    f = tl.parse(testing.DEEP_PROGRAMS["statements"](30)).f
    p = f.run_to("ssa")
    monkeypatch.setattr(limits, "MAX_SIMPLIFY_STATEMENTS", len(p.stmts) - 1)
    out = simplify(p, strict=True)
    assert out.program is p
    assert any("not simplified" in note and "Limits" in note for note in out.report.notes)


def test_deep_checked_modules_are_cached_without_recursion(tmp_path, monkeypatch):
    """The checked-module cache pickles node by node (`cache.dump_flat`): pickle recurses
    once per level, and on Python >= 3.12 a C limit that `sys.setrecursionlimit` does not
    raise bounds that (here, outside the deep worker, the default limit does)."""
    from tensorlang import api, cache

    monkeypatch.setenv("TENSORLANG_CACHE_DIR", str(tmp_path / "cache"))
    checked = api.check_source(testing.DEEP_PROGRAMS["terms"](3000), "deep.tl")
    cache.put_checked("deep", checked)
    back = cache.get_checked("deep")
    assert back is not None and back.defs["f"] is checked.defs["f"]  # hash-consed
    assert back.defs["f"].body.loc == checked.defs["f"].body.loc
