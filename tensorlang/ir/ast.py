"""The typed core AST of SPEC 2.1: immutable, hash-consed nodes.

Every node is interned: constructing a node whose fields equal those of a live node returns
that node, so structural equality *is* identity (`a is b`), hashing is O(1), and shared
subterms are stored once.  The source location (`loc`) is metadata: it is not part of a
node's identity, and an interned node keeps the location it was first built with.

Three name spaces share one set of identifiers (the type checker forbids reusing a name in
another role within a scope):
  * program variables  -- `Var`, bound by `Let` and by value parameters;
  * index variables    -- bound by `Gen`, `Sum`, `Exists`, used inside `Affine`;
  * size variables     -- `size` parameters, used inside `Affine` (sizes, indices);
  * relations          -- `rel(...)` parameters, used by `RelCall`.

Surface-only constructs (`DefCall`, and `Add`/`Mul` with tensor operands) exist only between
the parser and `tensorlang.check.elaborate`; every later stage sees the core grammar only.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence

from tensorlang.syntax.errors import Loc

_TABLE: "weakref.WeakValueDictionary[tuple, Node]" = weakref.WeakValueDictionary()


def located(cls: type, fields: tuple, loc: Loc | None) -> Any:
    """The node `cls(*fields)` located at `loc` (unpickles `Node.reduce_located`)."""
    return cls(*fields, loc=loc)


class Node:
    """Base of all interned nodes.  Subclasses list their fields in `_fields`."""

    __slots__ = ("loc", "__weakref__")
    _fields: ClassVar[tuple[str, ...]] = ()

    def __new__(cls, *args: Any, loc: Loc | None = None) -> Any:
        if len(args) != len(cls._fields):
            raise TypeError(f"{cls.__name__} takes {len(cls._fields)} fields, got {len(args)}")
        args = cls._norm(*args)
        key = (cls, *args)
        obj = _TABLE.get(key)
        if obj is None:
            obj = object.__new__(cls)
            for name, value in zip(cls._fields, args):
                object.__setattr__(obj, name, value)
            object.__setattr__(obj, "loc", loc)
            _TABLE[key] = obj
        elif loc is not None and obj.loc is None:
            object.__setattr__(obj, "loc", loc)  # first located occurrence names it
        return obj

    def __init__(self, *args: Any, loc: Loc | None = None) -> None:  # work done in __new__
        pass

    @classmethod
    def _norm(cls, *args: Any) -> tuple:
        return args

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple:
        return (type(self), self.fields())  # no location: cached programs are file-neutral

    def reduce_located(self) -> tuple:
        """`__reduce__` keeping the location (the checked-module cache, keyed by file)."""
        return (located, (type(self), self.fields(), self.loc))

    def __copy__(self) -> "Node":
        return self

    def __deepcopy__(self, memo: dict) -> "Node":
        return self

    def fields(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def with_loc(self, loc: Loc | None) -> "Node":
        """The same node; sets the location if it has none yet."""
        if loc is not None and self.loc is None:
            object.__setattr__(self, "loc", loc)
        return self

    def __repr__(self) -> str:
        inner = ", ".join(repr(getattr(self, f)) for f in self._fields)
        return f"{type(self).__name__}({inner})"


# ---------------------------------------------------------------------------------------------
# Affine expressions (indices and sizes)


class Affine(Node):
    """`sum(coeff * var) + const` with integer coefficients, kept canonical.

    `terms` is sorted by variable name and has no zero coefficients, so two affine
    expressions are equal iff they are the same node.
    """

    __slots__ = ("terms", "const")
    _fields = ("terms", "const")
    terms: tuple[tuple[str, int], ...]
    const: int

    @classmethod
    def _norm(cls, terms: Iterable[tuple[str, int]], const: int) -> tuple:
        acc: dict[str, int] = {}
        for name, coeff in terms:
            acc[name] = acc.get(name, 0) + int(coeff)
        return (tuple(sorted((n, c) for n, c in acc.items() if c != 0)), int(const))

    @staticmethod
    def var(name: str) -> "Affine":
        return Affine(((name, 1),), 0)

    @staticmethod
    def lit(k: int) -> "Affine":
        return Affine((), k)

    def __add__(self, other: "Affine | int") -> "Affine":
        other = _as_affine(other)
        return Affine(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return self.scale(-1)

    def __sub__(self, other: "Affine | int") -> "Affine":
        return self + (-_as_affine(other))

    def __rsub__(self, other: "Affine | int") -> "Affine":
        return _as_affine(other) - self

    def scale(self, k: int) -> "Affine":
        return Affine(tuple((n, c * k) for n, c in self.terms), self.const * k)

    def __mul__(self, k: int) -> "Affine":
        return self.scale(k)

    __rmul__ = __mul__

    def vars(self) -> frozenset[str]:
        return frozenset(n for n, _ in self.terms)

    def coeff(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    def is_const(self) -> bool:
        return not self.terms

    def as_var(self) -> str | None:
        """The variable name if this is exactly one variable with coefficient 1."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    def subst(self, mapping: Mapping[str, "Affine | int"]) -> "Affine":
        out = Affine((), self.const)
        for name, coeff in self.terms:
            out = out + (_as_affine(mapping[name]) * coeff if name in mapping
                         else Affine(((name, coeff),), 0))
        return out

    def rename(self, mapping: Mapping[str, str]) -> "Affine":
        return Affine(tuple((mapping.get(n, n), c) for n, c in self.terms), self.const)

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Value under `env` (ints or numpy integer arrays, which broadcast)."""
        out: Any = self.const
        for name, coeff in self.terms:
            out = out + coeff * env[name]
        return out


def _as_affine(x: "Affine | int") -> Affine:
    return x if isinstance(x, Affine) else Affine.lit(int(x))


# ---------------------------------------------------------------------------------------------
# Quasi-affine index expressions (surface only, SPEC 12): `e // c`, `e % c` and reads of integer
# index arrays `idx[i]`.  The parser builds them inside indices and comparisons;
# `tensorlang.check.quasi` lowers them to affine indices over fresh summation (or `exists`)
# variables, so no later stage sees them.  `semantics/grid.quasi_value` evaluates them.


class IndexDiv(Node):
    """`num // den` (op "//") or `num % den` (op "%"); `den` a positive constant or a size."""

    __slots__ = ("op", "num", "den")
    _fields = ("op", "num", "den")
    op: str
    num: "Affine | QuasiAffine"
    den: Affine
    OPS: ClassVar[tuple[str, ...]] = ("//", "%")

    @classmethod
    def _norm(cls, op: str, num: "Affine | QuasiAffine", den: Affine) -> tuple:
        if op not in cls.OPS:
            raise ValueError(f"bad index operator {op!r}")
        return (op, _as_index(num), _as_affine(den))


class IndexRead(Node):
    """`idx[a1, ..., ak]`: an entry of the integer index-array parameter `name`."""

    __slots__ = ("name", "args")
    _fields = ("name", "args")
    name: str
    args: tuple["Affine | QuasiAffine", ...]

    @classmethod
    def _norm(cls, name: str, args: Iterable["Affine | QuasiAffine"]) -> tuple:
        return (name, tuple(_as_index(a) for a in args))


class QuasiAffine(Node):
    """`base + sum(coeffs[k] * terms[k])` with `terms` `IndexDiv`s or `IndexRead`s; built by
    `quasi_add`/`quasi_scale`, which return a plain `Affine` when no term is left."""

    __slots__ = ("base", "terms", "coeffs")
    _fields = ("base", "terms", "coeffs")
    base: Affine
    terms: tuple["IndexDiv | IndexRead", ...]
    coeffs: tuple[int, ...]

    @classmethod
    def _norm(cls, base: Affine, terms: Iterable[Node], coeffs: Iterable[int]) -> tuple:
        acc: dict[Node, int] = {}
        order: list[Node] = []
        for t, c in zip(terms, coeffs):
            if t not in acc:
                order.append(t)
                acc[t] = 0
            acc[t] += int(c)
        kept = [t for t in order if acc[t] != 0]
        return (_as_affine(base), tuple(kept), tuple(acc[t] for t in kept))


def _as_index(x: Any) -> "Affine | QuasiAffine":
    return x if isinstance(x, QuasiAffine) else _as_affine(x)


def quasi_term(t: "IndexDiv | IndexRead") -> QuasiAffine:
    return QuasiAffine(Affine.lit(0), (t,), (1,))


def quasi_parts(a: "Affine | QuasiAffine") -> tuple[Affine, tuple[Node, ...], tuple[int, ...]]:
    if isinstance(a, QuasiAffine):
        return a.base, a.terms, a.coeffs
    return a, (), ()


def _quasi(base: Affine, terms: Iterable[Node], coeffs: Iterable[int]) -> "Affine | QuasiAffine":
    q = QuasiAffine(base, terms, coeffs)
    return q.base if not q.terms else q


def quasi_add(a: "Affine | QuasiAffine", b: "Affine | QuasiAffine") -> "Affine | QuasiAffine":
    ba, ta, ca = quasi_parts(a)
    bb, tb, cb = quasi_parts(b)
    return _quasi(ba + bb, ta + tb, ca + cb)


def quasi_scale(a: "Affine | QuasiAffine", k: int) -> "Affine | QuasiAffine":
    base, terms, coeffs = quasi_parts(a)
    return _quasi(base.scale(k), terms, tuple(c * k for c in coeffs))


# ---------------------------------------------------------------------------------------------
# Predicates


class Pred(Node):
    __slots__ = ()


class PTrue(Pred):
    __slots__ = ()


class PFalse(Pred):
    __slots__ = ()


class Cmp(Pred):
    """`lhs op rhs` with op one of `<`, `<=`, `==` (`>`, `>=`, `!=` are sugar)."""

    __slots__ = ("op", "lhs", "rhs")
    _fields = ("op", "lhs", "rhs")
    op: str
    lhs: Affine
    rhs: Affine
    OPS: ClassVar[tuple[str, ...]] = ("<", "<=", "==")

    @classmethod
    def _norm(cls, op: str, lhs: Affine, rhs: Affine) -> tuple:
        if op not in cls.OPS:
            raise ValueError(f"bad comparison {op!r}")
        return (op, _as_index(lhs), _as_index(rhs))  # quasi-affine sides: surface only


class RelCall(Pred):
    """Membership of the index tuple `args` in the relation parameter `name`."""

    __slots__ = ("name", "args")
    _fields = ("name", "args")
    name: str
    args: tuple[Affine, ...]

    @classmethod
    def _norm(cls, name: str, args: Iterable[Affine]) -> tuple:
        return (name, tuple(_as_affine(a) for a in args))


class And(Pred):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Pred
    b: Pred


class Or(Pred):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Pred
    b: Pred


class Exists(Pred):
    """`exists idx:size. body` -- an index variable ranging over 0..size-1."""

    __slots__ = ("idx", "size", "body")
    _fields = ("idx", "size", "body")
    idx: str
    size: Affine
    body: Pred


# ---------------------------------------------------------------------------------------------
# Types


class Type(Node):
    __slots__ = ()


class TReal(Type):
    __slots__ = ()


class TArr(Type):
    """`[size] elem`; `R[N, M]` is `TArr(N, TArr(M, TReal()))`."""

    __slots__ = ("size", "elem")
    _fields = ("size", "elem")
    size: Affine
    elem: Type


class TPair(Type):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Type
    b: Type


class TSize(Type):
    __slots__ = ()


class TRel(Type):
    __slots__ = ("sizes",)
    _fields = ("sizes",)
    sizes: tuple[Affine, ...]


class TIndex(TRel):
    """`Z[n1, ..., nk] in m`: an integer index array whose entries lie in `0 <= v < m` (SPEC 12).

    It is the relation `{(i1, ..., ik, v) : idx[i1, ..., ik] == v}` of shape `sizes =
    (n1, ..., nk, m)`, so every stage treats it as a relation parameter; only the argument
    (an integer array, converted to the relation's coordinates at call time) differs.  Before
    elaboration `bound` may be unknown (`Z[N]` written without `in m`): then `sizes` holds the
    shape only and `unbounded` is true; `tensorlang.check.quasi` infers the bound from the uses.
    """

    __slots__ = ("unbounded",)
    _fields = ("sizes", "unbounded")
    unbounded: bool

    def __new__(cls, sizes: Iterable[Affine], unbounded: bool = False, *,
                loc: Loc | None = None) -> Any:
        return super().__new__(cls, sizes, unbounded, loc=loc)

    @classmethod
    def _norm(cls, sizes: Iterable[Affine], unbounded: bool = False) -> tuple:
        return (tuple(_as_affine(n) for n in sizes), bool(unbounded))

    @property
    def shape(self) -> tuple[Affine, ...]:
        return self.sizes if self.unbounded else self.sizes[:-1]

    @property
    def bound(self) -> Affine | None:
        return None if self.unbounded else self.sizes[-1]


REAL = TReal()


def tensor(shape: Iterable[Affine | int], elem: Type = REAL) -> Type:
    """`R[n1, ..., nk]` (or `elem` nested inside those dimensions)."""
    out = elem
    for n in reversed(list(shape)):
        out = TArr(_as_affine(n), out)
    return out


def shape_of(t: Type) -> tuple[Affine, ...]:
    """The leading array dimensions of `t`."""
    dims: list[Affine] = []
    while isinstance(t, TArr):
        dims.append(t.size)
        t = t.elem
    return tuple(dims)


def scalar_of(t: Type) -> Type:
    """The element type under all leading array dimensions."""
    while isinstance(t, TArr):
        t = t.elem
    return t


# ---------------------------------------------------------------------------------------------
# Expressions


class Expr(Node):
    __slots__ = ()


class Var(Expr):
    __slots__ = ("name",)
    _fields = ("name",)
    name: str


class Const(Expr):
    __slots__ = ("value",)
    _fields = ("value",)
    value: float

    @classmethod
    def _norm(cls, value: float) -> tuple:
        return (float(value),)


class IndexValue(Expr):
    """The value of an affine expression of bound indices and sizes as a real (SPEC 12,
    "indices as values": `gen i:N. i * x[i]`, `1 / N`).  A leaf like `Const`: reading it
    costs nothing (index arithmetic is free, SPEC 3) and it is a constant for
    differentiation.  Its index variables are free names (renamed and substituted like
    those of an access); a variable-free value is a `Const` instead."""

    __slots__ = ("a",)
    _fields = ("a",)
    a: Affine

    @classmethod
    def _norm(cls, a: Affine) -> tuple:
        return (_as_affine(a),)


class Add(Expr):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Expr
    b: Expr


class Mul(Expr):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Expr
    b: Expr


class Call(Expr):
    """Black-box scalar function `fn(args...)` with constant parameters (`pow`'s exponent)."""

    __slots__ = ("fn", "args", "params")
    _fields = ("fn", "args", "params")
    fn: str
    args: tuple[Expr, ...]
    params: tuple[float, ...]

    @classmethod
    def _norm(cls, fn: str, args: Iterable[Expr], params: Iterable[float] = ()) -> tuple:
        return (fn, tuple(args), tuple(float(p) for p in params))


class Pair(Expr):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Expr
    b: Expr


class Proj(Expr):
    __slots__ = ("e", "k")
    _fields = ("e", "k")
    e: Expr
    k: int


class Gen(Expr):
    __slots__ = ("idx", "size", "body")
    _fields = ("idx", "size", "body")
    idx: str
    size: Affine
    body: Expr


class Sum(Expr):
    __slots__ = ("idx", "size", "body")
    _fields = ("idx", "size", "body")
    idx: str
    size: Affine
    body: Expr


class Access(Expr):
    """`e[a1, ..., ak]` -- a (possibly partial) affine access of a nested tensor."""

    __slots__ = ("e", "idx")
    _fields = ("e", "idx")
    e: Expr
    idx: tuple[Affine, ...]

    @classmethod
    def _norm(cls, e: Expr, idx: Iterable[Affine]) -> tuple:
        return (e, tuple(_as_index(a) for a in idx))  # quasi-affine indices: surface only


class Iverson(Expr):
    """`[pred] * e`: e where pred holds, else the zero of e's type (e is not evaluated)."""

    __slots__ = ("pred", "e")
    _fields = ("pred", "e")
    pred: Pred
    e: Expr


class Let(Expr):
    __slots__ = ("name", "value", "body")
    _fields = ("name", "value", "body")
    name: str
    value: Expr
    body: Expr


class DefCall(Expr):
    """Surface only: a call of an earlier `def`; `tensorlang.check.elaborate` inlines it."""

    __slots__ = ("name", "args")
    _fields = ("name", "args")
    name: str
    args: tuple[Expr, ...]


class Box(Expr):
    """A linear-algebra black box (SPEC 13, `semantics.boxes`): output `part` of `fn` applied
    to whole tensors (leading dimensions batch).  After elaboration every argument is a
    variable and every box is the whole value of a `let`.  `ranks` and `dims` are the
    arguments' shapes (concatenated), which its cost depends on; `label` is the source text
    of the arguments (for error messages: "cholesky(K): ... not positive definite")."""

    __slots__ = ("fn", "part", "args", "label", "ranks", "dims")
    _fields = ("fn", "part", "args", "label", "ranks", "dims")
    fn: str
    part: int
    args: tuple[Expr, ...]
    label: str
    ranks: tuple[int, ...]
    dims: tuple[Affine, ...]

    @classmethod
    def _norm(cls, fn: str, part: int, args: Iterable[Expr], label: str,
              ranks: Iterable[int], dims: Iterable[Affine | int]) -> tuple:
        return (str(fn), int(part), tuple(args), str(label), tuple(int(r) for r in ranks),
                tuple(_as_affine(a) for a in dims))

    @staticmethod
    def make(fn: str, part: int, args: Iterable[Expr], label: str,
             shapes: Iterable[Iterable[Affine | int]], loc: Loc | None = None) -> "Box":
        """The box with these argument shapes."""
        shapes = [tuple(s) for s in shapes]
        return Box(fn, part, tuple(args), label, tuple(len(s) for s in shapes),
                   tuple(a for s in shapes for a in s), loc=loc)

    def shapes(self) -> list[tuple[Affine, ...]]:
        return split_dims(self.ranks, self.dims)


def split_dims(ranks: Iterable[int], dims: Sequence[Affine]) -> list[tuple[Affine, ...]]:
    """Concatenated shapes back into one shape per argument."""
    out, k = [], 0
    for r in ranks:
        out.append(tuple(dims[k:k + r]))
        k += r
    return out


class Extremum(Expr):
    """`max idx:size. body` / `min idx:size. body` (SPEC 12): the largest (smallest) value of
    the scalar body over the range; -inf (+inf) when the range is empty.  `Max` and `Min` share
    the field layout of `Sum`, so binder-generic code rebuilds them with `type(e)(idx, size,
    body)`."""

    __slots__ = ("idx", "size", "body")
    _fields = ("idx", "size", "body")
    idx: str
    size: Affine
    body: Expr
    op: ClassVar[str] = ""
    EMPTY: ClassVar[float] = 0.0


class Max(Extremum):
    __slots__ = ()
    op = "max"
    EMPTY = float("-inf")


class Min(Extremum):
    __slots__ = ()
    op = "min"
    EMPTY = float("inf")


EXTREMA: dict[str, type] = {"max": Max, "min": Min}

# -- surface-only selection (SPEC 12): `if c then e1 else e2` and `where(c, e1, e2)`.  The
# parser cannot tell `i < j` (an index predicate) from `a < b` (a comparison of reals), so a
# condition keeps both readings of each comparison; `tensorlang.check.elaborate` decides with
# the roles of the names and lowers `IfThen` to Iverson brackets or to a `sel_ge` call.


class Cond(Expr):
    """Base of the surface conditions of `IfThen`."""

    __slots__ = ()


class CondCmp(Cond):
    """`lhs op rhs` (op one of < <= > >= == !=), each side as a value expression and, where
    it parses as one, as an affine index expression (`None` where it does not)."""

    __slots__ = ("op", "lhs", "rhs", "alhs", "arhs")
    _fields = ("op", "lhs", "rhs", "alhs", "arhs")
    op: str
    lhs: Expr | None
    rhs: Expr | None
    alhs: Affine | None
    arhs: Affine | None


class CondPred(Cond):
    """An index predicate in a condition: `true`, `false`, a relation call, `exists`."""

    __slots__ = ("pred",)
    _fields = ("pred",)
    pred: Pred


class CondAnd(Cond):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Cond
    b: Cond


class CondOr(Cond):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    a: Cond
    b: Cond


class CondNot(Cond):
    __slots__ = ("a",)
    _fields = ("a",)
    a: Cond


class IfThen(Expr):
    """Surface only: `if cond then a else b` (also `where(cond, a, b)`)."""

    __slots__ = ("cond", "a", "b")
    _fields = ("cond", "a", "b")
    cond: Cond
    a: Expr
    b: Expr


BINDERS = (Gen, Sum, Extremum)

# The linear-algebra boxes (SPEC 13; their meaning, cost and rules: semantics/boxes.py).
BOX_NAMES = frozenset({"cholesky", "cholesky_inverse", "trisolve", "trisolve_t", "lq", "eigh"})
PAIR_BOXES = frozenset({"lq", "eigh"})

# Black-box scalar functions: name -> (number of expression args, number of constant params).
BUILTINS: dict[str, tuple[int, int]] = {
    "exp": (1, 0), "log": (1, 0), "sin": (1, 0), "cos": (1, 0), "tan": (1, 0),
    "tanh": (1, 0), "sqrt": (1, 0), "sigmoid": (1, 0), "softplus": (1, 0), "abs": (1, 0),
    "relu": (1, 0), "square": (1, 0), "recip": (1, 0), "pow": (1, 1),
    "max": (2, 0), "min": (2, 0),
    # Derivative helpers (so that a derivative of a call costs one call, SPEC 6):
    # step(x) = [x > 0], sign(x), ge(a, b) = [a >= b], gt(a, b) = [a > b],
    # dtanh = 1 - tanh^2, dsigmoid = sigmoid (1 - sigmoid), dtan = 1 + tan^2;
    # their derivatives d2tanh = -2 tanh dtanh, d2sigmoid = dsigmoid (1 - 2 sigmoid),
    # d2tan = 2 tan dtan; and the selections of max/min tangents and cotangents:
    # sel_ge(a, b, x, y) = x if a >= b else y, keep_ge(a, b, x) = x if a >= b else 0,
    # keep_gt(a, b, x) = x if a > b else 0 (all three 0 where a, b are unordered: NaN).
    "step": (1, 0), "sign": (1, 0), "ge": (2, 0), "gt": (2, 0),
    "dtanh": (1, 0), "dsigmoid": (1, 0), "dtan": (1, 0),
    "d2tanh": (1, 0), "d2sigmoid": (1, 0), "d2tan": (1, 0),
    "sel_ge": (4, 0), "keep_ge": (3, 0), "keep_gt": (3, 0),
}
DERIVATIVE_HELPERS = frozenset({"step", "sign", "ge", "gt", "dtanh", "dsigmoid", "dtan",
                                "d2tanh", "d2sigmoid", "d2tan", "sel_ge", "keep_ge", "keep_gt"})
SPEC_BUILTINS = frozenset(BUILTINS) - DERIVATIVE_HELPERS


# ---------------------------------------------------------------------------------------------
# Definitions and modules


class Param(Node):
    __slots__ = ("name", "type")
    _fields = ("name", "type")
    name: str
    type: Type


class Contract(Node):
    """`requires MEASURE OP BOUND` on a def (docs/testing.md): MEASURE is `cost`, `adds`,
    `muls` or `calls` of the def, OP `<=` or `<`, BOUND an expression in integers, the size
    names and `cost(f)` (`adds(f)`, ...) of other functions (surface `DefCall`s)."""

    __slots__ = ("measure", "op", "bound")
    _fields = ("measure", "op", "bound")
    measure: str
    op: str
    bound: Expr
    MEASURES: ClassVar[tuple[str, ...]] = ("cost", "adds", "muls", "calls")
    OPS: ClassVar[tuple[str, ...]] = ("<=", "<")


class Def(Node):
    """`def name(params) -> ret [requires ...]: body`; statements are nested `Let`s around
    the return.  `requires` (optional, last) is the def's cost contract."""

    __slots__ = ("name", "params", "ret", "body", "requires")
    _fields = ("name", "params", "ret", "body", "requires")
    name: str
    params: tuple[Param, ...]
    ret: Type | None
    body: Expr
    requires: Contract | None

    def __new__(cls, name: str, params: Iterable[Param], ret: Type | None, body: Expr,
                requires: Contract | None = None, *, loc: Loc | None = None) -> Any:
        return super().__new__(cls, name, params, ret, body, requires, loc=loc)

    @classmethod
    def _norm(cls, name: str, params: Iterable[Param], ret: Type | None, body: Expr,
              requires: Contract | None = None) -> tuple:
        return (name, tuple(params), ret, body, requires)


DERIVED_KINDS = ("grad", "jvp", "vjp", "hvp", "hessian", "jacobian")


class DerivedDef(Node):
    """`def name = kind(fn, wrt...) [requires ...]` (SPEC 2.5)."""

    __slots__ = ("name", "kind", "fn", "wrt", "requires")
    _fields = ("name", "kind", "fn", "wrt", "requires")
    name: str
    kind: str
    fn: str
    wrt: tuple[str, ...]
    requires: Contract | None

    def __new__(cls, name: str, kind: str, fn: str, wrt: Iterable[str],
                requires: Contract | None = None, *, loc: Loc | None = None) -> Any:
        return super().__new__(cls, name, kind, fn, wrt, requires, loc=loc)

    @classmethod
    def _norm(cls, name: str, kind: str, fn: str, wrt: Iterable[str],
              requires: Contract | None = None) -> tuple:
        return (name, kind, fn, tuple(wrt), requires)


# ---------------------------------------------------------------------------------------------
# Generic traversal


def children(e: Node) -> tuple[Node, ...]:
    """Direct sub-nodes (expressions, predicates, affines) in field order."""
    out: list[Node] = []
    for value in e.fields():
        if isinstance(value, Node):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Node))
    return tuple(out)


