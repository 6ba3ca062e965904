"""Split a long generated kernel into parts that Numba compiles one by one (issue 16).

Numba's compile time grows faster than linearly with the size of one function: the 3400-line
kernel of the Hessian of a 50-term expression took many minutes, almost all of it in Numba.
`split_body` cuts the kernel's body at top-level statements into parts of about `part_lines`
lines; each part becomes its own `@njit` function

    def tl_part3(v_v5, v_v6, n_N):      # what it reads that earlier code defined
        ...                             # the statements, unchanged
        return (v_v7, v_v9,)            # what it defines that later code reads

and the kernel calls the parts in order: `(v_v7, v_v9,) = tl_part3(v_v5, v_v6, n_N)`.  Arrays
are passed by reference and scalars by value, so the parts compute exactly what the single
function did, operation for operation (the same results, bit for bit).

Which names a part reads and defines comes from Python's own `ast` of the generated code, with
a small "definitely assigned" analysis: a name is a parameter when the part may read it before
assigning it; it is returned when the part assigns it and a later part or the final `return`
reads it.  Names that no code of the kernel assigns (`np`, `math`, `prange`, `tl_sin`, ...)
stay module globals.
"""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field

__all__ = ["split_body", "Part", "flow_of"]


@dataclass
class Part:
    lines: list[str]                       # the statements' lines, indented one level
    params: list[str] = field(default_factory=list)
    returns: list[str] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)        # may read before assigning
    assigns: set[str] = field(default_factory=set)      # assigns anywhere
    definite: set[str] = field(default_factory=set)     # assigned on every path


class _Flow:
    """Reads-before-assignment and definite assignment over a list of statements."""

    def __init__(self) -> None:
        self.reads: set[str] = set()
        self.assigns: set[str] = set()

    def block(self, stmts: list[ast.stmt], defined: set[str]) -> set[str]:
        defined = set(defined)
        for s in stmts:
            defined = self.stmt(s, defined)
        return defined

    def expr(self, e: ast.AST | None, defined: set[str]) -> None:
        if e is None:
            return
        for node in ast.walk(e):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                    and node.id not in defined:
                self.reads.add(node.id)

    def target(self, t: ast.AST, defined: set[str]) -> set[str]:
        """Evaluate an assignment target; the names it binds."""
        if isinstance(t, ast.Name):
            self.assigns.add(t.id)
            return {t.id}
        if isinstance(t, (ast.Tuple, ast.List)):
            out: set[str] = set()
            for x in t.elts:
                out |= self.target(x, defined)
            return out
        self.expr(t, defined)   # `a[i] = ...` reads `a` and `i`
        return set()

    def stmt(self, s: ast.stmt, defined: set[str]) -> set[str]:
        if isinstance(s, ast.Assign):
            self.expr(s.value, defined)
            bound: set[str] = set()
            for t in s.targets:
                bound |= self.target(t, defined)
            return defined | bound
        if isinstance(s, ast.AugAssign):
            self.expr(s.value, defined)
            if isinstance(s.target, ast.Name):
                if s.target.id not in defined:
                    self.reads.add(s.target.id)
                self.assigns.add(s.target.id)
                return defined | {s.target.id}
            self.expr(s.target, defined)
            return defined
        if isinstance(s, (ast.For, ast.While)):
            if isinstance(s, ast.For):
                self.expr(s.iter, defined)
                inner = defined | self.target(s.target, defined)
            else:
                self.expr(s.test, defined)
                inner = set(defined)
            self.block(s.body, inner)
            self.block(s.orelse, defined)
            return defined          # the body may not run
        if isinstance(s, ast.If):
            self.expr(s.test, defined)
            a = self.block(s.body, defined)
            b = self.block(s.orelse, defined)
            return a & b
        if isinstance(s, (ast.Expr, ast.Return)):
            self.expr(s.value, defined)
            return defined
        if isinstance(s, (ast.Break, ast.Continue, ast.Pass)):
            return defined
        raise ValueError(f"kernel_split: unexpected statement {type(s).__name__}")


