"""AOT images of Numba CPU kernels (backends/aot_cpu.py, docs/caching.md "Engines"): they
agree with the interpreter and the JIT kernel, load without Numba, say when they run, and are
never loaded unless their hash matches (truncated, replaced, unrecorded images are rebuilt)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from examples_util import EXAMPLES, ROOT, WORKLOADS, assert_same, to_program
from tensorlang import cache
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs

from conftest import forget_in_process

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
numba_rt = pytest.importorskip("tensorlang.backends.numba_rt")

QFORM = EXAMPLES / "qform.tl"


def _images(cache_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache_dir / "kernels" / "numba_cpu").glob("*.aot.so"))


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(programs())
def test_random_programs_aot_agree_with_interpreter_and_jit(cache_dir, case):
    d, args = case
    p = to_program(d)
    aot = numba_cpu.compile_program(p, engine="aot")
    jit = numba_cpu.compile_program(p, engine="jit")
    got = aot(args)
    assert aot.last_engine == "aot"
    assert_same(got, interpret(d, args), atol=1e-9)
    assert_same(got, jit(args), atol=1e-9)
    assert jit.last_engine == "jit"


@pytest.mark.parametrize("name", ["logreg", "masked", "matfac"])
def test_examples_with_blas_and_prange_agree(cache_dir, name):
    w = WORKLOADS[name]
    fn = tl.load(str(EXAMPLES / w.file))[w.func]
    args = w.inputs(w.sizes(5), np.random.default_rng(0))
    want = interpret(fn.core(), args)
    assert_same(numba_cpu.compile_program(fn.run_to("ssa"), engine="aot")(args), want,
                atol=1e-9)


def test_an_image_per_argument_type_read_only_inputs_included(cache_dir):
    """The images are looked up per call by the arguments' traits: a read-only array is
    another Numba type than a writeable one, so it gets (and keeps) an image of its own."""
    fn = tl.load(str(QFORM))["qform"]
    c = numba_cpu.compile_program(fn.run_to("ssa"), engine="aot")
    x, A = np.arange(3.0), np.eye(3)
    frozen = A.copy()
    frozen.flags.writeable = False
    for _ in range(2):
        assert c({"N": 3, "x": x, "A": A}) == pytest.approx(5.0)
        assert c({"N": 3, "x": x, "A": frozen}) == pytest.approx(5.0)
    assert len(c._images) == 2 and len(set(c._images.values())) == 2
    assert len(_images(cache_dir)) == 2


def test_auto_engine_weighs_parallel_kernels(cache_dir):
    w = WORKLOADS["masked"]
    fn = tl.load(str(EXAMPLES / w.file))[w.func]
    c = numba_cpu.compile_program(fn.run_to("ssa"))
    assert c.engine == "auto"
    small = w.inputs(w.sizes(4), np.random.default_rng(0))
    assert c.engine_for(small) == "aot"
    n = 2000
    assert c.engine_for({"N": n, "E": np.ones((n, n), bool), "A": np.zeros((n, n))}) == "jit"
    # the cost counts the relation's entries: an empty one is no work
    assert c.engine_for({"N": n, "E": np.zeros((n, n), bool), "A": np.zeros((n, n))}) == "aot"
    c(small)
    assert c.last_engine == "aot" and c.cache_stats() == {"hits": 0, "misses": 0}


def test_engine_choice_never_evaluates_a_dense_box(cache_dir, monkeypatch):
    """A gather through an index array or a quasi-affine index (`x[i // 2]`) has a dense box
    of N^2 points or more: the engine is chosen from a bound (relation members, sizes), not
    the exact cost, which would take longer than the call (minutes at these sizes)."""
    def refuse(self, args):
        raise AssertionError("the exact cost was evaluated")

    stencil = tl.load(str(EXAMPLES / "stencil.tl"))
    embedding = tl.load(str(EXAMPLES / "embedding.tl"))
    up = numba_cpu.compile_program(stencil.upsample.run_to("ssa"))
    bag = numba_cpu.compile_program(embedding.embag_grad.run_to("ssa"))
    monkeypatch.setattr(numba_cpu.CompiledProgram, "_cost", refuse)
    n, m = 2000, 8
    assert up.engine_for({"N": n, "M": m, "x": np.zeros((n, m)),
                          "s": np.zeros((2 * n, 2 * m))}) == "jit"
    rng = np.random.default_rng(0)
    args = {"B": 1000, "K": 8, "V": 1000, "D": 16, "tok": rng.integers(0, 1000, (1000, 8)),
            "E": np.zeros((1000, 16)),
            "w": np.zeros(16), "y": np.zeros(1000)}
    assert bag.engine_for(args) == "aot"   # 8000 entries: small, though the box is 10^8
    assert numba_cpu.cost_bound(bag.program, {"B": 1000, "K": 8, "V": 1000, "D": 16},
                                {"tok": 8000}) < numba_cpu.cost_bound(
        bag.program, {"B": 1000, "K": 8, "V": 1000, "D": 16}) // 100


def test_unknown_engine_is_an_error(cache_dir):
    with pytest.raises(tl.TLError, match="unknown engine"):
        numba_cpu.compile_program(_qform_hess()[1], engine="fast")


def _qform_hess():
    m = tl.load(str(QFORM))
    return m.qform_hess, m.qform_hess.final_program()


_WARM = """
import json, sys
import numpy as np
import tensorlang as tl
m = tl.load(sys.argv[1])
c = m.qform_hess.compile("numba")
h = m.qform_hess(x=np.arange(3.0), A=np.eye(3))
heavy = ("numba", "llvmlite", "scipy", "egglog", "lark", "hypothesis")
print(json.dumps({"imported": sorted({k.split(".")[0] for k in sys.modules} & set(heavy)),
                  "engine": c._run.last_engine, "value": np.asarray(h).tolist()}))
