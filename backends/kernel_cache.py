"""The kernels of the compiled backends in the on-disk cache (`tensorlang/cache.py`).

A kernel is identified by `kernel_key(text, backend, variant)`: a SHA-256 of the program's
Tensor-SSA text (`ssa_printer.to_text`), the backend name and variant (e.g. instrumented), and
`backend_version()` -- itself a hash of the code generator's own source files and of the
Numba/Python versions, so that changing the generator invalidates old kernels without
anyone remembering to bump a number.

Files of kernel `<key>` in `<cache>/kernels/<backend>/` (one entry for the size cap):

  tl_<key>.py              the generated module; its first line is the SHA-256 of the rest
                           (`cache.put_module`).  It is checked before every import and the
                           *checked text* is compiled (the file is not read twice); a damaged
                           file is rebuilt from the program with a `CacheWarning`.
  __pycache__/tl_<key>.*   Numba's own cache of the compiled code (`cache=True` finds it next
                           to the module): pickles that Numba loads on the first call.
  tl_<key>.meta.json       the program's name, the variant, and the SHA-256 of each Numba file
                           as it was when this library last saw Numba write it (`seal`).

A module's key is the hash of its text, in which the program's float constants are the
argument `tl_c` (backends/numba_cpu_source.py): programs that differ only in constants share
one module.  `<cache>/links/<backend>/p_<program key>.blob` (plain data, hash checked) maps a
program's key (its SSA text) to its module's key and its constants, so a warm process finds
its kernel without generating code.

Numba's files are checked before the module is imported: a file whose hash is not the recorded
one (edited, truncated, or written by a process that died before sealing it) is deleted with
the rest of Numba's files for that kernel, so Numba compiles again instead of loading it.  The
`.py` file is never rewritten while it is valid: Numba keys its cache on the file's timestamp.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import pathlib
import sys
import threading
import types
import warnings
from functools import lru_cache
from typing import Callable

from tensorlang import cache

_HERE = pathlib.Path(__file__).resolve().parent
_GENERATOR_FILES = ("codegen.py", "codegen_nest.py", "scalar_builtins.py", "numba_rt.py",
                    "numba_cpu.py", "numba_cpu_source.py", "kernel_split.py", "kernel_cache.py",
                    "accumulate.py", "common/storage.py", "gram.py", "sibling_fusion.py",
                    "common/allocation.py", "prange_bodies.py", "window_walk.py",
                    "size_constants.py")
_INDEXSOLVE = ("indexsolve/__init__.py", "indexsolve/core.py", "indexsolve/fm.py",
               "indexsolve/loops.py", "indexsolve/snf.py")
PYCACHE = "__pycache__"

__all__ = ["backend_version", "kernel_key", "kernel_dir", "load_kernel_module", "seal",
           "store_link", "load_link", "kernel_text", "load_aot", "store_aot"]


@lru_cache(maxsize=1)
def backend_version() -> str:
    """A hash of everything that shapes generated code: the generator's sources, the index
    solver's, and the Numba and Python versions."""
    h = hashlib.sha256()
    for name in _GENERATOR_FILES:
        path = _HERE / name
        if path.exists():
            h.update(name.encode() + b"\0" + path.read_bytes())
    passes = _HERE.parent / "passes"
    for name in _INDEXSOLVE:
        path = passes / name
        if path.exists():
            h.update(name.encode() + b"\0" + path.read_bytes())
    h.update(_numba_version())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def _numba_version() -> bytes:
    """Numba's version file, read without importing Numba (an AOT kernel loads without it)."""
    import importlib.util

    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return b"no numba"
    for folder in spec.submodule_search_locations:
        try:
            return (pathlib.Path(folder) / "_version.py").read_bytes()
        except OSError:
            continue
    return b"numba without _version.py"


def kernel_key(text: str, backend: str, variant: str = "") -> str:
    h = hashlib.sha256()
    for part in (backend, variant, backend_version(), text):
        h.update(part.encode("utf-8") + b"\0")
    return h.hexdigest()[:32]


