"""The Numba CUDA backend (SPEC 8, docs/backends.md section 9): agreement with the interpreter,
no atomics, every kernel writing only its own output element, PTX for the real target.

Kernels run where `numba_cuda.available()`: on a GPU, or under the CUDA simulator, which
must be switched on (`NUMBA_ENABLE_CUDASIM=1`) before numba is first imported.  In an
ordinary `pytest tests/` process without a GPU the tests that launch kernels skip, and
`test_kernels_under_the_simulator` runs this file again in a subprocess with the simulator
on (sizes 0..4: the simulator runs every GPU thread as a Python thread).  Without a GPU
the kernels are also compiled to PTX by numba's real CUDA target (NVVM from a CUDA toolkit),
which checks typing and lowering of the generated code for hardware.
"""
from __future__ import annotations

import ast as pyast
import io
import os
import subprocess
import sys
import tokenize
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorlang as tl
from examples_util import EXAMPLE_FILES, EXAMPLES, ROOT, WORKLOADS, assert_same, to_program, RTOL, ATOL
from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.build import Builder
from tensorlang.semantics.interp import interpret
from tensorlang.testing import programs, random_args

try:  # the CPU backend's loop-nest feature program (relations, strides, exists, ...)
    from test_numba_cpu import FEATURE_SIZES, FEATURES_TL
except ImportError:
    FEATURES_TL, FEATURE_SIZES = "", []

cuda_backend = pytest.importorskip("tensorlang.backends.numba_cuda")
compile_program = cuda_backend.compile_program
generated_source = cuda_backend.generated_source

RUNS_KERNELS = cuda_backend.available()
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
runs_kernels = pytest.mark.skipif(
    not RUNS_KERNELS, reason="no GPU and no simulator in this process "
                             "(test_kernels_under_the_simulator runs these in a subprocess)")
SIZES = (0, 1, 3)




# ---------------------------------------------------------------------------------------------
# The programs: every example function, derived functions, loop-nest features


# Which example programs test_examples_and_their_derivatives_agree_with_the_interpreter runs:
# all of them, or (TL_CUDA_EXAMPLES=files, test_kernels_under_the_simulator's CI variant) the
# functions as written in the files, without the vjp and jvp of every forward function
# (those are two thirds of the programs; the slow variant runs them under the simulator too).
CUDA_EXAMPLES = os.environ.get("TL_CUDA_EXAMPLES", "all")
assert CUDA_EXAMPLES in ("all", "files"), f"TL_CUDA_EXAMPLES={CUDA_EXAMPLES!r}: all or files"
ALL_EXAMPLES = CUDA_EXAMPLES == "all"


@lru_cache(maxsize=None)
def example_programs(generated: bool = True
                     ) -> list[tuple[str, Any, tssa.Program, tuple[ast.Param, ...]]]:
    """(name, workload, SSA program, parameters) for every function of examples/*.tl:
    forward functions, their derived functions (grad, hessian, hvp, jvp as written in the
    files), and (`generated`) vjp/jvp of every forward function."""
    derive = pytest.importorskip("tensorlang.passes.derive")
    by_func = {(w.file, w.func): w for w in WORKLOADS.values()}
    out = []
    for path in EXAMPLE_FILES:
        mod = tl.load(str(path))
        for name in mod.forward_names():
            w, d = by_func[(path.name, name)], mod[name].core()
            out.append((name, w, to_program(d), d.params))
            for kind in ("vjp", "jvp") if generated else ():
                p = derive.derive(to_program(d), kind)
                out.append((f"{kind}({name})", w, p, p.params))
        for name in mod.derived_names():
            f = mod[name]
            p = derive.derive(to_program(f.base.core()), f.kind, f.wrt)
            out.append((name, by_func[(path.name, f.base.name)], p, p.params))
    return out


def example_args(w: Any, params: tuple[ast.Param, ...], n: int) -> dict[str, Any]:
    """The workload's inputs at size n; parameters it lacks (tangents, cotangents) random."""
    base = w.inputs(w.sizes(n), np.random.default_rng(n))
    sig = ast.Def("f", params, None, ast.Const(0.0))
    sizes = {q.name: base[q.name] for q in params if isinstance(q.type, ast.TSize)}
    extra = random_args(sig, sizes, np.random.default_rng(n + 100))
    return {q.name: base.get(q.name, extra[q.name]) for q in params}


