"""Reverse differentiation (vjp) on Tensor SSA (SPEC 6), as a registry of rules.

Owns: `rules` (`VJP_RULES`: ADJ-input, ADJ-const, ADJ-add, ADJ-map, ADJ-select,
ADJ-contract, ADJ-reduce, one function per Tensor-SSA form, and ADJ-fanout, the driver's
sum of contributions) and `driver` (`vjp_program`, `active_vars`).
May import: tensorlang.ir, tensorlang.syntax.errors and passes.jvp (the emitter, the rule
registry and the signature helpers it shares); never a later stage.
"""
from __future__ import annotations

from .driver import active_vars, vjp_program
from .rules import VJP_RULES, Reverse

__all__ = ["vjp_program", "active_vars", "VJP_RULES", "Reverse"]
