"""`Scope`: an immutable mapping that is cheap to extend one name at a time.

The type environment grows by one binding per statement, index and parameter; copying a dict
at each would make checking a def of n statements cost n^2.  A `Scope` shares a flat dict
and keeps the latest bindings (at most `CHUNK`) in a tuple, flattening them into a new dict
only every `CHUNK` extensions: extension and look-up stay O(CHUNK) and the copies cost
n^2 / CHUNK entries in all, which stays negligible for defs within the documented limits.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

CHUNK = 64

_MISSING = object()


class Scope(Mapping[str, Any]):
    __slots__ = ("_flat", "_recent")

    def __init__(self, flat: Mapping[str, Any] | None = None,
                 recent: tuple[tuple[str, Any], ...] = ()) -> None:
        self._flat: Mapping[str, Any] = flat if flat is not None else {}
        self._recent = recent  # oldest first; a later binding hides an earlier one

    def bind(self, name: str, value: Any) -> "Scope":
        """This scope with `name` bound to `value` (hiding any earlier binding)."""
        recent = self._recent + ((name, value),)
        if len(recent) <= CHUNK:
            return Scope(self._flat, recent)
        flat = dict(self._flat)
        flat.update(recent)
        return Scope(flat, ())

    def get(self, name: str, default: Any = None) -> Any:
        for key, value in reversed(self._recent):
            if key == name:
                return value
        return self._flat.get(name, default)

    def __getitem__(self, name: str) -> Any:
        hit = self.get(name, _MISSING)
        if hit is _MISSING:
            raise KeyError(name)
        return hit

    def __contains__(self, name: object) -> bool:
        return self.get(name, _MISSING) is not _MISSING  # type: ignore[arg-type]

    def _merged(self) -> Mapping[str, Any]:
        if not self._recent:
            return self._flat
        out = dict(self._flat)
        out.update(self._recent)
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())

    def items(self):  # type: ignore[override]  # one merge, not a look-up per key
        return self._merged().items()

    def keys(self):  # type: ignore[override]
        return self._merged().keys()

    def copy(self) -> dict[str, Any]:
        return dict(self._merged())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"Scope({dict(self.items())!r})"


__all__ = ["Scope", "CHUNK"]
