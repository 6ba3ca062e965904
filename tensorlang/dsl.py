"""`tl.dsl`: build tensorlang programs from Python, without source text (SPEC 9).

```python
from tensorlang import dsl
N = dsl.size("N")
x = dsl.param("x", dsl.R[N])
A = dsl.param("A", dsl.R[N, N])
y = dsl.bind("y", dsl.gen(N, lambda i: dsl.sum(N, lambda j: A[i, j] * x[j])))
qform = dsl.function("qform", [N, x, A], dsl.sum(N, lambda i: x[i] * y[i]), ret=dsl.R)
```
builds exactly the `Def` that the parser makes of
```
def qform(N: size, x: R[N], A: R[N, N]) -> R:
    y = gen i:N. sum j:N. A[i, j] * x[j]
    return sum i:N. x[i] * y[i]
```

Pieces:
* types: `dsl.R`, `dsl.R[N, M + 1]`, Python tuples `(t1, t2)` for pair types,
  `dsl.array(shape, elem)` for tensors of other element types, `dsl.rel(N, N)`, index arrays
  `dsl.Z[B, K]` (`Z[B, K]`) and `dsl.index_array(M, V)` (`Z[M] in V`);
* parameters: `dsl.size("N")` (also an index expression), `dsl.param(name, type)` (an
  expression; a relation parameter is callable: `E(i, j)` is a predicate; an index-array
  parameter `P` gives indices `P[i]`, and with a declared range is a relation too);
* expressions (`Expr`): `+ - * /`, unary `-`, `e ** y`, `abs(e)`, numbers, Python lists
  (tensor literals, also `dsl.literal([...])`), indexing `e[i, j + 1]` (full or partial),
  `e.fst`/`e.snd`/`dsl.proj(e, k)`, `dsl.pair`, the builtins (`dsl.exp(e)`, `dsl.pow(e, y)`,
  `dsl.max(a, b)`, ... and `dsl.builtin(name, ...)` for any other), `dsl.gen`, `dsl.sum`,
  the reductions `dsl.max(N, lambda j: e)` / `dsl.min(...)`, the selection `dsl.where(c, a,
  b)`, `dsl.let`, `dsl.call(f, ...)` (an earlier def);
* index expressions (`Index`): binder indices and sizes, with `+ -`, `* int`, `// d` and
  `% d` (d a positive integer or a size; only in access indices and comparisons), entries of
  index arrays `P[i]`, and comparisons `< <= > >= == !=` giving predicates;
* predicates (`Pred`): `p & q`, `p | q`, `~p`, `dsl.exists`, `dsl.true`, `dsl.false`; `p * e`
  (or `e * p`, or `dsl.iverson(p, e)`) is the Iverson bracket `[p] * e`; elsewhere in
  arithmetic a predicate is `[p]` = `[p] * 1`.  `p * q` is `p & q`.  Python's `& | ~` bind
  tighter than comparisons: write `E(i, j) & (i != j)`, `~(i < 2)`.  A predicate has no truth
  value (`if p:` and `p and q` raise);
* conditions (`Condition`, SPEC 12): comparisons of real values `x[i] > 0`, `a <= b`,
  `x[i] == y[i]`, combined with each other and with predicates by `& | ~`; they select in
  `dsl.where` (per point, piecewise constant in differentiation) and are neither values nor
  Iverson brackets.  `~E(i, j)` (no such index predicate) is a condition too;
* statements: `dsl.bind(name, e)` names a value; the def gets `name = e` (a `let` on its
  spine) if the result uses it.  A binding made inside a `gen`/`sum` body that reads the
  binder's index becomes a `let` inside that body.

Nodes are the parser's (docs/architecture.md sugar list): `a - b` is `a + (-1.0) * b`, `-a` is
`(-1.0) * a` (`-c` of a constant is `Const(-c)`), `a / b` is `a * recip(b)`, `e ** c` is
`pow(e, c)` for a constant c and `exp(y * log(e))` for a value y, `i != j` is `i < j or j <
i`, `i > j` is `j < i`, several sizes in one binder nest (`dsl.sum(N, M, lambda i, j: ...)` is
`sum i:N. sum j:M. ...`, the same for `max`, `min`), `dsl.where(c, a, b)` is `if c then a else
b` (the parser's `IfThen`, the condition as written: `x[i] > 0` stays a `>`), a list is the
literal's `gen lit_0:n. [lit_0 == 0] * e0 + ...`, `i // 2` and `P[i]` are the parser's
quasi-affine indices.  Differences: a guard `p * e` guards exactly its operand (in `.tl`, a
bracket guards the whole product to its right: write `a * (p * (b * c))` for `a * [p] * b * c`),
and `p * q` is `[p and q]`.  A comparison of values records the index reading the parser
would give its sides only for a name or an integer literal (`x[i] > 0`); the checker ignores
that reading for values, so the core program is the same.  As in `.tl`, a condition of
`where` may not use `//`, `%` or index arrays (guard with `p * a + (~p) * b`), and an index is
not a value (`x[i] * i` is an error).

Binder names are the names of the Python lambda's parameters (`lambda i:` binds `i`), so
building the same program twice gives the same (hash-consed) nodes.  A name that would
capture or shadow anything used inside the body gets a numeric suffix (`i1`); one that
clashes with a parameter or statement of the def is renamed by `function`.

Elaboration: the DSL does no type inference.  Arithmetic on tensor-valued operands
(`x + y` with `x, y : R[N]`, `2.0 * A`) and `dsl.call` build surface nodes (`Add`/`Mul` of
tensors, `DefCall`) that `tensorlang.check.elaborate` turns into core `gen`s and inlined bodies.
`function` returns the def as built (`elaborate.is_core` tells whether it needs
elaboration); `dsl.core(d)` (or `tl.from_def(d)`) type-checks and elaborates it.
"""
from __future__ import annotations

import builtins as _py
import inspect
import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from tensorlang.ir import ast
from tensorlang.ir.ast import REAL, Affine, Param, QuasiAffine, Type
from tensorlang.syntax.errors import TypeCheckError
from tensorlang.syntax.parser import KEYWORDS as GRAMMAR_KEYWORDS

__all__ = [
    "DSLError", "Expr", "Index", "Size", "Pred", "Relation", "Variable", "R", "array", "rel",
    "size", "sizes", "param", "const", "gen", "sum", "exists", "let", "bind", "iverson",
    "pair", "proj", "call", "builtin", "true", "false", "function", "core",
    "exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "sigmoid", "softplus", "abs", "relu",
    "square", "recip", "pow", "max", "min",
    "Condition", "IndexArray", "Z", "index_array", "where", "literal",
]


