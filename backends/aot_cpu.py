"""Ahead-of-time images of Numba CPU kernels: a kernel that loads without importing Numba.

Importing Numba and setting up its CPU target takes longer (0.3-0.8 s) than everything else
a warm call does, so a kernel loaded through Numba can never start in a blink.  An *AOT
image* is the same generated kernel module compiled by `numba.pycc` into a CPython
extension module (`tl_<key>.aot.so` beside the module in `kernels/numba_cpu/`, its SHA-256
recorded in the kernel's meta file and checked before it is loaded, docs/caching.md).
Loading it imports nothing but numpy.

The image is the kernel's code with two changes, both chosen so that it needs nothing of
Numba's at run time:

  * it is serial: `prange` loops run as `range` (Numba's parallel runtime is part of Numba).
    The chunked reductions add their chunks in the same order either way, so the image and
    the parallel kernel compute the same sums;
  * dense contractions use a loop nest (`numba_rt.tl_matmul_loops`) instead of BLAS (whose
    pointers an AOT module would fetch from scipy at run time).

So the image is for small calls and serial kernels; `numba_cpu.CompiledProgram` picks the
engine per call (its `engine_for`; docs/caching.md, "Engines") and says which one ran.

    build(text, args) -> bytes          the image of module `text` (imports numba.pycc)
    load(path, digest) -> module | None the image, after checking its hash
    Header(text)                        TL_ARGS, TL_COUNTED, parallel?, BLAS? of a module

The extension's module name is the same for every image (`tl_aot`), so the C support code
pycc links into each one (its "mixins": a module template, Numba's helper library and
runtime) is compiled once per Numba/Python version and kept in the cache as hash-checked
blobs (`aot-mixins/`), saving ~3 s of gcc per kernel.
"""
from __future__ import annotations

import ast as pyast
import importlib.machinery
import importlib.util
import os
import pathlib
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any, Sequence

from tensorlang import cache

MODULE_NAME = "tl_aot"
ENTRY = "tl_kernel"
SUFFIX = ".aot.so"
JIT_IMPORT = "from numba import njit, prange\n"
MIXINS = "aot-mixins"

__all__ = ["Header", "build", "load", "MODULE_NAME", "SUFFIX"]


@dataclass(frozen=True)
class Header:
    """What a caller needs of a kernel module without running it."""

    args: tuple[tuple[str, Any], ...]    # TL_ARGS: (kind, key) of each argument
    counted: tuple[str, ...]             # TL_COUNTED
    parallel: bool                       # some function is compiled with parallel loops
    blas: bool                           # calls BLAS (tl_matmul, tl_gram)
    parts: bool                          # the body is cut into separately compiled parts
    arrays: tuple[tuple, ...] = ()       # TL_ARRAYS: `memory.Allocation.literal`s
    # TL_BLAS: (BLAS outside row panels, the tests of the row panels' `panel_runs` as code)
    blas_at: tuple[bool, tuple[str, ...]] = (True, ())

    @classmethod
    def of(cls, text: str) -> "Header":
        values: dict[str, Any] = {}
        for line in text.splitlines():
            for name in ("TL_ARGS", "TL_COUNTED", "TL_ARRAYS", "TL_BLAS"):
                if line.startswith(name + " = "):
                    values[name] = pyast.literal_eval(line[len(name) + 3:])
        return cls(values["TL_ARGS"], values["TL_COUNTED"],
                   "@njit(parallel=TL_PARALLEL" in text,
                   "tl_matmul(" in text or "tl_gram(" in text,
                   "\ndef tl_part" in text, values["TL_ARRAYS"],
                   values.get("TL_BLAS", (True, ())))


# ---------------------------------------------------------------------------------------------
# Building (cold: imports Numba)


