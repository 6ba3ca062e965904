"""Error types with source locations.

Every user-facing error is a `TLError`; the CLI prints `str(err)` (file:line:col, the source
line and a caret) and never a Python traceback.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Control characters (terminal escape sequences among them) are shown escaped, never echoed:
# a comment or a file name must not be able to drive the user's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character except tab and newline written as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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
        # Escaping widens control characters: measure the caret on the escaped text, and
        # expand tabs so that the caret lines up in any terminal.
        before = printable(text[:self.col - 1]).expandtabs()
        marked = printable(text[self.col - 1:self.col - 1 + width]).expandtabs()
        line = printable(text).expandtabs()
        return f"    {line}\n    {' ' * len(before)}{'^' * max(1, len(marked))}"


def diagnostic(kind: str, message: str, loc: Loc | None) -> str:
    """`file:line:col: kind: message`, then the source line with a caret under the place."""
    message = printable(message)
    if loc is None:
        return f"{kind}: {message}"
    caret = loc.caret()
    head = f"{printable(str(loc))}: {kind}: {message}"
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


class ResourceError(TLError):
    """A run refused before it starts: it would need more memory (or input) than allowed."""

    kind = "resource error"


class LimitError(ResourceError):
    """A program beyond a documented limit of the compiler (`tensorlang.syntax.limits`)."""

    kind = "limit exceeded"
