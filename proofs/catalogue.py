"""The rule catalogue of SPEC 10: one entry per rule of every registry, checked on random
instances; and the derivative theorems, checked on random programs and every example.

A `Rule` names a rule (`L1`, `P8`, `G1`, `SSA-contract`, `S-fold`, `FWD-map`, `ADJ-contract`,
...), the pass it belongs to, its schema (`LHS -> RHS` in ASCII) and a hypothesis strategy
drawing well-typed instances of its left-hand side.  A rewrite rule has `apply`, which
rewrites an instance `(lhs: Def, args)` with that one rule; `check_instance` then checks

* meaning: the interpreter gives the same value for lhs and rhs (rtol 1e-9, relative to the
  largest magnitude of the output, and equal NaN patterns);
* cost: `cost_def(rhs).total <= cost_def(lhs).total` (SPEC 3, exact).

A derivative rule (proofs/rules_derivative.py) has `check` instead, which checks one drawn
instance itself and returns a `Verdict` (meaning against finite differences, the dot-product
test and the interpreter; cost within the rule's budget; the result in Tensor-SSA normal
form).  `check_rule` draws instances and reports how many it checked, whether all passed,
the worst ratio of cost to budget (for a rewrite the budget is the cost of the lhs) and a
counterexample (a wrong value before a cost or form failure, then the shortest).  A rule
with no instance checked fails.  Rule modules (`proofs/rules_*.py`) register their rules on
import; `check_all` imports them all.

`tl prove` prints `format_table(check_all(k))`, `format_pass_table(check_passes(k))` and
`format_theorem_table(check_theorems(k))` (the bounds of `theorems.check_theorems` and the
derivative checks of `theorems.check_derivatives`, on random programs and every example) and
exits non-zero unless every report is `ok` (a row of no instance is not).
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy

from tensorlang.ir.ast import Def


@dataclass(frozen=True)
class Verdict:
    """The checks of one instance."""

    meaning: bool
    cost: bool
    normal_form: bool | None      # None: the rule claims no normal form
    ratio: float | None           # cost / budget (None: both zero, nothing to compare)
    why: str | None               # what failed, with the instance, or None


@dataclass(frozen=True)
class Rule:
    name: str                     # rule id: "L1", "P8", "G1", "SSA-contract", "FWD-map", ...
    pass_: str                    # "letlift" | "pairelim" | "genpush" | "ssa" | "simplify" |
                                  # "jvp" | "vjp"
    schema: str                   # "LHS -> RHS" in ASCII, for the table and docs
    instances: Callable[[], SearchStrategy]   # draws instances ((lhs: Def, args) for rewrites)
    apply: Callable[[Def], Def] | None = None  # a rewrite: the instance with this one rule
    check: Callable[[Any], Verdict] | None = None  # any other rule: checks one instance


@dataclass(frozen=True)
class RuleReport:
    name: str
    pass_: str
    instances: int                # instances checked
    meaning_ok: bool
    cost_ok: bool
    worst_ratio: float            # max cost / budget over the instances (nan: none)
    counterexample: str | None    # the smallest failing instance, printed, if any
    normal_form_ok: bool | None = None   # None: the rule claims no normal form

    @property
    def ok(self) -> bool:
        return (self.meaning_ok and self.cost_ok
                and self.normal_form_ok is not False and self.instances > 0)


RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add `rule` to the catalogue (a later registration under the same name replaces it)."""
    RULES[rule.name] = rule
    return rule


# Pipeline order of the rule modules (the table's order); any other `rules_*` module follows.
RULE_MODULES = ("rules_normalize", "rules_ssa", "rules_derivative", "rules_simplify")


def load_rule_modules() -> list[str]:
    """Import every `tensorlang.proofs.rules_*` module (each registers its rules)."""
    from tensorlang import proofs

    found = [info.name for info in pkgutil.iter_modules(proofs.__path__)
             if info.name.startswith("rules_")]
    ordered = [m for m in RULE_MODULES if m in found] + sorted(set(found) - set(RULE_MODULES))
    for name in ordered:
        importlib.import_module(f"tensorlang.proofs.{name}")
    return ordered


# ---------------------------------------------------------------------------------------------
# Comparing values


