"""Running the compiler on deep programs: a worker thread with a large stack.

The passes are recursive over the AST, whose depth grows with the program: a def of n
statements is a chain of n nested `let`s, a sum of n terms n nested `+`s, n chained defs
inline to n nested bodies.  Rather than rewrite every traversal (parser, checker, elaborator,
passes, interpreter, cost, simplifier, code generators) as an explicit-stack loop, the entry
points (`tensorlang.api`, the CLI and the REPL) run their work through `run`: on a worker
thread whose stack (`STACK_BYTES`) and recursion limit (`RECURSION_LIMIT`) are large enough
for every program within the documented limits of `tensorlang.syntax.limits`, which the
parser enforces with located errors.  Anything that still exhausts the recursion limit (a
program within the source limits that grows deeper in the pipeline) ends in a `LimitError`
at the function concerned, never in a `RecursionError` or a crash (docs/decisions.md,
"Deep programs").

A call made from inside the worker runs inline, so nesting entry points costs nothing; the
context (numpy's error state, warnings) is carried over to the worker.
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading
from typing import Any, Callable, TypeVar

from tensorlang.syntax.errors import Loc
from tensorlang.syntax.limits import too_deep

# Python frames of 3.11 live on the heap; the C stack is used only where a call passes
# through C (hash-consing constructors, comparisons, `map`), at most one C frame (a few
# hundred bytes to a few KiB) per Python frame.  The limit keeps RECURSION_LIMIT frames
# well inside STACK_BYTES, so running out is a RecursionError, never a segfault.  The stack
# is virtual memory: only the pages a deep program touches are ever committed.
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
        threading.stack_size(STACK_BYTES)
        try:
            worker = threading.Thread(target=work, name="tensorlang-deep", daemon=True)
            worker.start()
        except BaseException:
            _leave_locked()
            raise
        finally:
            threading.stack_size(old_size)
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


__all__ = ["run", "entry", "inside", "STACK_BYTES", "RECURSION_LIMIT"]
