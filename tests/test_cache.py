"""The on-disk cache (SPEC 15, tensorlang/cache.py, docs/caching.md): a private folder or none,
every entry checked against its hash before use, damaged entries rebuilt with a warning, an
LRU size cap, `tl cache info|clear`, and a warm process that neither derives nor loads egglog.

Each test plants, truncates, empties or replaces entries and checks that the right answer
comes back."""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tensorlang as tl
from tensorlang import cache, cli
from tensorlang.backends.numba_cpu import ENV_ENGINE
from conftest import forget_in_process

ROOT = pathlib.Path(__file__).resolve().parents[1]
QFORM = ROOT / "examples" / "qform.tl"


def _qform_hess_expected(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    return a + a.T


def _fresh_hessian():
    """A new module (so no in-process memo of the Function) and arguments."""
    m = tl.load(QFORM)
    rng = np.random.default_rng(3)
    x, a = rng.normal(size=4), rng.normal(size=(4, 4))
    return m.qform_hess, x, a


def _run_hessian() -> np.ndarray:
    f, x, a = _fresh_hessian()
    out = f(x=x, A=a)
    np.testing.assert_allclose(out, _qform_hess_expected(x, a), rtol=1e-12)
    return out


def _kernel_files(cache_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache_dir / "kernels" / "numba_cpu").glob("tl_*.py"))


# ---------------------------------------------------------------------------------------------
# The folder


def test_folder_is_created_private(cache_dir):
    assert cache.root() == cache_dir
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    _run_hessian()
    for sub in cache_dir.rglob("*"):
        if sub.is_dir():
            assert stat.S_IMODE(sub.stat().st_mode) & 0o077 == 0 or sub.name == "__pycache__"


def test_folder_writable_by_others_is_refused(cache_dir):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    planted = cache_dir / "programs"
    planted.mkdir()
    (planted / "x.blob").write_bytes(b"planted")
    with pytest.warns(cache.CacheWarning, match="writable by other users"):
        got = cache.root()
    assert got != cache_dir and stat.S_IMODE(got.stat().st_mode) == 0o700
    assert _run_hessian().shape == (4, 4)
    assert not _kernel_files(cache_dir)          # nothing written to (or read from) it


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="chown to another user needs root")
def test_folder_owned_by_another_user_is_refused(cache_dir):
    # The attack of the issue: someone else owns the folder and planted a kernel in it.
    cache_dir.mkdir(mode=0o700)
    _run_hessian()                                 # fill it as ourselves ...
    forget_in_process()
    for path in _kernel_files(cache_dir):          # ... then plant a wrong kernel
        path.write_text(path.read_text().replace("return ", "return 0 * "))
    for sub in [cache_dir, *cache_dir.rglob("*")]:
        os.chown(sub, 12345, 12345)
    with pytest.warns(cache.CacheWarning, match="owned by uid 12345"):
        _run_hessian()                             # right answer: the folder was not used


def test_readable_folder_of_ours_is_tightened(cache_dir):
    cache_dir.mkdir(mode=0o755)
    os.chmod(cache_dir, 0o755)
    assert cache.root() == cache_dir
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700


