"""Generated code for the accumulator of a sum: blocked, with compensated block totals.

A left-to-right loop `acc += term` over n terms has a relative error up to n ulps (1e-9 at
n = 10^7).  The generated kernels instead add the terms into a *block* partial sum, `BLOCK`
terms at a time (the plain add of the innermost loop: one add and an integer count per
term), and fold each block total into a running total with Neumaier's compensated addition
(a few flops per block).  The error is O(BLOCK) ulps from the blocks plus O(1) from the
compensated total, for any n: at least as accurate as numpy's pairwise sum in practice.

An accumulator named `acc` is four locals: `acc` (the open block), `acc_n` (its terms),
`acc_s` and `acc_c` (the total and its compensation).  It works under any loop nest, guard
or driver (the count, not the loop structure, closes blocks), and the result does not
depend on the number of threads.
"""
from __future__ import annotations

BLOCK = 128   # terms per block: numpy's pairwise sum also adds runs of 128 terms in a loop


def init(acc: str) -> list[str]:
    """An empty accumulator."""
    return [f"{acc} = 0.0", f"{acc}_n = 0", f"{acc}_s = 0.0", f"{acc}_c = 0.0"]


# The compensated addition as a function of the runtime (`numba_rt.tl_neumaier`: the same
# operations), called instead of inlining its six lines: a kernel with many sums compiles
# faster (issue 16: 75 sums, 150 merges, cost Numba ~10% of a large kernel's compile time).
NEUMAIER = "tl_neumaier"


def merge(acc: str, value: str, indent: str, call: bool = False) -> list[str]:
    """Add `value` (a simple name or literal) to the total, compensated (Neumaier); `call`:
    through the runtime helper `NEUMAIER` rather than inline."""
    s, c, t = f"{acc}_s", f"{acc}_c", f"{acc}_t"
    if call:
        return [f"{s}, {c} = {NEUMAIER}({s}, {c}, {value})"]
    return [f"{t} = {s} + {value}",
            f"if abs({s}) >= abs({value}):",
            f"{indent}{c} += ({s} - {t}) + {value}",
            "else:",
            f"{indent}{c} += ({value} - {t}) + {s}",
            f"{s} = {t}"]


def neumaier(s: float, c: float, v: float) -> tuple[float, float]:
    """What `merge` computes, as a function: the new (total, compensation)."""
    t = s + v
    if abs(s) >= abs(v):
        c += (s - t) + v
    else:
        c += (v - t) + s
    return t, c


def add(acc: str, value: str, indent: str, call: bool = False) -> list[str]:
    """Add one term `value` (any expression): into the block, closing it when full."""
    return [f"{acc} += {value}",
            f"{acc}_n += 1",
            f"if {acc}_n == {BLOCK}:",
            *[indent + ln for ln in merge(acc, acc, indent, call)],
            f"{indent}{acc} = 0.0",
            f"{indent}{acc}_n = 0"]


def result(acc: str, indent: str, call: bool = False) -> tuple[list[str], str]:
    """Lines that close the open block, and the expression of the sum.  A non-finite total
    (an inf or nan term: it never turns finite again) is the plain total, as a loop's sum
    would be; the compensation is nan there (inf - inf)."""
    s, c = f"{acc}_s", f"{acc}_c"
    return merge(acc, acc, indent, call), f"({s} + {c} if {s} - {s} == 0.0 else {s})"


def extreme_init(acc: str, op: str) -> list[str]:
    """An empty max (min) reduction: -inf (+inf), the value of an empty range (SPEC 12)."""
    return [f"{acc} = {'-' if op == 'max' else ''}math.inf"]


def extreme_update(acc: str, op: str, value: str, indent: str) -> list[str]:
    """Take `value` into the running max (min).  A NaN term makes the result NaN, as numpy's
    and JAX's max do (`v != v` admits it; no comparison with a NaN total succeeds after)."""
    t = f"{acc}_v"
    cmp = ">" if op == "max" else "<"
    return [f"{t} = {value}", f"if {t} {cmp} {acc} or {t} != {t}:", f"{indent}{acc} = {t}"]


__all__ = ["BLOCK", "NEUMAIER", "init", "merge", "neumaier", "add", "result", "extreme_init",
           "extreme_update"]