class DSLError(TypeCheckError, TypeError):
    """A program the builder cannot express (also a `TypeError`: misuse of the Python API)."""

    kind = "dsl error"


# Words the grammar reserves, and names that would read as something else in `.tl` text.
# (`where` is the selection `where(c, a, b)`, SPEC 12.)
KEYWORDS = GRAMMAR_KEYWORDS | {"R", "where"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TEMP_PREFIX = "__dsl"
_temps = itertools.count()
_bindings = itertools.count()


_TEMP_NAME = re.compile(_TEMP_PREFIX + r"\d+_")


def _temp(name: str) -> str:
    """A placeholder binder name while a body is being built (never left in a result); it
    ends with the binder's name, which messages show (`_show`)."""
    return f"{_TEMP_PREFIX}{next(_temps)}_{name}"


def _rename_index(node: ast.Node, old: str, new: str) -> ast.Node:
    """Rename the index (or let variable) `old` to `new` both where it is a value and where
    it is an index: the parser's `CondCmp` reads `i < 2` and `v > 0` both ways, and
    `ast.subst` would put an `Affine` where the value `Var` stands.  `new` must be unused in
    `node`."""
    return ast.subst(ast.subst(node, {old: ast.Var(new)}), {old: Affine.var(new)})


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.startswith(_TEMP_PREFIX):
        raise DSLError(f"{what} name {name!r} is not an identifier")
    if name in KEYWORDS or name in ast.BUILTINS or name in ast.DERIVED_KINDS:
        raise DSLError(f"{what} name {name!r} is reserved")
    return name


def _usable(name: str) -> bool:
    try:
        _check_name(name, "binder")
    except DSLError:
        return False
    return not name.startswith("_")


# ---------------------------------------------------------------------------------------------
# Names inside nodes


def _all_names(node: ast.Node) -> set[str]:
    """Every identifier in `node`, free or bound (variables, indices, sizes, relations)."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Var):
            out.add(n.name)
        elif isinstance(n, Affine):
            out |= n.vars()
        elif isinstance(n, (ast.RelCall, ast.IndexRead)):
            out.add(n.name)
        b = ast.binder_name(n)
        if b is not None:
            out.add(b)
    return out


def _fresh_for(base: str, *nodes: ast.Node) -> str:
    """`base`, or `base1`, `base2`, ...: the first name used nowhere in `nodes`, so binding it
    can neither capture nor shadow anything."""
    taken: set[str] = set()
    for n in nodes:
        taken |= _all_names(n)
    if base not in taken:
        return base
    return next(f"{base}{k}" for k in itertools.count(1) if f"{base}{k}" not in taken)


def _lambda_names(fn: Callable, count: int, defaults: Sequence[str], what: str) -> list[str]:
    """The binder names: the lambda's parameter names (or defaults for unusable ones)."""
    if not callable(fn):
        raise DSLError(f"{what} needs a function of its {count} ind"
                       f"{'ex' if count == 1 else 'ices'} as its last argument")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = len([p for p in positional if p.default is p.empty])
    varargs = _py.any(p.kind == p.VAR_POSITIONAL for p in params)
    if params and not (required <= count and (varargs or count <= len(positional))):
        raise DSLError(f"{what} with {count} size(s) needs a function of {count} argument(s)")
    names = [p.name for p in positional[:count]]
    names += list(defaults[len(names):count])
    return [n if _usable(n) else defaults[k] for k, n in enumerate(names)]


# ---------------------------------------------------------------------------------------------
# Statement bindings


@dataclass(frozen=True, eq=False)
class _Binding:
    """`name = value` of a def (made by `bind`); `deps` are the bindings `value` reads."""

    name: str
    value: ast.Expr
    deps: frozenset["_Binding"]
    seq: int

    def reads(self, name: str) -> bool:
        return name in ast.free_names(self.value) or _py.any(
            name in ast.free_names(d.value) for d in self.deps)


def _close(node: ast.Expr, deps: frozenset[_Binding], temp: str) -> tuple[ast.Expr, frozenset]:
    """Emit (as `let`s around `node`) the bindings that read the binder `temp`."""
    local = sorted((b for b in deps if b.reads(temp)), key=lambda b: b.seq)
    for b in reversed(local):
        node = ast.Let(b.name, b.value, node)
    return node, deps.difference(local)


# ---------------------------------------------------------------------------------------------
# Index expressions


def _affine(x: Any, what: str = "index") -> Affine:
    """An affine index expression (binder ranges, type dimensions, relation arguments, size
    arguments): `//`, `%` and index-array reads are not allowed here (as in the parser)."""
    out = _index(x, what)
    if isinstance(out, QuasiAffine):
        raise DSLError(f"{what} must be affine: `//`, `%` and index-array reads are allowed "
                       f"only in the indices of an access and in comparisons, not {x!r}")
    return out


def _index(x: Any, what: str = "index") -> Affine | QuasiAffine:
    """An index expression, quasi-affine allowed (access indices, comparison sides)."""
    if isinstance(x, Index):
        return x.aff
    if isinstance(x, (Affine, QuasiAffine)):
        return x
    if isinstance(x, (int,)) and not isinstance(x, bool) or _is_np_int(x):
        return Affine.lit(int(x))
    if isinstance(x, IndexArray):
        raise DSLError(f"the index array {x.name} must be indexed to give an index "
                       f"({x.name}[i])")
    raise DSLError(f"{what} must be an index expression (binder index, size or integer), "
                   f"not {_describe(x)}")


def _is_value(x: Any) -> bool:
    """A real operand met by an index: an expression or a number with a fraction.  An
    integer-valued float stays index arithmetic (`i + 1.0`, `2.0 * i`), as the checker folds
    it out of `.tl` text; so the DSL also takes `x[2.0 * i]`, which the parser refuses."""
    if isinstance(x, Expr):
        return True
    return _is_number(x) and not (isinstance(x, int) or _is_np_int(x) or
                                  isinstance(x, float) and x.is_integer())


def _integral(x: Any) -> Any:
    """An integer-valued float as its int (index arithmetic); anything else as it is."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _is_np_int(x: Any) -> bool:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, np.integer)


def _describe(x: Any) -> str:
    if isinstance(x, Expr):
        return f"the expression {x!r}"
    return f"{type(x).__name__} {x!r}"


class Index:
    """An index expression: binder indices and sizes with `+ -`, `* int`, and (SPEC 12)
    `// c`, `% c` (c a positive integer or a size) and entries of index arrays (`idx[i]`).

    Comparisons give predicates.  Met with a value (an expression, a float: `i * x[i]`,
    `(i + 1) * 0.5`, `i / N`) an affine index is a value too (SPEC 12: an
    `ast.IndexValue`, a constant for differentiation)."""

    __slots__ = ("aff",)
    __hash__ = None  # type: ignore[assignment]   # == builds a predicate

    def __init__(self, aff: Affine | QuasiAffine):
        self.aff = aff

    def value(self) -> "Expr":
        """This index as a value: `IndexValue(aff)` (the checker folds the same node out of
        `.tl` text); `//`, `%` and index-array entries only index."""
        if not isinstance(self.aff, Affine):
            raise DSLError(f"{self!r} is not a value: `//`, `%` and index-array entries are "
                           "index operators (x[i // 2], [i % 2 == 0])")
        return Expr(ast.IndexValue(self.aff))

    def __add__(self, o: Any) -> Any:
        if _is_value(o):
            return self.value() + o
        return Index(ast.quasi_add(self.aff, _index(_integral(o))))

    def __radd__(self, o: Any) -> Any:
        if _is_value(o):
            return o + self.value()
        return Index(ast.quasi_add(_index(_integral(o)), self.aff))

    def __sub__(self, o: Any) -> Any:
        if _is_value(o):
            return self.value() - o
        return Index(ast.quasi_add(self.aff, ast.quasi_scale(_index(_integral(o)), -1)))

    def __rsub__(self, o: Any) -> Any:
        if _is_value(o):
            return o - self.value()
        return Index(ast.quasi_add(_index(_integral(o)), ast.quasi_scale(self.aff, -1)))

    def __truediv__(self, o: Any) -> "Expr":
        return self.value() / o

    def __rtruediv__(self, o: Any) -> "Expr":
        return _lift(o) / self.value()

    def __pow__(self, o: Any) -> "Expr":
        return self.value() ** o

    def __rpow__(self, o: Any) -> "Expr":
        return _lift(o) ** self.value()

    def __neg__(self) -> "Index":
        return Index(ast.quasi_scale(self.aff, -1))

    def __pos__(self) -> "Index":
        return self

    def __mul__(self, k: Any) -> Any:
        if isinstance(k, Index):   # `i * j`: a product of values (not an affine index)
            return self.value() * k.value()
        if _is_value(k):
            return self.value() * k
        k = _integral(k)
        if isinstance(k, bool) or not (isinstance(k, int) or _is_np_int(k)):
            raise DSLError(f"an index can only be multiplied by an integer or a value, not "
                           f"{_describe(k)}")
        return Index(ast.quasi_scale(self.aff, int(k)))

    def __rmul__(self, k: Any) -> Any:
        if _is_value(k):
            return k * self.value()
        return self.__mul__(k)

    def __floordiv__(self, d: Any) -> "Index":
        return self._divide("//", d)

    def __mod__(self, d: Any) -> "Index":
        return self._divide("%", d)

    def __rfloordiv__(self, o: Any) -> "Index":
        return Index(_index(o))._divide("//", self)

    def __rmod__(self, o: Any) -> "Index":
        return Index(_index(o))._divide("%", self)

    def _divide(self, op: str, d: Any) -> "Index":
        """`self // d`, `self % d` (SPEC 12): `d` a positive integer constant or a size
        expression (the checker must be able to bound the quotient of `% N`)."""
        what = f"the divisor of {op}"
        if isinstance(d, Expr) or (_is_number(d) and not (isinstance(d, int) or _is_np_int(d))):
            raise DSLError(f"{what} must be a positive integer constant or a size, not "
                           f"{_describe(d)} (indices are not values)")
        den = _affine(d, what)
        if den.is_const() and den.const <= 0:
            raise DSLError(f"{what} must be a positive integer constant or a size, not "
                           f"{den.const}")
        if _py.any(v.startswith(_TEMP_PREFIX) for v in den.vars()):
            raise DSLError(f"{what} must be a positive integer constant or a size, not an "
                           "index bound by gen/sum/max/min/exists")
        return Index(ast.quasi_term(ast.IndexDiv(op, self.aff, den)))

    def __lt__(self, o: Any) -> "Pred":
        return _compare("<", self.aff, _index(o))

    def __le__(self, o: Any) -> "Pred":
        return _compare("<=", self.aff, _index(o))

    def __gt__(self, o: Any) -> "Pred":
        return _compare(">", self.aff, _index(o))

    def __ge__(self, o: Any) -> "Pred":
        return _compare(">=", self.aff, _index(o))

    def __eq__(self, o: Any) -> "Pred":  # type: ignore[override]
        return _compare("==", self.aff, _index(o))

    def __ne__(self, o: Any) -> "Pred":  # type: ignore[override]
        return _compare("!=", self.aff, _index(o))

    def __bool__(self) -> bool:
        raise DSLError("an index has no truth value")

    def __repr__(self) -> str:
        return _show(self.aff)


def _compare(op: str, a: Affine | QuasiAffine, b: Affine | QuasiAffine) -> "Pred":
    """The predicate `a op b` (`>`, `>=`, `!=` are sugar, as in the parser), and the same
    comparison as the parser's condition of an `if` (`CondCmp`: each side read as a value,
    `N + 1.0`, and as an index; no such reading of `//`, `%`, `P[i]`)."""
    pred = ast.cmp_pred(op, a, b)
    if isinstance(a, Affine) and isinstance(b, Affine):
        return Pred(pred, ast.CondCmp(op, _affine_expr(a), _affine_expr(b), a, b))
    return Pred(pred, None)


class Size(Index):
    """A size parameter (`dsl.size("N")`): usable in types, binder ranges and indices."""

    __slots__ = ("param",)

    def __init__(self, name: str):
        super().__init__(Affine.var(_check_name(name, "size")))
        self.param = Param(name, ast.TSize())

    @property
    def name(self) -> str:
        return self.param.name


# ---------------------------------------------------------------------------------------------
# Predicates


class Pred:
    """A predicate over indices (`i < j`, `E(i, j)`, `p & q`, `~p`, ...); `p * e` guards `e`.

    `cond` is the same predicate as the condition of a selection (`dsl.where`), as the parser
    builds it from the same text (`i > j` stays a `>` there); None where the `.tl` condition
    has no such form (a comparison with `//`, `%` or an index-array read)."""

    __slots__ = ("node", "cond")
    __array_ufunc__ = None

    def __init__(self, node: ast.Pred, cond: ast.Cond | None | bool = True):
        self.node = node
        self.cond: ast.Cond | None = ast.CondPred(node) if cond is True else cond or None

    def __and__(self, o: Any) -> Any:
        if isinstance(o, Condition):
            return _cond(self) & o
        q = _pred(o)
        return Pred(ast.And(self.node, q.node), _cond_join(ast.CondAnd, self.cond, q.cond))

    def __or__(self, o: Any) -> Any:
        if isinstance(o, Condition):
            return _cond(self) | o
        q = _pred(o)
        return Pred(ast.Or(self.node, q.node), _cond_join(ast.CondOr, self.cond, q.cond))

    def __rand__(self, o: Any) -> "Pred":
        q = _pred(o)
        return Pred(ast.And(q.node, self.node), _cond_join(ast.CondAnd, q.cond, self.cond))

    def __ror__(self, o: Any) -> "Pred":
        q = _pred(o)
        return Pred(ast.Or(q.node, self.node), _cond_join(ast.CondOr, q.cond, self.cond))

    def __invert__(self) -> Any:
        """`not p`: a predicate where its negation is one (comparisons, and/or of them);
        `~E(i, j)` and `~exists(...)` are only conditions of `dsl.where`, as in `.tl`."""
        neg = ast.pred_not(self.node)
        if neg is None:
            return ~_cond(self)
        return Pred(neg, None if self.cond is None else ast.CondNot(self.cond))

    def __mul__(self, o: Any) -> Any:
        if isinstance(o, Pred):
            return self & o
        return iverson(self, o)

    def __rmul__(self, o: Any) -> "Expr":
        return iverson(self, o)

    # In other arithmetic a predicate is `[p]`, i.e. `[p] * 1`.
    def __add__(self, o: Any) -> "Expr":
        return _lift(self) + o

    def __radd__(self, o: Any) -> "Expr":
        return _lift(o) + _lift(self)

    def __sub__(self, o: Any) -> "Expr":
        return _lift(self) - o

    def __rsub__(self, o: Any) -> "Expr":
        return _lift(o) - _lift(self)

    def __neg__(self) -> "Expr":
        return -_lift(self)

    def __truediv__(self, o: Any) -> "Expr":
        return _lift(self) / o

    def __bool__(self) -> bool:
        raise DSLError("a predicate has no truth value: use & | ~ (not `and`/`or`/`not`), "
                       "p * e for the Iverson bracket and dsl.where(p, a, b) for a selection")

    def __repr__(self) -> str:
        return _show(self.node)


class Condition:
    """The condition of a selection `dsl.where(c, a, b)` that is not an index predicate: a
    comparison of real values (`x[i] > 0`, `a <= b`, `x[i] == y[i]`), or any combination
    with one by `&`, `|`, `~` (SPEC 12).  It is not a value and not an Iverson bracket."""

    __slots__ = ("node", "deps")
    __array_ufunc__ = None

    def __init__(self, node: ast.Cond, deps: frozenset["_Binding"] = frozenset()):
        self.node = node
        self.deps = deps

    def __and__(self, o: Any) -> "Condition":
        c = _cond(o)
        return Condition(ast.CondAnd(self.node, c.node), self.deps | c.deps)

    def __rand__(self, o: Any) -> "Condition":
        c = _cond(o)
        return Condition(ast.CondAnd(c.node, self.node), c.deps | self.deps)

    def __or__(self, o: Any) -> "Condition":
        c = _cond(o)
        return Condition(ast.CondOr(self.node, c.node), self.deps | c.deps)

    def __ror__(self, o: Any) -> "Condition":
        c = _cond(o)
        return Condition(ast.CondOr(c.node, self.node), c.deps | self.deps)

    def __invert__(self) -> "Condition":
        return Condition(ast.CondNot(self.node), self.deps)

    def _not_a_value(self, *_: Any) -> Any:
        raise DSLError(f"the condition {self!r} compares values: it selects with "
                       "dsl.where(c, a, b), it is not a value or an Iverson bracket (only "
                       "index predicates are)")

    __mul__ = __rmul__ = __add__ = __radd__ = __sub__ = __rsub__ = _not_a_value
    __truediv__ = __rtruediv__ = __neg__ = _not_a_value

    def __bool__(self) -> bool:
        raise DSLError("a condition has no truth value: use & | ~ (not `and`/`or`/`not`) and "
                       "dsl.where(c, a, b)")

    def __repr__(self) -> str:
        text = _show(ast.IfThen(self.node, ast.Const(1.0), ast.Const(0.0)))
        head, tail = "if ", " then 1.0 else 0.0"
        return text[len(head):-len(tail)] if text.startswith(head) and text.endswith(
            tail) else text


def _cond_join(cls: type, a: ast.Cond | None, b: ast.Cond | None) -> ast.Cond | None:
    return None if a is None or b is None else cls(a, b)


def _cond(c: Any) -> Condition:
    """A condition of `where`: a `Condition`, a predicate or a Python bool."""
    if isinstance(c, Condition):
        return c
    if isinstance(c, (Pred, bool)):
        cond = _pred(c).cond
        if cond is None:
            raise DSLError(f"the predicate {c!r} uses //, % or an index array: it can guard "
                           "an Iverson bracket but not select in dsl.where (nor in a .tl "
                           "`if`); write p * a + (~p) * b")
        return Condition(cond)
    raise DSLError(f"expected a condition (a comparison of values or of indices, a "
                   f"predicate), not {_describe(c)}")


def _pred(p: Any) -> Pred:
    if isinstance(p, Pred):
        return p
    if isinstance(p, Condition):
        p._not_a_value()
    if isinstance(p, bool):
        return Pred(ast.PTrue() if p else ast.PFalse())
    raise DSLError(f"expected a predicate, not {_describe(p)}")


true = Pred(ast.PTrue())
false = Pred(ast.PFalse())


class Relation:
    """A relation parameter (`dsl.param("E", dsl.rel(N, N))`); `E(i, j)` is a predicate."""

    __slots__ = ("param",)

    def __init__(self, p: Param):
        self.param = p

    @property
    def name(self) -> str:
        return self.param.name

    def __call__(self, *idx: Any) -> Pred:
        assert isinstance(self.param.type, ast.TRel)
        if len(idx) != len(self.param.type.sizes):
            raise DSLError(f"relation {self.name} takes {len(self.param.type.sizes)} indices, "
                           f"got {len(idx)}")
        return Pred(ast.RelCall(self.name, tuple(_affine(a) for a in idx)))

    def __repr__(self) -> str:
        return self.name


class IndexArray(Relation):
    """An index-array parameter (`dsl.param("idx", dsl.Z[N])`, SPEC 12): `idx[i]` is an
    index (`x[idx[i]]`, `[idx[i] == j]`), not a value.  It is also the relation
    `{(i, v) : idx[i] == v}`: with its range declared (`dsl.index_array(N, V)`), `idx(i, v)`
    is a predicate, as in `.tl`."""

    __slots__ = ()

    def __getitem__(self, idx: Any) -> Index:
        assert isinstance(self.param.type, ast.TIndex)
        items = idx if isinstance(idx, tuple) else (idx,)
        rank = len(self.param.type.shape)
        if len(items) != rank:
            raise DSLError(f"index array {self.name} takes {rank} ind"
                           f"{'ex' if rank == 1 else 'ices'}, got {len(items)}")
        for k in items:
            if isinstance(k, slice):
                raise DSLError("slices are not supported: use dsl.gen to build a sub-tensor")
        return Index(ast.quasi_term(ast.IndexRead(self.name, tuple(
            _index(k, f"an index of {self.name}") for k in items))))

    def __call__(self, *idx: Any) -> Pred:
        assert isinstance(self.param.type, ast.TIndex)
        if self.param.type.unbounded:
            raise DSLError(f"index array {self.name}: the relation {self.name}(i, v) needs "
                           f"its declared range (dsl.index_array(shape, bound)); or compare "
                           f"its entries: {self.name}[i] == v")
        return super().__call__(*idx)

    def __iter__(self) -> Any:
        raise DSLError(f"the index array {self.name} is not iterable (index it: "
                       f"{self.name}[i])")


# ---------------------------------------------------------------------------------------------
# Expressions


def _is_number(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, (np.integer, np.floating))


def _lift(x: Any) -> "Expr":
    """A value operand: an `Expr`, a number (`Const`), or a predicate (`[p]`)."""
    if isinstance(x, Expr):
        return x
    if _is_number(x):
        return Expr(ast.Const(float(x)))
    if isinstance(x, Pred):
        return Expr(ast.Iverson(x.node, ast.Const(1.0)))
    if isinstance(x, Index):
        return x.value()
    if isinstance(x, list):
        return literal(x)
    if isinstance(x, Condition):
        x._not_a_value()
    if isinstance(x, IndexArray):
        raise DSLError(f"the index array {x.name} is not a value: its entries are indices "
                       f"(x[{x.name}[i]], [{x.name}[i] == j])")
    if isinstance(x, ast.Expr):
        return Expr(x)
    raise DSLError(f"expected an expression, not {_describe(x)}")


def _deps(*xs: "Expr") -> frozenset[_Binding]:
    return frozenset().union(*(x.deps for x in xs))


class _Value:
    """The operators of `Expr` and `Variable` (see `_ExprClass` for why two classes)."""

    __slots__ = ("node", "deps")
    __array_ufunc__ = None     # numpy scalars defer to the reflected operators below

    def __init__(self, node: ast.Expr, deps: frozenset[_Binding] = frozenset()):
        self.node = node
        self.deps = deps

    def _bin(self, cls: type, a: "Expr", b: "Expr") -> "Expr":
        return Expr(cls(a.node, b.node), _deps(a, b))

    def __add__(self, o: Any) -> "Expr":
        return self._bin(ast.Add, self, _lift(o))

    def __radd__(self, o: Any) -> "Expr":
        return self._bin(ast.Add, _lift(o), self)

    def __sub__(self, o: Any) -> "Expr":
        return self._bin(ast.Add, self, _negate(_lift(o), literal=False))

    def __rsub__(self, o: Any) -> "Expr":
        return self._bin(ast.Add, _lift(o), _negate(self, literal=False))

    def __mul__(self, o: Any) -> "Expr":
        if isinstance(o, Pred):
            return iverson(o, self)
        return self._bin(ast.Mul, self, _lift(o))

    def __rmul__(self, o: Any) -> "Expr":
        return self._bin(ast.Mul, _lift(o), self)

    def __truediv__(self, o: Any) -> "Expr":
        return self._bin(ast.Mul, self, recip(_lift(o)))

    def __rtruediv__(self, o: Any) -> "Expr":
        return self._bin(ast.Mul, _lift(o), recip(self))

    def __pow__(self, y: Any) -> "Expr":
        return pow(self, y)

    def __rpow__(self, o: Any) -> "Expr":
        return pow(o, self)

    # Comparisons of values are conditions of `dsl.where` (SPEC 12).
    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, o: Any) -> Condition:
        return _value_compare("<", self, o)

    def __le__(self, o: Any) -> Condition:
        return _value_compare("<=", self, o)

    def __gt__(self, o: Any) -> Condition:
        return _value_compare(">", self, o)

    def __ge__(self, o: Any) -> Condition:
        return _value_compare(">=", self, o)

    def __eq__(self, o: Any) -> Condition:  # type: ignore[override]
        return _value_compare("==", self, o)

    def __ne__(self, o: Any) -> Condition:  # type: ignore[override]
        return _value_compare("!=", self, o)

    def __neg__(self) -> "Expr":
        return _negate(self, literal=True)

    def __pos__(self) -> "Expr":
        return self

    def __abs__(self) -> "Expr":
        return abs(self)

    def __getitem__(self, idx: Any) -> "Expr":
        items = idx if isinstance(idx, tuple) else (idx,)
        if not items:
            raise DSLError("an access needs at least one index")
        for k in items:
            if isinstance(k, slice):
                raise DSLError("slices are not supported: use dsl.gen to build a sub-tensor")
        return Expr(ast.Access(self.node, tuple(_index(k) for k in items)), self.deps)

    def __iter__(self) -> Any:
        raise DSLError("an expression is not iterable (index it, or project a pair with "
                       ".fst/.snd)")

    def __bool__(self) -> bool:
        raise DSLError("an expression has no truth value: select with dsl.where(c, a, b) "
                       "(c a comparison such as x[i] > 0, or a predicate on indices)")

    def proj(self, k: int) -> "Expr":
        if k not in (0, 1):
            raise DSLError(f"pairs have components 0 and 1, not {k!r}")
        return Expr(ast.Proj(self.node, k), self.deps)

    @property
    def fst(self) -> "Expr":
        return self.proj(0)

    @property
    def snd(self) -> "Expr":
        return self.proj(1)

    def __repr__(self) -> str:
        return _show(self.node)


class _ExprClass(type):
    """`isinstance(v, Expr)` holds for a `Variable` although `Variable` does not derive from
    `Expr`: Python tries the reflected comparison of a right operand whose class derives from
    the left operand's first, so `x[i] > a` would be built as `a < x[i]`."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or (
            cls is Expr and type.__instancecheck__(Variable, obj))

    def __subclasscheck__(cls, sub: type) -> bool:
        return type.__subclasscheck__(cls, sub) or (
            cls is Expr and type.__subclasscheck__(Variable, sub))


