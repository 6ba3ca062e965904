"""The one on-disk cache of tensorlang (SPEC 15): where it is, what may be trusted in it.

Place: `$TENSORLANG_CACHE_DIR`, else `$XDG_CACHE_HOME/tensorlang`, else `~/.cache/tensorlang`.
The folder must be *private*: a directory (not a symlink) owned by the current user that no
one else can write to.  It is created with mode 0700; an existing folder of ours that others
could only read is tightened to 0700; a folder owned by someone else, or writable by group or
others, is refused (`CacheRefused`): then a fresh private temporary folder (`mkdtemp`, 0700,
removed at exit) serves this process and a `CacheWarning` says why.  Nothing is ever taken
from a folder we did not verify, and there is no shared fallback folder.

Entries.  Every file the cache hands out carries the SHA-256 of its content, checked before
the content is used:

  * a *blob* (`put_blob`/`get_blob`, e.g. the front cache's programs) is one file
    `<namespace>/<name>.blob`: a header line `tensorlang-cache 1 <sha256 of the payload>`,
    then the payload;
  * a *Python module* (`put_module`/`read_module`, the generated kernels) is
    `<namespace>/<name>.py` whose first line is the comment `# tensorlang-sha256: <sha256 of
    the rest>`; callers compile the verified text, never re-read the file.

A file whose hash does not match (edited, empty, truncated) is *damaged*: `get_blob` and
`read_module` delete it, warn (`CacheWarning`) and answer None, so the caller rebuilds it.
Writes are atomic (a temporary file in the same folder, then `os.replace`), so a reader sees
the old file or the new one, never a half-written one.

Size.  The files of an entry share its stem (`tl_<key>.py`, `tl_<key>.meta.json`, Numba's
`__pycache__/tl_<key>.*`); an entry's last use is the newest modification time among them
(`touch` marks a use).  After each write, when the cache is larger than its cap
(`$TENSORLANG_CACHE_MAX_MB`, default 1024) the least recently used entries are removed until
it is below 90% of the cap.  `info()` and `clear()` are what `tl cache info|clear` print and
do.  docs/caching.md explains the design and the threat model.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pathlib
import shutil
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from tensorlang.syntax.errors import TLError

__all__ = ["CacheRefused", "CacheWarning", "ENV_DIR", "ENV_MAX_MB", "configured_dir", "root",
           "namespace", "sha256", "put_blob", "get_blob", "put_module", "read_module", "touch",
           "evict", "info", "clear", "CacheInfo", "atomic_write", "code_version",
           "structure_text", "key_of", "put_program", "get_program", "put_data", "get_data",
           "put_checked", "get_checked"]

ENV_DIR = "TENSORLANG_CACHE_DIR"
ENV_MAX_MB = "TENSORLANG_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024
_BLOB_MAGIC = b"tensorlang-cache 1 "
_MODULE_MAGIC = "# tensorlang-sha256: "


class CacheRefused(TLError):
    """The configured cache folder is not private (another owner, or writable by others)."""


class CacheWarning(UserWarning):
    """A cache folder was refused, or a damaged entry was found (and will be rebuilt)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# The folder


