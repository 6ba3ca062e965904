"""The on-disk kernel cache shared by the compiled backends.

A kernel is identified by `kernel_key(text, backend, variant)`: a SHA-256 of the program's
Tensor-SSA text (`ssa_printer.to_text`), the backend name and variant (e.g. instrumented), and
`BACKEND_VERSION` -- itself a hash of the code generator's own source files and of the
Numba/Python versions, so that changing the generator invalidates old kernels without
anyone remembering to bump a number.

The generated source is written once to `<cache dir>/<backend>/tl_<key>.py` (atomically:
a temporary file then `os.replace`) and imported from there, so Numba's `cache=True`
finds its compiled code in the `__pycache__` folder next to it in every later process.
An existing file is never rewritten (that would change its timestamp and invalidate
Numba's cache).  `index.json` in the same folder lists the kernels (key, program name,
variant, creation time) for people inspecting the cache.

Cache folder: `$TENSORLANG_CACHE_DIR`, else `~/.cache/tensorlang`; when that is not
writable, `<tmp>/tensorlang-cache-<uid>`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time
import types
from functools import lru_cache

_HERE = pathlib.Path(__file__).resolve().parent
_GENERATOR_FILES = ("codegen.py", "codegen_nest.py", "scalar_builtins.py", "numba_rt.py",
                    "numba_cpu.py", "kernel_cache.py")
_INDEXSOLVE = ("indexsolve/__init__.py", "indexsolve/core.py", "indexsolve/fm.py",
               "indexsolve/loops.py", "indexsolve/snf.py")


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
    try:
        import numba
        h.update(numba.__version__.encode())
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def kernel_key(text: str, backend: str, variant: str = "") -> str:
    h = hashlib.sha256()
    for part in (backend, variant, backend_version(), text):
        h.update(part.encode("utf-8") + b"\0")
    return h.hexdigest()[:32]


def _writable(path: pathlib.Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
        return True
    except OSError:
        return False


def cache_root() -> pathlib.Path:
    """The cache folder (created), per the rules in the module docstring."""
    env = os.environ.get("TENSORLANG_CACHE_DIR")
    first = pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / \
        "tensorlang"
    if _writable(first):
        return first
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    fallback = pathlib.Path(tempfile.gettempdir()) / f"tensorlang-cache-{uid}"
    if _writable(fallback):
        return fallback
    return pathlib.Path(tempfile.mkdtemp(prefix="tensorlang-cache-"))


def backend_dir(backend: str) -> pathlib.Path:
    d = cache_root() / backend
    d.mkdir(parents=True, exist_ok=True)
    return d


def _atomic_write(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _record(folder: pathlib.Path, key: str, info: dict) -> None:
    """Add the kernel to `index.json` (best effort: the cache works without it)."""
    index = folder / "index.json"
    try:
        data = json.loads(index.read_text()) if index.exists() else {}
    except (OSError, ValueError):
        data = {}
    if key in data:
        return
    data[key] = dict(info, created=time.strftime("%Y-%m-%dT%H:%M:%S"))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, index)
    except OSError:
        pass


_MODULES: dict[str, types.ModuleType] = {}


def load_kernel_module(backend: str, key: str, source: str, info: dict | None = None
                       ) -> tuple[types.ModuleType, pathlib.Path]:
    """The module of kernel `key`: imported once per process, from the cache file (written
    from `source` if it does not exist yet)."""
    folder = backend_dir(backend)
    path = folder / f"tl_{key}.py"
    modname = f"tensorlang_kernels.{backend}.tl_{key}"
    mod = _MODULES.get(modname)
    if mod is not None:
        return mod, path
    if not path.exists():
        _atomic_write(path, source)
        _record(folder, key, dict(info or {}))
    try:
        mod = _import(modname, path)
    except Exception:
        # A damaged file (say, written by a process that was killed): write it again.
        _atomic_write(path, source)
        mod = _import(modname, path)
    _MODULES[modname] = mod
    return mod, path


def _import(modname: str, path: pathlib.Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(modname, None)
        raise
    return mod
