"""The Tensor-SSA printer (SPEC 5): a program as a list of masked einsums, one statement per
line; the ASCII text is a valid `.tl` definition (`unicode`: Σ ∧ ∨ ≤ ·)."""
from __future__ import annotations

import functools

from tensorlang.ir import ast
from tensorlang.ir.ast import (PAIR_BOXES, Affine, And, Cmp, Exists, Or, PFalse, Pred, PTrue,
                               RelCall, TArr, TIndex, TPair, TReal, TRel, TSize, Type)
from tensorlang.ir.canon import conjuncts, disjuncts
from tensorlang.ir.tssa import (AddRhs, BoxRhs, ConstRhs, ExtremeRhs, IndexRhs, Input, MapRhs, Operand, Out,
                                Program, Rhs, Stmt, SumRhs, soa_type)
from tensorlang.syntax.printer import to_tl


def fmt_affine(a: Affine) -> str:
    """`i0 + 2*j0 - 1`: the core printer's affine text."""
    return to_tl(a)


_ASCII = {"and": " and ", "or": " or ", "<=": "<=", "<": "<", "==": "==", "exists": "exists ",
          "sum": "sum ", "*": " * ", "]*": "] * "}
_UNICODE = {"and": " ∧ ", "or": " ∨ ", "<=": "≤", "<": "<", "==": "=", "exists": "∃",
            "sum": "Σ ", "*": "·", "]*": "]·"}


def fmt_pred(p: Pred, prec: int = 0, unicode: bool = False) -> str:
    """`or` binds looser than `and`; `exists` extends right, so it is parenthesised inside
    a conjunction or disjunction."""
    sym = _UNICODE if unicode else _ASCII
    if isinstance(p, PTrue):
        return "true"
    if isinstance(p, PFalse):
        return "false"
    if isinstance(p, Cmp):
        return f"{fmt_affine(p.lhs)} {sym[p.op]} {fmt_affine(p.rhs)}"
    if isinstance(p, RelCall):
        return f"{p.name}({', '.join(fmt_affine(a) for a in p.args)})"
    if isinstance(p, And):
        s = sym["and"].join(fmt_pred(q, 2, unicode) for q in conjuncts(p))
        return f"({s})" if prec > 1 else s
    if isinstance(p, Or):
        s = sym["or"].join(fmt_pred(q, 1, unicode) for q in disjuncts(p))
        return f"({s})" if prec > 0 else s
    if isinstance(p, Exists):
        s = f"{sym['exists']}{p.idx}:{fmt_affine(p.size)}. {fmt_pred(p.body, 0, unicode)}"
        return f"({s})" if prec > 0 else s
    raise TypeError(repr(p))


def fmt_type(t: Type) -> str:
    if isinstance(t, TReal):
        return "R"
    if isinstance(t, TSize):
        return "size"
    if isinstance(t, TIndex):  # an index array (SPEC 12)
        shape = ', '.join(fmt_affine(a) for a in t.shape)
        return f"Z[{shape}]" if t.bound is None else f"Z[{shape}] in {fmt_affine(t.bound)}"
    if isinstance(t, TRel):
        return f"rel({', '.join(fmt_affine(s) for s in t.sizes)})"
    if isinstance(t, TPair):
        return f"({fmt_type(t.a)}, {fmt_type(t.b)})"
    if isinstance(t, TArr):
        dims = ast.shape_of(t)
        elem = ast.scalar_of(t)
        if isinstance(elem, TReal):
            return f"R[{', '.join(fmt_affine(d) for d in dims)}]"
        return "".join(f"[{fmt_affine(d)}]" for d in dims) + fmt_type(elem)
    raise TypeError(repr(t))


def _fmt_num(c: float) -> str:
    return repr(float(c))


def fmt_operand(o: Operand) -> str:
    return f"{o.var}[{', '.join(fmt_affine(a) for a in o.idx)}]" if o.idx else o.var


def _guard(p: Pred, unicode: bool = False) -> str:
    sym = _UNICODE if unicode else _ASCII
    return "" if isinstance(p, PTrue) else f"[{fmt_pred(p, 0, unicode)}{sym[']*']}"