"""


def test_warm_process_loads_the_image_without_numba(cache_dir):
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run() -> dict:
        r = subprocess.run([sys.executable, "-c", _WARM, str(QFORM)], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert "warning" not in r.stderr.lower(), r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = run()
    assert cold["engine"] == "aot" and "numba" in cold["imported"]   # built here
    warm = run()
    assert warm == {"imported": [], "engine": "aot", "value": cold["value"]}
    np.testing.assert_allclose(warm["value"], 2 * np.eye(3))


@pytest.mark.parametrize("damage", ["truncate", "flip", "unrecorded", "planted"])
def test_damaged_image_is_rebuilt(cache_dir, damage):
    fn, p = _qform_hess()
    x, a = np.arange(3.0), np.arange(9.0).reshape(3, 3)
    want = a + a.T
    np.testing.assert_allclose(fn(x=x, A=a), want)
    [image] = _images(cache_dir)
    meta = image.parent / (image.name.split(".", 1)[0] + ".meta.json")
    good = image.read_bytes()
    # Damage as another process would do it: a new file replaces the image (this process
    # has the old one mapped; changing mapped code in place would crash it, as it would
    # crash any process running a library that is overwritten).
    if damage == "truncate":
        cache.atomic_write(image, good[:len(good) // 2])
    elif damage == "flip":         # same size, one byte of code changed
        k = len(good) // 3
        cache.atomic_write(image, good[:k] + bytes([good[k] ^ 0xFF]) + good[k + 1:])
    elif damage == "unrecorded":   # a process died between writing the image and its hash
        meta.write_text(json.dumps(dict(json.loads(meta.read_text()), aot={})))
    else:                          # a working image of another kernel under this one's name
        tl.load(str(QFORM)).qform_grad(x=x, A=a)
        other = next(f for f in _images(cache_dir) if f != image)
        cache.atomic_write(image, other.read_bytes())
    forget_in_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = numba_cpu.compile_program(p)
        out = c(N=3, x=x, A=a)
    np.testing.assert_allclose(out, want)
    assert c.last_engine == "aot"
    assert any("damaged AOT image" in str(w.message) for w in caught)
    recorded = json.loads(meta.read_text())["aot"]
    assert list(recorded.values()) == [cache.sha256(image.read_bytes())]   # rebuilt, recorded


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5), st.integers(0, 9), st.sampled_from([1, 1, 2, 3]),
       st.integers(0, 2 ** 16))
def test_the_images_matmul_loops_are_a_matmul(m, k, n, seed):
    """`numba_rt.tl_matmul_loops` (what AOT images call for BLAS): any shape, the
    matrix-vector path (n = 1, four partial sums) included."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    np.testing.assert_allclose(numba_rt.tl_matmul_loops(a, b), a @ b, rtol=1e-12, atol=1e-12)