# ---------------------------------------------------------------------------------------------
# Agreement with the interpreter (kernels run: GPU or simulator)


@runs_kernels
def test_examples_and_their_derivatives_agree_with_the_interpreter():
    for name, w, p, _ in example_programs() if ALL_EXAMPLES else example_programs(False):
        c = compile_program(p)
        for n in SIZES:
            args = example_args(w, p.params, n)
            try:
                assert_same(c(args), interpret(tssa.to_core(p), args))
            except AssertionError as err:
                raise AssertionError(f"{name} at n={n}: {err}") from None


@runs_kernels
def test_forward_examples_agree_with_the_source_program():
    for w in WORKLOADS.values():
        fn = tl.load(str(EXAMPLES / w.file))[w.func]
        c = compile_program(fn.run_to("ssa"))
        for n in (0, 2, 4):
            args = w.inputs(w.sizes(n), np.random.default_rng(n))
            assert_same(c(args), interpret(fn.core(), args))


@runs_kernels
def test_loop_nest_features_agree_with_the_interpreter():
    """Relation coordinate lists (with and without a CSR row key), strides, quotients,
    `exists`, alternatives of `or`, and relations given as masks and as coordinate lists."""
    if not FEATURES_TL:
        pytest.skip("tests/test_numba_cpu.py has no FEATURES_TL")
    fn = tl.parse(FEATURES_TL)["features"]
    c = compile_program(fn.run_to("ssa"))
    for sizes in FEATURE_SIZES[:3]:
        for enc in ("bool", "coo"):
            args = random_args(fn.core(), sizes, np.random.default_rng(1), rel_encoding=enc)
            assert_same(c(args), interpret(fn.core(), args))


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.7, 30.0, 800.0, -800.0, 1e-300, np.inf,
           -np.inf, np.nan]


def builtins_program(chain: bool) -> tssa.Program:
    """Every builtin applied to (x, y): one output each, or (chain) each applied to the
    previous result (one fused kernel)."""
    n = ast.Affine.var("N")
    b = Builder([ast.Param("N", ast.TSize()), ast.Param("x", ast.tensor([n])),
                      ast.Param("y", ast.tensor([n]))])
    x, y = b.input("x"), b.input("y")
    outs: list[str] = []
    for fn, (nargs, nparams) in sorted(ast.BUILTINS.items()):
        first = outs[-1] if chain and outs else x
        ops = [(first, ["i"]), (y, ["i"]), (x, ["i"]), (y, ["i"])][:nargs]
        outs.append(b.map([("i", "N")], fn, ops, params=[1.5] * nparams))
    out: tssa.Out = outs[-1]
    if not chain:
        for v in reversed(outs[:-1]):
            out = (v, out)
    return b.program(out, name="builtins")


@runs_kernels
def test_builtins_on_special_values():
    """inf, nan, -0.0, overflow: the device functions give the interpreter's values."""
    p = builtins_program(chain=False)
    xs = np.array([a for a in SPECIAL for _ in SPECIAL])
    ys = np.array([b for _ in SPECIAL for b in SPECIAL])
    args = {"N": len(xs), "x": xs, "y": ys}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = compile_program(p)(args)
    want = interpret(tssa.to_core(p), args)
    assert_same(got, want)
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    for g, w in zip(got_leaves, want_leaves):   # signs of zeros too
        assert np.array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


def _leaves(v: Any) -> list[np.ndarray]:
    return [x for part in v for x in _leaves(part)] if isinstance(v, tuple) else [v]


