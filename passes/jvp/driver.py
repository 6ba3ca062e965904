"""The jvp driver: walk the statements in order, apply `JVP_RULES`, assemble the program.

The result is again a Tensor-SSA `Program` (params P + `d_x` per wrt input, output
`(y, d_y)`), so it composes with every other pass.  With `seed="onehot"` (one real-tensor
input x) the tangent is the one-hot `gen K, J. [K == J]` and every tangent statement gains the
generator indices J (appended): the Jacobian / Hessian construction of the derived functions.
The emitter (`emit.Emitter`) inlines constant and gather reads and eliminates summation
indices with the index solver, so the one-hot seed simplifies away.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Param, Type
from tensorlang.ir.tssa import Program
from tensorlang.syntax.errors import TLError

from .emit import Emitter
from .rules import JVP_RULES, Forward
from .signature import map_out, new_param, wrt_params


def jvp_program(p: Program, wrt: Sequence[str] | None = None, *,
                tangent_names: Mapping[str, str] | None = None, outputs: str = "both",
                seed: str = "param", name: str | None = None,
                ret: Type | None = None, naive: bool = False) -> Program:
    """The forward derivative of `p` (SPEC 2.5 `jvp`).

    `outputs`: "both" returns `(y, d_y)`, "tangent" only `d_y`.  `seed`: "param" adds a
    tangent parameter per wrt input (named `d_x`, or `tangent_names[x]`); "onehot" (one
    real-tensor input x) seeds with `gen K, J. [K == J]` and appends J to every tangent,
    giving `d_y[I, J] = d y[I] / d x[J]` (the Jacobian).  `naive`: the bare rules without
    the emitter's simplifications (for comparison only).
    """
    if outputs not in ("both", "tangent"):
        raise ValueError(f"outputs must be 'both' or 'tangent', not {outputs!r}")
    if seed not in ("param", "onehot"):
        raise ValueError(f"seed must be 'param' or 'onehot', not {seed!r}")
    xs = wrt_params(p, wrt)
    types = p.param_types
    taken = {q.name for q in p.params}
    tnames = {x: (tangent_names or {}).get(x, f"d_{x}") for x in xs}
    batch: tuple[Affine, ...] = ()
    new: list[Param] = []
    if seed == "onehot":
        if len(xs) != 1 or not isinstance(ast.scalar_of(types[xs[0]]), ast.TReal):
            raise TLError("a one-hot seed needs exactly one input of type R or R[...]")
        batch = ast.shape_of(types[xs[0]])
    else:
        new = [new_param(p, tnames[x], types[x], taken) for x in xs]
    em = Emitter(tuple(p.params) + tuple(new), p.ix, naive)
    fw = Forward(em, p, xs, tnames, seed, batch)
    for s in p.stmts:
        fw.M[s.var] = em.copy(s.rhs, fw.M)
        fw.T[s.var] = JVP_RULES.lookup(s.rhs).fn(fw, s)
    y = map_out(p.output, lambda v: fw.M[v])

    def tangent(v: str) -> str:
        t = fw.T.get(v)
        return t if t is not None else em.zeros(tuple(p.shapes[v]) + batch)

    dy = map_out(p.output, tangent)
    out: tssa.Out = (y, dy) if outputs == "both" else dy
    if ret is None and p.ret is not None:
        tret: Type | None = p.ret
        if seed == "onehot":
            tret = ast.tensor(ast.shape_of(p.ret) + batch) if isinstance(
                ast.scalar_of(p.ret), ast.TReal) else None
        if tret is not None:
            ret = ast.TPair(p.ret, tret) if outputs == "both" else tret
    return em.b.program(out, name or f"{p.name}_jvp", ret)


__all__ = ["jvp_program"]