class Expr(_Value, metaclass=_ExprClass):
    """A tensorlang expression under construction: `.node` is the `ast.Expr`."""

    __slots__ = ()


class Variable(_Value):
    """A value parameter (`dsl.param`): an expression that also declares its `Param`
    (`isinstance(v, Expr)` holds)."""

    __slots__ = ("param",)

    def __init__(self, p: Param):
        super().__init__(ast.Var(p.name))
        self.param = p

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def type(self) -> Type:
        return self.param.type


def _value_compare(op: str, a: Expr, o: Any) -> Condition:
    """`a op o` of real values: the parser's `CondCmp` with the readings it has as an index
    (an integer literal, a variable's name); the checker decides from the roles of the names
    that these sides are values."""
    b = _lift(o)
    return Condition(ast.CondCmp(op, a.node, b.node, _index_reading(a), _index_reading(o)),
                     _deps(a, b))


def _index_reading(x: Any) -> Affine | None:
    """What the parser reads as an index in the text of the value `x`: a name or an integer
    literal (`x[i] > 0`: the 0); anything else has no index reading."""
    if isinstance(x, Expr):
        return Affine.var(x.node.name) if isinstance(x.node, ast.Var) else None
    if isinstance(x, Index):
        return x.aff if isinstance(x.aff, Affine) else None
    if isinstance(x, int) and not isinstance(x, bool) or _is_np_int(x):
        return Affine.lit(int(x))
    return None