@runs_kernels
@settings(max_examples=max(5, settings().max_examples // 2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(max_size=4, max_depth=3))
def test_random_programs_agree_with_the_interpreter(case):
    d, args = case
    p = to_program(d)
    got = compile_program(p)(args)
    assert_same(got, interpret(d, args), atol=1e-9)
    assert_same(got, interpret(tssa.to_core(p), args), atol=1e-9)


@runs_kernels
def test_arguments_results_and_transfers(monkeypatch):
    """Scalars and pairs in and out, no aliasing of results; arrays stay on the device
    between kernels: one transfer per input, one copy back per output leaf."""
    from numba import cuda
    fn = tl.parse("""
def f(N: size, x: R[N], s: R, A: R[N, N]) -> (R[N], (R, R)):
    y[i:N] = sum j:N. A[i, j] * x[j]
    return (x, (s * s, sum i:N. y[i] * x[i] * s))
""")["f"]
    c = compile_program(fn.run_to("ssa"))
    x = np.arange(3.0)
    args = {"N": 3, "x": x, "s": 2.0, "A": np.ones((3, 3))}
    counts = {"to": 0, "back": 0}
    to_device, device_array = cuda.to_device, type(cuda.device_array(1))
    copy_to_host = device_array.copy_to_host

    def counting_to_device(*a: Any, **k: Any) -> Any:
        counts["to"] += 1
        return to_device(*a, **k)

    def counting_copy_to_host(self: Any, *a: Any, **k: Any) -> Any:
        counts["back"] += 1
        return copy_to_host(self, *a, **k)

    monkeypatch.setattr(cuda, "to_device", counting_to_device)
    monkeypatch.setattr(device_array, "copy_to_host", counting_copy_to_host)
    got = c(args)
    assert counts == {"to": 3, "back": 3}   # x, s, A up; the three output leaves back
    monkeypatch.undo()
    assert_same(got, interpret(fn.core(), args))
    assert got[0] is not x
    assert_same(c(**args), got)


@runs_kernels
def test_identifiers_in_generated_code_are_generated():
    """Names that are not identifiers (possible through the AST or DSL) never reach the
    code: the kernels still run, and no name token of the source comes from them."""
    bad = "x; import os\nos.system('echo pwned')"
    b = Builder([ast.Param("N", ast.TSize()), ast.Param(bad, ast.tensor([ast.Affine.var("N")])),
                      ast.Param("E r", ast.TRel((ast.Affine.var("N"), ast.Affine.var("N"))))])
    xv = b.input(bad)
    v = b.reduce([("i", "N")], [("j", "N")], (xv, ["j"]),
                 pred=ast.RelCall("E r", (ast.Affine.var("i"), ast.Affine.var("j"))))
    w = b.map([("i", "N")], "exp", [(v, ["i"])])
    p = b.program(w, name="g(h)", ret=ast.tensor([ast.Affine.var("N")]))
    src = generated_source(p)
    names = {t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
             if t.type == tokenize.NAME}
    assert not any("pwned" in n or n == "os" for n in names)
    args = {"N": 4, bad: np.arange(4.0),
            "E r": np.random.default_rng(0).random((4, 4)) < 0.5}
    assert_same(compile_program(p)(args), interpret(tssa.to_core(p), args))


# ---------------------------------------------------------------------------------------------
# The shape of the generated code (no kernels run)


def _kernels(src: str) -> list[pyast.FunctionDef]:
    return [n for n in pyast.parse(src).body if isinstance(n, pyast.FunctionDef)
            and any("cuda.jit" in pyast.unparse(d) for d in n.decorator_list)]


def _stores(fn: pyast.FunctionDef) -> list[pyast.expr]:
    out: list[pyast.expr] = []
    for node in pyast.walk(fn):
        if isinstance(node, pyast.Assign):
            out += node.targets
        elif isinstance(node, (pyast.AugAssign, pyast.AnnAssign)):
            out.append(node.target)
        elif isinstance(node, pyast.For):
            out.append(node.target)
    return out


def check_kernel_writes_own_element(fn: pyast.FunctionDef) -> None:
    """The one store into memory is `out[point]`, `out` the last parameter, `point` the
    thread's point decoded from `cuda.grid(1)` (or `out[0]` for a scalar, one thread)."""
    out = fn.args.args[-1].arg
    stores = _stores(fn)
    memory = [t for t in stores if isinstance(t, pyast.Subscript)]
    assert len(memory) == 1, pyast.unparse(fn)
    (store,) = memory
    assert isinstance(store.value, pyast.Name) and store.value.id == out
    idx = store.slice.elts if isinstance(store.slice, pyast.Tuple) else [store.slice]
    first = fn.body[0]
    assert pyast.unparse(first) == "_t = cuda.grid(1)"
    if len(idx) == 1 and isinstance(idx[0], pyast.Constant):
        assert idx[0].value == 0 and "if _t < 1:" in pyast.unparse(fn)
        return
    names = [pyast.unparse(i) for i in idx]
    assert all(isinstance(i, pyast.Name) for i in idx) and len(set(names)) == len(names)
    decoded = {}
    for node in pyast.walk(fn):
        if isinstance(node, pyast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], pyast.Name) and node.targets[0].id in names:
            decoded[node.targets[0].id] = pyast.unparse(node.value)
    dims = [f"_d{k}" for k in range(len(names))]
    want = {names[-1]: "_t" if len(names) == 1 else f"_r % {dims[-1]}"}
    want.update({n: f"_r % {d}" for n, d in zip(names[1:-1], dims[1:-1])})
    if len(names) > 1:
        want[names[0]] = "_r"
    assert decoded == want, pyast.unparse(fn)
    rebound = [t for t in stores if isinstance(t, pyast.Name) and t.id in names]
    assert len(rebound) == len(names), "an index of the store is assigned twice"
    assert f"if _t < {' * '.join(dims)}:" in pyast.unparse(fn)


def test_no_atomics_and_each_kernel_writes_only_its_own_element():
    progs = [p for _, _, p, _ in example_programs()] + [builtins_program(chain=False)]
    if FEATURES_TL:
        progs.append(tl.parse(FEATURES_TL)["features"].run_to("ssa"))
    count = 0
    for p in progs:
        src = generated_source(p)
        assert "atomic" not in src.lower() and "syncthreads" not in src
        kernels = _kernels(src)
        assert len(kernels) == sum(1 for s in p.stmts if not isinstance(s.rhs, tssa.Input)) \
            - len(cuda_backend._plan(p).fused)        # one kernel per (fused) statement
        for k in kernels:
            check_kernel_writes_own_element(k)
        count += len(kernels)
    assert count > 100


def test_generated_code_shape():
    if FEATURES_TL:
        src = generated_source(tl.parse(FEATURES_TL)["features"].run_to("ssa"))
        assert src.count("@cuda.jit(cache=True)") == len(_kernels(src))
        assert "rp0_E[" in src and "rc0_E[" in src     # spmv walks CSR rows of E
        assert "% 2 == 0" in src                        # quot: i = k / 2 when 2 | k
        assert "_exists" in src                         # an exists is a flag loop
        assert "max(" not in src.replace("tl_imax(", "").replace("tl_max(", "")
    qform = tl.load(str(EXAMPLES / "qform.tl"))["qform"].run_to("ssa")
    qsrc = generated_source(qform)
    assert "def tl_k1(n_N, v_x, v_v0, s_v1):" in qsrc   # a scalar: a 1-element array
    assert "s_v1[0] = _val" in qsrc


# ---------------------------------------------------------------------------------------------
# PTX for the real CUDA target (no GPU needed; not under the simulator)


@lru_cache(maxsize=1)
def _nvvm_missing() -> str:
    if SIMULATOR:
        return "the simulator is on in this process"
    try:
        from numba.cuda.cudadrv.nvvm import NVVM
        NVVM()
    except Exception as err:  # no CUDA toolkit
        return f"no NVVM: {err}"
    return ""


PTX_CASES = ["masked", "matfac_hess", "nbody_grad", "conv", "trace_diag"]


@pytest.mark.parametrize("name", PTX_CASES + ["features", "builtins"])
def test_kernels_compile_to_ptx(name):
    if _nvvm_missing():
        pytest.skip(_nvvm_missing())
    if name == "features":
        if not FEATURES_TL:
            pytest.skip("tests/test_numba_cpu.py has no FEATURES_TL")
        p = tl.parse(FEATURES_TL)["features"].run_to("ssa")
    elif name == "builtins":   # every builtin as a device function, in one kernel
        p = builtins_program(chain=True)
    else:
        p = next(p for n, _, p, _ in example_programs() if n == name)
    ptx = cuda_backend.compile_ptx_kernels(p)
    assert len(ptx) == len(compile_program(p).kernels) > 0
    for text in ptx.values():
        assert ".entry" in text and "atom." not in text


# ---------------------------------------------------------------------------------------------
# This file under the simulator, from a process where it is off


@pytest.mark.parametrize("examples", ["files", pytest.param("all", marks=pytest.mark.slow)])
def test_kernels_under_the_simulator(tmp_path, examples):
    """CI: the example functions as written in the files (see ALL_EXAMPLES); -m slow: the vjp
    and jvp of every forward function too (docs/decisions.md, "CI time")."""
    if RUNS_KERNELS:
        pytest.skip("kernels run in this process")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", TENSORLANG_CACHE_DIR=str(tmp_path),
               TL_CUDA_EXAMPLES=examples,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
         "-k", "not compile_to_ptx and not generated_code_shape and not no_atomics"],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
