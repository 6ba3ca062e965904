"""AST -> text: `.tl` source that parses back to the same node, and a unicode rendering.

`to_tl(node)` prints any core node (and the surface `DefCall`) so that parsing the text gives
the identical (hash-consed) node.  It parenthesises only where the grammar needs it, which is
subtle in three places (see `tensorlang.syntax.parser`):

* binders (`gen`, `sum`, `exists`, `let`) extend as far right as possible, so they print
  bare only where nothing follows them at their level (the `tail` flag below);
* in a product chain a bare `[p]` guards everything to its right, so an Iverson bracket (or a
  product ending in one) on the left of `*` is parenthesised: `([p] * a) * b`;
* `-` applied to a literal folds into the literal, so `(-1.0) * 2.0` is not printed `-2.0`.

`to_unicode(node)` is the same layout with mathematical symbols (`⊞ Σ ∃ · ≤ ≠ ∧ ∨`), for
`tl show`; it is not meant to be parsed.
"""
from __future__ import annotations

import math
from typing import Any

from tensorlang.ir.ast import (
    PAIR_BOXES, Access, Add, Affine, And, Box, Call, Cmp, Const, Contract, Def, DefCall,
    DerivedDef, Exists, Gen, CondAnd, CondCmp, CondNot, CondOr, CondPred, Extremum, IfThen,
    IndexValue, Iverson, Let, Mul, Node, Or, Pair, Param, PFalse, Pred, Proj, PTrue, RelCall, Sum, TArr,
    TIndex, TPair, TReal, TRel, TSize, Var,
)
from tensorlang.ir.ast import IndexDiv, QuasiAffine

__all__ = ["to_tl", "to_unicode"]

# Precedence levels of the generic grammar (higher binds tighter).
LOWEST, OR, AND, CMP, ADD, MUL, UNARY, POW, POSTFIX, ATOM = range(10)
BINDER = -1  # gen / sum / let / exists: bare only in a tail position accepting a unary
INDENT = "    "

_TL = {"max": "max", "min": "min",
       "gen": "gen", "sum": "sum", "exists": "exists", "mul": " * ", "guard": " * ",
       "<": "<", "<=": "<=", "==": "==", "!=": "!=", "and": "and", "or": "or", "pow": " ** "}
_UNICODE = {"max": "max", "min": "min",
            "gen": "⊞", "sum": "Σ", "exists": "∃", "mul": "·", "guard": "·",
            "<": "<", "<=": "≤", "==": "=", "!=": "≠", "and": "∧", "or": "∨", "pow": "^"}


def to_tl(node: Any) -> str:
    """Valid `.tl` text for a node (Expr, Pred, Affine, Type, Param, Def, DerivedDef) or a
    list of definitions; parsing it back gives the same node."""
    return _Printer(_TL, strict=True).node(node)


def to_unicode(node: Any) -> str:
    """A readable rendering with ⊞ (gen), Σ (sum), [p]·e, ≤ ≠ ∧ ∨ ∃ (for `show`)."""
    return _Printer(_UNICODE, strict=False).node(node)


def _is_neg_one(e: Node) -> bool:
    return isinstance(e, Const) and e.value == -1.0


