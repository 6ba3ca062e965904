"""The documented limits on the shape of a program (docs/tutorial.md, "Limits").

The compiler's traversals are recursive over the expression tree; they run on a worker with a
large stack (`run`, below), so what bounds them is not Python's default recursion limit
but these limits, checked on every def before anything else walks it (`check_def`), with an
error at the place that exceeds one:

  * `MAX_DEPTH`: the depth of a def's expression tree.  Brackets, operators, binders (`gen`,
    `sum`, `exists`), Iverson brackets and calls each add a level, and so do each statement
    of a def (a statement holds the rest of the body) and each term of a sum or product
    (`a + b + c` is `(a + b) + c`).  The limit applies to the def as written and to the def
    after the defs it calls are inlined.  A def of 10,000 statements, each a sum of 10,000
    terms, is within it.
  * `MAX_SIMPLIFY_STATEMENTS`: the e-graph simplifier (SPEC 7) takes programs of at most
    this many Tensor-SSA statements; a longer one runs as converted, unsimplified, and the
    simplifier's report says so (its extraction keeps each class's sub-DAG, quadratic in a
    chain of statements: 10,000 statements took over 20 GB).  Not an error.
  * `MAX_BINDERS`: index variables (`gen`, `sum` and `exists` binders) in scope at once,
    inlined calls included.  The interpreter gives each an array axis, and numpy arrays have
    at most 32 axes in the operations it uses.

Running deep: the entry points (`tensorlang.api`, the CLI, the REPL and this package's
parser) run their work through `run`, on a worker thread whose stack (`STACK_BYTES`) and
recursion limit (`RECURSION_LIMIT`) hold every program within these limits.  A call made
on the worker runs inline; the caller's context (numpy's error state) is carried over.
Anything that still exhausts the recursion limit (a program within the limits as written
that grows deeper in the pipeline) ends in a `LimitError` at the def concerned, never in a
`RecursionError` or a crash (docs/decisions.md, "Deep programs").
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading
from typing import Any, Callable, TypeVar

from tensorlang.ir.ast import Def, Exists, Gen, Sum, children, heights
from tensorlang.syntax.errors import LimitError, Loc

MAX_DEPTH = 25_000
MAX_BINDERS = 32
MAX_SIMPLIFY_STATEMENTS = 2_000

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
    first = where.line if where is not None else 0  # inlined callees are written earlier
    suffix = f" {what}" if what else ""
    # (node, depth, binders in scope, nearest location): an explicit stack, no recursion.
    # Nodes are shared (hash-consing): a node is walked again only at a greater depth or
    # with more binders in scope.
    stack: list[tuple[Any, int, int, Loc | None]] = [(d.body, 1, 0, where)]
    seen: dict[tuple[int, int], int] = {}
    while stack:
        node, depth, binders, loc = stack.pop()
        own = node.loc
        if own is not None and (source is None or own.source == source and own.line >= first):
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
        for child in children(node):
            levels, inner = heights(child)
            if depth + levels <= MAX_DEPTH and binders + inner <= MAX_BINDERS:
                continue   # within both limits all the way down (measured once per node)
            stack.append((child, depth + 1, binders, loc))


# ---------------------------------------------------------------------------------------------
# The deep runner

# Python frames of 3.11 live on the heap; the C stack is used only where a call passes
# through C (hash-consing constructors, comparisons, `map`), at most one C frame (a few
# hundred bytes to a few KiB) per Python frame.  The limit keeps RECURSION_LIMIT frames
# well inside STACK_BYTES, so running out is a RecursionError, never a segfault.  The stack
# is virtual memory: only the pages a deep program touches are ever committed.
# Python >= 3.12 also counts the C frames of a recursion against a fixed limit that
# `sys.setrecursionlimit` does not raise (about 500 levels on 3.12): recursive walks must not
# pass through a C call at each level (a generator consumed by `frozenset.union`, `join`,
# `any`; `pickle`), so they use list comprehensions (inlined since 3.12) and the cache
# pickles node by node (`cache.dump_flat`).  What still exhausts it is a `LimitError`.
STACK_BYTES = 1 << 30
RECURSION_LIMIT = 150_000

_LOCAL = threading.local()
_LOCK = threading.Lock()  # stack size and recursion limit are process-wide settings
_RUNNING = [0, 0]         # workers running, the recursion limit before the first started

T = TypeVar("T")


def inside() -> bool:
    """Whether the caller already runs on a deep worker."""
    return getattr(_LOCAL, "deep", False)


def run(fn: Callable[..., T], *args: Any, where: Loc | None = None, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a deep worker (inline when already on one); exceptions
    propagate to the caller, a `RecursionError` as a `LimitError` located at `where`."""
    if inside():
        return _guarded(fn, args, kwargs, where)
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}

    def work() -> None:
        _LOCAL.deep = True
        try:
            outcome["value"] = context.run(_guarded, fn, args, kwargs, where)
        except BaseException as err:  # noqa: BLE001 -- re-raised on the caller's thread
            outcome["error"] = err
        finally:
            _leave()

    with _LOCK:
        # The recursion limit is process-wide (the depth is counted per thread): raised while
        # any worker runs, restored when the last one ends.
        if _RUNNING[0] == 0:
            _RUNNING[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_RUNNING[1], RECURSION_LIMIT))
        _RUNNING[0] += 1
        old_size = threading.stack_size()
        worker = threading.Thread(target=work, name="tensorlang-deep", daemon=True)
        try:
            threading.stack_size(STACK_BYTES)
            worker.start()
        except RuntimeError:  # "can't start new thread": a memory rlimit refuses the stack
            worker = None
        finally:
            threading.stack_size(old_size)
        if worker is None:
            _leave_locked()
    if worker is None:  # run here, at the default depth: a RecursionError is a LimitError
        return _guarded(fn, args, kwargs, where)
    while worker.is_alive():  # a timed join keeps Ctrl-C working on the caller's thread
        worker.join(0.25)
    if "error" in outcome:
        err = outcome["error"]
        raise err.with_traceback(err.__traceback__)
    return outcome["value"]


def _leave() -> None:
    with _LOCK:
        _leave_locked()


def _leave_locked() -> None:
    _RUNNING[0] -= 1
    if _RUNNING[0] == 0:
        sys.setrecursionlimit(_RUNNING[1])


def _guarded(fn: Callable[..., T], args: tuple, kwargs: dict, where: Loc | None) -> T:
    try:
        return fn(*args, **kwargs)
    except RecursionError:
        raise too_deep(where) from None


def entry(where: Callable[..., Loc | None] | None = None) -> Callable[[Callable[..., T]],
                                                                      Callable[..., T]]:
    """Decorator: run the function through `run`; `where(*args, **kwargs)` locates a
    `LimitError` (e.g. at the def a method belongs to)."""
    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def deep_fn(*args: Any, **kwargs: Any) -> T:
            loc = where(*args, **kwargs) if where is not None else None
            return run(fn, *args, where=loc, **kwargs)
        return deep_fn
    return wrap


__all__ = ["MAX_DEPTH", "MAX_BINDERS", "MAX_SIMPLIFY_STATEMENTS", "LIMITS_DOC", "check_def", "too_deep", "run", "entry",
           "inside", "STACK_BYTES", "RECURSION_LIMIT"]
