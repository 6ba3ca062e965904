"""The standard prelude (docs/linalg.md): `prelude.tl`, ordinary tensorlang defs that every
module may call without importing them (`gemm`, `gemv`, `syrk`, `trmm`, `sumlogdiag`,
`logdet`, `sqnorm`).  A module's own def of the same name shadows the prelude's.  The file is
parsed and checked once, on the first call of a name it defines."""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

from tensorlang.ir.ast import Def

_LOADING = False


@lru_cache(maxsize=1)
def defs() -> dict[str, Def]:
    """The prelude's checked core defs by name."""
    global _LOADING
    from tensorlang.check.typecheck import check_module
    from tensorlang.syntax.parser import parse_module

    text = resources.files("tensorlang.check").joinpath("prelude.tl").read_text()
    _LOADING = True
    try:
        checked = check_module(parse_module(text, "<prelude>"), "<prelude>")
    finally:
        _LOADING = False
    return dict(checked.defs)


def names() -> frozenset[str]:
    text = resources.files("tensorlang.check").joinpath("prelude.tl").read_text()
    return frozenset(line.split()[1].split("(")[0] for line in text.splitlines()
                     if line.startswith("def "))


def lookup(name: str) -> Def | None:
    """The prelude def `name`, or None (also while the prelude itself is being checked)."""
    if _LOADING or name not in names():
        return None
    return defs().get(name)


__all__ = ["defs", "names", "lookup"]