def values_close(a: Any, b: Any, rtol: float = 1e-9) -> bool:
    """Same structure and shapes, equal NaN patterns, |a - b| <= rtol * scale elementwise,
    where scale is the largest finite magnitude of either output (at least `tiny`), so that
    rounding noise of an entry that cancels to about 0 is measured against the data."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(values_close(x, y, rtol) for x, y in zip(a, b)))
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return False
    nx, ny = np.isnan(x), np.isnan(y)
    if not np.array_equal(nx, ny):
        return False
    fin = np.isfinite(x) & np.isfinite(y)
    if not np.array_equal(x[~fin & ~nx], y[~fin & ~nx]):  # infinities must match exactly
        return False
    if not fin.any():
        return True
    scale = max(float(np.max(np.abs(x[fin]))), float(np.max(np.abs(y[fin]))),
                np.finfo(np.float64).tiny)
    return bool(np.all(np.abs(x[fin] - y[fin]) <= rtol * scale))


def _show(d: Def) -> str:
    try:
        from tensorlang.syntax.printer import to_tl
        return to_tl(d)
    except Exception:  # the printer is optional here: fall back to the AST
        return repr(d)


def _show_args(args: Mapping[str, Any]) -> str:
    parts = []
    for k, v in args.items():
        if isinstance(v, (int, np.integer)):
            parts.append(f"{k}={int(v)}")
        elif isinstance(v, float):
            parts.append(f"{k}={v!r}")
        else:
            parts.append(f"{k}={np.array2string(np.asarray(v), precision=3, threshold=20)}"
                         if not isinstance(v, tuple) else f"{k}=<pair>")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Checking


def compare(lhs: Def, rhs: Def, args: Mapping[str, Any]
            ) -> tuple[bool, bool, float | None, str | None]:
    """Check that `rhs` means what `lhs` means on `args` and does not cost more.

    Returns (meaning ok, cost ok, cost ratio rhs/lhs or None, failure description or None).
    """
    from tensorlang.semantics.cost import cost_def
    from tensorlang.semantics.interp import interpret

    try:
        vl, vr = interpret(lhs, dict(args)), interpret(rhs, dict(args))
        cl, cr = cost_def(lhs, dict(args)).total, cost_def(rhs, dict(args)).total
    except Exception as err:
        return False, False, None, (f"evaluation raised {type(err).__name__}: {err}\n"
                                    f"lhs:\n{_show(lhs)}\nrhs:\n{_show(rhs)}")
    meaning = values_close(vl, vr)
    cost = cr <= cl
    ratio = cr / cl if cl > 0 else (1.0 if cr == 0 else math.inf)
    why = None
    if not (meaning and cost):
        what = [] if meaning else [f"values differ: lhs {vl!r} rhs {vr!r}"]
        what += [] if cost else [f"cost rises: lhs {cl} rhs {cr}"]
        why = (f"{'; '.join(what)}\nargs: {_show_args(args)}\n"
               f"lhs:\n{_show(lhs)}\nrhs:\n{_show(rhs)}")
    return meaning, cost, ratio, why


def check_instance(rule: Rule, instance: Any) -> Verdict:
    """One instance of `rule`: its own `check`, or for a rewrite `compare(lhs,
    rule.apply(lhs), args)`; a rule that raises fails every check."""
    if rule.check is not None:
        try:
            return rule.check(instance)
        except Exception as err:  # a crash of the rule or its check: a failure, shown
            return Verdict(False, False, False, None,
                           f"check raised {type(err).__name__}: {err}")
    if rule.apply is None:
        raise TypeError(f"rule {rule.name} has neither apply nor check")
    lhs, args = instance
    try:
        rhs = rule.apply(lhs)
    except Exception as err:  # a non-redex instance or a crash of the rule: both failures
        return Verdict(False, False, None, None,
                       f"apply raised {type(err).__name__}: {err}\n{_show(lhs)}")
    meaning, cost, ratio, why = compare(lhs, rhs, args)
    return Verdict(meaning, cost, None, ratio, why)


def check_rule(rule: Rule, max_examples: int = 100) -> RuleReport:
    """Check `rule` on `max_examples` random instances (deterministic: derandomized)."""
    stats: dict[str, Any] = {"n": 0, "meaning": True, "cost": True, "nf": None,
                             "worst": math.nan, "cex": None, "key": None}

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(rule.instances())
    def run(instance: Any) -> None:
        v = check_instance(rule, instance)
        stats["n"] += 1
        stats["meaning"] &= v.meaning
        stats["cost"] &= v.cost
        if v.normal_form is not None:
            stats["nf"] = v.normal_form if stats["nf"] is None else stats["nf"] and v.normal_form
        if v.ratio is not None:
            stats["worst"] = v.ratio if math.isnan(stats["worst"]) else max(stats["worst"],
                                                                            v.ratio)
        key = (v.meaning, len(v.why or ""))  # a wrong value first, then the shortest
        if v.why is not None and (stats["cex"] is None or key < stats["key"]):
            stats["cex"], stats["key"] = v.why, key

    try:
        run()
    except Unsatisfiable as err:  # too few instances could be drawn: the count shows it
        if stats["n"] == 0:
            stats["cex"] = f"no instance could be drawn: {err}"
    return RuleReport(rule.name, rule.pass_, stats["n"], stats["meaning"], stats["cost"],
                      stats["worst"], stats["cex"], stats["nf"])


def check_all(max_examples: int = 100, names: Iterable[str] | None = None) -> list[RuleReport]:
    """Check every registered rule (or those in `names`), in catalogue order."""
    load_rule_modules()
    wanted = list(RULES) if names is None else list(names)
    unknown = [n for n in wanted if n not in RULES]
    if unknown:
        raise KeyError(f"unknown rules: {', '.join(unknown)}")
    return [check_rule(RULES[n], max_examples) for n in wanted]


def all_ok(reports: Iterable[RuleReport]) -> bool:
    return all(r.ok for r in reports)


# ---------------------------------------------------------------------------------------------
# Whole passes (SPEC 10: meaning kept, normal form reached, cost not raised)


@dataclass(frozen=True)
class PassEntry:
    name: str                                  # "letlift", "pairelim", "genpush", "ssa", ...
    prepare: Callable[[Def], Def]              # the stages before it (input in its pre-form)
    run: Callable[[Def], Any]                  # the pass
    check: Callable[[Any], str | None]         # its normal-form checker (None: form holds)
    as_core: Callable[[Any], Def] = lambda p: p  # a core Def meaning and costing its output


@dataclass(frozen=True)
class PassReport:
    name: str
    programs: int
    meaning_ok: bool
    normal_form_ok: bool
    cost_ok: bool
    worst_ratio: float
    counterexample: str | None

    @property
    def ok(self) -> bool:
        return self.meaning_ok and self.normal_form_ok and self.cost_ok and self.programs > 0


PASSES: dict[str, PassEntry] = {}


def register_pass(entry: PassEntry) -> PassEntry:
    PASSES[entry.name] = entry
    return entry


def check_pass_instance(entry: PassEntry, d: Def, args: Mapping[str, Any]
                        ) -> tuple[bool, bool, bool, float | None, str | None]:
    """(meaning ok, normal form ok, cost ok, ratio, failure description) for one program."""
    try:
        src = entry.prepare(d)
        out = entry.run(src)
        msg = entry.check(out)
        rhs = entry.as_core(out)
    except Exception as err:
        return False, False, False, None, (f"{entry.name} raised {type(err).__name__}: {err}"
                                           f"\n{_show(d)}")
    meaning, cost, ratio, why = compare(src, rhs, args)
    nf = msg is None
    if not nf:
        why = (why + "\n" if why else "") + f"not in normal form: {msg}\n{_show(rhs)}"
    return meaning, nf, cost, ratio, why


def check_pass(entry: PassEntry, max_examples: int = 100,
               strategy: SearchStrategy | None = None) -> PassReport:
    """Check a pass on random programs (`tensorlang.testing.programs()` by default)."""
    from tensorlang.testing import programs

    stats: dict[str, Any] = {"n": 0, "meaning": True, "nf": True, "cost": True,
                             "worst": 0.0, "cex": None}

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy if strategy is not None else programs())
    def run(instance: tuple[Def, dict]) -> None:
        d, args = instance
        meaning, nf, cost, ratio, why = check_pass_instance(entry, d, args)
        stats["n"] += 1
        stats["meaning"] &= meaning
        stats["nf"] &= nf
        stats["cost"] &= cost
        if ratio is not None:
            stats["worst"] = max(stats["worst"], ratio)
        if why is not None and (stats["cex"] is None or len(why) < len(stats["cex"])):
            stats["cex"] = why

    run()
    return PassReport(entry.name, stats["n"], stats["meaning"], stats["nf"], stats["cost"],
                      stats["worst"] if stats["n"] else math.nan, stats["cex"])


def check_passes(max_examples: int = 100, names: Iterable[str] | None = None
                 ) -> list[PassReport]:
    load_rule_modules()
    wanted = list(PASSES) if names is None else list(names)
    return [check_pass(PASSES[n], max_examples) for n in wanted]


def format_pass_table(reports: Iterable[PassReport]) -> str:
    """Table of whole-pass checks: pass, programs, meaning ok, normal form ok, cost ok, ratio."""
    head = ("pass", "programs checked", "meaning ok", "normal form ok", "cost ok",
            "worst cost ratio")
    reports = list(reports)
    rows = [head] + [(r.name, str(r.programs), _yes(r.meaning_ok), _yes(r.normal_form_ok),
                      _yes(r.cost_ok), _ratio(r.worst_ratio)) for r in reports]
    return _table(rows, left=1) + _counterexamples(reports)


def _yes(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def _ratio(r: float) -> str:
    return "-" if math.isnan(r) else ("inf" if math.isinf(r) else f"{r:.3f}")


def _table(rows: list[tuple[str, ...]], left: int) -> str:
    """Columns aligned; the first `left` columns flush left, the others right."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if k < left else c.rjust(w)
                       for k, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _counterexamples(reports: list[Any]) -> str:
    out = []
    for r in reports:
        if not r.ok:
            out += ["", f"{r.name}: counterexample", r.counterexample or "(nothing was drawn)"]
    return "\n" + "\n".join(out) if out else ""


