"""Error types with source locations.

Every user-facing error is a `TLError`; the CLI prints `str(err)` (file:line:col, the source
line and a caret) and never a Python traceback.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A named source text, kept so that errors can quote the offending line."""

    name: str
    text: str

    def line(self, lineno: int) -> str:
        lines = self.text.splitlines()
        return lines[lineno - 1] if 1 <= lineno <= len(lines) else ""


@dataclass(frozen=True)
class Loc:
    """1-based line and column of a construct in a `Source`."""

    source: Source | None
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        name = self.source.name if self.source is not None else "<input>"
        return f"{name}:{self.line}:{self.col}"

    def caret(self) -> str:
        """The source line with a caret (or a run of carets) under this location."""
        if self.source is None:
            return ""
        text = self.source.line(self.line)
        if not text:
            return ""
        width = 1
        if self.end_col is not None and self.end_col > self.col:
            width = self.end_col - self.col
        return f"    {text}\n    {' ' * (self.col - 1)}{'^' * width}"


def diagnostic(kind: str, message: str, loc: Loc | None) -> str:
    """`file:line:col: kind: message`, then the source line with a caret under the place."""
    if loc is None:
        return f"{kind}: {message}"
    caret = loc.caret()
    head = f"{loc}: {kind}: {message}"
    return f"{head}\n{caret}" if caret else head


class TLError(Exception):
    """Base class of every error tensorlang reports to a user."""

    kind = "error"

    def __init__(self, message: str, loc: Loc | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        return diagnostic(self.kind, self.message, self.loc)


class ParseError(TLError):
    kind = "parse error"


class TypeCheckError(TLError):
    kind = "type error"


class ShapeError(TLError):
    kind = "shape error"


class NotYetSupported(TLError):
    kind = "not supported"