def build(text: str, args: Sequence[Any]) -> bytes:
    """The AOT image of kernel module `text` (its source, without the hash line), its
    exported `tl_kernel` typed by the marshalled arguments `args` of a call."""
    import numba

    from . import numba_rt

    if JIT_IMPORT not in text:
        raise RuntimeError("kernel module without its Numba import line")
    namespace: dict[str, Any] = {"__name__": f"tensorlang_kernels.aot.{MODULE_NAME}",
                                 "njit": _serial_njit}
    exec(compile(text.replace(JIT_IMPORT, "from numba import prange\n"), "<aot kernel>",
                 "exec"), namespace)
    # (the functions are compiled below, reading their globals then)
    namespace["tl_matmul"] = numba_rt.tl_matmul_loops
    namespace["tl_matmul_into"] = numba_rt.tl_matmul_into_loops
    namespace["tl_gram"] = numba_rt.tl_gram_loops
    params = ", ".join(f"a{k}" for k in range(len(args)))
    # A trampoline: pycc compiles what it exports with Python's error model; the kernel it
    # calls keeps error_model="numpy" (1/0 is inf), like the JIT kernel.
    exec(f"def tl_aot_entry({params}):\n    return {ENTRY}({params})\n", namespace)
    signature = tuple(numba.typeof(a) for a in args)
    with tempfile.TemporaryDirectory(prefix="tl-aot-") as tmp:
        compiler = _compiler(MODULE_NAME)
        compiler.output_dir = tmp
        compiler.verbose = False
        compiler.export(ENTRY, signature)(namespace["tl_aot_entry"])
        compiler.compile()
        return (pathlib.Path(tmp) / compiler.output_file).read_bytes()


def _serial_njit(*args: Any, **options: Any) -> Any:
    """`njit(...)` of the image: serial, no Numba disk cache, numpy's error model."""
    import numba

    jit = numba.njit(error_model="numpy")
    if len(args) == 1 and callable(args[0]):
        return jit(args[0])
    return jit


def _mixin_key() -> str:
    import numba

    return cache.key_of("aot mixins", numba.__version__, sys.version, MODULE_NAME)[:32]


def _compiler(name: str) -> Any:
    """A `numba.pycc.CC` for extension `name` whose C support objects come from the cache
    (verified) when present.  It overrides `CC._compile_mixins`, pycc's step that compiles
    them: a dependency on pycc's structure, exercised by every image tests/test_aot.py
    builds."""
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    with warnings.catch_warnings():   # (pycc's; docs/decisions.md says why we use it)
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC

    class CachedMixinsCC(CC):
        def _compile_mixins(self, build_dir: str) -> list[str]:
            return _mixins(super()._compile_mixins, build_dir)

    return CachedMixinsCC(name)


_MIXIN_OBJECTS: dict[str, list[tuple[str, bytes]]] = {}   # this process's, by key


def _mixins(compile_them: Any, build_dir: str) -> list[str]:
    """pycc's C support objects, written into `build_dir`: from this process's memo, else
    from the cache (each blob hash checked), else compiled by `compile_them` and stored."""
    key = _mixin_key()
    objects = _MIXIN_OBJECTS.get(key) or _cached_mixins(key)
    if objects is None:
        paths = compile_them(build_dir)
        objects = [(os.path.basename(p), pathlib.Path(p).read_bytes()) for p in paths]
        for k, (_, data) in enumerate(objects):
            cache.put_blob(MIXINS, f"m_{key}_{k}", data)
        cache.put_data(MIXINS, f"m_{key}", [name for name, _ in objects])
    _MIXIN_OBJECTS[key] = objects
    out = []
    for k, (name, data) in enumerate(objects):
        path = os.path.join(build_dir, f"mixin{k}_{name}")
        with open(path, "wb") as fh:
            fh.write(data)
        out.append(path)
    return out


def _cached_mixins(key: str) -> list[tuple[str, bytes]] | None:
    names = cache.get_data(MIXINS, f"m_{key}")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    objects = []
    for k, name in enumerate(names):
        data = cache.get_blob(MIXINS, f"m_{key}_{k}")
        if data is None:
            return None
        objects.append((name, data))
    return objects


# ---------------------------------------------------------------------------------------------
# Loading (warm: imports nothing but the image)


def load(path: pathlib.Path, digest: str) -> types.ModuleType | None:
    """The image at `path` if its content has SHA-256 `digest`; else None (the caller
    removes it and builds it again)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if cache.sha256(data) != digest:
        return None
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # Every image has the same name: none stays in sys.modules (each is kept by its caller).
    if sys.modules.get(MODULE_NAME) is module:
        del sys.modules[MODULE_NAME]
    return module