def _negate(e: Expr, literal: bool) -> Expr:
    """`-e` is `(-1.0) * e`; unary minus of a constant is the negated constant (parser)."""
    if literal and isinstance(e.node, ast.Const):
        return Expr(ast.Const(-e.node.value), e.deps)
    return Expr(ast.Mul(ast.Const(-1.0), e.node), e.deps)


def _show(node: ast.Node) -> str:
    try:
        from tensorlang.syntax.printer import to_tl
        if isinstance(node, QuasiAffine):  # printed as the index of an access: `_[i // 2]`
            return _TEMP_NAME.sub("", to_tl(ast.Access(ast.Var("_"), (node,))))[2:-1]
        return _TEMP_NAME.sub("", to_tl(node))
    except Exception:  # the printer is optional here; never fail in a repr
        return repr(node)


def const(c: float) -> Expr:
    if not _is_number(c):
        raise DSLError(f"a constant must be a number, not {_describe(c)}")
    return Expr(ast.Const(float(c)))


def iverson(p: Any, e: Any = 1.0) -> Expr:
    """`[p] * e`: `e` where `p` holds, else the zero of `e`'s type (any type)."""
    v = _lift(e)
    return Expr(ast.Iverson(_pred(p).node, v.node), v.deps)


def pair(a: Any, b: Any, *more: Any) -> Expr:
    """`(a, b)`; more components nest to the right: `pair(a, b, c)` is `(a, (b, c))`."""
    if more:
        b = pair(b, *more)
    x, y = _lift(a), _lift(b)
    return Expr(ast.Pair(x.node, y.node), _deps(x, y))


