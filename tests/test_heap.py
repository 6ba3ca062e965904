"""The heap policy for kernel arrays (backends/heap.py): arrays above glibc's mmap threshold
come from the heap inside `ArraysOnHeap`, so that a call reuses the last call's memory
instead of faulting in fresh pages; the compiled programs use it for such calls."""
from __future__ import annotations

import resource

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends import heap


def _applied() -> None:
    if not heap.keep_freed_memory():
        pytest.skip("no glibc mallopt here")


def test_only_calls_with_an_array_above_the_threshold_use_the_heap():
    _applied()
    small = heap.MMAP_BYTES // 8
    assert heap.heap_bytes([small, small]) == 0
    assert heap.heap_bytes([]) == 0
    assert heap.heap_bytes([small + 1, 10]) == 8 * (small + 11)


def test_arrays_on_heap_nests_and_keeps_twice_the_largest_call(monkeypatch):
    _applied()
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(heap, "_mallopt", lambda p, v: calls.append((p, v)) or 1)
    monkeypatch.setattr(heap, "_keep", heap.KEEP_BYTES)
    with heap.ArraysOnHeap(200 << 20):
        with heap.ArraysOnHeap(10):
            assert heap._inside == 2
        assert heap._inside == 1
        assert calls[-1] == (heap.M_TRIM_THRESHOLD, 400 << 20)
    assert heap._inside == 0
    assert calls == [(heap.M_MMAP_MAX, 0), (heap.M_TRIM_THRESHOLD, 400 << 20),
                     (heap.M_MMAP_MAX, heap.MMAP_MAX_DEFAULT)]
    calls.clear()
    with heap.ArraysOnHeap(8 << 30):   # (at most KEEP_MOST; never lowered)
        pass
    assert (heap.M_TRIM_THRESHOLD, heap.KEEP_MOST) in calls
    calls.clear()
    with heap.ArraysOnHeap(300 << 20):
        pass
    assert [c for c in calls if c[0] == heap.M_TRIM_THRESHOLD] == []


def _faults_per_call(call, warm: int = 2, rounds: int = 3) -> float:
    """Minor page faults per call of `call`, after `warm` calls."""
    for _ in range(warm):
        call()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds


def _filled(numba):   # (a fresh n x n array written through, as a kernel's output)
    @numba.njit
    def fresh(n):
        a = np.empty((n, n))
        for i in range(n):
            for j in range(n):
                a[i, j] = i - j
        return a
    return fresh


def test_freed_kernel_memory_is_reused_without_page_faults():
    """A kernel's 8 MB output, freed and allocated again call after call: about 2,000 page
    faults a call when the heap gives the memory back to the system; none once it keeps it."""
    _applied()
    fresh = _filled(pytest.importorskip("numba"))
    assert _faults_per_call(lambda: fresh(1000), warm=3, rounds=5) < 400


def test_a_large_array_is_reused_without_page_faults():
    """A 42 MB array (above the 32 MiB mmap threshold), freed and allocated again call after
    call: about 10,000 page faults a call when mapped fresh (as it is, unless the
    heap already holds that much free memory at its top); few inside ArraysOnHeap."""
    _applied()
    fresh = _filled(pytest.importorskip("numba"))

    def call() -> None:
        with heap.ArraysOnHeap(8 * 2300 * 2300):
            fresh(2300)
    assert _faults_per_call(call) < 1000


def test_compiled_calls_with_large_arrays_run_inside_arrays_on_heap(monkeypatch):
    pytest.importorskip("numba")
    _applied()
    entered: list[int] = []

    class Recording(heap.ArraysOnHeap):
        def __enter__(self) -> None:
            entered.append(self.nbytes)
            super().__enter__()

    monkeypatch.setattr(heap, "ArraysOnHeap", Recording)
    monkeypatch.setattr(heap, "MMAP_BYTES", 1 << 20)   # (a call of a few MB is "large")
    f = tl.parse("def f(N: size, x: R[N, N]) -> R[N, N]:\n"
                 "    return gen i:N. gen j:N. sin(x[i, j]) * x[j, i]\n")["f"]
    x = np.random.default_rng(0).standard_normal((1100, 1100))
    got = f(N=1100, x=x)   # (work above the AOT image's: the JIT kernel)
    np.testing.assert_allclose(got, np.sin(x) * x.T, rtol=1e-12)
    assert entered and entered[0] >= 8 * 1100 * 1100
    entered.clear()
    f(N=3, x=x[:3, :3])
    assert entered == []
