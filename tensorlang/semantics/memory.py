"""Memory estimate of a run, checked before any backend allocates (issue 13).

From the sizes alone (no data is read), `estimate` adds up the bytes of

  * the inputs (every array argument, 8 bytes an entry; boolean relations 1),
  * the temporaries: every `gen` array a statement materialises, at its full extent under
    the generators around it (what Tensor SSA stores as one statement), the outputs of every
    linear-algebra box (SPEC 13) with a working copy of its operands (LAPACK factorises a
    copy), and, for the interpreter only, the widest working array of a `sum` nest (the
    interpreter evaluates a sum vectorised over every enclosing index, so
    `gen i. sum j. A[i, j] * x[j]` works on an N x N array; a compiled kernel accumulates a
    sum in a loop or hands it to one matrix product that writes the statement's array, so
    `compiled=True` counts no working array for it: `v[i:D, k:M] = sum j:D. A[i, j] B[j, k]`
    is D M entries there, not D M D),
  * the output (its type at the given sizes).

On the Numba CPU backend the temporaries are instead the arrays its kernels allocate
(`arrays`: `Allocation`s, which the code generator records in each kernel module's header,
`backends/common/allocation.py`): a statement fused into its readers (recomputed in each),
a sibling-nest member kept in a local, a coordinate vector computed in its reader's loop
are no array; a relation-masked temporary stored as a coordinate vector has one entry per
member of the relation (`nnz`, read off the bound relation; its box when the relation is
not made yet); a matrix product's scaled or transposed copies are counted.  That estimate
is an upper bound of what the kernels allocate (tests/test_memory_compiled.py traces it).

`check` refuses a run whose estimate is above the limit with a `ResourceError` naming the
largest statement, where it is in the source, and its size.  The limit comes from
`set_limit` (the CLI's `--max-memory`), else the environment variable
`TENSORLANG_MAX_MEMORY` (bytes, or with a K/M/G/T suffix: `4G`), else 80% of the physical
memory.  The estimate is an upper bound for the compiled backends (fusion stores less) and
close for the interpreter; it is meant to turn "the process died" into a clear message, not
to count every byte.
"""
from __future__ import annotations

import functools
import math
import os
import re
import weakref
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensorlang.ir import ast
from tensorlang.semantics import boxes
from tensorlang.syntax.errors import Loc, ResourceError, TLError

ENV_VAR = "TENSORLANG_MAX_MEMORY"
_FLOAT_BYTES = 8
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)
_limit: int | None = None


@dataclass(frozen=True)
class Temporary:
    """One array a statement needs: its name, where it is written, entries and bytes."""

    name: str
    loc: Loc | None
    entries: int
    nbytes: int
    working: bool = False  # a sum's working array: freed once reduced
    group: str = ""        # working arrays of one group live together (a product's copies)


@dataclass(frozen=True)
class Estimate:
    inputs: int
    temporaries: tuple[Temporary, ...]
    output: int
    output_loc: Loc | None = None   # where the result is written (`return`)

    @property
    def temporary_bytes(self) -> int:
        """Every gen array, plus the widest working array of a sum (one lives at a time)."""
        kept = sum(t.nbytes for t in self.temporaries if not t.working)
        working: dict[tuple[str, int], int] = {}
        for k, t in enumerate(self.temporaries):
            if t.working:
                key = (t.group, 0) if t.group else ("", k)
                working[key] = working.get(key, 0) + t.nbytes
        return kept + max(working.values(), default=0)

    @property
    def total(self) -> int:
        return self.inputs + self.temporary_bytes + self.output

    def largest(self) -> Temporary | None:
        return max(self.temporaries, key=lambda t: t.nbytes, default=None)


# ---------------------------------------------------------------------------------------------
# The limit