def proj(e: Any, k: int) -> Expr:
    return _lift(e).proj(k)


# -- builtins


def builtin(fn: str, *args: Any, params: Iterable[float] = ()) -> Expr:
    """A call of any builtin of `ast.BUILTINS` (with constant `params`, e.g. pow's exponent)."""
    arity = ast.BUILTINS.get(fn)
    ps = tuple(params)
    if arity is None:
        raise DSLError(f"unknown builtin {fn!r}")
    if arity != (len(args), len(ps)):
        raise DSLError(f"{fn} takes {arity[0]} argument(s) and {arity[1]} constant "
                       f"parameter(s), got {len(args)} and {len(ps)}")
    for p in ps:
        if not _is_number(p):
            raise DSLError(f"the constant parameter of {fn} must be a number, not "
                           f"{_describe(p)}")
    xs = [_lift(a) for a in args]
    return Expr(ast.Call(fn, tuple(x.node for x in xs), tuple(float(p) for p in ps)), _deps(*xs))


def exp(e: Any) -> Expr:
    return builtin("exp", e)


def log(e: Any) -> Expr:
    return builtin("log", e)


def sin(e: Any) -> Expr:
    return builtin("sin", e)


def cos(e: Any) -> Expr:
    return builtin("cos", e)


def tan(e: Any) -> Expr:
    return builtin("tan", e)


