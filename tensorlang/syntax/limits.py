"""The documented limits on the shape of a program (docs/tutorial.md, "Limits").

The compiler's traversals are recursive over the expression tree; they run on a worker with a
large stack (`tensorlang.deep`), so what bounds them is not Python's default recursion limit
but these limits, checked on every def before anything else walks it (`check_def`), with an
error at the place that exceeds one:

  * `MAX_DEPTH`: the depth of a def's expression tree.  Brackets, operators, binders (`gen`,
    `sum`, `exists`), Iverson brackets and calls each add a level, and so do each statement
    of a def (a statement holds the rest of the body) and each term of a sum or product
    (`a + b + c` is `(a + b) + c`).  The limit applies to the def as written and to the def
    after the defs it calls are inlined.  A def of 10,000 statements, each a sum of 10,000
    terms, is within it.
  * `MAX_BINDERS`: index variables (`gen`, `sum` and `exists` binders) in scope at once,
    inlined calls included.  The interpreter gives each an array axis, and numpy arrays have
    at most 32 axes in the operations it uses.
"""
from __future__ import annotations

from typing import Any

from tensorlang.ir.ast import Def, Exists, Gen, Node, Sum
from tensorlang.syntax.errors import LimitError, Loc

MAX_DEPTH = 25_000
MAX_BINDERS = 32

LIMITS_DOC = "see 'Limits' in docs/tutorial.md"


def too_deep(where: Loc | None) -> LimitError:
    """The error of a program deeper than the compiler's stack allows (a program within
    `MAX_DEPTH` as written that grows deeper in the pipeline)."""
    return LimitError(f"program too deep: tensorlang processes at most {MAX_DEPTH:,} levels "
                      f"of nesting, statements and terms included, after inlining the defs "
                      f"it calls ({LIMITS_DOC})", where)


def check_def(d: Def, what: str = "") -> None:
    """A `LimitError` at the first place of `d` beyond `MAX_DEPTH` or `MAX_BINDERS`; `what`
    says which form of the def is checked (e.g. "after inlining")."""
    where = d.loc
    source = where.source if where is not None else None
    suffix = f" {what}" if what else ""
    # (node, depth, binders in scope, nearest location): an explicit stack, no recursion.
    # Nodes are shared (hash-consing): a node is walked again only at a greater depth or
    # with more binders in scope.
    stack: list[tuple[Any, int, int, Loc | None]] = [(d.body, 1, 0, where)]
    seen: dict[tuple[int, int], int] = {}
    while stack:
        node, depth, binders, loc = stack.pop()
        own = node.loc
        if own is not None and (source is None or own.source == source):
            loc = own
        if depth > MAX_DEPTH:
            raise LimitError(f"nested too deeply{suffix}: more than {MAX_DEPTH:,} levels of "
                             f"nesting (statements and terms count one level each; "
                             f"{LIMITS_DOC})", loc)
        if isinstance(node, (Gen, Sum, Exists)):
            binders += 1
            if binders > MAX_BINDERS:
                raise LimitError(f"too many nested index variables{suffix}: with {node.idx}, "
                                 f"{binders} are in scope; the limit is {MAX_BINDERS} "
                                 f"({LIMITS_DOC})", loc)
        key = (id(node), binders)
        if seen.get(key, 0) >= depth:
            continue
        seen[key] = depth
        for name in node._fields:
            value = getattr(node, name)
            for child in value if isinstance(value, tuple) else (value,):
                if isinstance(child, Node):
                    stack.append((child, depth + 1, binders, loc))


__all__ = ["MAX_DEPTH", "MAX_BINDERS", "LIMITS_DOC", "check_def", "too_deep"]
