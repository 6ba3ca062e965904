"""The arrays a compiled kernel allocates (`machine_model.kernel_arrays`), issue 14: the
materialised Hessians allocate no temporary larger than their output plus their inputs
(matfac's Hessian once allocated an O(M^4 K) one: ~374 MiB at M = 200), and the check sees
a temporary that is larger."""
from __future__ import annotations

import pytest

import tensorlang as tl
from examples_util import EXAMPLES
from tensorlang.backends.common import machine_model
from tensorlang.ir import ast
from tensorlang.ir.build import Builder

HESSIANS = [("matfac.tl", "matfac_hess", lambda n: {"N": n, "M": n, "K": 5}),
            ("logreg.tl", "logreg_hess", lambda n: {"M": 2 * n, "N": n}),
            ("qform.tl", "qform_hess", lambda n: {"N": n})]


@pytest.mark.parametrize("file, name, sizes", HESSIANS)
def test_hessian_kernels_allocate_at_most_output_plus_inputs(file, name, sizes):
    p = tl.load(str(EXAMPLES / file))[name].final_program()
    for n in (3, 8, 200):
        arrays = machine_model.kernel_arrays(p, sizes(n))
        var, largest = arrays.largest_temporary
        assert largest <= arrays.outputs + arrays.inputs, (n, var, arrays)


def test_a_temporary_larger_than_the_output_is_seen():
    """`t[a, b, c] = sin(x[a] * x[b] * x[c])` read twice (so materialised) and summed to a
    vector: an O(N^3) temporary for an O(N) output."""
    n = ast.Affine.var("N")
    b = Builder([ast.Param("N", ast.TSize()), ast.Param("x", ast.tensor([n]))])
    x = b.input("x")
    xx = b.contract([("a", n), ("b", n)], [], (x, ["a"]), (x, ["b"]))
    prod = b.contract([("a", n), ("b", n), ("c", n)], [], (xx, ["a", "b"]), (x, ["c"]))
    # (a sine: not a cheap producer, which each reader would recompute instead)
    t = b.map([("a", n), ("b", n), ("c", n)], "sin", [(prod, ["a", "b", "c"])])
    s1 = b.reduce([("a", n)], [("b", n), ("c", n)], (t, ["a", "b", "c"]))
    s2 = b.reduce([("c", n)], [("a", n), ("b", n)], (t, ["a", "b", "c"]), coeff=2.0)
    out = b.add([("a", n)], (s1, ["a"]), (s2, ["a"]))
    arrays = machine_model.kernel_arrays(b.program(out), {"N": 10})
    assert arrays.largest_temporary[1] == 1000 and arrays.outputs == 10