def format_table(reports: Iterable[RuleReport]) -> str:
    """The `tl prove` table: rule, pass, instances checked, meaning ok, cost ok, normal form
    ok ("-": the rule claims none), worst ratio of cost to budget; then the counterexample of
    each failing rule."""
    head = ("rule", "pass", "instances checked", "meaning ok", "cost ok", "normal form ok",
            "worst cost ratio")
    reports = list(reports)
    rows = [head] + [(r.name, r.pass_, str(r.instances), _yes(r.meaning_ok),
                      _yes(r.cost_ok), _yes(r.normal_form_ok),
                      _ratio(r.worst_ratio))
                     for r in reports]
    return _table(rows, left=2) + _counterexamples(reports)


# ---------------------------------------------------------------------------------------------
# The derivative theorems (SPEC 6, SPEC 10) on random programs and on every example

DERIVATIVES = "derivatives: finite differences, dot product"
EXAMPLE_SIZE = 3   # the problem size n of the example workloads in the derivative checks


@dataclass(frozen=True)
class TheoremRow:
    """One theorem checked at one level on one family of programs (a row of the table)."""

    name: str                     # "6.1 jvp bound", "6.55 vjp bound", DERIVATIVES
    level: str                    # "rules" (the SSA program's derivative) | "compiled"
    programs: str                 # "random" | "examples"
    checked: int                  # (program, inputs) pairs checked
    ok_all: bool                  # no check failed
    worst: float                  # bounds: max cost / bound; derivatives: max relative error
    counterexample: str | None    # the failures, if any

    @property
    def ok(self) -> bool:
        return self.ok_all and self.checked > 0