def configured_dir() -> pathlib.Path:
    """The folder the settings name (it may not exist, or be refused)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return pathlib.Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "tensorlang"


def check_private(path: pathlib.Path) -> None:
    """Raise `CacheRefused` unless `path` is a real directory owned by us that nobody else
    can write to; tighten a folder of ours that others can merely read to 0700."""
    try:
        st = os.lstat(path)
    except OSError as err:
        raise CacheRefused(f"cache folder {path}: {err.strerror or err}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheRefused(f"cache folder {path} is not a directory (a symlink or a file)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheRefused(f"cache folder {path} is owned by uid {st.st_uid}, not by you "
                           f"(uid {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheRefused(f"cache folder {path} is writable by other users "
                           f"(mode {stat.S_IMODE(st.st_mode):o}); make it 0700 or remove it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)


def _make_private(path: pathlib.Path) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise CacheRefused(f"cannot create cache folder {path}: {err.strerror or err}") from None
    check_private(path)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheRefused(f"cache folder {path} is not writable")
    return path


_ROOTS: dict[str, pathlib.Path] = {}
_ROOT_LOCK = threading.Lock()


def root() -> pathlib.Path:
    """The cache folder of this process (verified private; see the module docstring)."""
    wanted = configured_dir()
    key = str(wanted)
    with _ROOT_LOCK:
        got = _ROOTS.get(key)
        if got is not None:
            try:
                check_private(got)    # every time: one lstat, and a swapped folder is seen
                return got
            except CacheRefused:
                pass
        try:
            got = _make_private(wanted)
        except (CacheRefused, OSError) as err:
            temp = pathlib.Path(tempfile.mkdtemp(prefix="tensorlang-cache-"))
            atexit.register(shutil.rmtree, temp, True)
            warnings.warn(CacheWarning(f"{err}; using a private temporary cache for this "
                                       f"process ({temp}), so nothing is reused across runs"),
                          stacklevel=3)
            got = temp
        _ROOTS[key] = got
        return got


def namespace(name: str) -> pathlib.Path:
    """A sub-folder of the cache (`front`, `kernels/numba_cpu`, ...), created private."""
    top = root()
    path = top / name
    if not path.is_dir():
        for part in [top / p for p in pathlib.PurePosixPath(name).parents][-2::-1] + [path]:
            part.mkdir(mode=0o700, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------------
# Writing and reading entries


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _damaged(path: pathlib.Path, why: str) -> None:
    warnings.warn(CacheWarning(f"damaged cache entry {path} ({why}): rebuilding it"),
                  stacklevel=3)
    remove_entry(path.parent, _stem(path.name))


def put_blob(ns: str, name: str, payload: bytes) -> pathlib.Path:
    """Store `payload` as entry `name` of namespace `ns` (replacing any old one)."""
    path = namespace(ns) / f"{name}.blob"
    atomic_write(path, _BLOB_MAGIC + sha256(payload).encode() + b"\n" + payload)
    evict()
    return path


def get_blob(ns: str, name: str) -> bytes | None:
    """The payload of entry `name`, or None when it is missing or damaged (then removed,
    with a `CacheWarning`).  A hit counts as a use for the size cap."""
    path = namespace(ns) / f"{name}.blob"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    head, sep, payload = data.partition(b"\n")
    if not sep or not head.startswith(_BLOB_MAGIC):
        _damaged(path, "no header")
        return None
    if head[len(_BLOB_MAGIC):].decode("ascii", "replace") != sha256(payload):
        _damaged(path, "content does not match its hash")
        return None
    touch(path)
    return payload


def module_text(source: str) -> str:
    """`source` with the hash line `read_module` checks."""
    return f"{_MODULE_MAGIC}{sha256(source.encode('utf-8'))}\n{source}"


def put_module(path: pathlib.Path, source: str) -> None:
    """Write a Python module file whose first line holds the hash of the rest."""
    atomic_write(path, module_text(source).encode("utf-8"))


def read_module(path: pathlib.Path) -> str | None:
    """The verified source of a module file (without its hash line); None when it is missing,
    or damaged (then removed with its entry, with a `CacheWarning`)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    head, sep, body = data.partition(b"\n")
    text = head.decode("utf-8", "replace")
    if not sep or not text.startswith(_MODULE_MAGIC):
        _damaged(path, "no hash line")
        return None
    if text[len(_MODULE_MAGIC):] != sha256(body):
        _damaged(path, "content does not match its hash")
        return None
    return body.decode("utf-8")