def kernel_dir(backend: str) -> pathlib.Path:
    return cache.namespace(f"kernels/{backend}")


# ---------------------------------------------------------------------------------------------
# Numba's files of a kernel, and their recorded hashes


def _meta_path(folder: pathlib.Path, key: str) -> pathlib.Path:
    return folder / f"tl_{key}.meta.json"


def _read_meta(folder: pathlib.Path, key: str) -> dict:
    try:
        data = json.loads(_meta_path(folder, key).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_meta(folder: pathlib.Path, key: str, meta: dict) -> None:
    text = json.dumps(meta, indent=1, sort_keys=True)
    cache.atomic_write(_meta_path(folder, key), text.encode("utf-8"))


def _numba_files(folder: pathlib.Path, key: str) -> list[pathlib.Path]:
    where = folder / PYCACHE
    try:
        names = os.listdir(where)
    except OSError:
        return []
    stem = f"tl_{key}."
    return sorted(where / n for n in names if n.startswith(stem))


def _hashes(files: list[pathlib.Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in files:
        try:
            out[f.name] = cache.sha256(f.read_bytes())
        except OSError:
            pass
    return out


def _verify_numba(folder: pathlib.Path, key: str, meta: dict) -> bool:
    """Delete Numba's files of kernel `key` unless each matches its recorded hash; whether
    any were deleted."""
    files = _numba_files(folder, key)
    if not files:
        return False
    recorded = meta.get("numba") or {}
    now = _hashes(files)
    if all(recorded.get(name) == digest for name, digest in now.items()):
        return False
    changed = sorted(n for n, d in now.items() if n in recorded and recorded[n] != d)
    if changed:
        warnings.warn(cache.CacheWarning(
            f"damaged Numba cache file(s) {', '.join(changed)} of kernel {key} in {folder}: "
            f"recompiling"), stacklevel=4)
    for f in files:
        try:
            f.unlink()
        except OSError:
            pass
    return True


def seal(backend: str, key: str) -> None:
    """Record the hashes of Numba's files of kernel `key` as they are now (call after Numba
    compiled it in this process; also done for every loaded kernel at exit)."""
    folder = kernel_dir(backend)
    meta = _read_meta(folder, key)
    hashes = _hashes(_numba_files(folder, key))
    if meta.get("numba") != hashes and _meta_path(folder, key).exists():
        meta["numba"] = hashes
        _write_meta(folder, key, meta)


# ---------------------------------------------------------------------------------------------
# Links: program -> (module, constants)


def store_link(backend: str, key: str, module_key: str, constants: tuple[float, ...]) -> None:
    """Record that the program of `key` runs module `module_key` with `constants` (programs
    differing only in their float constants share one module: numba_cpu_source.py)."""
    cache.put_data(f"links/{backend}", f"p_{key}",
                   {"module": module_key, "constants": [float(c) for c in constants]})


def load_link(backend: str, key: str) -> tuple[str, tuple[float, ...]] | None:
    """The module key and constants of the program of `key`; None when unknown or damaged."""
    data = cache.get_data(f"links/{backend}", f"p_{key}")
    if data is None:
        return None
    ok = (isinstance(data, dict) and isinstance(data.get("module"), str)
          and len(data["module"]) == 32 and isinstance(data.get("constants"), list)
          and all(isinstance(c, float) for c in data["constants"]))
    if not ok:
        warnings.warn(cache.CacheWarning(f"damaged cache entry p_{key} of {backend} "
                                         f"(not a link): rebuilding it"), stacklevel=2)
        cache.remove_entry(cache.namespace(f"links/{backend}"), f"p_{key}")
        return None
    return data["module"], tuple(data["constants"])


# ---------------------------------------------------------------------------------------------
# Loading


_MODULES: dict[str, types.ModuleType] = {}
_LOADED: list[tuple[str, str]] = []
_LOCK = threading.Lock()


def kernel_text(backend: str, key: str, source: str | Callable[[], str],
                info: dict | None = None) -> str:
    """The verified text of kernel module `key` (its cache file, hash checked; the file is
    written from `source`, a text or a function making it, when missing or damaged).  Only
    reads: nothing is imported or run."""
    folder = kernel_dir(backend)
    path = folder / f"tl_{key}.py"
    text = cache.read_module(path)
    if text is None:
        text = source() if callable(source) else source
        cache.remove_entry(folder, f"tl_{key}")   # stale Numba files / image of a damaged one
        cache.put_module(path, text)
        _write_meta(folder, key, dict(info or {}, backend=backend, numba={}))
        cache.evict()
    else:
        cache.touch(_meta_path(folder, key))
    return text


def load_kernel_module(backend: str, key: str, source: str | Callable[[], str],
                       info: dict | None = None) -> tuple[types.ModuleType, pathlib.Path]:
    """The module of kernel `key`: imported once per process from the cache file after its
    hash is checked (see `kernel_text`), and after Numba's files of it are checked.  The
    module's `__tl_source__` is its generated source."""
    modname = f"tensorlang_kernels.{backend}.tl_{key}"
    folder = kernel_dir(backend)
    path = folder / f"tl_{key}.py"
    with _LOCK:
        mod = _MODULES.get(modname)
        if mod is not None:
            return mod, path
        text = kernel_text(backend, key, source, info)
        meta = _read_meta(folder, key)
        if _verify_numba(folder, key, meta) or not meta:
            _write_meta(folder, key, {**(info or {}), **meta, "backend": backend, "numba": {}})
        mod = _exec(modname, path, cache.module_text(text), text)
        _MODULES[modname] = mod
        _LOADED.append((backend, key))
        return mod, path


# ---------------------------------------------------------------------------------------------
# AOT images (backends/aot_cpu.py): `tl_<key>.aot.so`, its SHA-256 in the meta file


def _aot_path(folder: pathlib.Path, key: str, variant: str) -> pathlib.Path:
    from .aot_cpu import SUFFIX

    return folder / f"tl_{key}.{variant}{SUFFIX}"


def load_aot(backend: str, key: str, variant: str) -> types.ModuleType | None:
    """The AOT image `variant` of kernel `key` when present and intact; a damaged image
    (its content not the recorded hash, or no hash recorded) is removed with a
    `CacheWarning`, and None returned so that the caller builds it again."""
    from . import aot_cpu

    folder = kernel_dir(backend)
    path = _aot_path(folder, key, variant)
    if not path.exists():
        return None
    digest = (_read_meta(folder, key).get("aot") or {}).get(variant)
    module = aot_cpu.load(path, digest) if isinstance(digest, str) else None
    if module is None:
        warnings.warn(cache.CacheWarning(
            f"damaged AOT image {path.name} of kernel {key} in {folder} "
            f"({'content does not match its hash' if digest else 'no hash recorded'}): "
            f"rebuilding it"), stacklevel=3)
        try:
            path.unlink()
        except OSError:
            pass
    return module


def store_aot(backend: str, key: str, variant: str, data: bytes) -> pathlib.Path:
    """Write AOT image `variant` of kernel `key` atomically, its hash first in the meta."""
    folder = kernel_dir(backend)
    path = _aot_path(folder, key, variant)
    with _LOCK:
        meta = _read_meta(folder, key)
        meta["aot"] = {**(meta.get("aot") or {}), variant: cache.sha256(data)}
        _write_meta(folder, key, meta)
        cache.atomic_write(path, data)
    cache.evict()
    return path


def _exec(modname: str, path: pathlib.Path, checked: str, source: str) -> types.ModuleType:
    """Run the checked text as module `modname` whose file is `path` (so that Numba's cache
    locator and tracebacks find the file)."""
    mod = types.ModuleType(modname)
    mod.__file__ = str(path)
    mod.__tl_source__ = source  # type: ignore[attr-defined]
    sys.modules[modname] = mod
    try:
        exec(compile(checked, str(path), "exec"), mod.__dict__)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


@atexit.register
def _seal_loaded() -> None:
    for backend, key in _LOADED:
        try:
            seal(backend, key)
        except OSError:
            pass
