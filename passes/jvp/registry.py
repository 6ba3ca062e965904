"""Derivative rule registries: one small named function per Tensor-SSA form (the shape of
JAX's per-primitive jvp / transpose tables).

A `RuleTable` maps a right-hand side to the rule that differentiates it: the rules
registered for its form (`Input`, `ConstRhs`, `AddRhs`, `MapRhs`, `ContractRhs`,
`ReduceRhs`), most specific first (a rule may narrow its form with `when`, as FWD-select
narrows maps to the selection builtins).  A rule with no form (ADJ-fanout) is a step of the
driver, registered so that the catalogue (proofs/rules_derivative.py) has an entry for it.
Every registered rule is a catalogue entry: `tl prove` checks it on random instances.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from tensorlang.ir.tssa import Rhs

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class DerivRule(Generic[F]):
    name: str                            # "FWD-add", "ADJ-contract", ...
    form: type[Rhs] | None               # the Tensor-SSA form it differentiates
    schema: str                          # "LHS -> derivative" in ASCII (table, docs)
    fn: F                                # the rule
    when: Callable[[Rhs], bool] | None = None   # narrows `form` (None: every rhs of it)

    def applies(self, rhs: Rhs) -> bool:
        return (self.form is not None and isinstance(rhs, self.form)
                and (self.when is None or self.when(rhs)))


class RuleTable(Generic[F]):
    """The rules of one derivative pass, by name, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind                 # "jvp" | "vjp"
        self.rules: dict[str, DerivRule[F]] = {}

    def register(self, name: str, form: type[Rhs] | None, schema: str,
                 when: Callable[[Rhs], bool] | None = None) -> Callable[[F], F]:
        """Decorator: `@TABLE.register("FWD-add", AddRhs, "...")` above the rule function."""
        def add(fn: F) -> F:
            if name in self.rules:
                raise ValueError(f"{self.kind} rule {name} is registered twice")
            self.rules[name] = DerivRule(name, form, schema, fn, when)
            return fn
        return add

    def lookup(self, rhs: Rhs) -> DerivRule[F]:
        """The rule for `rhs`: a narrowed rule of its form before the general one."""
        hits = [r for r in self.rules.values() if r.applies(rhs)]
        if not hits:
            raise TypeError(f"no {self.kind} rule for {type(rhs).__name__}")
        narrowed = [r for r in hits if r.when is not None]
        return (narrowed or hits)[0]

    def schemas(self) -> dict[str, str]:
        return {n: r.schema for n, r in self.rules.items()}


__all__ = ["DerivRule", "RuleTable"]