def tanh(e: Any) -> Expr:
    return builtin("tanh", e)


def sqrt(e: Any) -> Expr:
    return builtin("sqrt", e)


def sigmoid(e: Any) -> Expr:
    return builtin("sigmoid", e)


def softplus(e: Any) -> Expr:
    return builtin("softplus", e)


def abs(e: Any) -> Expr:  # noqa: A001 - the language's name
    return builtin("abs", e)


def relu(e: Any) -> Expr:
    return builtin("relu", e)


def square(e: Any) -> Expr:
    return builtin("square", e)


def recip(e: Any) -> Expr:
    return builtin("recip", e)


def pow(e: Any, y: Any) -> Expr:  # noqa: A001
    """`e ** y`: the builtin `pow` for a constant exponent; for a real exponent (SPEC 12)
    `exp(y * log(e))`, defined for e > 0 (as the parser lowers `x ** y`)."""
    base, power = _lift(e), _lift(y)
    if isinstance(power.node, ast.Const):
        return builtin("pow", base, params=(power.node.value,))
    return exp(Expr(ast.Mul(power.node, builtin("log", base).node), _deps(base, power)))


def max(*args: Any) -> Expr:  # noqa: A001
    """`max(a, b)`, the builtin; `max(N, lambda j: e)` is the reduction `max j:N. e` (SPEC 12:
    -inf over an empty range), several sizes nest like `dsl.sum`."""
    return _extremum("max", args)


def min(*args: Any) -> Expr:  # noqa: A001
    """`min(a, b)`, the builtin; `min(N, lambda j: e)` is the reduction `min j:N. e` (+inf
    over an empty range)."""
    return _extremum("min", args)


def _extremum(op: str, args: tuple) -> Expr:
    if args and callable(args[-1]) and not isinstance(args[-1], (Expr, Relation)):
        node, deps = _bind_indices(op, args)
        return Expr(node, deps)
    if len(args) != 2:
        raise DSLError(f"dsl.{op} takes two values ({op}(a, b)) or sizes and a function of "
                       f"the indices ({op}(N, lambda j: e), the reduction {op} j:N. e)")
    return builtin(op, *args)


