"""The compilation pipeline of SPEC 0 as an ordered registry of stages: the only place passes
are chained (the API, the CLI, proofs/ and the tests all go through `run_to`).

Each stage is a pure function from the previous stage's program to its own:

    parsed      the elaborated, type-checked core `Def` (what the front end produces)
    letlift     passes/letlift.py   Def -> Def
    pairelim    passes/pairelim.py  Def -> Def
    genpush     passes/genpush.py   Def -> Def
    ssa         passes/ssa.py       Def -> tssa.Program
    derive      passes/derive.py    derived definitions resolved (identity on a written def)
    simplified  passes/simplify/    tssa.Program -> tssa.Program (+ its report)

A program is a core `Def` (a function as written) or a `Derivation` (`grad(f, x)` and the
other derived functions of SPEC 2.5).  A derivation's `derive` stage differentiates its base
*as compiled* -- the base's `simplified` program -- and its `simplified` stage simplifies the
derivative.  So the cost bounds of SPEC 6, which the derivative rules meet relative to the
program they differentiate, hold end to end: `C(jvp f as compiled) <= 4 C(f as compiled)`
(docs/derivatives.md, "Differentiating the program as compiled").  A derivation's stages
before `derive` are those of its derivative program's core form (`parsed` is what
`Function.interpret` runs and `show()` prints by default).

A stage that cannot handle a program raises (`NotYetSupported`, a `TLError`): there is no
"stop earlier" fallback, so a cost or a kernel is always that of the whole pipeline.

A stage's module is imported only when the stage is first needed (the simplifier loads egglog,
which is slow to import).  Results are memoised per program: Defs are hash-consed and
derivations compare by value, so a structurally equal program reuses the work already done.
A stage may return a result with `.program` and `.report` (the simplifier does): the program
is the stage's value, the report is kept beside it (`report`).  A stage marked `sized` takes
the sizes when they are known (`run_to(p, name, sizes)`, `cost(..., specialise=True)`), and is
then run and memoised per sizes; without them (`show`, `cost`, the kernel compiled for every
size, the base a derivation differentiates) it works at representative sizes.
"""
from __future__ import annotations

import importlib
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

from tensorlang.ir import ast, tssa
from tensorlang.syntax import ssa_printer
from tensorlang.semantics.cost import cost_def
from tensorlang.syntax import printer
from tensorlang.syntax.errors import TLError


@dataclass(frozen=True)
class Stage:
    name: str
    module: str  # import path of the module providing the pass ("" for the identity)
    func: str  # the pass function in that module
    doc: str
    sized: bool = False  # the pass takes the sizes, when known, as a second argument

    def load(self) -> Callable[[Any], Any]:
        """The pass function."""
        if not self.module:
            return identity
        return getattr(importlib.import_module(self.module), self.func)


def identity(program: Any) -> Any:
    """The pass of a stage that leaves its input as it is."""
    return program


STAGES: tuple[Stage, ...] = (
    Stage("parsed", "", "", "elaborated core program (parse + typecheck)"),
    Stage("letlift", "tensorlang.passes.letlift", "letlift", "one top-level block of lets"),
    Stage("pairelim", "tensorlang.passes.pairelim", "pairelim", "struct of arrays, no pairs"),
    Stage("genpush", "tensorlang.passes.genpush", "genpush", "every binding gen I. scalar"),
    Stage("ssa", "tensorlang.passes.ssa", "to_ssa", "Tensor SSA: one masked primitive each"),
    Stage("derive", "", "", "derived functions: jvp/vjp of the base as compiled"),
    Stage("simplified", "tensorlang.passes.simplify", "simplify", "egglog simplifier",
          sized=True),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
FINAL: str = STAGE_NAMES[-1]  # the program as it will run
# "source" is the program as written: the core Def the front end elaborated it to.
ALIASES: dict[str, str] = {"source": "parsed", "core": "parsed"}
_BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}


@dataclass(frozen=True)
class Derivation:
    """`kind(base, *wrt)` named `name` (SPEC 2.5): a derived function as a pipeline input.
    `wrt` empty: every real-valued parameter of the base."""

    kind: str
    base: "Program"
    wrt: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.base, (ast.Def, Derivation)):
            raise TLError(f"{self.kind}: the pipeline differentiates core definitions and "
                          f"derivations, not {type(self.base).__name__}")


Program = Union[ast.Def, Derivation]

_MEMO: "weakref.WeakKeyDictionary[Program, dict[str, Any]]" = weakref.WeakKeyDictionary()


def stage(name: str) -> Stage:
    """The stage called `name` (aliases accepted); a `TLError` listing the stages otherwise."""
    canon = ALIASES.get(name, name)
    found = _BY_NAME.get(canon)
    if found is None:
        raise TLError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)}, source)")
    return found


