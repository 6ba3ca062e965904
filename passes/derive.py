"""The `derive` stage: derived functions of SPEC 2.5 as Tensor-SSA programs.

With f taking parameters P and returning y:

  jvp(f, x1, ...)   params P + d_x1 ...            returns (y, d_y)
  vjp(f, x1, ...)   params P + d_y (y's type)      returns (y, d_x1, ...)
  grad(f, x1, ...)  params P (f returns R)         returns d_x1 (or the tuple)
  hvp(f, x)         params P + v                   returns H v   (jvp of grad: forward
                                                                  over reverse)
  hessian(f, x)     params P                       returns H : R[X, X]
  jacobian(f, x)    params P                       returns J : R[Y, X], J[i, k] = dy_i/dx_k

`hessian` and `jacobian` are materialised the way ATL's qform1 benchmark does it: the
jvp (of grad, for the Hessian) is applied to the one-hot seed `gen k:n. [k == j]` and
vectorised over j -- every statement that depends on the seed gains the generator index j
(`fwd.jvp_program(seed="onehot")`).  The emitter inlines the seed as an Iverson bracket and
the index solver eliminates the sums it pins, so no loop over n directional derivatives
remains: the Hessian of `x^T A x` is `A[i, j] + A[j, i]`, O(N^2).

Every result is an ordinary `tssa.Program`: printable (`ssa_printer.to_text`), costable
(`cost_def(tssa.to_core(p), args)`), interpretable and differentiable again.

This module only differentiates Tensor-SSA programs; it never chains passes.  The pipeline
(`tensorlang.pipeline`, stage `derive`) hands it the base function as compiled (its
`simplified` program), so the cost bounds of SPEC 6 hold for the programs that run.
"""
from __future__ import annotations

from typing import Sequence

from tensorlang.check.typecheck import derived_signature
from tensorlang.ir.ast import DerivedDef, Param, Type
from tensorlang.ir.tssa import Program
from tensorlang.syntax.errors import TLError

from .vjp import vjp_program
from .jvp import jvp_program, wrt_params

KINDS = ("jvp", "vjp", "grad", "hvp", "hessian", "jacobian")


def _signature(p: Program, kind: str, wrt: Sequence[str]) -> tuple[tuple[Param, ...], Type]:
    """Parameters and return type exactly as the type checker states them (SPEC 2.5)."""
    if p.ret is None:
        raise TLError(f"{kind}({p.name}): the return type of {p.name} is unknown")
    sig = derived_signature(DerivedDef(f"{p.name}_{kind}", kind, p.name, tuple(wrt)),
                            p.params, p.ret)
    return tuple(sig[0]), sig[1]


def _named(p: Program, name: str, params: tuple[Param, ...], ret: Type) -> Program:
    if tuple(p.params) != params:
        raise AssertionError(f"derived parameters {p.params} differ from {params}")
    return Program(name, p.params, p.stmts, p.output, ret, p.ix)


def grad_program(p: Program, wrt: Sequence[str] | None = None,
                 name: str | None = None) -> Program:
    """Gradient of a real-valued program: vjp seeded with the constant 1."""
    return vjp_program(p, wrt, seed="one", outputs="grads", name=name or f"{p.name}_grad")


def hvp_program(p: Program, x: str, name: str | None = None) -> Program:
    """H v: the jvp of the gradient in x, the tangent parameter named v."""
    g = grad_program(p, [x])
    return jvp_program(g, [x], tangent_names={x: "v"}, outputs="tangent",
                       name=name or f"{p.name}_hvp")


def hessian_program(p: Program, x: str, name: str | None = None) -> Program:
    """The materialised Hessian: hvp on the one-hot seed, vectorised over the seed."""
    g = grad_program(p, [x])
    return jvp_program(g, [x], seed="onehot", outputs="tangent",
                       name=name or f"{p.name}_hessian")


def jacobian_program(p: Program, x: str, name: str | None = None) -> Program:
    """The materialised Jacobian J[I, K] = d y[I] / d x[K]."""
    return jvp_program(p, [x], seed="onehot", outputs="tangent",
                       name=name or f"{p.name}_jacobian")


def derive(p: Program, kind: str, wrt: Sequence[str] = (),
           name: str | None = None) -> Program:
    """The program of `kind(p, *wrt)` (SPEC 2.5) for a Tensor-SSA program `p`, with the
    signature the type checker gives the derived definition.  `wrt` empty: every
    real-valued parameter."""
    if kind not in KINDS:
        raise TLError(f"unknown derived function {kind} (expected one of {', '.join(KINDS)})")
    if not isinstance(p, Program):
        raise TLError(f"{kind}: the derive stage differentiates Tensor-SSA programs, not "
                      f"{type(p).__name__} (run the pipeline to 'ssa' or 'simplified' first)")
    params, ret = _signature(p, kind, wrt)
    xs = wrt_params(p, wrt)
    nm = name or f"{p.name}_{kind}"
    if kind == "jvp":
        out = jvp_program(p, xs, name=nm)
    elif kind == "vjp":
        out = vjp_program(p, xs, name=nm)
    elif kind == "grad":
        out = grad_program(p, xs, name=nm)
    elif kind == "hvp":
        out = hvp_program(p, _one(kind, xs), name=nm)
    elif kind == "hessian":
        out = hessian_program(p, _one(kind, xs), name=nm)
    else:
        out = jacobian_program(p, _one(kind, xs), name=nm)
    return _named(out, nm, params, ret)


def _one(kind: str, xs: Sequence[str]) -> str:
    if len(xs) != 1:
        raise TLError(f"{kind} differentiates with respect to exactly one parameter, "
                      f"found {len(xs)} ({', '.join(xs)})")
    return xs[0]


__all__ = ["derive", "grad_program", "hvp_program",
           "hessian_program", "jacobian_program", "jvp_program", "vjp_program", "KINDS"]