# -- selection and literals (SPEC 12)


def where(cond: Any, a: Any, b: Any) -> Expr:
    """`where(c, a, b)`, i.e. `if c then a else b`: `c` a predicate on indices (static: any
    types of `a`, `b`) or a `Condition` comparing values (`x[i] > 0`; then `a`, `b` are R
    and the selection is per point, piecewise constant in differentiation)."""
    c = _cond(cond)
    x, y = _lift(a), _lift(b)
    return Expr(ast.IfThen(c.node, x.node, y.node), c.deps | _deps(x, y))


def literal(elems: list[Any]) -> Expr:
    """The tensor literal `[e0, ..., en-1]` (nested lists: `[[1, 2], [3, 4]]`), i.e. as the
    parser lowers it, `gen k:n. [k == 0] * e0 + ... + [k == n-1] * en-1`."""
    if not isinstance(elems, list) or not elems:
        raise DSLError("a tensor literal is a non-empty list of values, not "
                       f"{_describe(elems)}")
    xs = [_lift(e) for e in elems]
    avoid = set().union(*(ast.free_names(x.node) for x in xs))
    k = ast.fresh("lit", avoid, itertools.count())
    body: ast.Expr | None = None
    for m, x in reversed(list(enumerate(xs))):
        term = ast.Iverson(ast.Cmp("==", Affine.var(k), Affine.lit(m)), x.node)
        body = term if body is None else ast.Add(term, body)
    assert body is not None
    return Expr(ast.Gen(k, Affine.lit(len(xs)), body), _deps(*xs))


# -- binders

_INDEX_NAMES = ("i", "j", "k", "l", "m", "n", "p", "q")


def _binder_args(args: tuple, what: str) -> tuple[list[Affine], Callable]:
    if len(args) < 2:
        raise DSLError(f"{what}(size, ..., fn): give at least one size and a function")
    *sizes, fn = args
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = list(sizes[0])
    out = [_affine(n, f"the range of {what}") for n in sizes]
    for n in out:
        if _py.any(v.startswith(_TEMP_PREFIX) for v in n.vars()):
            raise DSLError(f"the range of {what} must be a size, not depend on an index")
    return out, fn


def _bind_indices(what: str, args: tuple) -> tuple[ast.Node, frozenset[_Binding]]:
    sizes, fn = _binder_args(args, what)
    names = _lambda_names(fn, len(sizes), _INDEX_NAMES, what)
    temps = [_temp(n) for n in names]
    result = fn(*(Index(Affine.var(t)) for t in temps))
    node: ast.Node
    if what == "exists":
        node, deps = _pred(result).node, frozenset()
    else:
        body = _lift(result)
        node, deps = body.node, body.deps
    cls = {"gen": ast.Gen, "sum": ast.Sum, "exists": ast.Exists, "max": ast.Max,
           "min": ast.Min}[what]
    for k in reversed(range(len(sizes))):
        if what != "exists":
            node, deps = _close(node, deps, temps[k])
        name = _fresh_for(names[k], node)
        node = cls(name, sizes[k], _rename_index(node, temps[k], name))
    return node, deps


def gen(*args: Any) -> Expr:
    """`gen(N, lambda i: e)` is `gen i:N. e`; `gen(N, M, lambda i, j: e)` nests."""
    node, deps = _bind_indices("gen", args)
    return Expr(node, deps)


def sum(*args: Any) -> Expr:  # noqa: A001
    """`sum(N, lambda i: e)` is `sum i:N. e` (e scalar); several sizes nest."""
    node, deps = _bind_indices("sum", args)
    return Expr(node, deps)


def exists(*args: Any) -> Pred:
    """`exists(N, lambda t: p)` is `exists t:N. p` (e.g. `i == 2 * t`: i is even)."""
    node, _ = _bind_indices("exists", args)
    return Pred(node)  # type: ignore[arg-type]


def let(*args: Any) -> Expr:
    """`let(v, lambda x: body)` is `let x = v in body`; `let(v1, v2, lambda a, b: ...)` nests."""
    if len(args) < 2:
        raise DSLError("let(value, ..., fn): give at least one value and a function")
    *values, fn = args
    vs = [_lift(v) for v in values]
    names = _lambda_names(fn, len(vs), ["v"] * len(vs), "let")
    temps = [_temp(n) for n in names]
    body = _lift(fn(*(Expr(ast.Var(t)) for t in temps)))
    node, deps = body.node, body.deps
    for k in reversed(range(len(vs))):
        node, deps = _close(node, deps, temps[k])
        name = _fresh_for(names[k], node, vs[k].node)
        node = ast.Let(name, vs[k].node, _rename_index(node, temps[k], name))
    return Expr(node, deps | _deps(*vs))


def bind(name: str, value: Any) -> Expr:
    """A statement `name = value` of the def being built; returns the variable `name`."""
    v = _lift(value)
    b = _Binding(_check_name(name, "statement"), v.node, v.deps, next(_bindings))
    return Expr(ast.Var(name), v.deps | {b})


def call(f: ast.Def | str, *args: Any) -> Expr:
    """A call of an earlier def (surface `DefCall`; the elaborator inlines it).  Sizes are
    passed as index expressions or integers, relations as `Relation`s."""
    name = f.name if isinstance(f, ast.Def) else _check_name(f, "def")
    nodes: list[ast.Expr] = []
    deps: frozenset[_Binding] = frozenset()
    for a in args:
        if isinstance(a, Relation):      # also an index array
            nodes.append(ast.Var(a.name))
        elif isinstance(a, Index) or (isinstance(a, int) and not isinstance(a, bool)):
            nodes.append(_affine_expr(_affine(a)))
        else:
            x = _lift(a)
            nodes.append(x.node)
            deps |= x.deps
    return Expr(ast.DefCall(name, tuple(nodes)), deps)


def _affine_expr(a: Affine) -> ast.Expr:
    """A size argument as the parser writes it: `N`, `N + 1.0`, `2.0 * N`, ..."""
    out: ast.Expr | None = None
    for name, c in a.terms:
        term: ast.Expr = ast.Var(name) if c == 1 else ast.Mul(ast.Const(float(c)), ast.Var(name))
        out = term if out is None else ast.Add(out, term)
    if out is None:
        return ast.Const(float(a.const))
    return ast.Add(out, ast.Const(float(a.const))) if a.const else out


# ---------------------------------------------------------------------------------------------
# Types and parameters