def previous(name: str) -> str:
    """The stage before `name` (its input); `parsed` has none."""
    index = STAGE_NAMES.index(stage(name).name)
    if index == 0:
        raise TLError("the parsed stage is the start of the pipeline")
    return STAGE_NAMES[index - 1]


def run_to(program: Program, name: str, sizes: Mapping[str, int] | None = None) -> Any:
    """`program` after every stage up to and including `name` (a core Def or a
    tssa.Program); `sizes`, when known, go to a `sized` stage `name`.  A stage that cannot
    handle the program raises."""
    if not isinstance(program, (ast.Def, Derivation)):
        raise TLError("the pipeline runs on core definitions and derivations, not "
                      f"{type(program).__name__}")
    wanted = stage(name).name
    used = dict(sizes) if sizes and stage(wanted).sized else None
    memo = _MEMO.get(program)
    if memo is None:
        memo = _MEMO[program] = {}
    key = _key(wanted, used)
    if key not in memo:
        out = _compute(program, wanted, used)
        if hasattr(out, "program") and hasattr(out, "report"):
            memo[_key(wanted + ":report", used)] = out.report
            out = out.program
        memo[key] = out
    return memo[key]


def _key(name: str, sizes: Mapping[str, int] | None) -> Any:
    return (name, tuple(sorted(sizes.items()))) if sizes else name


def report(program: Program, name: str, sizes: Mapping[str, int] | None = None) -> Any:
    """The report the stage `name` made for `program` (None for stages without one)."""
    wanted = stage(name).name
    run_to(program, wanted, sizes)
    used = dict(sizes) if sizes and stage(wanted).sized else None
    return _MEMO[program].get(_key(wanted + ":report", used))


def _compute(program: Program, name: str, sizes: dict[str, int] | None = None) -> Any:
    if isinstance(program, Derivation):
        if name == "derive":
            return _derivative(program)
        if name == "parsed":
            return tssa.to_core(run_to(program, "derive"))
    elif name == "parsed":
        return program
    before = previous(name)
    if isinstance(program, Derivation) and name == "simplified":
        before = "derive"  # the derivative itself, not its re-normalised core form
    run = stage(name).load()
    return run(run_to(program, before), sizes) if sizes else run(run_to(program, before))


def _derivative(d: Derivation) -> tssa.Program:
    from tensorlang.passes import derive

    return derive.derive(run_to(d.base, FINAL), d.kind, d.wrt, d.name)




def is_program(x: Any) -> bool:
    """True for a Tensor-SSA program (anything past the `ssa` stage), False for a core Def."""
    return not isinstance(x, ast.Def)


def as_core(x: Any) -> ast.Def:
    """A core Def with the meaning and cost of `x` (SSA programs go through `tssa.to_core`)."""
    return x if isinstance(x, ast.Def) else tssa.to_core(x)


def show(program: Program, name: str = "parsed", unicode: bool = False) -> str:
    """The program at stage `name` as text: `.tl` source, or the SSA listing."""
    out = run_to(program, name)
    if isinstance(out, ast.Def):
        return printer.to_unicode(out) if unicode else printer.to_tl(out)
    return ssa_printer.to_text(out, unicode=unicode)


def cost(program: Program, name: str, args: Mapping[str, Any], specialise: bool = False) -> Any:
    """The exact cost (SPEC 3, docs/cost-model.md) of `program` at stage `name` for the sizes
    and relations in `args`: of the program as it runs for every size (what `compile` and
    `cost_formula` use), or with `specialise` of the program a `sized` stage makes for
    exactly these sizes (the simplifier extracts for them)."""
    sizes = {k: v for k, v in args.items() if isinstance(v, int) and not isinstance(v, bool)}
    return cost_def(as_core(run_to(program, name, sizes if specialise else None)), dict(args))


def derived_core(dd: ast.DerivedDef, defs: Mapping[str, ast.Def],
                 derived: Mapping[str, ast.DerivedDef]) -> ast.Def:
    """The core Def of the derived definition `dd` (its `derive` stage, as a `let` per
    statement) given the module's earlier defs and derived defs: what the type checker
    inlines where a def calls a derived function (`check_module(..., derive=derived_core)`)."""
    return run_to(derivation(dd, defs, derived), "parsed")


def derivation(dd: ast.DerivedDef, defs: Mapping[str, ast.Def],
               derived: Mapping[str, ast.DerivedDef]) -> Derivation:
    """`dd` as a pipeline input, its base looked up among `defs` and (recursively) `derived`."""
    base: Program
    if dd.fn in defs:
        base = defs[dd.fn]
    elif dd.fn in derived:
        base = derivation(derived[dd.fn], defs, derived)
    else:
        raise TLError(f"{dd.name}: {dd.fn} is not defined before it", dd.loc)
    return Derivation(dd.kind, base, tuple(dd.wrt), dd.name)
