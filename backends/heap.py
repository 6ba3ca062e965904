"""The C heap's policy for kernel arrays: freed memory is kept for the next call.

Numba allocates a kernel's arrays with `malloc`.  glibc serves a large request (above its
mmap threshold, 128 KiB at first, raised to the size of the largest block freed so far, at
most 32 MiB) with a fresh `mmap`, and gives the top of the heap back to the system once more
than twice that threshold is free there.  A kernel whose arrays are about that size (a
1000 x 1000 matrix is 8 MB) therefore writes fresh pages on every call: one page fault per
4 KiB, about 2,000 per such matrix, which measured 10-15 ms per call on a virtual machine --
more than the arithmetic (docs/linalg.md, "Performance").  `keep_freed_memory()` fixes the
mmap threshold at glibc's 32 MiB maximum and lets up to `KEEP_BYTES` stay free on the heap, so
that the next call's arrays reuse the memory of the last one's.

An array above that 32 MiB threshold is still mapped fresh on every call.  A kernel call
whose largest array is that large (`heap_bytes`) runs inside `ArraysOnHeap`, which turns
glibc's mmap off (`M_MMAP_MAX` 0) while any such call runs: its arrays come from the heap,
where the last call's freed arrays wait (the heap keeps up to twice the largest such call's
arrays free, at most 2 GiB).  maxpool's gradient at H = W = 2000 (arrays of 64
and 128 MB) took 100 ms a call, 53 ms so (issue 14).  Outside such calls the process's other
large allocations are mapped as before, so their memory still goes back to the system when
they are freed.

The setting is process-wide and only changes where free memory waits (the program's values are
the same); it is made once, when the first Numba CPU program is compiled, and is a no-op
where the C library has no `mallopt` (not glibc).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

M_TRIM_THRESHOLD = -1     # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MMAP_MAX_DEFAULT = 65536  # glibc's default count of mmapped blocks (DEFAULT_MMAP_MAX)
MMAP_BYTES = 32 << 20     # the largest value glibc accepts (HEAP_MAX_SIZE / 2 on 64 bits)
KEEP_BYTES = 256 << 20    # free memory the heap may keep at its top
KEEP_MOST = (2 << 30) - 1  # ... at most (mallopt takes an int)

_applied: bool | None = None   # None: not tried yet
_lock = threading.Lock()
_mallopt: Any = None
_inside = 0                    # calls now inside `ArraysOnHeap`
_keep = KEEP_BYTES             # the trim threshold now


def keep_freed_memory() -> bool:
    """Set the heap policy of the module docstring (once); True when it is in effect."""
    global _applied, _mallopt
    with _lock:
        if _applied is None:
            try:
                mallopt = ctypes.CDLL(None).mallopt
            except (OSError, AttributeError):
                _applied = False
                return False
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)
                            and mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))
            _mallopt = mallopt if _applied else None
        return _applied


def heap_bytes(array_entries: Sequence[int]) -> int:
    """The bytes a call allocating float64 arrays of `array_entries` takes from the heap
    inside `ArraysOnHeap`: all of them when one would be mapped fresh (above `MMAP_BYTES`)
    and the policy is in effect, else 0 (the call runs as any other)."""
    if not _applied or 8 * max(array_entries, default=0) <= MMAP_BYTES:
        return 0
    return 8 * sum(array_entries)


class ArraysOnHeap:
    """`with ArraysOnHeap(nbytes):` -- the arrays allocated inside, `nbytes` in all (with
    the result's, which the caller frees later), come from the heap, not from fresh
    mappings (module docstring), and the heap keeps twice that free for the next call (at
    most `KEEP_MOST`): glibc gives the whole free top of the heap back to the system once it
    exceeds the threshold, and maxpool's gradient at H = W = 2000 (320 MB of arrays) took
    255 ms a call at the 256 MiB default, 45 ms so.  Nests across threads (the last one out
    turns mmap back on)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __enter__(self) -> None:
        global _inside, _keep
        with _lock:
            if _mallopt is None:
                return
            if _inside == 0:
                _mallopt(M_MMAP_MAX, 0)
            _inside += 1
            keep = min(2 * self.nbytes, KEEP_MOST)
            if keep > _keep:
                _keep = keep
                _mallopt(M_TRIM_THRESHOLD, keep)

    def __exit__(self, *exc: object) -> None:
        global _inside
        with _lock:
            if _mallopt is None:
                return
            _inside -= 1
            if _inside == 0 and _mallopt is not None:
                _mallopt(M_MMAP_MAX, MMAP_MAX_DEFAULT)


__all__ = ["keep_freed_memory", "heap_bytes", "ArraysOnHeap", "KEEP_BYTES", "MMAP_BYTES"]