class _RealType:
    """`dsl.R` is the type R; `dsl.R[N, M + 1]` is a tensor type."""

    def __getitem__(self, dims: Any) -> Type:
        items = dims if isinstance(dims, tuple) else (dims,)
        return ast.tensor([_affine(d, "a tensor dimension") for d in items])

    def __repr__(self) -> str:
        return "R"


R = _RealType()


def _type(t: Any) -> Type:
    if isinstance(t, Type):
        return t
    if t is R:
        return REAL
    if isinstance(t, tuple) and len(t) >= 2:
        parts = [_type(x) for x in t]
        out = parts[-1]
        for x in reversed(parts[:-1]):
            out = ast.TPair(x, out)
        return out
    if isinstance(t, str) and t == "size":
        return ast.TSize()
    raise DSLError(f"not a type: {t!r} (use dsl.R, dsl.R[...], a tuple of types, "
                   "dsl.array, dsl.rel or 'size')")


def array(shape: Any, elem: Any = R) -> Type:
    """`[n1]...[nk] elem`: a tensor with any element type, e.g. `array(N, (R, R))`."""
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    return ast.tensor([_affine(d, "a tensor dimension") for d in dims], _type(elem))


def rel(*sizes: Any) -> Type:
    """`rel(n1, ..., nk)`: a relation over index tuples (a sparse pattern given as input)."""
    if not sizes:
        raise DSLError("a relation needs at least one dimension")
    return ast.TRel(tuple(_affine(n, "a relation dimension") for n in sizes))


class _IndexArrayType:
    """`dsl.Z[B, K]` is the index-array type `Z[B, K]` (entries' range inferred from the
    uses); `dsl.index_array(shape, bound)` writes `Z[...] in bound`."""

    def __getitem__(self, dims: Any) -> Type:
        return index_array(dims if isinstance(dims, tuple) else (dims,))

    def __repr__(self) -> str:
        return "Z"


Z = _IndexArrayType()


def index_array(shape: Any, bound: Any = None) -> Type:
    """`Z[n1, ..., nk] in bound` (SPEC 12): an integer array whose entries index a dimension
    of extent `bound`; without `bound` the checker infers it from the uses."""
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    if not dims:
        raise DSLError("an index array needs at least one dimension")
    sizes = tuple(_affine(d, "an index-array dimension") for d in dims)
    if bound is None:
        return ast.TIndex(sizes, True)
    return ast.TIndex(sizes + (_affine(bound, "the range of an index array"),))


def size(name: str) -> Size:
    """A size parameter `name: size`."""
    return Size(name)


def sizes(names: str) -> tuple[Size, ...]:
    """`N, M = dsl.sizes("N M")`."""
    return tuple(Size(n) for n in names.replace(",", " ").split())


def param(name: str, t: Any) -> Any:
    """A parameter: a `Variable` (values), a `Size` (type `"size"`) or a `Relation`."""
    ty = _type(t)
    if isinstance(ty, ast.TSize):
        return Size(name)
    p = Param(_check_name(name, "parameter"), ty)
    if isinstance(ty, ast.TIndex):
        return IndexArray(p)
    if isinstance(ty, ast.TRel):
        return Relation(p)
    return Variable(p)


# ---------------------------------------------------------------------------------------------
# Definitions


def _as_param(p: Any) -> Param:
    if isinstance(p, (Size, Variable, Relation)):
        return p.param
    if isinstance(p, Param):
        return p
    raise DSLError(f"a parameter must come from dsl.size or dsl.param, not {_describe(p)}")


def _rename_clashes(node: ast.Node, reserved: set[str], taken: set[str]) -> ast.Node:
    """Rename inner binders named like a parameter or a statement (a name means one thing
    at each point of a def); new names avoid everything in `taken`."""
    memo: dict[int, ast.Node] = {}

    def go(e: ast.Node) -> ast.Node:
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        out = ast.map_fields(e, go) if isinstance(e, (ast.Expr, ast.Pred)) else e
        name = ast.binder_name(out)
        if name is not None and name in reserved:
            new = next(f"{name}{k}" for k in itertools.count(1) if f"{name}{k}" not in taken)
            taken.add(new)
            if isinstance(out, ast.Let):
                out = ast.Let(new, out.value, ast.subst(out.body, {name: ast.Var(new)}))
            else:
                out = type(out)(new, out.size, _rename_index(out.body, name, new))
        memo[id(e)] = out
        return out

    return go(node)


def function(name: str, params: Sequence[Any], body: Any, ret: Any = None) -> ast.Def:
    """The `Def` `name(params) -> ret` returning `body`, with the statements (`bind`) that
    `body` reads as the `let`s of its spine, in the order they were made.  `ret=None` leaves
    the return type to be inferred.  The result may still need elaboration (see module
    docstring)."""
    _check_name(name, "def")
    ps = tuple(_as_param(p) for p in params)
    pnames = [p.name for p in ps]
    dup = {n for n in pnames if pnames.count(n) > 1}
    if dup:
        raise DSLError(f"parameter {sorted(dup)[0]} of {name} is given twice")
    b = _lift(body)
    stmts = sorted(b.deps, key=lambda s: s.seq)
    snames = [s.name for s in stmts]
    for s in stmts:
        if s.name in pnames:
            raise DSLError(f"statement {s.name} of {name} has the name of a parameter")
        if snames.count(s.name) > 1:
            raise DSLError(f"two different statements of {name} are named {s.name}")
    reserved = set(pnames) | set(snames)
    taken = reserved | _all_names(b.node)
    for s in stmts:
        taken |= _all_names(s.value)
    node = _rename_clashes(b.node, reserved, taken)
    for s in reversed(stmts):
        node = ast.Let(s.name, _rename_clashes(s.value, reserved, taken), node)
    leaked = sorted(n for n in ast.free_names(node) if n.startswith(_TEMP_PREFIX))
    if leaked:
        raise DSLError(f"{name}: an index (or let variable) is used outside the dsl.gen/sum/let "
                       "that bound it")
    unknown = sorted(ast.free_names(node) - set(pnames))
    if unknown:
        raise DSLError(f"{name}: {', '.join(unknown)} "
                       f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'}"
                       f" (parameters: {', '.join(pnames) or 'none'})")
    return ast.Def(name, ps, None if ret is None else _type(ret), node)


def core(d: ast.Def, earlier: Sequence[ast.Def] = ()) -> ast.Def:
    """`d` type-checked and elaborated to the core (the defs it calls go in `earlier`)."""
    from tensorlang.check.typecheck import check_module

    return check_module([*earlier, d], "<dsl>").defs[d.name]
