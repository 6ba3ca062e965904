"""Cost contracts: `requires cost <= BOUND` (syntax, printing, `tl check`)."""
from __future__ import annotations

import re

import pytest

import tensorlang as tl
from tensorlang import cli
from tensorlang.check.contracts import ContractError, check_module, contracts_of
from tensorlang.ir import ast
from tensorlang.syntax import parser, printer

QFORM = """\
def qform(N: size, x: R[N], A: R[N, N]) -> R requires cost <= 2 * N**2 + N:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]

def g = grad(qform, x) requires cost <= 4 * cost(qform) + N
def h = hessian(qform, x) requires cost <= N**2
"""


def _results(text: str):
    return check_module(tl.parse(text, "c.tl"))


def test_contracts_parse_and_print_back() -> None:
    defs = parser.parse_module(QFORM, "c.tl")
    c = defs[1].requires
    assert isinstance(c, ast.Contract) and (c.measure, c.op) == ("cost", "<=")
    assert isinstance(c.bound, ast.Add)
    clause = contracts_of(QFORM, "c.tl")[1][1]
    assert clause.contract is c and clause.text == "cost <= 4 * cost(qform) + N"
    assert (clause.loc.line, clause.loc.col, clause.loc.end_col) == (5, 24, 60)
    assert defs[0].requires is not None and defs[2].requires is not None
    text = printer.to_tl(defs)
    assert "requires cost <= 4.0 * cost(qform) + N" in text
    again = parser.parse_module(text)
    assert all(a is b for a, b in zip(defs, again))
    # no contract: the field is None and the def is the same node as before
    plain = parser.parse_module("def k = hessian(qform, x)\n")[0]
    assert plain.requires is None and plain is ast.DerivedDef("k", "hessian", "qform", ("x",))


@pytest.mark.parametrize("clause,message", [
    ("requires foo <= N", "bounds one of cost, adds, muls, calls"),
    ("requires cost == N", "use <= or <"),
    ("requires N", "requires cost <= BOUND"),
])
def test_malformed_contracts_are_parse_errors(clause: str, message: str) -> None:
    with pytest.raises(tl.ParseError, match=message) as err:
        parser.parse_module(f"def k = hessian(qform, x) {clause}\n", "c.tl")
    assert err.value.loc.line == 1


def test_contracts_proved_by_formulas() -> None:
    results = _results(QFORM)
    assert [r.function for r in results] == ["qform", "g", "h"]
    for r in results:
        assert r.ok and r.proved_from is not None, r.describe()
    assert results[0].proved_from == {"N": 1}      # N = 0 is below the formula's domain ...
    assert "N in 0..0" in results[0].checked         # ... and checked with the cost model
    assert results[2].describe().endswith("proved for all sizes (cost formulas)")


def test_broken_contract_has_location_and_counterexample() -> None:
    text = QFORM + "def bad = grad(qform, x) requires muls <= N**2 + 3*N\n"
    bad = _results(text)[-1]
    err = bad.error
    assert isinstance(err, ContractError)
    # muls = 2 N^2 > N^2 + 3 N from N = 4 on: the smallest counterexample
    assert err.counterexample == {"N": 4}
    assert (err.loc.line, err.loc.col) == (7, 26)
    assert "fails at N=4: muls = 32, bound = 28" in err.message
    assert "^^^" in str(err)


def test_strict_bound_and_plain_def_contract() -> None:
    text = QFORM.replace("requires cost <= 2 * N**2 + N", "requires cost < 2 * N**2 + N - 1")
    r = _results(text)[0]
    assert r.error is not None and r.error.counterexample == {"N": 0}   # 0 < -1 is false


def test_contract_not_provable_symbolically_is_checked_on_the_grid() -> None:
    # 3 (N - 1)^2 + 9 - (2 N^2 + N - 1) = N^2 - 7 N + 13 > 0 always, but with N = 1 + u
    # it is u^2 - 5 u + 7: not coefficient-wise non-negative, so only checked
    text = QFORM.replace("requires cost <= 2 * N**2 + N", "requires cost <= 3 * (N - 1)**2 + 9")
    r = _results(text)[0]
    assert r.ok and r.proved_from is None
    assert "checked on the grid N in 1..25" in r.checked and "not proved" in r.describe()