def fmt_rhs(rhs: Rhs, unicode: bool = False) -> str:
    """The right-hand side as a .tl expression (generator indices implicit)."""
    sym = _UNICODE if unicode else _ASCII
    g = functools.partial(_guard, unicode=unicode)
    if isinstance(rhs, Input):
        return rhs.param + "".join(f".{k}" for k in rhs.path)
    if isinstance(rhs, ConstRhs):
        return g(rhs.pred) + _fmt_num(rhs.value)
    if isinstance(rhs, IndexRhs):
        return fmt_affine(rhs.value) if rhs.value.as_var() else f"({fmt_affine(rhs.value)})"
    if isinstance(rhs, AddRhs):
        (s1, s2), (o1, o2) = rhs.supports, rhs.operands
        inner = f"{g(s1)}{fmt_operand(o1)} + {g(s2)}{fmt_operand(o2)}"
        return f"{g(rhs.pred)}({inner})" if not isinstance(rhs.pred, PTrue) else inner
    if isinstance(rhs, MapRhs):
        args = [fmt_operand(o) for o in rhs.operands] + [_fmt_num(c) for c in rhs.params]
        return f"{g(rhs.pred)}{rhs.fn}({', '.join(args)})"
    if isinstance(rhs, ExtremeRhs):
        (j,), (n,) = rhs.sum_names(), rhs.sdims
        return f"{g(rhs.pred)}{rhs.op} {j}:{fmt_affine(n)}. {fmt_operand(rhs.operands[0])}"
    if isinstance(rhs, SumRhs):
        factors = ([] if rhs.coeff == 1.0 else [_fmt_num(rhs.coeff)]) + \
                  [fmt_operand(o) for o in rhs.operands]
        body = g(rhs.pred) + sym["*"].join(factors)
        if rhs.sdims:
            binders = ", ".join(f"{n}:{fmt_affine(s)}"
                                for n, s in zip(rhs.sum_names(), rhs.sdims))
            return f"{sym['sum']}{binders}. {body}"
        return body
    if isinstance(rhs, BoxRhs):
        call = f"{rhs.fn}({', '.join(o.var for o in rhs.operands)})"
        return f"{call}.{rhs.part}" if rhs.fn in PAIR_BOXES else call
    raise TypeError(repr(rhs))


def fmt_stmt(s: Stmt, unicode: bool = False) -> str:
    """`v[i0:N, i1:M] = <rhs>` (the .tl sugar for `v = gen i0:N, i1:M. <rhs>`)."""
    rhs = s.rhs
    lhs = s.var
    if rhs.dims and not isinstance(rhs, BoxRhs):
        lhs += "[" + ", ".join(f"{n}:{fmt_affine(d)}"
                               for n, d in zip(rhs.gen_names(), rhs.dims)) + "]"
    return f"{lhs} = {fmt_rhs(rhs, unicode)}"


def _fmt_out(out: Out) -> str:
    return out if isinstance(out, str) else f"({_fmt_out(out[0])}, {_fmt_out(out[1])})"


def to_text(p: Program, unicode: bool = False) -> str:
    """One statement per line, like masked einsums; the ASCII text is a valid `.tl` def
    (`unicode`: mathematical notation, Σ ∧ ∨ ≤ ·)."""
    # Types in struct-of-arrays form: `x.0` of `x : [n](R, R)` is typed as `([n]R, [n]R).0`
    params = ", ".join(f"{q.name}: {fmt_type(soa_type(q.type))}" for q in p.params)
    ret = f" -> {fmt_type(soa_type(p.ret))}" if p.ret is not None else ""
    lines = [f"def {p.name}({params}){ret}:"]
    for s in p.stmts:
        if isinstance(s.rhs, Input) and not s.rhs.path and s.var == s.rhs.param:
            continue
        lines.append("    " + fmt_stmt(s, unicode))
    lines.append(f"    return {_fmt_out(p.output)}")
    return "\n".join(lines)
