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

The counted form (`add`: an add, a count and a branch per term) keeps LLVM from
vectorising the loop, and its one dependency chain through `acc` serialises a body of
logs or divisions.  Where the innermost loop is a plain range or a walk of a relation's
coordinates (`block_loop`; the emitter prints the member's reads at the top of both the
block body and the short loop), the sum is instead a nested loop: blocks of `BLOCK` consecutive iterations, counted from the loop's
start, whose terms are first stored into a buffer on the stack (a loop without a
dependency between iterations, which LLVM vectorises), then added by `block_sum` in
`LANES` interleaved partial sums (a fixed order: the same bits on every machine).  A full
block's total is merged into the compensated total; a shorter one (a loop's last, or a
loop shorter than a block) is added into the open block like one big term, which is then
merged once it holds `BLOCK` terms or more (an open block then holds fewer than
2 BLOCK terms).  A loop shorter than `SHORT` (`SHORT_CHEAP` when the term has no call and
no division) adds its terms one by one, as does one whose start is negative.
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


LANES = 8   # partial sums of `block_sum` (written out there): enough independent adds


def block_sum(buf, n):  # type: ignore[no-untyped-def]
    """The total of `buf[0:n]` (n <= BLOCK) in a fixed order: term k goes into partial sum
    k % LANES, in order (the last n % LANES terms into the first partial sums), and the
    partial sums are added pairwise, ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))."""
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0.0
    k = 0
    while k + 8 <= n:
        p0 += buf[k]
        p1 += buf[k + 1]
        p2 += buf[k + 2]
        p3 += buf[k + 3]
        p4 += buf[k + 4]
        p5 += buf[k + 5]
        p6 += buf[k + 6]
        p7 += buf[k + 7]
        k += 8
    if k < n:
        p0 += buf[k]
    if k + 1 < n:
        p1 += buf[k + 1]
    if k + 2 < n:
        p2 += buf[k + 2]
    if k + 3 < n:
        p3 += buf[k + 3]
    if k + 4 < n:
        p4 += buf[k + 4]
    if k + 5 < n:
        p5 += buf[k + 5]
    if k + 6 < n:
        p6 += buf[k + 6]
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))


def block_close(buf, n, acc, acc_n, s, c):  # type: ignore[no-untyped-def]
    """Take the `n` terms of a block (`buf[0:n]`) into an accumulator's state (`acc`,
    `acc_n`, `s`, `c`, as `init` names them); the new state.  A full block is merged into
    the total; a shorter one goes into the open block, merged once that has `BLOCK` terms
    or more."""
    v = block_sum(buf, n)
    if n == BLOCK:
        s, c = neumaier(s, c, v)
        return acc, acc_n, s, c
    acc += v
    acc_n += n
    if acc_n >= BLOCK:
        s, c = neumaier(s, c, acc)
        acc = 0.0
        acc_n = 0
    return acc, acc_n, s, c


# Runtime helpers of a blocked loop (numba_rt): a buffer of BLOCK floats on the stack of
# the function that calls it (no allocation; one per thread inside a `prange`), and the
# loop index as a value the compiler may take as non-negative (so that indexing needs no
# wraparound, which would turn the vectorised loads into gathers).
BLOCK_BUFFER = "tl_block_buffer"
# ... and one of 3 * ROW_MAX floats for a row of at most ROW_MAX sums (their accumulators,
# compensations and carries), so that a short row costs no allocation
ROW_BUFFER = "tl_row_buffer"
ROW_MAX = 256
NONNEG = "tl_nonneg"
BLOCK_CLOSE = "tl_block_close"


# A loop of fewer terms adds them one by one (`add`): closing a block costs about as much as
# 8 scalar evaluations of a term with a transcendental or a division (`SHORT`), or as 64
# adds of products (`SHORT_CHEAP`; measured, docs/backends.md).
SHORT = 8
SHORT_CHEAP = 64


def block_loop(acc: str, var: str, lo: str, stop: str, tag: str, indent: str,
               short: int = SHORT) -> tuple[list[str], str, list[str]]:
    """A sum's innermost loop `for var in range(lo, stop)` as blocks (see the module
    docstring), or term by term (`add`) when it has fewer than `short` iterations.  Returns
    the lines that open it, after which the body assigns each term to the returned target
    (three levels deeper than the first opening line), and the lines that follow that
    body: they close the blocks and open the loop of the short case, whose body (two
    levels deeper than the first opening line) adds each term with `add`.  The blocks run
    only where `lo` is not negative (then no index of the loop is: `NONNEG` is true)."""
    buf, b, e, j, hi = f"_tb{tag}", f"_tbb{tag}", f"_tbe{tag}", f"_tbj{tag}", f"_tbh{tag}"
    opening = [f"{hi} = {stop}"]
    if lo.isdigit():
        test = f"{hi} - {lo} >= {short}"
    else:
        opening.append(f"_tbl{tag} = {lo}")
        lo = f"_tbl{tag}"
        test = f"{hi} - {lo} >= {short} and {lo} >= 0"
    opening += [f"if {test}:",
                f"{indent}{buf} = {BLOCK_BUFFER}()",
                f"{indent}for {b} in range({lo}, {hi}, {BLOCK}):",
                f"{indent * 2}{e} = min({b} + {BLOCK}, {hi})",
                f"{indent * 2}for {j} in range({b}, {e}):",
                f"{indent * 3}{var} = {NONNEG}({j})"]
    middle = [f"{indent * 2}{acc}, {acc}_n, {acc}_s, {acc}_c = {BLOCK_CLOSE}("
              f"{buf}, {e} - {b}, {acc}, {acc}_n, {acc}_s, {acc}_c)",
              "else:",
              f"{indent}for {var} in range({lo}, {hi}):"]
    return opening, f"{buf}[{j} - {b}]", middle


def block_again(var: str, tag: str, flag: str, indent: str) -> list[str]:
    """The lines, after a block's loop, that run it once more when `flag` is set (the body
    follows, two levels deeper than the first line): a block computed with a fast form that
    holds for most arguments only (`numba_rt.tl_log_normal`) is computed again with the
    exact one when one of its arguments is outside."""
    return [f"if {flag}:",
            f"{indent}for _tbj{tag} in range(_tbb{tag}, _tbe{tag}):",
            f"{indent * 2}{var} = {NONNEG}(_tbj{tag})"]


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


__all__ = ["BLOCK", "LANES", "SHORT", "SHORT_CHEAP", "NEUMAIER", "BLOCK_BUFFER", "ROW_BUFFER",
           "ROW_MAX", "NONNEG",
           "BLOCK_CLOSE", "init", "merge", "neumaier", "add", "block_sum", "block_close",
           "block_loop", "block_again", "result", "extreme_init", "extreme_update"]
