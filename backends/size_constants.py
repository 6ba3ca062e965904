"""Small sizes compiled into a kernel as constants (JIT calls only).

XLA compiles every shape into its kernel; a generated kernel takes its sizes as arguments, so
a loop over `K = 5` (matfac's rank, nbody's coordinates, an embedding's width) runs with a
trip count known only at run time: LLVM neither unrolls it nor drops the alias checks and
remainder of a vectorised 5-iteration loop.  Measured on matfac's gradient at N = 1000,
K = 5, one thread: 2.2 ms generic, 1.45 ms with `n_K = 5` in the body (issue 14).

`with_constant_sizes(source, {"n_K": 5})` is the kernel module with `n_K = 5` as the first
statement of every function that takes `n_K` (the parallel loops' bodies, below): the same
code, reading the same values in the same order (constant trip counts change no
floating-point operation, only the loop control), so a specialised kernel's results are the
generic kernel's bit for bit.  A function that calls
a transcendental helper (`tl_tanh`, `tl_exp`, ...) keeps its sizes as arguments: LLVM unrolls
a loop of constant trip count into copies of the long straight-line body, which then no
longer vectorise (gnn's gradient map `2 (tanh(s) - T) dtanh(s)` over `[V, 8]`: 235 us with
the trip count an argument, 547 us with it constant).  `tl_kernel` itself keeps them too: its
loops are the parallel ones over chunks, whose bodies are functions of their own
(prange_bodies.py), and with the sizes constant there gnn's gradient took 0.94 ms against
the generic kernel's 0.74 (0.69 with the constants in the bodies alone).  `CompiledProgram`
uses it for sizes of at most `SMALL` in calls large enough for the JIT kernel (a small call
runs on the AOT image, whose compile would not pay), for at most `VARIANTS` size tuples per
program; each variant is a kernel module of its own in the disk cache (docs/caching.md).
"""
from __future__ import annotations

import ast
import re
from typing import Mapping

__all__ = ["with_constant_sizes", "SMALL", "VARIANTS"]

KERNEL = "tl_kernel"
SMALL = 16      # a size up to this value is compiled in (a loop this short unrolls)
VARIANTS = 4    # specialised kernels per compiled program; other sizes run the generic one
# the helpers whose bodies are long straight-line code (numba_rt: exp, log and tanh inlined)
LONG_HELPERS = re.compile(r"\btl_(exp|log|sin|cos|tan|tanh|sigmoid|softplus|pow|dtanh|"
                          r"dsigmoid|dtan|d2tanh|d2sigmoid|d2tan)\(")


def with_constant_sizes(source: str, sizes: Mapping[str, int]) -> str:
    """`source` with `name = value` first in every function but `tl_kernel` that takes one
    of `sizes`' names and calls none of the `LONG_HELPERS`."""
    lines = source.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef) or node.name == KERNEL or \
                LONG_HELPERS.search("".join(lines[node.lineno - 1:node.end_lineno])):
            continue
        fixed = [a.arg for a in node.args.args if a.arg in sizes]
        if fixed:
            first = node.body[0]
            pad = " " * first.col_offset
            inserts.append((first.lineno - 1, "".join(
                f"{pad}{name} = {int(sizes[name])}   # size compiled in\n" for name in fixed)))
    for at, text in sorted(inserts, reverse=True):
        lines.insert(at, text)
    return "".join(lines)
