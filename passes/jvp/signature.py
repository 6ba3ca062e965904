"""Signatures of derivative programs: which parameters are differentiated, new parameter
names, and output trees (a variable, or right-nested pairs of them) -- shared by jvp, vjp and
the derived functions."""
from __future__ import annotations

from typing import Callable, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Param, Type
from tensorlang.ir.tssa import Program
from tensorlang.syntax.errors import TLError


def is_real_valued(t: Type) -> bool:
    """R, arrays of real-valued types, pairs of real-valued types (SPEC 2.5)."""
    if isinstance(t, ast.TReal):
        return True
    if isinstance(t, ast.TArr):
        return is_real_valued(t.elem)
    if isinstance(t, ast.TPair):
        return is_real_valued(t.a) and is_real_valued(t.b)
    return False


def wrt_params(p: Program, wrt: Sequence[str] | None) -> tuple[str, ...]:
    """The differentiated inputs: `wrt`, or every real-valued parameter (checked)."""
    types = p.param_types
    xs = tuple(wrt) if wrt else tuple(q.name for q in p.params if is_real_valued(q.type))
    if not xs:
        raise TLError(f"{p.name} has no real-valued parameter to differentiate")
    if len(set(xs)) != len(xs):
        raise TLError(f"a parameter is named twice in {', '.join(xs)}")
    for x in xs:
        if x not in types:
            raise TLError(f"{x} is not a parameter of {p.name}")
        if not is_real_valued(types[x]):
            raise TLError(f"cannot differentiate {p.name} with respect to {x}: not real-valued")
    return xs


def new_param(p: Program, name: str, t: Type, taken: set[str]) -> Param:
    if name in taken:
        raise TLError(f"the new parameter {name} clashes with a parameter of {p.name}")
    taken.add(name)
    return Param(name, t)


def out_paths(out: tssa.Out, path: tuple[int, ...] = ()) -> list[tuple[str, tuple[int, ...]]]:
    """The leaves of an output tree with their projection paths."""
    if isinstance(out, str):
        return [(out, path)]
    return out_paths(out[0], path + (0,)) + out_paths(out[1], path + (1,))


def map_out(out: tssa.Out, f: Callable[[str], tssa.Out]) -> tssa.Out:
    return f(out) if isinstance(out, str) else (map_out(out[0], f), map_out(out[1], f))


def type_tree(t: Type, leaf: Callable[[tuple[int, ...]], tssa.Out],
              path: tuple[int, ...] = ()) -> tssa.Out:
    """An output tree with the pair structure of `t` (struct of arrays)."""
    s = ast.scalar_of(t)
    if isinstance(s, ast.TPair):
        return (type_tree(tssa.project_type(t, (0,)), leaf, path + (0,)),
                type_tree(tssa.project_type(t, (1,)), leaf, path + (1,)))
    return leaf(path)


def tuple_out(parts: Sequence[tssa.Out]) -> tssa.Out:
    """`(a, (b, c))`: n-tuples nest to the right."""
    out = parts[-1]
    for q in reversed(parts[:-1]):
        out = (q, out)
    return out


def tuple_type(ts: Sequence[Type]) -> Type:
    """The type of `tuple_out` of values of types `ts`."""
    out = ts[-1]
    for t in reversed(ts[:-1]):
        out = ast.TPair(t, out)
    return out


__all__ = ["is_real_valued", "wrt_params", "new_param", "out_paths", "map_out", "type_tree",
           "tuple_out", "tuple_type"]
