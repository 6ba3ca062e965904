"""The compilation pipeline of SPEC 0 as an ordered registry of stages.

Each stage is a pure function from the previous stage's program to its own:

    parsed      the elaborated, type-checked core `Def` (what the front end produces)
    letlift     passes/letlift.py   Def -> Def
    pairelim    passes/pairelim.py  Def -> Def
    genpush     passes/genpush.py   Def -> Def
    ssa         passes/ssa.py       Def -> tssa.Program
    simplified  passes/simplify.py  tssa.Program -> tssa.Program

A stage's module is imported only when the stage is first needed (the simplifier loads egglog,
which is slow to import).  Results are memoised per `Def`: Defs are hash-consed, so a
structurally equal program reuses the work already done.
"""
from __future__ import annotations

import importlib
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tensorlang.ir import ast, tssa
from tensorlang.syntax import ssa_printer
from tensorlang.syntax import printer
from tensorlang.semantics.cost import cost_def
from tensorlang.syntax.errors import NotYetSupported, TLError


@dataclass(frozen=True)
class Stage:
    name: str
    module: str  # import path of the module providing the pass ("" for the identity)
    func: str  # the pass function in that module
    doc: str

    def load(self) -> Callable[[Any], Any]:
        """The pass function."""
        if not self.module:
            return _identity
        return getattr(importlib.import_module(self.module), self.func)


def _identity(d: Any) -> Any:
    return d


STAGES: tuple[Stage, ...] = (
    Stage("parsed", "", "", "elaborated core program (parse + typecheck)"),
    Stage("letlift", "tensorlang.passes.letlift", "letlift", "one top-level block of lets"),
    Stage("pairelim", "tensorlang.passes.pairelim", "pairelim", "struct of arrays, no pairs"),
    Stage("genpush", "tensorlang.passes.genpush", "genpush", "every binding gen I. scalar"),
    Stage("ssa", "tensorlang.passes.ssa", "to_ssa", "Tensor SSA: one masked primitive each"),
    Stage("simplified", "tensorlang.passes.simplify", "simplify", "egglog simplifier"),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
# "source" is the program as written: the core Def the front end elaborated it to.
ALIASES: dict[str, str] = {"source": "parsed", "core": "parsed"}
_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}

_MEMO: "weakref.WeakKeyDictionary[ast.Def, dict[str, Any]]" = weakref.WeakKeyDictionary()


def stage(name: str) -> Stage:
    """The stage called `name` (aliases accepted); a `TLError` listing the stages otherwise."""
    canon = ALIASES.get(name, name)
    st = _BY_NAME.get(canon)
    if st is None:
        raise TLError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)}, source)")
    return st


def furthest(d: ast.Def) -> str:
    """The last stage `d` gets through: the program as it will run.  A pass that does not
    support some construct yet (`NotYetSupported`) ends the pipeline there for this program."""
    reached = STAGE_NAMES[0]
    for name in STAGE_NAMES[1:]:
        try:
            run_to(d, name)
        except NotYetSupported:
            break
        reached = name
    return reached


def run_to(d: ast.Def, name: str) -> Any:
    """The program `d` after every stage up to and including `name` (Def or tssa.Program)."""
    if not isinstance(d, ast.Def):
        raise TLError(f"the pipeline runs on core definitions, not {type(d).__name__}")
    st = stage(name)
    if st.name == STAGE_NAMES[0]:
        return d
    memo = _MEMO.get(d)
    if memo is None:
        memo = _MEMO[d] = {}
    if st.name in memo:
        return memo[st.name]
    idx = STAGE_NAMES.index(st.name)
    fn = st.load()
    prev = run_to(d, STAGE_NAMES[idx - 1])
    out = fn(prev)
    memo[st.name] = out
    return out


def is_program(x: Any) -> bool:
    """True for a Tensor-SSA program (anything past the `ssa` stage), False for a core Def."""
    return not isinstance(x, ast.Def)


def as_core(x: Any) -> ast.Def:
    """A core Def with the meaning and cost of `x` (SSA programs go through `tssa.to_core`)."""
    return x if isinstance(x, ast.Def) else tssa.to_core(x)


def show(d: ast.Def, name: str = "parsed", unicode: bool = False) -> str:
    """The program at stage `name` as text: `.tl` source, or the SSA listing."""
    prog = run_to(d, name)
    if isinstance(prog, ast.Def):
        return printer.to_unicode(prog) if unicode else printer.to_tl(prog)
    return ssa_printer.to_text(prog, unicode=unicode)


def cost(d: ast.Def, name: str, args: Mapping[str, Any]) -> Any:
    """The exact cost (SPEC 3, docs/cost-model.md) of `d` at stage `name` for the sizes and
    relations in `args`."""
    return cost_def(as_core(run_to(d, name)), dict(args))