def touch(path: pathlib.Path) -> None:
    """Mark a use of the entry `path` belongs to (its modification time)."""
    try:
        os.utime(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Entries, size cap, info and clear


def _stem(name: str) -> str:
    """The entry a file belongs to: its name up to the first dot (`tl_<key>.py`,
    `tl_<key>.tl_kernel-12.py311.nbi` and `tl_<key>.meta.json` all give `tl_<key>`)."""
    return name.split(".", 1)[0]


def remove_entry(folder: pathlib.Path, stem: str) -> None:
    """Remove every file of the entry `stem` in `folder` (and in its `__pycache__`)."""
    for where in (folder, folder / "__pycache__"):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            if _stem(name) == stem and not name.startswith("."):
                try:
                    os.unlink(where / name)
                except OSError:
                    pass


@dataclass
class _Entry:
    folder: pathlib.Path
    stem: str
    size: int = 0
    used: float = 0.0


def _entries(top: pathlib.Path) -> list[_Entry]:
    groups: dict[tuple[str, str], _Entry] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = pathlib.Path(dirpath)
        folder = here.parent if here.name == "__pycache__" else here
        for name in filenames:
            if name.startswith("."):
                continue
            try:
                st = os.stat(here / name)
            except OSError:
                continue
            e = groups.setdefault((str(folder), _stem(name)), _Entry(folder, _stem(name)))
            e.size += st.st_size
            e.used = max(e.used, st.st_mtime)
    return list(groups.values())


def max_bytes() -> int:
    try:
        mb = float(os.environ.get(ENV_MAX_MB, DEFAULT_MAX_MB))
    except ValueError:
        raise TLError(f"${ENV_MAX_MB} must be a number of megabytes, got "
                      f"{os.environ[ENV_MAX_MB]!r}") from None
    return int(mb * 1024 * 1024)


def evict(limit: int | None = None) -> int:
    """Remove least recently used entries while the cache is over its cap; the number of
    entries removed."""
    cap = max_bytes() if limit is None else limit
    entries = _entries(root())
    total = sum(e.size for e in entries)
    if total <= cap:
        return 0
    removed = 0
    for e in sorted(entries, key=lambda e: (e.used, e.stem)):
        if total <= 0.9 * cap:
            break
        remove_entry(e.folder, e.stem)
        total -= e.size
        removed += 1
    return removed


@dataclass(frozen=True)
class CacheInfo:
    path: pathlib.Path
    entries: dict[str, int]      # namespace -> number of entries
    size: int                    # bytes
    cap: int                     # bytes

    def describe(self) -> str:
        lines = [f"cache folder: {self.path}",
                 f"size: {self.size / 2**20:.1f} MiB of {self.cap / 2**20:.0f} MiB "
                 f"(${ENV_MAX_MB})"]
        for ns, n in sorted(self.entries.items()):
            lines.append(f"  {ns}: {n} entr{'y' if n == 1 else 'ies'}")
        if not self.entries:
            lines.append("  (empty)")
        return "\n".join(lines)


def info() -> CacheInfo:
    top = root()
    counts: dict[str, int] = {}
    size = 0
    for e in _entries(top):
        ns = e.folder.relative_to(top).as_posix()
        counts[ns] = counts.get(ns, 0) + 1
        size += e.size
    return CacheInfo(top, counts, size, max_bytes())


def clear() -> int:
    """Remove every entry; the number of bytes freed.  The folder itself stays."""
    top = root()
    freed = sum(e.size for e in _entries(top))
    for child in top.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    return freed


# ---------------------------------------------------------------------------------------------
# The version of the code that produced an entry


_PACKAGE = pathlib.Path(__file__).resolve().parent
_VERSION: str | None = None


def code_version() -> str:
    """A hash of tensorlang's own source files (the package, passes/, backends/, proofs/ and
    the grammar): any change of the compiler makes new keys, so no entry outlives the code
    that made it, without anyone remembering to bump a number."""
    global _VERSION
    if _VERSION is None:
        import importlib.util

        folders = {_PACKAGE}
        for sub in ("passes", "backends", "proofs"):
            spec = importlib.util.find_spec(f"tensorlang.{sub}")
            if spec is not None and spec.submodule_search_locations:
                folders.update(pathlib.Path(p).resolve() for p in spec.submodule_search_locations)
        h = hashlib.sha256()
        for folder in sorted(folders):
            for path in sorted(folder.rglob("*")):
                if path.suffix in (".py", ".lark", ".egg") and "__pycache__" not in path.parts \
                        and path.is_file():
                    h.update(path.relative_to(folder).as_posix().encode() + b"\0")
                    h.update(path.read_bytes() + b"\0")
        _VERSION = h.hexdigest()[:32]
    return _VERSION


# ---------------------------------------------------------------------------------------------
# Keys and programs


def structure_text(node: object) -> str:
    """An exact, deterministic text of an IR value (hash-consed nodes, tuples, strings,
    numbers): each distinct node once, in post-order, as `#k = Type(field, ...)`, so shared
    subterms cost nothing and equal values give equal texts in every process."""
    ids: dict[int, int] = {}
    lines: list[str] = []
    keep: list[object] = []          # nodes stay alive while their id() is in `ids`

    def ref(x: object) -> str:
        if hasattr(x, "_fields") and hasattr(x, "fields"):
            k = ids.get(id(x))
            if k is None:
                # lists, not generators: the recursion passes through no C call (whose
                # depth Python >= 3.12 bounds, whatever `sys.setrecursionlimit` says)
                inner = ", ".join([ref(f) for f in x.fields()])  # type: ignore[attr-defined]
                k = ids[id(x)] = len(lines)
                keep.append(x)
                lines.append(f"#{k} = {type(x).__name__}({inner})")
            return f"#{k}"
        if isinstance(x, (tuple, list)):
            return "(" + "".join([ref(y) + ", " for y in x]) + ")"
        if isinstance(x, float):
            return x.hex() if x == x else "nan"
        if isinstance(x, (str, int, bool)) or x is None:
            return repr(x)
        raise TypeError(f"no structure text for {type(x).__name__}")

    top = ref(node)
    return "\n".join(lines + [top])


def key_of(*parts: str) -> str:
    """The cache key of a description: SHA-256 of the code version and the parts."""
    h = hashlib.sha256(code_version().encode())
    for part in parts:
        h.update(b"\0" + part.encode("utf-8"))
    return h.hexdigest()[:40]


def put_data(ns: str, name: str, value: object) -> None:
    """Store plain data (dicts, lists, tuples, strings, numbers: no class instances)."""
    import pickle

    put_blob(ns, name, pickle.dumps(value, protocol=5))


def get_data(ns: str, name: str) -> object | None:
    """Plain data stored by `put_data`, hash checked, unpickled without any class or function
    (a payload naming one is damaged); None when missing or damaged."""
    import io
    import pickle

    class PlainOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            raise pickle.UnpicklingError(f"{module}.{name} is not plain data")

    data = get_blob(ns, name)
    if data is None:
        return None
    try:
        return PlainOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        _damaged(namespace(ns) / f"{name}.blob", f"not plain data: {err}")
        return None


class _ProgramUnpickler:
    """Unpickles only tensorlang IR (`tensorlang.ir.*`), the classes named in `extra` and
    plain data: even a blob whose hash matches cannot name any other class or function."""

    ALLOWED = ("tensorlang.ir.",)

    @classmethod
    def loads(cls, data: bytes, extra: frozenset[tuple[str, str]] = frozenset(),
              flat: bool = False) -> object:
        import io
        import pickle

        class Restricted(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> object:
                if module.startswith(cls.ALLOWED) or (module, name) in extra:
                    return super().find_class(module, name)
                raise pickle.UnpicklingError(f"{module}.{name} is not tensorlang IR")

        reader = Restricted(io.BytesIO(data))
        return load_flat(reader) if flat else reader.load()


PROGRAMS = "programs"


def put_program(key: str, program: object) -> None:
    """Store a final Tensor-SSA program under `key` (a versioned pickle of IR nodes)."""
    import dataclasses
    import pickle

    clean = dataclasses.replace(program) if dataclasses.is_dataclass(program) else program
    put_blob(PROGRAMS, key, pickle.dumps(clean, protocol=5))


def get_program(key: str) -> object | None:
    """The program stored under `key` after its hash is checked; None when missing or
    damaged (with a `CacheWarning`: the caller rebuilds it)."""
    import pickle

    data = get_blob(PROGRAMS, key)
    if data is None:
        return None
    try:
        return _ProgramUnpickler.loads(data)
    except (pickle.UnpicklingError, AttributeError, EOFError, TypeError, ValueError) as err:
        path = namespace(PROGRAMS) / f"{key}.blob"
        _damaged(path, f"not a program: {err}")
        return None


# ---------------------------------------------------------------------------------------------
# Checked modules: `.tl` text -> the type checker's result, so a warm process neither imports
# the parser (Lark) nor parses, checks or elaborates

CHECKED = "modules"
_CHECKED_CLASSES = frozenset({("tensorlang.check.typecheck", "CheckedModule"),
                              ("tensorlang.check.typecheck", "Signature"),
                              ("tensorlang.check.typecheck", "TLWarning"),
                              ("tensorlang.syntax.errors", "Loc"),
                              ("tensorlang.syntax.errors", "Source")})


def put_checked(key: str, checked: object) -> None:
    """Store a checked module (`typecheck.CheckedModule`: IR nodes, locations, warnings).
    Unlike a cached program its nodes keep their locations: errors and warnings raised on a
    warm load must still point into the file."""
    import io
    import pickle

    from tensorlang.ir.ast import Node

    class Located(pickle.Pickler):
        def reducer_override(self, obj: object) -> object:
            if isinstance(obj, Node) and obj.loc is not None:
                return obj.reduce_located()
            return NotImplemented

    out = io.BytesIO()
    dump_flat(Located(out, protocol=5), checked)
    put_blob(CHECKED, key, out.getvalue())


FLAT = "tensorlang-flat-pickle"


def dump_flat(pickler: "pickle.Pickler", obj: object) -> None:
    """Pickle `obj` without recursing into its IR trees: first each IR node reachable from
    it, children before parents, as its own pickle (the pickler's memo then writes a node
    already written as a reference), then `obj`.  Pickle recurses once per level of nesting,
    and since Python 3.12 that depth is bounded by a C recursion limit that
    `sys.setrecursionlimit` does not raise: a def of 10,000 statements nests 10,000 deep.
    `load_flat` reads it back."""
    from tensorlang.ir.ast import Node

    order: list[object] = []
    seen: set[int] = set()
    # (object, expanded): an explicit stack, the nodes in post-order
    stack: list[tuple[object, bool]] = [(obj, False)]
    while stack:
        item, expanded = stack.pop()
        if expanded:
            order.append(item)
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Node):
            stack.append((item, True))
            parts: Any = item.fields()
        elif isinstance(item, (tuple, list, set, frozenset)):
            parts = item
        elif isinstance(item, dict):
            parts = [*item.keys(), *item.values()]
        elif hasattr(item, "__dataclass_fields__"):
            parts = [getattr(item, f) for f in item.__dataclass_fields__]
        else:
            continue
        stack.extend((part, False) for part in reversed(list(parts)))
    pickler.dump((FLAT, len(order)))
    for node in order:
        pickler.dump(node)
    pickler.dump(obj)


def load_flat(unpickler: "pickle.Unpickler") -> object:
    """The object `dump_flat` wrote (the unpickler's memo holds the nodes read first)."""
    head = unpickler.load()
    if not (isinstance(head, tuple) and len(head) == 2 and head[0] == FLAT
            and isinstance(head[1], int)):
        raise ValueError("not a flat pickle")
    for _ in range(head[1]):
        unpickler.load()
    return unpickler.load()


def get_checked(key: str) -> object | None:
    """The checked module stored under `key`, hash checked and unpickled with only IR,
    `CheckedModule`, `Signature`, `TLWarning`, `Loc` and `Source` allowed; None when missing or damaged."""
    import pickle

    data = get_blob(CHECKED, key)
    if data is None:
        return None
    try:
        return _ProgramUnpickler.loads(data, _CHECKED_CLASSES, flat=True)
    except (pickle.UnpicklingError, AttributeError, EOFError, TypeError, ValueError) as err:
        _damaged(namespace(CHECKED) / f"{key}.blob", f"not a checked module: {err}")
        return None