def test_relations_are_checked_on_a_grid() -> None:
    text = """\
def masked(N: size, E: rel(N, N), A: R[N, N]) -> R requires cost <= 2 * N**2:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2

def tight(N: size, E: rel(N, N), A: R[N, N]) -> R requires calls <= N:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2
"""
    ok, broken = _results(text)
    assert ok.ok and "full, the empty and a random relation" in ok.checked
    assert broken.error is not None and "with the relations E of" in broken.error.message


def test_unknown_names_in_a_bound() -> None:
    text = QFORM + "def bad = grad(qform, x) requires cost <= M * cost(nothere)\n"
    with pytest.raises(ContractError, match="unknown name 'M'"):
        _results(text)


def test_contracts_of_lists_clauses() -> None:
    assert [n for n, _ in contracts_of(QFORM)] == ["qform", "g", "h"]


def test_tl_check_reports_contracts(tmp_path, capsys) -> None:
    ok = tmp_path / "ok.tl"
    ok.write_text(QFORM)
    assert cli.main(["check", str(ok)]) == 0
    out = capsys.readouterr().out
    assert "contract g: requires cost <= 4 * cost(qform) + N: proved" in out
    bad = tmp_path / "bad.tl"
    bad.write_text(QFORM + "def bad = grad(qform, x) requires cost <= 3 * N**2\n")
    assert cli.main(["check", str(bad)]) == 1
    cap = capsys.readouterr()
    assert f"{bad}:7:26: contract error: contract of bad broken" in cap.err
    assert "fails at N=" in cap.err and "Traceback" not in cap.err
    assert "1 contract broken" in cap.err


def test_tl_cost_symbolic(capsys) -> None:
    from pathlib import Path

    qform = Path(__file__).resolve().parent.parent / "examples" / "qform.tl"
    assert cli.main(["cost", str(qform), "qform_grad", "--symbolic"]) == 0
    out = capsys.readouterr().out
    assert "total  = 4*N**2 - N" in out and "leading term: 4*N**2" in out
    assert "ratio: (4*N**2 - N) / (2*N**2 + N - 1)" in out and "ratio as sizes grow: 2" in out
    assert cli.main(["cost", str(qform), "qform", "N=0", "--symbolic"]) == 0
    out = capsys.readouterr().out
    assert "at N=0: formula -1, counted 0 (outside the formula's domain N >= 1)" in out
    masked = qform.parent / "masked.tl"
    assert cli.main(["cost", str(masked), "masked", "--symbolic"]) == 1
    err = capsys.readouterr().err
    # located at the def (which file: hash-consed defs keep their first location, and this
    # def may have been parsed before by another test)
    assert re.search(r"\.tl:\d+:1: error: the cost of masked depends on the relation E", err)
    assert "Traceback" not in err


def test_example_contracts_are_all_proved(capsys) -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "project" / "contracts.tl"
    results = check_module(tl.load(path))
    assert len(results) == 5
    for r in results:
        assert r.ok and r.proved_from is not None, r.describe()
    assert cli.main(["check", str(path)]) == 0
    assert capsys.readouterr().out.count(": proved for all sizes") == 5


def test_piecewise_cost_is_checked_on_the_grid() -> None:
    text = """\
def diag(N: size, K: size, x: R[N], y: R[K]) -> R[N] requires muls <= N:
    return gen i:N. sum j:K. [i == j] * (x[i] * y[j])
"""
    (r,) = _results(text)          # min(N, K) multiplications: no single formula
    assert r.ok and r.proved_from is None
    assert "no cost formula: the cost of diag is not one quasi-polynomial" in r.checked
    broken = _results(text.replace("muls <= N", "muls < K"))[0]
    assert broken.error is not None and broken.error.counterexample == {"N": 0, "K": 0}


def test_bound_naming_a_function_with_relations() -> None:
    text = """\
def masked(N: size, E: rel(N, N), A: R[N, N]) -> R:
    return sum i:N, j:N. [E(i, j) and i != j] * A[i, j] ** 2

def masked_grad = grad(masked, A) requires cost <= 4 * cost(masked) + 2 * N**2
"""
    (r,) = _results(text)
    assert r.ok and "full, the empty and a random relation" in r.checked
