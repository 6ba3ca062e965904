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

from tensorlang.ast import Def


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
        from tensorlang.printer import to_tl
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


def check_instance(rule: Rule, lhs: Def, args: Mapping[str, Any]
                   ) -> tuple[bool, bool, float | None, str | None]:
    """(meaning ok, cost ok, cost ratio or None, failure description or None)."""
    from tensorlang.cost import cost_def
    from tensorlang.interp import interpret

    try:
        rhs = rule.apply(lhs)
    except Exception as err:  # a non-redex instance or a crash of the rule: both failures
        return False, False, None, f"apply raised {type(err).__name__}: {err}\n{_show(lhs)}"
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


def format_table(reports: Iterable[RuleReport]) -> str:
    """The `tl prove` table: rule, pass, instances checked, meaning ok, cost ok, worst ratio."""
    head = ("rule", "pass", "instances checked", "meaning ok", "cost ok", "worst cost ratio")
    rows = [head]
    reports = list(reports)
    for r in reports:
        ratio = "-" if math.isnan(r.worst_ratio) else (
            "inf" if math.isinf(r.worst_ratio) else f"{r.worst_ratio:.3f}")
        rows.append((r.name, r.pass_, str(r.instances), "yes" if r.meaning_ok else "NO",
                     "yes" if r.cost_ok else "NO", ratio))
    widths = [max(len(row[k]) for row in rows) for k in range(len(head))]
    lines = ["  ".join(c.ljust(w) if k < 2 else c.rjust(w)
                       for k, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    failed = [r for r in reports if not r.ok]
    for r in failed:
        lines.append("")
        lines.append(f"{r.name}: counterexample")
        lines.append(r.counterexample or "(no instances were drawn)")
    return "\n".join(lines)


__all__ = ["Rule", "RuleReport", "RULES", "register", "load_rule_modules", "values_close",
           "check_instance", "check_rule", "check_all", "all_ok", "format_table"]