def bound_rows(max_examples: int) -> list[TheoremRow]:
    """Theorems 6.1 and 6.55 at both levels on random programs and every example
    (`theorems.check_theorems`)."""
    from tensorlang.proofs import theorems

    rows = []
    for r in theorems.check_theorems(max_examples, examples=True):
        cex = "\n".join(r.violations[:3] + r.source[:1]) if r.violations else None
        rows.append(TheoremRow(f"{r.theorem} bound", r.level, r.programs, r.instances, r.ok,
                               r.worst_ratio, cex))
    return rows


class _DerivativeStats:
    """Accumulates the derivative checks of one family of programs."""

    def __init__(self, programs: str) -> None:
        self.programs = programs
        self.n = 0
        self.worst = 0.0
        self.cex: list[str] = []

    def check(self, d: Def, args: Mapping[str, Any], wrt: Sequence[str] | None,
              label: str) -> None:
        from tensorlang.proofs.theorems import check_derivatives

        self.n += 1
        try:
            r = check_derivatives(d, args, wrt)
        except Exception as err:  # a crash of a pass: a failure, shown
            self.worst = math.inf
            self.cex.append(f"{label}: raised {type(err).__name__}: {err}\n{_show(d)}")
            return
        self.worst = max(self.worst, r.fd_error, r.dot_error, r.primal_error)
        if not r.ok:
            self.cex.append(f"{label}: {r}\nargs: {_show_args(args)}\n{_show(d)}")

    def row(self) -> TheoremRow:
        return TheoremRow(DERIVATIVES, "rules", self.programs, self.n, not self.cex,
                          self.worst if self.n else math.nan,
                          "\n".join(self.cex[:3]) if self.cex else None)