def test_symlinked_folder_is_refused(cache_dir, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    cache_dir.symlink_to(target)
    with pytest.warns(cache.CacheWarning, match="not a directory"):
        assert cache.root() != cache_dir


# ---------------------------------------------------------------------------------------------
# Entries: hashes checked, damage repaired


def test_blob_round_trip_and_tampering(cache_dir):
    cache.put_blob("t", "k", b"payload")
    assert cache.get_blob("t", "k") == b"payload"
    path = cache_dir / "t" / "k.blob"
    path.write_bytes(path.read_bytes().replace(b"payload", b"paylaod"))
    with pytest.warns(cache.CacheWarning, match="does not match its hash"):
        assert cache.get_blob("t", "k") is None
    assert not path.exists()


@pytest.mark.parametrize("damage", ["edit", "empty", "truncate"])
def test_damaged_kernel_is_rebuilt(cache_dir, damage):
    _run_hessian()
    (kernel,) = _kernel_files(cache_dir)
    good = kernel.read_text()
    if damage == "edit":       # the example: an edited kernel changed every answer
        kernel.write_text(good.replace("return ", "return 0 * "))
    elif damage == "empty":
        kernel.write_text("")
    else:
        kernel.write_text(good[: len(good) // 2])
    forget_in_process()
    with pytest.warns(cache.CacheWarning, match="damaged cache entry"):
        _run_hessian()
    assert kernel.read_text() == good


@pytest.mark.parametrize("damage", ["empty", "truncate", "replace"])
def test_damaged_program_is_rebuilt(cache_dir, damage):
    _run_hessian()
    (blob,) = (cache_dir / "programs").glob("*.blob")
    data = blob.read_bytes()
    if damage == "empty":
        blob.write_bytes(b"")
    elif damage == "truncate":
        blob.write_bytes(data[: len(data) // 2])
    else:   # a well-formed entry with a correct hash whose payload is not a program
        payload = pickle.dumps(os.system)
        blob.write_bytes(b"tensorlang-cache 1 " + cache.sha256(payload).encode() + b"\n" +
                         payload)
    forget_in_process()
    with pytest.warns(cache.CacheWarning, match="damaged cache entry"):
        _run_hessian()
    assert blob.read_bytes() == data


@pytest.mark.parametrize("damage", ["truncate", "empty", "unrecorded"])
def test_damaged_numba_files_are_recompiled(cache_dir, damage, monkeypatch):
    monkeypatch.setenv(ENV_ENGINE, "jit")   # Numba's own files (the JIT engine)
    _run_hessian()
    numba_files = sorted((cache_dir / "kernels" / "numba_cpu" / "__pycache__").glob("tl_*"))
    assert numba_files
    index = next(f for f in numba_files if f.suffix == ".nbi")
    if damage == "truncate":
        index.write_bytes(index.read_bytes()[:20])
    elif damage == "empty":
        index.write_bytes(b"")
    else:   # a file the meta data does not list (a process died before recording it)
        meta = next((cache_dir / "kernels" / "numba_cpu").glob("*.meta.json"))
        meta.write_text(json.dumps(dict(json.loads(meta.read_text()), numba={})))
    forget_in_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_hessian()
    if damage != "unrecorded":
        assert any("damaged Numba cache file" in str(w.message) for w in caught)


def test_warm_numba_cache_is_used_when_intact(cache_dir, monkeypatch):
    monkeypatch.setenv(ENV_ENGINE, "jit")
    script = ("import tensorlang as tl, numpy as np, json\n"
              f"m = tl.load({str(QFORM)!r})\n"
              "c = m.qform_hess.compile('numba')\n"
              "c(x=np.ones(3), A=np.eye(3))\n"
              "print(json.dumps(c._run.cache_stats()))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert "warning" not in r.stderr.lower(), r.stderr
    assert json.loads(runs[0].stdout) == {"hits": 0, "misses": 1}
    assert json.loads(runs[1].stdout) == {"hits": 1, "misses": 0}


# ---------------------------------------------------------------------------------------------
# Size cap, info, clear


def test_lru_cap_evicts_least_recently_used(cache_dir, monkeypatch):
    for k in range(5):
        cache.put_blob("t", f"e{k}", bytes(1000))
        os.utime(cache_dir / "t" / f"e{k}.blob", (1000 + k, 1000 + k))
    assert cache.get_blob("t", "e0") is not None       # a use: e0 is now the newest
    monkeypatch.setenv(cache.ENV_MAX_MB, str(3500 / 2**20))
    assert cache.evict() == 3                          # down to 90% of 3500 bytes
    left = sorted(p.stem for p in (cache_dir / "t").glob("*.blob"))
    assert left == ["e0", "e4"]


@pytest.mark.parametrize("engine", ["jit", "aot"])
def test_kernel_entry_is_evicted_with_its_numba_files(cache_dir, monkeypatch, engine):
    monkeypatch.setenv(ENV_ENGINE, engine)
    _run_hessian()
    monkeypatch.setenv(cache.ENV_MAX_MB, "0")
    assert cache.evict() >= 2
    assert not [p for p in cache_dir.rglob("*") if p.is_file()]
    forget_in_process()
    monkeypatch.delenv(cache.ENV_MAX_MB)
    _run_hessian()                                     # rebuilt


def test_tl_cache_info_and_clear(cache_dir, capsys):
    _run_hessian()
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out and "kernels/numba_cpu: 1 entry" in out
    assert "programs: 1 entry" in out and "links/numba_cpu: 1 entry" in out
    assert cli.main(["cache", "clear"]) == 0
    assert "cleared" in capsys.readouterr().out
    assert not [p for p in cache_dir.rglob("*") if p.is_file()]
    assert cli.main(["cache"]) == 0
    assert "(empty)" in capsys.readouterr().out
    forget_in_process()
    _run_hessian()


# ---------------------------------------------------------------------------------------------
# Keys and the warm process


def test_front_key_is_exact_and_seed_independent(cache_dir):
    m = tl.parse("def f(N: size, x: R[N]) -> R:\n    return sum i:N. 0.1 * x[i]\n"
                 "def g(N: size, x: R[N]) -> R:\n    return sum i:N. 0.10000000000000002 * x[i]\n")
    assert m.f.cache_text().replace("'f'", "'g'") != m.g.cache_text()
    script = ("import tensorlang as tl, hashlib\n"
              f"m = tl.load({str(QFORM)!r})\n"
              "print(hashlib.sha256(m.qform_hess.cache_text().encode()).hexdigest())\n")
    outs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.add(r.stdout)
    assert len(outs) == 1


_WARM = """
import sys, json
import numpy as np
import tensorlang as tl
from tensorlang import pipeline
ran, derived = [], []
original = pipeline.run_to
pipeline.run_to = lambda *a, **k: (ran.append(a[1]), original(*a, **k))[1]
core = tl.api.DerivedFunction.core
tl.api.DerivedFunction.core = lambda self: (derived.append(self.name), core(self))[1]
m = tl.load(sys.argv[1])
h = m.qform_hess(x=np.arange(3.0), A=np.eye(3))
print(json.dumps({"egglog": any(k.split(".")[0] == "egglog" for k in sys.modules),
                  "derive": derived,
                  "simplify": "tensorlang.passes.simplify" in sys.modules,
                  "stages": ran, "value": h.tolist()}))
"""


def test_warm_process_neither_derives_nor_imports_egglog(cache_dir):
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run() -> dict:
        r = subprocess.run([sys.executable, "-c", _WARM, str(QFORM)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = run()
    assert "derive" in cold["stages"]                # the first process derives ...
    warm = run()
    assert warm == {"egglog": False, "derive": [], "simplify": False, "stages": [],
                    "value": cold["value"]}
    np.testing.assert_allclose(warm["value"], 2 * np.eye(3))


_LOCATED = """
import sys, numpy as np, tensorlang as tl
m = tl.load(sys.argv[1])
try:
    m.f(np.zeros(3), np.zeros((3, 4)))
except tl.ShapeError as err:
    print(err)
"""


def test_warm_checked_module_keeps_locations(cache_dir, tmp_path):
    """A module loaded from the checked-module cache still locates its errors (a pickled node
    used to drop its location, so a warm process reported unlocated shape errors)."""
    src = tmp_path / "located.tl"
    src.write_text("# a comment\ndef f(N: size, x: R[N],\n      A: R[N, N]) -> R:\n"
                   "    return x[0] * A[0, 0]\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run() -> str:
        r = subprocess.run([sys.executable, "-c", _LOCATED, str(src)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    cold, warm = run(), run()
    assert cold.startswith(f"{src}:3:7: shape error: argument A of f"), cold
    assert warm == cold


# ---------------------------------------------------------------------------------------------
# Constants are kernel arguments


@pytest.mark.parametrize("engine", ["jit", "aot"])
def test_programs_differing_in_constants_share_one_kernel(cache_dir, monkeypatch, engine):
    monkeypatch.setenv(ENV_ENGINE, engine)
    template = ("def f(N: size, x: R[N]) -> R:\n"
                "    return sum i:N. {a} * sin({b} * x[i]) + {c} * x[i] * x[i]\n"
                "def g = grad(f, x)\n")
    x = np.linspace(-1.0, 1.0, 5)
    results = []
    for a, b, c in [(0.3, 1.7, 2.5), (0.25, -3.0, 1e-3), (7.0, 0.5, 0.125)]:
        m = tl.parse(template.format(a=a, b=b, c=c))
        got = m.g(x=x)
        np.testing.assert_allclose(got, a * b * np.cos(b * x) + 2 * c * x, rtol=1e-12)
        results.append(m.g.compile("numba")._run)
    assert len({r.key for r in results}) == 3            # three programs ...
    assert len({r.module_key for r in results}) == 1     # ... one module, compiled once
    assert len(_kernel_files(cache_dir)) == 1
    if engine == "jit":
        assert results[0].kernel is results[-1].kernel
        assert results[-1].cache_stats() == {"hits": 0, "misses": 1}   # one compilation
    else:
        assert {r.last_engine for r in results} == {"aot"}
        assert len(list((cache_dir / "kernels" / "numba_cpu").glob("*.aot.so"))) == 1
    assert "0.3" not in results[0].source and "tl_c" in results[0].source
