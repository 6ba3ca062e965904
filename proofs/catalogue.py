"""The rule catalogue of SPEC 10: one entry per rewrite rule, checked on random instances.

A `Rule` names a rewrite (`L1`, `P8`, `G1`, `SSA-contract`, ...), the pass it belongs to, its
schema (`LHS -> RHS` in ASCII), a hypothesis strategy drawing well-typed instances
`(lhs: Def, args)` of its left-hand side, and `apply`, which rewrites an instance with that
one rule.  `check_rule` draws instances and checks, for each,

* meaning: the interpreter gives the same value for lhs and rhs (rtol 1e-9, relative to the
  largest magnitude of the output, and equal NaN patterns);
* cost: `cost_def(rhs).total <= cost_def(lhs).total` (SPEC 3, exact);

and reports how many instances it checked, whether all passed, the worst cost ratio
rhs/lhs and the smallest counterexample found.  Rule modules (`proofs/rules_*.py`) register
their rules on import; `check_all` imports them all.

`tl prove` prints `format_table(check_all(n))` and exits non-zero unless `all_ok(reports)`.
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.strategies import SearchStrategy

from tensorlang.ir.ast import Def


@dataclass(frozen=True)
class Rule:
    name: str                     # rule id: "L1", "P8", "G1", "SSA-contract", "S-iv-and", ...
    pass_: str                    # "letlift" | "pairelim" | "genpush" | "ssa" | "simplify" | ...
    schema: str                   # "LHS -> RHS" in ASCII, for the table and docs
    instances: Callable[[], SearchStrategy]   # draws (lhs: Def, args: dict) instances
    apply: Callable[[Def], Def]   # rewrites the instance with this one rule


@dataclass(frozen=True)
class RuleReport:
    name: str
    pass_: str
    instances: int                # instances checked
    meaning_ok: bool
    cost_ok: bool
    worst_ratio: float            # max cost(rhs) / cost(lhs) over instances with cost(lhs) > 0
    counterexample: str | None    # the smallest failing instance, printed, if any

    @property
    def ok(self) -> bool:
        return self.meaning_ok and self.cost_ok and self.instances > 0


RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add `rule` to the catalogue (a later registration under the same name replaces it)."""
    RULES[rule.name] = rule
    return rule


def load_rule_modules() -> list[str]:
    """Import every `tensorlang.proofs.rules_*` module (each registers its rules)."""
    from tensorlang import proofs

    loaded = []
    for info in pkgutil.iter_modules(proofs.__path__):
        if info.name.startswith("rules_"):
            importlib.import_module(f"tensorlang.proofs.{info.name}")
            loaded.append(info.name)
    return loaded


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


def check_instance(rule: Rule, lhs: Def, args: Mapping[str, Any]
                   ) -> tuple[bool, bool, float | None, str | None]:
    """`compare(lhs, rule.apply(lhs), args)`; a rule that raises fails both checks."""
    try:
        rhs = rule.apply(lhs)
    except Exception as err:  # a non-redex instance or a crash of the rule: both failures
        return False, False, None, f"apply raised {type(err).__name__}: {err}\n{_show(lhs)}"
    return compare(lhs, rhs, args)


def check_rule(rule: Rule, max_examples: int = 100) -> RuleReport:
    """Check `rule` on `max_examples` random instances (deterministic: derandomized)."""
    stats: dict[str, Any] = {"n": 0, "meaning": True, "cost": True, "worst": 0.0,
                             "cex": None}

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(rule.instances())
    def run(instance: tuple[Def, dict]) -> None:
        lhs, args = instance
        meaning, cost, ratio, why = check_instance(rule, lhs, args)
        stats["n"] += 1
        stats["meaning"] &= meaning
        stats["cost"] &= cost
        if ratio is not None:
            stats["worst"] = max(stats["worst"], ratio)
        if why is not None and (stats["cex"] is None or len(why) < len(stats["cex"])):
            stats["cex"] = why

    run()
    worst = stats["worst"] if stats["n"] else math.nan
    return RuleReport(rule.name, rule.pass_, stats["n"], stats["meaning"], stats["cost"],
                      worst, stats["cex"])


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


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


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
    """The `tl prove` table: rule, pass, instances checked, meaning ok, cost ok, worst ratio;
    then the counterexample of each failing rule."""
    head = ("rule", "pass", "instances checked", "meaning ok", "cost ok", "worst cost ratio")
    reports = list(reports)
    rows = [head] + [(r.name, r.pass_, str(r.instances), _yes(r.meaning_ok),
                      _yes(r.cost_ok), _ratio(r.worst_ratio)) for r in reports]
    return _table(rows, left=2) + _counterexamples(reports)


__all__ = ["Rule", "RuleReport", "RULES", "register", "load_rule_modules", "values_close",
           "compare", "check_instance", "check_rule", "check_all", "all_ok", "format_table",
           "PassEntry", "PassReport", "PASSES", "register_pass", "check_pass_instance",
           "check_pass", "check_passes", "format_pass_table"]
