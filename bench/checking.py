"""Checking time against program size (issue 13): `tl bench --checking`.

Parses and type-checks (`tl.parse`: parse, check, elaborate) generated programs of 1,000 to
10,000 statements, of as many terms, and of 100 to 1,000 chained defs (each calls the one
before; `tensorlang.testing.DEEP_PROGRAMS`) and reports the time per statement / term / def.  Checking is linear when that time stays roughly
constant across the sizes: `run()` records the ratio of the largest size's time per unit to
the smallest's (`spread`), which `LINEAR_SPREAD` bounds.  Each size is timed in this process,
best of `repeat` (nodes are hash-consed, so every repetition renames its variables to check
a program not seen before).
"""
from __future__ import annotations

import time
from typing import Any, Callable

SIZES = (1000, 2000, 5000, 10000)
LINEAR_SPREAD = 2.0  # time per unit at 10,000 over that at 1,000
# family -> divisor of SIZES (a def inlines every def before it: 1,000 defs are the
# issue's size, and the check must stay linear in them, not in the inlined size)
FAMILIES = {"statements": 1, "terms": 1, "defs": 10}


def _timed(text: str) -> float:
    import tensorlang as tl

    t0 = time.perf_counter()
    tl.parse(text)
    return time.perf_counter() - t0


def run(sizes: tuple[int, ...] = SIZES, repeat: int = 2,
        progress: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """{"sizes": [...], "<family>": {"seconds": [...], "per_unit_us": [...], "spread": r}}."""
    from tensorlang import testing

    _timed(testing.long_sum(2).replace("x", "warm"))  # the grammar, loaded once
    out: dict[str, Any] = {"sizes": list(sizes)}
    for family, divisor in FAMILIES.items():
        make = testing.DEEP_PROGRAMS[family]
        seconds = []
        units = [max(1, n // divisor) for n in sizes]
        for n in units:
            best = min(_timed(make(n).replace("x", f"x{r}").replace("N", f"N{r}"))
                       for r in range(repeat))
            seconds.append(best)
            progress(f"checking {family} n={n}: {best:.2f} s")
        per = [s / n * 1e6 for s, n in zip(seconds, units)]
        out[family] = {"units": units, "seconds": seconds, "per_unit_us": per,
                       "spread": per[-1] / per[0]}
    return out


def describe(data: dict[str, Any]) -> str:
    """The table `tl bench --checking` prints."""
    lines = ["checking time (tl.parse: parse + type check + elaborate), per statement/term/def"]
    for family in FAMILIES:
        rec = data.get(family)
        if rec is None:   # a record from before the family was measured
            continue
        units = rec.get("units", data["sizes"])
        lines.append(f"{family + ' n':<12}" + "".join(f"{n:>12,}" for n in units)
                     + f"{'spread':>9}")
        lines.append(f"{'  seconds':<12}" + "".join(f"{s:>12.2f}" for s in rec["seconds"]))
        lines.append(f"{'  us/unit':<12}" + "".join(f"{u:>12.0f}" for u in rec["per_unit_us"])
                     + f"{rec['spread']:>9.2f}")
    return "\n".join(lines)


__all__ = ["run", "describe", "SIZES", "LINEAR_SPREAD", "FAMILIES"]
