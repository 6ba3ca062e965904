"""Small sizes compiled into the JIT kernel as constants (backends/size_constants.py, issue 14):
the specialised module is the generic one with `n_K = 5` first in every function taking
`n_K`, so it computes the same bits; a large call with a small size runs such a variant, at
most `VARIANTS` of them per program, and a small call (the AOT image's) never does."""
from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given

import tensorlang as tl
from examples_util import EXAMPLES, assert_same, to_program
from tensorlang.ir import tssa
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs

numba_cpu = pytest.importorskip("tensorlang.backends.numba_cpu")
from tensorlang.backends import size_constants  # noqa: E402
from tensorlang.backends.size_constants import with_constant_sizes  # noqa: E402

SOURCE = '''\
def tl_body0(_lo, _hi, n_K, v_x):
    for i in range(_lo, _hi):
        pass
    return n_K * 2


def other(n_N):
    return n_N


def tl_body1(n_K, v_x):
    return tl_tanh(v_x) * n_K


def tl_kernel(n_N, n_K, v_x):
    """doc"""
    return n_N * tl_body0(0, 1, n_K, v_x)
'''


def test_the_constant_comes_first_in_the_bodies_taking_the_size_and_without_long_helpers():
    out = with_constant_sizes(SOURCE, {"n_K": 5})
    assert out.count("n_K = 5") == 1
    assert "def tl_body0(_lo, _hi, n_K, v_x):\n    n_K = 5   # size compiled in\n" in out
    assert "def other(n_N):\n    return n_N" in out
    assert "def tl_body1(n_K, v_x):\n    return" in out       # (calls tl_tanh)
    assert 'def tl_kernel(n_N, n_K, v_x):\n    """doc"""' in out  # (the parallel loops)
    scope: dict[str, Any] = {}
    exec(out, scope)
    assert scope["tl_kernel"](3, 99, None) == 30


def _plain(p: tssa.Program, source: str, consts: tuple[float, ...]) -> Any:
    """`p`'s kernel module `source` run as plain Python (as `compile_program(jit=False)`)."""
    mod = types.ModuleType(f"size_constants_test.{p.name}")
    exec(compile(source, "<specialised>", "exec"), mod.__dict__)
    return numba_cpu.CompiledProgram(p, False, source, "", mod, None, consts)


@given(programs())
def test_random_programs_compute_the_same_with_their_sizes_compiled_in(case):
    d, args = case
    p = to_program(d)
    from tensorlang.backends import numba_cpu_source

    source, consts = numba_cpu_source.abstract_source(p, False, False)
    generic = _plain(p, source, consts)
    params = dict(zip(numba_cpu._kernel_params(source), generic._args))
    sizes = {name: int(args[key]) for name, (kind, key) in params.items() if kind == "size"}
    want = generic(args)
    assert_same(want, interpret(d, args), atol=1e-9)
    got = _plain(p, with_constant_sizes(source, sizes), consts)(args)
    _same_bits(got, want)


def _same_bits(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same_bits(g, w)
        return
    np.testing.assert_array_equal(got, want)   # (nan equals nan)


def _matfac_grad(n: int, k: int) -> tuple[Any, dict[str, Any]]:
    g = tl.load(str(EXAMPLES / "matfac.tl"))["matfac_grad"]
    rng = np.random.default_rng(k)
    args = {"N": n, "M": n, "K": k, "Om": rng.random((n, n)) < 0.3,
            "T": rng.uniform(-1, 1, (n, n)), "U": rng.uniform(-1, 1, (n, k)),
            "V": rng.uniform(-1, 1, (n, k))}
    return g.compile("numba")._run, args


def test_a_large_call_with_a_small_size_runs_its_own_kernel_with_the_same_bits(monkeypatch):
    monkeypatch.setattr(size_constants, "VARIANTS", 1)
    c, args = _matfac_grad(400, 5)
    got = c(args)
    assert c.last_engine == "jit" and list(c._variants) == [(("n_K", 5),)]
    kargs = [get(c._bound(args)) for get in c._getters]
    np.testing.assert_array_equal(got, c.kernel(*kargs)[0])   # the generic kernel's bits
    # a second small size is over VARIANTS: the generic kernel runs it
    _, other = _matfac_grad(400, 3)
    c(other)
    assert list(c._variants) == [(("n_K", 5),)]
    # a small call runs on the AOT image, never specialised
    _, small = _matfac_grad(20, 4)
    c(small)
    assert c.last_engine == "aot" and list(c._variants) == [(("n_K", 5),)]
