"""Forward differentiation (jvp) on Tensor SSA (SPEC 6), as a registry of rules.

Owns: `rules` (`JVP_RULES`: FWD-input, FWD-const, FWD-add, FWD-map, FWD-select,
FWD-contract, FWD-reduce, one function per Tensor-SSA form), `driver` (`jvp_program`),
`registry` (`RuleTable`, also used by `passes.vjp`), `emit` (the statement emitter every
derivative rule emits through: constant and gather inlining, supports, sum elimination by the
index solver) and `signature` (differentiated parameters, output trees).
May import: tensorlang.ir, tensorlang.semantics.builtins, tensorlang.syntax.errors and
passes.indexsolve; never passes.vjp (which builds on this package) or a later stage.
"""
from __future__ import annotations

from .driver import jvp_program
from .registry import DerivRule, RuleTable
from .rules import JVP_RULES, Forward
from .signature import (is_real_valued, map_out, new_param, out_paths, tuple_out, tuple_type,
                        type_tree, wrt_params)

__all__ = ["jvp_program", "JVP_RULES", "Forward", "DerivRule", "RuleTable", "is_real_valued",
           "wrt_params", "new_param", "out_paths", "map_out", "type_tree", "tuple_out",
           "tuple_type"]
