"""The body of each parallel loop of a generated kernel as a function of its own.

Numba compiles the body of a `prange` loop into a "gufunc" that receives the arrays the body
uses as pointers to their descriptors, whose data pointers, shapes and strides it then reads
from memory.  A store inside the body (a block buffer of a sum, `accumulate.block_loop`; a
row of partial sums) may alias those descriptors for LLVM, which then reloads them and keeps
the inner loops from being optimised as they are in serial code: matfac's relation loop ran
1.45 ms in the parallel kernel on one thread against 0.94 ms serially (issue 14).  Moved into
an `@njit` function that the loop calls with the names it reads,

    for _c7 in prange(_nc7):            def tl_body0(_c7, _len7, _nc7, _part7, n_K, v_U, ...):
        tl_body0(_c7, _len7, ...)           <the loop body, unchanged>

the body sees its arrays as plain arguments, as serial code does (0.94 ms on one thread).
The body computes what it computed inline, operation for operation: arrays are passed by
reference and scalars by value, and a loop qualifies only where the body assigns no name
that it reads before assigning (a reduction or a carried value) and none that code after
the loop reads (the loop's own variables stay private, as `prange` makes them).  Python's
`ast` of the generated code decides both (`kernel_split.flow_of`); names the kernel never
assigns (`np`, `math`, the runtime helpers) stay module globals.
"""
from __future__ import annotations

import ast
import textwrap

from .kernel_split import flow_of

__all__ = ["outline", "BODY"]

BODY = "tl_body"   # the outlined functions: tl_body0, tl_body1, ...


def _is_prange(s: ast.stmt) -> bool:
    return isinstance(s, ast.For) and isinstance(s.iter, ast.Call) and \
        isinstance(s.iter.func, ast.Name) and s.iter.func.id == "prange" and \
        isinstance(s.target, ast.Name)


def _loops(stmts: list[ast.stmt], after: list[list[ast.stmt]]
           ) -> list[tuple[ast.For, list[ast.stmt]]]:
    """The `prange` loops under `stmts` (not inside another loop), each with the statements
    that may run after it (the rest of each enclosing block, innermost first)."""
    out: list[tuple[ast.For, list[ast.stmt]]] = []
    for k, s in enumerate(stmts):
        rest = [stmts[k + 1:], *after]
        if _is_prange(s):
            assert isinstance(s, ast.For)
            out.append((s, [t for block in rest for t in block]))
        elif isinstance(s, ast.If):
            out += _loops(s.body, rest) + _loops(s.orelse, rest)
    return out


def outline(body: list[str], args: list[str], decorator: str, first: int = 0
            ) -> tuple[list[str], list[str]]:
    """Outline the bodies of the `prange` loops of a kernel body (lines indented one level;
    `args`: the kernel's parameters): the functions (each after `decorator`, numbered from
    `first`) and the new body."""
    text = textwrap.dedent("\n".join(body))
    tree = ast.parse(text)
    lines = text.split("\n")
    _, assigned = flow_of(tree.body, set())
    known = assigned | set(args)
    found = _loops(tree.body, [])
    funcs: list[str] = []
    # from the last loop up, so that the earlier loops' line numbers stay valid
    for k, (loop, later) in enumerate(reversed(found)):
        assert isinstance(loop.target, ast.Name)
        var = loop.target.id
        reads, assigns = flow_of(loop.body, {var})
        read_later, _ = flow_of(later, set())
        if reads & assigns or assigns & read_later:
            continue
        params = [var] + sorted((reads & known) - {var})
        name = f"{BODY}{first + len(found) - 1 - k}"
        a, b = loop.body[0].lineno - 1, loop.end_lineno or loop.lineno
        inner = textwrap.dedent("\n".join(lines[a:b])).split("\n")
        funcs[:0] = [decorator, f"def {name}({', '.join(params)}):",
                     *["    " + ln if ln else ln for ln in inner], "", ""]
        pad = lines[a][:len(lines[a]) - len(lines[a].lstrip())]
        lines[a:b] = [f"{pad}{name}({', '.join(params)})"]
    return funcs, ["    " + ln if ln else ln for ln in lines]
