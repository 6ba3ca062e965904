"""The body of each parallel loop of a generated kernel as a function of its own.

Numba compiles the body of a `prange` loop into a "gufunc" that receives the arrays the body
uses as pointers to their descriptors, whose data pointers, shapes and strides it then reads
from memory.  A store inside the body (a block buffer of a sum, `accumulate.block_loop`; a
row of partial sums) may alias those descriptors for LLVM, which then reloads them and keeps
the inner loops from being optimised as they are in serial code: matfac's relation loop ran
1.45 ms in the parallel kernel on one thread against 0.94 ms serially (issue 14).  Moved into
an `@njit` function that the loop calls with the names it reads,

    for _c7 in prange(_nc7):            def tl_body0(_chunk_lo, _chunk_hi, _len7, _nc7, ...):
        <the loop body>                     for _c7 in range(_chunk_lo, _chunk_hi):
                                                <the loop body, unchanged>

the body sees its arrays as plain arguments, as serial code does (0.94 ms on one thread).
The loop runs over chunks of consecutive iterations instead (`CHUNKS`), the function over
the iterations of its chunk, so that a short body costs no call per iteration.
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
from typing import Callable

from .kernel_split import flow_of

__all__ = ["outline", "may_share", "BODY"]

BODY = "tl_body"   # the outlined functions: tl_body0, tl_body1, ...
# A parallel loop calls its body once per chunk of consecutive iterations, at most CHUNKS
# chunks (Numba divides them among its threads as it divided the iterations); the function
# runs its chunk's iterations in order.
CHUNKS = 64
CHUNK_LO, CHUNK_HI = "_chunk_lo", "_chunk_hi"


# Expressions whose value may be (a view of) an array they name: a name, a choice, an
# attribute or subscript (`x.T`, `x[:n]`), a method call (`x.reshape(...)`) or these numpy
# functions; any other call (np.empty, tl_matmul, ...) makes a new array.
_VIEWS = ("ascontiguousarray", "asarray", "asfortranarray", "reshape", "transpose", "ravel",
          "squeeze", "view", "swapaxes")


def may_share(tree: ast.Module, vectors: frozenset[str] = frozenset()
              ) -> "Callable[[str], str]":
    """For the names of a kernel body, a representative per group of names whose arrays may
    share memory (assigned one from another, through the expressions above); the kernel's
    parameters are read-only inputs, which may share without harm.  `vectors`: 1-D arrays
    whose subscripts are elements (the constants `tl_c`: `v4 = tl_c[0]` is a float, no
    view of it)."""
    parent: dict[str, str] = {}

    def find(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):   # (a store into an element makes no new name)
            sources = _sources(node.value, vectors)
            for target in node.targets:
                names = [target] if isinstance(target, ast.Name) else \
                    [t for t in getattr(target, "elts", ()) if isinstance(t, ast.Name)]
                for t in names:
                    for src in sources:
                        parent[find(t.id)] = find(src)
    return find


def _sources(e: ast.expr, vectors: frozenset[str]) -> set[str]:
    if isinstance(e, ast.Name):
        return {e.id}
    if isinstance(e, ast.IfExp):
        return _sources(e.body, vectors) | _sources(e.orelse, vectors)
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and \
            e.value.id in vectors and not isinstance(e.slice, ast.Slice):
        return set()
    if isinstance(e, (ast.Attribute, ast.Subscript, ast.Starred)):
        return _sources(e.value, vectors)
    if isinstance(e, (ast.Tuple, ast.List)):
        return set().union(*(_sources(x, vectors) for x in e.elts))
    if isinstance(e, ast.Call):
        f = e.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
            else ""
        if name in _VIEWS:
            out = set().union(*(_sources(a, vectors) for a in e.args)) if e.args else set()
            return out | (_sources(f.value, vectors) if isinstance(f, ast.Attribute) and
                          not (isinstance(f.value, ast.Name) and f.value.id == "np") else set())
    return set()


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


def outline(body: list[str], args: list[str], decorator: str, first: int = 0,
            distinct: str = "", vectors: frozenset[str] = frozenset()
            ) -> tuple[list[str], list[str]]:
    """Outline the bodies of the `prange` loops of a kernel body (lines indented one level;
    `args`: the kernel's parameters): the functions (each after `decorator`, numbered from
    `first`; after `distinct` when given and no two of its arguments may share memory,
    `may_share` with `vectors`) and the new body."""
    text = textwrap.dedent("\n".join(body))
    tree = ast.parse(text)
    lines = text.split("\n")
    _, assigned = flow_of(tree.body, set())
    known = assigned | set(args)
    group = may_share(tree, vectors)
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
        params = sorted((reads & known) - {var})
        groups = [group(q) for q in params]
        deco = distinct if distinct and len(set(groups)) == len(groups) else decorator
        number = first + len(found) - 1 - k
        name = f"{BODY}{number}"
        a, b = loop.body[0].lineno - 1, loop.end_lineno or loop.lineno
        inner = textwrap.dedent("\n".join(lines[a:b])).split("\n")
        bounds = [ast.unparse(x) for x in loop.iter.args]   # type: ignore[attr-defined]
        head = loop.lineno - 1
        pad = lines[head][:len(lines[head]) - len(lines[head].lstrip())]
        if len(bounds) in (1, 2) and not loop.iter.keywords:   # type: ignore[attr-defined]
            # a chunk of consecutive iterations per call: a call per iteration cost more
            # than a short body (deconv's K = 5 dot products: 47 -> 17 us at N = 2000)
            lo, hi = ("0", bounds[0]) if len(bounds) == 1 else bounds
            n, c, t = f"_pn{number}", f"_pk{number}", f"_pc{number}"
            funcs[:0] = [deco, f"def {name}({', '.join([CHUNK_LO, CHUNK_HI, *params])}):",
                         f"    for {var} in range({CHUNK_LO}, {CHUNK_HI}):",
                         *["        " + ln if ln else ln for ln in inner], "", ""]
            lines[head:b] = [
                f"{pad}{n} = max(0, {hi} - ({lo}))",
                f"{pad}{c} = max(1, min({CHUNKS}, {n}))",
                f"{pad}for {t} in prange({c}):",
                f"{pad}    {name}({lo} + ({t} * {n}) // {c}, {lo} + (({t} + 1) * {n}) // {c}"
                f"{''.join(', ' + q for q in params)})"]
        else:
            funcs[:0] = [deco, f"def {name}({', '.join([var, *params])}):",
                         *["    " + ln if ln else ln for ln in inner], "", ""]
            lines[a:b] = [f"{pad}    {name}({', '.join([var, *params])})"]
    return funcs, ["    " + ln if ln else ln for ln in lines]