def derivative_rows(max_examples: int) -> list[TheoremRow]:
    """jvp = central finite differences, `<vjp(dy), dx> == <dy, jvp(dx)>` and the primal
    returned (`theorems.check_derivatives`) on `max_examples` random differentiable programs
    and on every (non-derived) function of examples/*.tl, on the inputs its workload in
    examples/numpy_ref.py draws (where it is defined: logs of positive values, ...); a
    function without a workload is a failure."""
    from tensorlang import api
    from tensorlang.testing import differentiable_programs

    rand = _DerivativeStats("random")

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(differentiable_programs())
    def run(case: tuple[Def, dict, list[str]]) -> None:
        d, args, wrt = case
        rand.check(d, args, wrt, f"random program wrt {', '.join(wrt)}")

    run()
    folder = examples_dir()
    workloads = _workloads(folder)
    ex = _DerivativeStats("examples")
    for path in sorted(folder.glob("*.tl")):
        module = api.load(path)
        for name in module:
            fn = module[name]
            if fn.is_derived:
                continue
            w = workloads.get((path.name, name))
            if w is None:
                ex.n += 1
                ex.cex.append(f"{path.name}:{name}: no workload in numpy_ref.py gives its inputs")
                continue
            args = w.inputs(w.sizes(EXAMPLE_SIZE), np.random.default_rng(EXAMPLE_SIZE))
            ex.check(fn.core(), args, None, f"{path.name}:{name}")
    return [rand.row(), ex.row()]


def examples_dir() -> Path:
    """examples/ of the source checkout (where `theorems.example_cases` finds them too)."""
    import tensorlang

    folder = Path(tensorlang.__file__).resolve().parent.parent / "examples"
    if not any(folder.glob("*.tl")):
        raise FileNotFoundError(f"no examples/*.tl next to the tensorlang package ({folder})")
    return folder


def _workloads(folder: Path) -> dict[tuple[str, str], Any]:
    """(file, function) -> the workload of `folder/numpy_ref.py` (its inputs)."""
    ref = folder / "numpy_ref.py"
    if not ref.is_file():
        raise FileNotFoundError(f"{ref} not found (it gives the examples' inputs)")
    spec = importlib.util.spec_from_file_location("tensorlang_examples_numpy_ref", ref)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return {(w.file, w.func): w for w in module.WORKLOADS.values()}


def check_theorems(max_examples: int) -> list[TheoremRow]:
    """The theorem table of `tl prove`: the bounds, then the derivatives."""
    return bound_rows(max_examples) + derivative_rows(max_examples)


def format_theorem_table(rows: Iterable[TheoremRow]) -> str:
    """Table of the theorem checks: theorem, level, programs, checked, ok, worst (cost /
    bound for the bounds, the largest relative error for the derivatives); then the
    failures."""
    head = ("theorem", "level", "programs", "checked", "ok", "worst")
    rows = list(rows)
    table = [head] + [(r.name, r.level, r.programs, str(r.checked), _yes(r.ok),
                       _ratio(r.worst) if r.name != DERIVATIVES or math.isnan(r.worst)
                       else f"{r.worst:.1e}") for r in rows]
    out = []
    for r in rows:
        if not r.ok:
            out += ["", f"{r.name} ({r.level}) on {r.programs}: counterexample",
                    r.counterexample or "(no program was checked)"]
    return _table(table, left=3) + ("\n" + "\n".join(out) if out else "")


__all__ = ["Rule", "RuleReport", "RULES", "register", "load_rule_modules",
           "values_close",
           "compare", "check_instance", "check_rule", "check_all", "all_ok", "format_table",
           "PassEntry", "PassReport", "PASSES", "register_pass", "check_pass_instance",
           "check_pass", "check_passes", "format_pass_table", "Verdict", "TheoremRow",
           "DERIVATIVES", "bound_rows", "derivative_rows", "examples_dir", "check_theorems",
           "format_theorem_table"]
