"""Every example parses, type-checks, and its interpreter result matches independent numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl
from examples_util import EXAMPLE_FILES, EXAMPLES, WORKLOADS


def assert_close(got, want, **tol):
    """Compare values that may be nested tuples (pair results)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, **tol)
    else:
        np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_checks_without_warnings(path):
    module = tl.load(str(path))
    assert list(module.warnings) == []


def test_every_example_function_has_a_reference():
    covered = {(w.file, w.func) for w in WORKLOADS.values()}
    for path in EXAMPLE_FILES:
        module = tl.load(str(path))
        for name in module.forward_names():
            assert (path.name, name) in covered, f"{path.name}:{name} has no numpy reference"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_interpreter_matches_numpy(name, n):
    w = WORKLOADS[name]
    args = w.inputs(w.sizes(n), np.random.default_rng(n))
    got = tl.load(str(EXAMPLES / w.file))[w.func].interpret(**args)
    assert_close(got, w.ref(args), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_interpreter_runs_examples_at_n200(name):
    w = WORKLOADS[name]
    args = w.inputs(w.sizes(200), np.random.default_rng(0))
    fn = tl.load(str(EXAMPLES / w.file))[w.func]
    got = fn.interpret(**args)   # how long this takes is measured by `tl bench`, not here
    assert_close(got, w.ref(args), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_example_through_the_whole_pipeline(name):
    """Every stage keeps the meaning; SSA is in normal form and costs what the source costs."""
    from tensorlang import pipeline
    from tensorlang.semantics.cost import cost_def
    from tensorlang.semantics.interp import interpret
    from tensorlang.proofs.normal_forms_ssa import is_tensor_ssa

    w = WORKLOADS[name]
    args = w.inputs(w.sizes(4), np.random.default_rng(4))
    fn = tl.load(str(EXAMPLES / w.file))[w.func]
    core, bound = fn.core(), fn.bind(**args)
    want = interpret(core, bound)
    for stage in pipeline.STAGE_NAMES[1:]:
        assert_close(interpret(pipeline.as_core(fn.run_to(stage)), bound), want,
                     rtol=1e-9, atol=1e-12)
    ssa = fn.run_to("ssa")
    assert is_tensor_ssa(ssa) is None
    assert cost_def(pipeline.as_core(ssa), bound).total <= cost_def(core, bound).total
    assert (cost_def(pipeline.as_core(fn.run_to("simplified")), bound).total
            <= cost_def(pipeline.as_core(ssa), bound).total)