class _Printer:
    def __init__(self, sym: dict[str, str], strict: bool):
        self.sym = sym
        self.strict = strict  # .tl output: refuse what cannot be written as source

    # -- dispatch --------------------------------------------------------------------------

    def node(self, n: Any) -> str:
        if isinstance(n, (list, tuple)):
            return "\n".join(self.node(d) for d in n)
        if isinstance(n, Def):
            return self.define(n)
        if isinstance(n, DerivedDef):
            wrt = "".join(f", {w}" for w in n.wrt)
            return f"def {n.name} = {n.kind}({n.fn}{wrt}){self.contract(n.requires)}\n"
        if isinstance(n, Contract):
            return self.contract(n).lstrip()
        if isinstance(n, Param):
            return f"{n.name}: {self.type(n.type)}"
        if isinstance(n, Affine):
            return self.affine(n)
        if isinstance(n, Pred):
            return self.pred(n, LOWEST, True)
        if isinstance(n, (TReal, TArr, TPair, TSize, TRel)):
            return self.type(n)
        if isinstance(n, Node):
            return self.expr(n, LOWEST, True)
        raise TypeError(f"cannot print {type(n).__name__}")

    # -- definitions -----------------------------------------------------------------------

    def define(self, d: Def) -> str:
        params = ", ".join(self.node(p) for p in d.params)
        ret = f" -> {self.type(d.ret)}" if d.ret is not None else ""
        lines = [f"def {d.name}({params}){ret}{self.contract(d.requires)}:"]
        body = d.body
        while isinstance(body, Let):
            lines.append(INDENT + self.statement(body.name, body.value))
            body = body.body
        lines.append(f"{INDENT}return {self.expr(body, LOWEST, True)}")
        return "\n".join(lines) + "\n"

    def contract(self, c: Contract | None) -> str:
        """` requires cost <= BOUND` (empty without a contract)."""
        if c is None:
            return ""
        return f" requires {c.measure} {c.op} {self.expr(c.bound, LOWEST, True)}"

    def statement(self, name: str, value: Node) -> str:
        """`name = e`, or `name[i:n, j:m] = e` for a generated tensor."""
        heads = []
        while isinstance(value, Gen):
            heads.append(f"{value.idx}:{self.affine(value.size)}")
            value = value.body
        target = f"{name}[{', '.join(heads)}]" if heads else name
        return f"{target} = {self.expr(value, LOWEST, True)}"

    # -- expressions -----------------------------------------------------------------------

    def prec(self, e: Node) -> int:
        """The precedence of e's printed form (BINDER for gen/sum/let)."""
        if isinstance(e, (Gen, Sum, Let, Extremum, IfThen)):
            return BINDER
        if isinstance(e, Add):
            return ADD
        if isinstance(e, Mul):
            return UNARY if self.unary_form(e) else MUL
        if isinstance(e, Iverson):
            return ATOM if self.bare_bracket(e) else MUL
        if isinstance(e, Call) and self.is_pow(e):
            return POW
        if isinstance(e, (Access, Proj)):
            return POSTFIX
        return ATOM

    def unary_form(self, e: Mul) -> bool:
        """`(-1.0) * x` prints as `-x` when x is not a literal (which `-` would fold)."""
        return (_is_neg_one(e.a) and not isinstance(e.b, Const)
                and self.prec(e.b) >= POW)

    @staticmethod
    def bare_bracket(e: Iverson) -> bool:
        return isinstance(e.e, Const) and e.e.value == 1.0

    @staticmethod
    def is_pow(e: Call) -> bool:
        return e.fn == "pow" and len(e.args) == 1 and len(e.params) == 1

    def expr(self, e: Node, need: int, tail: bool) -> str:
        """Text of e for a slot accepting precedence >= need; `tail`: nothing follows at
        this level, so a binder may extend to the right."""
        p = self.prec(e)
        if p == BINDER:
            ok = tail and need <= UNARY
        else:
            ok = p >= need
        if not ok:
            return "(" + self.raw(e, True) + ")"
        return self.raw(e, tail)

    def raw(self, e: Node, tail: bool) -> str:
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Const):
            return self.const(e.value)
        if isinstance(e, IndexValue):  # `i`, `(2*i + 1)`: re-elaborates to the same value
            return self.affine(e.a) if e.a.as_var() is not None else f"({self.affine(e.a)})"
        if isinstance(e, Add):
            return self.add(e, tail)
        if isinstance(e, Mul):
            return self.mul(e, tail)
        if isinstance(e, Iverson):
            return self.iverson(e, tail)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Box):  # `lq(A).0`: a pair box's part is a projection
            call = f"{e.fn}({', '.join(self.expr(a, LOWEST, True) for a in e.args)})"
            return call if e.fn not in PAIR_BOXES else f"{call}.{e.part}"
        if isinstance(e, DefCall):
            return f"{e.name}({', '.join(self.expr(a, LOWEST, True) for a in e.args)})"
        if isinstance(e, Pair):
            return "(" + ", ".join(self.expr(x, LOWEST, True) for x in self.tuple_items(e)) + ")"
        if isinstance(e, Proj):
            return f"{self.expr(e.e, POSTFIX, False)}.{e.k}"
        if isinstance(e, Access):
            base = self.expr(e.e, POSTFIX, False)
            if not e.idx:
                return base  # `e[]` has no syntax; an empty access is e itself
            return f"{base}[{', '.join(self.affine(a) for a in e.idx)}]"
        if isinstance(e, (Gen, Sum, Extremum)):
            return self.binder(e, tail)
        if isinstance(e, Let):
            value = self.expr(e.value, LOWEST, True)
            return f"let {e.name} = {value} in {self.expr(e.body, LOWEST, tail)}"
        if isinstance(e, IfThen):   # surface only (SPEC 12); `where(c, a, b)` prints as this
            return (f"if {self.cond(e.cond, LOWEST)} then {self.expr(e.a, LOWEST, True)} "
                    f"else {self.expr(e.b, LOWEST, tail)}")
        raise TypeError(f"cannot print {type(e).__name__}")

    def cond(self, c: Node, need: int) -> str:
        """A condition of `if` (surface): or < and < not, comparisons of values or indices."""
        own = OR if isinstance(c, CondOr) else AND if isinstance(c, CondAnd) else CMP
        if isinstance(c, CondOr):
            text = f"{self.cond(c.a, OR)} or {self.cond(c.b, AND)}"
        elif isinstance(c, CondAnd):
            text = f"{self.cond(c.a, AND)} and {self.cond(c.b, CMP)}"
        elif isinstance(c, CondNot):
            text = f"not {self.cond(c.a, CMP)}"
        elif isinstance(c, CondCmp):
            # the affine reading where there is one: it re-parses to both readings
            sides = [self.affine(a) if a is not None else self.expr(e, ADD, False)
                     for e, a in ((c.lhs, c.alhs), (c.rhs, c.arhs))]
            text = f"{sides[0]} {c.op} {sides[1]}"
        elif isinstance(c, CondPred):
            text = self.pred(c.pred, CMP, False)
        else:
            raise TypeError(f"cannot print {type(c).__name__} as a condition")
        return f"({text})" if own < need else text

    @staticmethod
    def tuple_items(e: Pair) -> list[Node]:
        items: list[Node] = []
        x: Node = e
        while isinstance(x, Pair):
            items.append(x.a)
            x = x.b
        items.append(x)
        return items

    def const(self, v: float) -> str:
        if math.isnan(v):
            if self.strict:
                raise ValueError("a NaN constant has no .tl syntax")
            return "nan"
        if math.isinf(v):
            text = "1e999" if self.strict else "∞"
        else:
            text = repr(abs(v))
        return f"(-{text})" if math.copysign(1.0, v) < 0 else text

    def add(self, e: Add, tail: bool) -> str:
        # The left spine `((a + b) + c) + d` prints without recursion (long sums).
        spine = [e]
        while isinstance(spine[-1].a, Add):
            spine.append(spine[-1].a)
        parts = [self.expr(spine[-1].a, ADD, False)]
        for node in reversed(spine):
            last = tail if node is e else False
            b = node.b
            if isinstance(b, Mul) and _is_neg_one(b.a):  # a + (-1) * m  is  a - m
                parts.append(f" - {self.expr(b.b, MUL, last)}")
            else:
                parts.append(f" + {self.expr(b, MUL, last)}")
        return "".join(parts)

    def mul(self, e: Mul, tail: bool) -> str:
        if self.unary_form(e):
            return "-" + self.expr(e.b, POW, tail)
        # The left spine of a chain `a * b * c` prints without recursion.
        spine = [e]
        while (isinstance(spine[-1].a, Mul) and not self.unary_form(spine[-1].a)
               and not self.ends_in_guard(spine[-1].a)):
            spine.append(spine[-1].a)
        parts = [self.left_factor(spine[-1].a)]
        for node in reversed(spine):
            parts.append(self.sym["mul"] + self.right_factor(node.b, tail if node is e else False))
        return "".join(parts)

    def left_factor(self, a: Node) -> str:
        # A bracket, or a chain ending in one, would guard the factors printed after it.
        if isinstance(a, Iverson) or (isinstance(a, Mul) and self.ends_in_guard(a)):
            return "(" + self.raw(a, True) + ")"
        return self.expr(a, MUL, False)

    def ends_in_guard(self, m: Mul) -> bool:
        return not self.unary_form(m) and isinstance(m.b, Iverson)

    def right_factor(self, b: Node, tail: bool) -> str:
        if isinstance(b, Iverson):  # `a * [p] * rest` is Mul(a, Iverson(p, rest))
            return self.iverson(b, tail)
        return self.expr(b, UNARY, tail)

    def iverson(self, e: Iverson, tail: bool) -> str:
        bracket = f"[{self.pred(e.pred, LOWEST, True)}]"
        if self.bare_bracket(e):
            return bracket
        body = e.e
        if isinstance(body, Iverson):
            rest = self.iverson(body, tail)
        else:  # the guarded body is a product chain of its own
            rest = self.expr(body, MUL, tail)
        return f"{bracket}{self.sym['guard']}{rest}"

    def call(self, e: Call) -> str:
        if self.is_pow(e):
            base = self.expr(e.args[0], POSTFIX, False)
            return f"{base}{self.sym['pow']}{self.exponent(e.params[0])}"
        args = [self.expr(a, LOWEST, True) for a in e.args]
        args += [self.exponent(p) for p in e.params]
        return f"{e.fn}({', '.join(args)})"

    def exponent(self, c: float) -> str:
        if math.isfinite(c) and c == int(c) and abs(c) < 1e15:
            return str(int(c))
        text = self.const(c)
        return text[1:-1] if text.startswith("(") else text  # `x ** -2.5` needs no parens

    def binder(self, e: Gen | Sum | Exists, tail: bool, pred: bool = False) -> str:
        """`gen i:N, j:M. body`: nested binders of one kind print as one."""
        kind = type(e)
        heads = []
        x: Any = e
        while isinstance(x, kind):
            heads.append(f"{x.idx}:{self.affine(x.size)}")
            x = x.body
        word = self.sym[kind.__name__.lower()]
        body = self.pred(x, LOWEST, tail) if pred else self.expr(x, LOWEST, tail)
        return f"{word} {', '.join(heads)}. {body}"

    # -- predicates ------------------------------------------------------------------------

    def pred(self, p: Node, need: int, tail: bool) -> str:
        if isinstance(p, Exists):
            if tail and need <= CMP:
                return self.binder(p, tail, pred=True)
            return "(" + self.binder(p, True, pred=True) + ")"
        own = OR if isinstance(p, Or) and not self.is_ne(p) else AND if isinstance(p, And) \
            else CMP
        if own < need:
            return "(" + self.pred_raw(p, True) + ")"
        return self.pred_raw(p, tail)

    @staticmethod
    def is_ne(p: Node) -> bool:
        """`a < b or b < a` is how the parser lowers `a != b`."""
        return (isinstance(p, Or) and isinstance(p.a, Cmp) and isinstance(p.b, Cmp)
                and p.a.op == "<" and p.b.op == "<" and p.a.lhs is p.b.rhs
                and p.a.rhs is p.b.lhs)

    def pred_raw(self, p: Node, tail: bool) -> str:
        if isinstance(p, PTrue):
            return "true"
        if isinstance(p, PFalse):
            return "false"
        if isinstance(p, Cmp):
            return f"{self.affine(p.lhs)} {self.sym[p.op]} {self.affine(p.rhs)}"
        if isinstance(p, RelCall):
            return f"{p.name}({', '.join(self.affine(a) for a in p.args)})"
        if isinstance(p, Or) and self.is_ne(p):
            assert isinstance(p.a, Cmp)
            return f"{self.affine(p.a.lhs)} {self.sym['!=']} {self.affine(p.a.rhs)}"
        if isinstance(p, And):
            word = self.sym["and"]
            return f"{self.pred(p.a, AND, False)} {word} {self.pred(p.b, CMP, tail)}"
        if isinstance(p, Or):
            word = self.sym["or"]
            return f"{self.pred(p.a, OR, False)} {word} {self.pred(p.b, AND, tail)}"
        raise TypeError(f"cannot print {type(p).__name__} as a predicate")

    # -- affine expressions and types ------------------------------------------------------

    def affine(self, a: Affine | QuasiAffine) -> str:
        """`i + 2*j - 1` (terms in the canonical order of `Affine`); a surface quasi-affine
        index (SPEC 12) as its base then its terms: `i + 1 + (i % 2) - 2 * P[i]`."""
        if isinstance(a, QuasiAffine):
            return self.quasi(a)
        parts: list[str] = []
        for name, c in a.terms:
            mag = name if abs(c) == 1 else f"{abs(c)}*{name}"
            if not parts:
                parts.append(mag if c > 0 else f"-{mag}")
            else:
                parts.append(f" + {mag}" if c > 0 else f" - {mag}")
        if a.const or not parts:
            if not parts:
                parts.append(str(a.const))
            else:
                parts.append(f" + {a.const}" if a.const > 0 else f" - {-a.const}")
        return "".join(parts)

    def quasi(self, a: QuasiAffine) -> str:
        parts = [self.affine(a.base)] if (a.base.terms or a.base.const) else []
        for term, c in zip(a.terms, a.coeffs):
            if isinstance(term, IndexDiv):
                den = self.affine(term.den)
                if not (term.den.is_const() or term.den.as_var() is not None):
                    den = f"({den})"
                num = self.affine(term.num)
                if not (isinstance(term.num, Affine) and (term.num.is_const() and
                                                          term.num.const >= 0
                                                          or term.num.as_var() is not None)):
                    num = f"({num})"
                text = f"({num} {term.op} {den})"
            else:
                text = f"{term.name}[{', '.join(self.affine(x) for x in term.args)}]"
            mag = text if abs(c) == 1 else f"{abs(c)} * {text}"
            if not parts:
                parts.append(mag if c > 0 else f"-{mag}")
            else:
                parts.append(f" + {mag}" if c > 0 else f" - {mag}")
        return "".join(parts)

    def type(self, t: Node) -> str:
        if isinstance(t, TReal):
            return "R"
        if isinstance(t, TArr):
            dims: list[str] = []
            x: Node = t
            while isinstance(x, TArr):
                dims.append(self.affine(x.size))
                x = x.elem
            if isinstance(x, TReal):
                return f"R[{', '.join(dims)}]"
            return f"[{', '.join(dims)}] {self.type(x)}"
        if isinstance(t, TPair):
            items: list[Node] = []
            y: Node = t
            while isinstance(y, TPair):
                items.append(y.a)
                y = y.b
            items.append(y)
            return "(" + ", ".join(self.type(i) for i in items) + ")"
        if isinstance(t, TSize):
            return "size"
        if isinstance(t, TIndex):  # an index array (SPEC 12)
            shape = ', '.join(self.affine(a) for a in t.shape)
            return f"Z[{shape}]" if t.bound is None else f"Z[{shape}] in {self.affine(t.bound)}"
        if isinstance(t, TRel):
            return f"rel({', '.join(self.affine(a) for a in t.sizes)})"
        raise TypeError(f"cannot print {type(t).__name__} as a type")