def map_fields(e: Node, f: Callable[[Node], Node]) -> Node:
    """Rebuild `e` with `f` applied to every direct sub-node (keeps loc)."""
    new = []
    changed = False
    for value in e.fields():
        if isinstance(value, Node):
            nv: Any = f(value)
        elif isinstance(value, tuple) and any(isinstance(v, Node) for v in value):
            nv = tuple(f(v) if isinstance(v, Node) else v for v in value)
        else:
            nv = value
        changed = changed or nv is not value
        new.append(nv)
    if not changed:
        return e
    return type(e)(*new, loc=e.loc)


def walk(e: Node) -> Iterator[Node]:
    """Pre-order traversal (shared subterms are visited once)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        stack.extend(reversed(children(n)))


def binder_name(e: Node) -> str | None:
    """The name a node binds in (some of) its children, if any."""
    if isinstance(e, (Gen, Sum, Exists, Extremum)):
        return e.idx
    if isinstance(e, Let):
        return e.name
    return None


_FREE_NAMES: "weakref.WeakKeyDictionary[Node, frozenset[str]]" = weakref.WeakKeyDictionary()
_FREE_VARS: "weakref.WeakKeyDictionary[Node, frozenset[str]]" = weakref.WeakKeyDictionary()


def free_names(e: Node) -> frozenset[str]:
    """Every free identifier of any kind: variables, index and size variables, relations."""
    return _free_names(e, _FREE_NAMES)


def _free_names(e: Node, memo: Any) -> frozenset[str]:
    hit = memo.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Var):
        out = frozenset((e.name,))
    elif isinstance(e, Affine):
        out = e.vars()
    elif isinstance(e, RelCall):
        out = frozenset((e.name,)).union(*(a.vars() for a in e.args))
    elif isinstance(e, IndexRead):
        out = frozenset((e.name,)).union(*[_free_names(a, memo) for a in e.args])
    elif isinstance(e, DefCall):
        out = frozenset().union(*[_free_names(a, memo) for a in e.args])
    elif isinstance(e, (Gen, Sum, Exists, Extremum)):
        out = e.size.vars() | (_free_names(e.body, memo) - {e.idx})
    elif isinstance(e, Let):
        out = _free_names(e.value, memo) | (_free_names(e.body, memo) - {e.name})
    else:
        # a list, not a generator: the recursion then passes through no C call, whose depth
        # Python >= 3.12 bounds by a limit `sys.setrecursionlimit` does not raise
        out = frozenset().union(*[_free_names(c, memo) for c in children(e)])
    memo[e] = out
    return out


def free_vars(e: Node) -> frozenset[str]:
    """Free program variables (`Var` names) only."""
    return _free_vars(e, _FREE_VARS)


def _free_vars(e: Node, memo: Any) -> frozenset[str]:
    hit = memo.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Var):
        out = frozenset((e.name,))
    elif isinstance(e, (Affine, Pred)):
        out = frozenset()
    elif isinstance(e, Let):
        out = _free_vars(e.value, memo) | (_free_vars(e.body, memo) - {e.name})
    else:
        out = frozenset().union(*[_free_vars(c, memo) for c in children(e)])  # (as above)
    memo[e] = out
    return out


_BINDERS: "weakref.WeakKeyDictionary[Node, bool]" = weakref.WeakKeyDictionary()


def has_binders(e: Node) -> bool:
    """Whether `e` binds any name (`gen`, `sum`, `exists`, `max`/`min`, `let`) inside it:
    renaming binders can skip a subterm without any (memoised per node)."""
    hit = _BINDERS.get(e)
    if hit is None:
        hit = _BINDERS[e] = binder_name(e) is not None or any(
            has_binders(c) for c in children(e))
    return hit


_HEIGHTS: "weakref.WeakKeyDictionary[Node, tuple[int, int]]" = weakref.WeakKeyDictionary()


def heights(e: Node) -> tuple[int, int]:
    """(levels, index binders) of the deepest path from `e` down, `e` included: `gen`, `sum`
    and `exists` count as index binders.  Memoised per node and computed without recursion
    (it measures programs that may be too deep to recurse over), so a subterm shared by many
    defs (inlined calls) is measured once."""
    stack: list[tuple[Node, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if node in _HEIGHTS:
            continue
        kids = children(node)
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in kids if c not in _HEIGHTS)
            continue
        levels, binders = 0, 0
        for c in kids:
            cl, cb = _HEIGHTS[c]
            levels, binders = max(levels, cl), max(binders, cb)
        _HEIGHTS[node] = (levels + 1, binders + isinstance(node, (Gen, Sum, Exists)))
    return _HEIGHTS[e]


_counter = itertools.count()


def fresh(base: str, avoid: Iterable[str] = (), counter: Iterator[int] | None = None) -> str:
    """A new identifier derived from `base`, not in `avoid`.

    Fresh names contain `_` plus a counter; the grammar accepts them, so printed programs
    re-parse.  `counter`: the caller's own (so that its names do not depend on what the
    process did before, SPEC 15); by default one shared by the process.
    """
    avoid = set(avoid)
    stem = base.split("_")[0] or "v"
    numbers = _counter if counter is None else counter
    while True:
        name = f"{stem}_{next(numbers)}"
        if name not in avoid:
            return name


def subst(e: Node, mapping: Mapping[str, Any]) -> Any:
    """Capture-avoiding simultaneous substitution.

    `mapping` sends program-variable names to `Expr`s and index/size-variable names to
    `Affine`s (or ints); relation names may be mapped to other relation names (`str`).
    Binders that would capture a free name of a replacement are renamed.
    """
    mapping = {k: v for k, v in mapping.items() if not _identity(k, v)}
    if not mapping:
        return e
    fv: set[str] = set()
    for v in mapping.values():
        if isinstance(v, Node):
            fv |= free_names(v)
        elif isinstance(v, str):
            fv.add(v)
    return _subst(e, dict(mapping), frozenset(fv), {})


def _identity(name: str, value: Any) -> bool:
    """`name -> name` (inlining a call whose arguments are the callee's own parameter names)."""
    if isinstance(value, str):
        return value == name
    if isinstance(value, Var):
        return value.name == name
    return value is Affine.var(name)


def _subst(e: Node, m: dict[str, Any], fv: frozenset[str], memo: dict[int, Node]) -> Any:
    hit = memo.get(id(e))
    if hit is not None:
        return hit
    if not (free_names(e) & m.keys()):
        out: Any = e
    elif isinstance(e, Var):
        out = m.get(e.name, e)
    elif isinstance(e, Affine):
        out = e.subst({k: v for k, v in m.items() if isinstance(v, (Affine, int))})
    elif isinstance(e, RelCall):
        name = m.get(e.name, e.name)
        out = RelCall(name if isinstance(name, str) else e.name,
                      tuple(_subst(a, m, fv, memo) for a in e.args), loc=e.loc)
    elif isinstance(e, (Gen, Sum, Exists, Extremum, Let)):
        out = _subst_binder(e, m, fv)
    else:
        out = map_fields(e, lambda c: _subst(c, m, fv, memo))
    memo[id(e)] = out
    return out


def _subst_binder(e: Node, m: dict[str, Any], fv: frozenset[str]) -> Node:
    name = binder_name(e)
    assert name is not None
    inner = {k: v for k, v in m.items() if k != name}
    if isinstance(e, Let):
        value = _subst(e.value, m, fv, {})
        body = e.body
    else:
        value = _subst(e.size, m, fv, {})
        body = e.body
    if name in fv:  # rename the binder to avoid capture
        new = fresh(name, fv | free_names(body) | inner.keys())
        ren: Any = Var(new) if isinstance(e, Let) else Affine.var(new)
        body = subst(body, {name: ren})
        name = new
    body = _subst(body, inner, fv, {}) if inner else body
    return type(e)(name, value, body, loc=e.loc)


def rename_index(e: Node, old: str, new: str) -> Node:
    return subst(e, {old: Affine.var(new)})


def pred_and(*ps: Pred) -> Pred:
    """Conjunction, dropping `true` and collapsing on `false`."""
    out: Pred | None = None
    for p in ps:
        if isinstance(p, PFalse):
            return p
        if isinstance(p, PTrue):
            continue
        out = p if out is None else And(out, p)
    return out if out is not None else PTrue()


def pred_or(*ps: Pred) -> Pred:
    out: Pred | None = None
    for p in ps:
        if isinstance(p, PTrue):
            return p
        if isinstance(p, PFalse):
            continue
        out = p if out is None else Or(out, p)
    return out if out is not None else PFalse()


def cmp_pred(op: str, a: Affine, b: Affine, loc: Loc | None = None) -> Pred:
    """`a op b` for any of `< <= == > >= !=` (the last three are sugar)."""
    if op in ("<", "<=", "=="):
        return Cmp(op, a, b, loc=loc)
    if op in (">", ">="):
        return Cmp("<" if op == ">" else "<=", b, a, loc=loc)
    if op == "!=":
        return Or(Cmp("<", a, b, loc=loc), Cmp("<", b, a, loc=loc), loc=loc)
    raise ValueError(f"bad comparison {op!r}")


def pred_not(p: Pred) -> Pred | None:
    """The negation of an index predicate, or None where the grammar cannot say it (a
    relation call or `exists` under `not`)."""
    if isinstance(p, PTrue):
        return PFalse()
    if isinstance(p, PFalse):
        return PTrue()
    if isinstance(p, Cmp):
        if p.op == "<":
            return Cmp("<=", p.rhs, p.lhs)
        if p.op == "<=":
            return Cmp("<", p.rhs, p.lhs)
        return Or(Cmp("<", p.lhs, p.rhs), Cmp("<", p.rhs, p.lhs))
    if isinstance(p, (And, Or)):
        a, b = pred_not(p.a), pred_not(p.b)
        if a is None or b is None:
            return None
        return Or(a, b) if isinstance(p, And) else And(a, b)
    return None


def in_range(a: Affine, n: Affine) -> Pred:
    """`0 <= a and a < n`."""
    return And(Cmp("<=", Affine.lit(0), a), Cmp("<", a, n))