def flow_of(stmts: list[ast.stmt], defined: set[str]) -> tuple[set[str], set[str]]:
    """The names `stmts` may read before assigning them (`defined`: assigned already), and
    every name they assign."""
    flow = _Flow()
    flow.block(stmts, defined)
    return flow.reads, flow.assigns


# A line of straight-line code (an assignment without a conditional expression or `and`/`or`)
# weighs this much of a line in a part's length: Numba compiles it in about a millisecond,
# where each branch costs it 10-30 ms, growing with the branches of the function (measured:
# 75 `a if c else b` reads in one function 1.2 s, 300 in one 10 s; 2,500 plain assignments
# 3 s).  Comment lines weigh nothing.
STRAIGHT = 0.25


def _straight(s: ast.stmt) -> bool:
    return isinstance(s, (ast.Assign, ast.AugAssign)) and not any(
        isinstance(node, (ast.IfExp, ast.BoolOp)) for node in ast.walk(s))


def split_body(body: list[str], args: list[str], part_lines: float
               ) -> tuple[list[Part], list[str]] | None:
    """Cut a kernel body (lines indented one level, ending in its `return`) into parts of
    about `part_lines` lines (straight-line statements weigh `STRAIGHT` a line, comments
    nothing).  Returns the parts and the new body (calls, then the return),
    or None when there is nothing to split (fewer than two parts)."""
    text = textwrap.dedent("\n".join(body))
    tree = ast.parse(text)
    stmts = tree.body
    if not stmts or not isinstance(stmts[-1], ast.Return):
        raise ValueError("kernel_split: the body must end in its return statement")
    final = stmts[-1]
    lines = text.split("\n")
    # Group top-level statements; comment lines go with the statement after them.
    groups: list[tuple[int, int, list[ast.stmt]]] = []
    start, current, weight = 0, [], 0.0
    for s in stmts[:-1]:
        current.append(s)
        end = s.end_lineno or s.lineno
        weight += (end - s.lineno + 1) * (STRAIGHT if _straight(s) else 1.0)
        if weight >= part_lines:
            groups.append((start, end, current))
            start, current, weight = end, [], 0.0
    if current:
        groups.append((start, (stmts[-1].lineno - 1), current))
    if len(groups) < 2:
        return None
    parts: list[Part] = []
    for a, b, group in groups:
        flow = _Flow()
        definite = flow.block(group, set())
        parts.append(Part(["    " + ln if ln else ln for ln in lines[a:b]],
                          reads=flow.reads, assigns=flow.assigns, definite=definite))
    ret_flow = _Flow()
    ret_flow.stmt(final, set())
    # From the last part back: what later code reads, what this part must return and take.
    known = set(args)
    defined_before: list[set[str]] = []
    for p in parts:
        defined_before.append(set(known))
        known |= p.assigns
    needed = set(ret_flow.reads)
    for k in range(len(parts) - 1, -1, -1):
        p = parts[k]
        p.returns = sorted(p.assigns & needed)
        # a returned name the part assigns only on some paths must come in as well
        takes = (p.reads | (set(p.returns) - p.definite)) & defined_before[k]
        p.params = sorted(takes)
        needed = (needed - p.definite) | set(p.params)
    new_body: list[str] = []
    for k, p in enumerate(parts):
        call = f"tl_part{k}({', '.join(p.params)})"
        if p.returns:
            new_body.append(f"    ({', '.join(p.returns)},) = {call}")
        else:
            new_body.append(f"    {call}")
    new_body += ["    " + ln if ln else ln for ln in lines[final.lineno - 1:]]
    for p in parts:
        if p.returns:
            p.lines.append(f"    return ({', '.join(p.returns)},)")
    return parts, new_body
