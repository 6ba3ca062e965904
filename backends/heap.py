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

The setting is process-wide and only changes where free memory waits (the program's values are
the same); it is made once, when the first Numba CPU program is compiled, and is a no-op
where the C library has no `mallopt` (not glibc).
"""
from __future__ import annotations

import ctypes
import threading

M_TRIM_THRESHOLD = -1     # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20     # the largest value glibc accepts (HEAP_MAX_SIZE / 2 on 64 bits)
KEEP_BYTES = 256 << 20    # free memory the heap may keep at its top

_applied: bool | None = None   # None: not tried yet
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Set the heap policy of the module docstring (once); True when it is in effect."""
    global _applied
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
        return _applied


__all__ = ["keep_freed_memory", "KEEP_BYTES", "MMAP_BYTES"]