@functools.lru_cache(maxsize=8)   # `limit()` reads the environment on every call
def parse_amount(text: str) -> int:
    """Bytes from `123`, `512M`, `4G`, `1.5GiB` (powers of 1024); a `TLError` otherwise."""
    m = _AMOUNT.fullmatch(text)
    if m is None:
        raise TLError(f"memory amount {text!r}: expected bytes or a number with K, M, G or T "
                      f"(e.g. 4G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


@functools.lru_cache(maxsize=1)
def physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def set_limit(nbytes: int | None) -> None:
    """Set the limit for this process (None: back to the environment / default)."""
    global _limit
    _limit = nbytes


def limit() -> int | None:
    """The limit in bytes; None when there is none (physical memory unknown)."""
    if _limit is not None:
        return _limit
    raw = _ENV_DATA.get(_ENV_KEY) if _ENV_DATA is not None else os.environ.get(ENV_VAR)
    return _limit_from(raw.decode() if isinstance(raw, bytes) else raw)


# Every compiled call asks for the limit, and `os.environ.get` of an unset name costs ~0.8 us
# (it raises and catches KeyError): CPython's os.environ keeps its entries in a dict of
# encoded names, which `os.environ[...] = ...` updates, so a lookup there is current and cheap.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(ENV_VAR) if hasattr(os.environ, "encodekey") else ENV_VAR


@functools.lru_cache(maxsize=8)
def _limit_from(text: str | None) -> int | None:
    """The limit the environment's text sets (memoised: every compiled call asks)."""
    if text:
        return parse_amount(text)
    phys = physical_memory()
    return int(phys * 0.8) if phys else None


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ---------------------------------------------------------------------------------------------
# The estimate


def _value_bytes(v: Any) -> int:
    if isinstance(v, (tuple, list)):
        return sum(_value_bytes(x) for x in v)
    return int(getattr(v, "nbytes", 0))   # arrays, and relations (semantics/relation.py)


def _param_bytes(t: ast.Type, sizes: Mapping[str, int]) -> int:
    """Bytes of an argument not made yet (random inputs): booleans for a relation."""
    if isinstance(t, ast.TRel):
        return math.prod(_extent(a, sizes) for a in t.sizes)
    return _FLOAT_BYTES * _type_entries(t, sizes)


def _type_entries(t: ast.Type, sizes: Mapping[str, int]) -> int:
    if isinstance(t, ast.TArr):
        return max(0, int(t.size.evaluate(sizes))) * _type_entries(t.elem, sizes)
    if isinstance(t, ast.TPair):
        return _type_entries(t.a, sizes) + _type_entries(t.b, sizes)
    return 1 if isinstance(t, ast.TReal) else 0


@dataclass(frozen=True)
class Allocation:
    """An array a compiled kernel allocates (module docstring): statement `name`'s, of
    shape `dims` (affine in the sizes), or, with `rel`, a coordinate vector of one entry per
    member of relation `rel` (at most its box `dims`).  `working`: freed before the next
    one is made (a product's scaled copy); `output`: the program's result (counted as the
    output, not as a temporary)."""

    name: str
    dims: tuple[ast.Affine, ...]
    rel: str | None = None
    working: bool = False
    output: bool = False

    def literal(self) -> tuple:
        """As plain literals (a kernel module's header: `ast.literal_eval` reads it back)."""
        return (self.name, tuple((d.terms, d.const) for d in self.dims), self.rel,
                self.working, self.output)

    def box_entries(self, sizes: Mapping[str, int]) -> int:
        """Its entries at `sizes` (a coordinate vector: at most its box's)."""
        return math.prod(_extent(x, sizes) for x in self.dims)

    @staticmethod
    def of_literal(t: tuple) -> "Allocation":
        name, dims, rel, working, output = t
        return Allocation(name, tuple(ast.Affine(tuple(map(tuple, terms)), const)
                                      for terms, const in dims), rel, working, output)


# LAPACK factorises a copy of a box's operands (traced, `semantics.boxes`): lq's geqrf is
# handed a copy of A^T and its triangle copied out; eigh symmetrises A into a copy, syevd
# copies that and works in about 2 n^2 more
BOX_WORK_COPIES = {"lq": 2, "eigh": 4}


def box_allocations(name: str, fn: str, out: tuple[ast.Affine, ...],
                    operands: list[tuple[ast.Affine, ...]], factorises: bool
                    ) -> list[Allocation]:
    """What box statement `name = fn(operands)` allocates: its output of shape `out` and,
    when it `factorises` (the first part of a pair box run; the other shares it), working
    copies of its operands."""
    work = [Allocation(name, shape, working=True)
            for shape in operands for _ in range(BOX_WORK_COPIES.get(fn, 1))]
    return [Allocation(name, out)] + (work if factorises else [])


def estimate(d: ast.Def, args: Mapping[str, Any], compiled: bool = False,
             arrays: tuple[Allocation, ...] | None = None) -> Estimate:
    """Bytes of inputs, temporaries and output of running core def `d` on `args` (bound
    arguments: sizes as ints); `compiled`: on a compiled backend (no sum working arrays),
    else on the interpreter.  `arrays`: the temporaries are the arrays the compiled kernels
    allocate (module docstring; `d` then gives the inputs, the output and the locations)."""
    sizes = {p.name: int(args[p.name]) for p in d.params
             if isinstance(p.type, ast.TSize) and p.name in args}
    inputs = sum(_value_bytes(args[p.name]) if p.name in args else _param_bytes(p.type, sizes)
                 for p in d.params)
    members = relation_members(arrays, args) if arrays is not None else ()
    # the rest depends on the sizes only: kept per def (calls in a loop pay a dict lookup)
    memo = _MEMO.get(d)
    if memo is None:
        memo = _MEMO[d] = {}
    key = (compiled, tuple(sorted(sizes.items())), arrays, members)
    if key not in memo:
        if len(memo) > 64:
            memo.clear()
        memo[key] = _temporaries(d, sizes, compiled) if arrays is None else \
            _allocated(d, sizes, arrays, dict(members))
    temps, output = memo[key]
    return Estimate(inputs, temps, output, _return_loc(d))


@functools.lru_cache(maxsize=64)
def _return_loc(d: ast.Def) -> Loc | None:
    return statement_loc(d, "return") or d.loc


def relation_members(arrays: tuple[Allocation, ...], args: Mapping[str, Any]
                     ) -> tuple[tuple[str, int], ...]:
    """The member count of each bound relation that a coordinate vector of `arrays` is
    indexed by (a relation not bound yet: absent, its vector counts its box)."""
    rels = sorted({a.rel for a in arrays if a.rel is not None})
    return tuple((r, int(args[r].nnz)) for r in rels if hasattr(args.get(r), "nnz"))


def _allocated(d: ast.Def, sizes: Mapping[str, int], arrays: tuple[Allocation, ...],
               members: Mapping[str, int]) -> tuple[tuple[Temporary, ...], int]:
    output = _FLOAT_BYTES * _type_entries(d.ret, sizes) if d.ret is not None else 0
    # The kernels' statements have the SSA's names (v0, v1, ...): an array is named, for
    # messages, after a statement of `d` as written of as many entries, where there is one
    # (`qform`'s `v0[i0:N] = sum j0:N. ...` is its `y = gen i:N. sum j:N. ...`)
    written: dict[int, tuple[str, Loc | None]] = {}
    for t in _temporaries(d, sizes, True)[0]:
        if not t.working:
            written.setdefault(t.entries, (t.name, t.loc))
    temps: list[Temporary] = []
    for a in arrays:
        if a.output:
            continue
        entries = a.box_entries(sizes)
        if a.rel is not None and a.rel in members:
            entries = min(entries, members[a.rel])
        name, where = a.name, statement_loc(d, a.name)
        if where is None:
            name, where = written.get(entries, (a.name, d.loc))
        temps.append(Temporary(name, where, entries, _FLOAT_BYTES * entries, a.working,
                               a.name if a.working else ""))
    return tuple(temps), output


_MEMO: "weakref.WeakKeyDictionary[ast.Def, dict[tuple, tuple[tuple[Temporary, ...], int]]]" = \
    weakref.WeakKeyDictionary()


def _temporaries(d: ast.Def, sizes: Mapping[str, int], compiled: bool
                 ) -> tuple[tuple[Temporary, ...], int]:
    output = _FLOAT_BYTES * _type_entries(d.ret, sizes) if d.ret is not None else 0
    temps: list[Temporary] = []
    # (node, the enclosing binders (index, extent, is a gen), statement name)
    Binders = tuple[tuple[str, int, bool], ...]
    # ... and the location of the nearest enclosing node written in this def
    start = statement_loc(d, "return") or d.loc
    stack: list[tuple[ast.Node, Binders, str, Loc | None]] = [(d.body, (), "return", start)]
    seen: set[tuple[int, Binders, str]] = set()
    factored: set[tuple[str, tuple[ast.Expr, ...]]] = set()   # the parts of a pair box share one
    while stack:
        node, binders, name, where = stack.pop()
        key = (id(node), binders, name)
        if key in seen:
            continue
        seen.add(key)
        where = own_loc(getattr(node, "loc", None), d) or where
        if isinstance(node, (ast.Gen, ast.Sum, ast.Extremum)):   # max/min: like a sum
            inner = binders + ((node.idx, _extent(node.size, sizes), isinstance(node, ast.Gen)),)
            if isinstance(node, ast.Gen):    # materialised in full under the enclosing gens
                entries = math.prod(n for _, n, is_gen in inner if is_gen)
                temps.append(Temporary(name, where, entries, _FLOAT_BYTES * entries))
            elif not compiled and not isinstance(node.body, ast.Sum):
                # a sum nest works on one array over the indices its body uses (the
                # interpreter broadcasts over the others)
                used = ast.free_names(node.body)
                entries = math.prod(n for idx, n, _ in inner if idx in used)
                temps.append(Temporary(name, where, entries, _FLOAT_BYTES * entries, True))
            stack.append((node.body, inner, name, where))
            continue
        if isinstance(node, ast.Box):   # its output, and a working copy of its operands
            shapes = [tuple(_extent(a, sizes) for a in s) for s in node.shapes()]
            out = math.prod(_extent(a, sizes) for a in
                            boxes.out_shape(node.fn, node.part, node.shapes()))
            temps.append(Temporary(name, where, out, _FLOAT_BYTES * out))
            if (node.fn, node.args) not in factored:
                factored.add((node.fn, node.args))
                work = BOX_WORK_COPIES.get(node.fn, 1) * sum(math.prod(s) for s in shapes)
                temps.append(Temporary(name, where, work, _FLOAT_BYTES * work, True))
        if isinstance(node, ast.Let):
            statement = own_loc(node.value.loc, d) or statement_loc(d, node.name) or where
            stack.append((node.value, binders, node.name, statement))
            stack.append((node.body, binders, name, where))
            continue
        for child in _children(node):
            if isinstance(child, ast.Expr):
                stack.append((child, binders, name, where))
    return tuple(temps), output


def own_loc(loc: Loc | None, d: ast.Def) -> Loc | None:
    """`loc` if it lies in the source `d` was parsed from, else None: nodes are hash-consed
    and keep the location of their first occurrence, possibly in another file."""
    if loc is None or d.loc is None or loc.source != d.loc.source or loc.line < d.loc.line:
        return None
    return loc


def statement_loc(d: ast.Def, name: str) -> Loc | None:
    """Where statement `name = ...` / `name[...] = ...` (or `return`) of `d` is written: found
    in the def's text, since the nodes may carry another file's locations."""
    if d.loc is None or d.loc.source is None:
        return None
    lines = d.loc.source.text.splitlines()
    head = re.compile(r"\s*return\b" if name == "return" else
                      rf"\s*{re.escape(name)}\s*(\[|=(?!=))")
    for lineno in range(d.loc.line + 1, len(lines) + 1):
        text = lines[lineno - 1]
        if re.match(r"def\s", text):
            break
        if head.match(text):
            col = len(text) - len(text.lstrip()) + 1
            return Loc(d.loc.source, lineno, col, len(text.rstrip()) + 1)
    return None


def _children(node: ast.Node) -> list[Any]:
    out: list[Any] = []
    for f in node._fields:
        v = getattr(node, f)
        if isinstance(v, tuple):
            out.extend(v)
        else:
            out.append(v)
    return out


def _extent(a: ast.Affine, sizes: Mapping[str, int]) -> int:
    try:
        return max(0, int(a.evaluate(sizes)))
    except KeyError:
        return 0


def check(d: ast.Def, args: Mapping[str, Any], what: str, compiled: bool = False) -> Estimate:
    """The estimate of running `d` on `args` (`compiled`: see `estimate`); a `ResourceError`
    naming the largest statement when it is above `limit()`.  `what`: the function's name,
    for the message."""
    return check_estimate(estimate(d, args, compiled), what)


def check_estimate(est: Estimate, what: str) -> Estimate:
    """`est`, or a `ResourceError` naming its largest statement when it is above `limit()`
    (`check` without the estimate: callers that keep estimates per argument shape)."""
    cap = limit()
    if cap is None or est.total <= cap:
        return est
    big = est.largest()
    where = ""
    if big is not None and big.nbytes >= est.output:
        where = (f"; the largest array is statement {big.name}: {big.entries:,} entries, "
                 f"{format_bytes(big.nbytes)}")
    elif est.output:   # (a compiled kernel may allocate nothing but its result)
        big = Temporary("return", est.output_loc, est.output // _FLOAT_BYTES, est.output)
        where = (f"; the largest array is the result (statement return): {big.entries:,} "
                 f"entries, {format_bytes(big.nbytes)}")
    temps = est.temporary_bytes
    raise ResourceError(
        f"{what} needs about {format_bytes(est.total)} (inputs {format_bytes(est.inputs)}, "
        f"temporaries {format_bytes(temps)}, output {format_bytes(est.output)}), above the "
        f"memory limit of {format_bytes(cap)}{where}.  Use smaller sizes, or raise the limit "
        f"with --max-memory or {ENV_VAR} (e.g. {ENV_VAR}=64G)",
        big.loc if big is not None else None)


__all__ = ["ResourceError", "Estimate", "Temporary", "Allocation", "estimate",
           "relation_members", "box_allocations", "BOX_WORK_COPIES", "check", "check_estimate",
           "limit", "own_loc",
           "set_limit", "parse_amount", "physical_memory", "format_bytes", "ENV_VAR",
           "statement_loc"]
