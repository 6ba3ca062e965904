"""Hypothesis strategies: random well-typed core programs with matching inputs.

Every pass, backend and proof of the project is tested on these programs (SPEC 10).

* `programs()` draws `(Def, args)`: a core `Def` (SPEC 2.1 constructs only, every one of
  them) and an argument dict in the format of docs/architecture.md.
* `differentiable_programs()` draws `(Def, args, wrt)` whose programs are smooth in their
  real inputs, with a non-empty list of real-valued parameters to differentiate.
* `theorem_programs()` draws `(Def, args)` shaped like the programs the cost theorems are
  stated for: several inputs of different shapes and a scalar (`x: R[N], y: R[M],
  A: R[N, M], s: R`), tensor statements `T0[k:M] = ...` read at shifted, negated and
  out-of-range indices, `let`s with dead bindings inside `sum`/`gen`, sums of
  loop-invariant scalars, nested sums.
* `scopes()`, `types()`, `expressions()`, `typed_expressions()`, `predicates()`,
  `indices()` build pieces (for rule instances in proofs/), `random_args()` makes inputs
  for any `Def`, `draw_examples()` draws a deterministic list of examples outside a test.

Well-typedness by construction: expressions are generated top-down from a wanted type in a
`Scope` (sizes with the values the inputs will have, typed variables, relations, index
variables with their ranges).

No NaN or inf by construction: every generated expression carries a bound on the magnitude
of its entries, computed from the concrete sizes and inputs in [-1, 1], and each construct
splits the budget it is given (default 1e3) among its operands, so values stay O(1)-O(1e3).
Functions with restricted domains (log, sqrt, recip, pow with a negative or fractional
exponent) are only applied to provably positive arguments (`1 + square(e)`, `exp(e)`,
`1 + softplus(e)`, ...) with a positive lower bound; exp and tan only see bounded arguments.
Zero extension (reads out of bounds give 0) keeps all of this sound: 0 is within any bound.

Sizes: size values are drawn first (0..max_size) and the program is generated for them:
affine sizes such as `N + 1`, `N + K - 1`, `N - 1` and literals appear only where they are
>= 0 (and <= max_size + 1), and the magnitude bounds use these values.  Evaluating a program
at other sizes is well-typed but may meet a negative dimension or larger values.

Builtins: SPEC 2.3's sixteen and the derivative helpers of `ast.BUILTINS` (`dtanh`,
`step`, ...) that derivative programs contain (`GENERATED_BUILTINS`); restrict with
`builtins=SURFACE_BUILTINS` or any subset.

Determinism: everything is drawn from hypothesis; numpy inputs come from a drawn seed.
Shrinking: every choice lists its simplest alternative first, so hypothesis shrinks toward
constants, variables, `true` predicates, few parameters and size 0.

Names: size parameters `N M K L`, value parameters `x y z w u v`, relations `E F G H`,
index variables `i j k l m` then `i1 j1 ...`, let-bound variables `t1 t2 ...`; all binders
of a program are distinct from each other and from the parameters.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tensorlang.ir.ast import (
    BUILTINS, EXTREMA, REAL, Access, Add, Affine, And, Call, Cmp, Const, Def, Exists, Expr, Gen,
    IndexValue, Iverson, Let, Mul, Or, Pair, Param, PFalse, Pred, Proj, PTrue, RelCall, Sum, TArr, TPair,
    TReal, TRel, TSize, Type, Var, free_vars, scalar_of, shape_of, tensor,
)
from tensorlang.check import quasi
from tensorlang.check.typecheck import TypeEnv
from tensorlang.ir.ast import IndexDiv, IndexRead, QuasiAffine, TIndex, quasi_add, quasi_term
from tensorlang.syntax.errors import ShapeError, TLError, TypeCheckError

__all__ = [
    "programs", "differentiable_programs", "theorem_programs", "scopes", "types", "expressions",
    "typed_expressions", "predicates", "indices", "random_args", "random_value",
    "draw_examples", "Scope", "Typed", "GenOptions", "is_real_tensor", "KINKED",
    "GENERATED_BUILTINS", "SMOOTH_BUILTINS", "SURFACE_BUILTINS",
]

SIZE_NAMES = ("N", "M", "K", "L")
VALUE_NAMES = ("x", "y", "z", "w", "u", "v")
REL_NAMES = ("E", "F", "G", "H")
INDEX_ARRAY_NAMES = ("P", "Q")
INDEX_BASES = ("i", "j", "k", "l", "m")

# Not differentiable everywhere (kinks, or steps: the derivative helpers of ast.BUILTINS).
KINKED = frozenset({"abs", "relu", "max", "min", "step", "sign", "ge", "gt", "sel_ge"})
# The builtins the generator knows the safe domain of, in shrinking preference (simplest
# first): SPEC 2.3's, then the derivative helpers that derivative programs call.  A builtin
# added to ast.BUILTINS later is not generated until it is listed here.
_BUILTIN_ORDER = ("square", "tanh", "sin", "cos", "exp", "log", "sqrt", "recip", "pow",
                  "sigmoid", "softplus", "tan", "abs", "relu", "max", "min",
                  "dtanh", "dsigmoid", "dtan", "step", "sign", "ge", "gt",
                  # `if c then a else b` / `where` with a value condition (SPEC 12)
                  "sel_ge")
GENERATED_BUILTINS = frozenset(_BUILTIN_ORDER) & frozenset(BUILTINS)
SURFACE_BUILTINS = frozenset(_BUILTIN_ORDER[:16])          # SPEC 2.3's list
SMOOTH_BUILTINS = GENERATED_BUILTINS - KINKED
_BOUNDED = {"tanh": 1.0, "sin": 1.0, "cos": 1.0, "sigmoid": 1.0, "dtanh": 1.0,
            "dsigmoid": 0.25, "step": 1.0, "sign": 1.0}    # |f(x)| <= bound for every x
_POS_EXPONENTS = (-1.0, 0.5, -0.5, 1.5, -2.0)               # pow on positive arguments only
_ANY_EXPONENTS = (2.0, 3.0)                                 # pow on any argument


@dataclass(frozen=True)
class GenOptions:
    """What `programs()` may generate.  All constructs are on by default."""

    max_size: int = 5                 # size parameters take values 0..max_size
    max_depth: int = 4                # nesting depth of expression constructs
    real_output_only: bool = False    # return type R
    no_pairs: bool = False            # no pair types anywhere (params, values, result)
    no_relations: bool = False        # no rel(...) parameters, hence no relation predicates
    # SPEC 12: reads `x[i // 2]`, `x[(i + 1) % N]`, `x[P[i]]` and comparisons `[i % 2 == 0]`,
    # lowered as the front end lowers them (`tensorlang.check.quasi`), and index-array
    # parameters `P: Z[n] in m` (on with relations: they are relations to every stage).
    quasi_indices: bool = True
    pair_tensors: bool = True         # tensors of pairs ([n](t1, t2)) as values and results
    # Projections of tensors of pairs, `(gen i:n. (a, b)).0` (P2's left side): well-defined
    # on the struct-of-arrays representation, but typecheck.type_of rejects them (Proj needs
    # a pair type), so they are off by default.
    soa_projections: bool = False
    lets: bool = True                 # let-bindings
    smooth: bool = False              # no kinked builtins (abs relu max min)
    builtins: frozenset[str] = GENERATED_BUILTINS
    budget: float = 1e3               # bound on the magnitude of every value
    max_params: int = 3               # value parameters (besides sizes and relations)
    max_rank: int = 3                 # rank of any generated tensor type
    max_sizes: int = 3                # size parameters
    # Shapes the simplifier shrinks a lot (what tripped the end-to-end cost bounds): a `let`
    # whose variable the body never reads, a `sum` whose body does not depend on its index,
    # and indices mixing sizes (`M - k - 1` with k over N, `k + 2`) that read out of range.
    # On in `theorem_programs()` and `differentiable_programs()`; off by default elsewhere so
    # the rule instances of proofs/ keep their distribution.
    dead_lets: bool = False
    invariant_sums: bool = False
    mixed_indices: bool = False
    # max/min reductions `max i:n. e` (SPEC 12; kinked, so not with `smooth`); their
    # derivative bounds have a term per visited point (semantics/bounds.py).
    extremes: bool = True
    # Indices and sizes as values (SPEC 12): `i`, `2*i - 1`, `N + 1` where a real is expected.
    index_values: bool = True

    def __post_init__(self) -> None:
        unknown = set(self.builtins) - GENERATED_BUILTINS
        if unknown:
            raise ValueError(f"cannot generate builtins {sorted(unknown)} (known: "
                             f"{', '.join(sorted(GENERATED_BUILTINS))})")
        if self.budget < 4:
            raise ValueError("budget must be at least 4")

    @property
    def fns(self) -> tuple[str, ...]:
        allowed = self.builtins - KINKED if self.smooth else self.builtins
        return tuple(f for f in _BUILTIN_ORDER if f in allowed)


def _options(**kw: Any) -> GenOptions:
    if "builtins" in kw:
        kw["builtins"] = frozenset(kw["builtins"])
    return GenOptions(**kw)


# ---------------------------------------------------------------------------------------------
# Scopes


@dataclass(frozen=True, eq=False)
class Scope:
    """What an expression may refer to, with the concrete sizes its inputs will have.

    `vars` maps a program variable to its type and a bound on the magnitude of its entries
    (parameters get 1: `random_args` draws inputs in [-1, 1]).
    """

    params: tuple[Param, ...] = ()
    sizes: Mapping[str, int] = field(default_factory=dict)
    vars: Mapping[str, tuple[Type, float]] = field(default_factory=dict)
    rels: Mapping[str, tuple[Affine, ...]] = field(default_factory=dict)
    indices: Mapping[str, Affine] = field(default_factory=dict)

    @staticmethod
    def of(params: Iterable[Param], sizes: Mapping[str, int], bound: float = 1.0) -> "Scope":
        """The scope of a def's body with parameters `params` and size values `sizes`."""
        sc = Scope()
        for p in params:
            sc = sc.with_param(p, sizes.get(p.name, 0), bound)
        return sc

    def with_param(self, p: Param, size_value: int = 0, bound: float = 1.0) -> "Scope":
        params = self.params + (p,)
        if isinstance(p.type, TSize):
            return replace(self, params=params, sizes={**self.sizes, p.name: int(size_value)})
        if isinstance(p.type, TRel):
            return replace(self, params=params, rels={**self.rels, p.name: p.type.sizes})
        return replace(self, params=params, vars={**self.vars, p.name: (p.type, bound)})

    def with_var(self, name: str, t: Type, bound: float) -> "Scope":
        return replace(self, vars={**self.vars, name: (t, float(bound))})

    def with_index(self, name: str, size: Affine | int) -> "Scope":
        size = size if isinstance(size, Affine) else Affine.lit(size)
        return replace(self, indices={**self.indices, name: size})

    def names(self) -> set[str]:
        return {p.name for p in self.params} | set(self.vars) | set(self.indices)

    def fresh(self, base: str) -> str:
        """`base`, or `base1`, `base2`, ... : the first not used in this scope."""
        taken = self.names()
        if base not in taken:
            return base
        return next(f"{base}{k}" for k in itertools.count(1) if f"{base}{k}" not in taken)

    def value(self, a: Affine) -> int:
        """The concrete value of a size expression (index variables are not sizes)."""
        return int(a.evaluate(self.sizes))

    def make_def(self, body: Expr, ret: Type | None = None, name: str = "f") -> Def:
        return Def(name, self.params, ret, body)

    def args(self, d: Def, seed: int | np.random.Generator | None = 0) -> dict[str, Any]:
        return random_args(d, self.sizes, seed)


class Typed(NamedTuple):
    expr: Expr
    type: Type
    bound: float


class _Names:
    """Deterministic fresh names, distinct from everything taken so far."""

    def __init__(self, taken: Iterable[str] = ()):
        self.taken = set(taken)
        self.n_index = 0
        self.n_let = 0

    def _take(self, name: str) -> str | None:
        if name in self.taken:
            return None
        self.taken.add(name)
        return name

    def index(self) -> str:
        while True:
            k, r = divmod(self.n_index, len(INDEX_BASES))
            self.n_index += 1
            name = self._take(INDEX_BASES[r] + (str(k) if k else ""))
            if name:
                return name

    def let(self) -> str:
        while True:
            self.n_let += 1
            name = self._take(f"t{self.n_let}")
            if name:
                return name


# ---------------------------------------------------------------------------------------------
# The generator


@lru_cache(maxsize=4096)
def _paths(u: Type, t: Type, soa: bool) -> tuple[tuple, ...]:
    """Ways to reach type `t` from a value of type `u` by projections and accesses.

    A step is `("proj", k)` or `("access", dims)` (one index per dim of `dims`); `soa`
    allows projections of tensors of pairs.  Shortest first.
    """
    out: list[tuple] = []
    if u is t:
        out.append(())
    if isinstance(u, TPair):
        for k, c in ((0, u.a), (1, u.b)):
            out += [(("proj", k),) + p for p in _paths(c, t, soa)]
    elif isinstance(u, TArr):
        dims, elem = shape_of(u), scalar_of(u)
        for m in range(1, len(dims) + 1):
            rest = tensor(dims[m:], elem)
            out += [(("access", dims[:m]),) + p for p in _paths(rest, t, soa)]
        if soa and isinstance(elem, TPair):
            for k, c in ((0, elem.a), (1, elem.b)):
                out += [(("proj", k),) + p for p in _paths(tensor(dims, c), t, soa)]
    return tuple(sorted(out, key=len))


def _rank(t: Type) -> int:
    return len(shape_of(t))


def _has_pair(t: Type) -> bool:
    if isinstance(t, TPair):
        return True
    return isinstance(t, TArr) and _has_pair(t.elem)


class _Gen:
    """Draws typed expressions; `draw` is hypothesis' draw function."""

    def __init__(self, draw: Callable, opts: GenOptions, names: _Names):
        self.draw = draw
        self.opts = opts
        self.names = names

    # -- drawing primitives (each shrinks toward its first alternative)

    def pick(self, seq: Sequence[Any]) -> Any:
        if len(seq) == 1:
            return seq[0]
        return seq[self.draw(st.integers(0, len(seq) - 1))]

    def coin(self, weight_true: int = 1, weight_false: int = 1) -> bool:
        return self.pick([False] * weight_false + [True] * weight_true)

    def int(self, lo: int, hi: int) -> int:
        return lo if lo >= hi else self.draw(st.integers(lo, hi))

    # -- sizes, indices, predicates

    def size_expr(self, sc: Scope, cap: float | None = None) -> Affine:
        """A size: a size parameter, `N + 1`, `N + K - 1`, `N - 1` or a literal."""
        limit = self.opts.max_size + 1 if cap is None else min(cap, self.opts.max_size + 1)
        names = list(sc.sizes)
        opts: list[Affine] = [Affine.var(n) for n in names] * 2 + [Affine.lit(2)]
        opts += [Affine.var(n) + 1 for n in names]
        opts += [Affine.var(a) + Affine.var(b) - 1 for a, b in zip(names, names[1:])]
        opts += [Affine.var(n) - 1 for n in names]
        opts += [Affine.lit(1), Affine.lit(3), Affine.lit(0)]
        keep = [a for a in opts if 0 <= sc.value(a) <= limit]
        return self.pick(keep)

    def index(self, sc: Scope, n: Affine) -> Affine:
        """An affine index into a dimension of size `n`; may be out of bounds."""
        ivs = list(sc.indices)
        if not ivs:
            form = self.pick(["const", "last", "size"])
        else:
            form = self.pick(["var"] * 5 + ["shift", "scaled", "sum2", "reverse", "const",
                                             "last", "diff"]
                             + ["reverse_other", "shift_far"] * self.opts.mixed_indices)
        if form == "const":
            return Affine.lit(self.int(0, 2))
        if form == "last":
            return n - 1
        if form == "size":
            return Affine.var(self.pick(list(sc.sizes))) if sc.sizes else Affine.lit(1)
        matching = [i for i in ivs if sc.indices[i] is n]
        pool = matching if matching and self.coin(3, 1) else ivs
        i = Affine.var(self.pick(pool))
        if form == "var":
            return i
        if form == "shift":
            return i + self.pick([1, -1, 2])
        if form == "scaled":
            return i * 2 + self.pick([0, 1])
        if form == "reverse":
            return n - 1 - i
        if form == "reverse_other":  # `y[M - k - 1]` with k over another size: may be < 0
            other = Affine.var(self.pick(list(sc.sizes))) if sc.sizes else n
            return other - 1 - i
        if form == "shift_far":      # `T0[k + 2]`: past the end for the last entries
            return i + self.pick([2, -2, 3])
        others = [v for v in ivs if v != i.as_var()] or ivs
        j = Affine.var(self.pick(others))
        return i + j if form == "sum2" else i - j

    def pred_affine(self, sc: Scope) -> Affine:
        ivs = list(sc.indices)
        forms = ["const", "size", "size_m1"]
        if ivs:
            forms = ["var"] * 3 + ["shift", "scaled", "sum2"] + forms
        form = self.pick(forms)
        if form == "const":
            return Affine.lit(self.int(0, 3))
        if form in ("size", "size_m1"):
            if not sc.sizes:
                return Affine.lit(self.int(0, 3))
            s = Affine.var(self.pick(list(sc.sizes)))
            return s if form == "size" else s - 1
        i = Affine.var(self.pick(ivs))
        if form == "var":
            return i
        if form == "shift":
            return i + self.pick([1, -1])
        if form == "scaled":
            return i * 2
        return i + Affine.var(self.pick(ivs))

    def pred(self, sc: Scope, depth: int) -> Pred:
        kinds = ["true", "cmp", "cmp", "cmp", "false"] + ["rel", "rel"] * bool(sc.rels)
        kinds += ["quasi"] * (self.opts.quasi_indices and bool(sc.indices))
        if depth > 0:
            kinds += ["and", "or", "exists", "exists"]
        kind = self.pick(kinds)
        if kind == "true":
            return PTrue()
        if kind == "false":
            return PFalse()
        if kind == "cmp":
            return Cmp(self.pick(Cmp.OPS), self.pred_affine(sc), self.pred_affine(sc))
        if kind == "quasi":  # `[i % 2 == 0]`, `[i // 2 < j]`, `[P[i] == j]`, lowered
            cmp = Cmp(self.pick(Cmp.OPS), self.quasi_index(sc, Affine.lit(0)),
                      self.pred_affine(sc))
            try:
                return quasi.lower_pred(cmp, type_env(sc), self.fresh_index, _ignore_extent,
                                        None)
            except TypeCheckError:  # `% size` the ranges do not bound
                return PTrue()
        if kind == "rel":
            name = self.pick(list(sc.rels))
            return RelCall(name, tuple(self.index(sc, n) for n in sc.rels[name]))
        if kind in ("and", "or"):
            a, b = self.pred(sc, depth - 1), self.pred(sc, depth - 1)
            return And(a, b) if kind == "and" else Or(a, b)
        t = self.names.index()
        n = self.size_expr(sc)
        inner = sc.with_index(t, n)
        if sc.indices and self.coin(2, 1):  # integrality guard, as the index solver makes them
            body: Pred = Cmp("==", self.pred_affine(sc), Affine.var(t) * 2 + self.pick([0, 1]))
        else:
            body = self.pred(inner, depth - 1)
        return Exists(t, n, body)

    # -- types

    def type_(self, sc: Scope, rank: int = 2, pairs: int = 1) -> Type:
        """A value type with tensors of rank <= `rank` and pair nesting <= `pairs`."""
        o = self.opts
        kinds = ["real", "real", "tensor", "tensor"]
        if pairs > 0 and not o.no_pairs:
            kinds.append("pair")
            if o.pair_tensors and rank >= 1:
                kinds.append("pair_tensor")
        kind = self.pick(kinds)
        if kind == "real" or (kind == "tensor" and rank < 1):
            return REAL
        if kind == "tensor":
            return tensor([self.size_expr(sc) for _ in range(self.int(1, min(rank, 2)))])
        if kind == "pair":
            return TPair(self.type_(sc, rank, pairs - 1), self.type_(sc, rank, pairs - 1))
        return tensor([self.size_expr(sc)],
                      TPair(self.type_(sc, rank - 1, 0), self.type_(sc, rank - 1, 0)))

    def param_type(self, sc: Scope, real_valued: bool = False) -> Type:
        o = self.opts
        kinds = ["real", "tensor", "tensor"]
        if not real_valued and not o.no_pairs:
            kinds.append("pair")
        kind = self.pick(kinds)
        if kind == "real":
            return REAL
        if kind == "tensor":
            r = self.pick([1, 2, 1, 2, 3][: max(1, min(5, 2 * o.max_rank - 1))])
            return tensor([self.size_expr(sc) for _ in range(min(r, o.max_rank))])
        return TPair(self.type_(sc, 2, 0), self.type_(sc, 2, 1))

    def ret_type(self, sc: Scope) -> Type:
        o = self.opts
        if o.real_output_only:
            return REAL
        kinds = ["real", "tensor", "real", "tensor", "real", "tensor"]
        if not o.no_pairs:
            kinds.append("pair")
            if o.pair_tensors:
                kinds.append("pair_tensor")
        kind = self.pick(kinds)
        if kind == "real":
            return REAL
        if kind == "tensor":
            return tensor([self.size_expr(sc) for _ in range(self.int(1, min(2, o.max_rank)))])
        if kind == "pair":
            return TPair(self.type_(sc, 2, 0), self.type_(sc, 2, 1))
        return tensor([self.size_expr(sc)], TPair(REAL, self.type_(sc, 1, 0)))

    def scope(self, need_real: bool = False) -> Scope:
        o = self.opts
        sc = Scope()
        for name in SIZE_NAMES[: self.int(0, min(o.max_sizes, len(SIZE_NAMES)))]:
            sc = sc.with_param(Param(name, TSize()), self.int(0, o.max_size))
        for k in range(self.int(1, min(o.max_params, len(VALUE_NAMES)))):
            t = self.param_type(sc, real_valued=need_real and k == 0)
            sc = sc.with_param(Param(VALUE_NAMES[k], t))
        if not o.no_relations:
            for name in REL_NAMES[: self.int(0, 2)]:
                dims = tuple(self.size_expr(sc) for _ in range(self.int(1, 2)))
                sc = sc.with_param(Param(name, TRel(dims)))
            if o.quasi_indices:
                for name in INDEX_ARRAY_NAMES[: self.pick([0, 0, 1, 2])]:
                    dims = tuple(self.size_expr(sc) for _ in range(self.pick([1, 1, 2])))
                    bound = self.size_expr(sc)
                    if sc.value(bound) == 0:  # entries need a non-empty range to lie in
                        bound = bound + 1
                    sc = sc.with_param(Param(name, TIndex(dims + (bound,))))
        self.names.taken |= sc.names() | set(sc.rels)
        return sc

    # -- expressions

    def var_paths(self, t: Type, sc: Scope, budget: float) -> list[tuple[str, tuple]]:
        # Latest bound first: let-bound variables come before parameters so they get used.
        out = []
        for name in reversed(list(sc.vars)):
            u, bound = sc.vars[name]
            if bound <= budget:
                out += [(name, p) for p in _paths(u, t, self.opts.soa_projections)]
        return out

    def expr(self, t: Type, sc: Scope, depth: int, budget: float,
             leaf: bool = True) -> tuple[Expr, float]:
        """An expression of type `t` in `sc` whose entries are bounded by `budget` (>= 1).

        `leaf=False` (a def's body) excludes a constant or a bare variable when depth > 0.
        """
        o = self.opts
        has_var = bool(self.var_paths(t, sc, budget))
        var = ["var"] * (2 if depth > 0 else 3) if has_var and (leaf or depth <= 0) else []
        if isinstance(t, TReal):
            kinds = ["const"] * (leaf or depth <= 0) + var
            if depth > 0:
                kinds += ["mul", "sum", "call", "mul", "sum", "iverson", "call", "mul", "sum",
                          "access", "call", "iverson", "mul", "call"]
                kinds += ["extreme"] if o.extremes and not o.smooth else []
                kinds += ["add", "add", "add"] if budget >= 2 else []
                kinds += ["quasi_access"] * (2 * (o.quasi_indices and bool(sc.indices)))
            if o.index_values and (sc.indices or sc.sizes):
                kinds += ["index_value"] * (depth <= 0)  # a leaf, like a constant
        elif isinstance(t, TArr):
            kinds = ["gen"] + var
            if depth > 0:
                kinds += ["gen", "iverson"]
        else:
            kinds = ["pair"] + var
            if depth > 0:
                kinds += ["pair", "iverson"]
        if depth > 0:
            if o.lets:
                kinds += ["let"] * (3 if isinstance(t, TReal) else 1)
            if not o.no_pairs:
                kinds += ["proj"]
            if not isinstance(t, TReal) and _rank(t) < o.max_rank and \
                    (o.pair_tensors or not _has_pair(t)):
                kinds += ["access"]
        kind = self.pick(kinds)
        return getattr(self, "_" + kind)(t, sc, depth, budget)

    def nest(self, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        """A scalar built as a loop nest: `sum`s (half of them loop-invariant), `let`s (half
        of them dead) and `+` of nests around ordinary expressions -- the work the
        simplifier hoists out of loops or deletes, and the Tensor SSA keeps."""
        reads = ["read"] * bool(self.var_paths(REAL, sc, budget))
        # Loops first: this is what hypothesis shrinks toward, and what the nest is for.
        kind = self.pick(["sum"] + reads + ["let", "add", "expr", "sum", "sum"] if depth > 0
                         else reads + ["expr"])
        if kind == "expr":
            return self.expr(REAL, sc, depth, budget)
        if kind == "read":  # an input or statement entry, at any index (`x[0]`, `T0[k - 2]`)
            return self._var(REAL, sc, depth, budget)
        if kind == "add":
            a, ba = self.nest(sc, depth - 1, budget / 2)
            b, bb = self.nest(sc, depth - 1, budget / 2)
            return Add(a, b), ba + bb
        if kind == "sum":
            n = self.size_expr(sc, cap=budget)
            v = max(sc.value(n), 1)
            i = self.names.index()
            inner = sc if self.coin(3, 2) else sc.with_index(i, n)
            body, b = self.nest(inner, depth - 1, budget / v)
            return Sum(i, n, body), b * v
        value, bv = self.nest(sc, depth - 1, budget)
        name = self.names.let()
        dead = self.coin()
        body, b = self.nest(sc if dead else sc.with_var(name, REAL, bv), depth - 1, budget)
        return Let(name, value, body), b

    def _const(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        lim = min(8, int(4 * budget))
        c = self.int(-lim, lim) / 4  # quarters: exact in binary and in printed decimal
        return Const(c), abs(c)

    def _index_value(self, t: Type, sc: Scope, depth: int, budget: float
                     ) -> tuple[Expr, float]:
        """An index or size used as a real (SPEC 12): `c * v + k`, with its magnitude bound
        (a constant where that exceeds the budget)."""
        names = list(sc.indices) + list(sc.sizes)
        v = self.pick(names)
        top = sc.value(sc.indices[v]) - 1 if v in sc.indices else sc.sizes[v]
        c, k = self.pick([1, 2, -1]), self.pick([0, 1, -1])
        bound = abs(c) * max(top, 0) + abs(k)
        if bound > budget:
            return self._const(t, sc, depth, budget)
        return IndexValue(Affine.var(v) * c + k), float(bound)

    def _var(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        name, path = self.pick(self.var_paths(t, sc, budget))
        e: Expr = Var(name)
        for step, arg in path:
            if step == "proj":
                e = Proj(e, arg)
                continue
            idx = [self.index(sc, n) for n in arg]
            if len(idx) >= 2 and self.coin(1, 3):  # e[a][b], a G4 instance
                cut = self.int(1, len(idx) - 1)
                e = Access(Access(e, idx[:cut]), idx[cut:])
            else:
                e = Access(e, idx)
        return e, sc.vars[name][1]

    def _add(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        a, ba = self.expr(REAL, sc, depth - 1, budget - 1)
        b, bb = self.expr(REAL, sc, depth - 1, budget - ba)
        return Add(a, b), ba + bb

    def _mul(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        a, ba = self.expr(REAL, sc, depth - 1, budget)
        b, bb = self.expr(REAL, sc, depth - 1, budget / max(ba, 1.0))
        if self.coin():
            a, b = b, a
        return Mul(a, b), ba * bb

    def _sum(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        n = self.size_expr(sc, cap=budget)
        v = max(sc.value(n), 1)
        i = self.names.index()
        # A loop-invariant body (`sum k:M. s`) is drawn in the scope without the index.
        invariant = self.opts.invariant_sums and self.coin(1, 3)
        inner = sc if invariant else sc.with_index(i, n)
        body, b = self.expr(REAL, inner, depth - 1, budget / v)
        return Sum(i, n, body), b * v

    def _extreme(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        """`[0 < n] * max i:n. e` (or min): bounded like its body (the guard keeps the
        empty range's -inf out of generated values; tests cover it separately)."""
        n = self.size_expr(sc, cap=budget)
        i = self.names.index()
        body, b = self.expr(REAL, sc.with_index(i, n), depth - 1, budget)
        red = EXTREMA[self.pick(["max", "min"])](i, n, body)
        return (red if n.is_const() and n.const > 0 else
                Iverson(Cmp("<", Affine.lit(0), n), red)), b

    def _gen(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        assert isinstance(t, TArr)
        # Gen and Pair are dictated by the type, which shrinks: they use up no depth, so
        # the scalars inside a tensor-valued result are as rich as a scalar result.
        i = self.names.index()
        body, b = self.expr(t.elem, sc.with_index(i, t.size), depth, budget)
        return Gen(i, t.size, body), b

    def _pair(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        assert isinstance(t, TPair)
        a, ba = self.expr(t.a, sc, depth, budget)
        b, bb = self.expr(t.b, sc, depth, budget)
        return Pair(a, b), max(ba, bb)

    def _iverson(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        p = self.pred(sc, min(depth, 2))
        e, b = self.expr(t, sc, depth - 1, budget)
        return Iverson(p, e), b

    def _let(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        # Often bind a value the body can read (of type t, or a tensor of t) so lets get used.
        kinds = ["random", "same"] + ["tensor"] * (_rank(t) < self.opts.max_rank and
                                                   (self.opts.pair_tensors or not _has_pair(t)))
        kinds += ["dead"] * self.opts.dead_lets
        kind = self.pick(kinds)
        if kind == "dead":  # a binding the body never reads (it is not in the body's scope)
            u = self.type_(sc, min(2, self.opts.max_rank))
            value, _ = self.expr(u, sc, depth - 1, budget)
            body, b = self.expr(t, sc, depth - 1, budget)
            return Let(self.names.let(), value, body), b
        if kind == "random":
            u = self.type_(sc, min(2, self.opts.max_rank))
        else:
            u = t if kind == "same" else TArr(self.size_expr(sc), t)
        value, bv = self.expr(u, sc, depth - 1, budget)
        name = self.names.let()
        body, b = self.expr(t, sc.with_var(name, u, bv), depth - 1, budget)
        return Let(name, value, body), b

    def _access(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        k = self.pick([1, 1, 2][: 3 if self.opts.max_rank - _rank(t) >= 2 else 2])
        dims = [self.size_expr(sc) for _ in range(k)]
        inner, b = self.expr(tensor(dims, t), sc, depth - 1, budget)
        return Access(inner, [self.index(sc, n) for n in dims]), b

    def _quasi_access(self, t: Type, sc: Scope, depth: int, budget: float
                      ) -> tuple[Expr, float]:
        """`e[a]` with a quasi-affine index a (SPEC 12), lowered as the front end does."""
        n = self.size_expr(sc)
        inner, b = self.expr(tensor([n]), sc, depth - 1, budget)
        env = type_env(sc)
        index = self.quasi_index(sc, n)
        try:
            cases = quasi.lower_indices((index,), env, self.fresh_index, _ignore_extent, None,
                                        (n,))
        except TypeCheckError:  # `% size` the ranges do not bound: a constant divisor
            index = quasi_term(IndexDiv("%", Affine.var(self.pick(list(sc.indices))), 2))
            cases = quasi.lower_indices((index,), env, self.fresh_index, _ignore_extent, None,
                                        (n,))
        return quasi.lowered_access(lambda values, _: Access(inner, values), cases, env,
                                    None), b

    def fresh_index(self, base: str) -> str:
        return self.names.index()

    def quasi_index(self, sc: Scope, n: Affine) -> Affine | QuasiAffine:
        """An index with `//`, `%` or an index-array read (sc must have index variables)."""
        i = Affine.var(self.pick(list(sc.indices)))
        arrays = [p for p in sc.params if isinstance(p.type, TIndex)]
        form = self.pick(["div", "mod", "mod_size", "shifted_div", "mixed"]
                         + ["array", "array"] * bool(arrays))
        c = Affine.lit(self.pick([2, 3]))
        if form == "div":
            return quasi_term(IndexDiv("//", i, c))
        if form == "mod":
            return quasi_term(IndexDiv("%", i + self.pick([0, 1]), c))
        if form == "shifted_div":
            return quasi_term(IndexDiv("//", i - self.pick([1, 2]), c))
        if form == "mixed":  # i // c + i % c, nested forms share the lowering
            return quasi_add(quasi_term(IndexDiv("//", i, c)), quasi_term(IndexDiv("%", i, c)))
        if form == "mod_size":  # `(i + 1) % N` with i:N (bounded, SPEC 12); else `% 2`
            size = sc.indices[i.as_var()]
            den = size if not size.is_const() else c
            return quasi_term(IndexDiv("%", i + self.pick([1, 0, -1]), den))
        p = self.pick(arrays)
        assert isinstance(p.type, TIndex)
        return quasi_term(IndexRead(p.name, tuple(self.index(sc, d) for d in p.type.shape)))

    def _proj(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        other = self.type_(sc, 1, 0)
        k = self.pick([0, 1])
        if isinstance(t, TArr) and self.opts.soa_projections and self.coin(1, 2):
            dims, elem = shape_of(t), scalar_of(t)
            cut = self.int(1, len(dims))
            rest = tensor(dims[cut:], elem)
            inner_t = tensor(dims[:cut], TPair(rest, other) if k == 0 else TPair(other, rest))
        else:
            inner_t = TPair(t, other) if k == 0 else TPair(other, t)
        inner, b = self.expr(inner_t, sc, depth - 1, budget)
        return Proj(inner, k), b

    # -- black-box functions on safe domains

    def _call(self, t: Type, sc: Scope, depth: int, budget: float) -> tuple[Expr, float]:
        fns = [f for f in self.opts.fns if self._feasible(f, budget)]
        if not fns:
            return self._const(t, sc, depth, budget)
        fn = self.pick(fns)
        d = depth - 1
        if fn in _BOUNDED:
            a, _ = self.expr(REAL, sc, d, budget)
            return Call(fn, (a,), ()), _BOUNDED[fn]
        if fn in ("ge", "gt"):
            a, _ = self.expr(REAL, sc, d, budget)
            b, _ = self.expr(REAL, sc, d, budget)
            return Call(fn, (a, b), ()), 1.0
        if fn in ("tan", "dtan"):  # only on [-1, 1], far from the poles
            a, ba = self.expr(REAL, sc, d, 1.0)
            return Call(fn, (a,), ()), math.tan(ba) if fn == "tan" else 1 + math.tan(ba) ** 2
        if fn == "exp":
            a, ba = self.expr(REAL, sc, d, min(2.0, math.log(budget)))
            return Call(fn, (a,), ()), math.exp(ba)
        if fn == "square":
            a, ba = self.expr(REAL, sc, d, math.sqrt(budget))
            return Call(fn, (a,), ()), ba * ba
        if fn in ("abs", "relu"):
            a, ba = self.expr(REAL, sc, d, budget)
            return Call(fn, (a,), ()), ba
        if fn == "softplus":
            a, ba = self.expr(REAL, sc, d, budget - 1)
            return Call(fn, (a,), ()), ba + 1
        if fn in ("max", "min"):
            a, ba = self.expr(REAL, sc, d, budget)
            b, bb = self.expr(REAL, sc, d, budget)
            return Call(fn, (a, b), ()), max(ba, bb)
        if fn == "sel_ge":   # `if a >= b then x else y`
            a, _ = self.expr(REAL, sc, d, budget)
            b, _ = self.expr(REAL, sc, d, budget)
            x, bx = self.expr(REAL, sc, d, budget)
            y, by = self.expr(REAL, sc, d, budget)
            return Call(fn, (a, b, x, y), ()), max(bx, by)
        if fn == "log":
            a, lo, hi = self.positive(sc, d, math.exp(-budget), math.exp(min(budget, 30.0)))
            return Call(fn, (a,), ()), max(abs(math.log(lo)), abs(math.log(hi)))
        if fn == "sqrt":
            a, lo, hi = self.positive(sc, d, 0.0, budget * budget)
            return Call(fn, (a,), ()), math.sqrt(hi)
        if fn == "recip":
            a, lo, hi = self.positive(sc, d, 1.0 / budget, math.inf)
            return Call(fn, (a,), ()), 1.0 / lo
        # pow
        c = self.pick(_ANY_EXPONENTS + _POS_EXPONENTS)
        if c in _ANY_EXPONENTS:
            a, ba = self.expr(REAL, sc, d, budget ** (1.0 / c))
            return Call(fn, (a,), (c,)), ba ** c
        if c < 0:
            a, lo, hi = self.positive(sc, d, budget ** (1.0 / c), math.inf)
        else:
            a, lo, hi = self.positive(sc, d, 0.0, budget ** (1.0 / c))
        return Call(fn, (a,), (c,)), max(lo ** c, hi ** c)

    def _feasible(self, fn: str, budget: float) -> bool:
        if fn == "tan":
            return budget >= math.tan(1.0)
        if fn == "dtan":
            return budget >= 1 + math.tan(1.0) ** 2
        if fn == "exp":
            return budget >= math.e
        if fn == "softplus":
            return budget >= 2
        return True

    def positive(self, sc: Scope, depth: int, lo_min: float,
                 hi_max: float) -> tuple[Expr, float, float]:
        """A provably positive expression with bounds lo_min <= lo <= value <= hi <= hi_max.

        Callers keep lo_min <= 1 <= hi_max, so the constant 1 is always possible.
        """
        fns = set(self.opts.fns)
        kinds = ["const"]
        if "square" in fns and hi_max >= 2:
            kinds.append("one_plus_square")
        if "exp" in fns and min(2.0, math.log(hi_max), -math.log(max(lo_min, 1e-300))) >= 1:
            kinds.append("exp")
        if "softplus" in fns and hi_max >= 3:
            kinds.append("one_plus_softplus")
        if "sigmoid" in fns and hi_max >= 2:
            kinds.append("one_plus_sigmoid")
        if "abs" in fns and hi_max >= 2:
            kinds.append("one_plus_abs")
        kind = self.pick(kinds)
        one = Const(1.0)
        if kind == "const":
            c = self.pick([c for c in (1.0, 2.0, 0.5, 3.0) if lo_min <= c <= hi_max])
            return Const(c), c, c
        if kind == "one_plus_square":
            a, ba = self.expr(REAL, sc, depth, math.sqrt(min(hi_max - 1, 1e6)))
            return Add(one, Call("square", (a,), ())), 1.0, 1.0 + ba * ba
        if kind == "exp":
            m = min(2.0, math.log(hi_max), -math.log(max(lo_min, 1e-300)))
            a, ba = self.expr(REAL, sc, depth, m)
            return Call("exp", (a,), ()), math.exp(-ba), math.exp(ba)
        if kind == "one_plus_softplus":
            a, ba = self.expr(REAL, sc, depth, min(hi_max - 2, 1e6))
            return Add(one, Call("softplus", (a,), ())), 1.0, 2.0 + ba
        if kind == "one_plus_sigmoid":
            a, _ = self.expr(REAL, sc, depth, 1e3)
            return Add(one, Call("sigmoid", (a,), ())), 1.0, 2.0
        a, ba = self.expr(REAL, sc, depth, min(hi_max - 1, 1e6))
        return Add(one, Call("abs", (a,), ())), 1.0, 1.0 + ba


# ---------------------------------------------------------------------------------------------
# Public strategies


def _draw_program(draw: Callable, opts: GenOptions,
                  need_real: bool = False) -> tuple[Def, dict[str, Any], Scope]:
    g = _Gen(draw, opts, _Names())
    sc = g.scope(need_real=need_real)
    ret = g.ret_type(sc)
    body, _ = g.expr(ret, sc, opts.max_depth, opts.budget, leaf=False)
    d = Def("f", sc.params, ret, body)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return d, random_args(d, sc.sizes, np.random.default_rng(seed)), sc


def programs(max_size: int = 5, max_depth: int = 4, **options: Any) -> st.SearchStrategy:
    """Random well-typed core programs with matching inputs: `(Def, args)`.

    Options (see `GenOptions`): `real_output_only`, `no_pairs`, `no_relations`,
    `pair_tensors`, `soa_projections`, `lets`, `smooth`, `builtins` (allowed set),
    `budget`, `max_params`, `max_rank`, `max_sizes`.  The def is named `f` and declares its
    return type; `args` has every parameter (sizes 0..max_size).
    """
    opts = _options(max_size=max_size, max_depth=max_depth, **options)

    @st.composite
    def strategy(draw: Callable) -> tuple[Def, dict[str, Any]]:
        d, args, _ = _draw_program(draw, opts)
        return d, args

    return strategy()


def differentiable_programs(max_size: int = 4, max_depth: int = 4,
                            **options: Any) -> st.SearchStrategy:
    """`(Def, args, wrt)`: programs smooth in their real inputs, `wrt` a non-empty list of
    names of R or R[...] parameters (the first value parameter always is one).

    No kinked builtins (`KINKED`: abs relu max min and the step-like helpers); the others
    are applied where they are smooth (log, sqrt, recip, negative powers on arguments with a
    positive lower bound, tan on [-1, 1]).  Iverson brackets depend only on indices, so they
    are no kinks.  Values are bounded by 1e2 by default (finite differences stay accurate)."""
    options.setdefault("budget", 1e2)
    for shape in ("dead_lets", "invariant_sums", "mixed_indices"):
        options.setdefault(shape, True)
    opts = _options(max_size=max_size, max_depth=max_depth, smooth=True, **options)

    @st.composite
    def strategy(draw: Callable) -> tuple[Def, dict[str, Any], list[str]]:
        d, args, _ = _draw_program(draw, opts, need_real=True)
        real = [p.name for p in d.params if is_real_tensor(p.type)]
        # Prefer inputs the body reads: an unread input has a zero derivative, a weak test.
        read = [n for n in real if n in free_vars(d.body)] or real[:1]
        chosen = [n for n in read if draw(st.booleans())]
        return d, args, chosen or read[:1]

    return strategy()


# The signature of `theorem_programs`: inputs of different shapes and a scalar.
THEOREM_SIZES = ("N", "M")
THEOREM_INPUTS = (("x", ("N",)), ("y", ("M",)), ("A", ("N", "M")), ("s", ()))


def theorem_programs(max_size: int = 5, max_depth: int = 3, max_statements: int = 2,
                     **options: Any) -> st.SearchStrategy:
    """`(Def, args)` for the cost theorems: `f(N, M, x: R[N], y: R[M], A: R[N, M], s: R)`
    (sizes 2..max_size) made of up to `max_statements` tensor statements
    `T0[k:N or M] = <scalar>` and a returned `R`, `R[N]` or `R[M]` expression.

    Every construct of `programs()` may appear (no pairs or relations: the signature is
    fixed), with the shapes that make the simplifier gain most over the Tensor SSA: dead
    `let`s inside `sum`/`gen`, sums of loop-invariant scalars (`sum k:M. s`), nested sums,
    and the statements read at shifted, negated and out-of-range indices (`T0[k1 - k2]`,
    `T0[k + 2]`, `y[M - k - 1]`).  Differentiate in every input: all four are real."""
    for shape in ("dead_lets", "invariant_sums", "mixed_indices"):
        options.setdefault(shape, True)
    opts = _options(max_size=max_size, max_depth=max_depth, no_pairs=True, no_relations=True,
                    **options)

    @st.composite
    def strategy(draw: Callable) -> tuple[Def, dict[str, Any]]:
        g = _Gen(draw, opts, _Names())
        sc = Scope()
        for name in THEOREM_SIZES:
            sc = sc.with_param(Param(name, TSize()), g.int(2, max(2, opts.max_size)))
        for name, dims in THEOREM_INPUTS:
            sc = sc.with_param(Param(name, tensor([Affine.var(n) for n in dims])))
        g.names.taken |= sc.names()
        statements: list[tuple[str, Expr]] = []
        for k in range(g.int(0, max_statements)):
            name = f"T{k}"
            g.names.taken.add(name)
            n = Affine.var(g.pick(THEOREM_SIZES))
            i = g.names.index()
            elem, bound = g.nest(sc.with_index(i, n), opts.max_depth, opts.budget)
            statements.append((name, Gen(i, n, elem)))
            sc = sc.with_var(name, tensor([n]), bound)
        dims = g.pick([["N"], [], ["M"]])
        indices = [g.names.index() for _ in dims]
        inner = sc
        for i, n in zip(indices, dims):
            inner = inner.with_index(i, Affine.var(n))
        body, _ = g.nest(inner, opts.max_depth + 1, opts.budget)
        for i, n in reversed(list(zip(indices, dims))):
            body = Gen(i, Affine.var(n), body)
        ret = tensor([Affine.var(n) for n in dims])
        for name, value in reversed(statements):
            body = Let(name, value, body)
        d = Def("f", sc.params, ret, body)
        seed = draw(st.integers(0, 2 ** 32 - 1))
        return d, random_args(d, sc.sizes, np.random.default_rng(seed))

    return strategy()


def is_real_tensor(t: Type) -> bool:
    """R or R[...] (the `wrt` parameters of `differentiable_programs`)."""
    return isinstance(scalar_of(t), TReal)


def scopes(max_size: int = 5, **options: Any) -> st.SearchStrategy:
    """Random parameter lists (sizes, values, relations) with concrete size values."""
    opts = _options(max_size=max_size, **options)
    return st.composite(lambda draw: _Gen(draw, opts, _Names()).scope())()


def types(scope: Scope, rank: int = 2, pairs: int = 1, **options: Any) -> st.SearchStrategy:
    """Value types over the sizes of `scope`."""
    opts = _options(**options)
    return st.composite(
        lambda draw: _Gen(draw, opts, _Names(scope.names())).type_(scope, rank, pairs))()


def typed_expressions(scope: Scope, type: Type | None = None, max_depth: int = 3,
                      budget: float | None = None, **options: Any) -> st.SearchStrategy:
    """`Typed(expr, type, bound)`: an expression of `type` (random if None) in `scope`,
    whose entries are bounded by `bound` when the scope's variables obey their bounds."""
    opts = _options(max_depth=max_depth, **options)
    b = opts.budget if budget is None else budget
    if b < 1:
        raise ValueError("budget must be at least 1")

    @st.composite
    def strategy(draw: Callable) -> Typed:
        g = _Gen(draw, opts, _Names(scope.names() | set(scope.rels)))
        t = type if type is not None else g.type_(scope)
        e, bound = g.expr(t, scope, max_depth, b)
        return Typed(e, t, bound)

    return strategy()


def expressions(scope: Scope, type: Type | None = None, max_depth: int = 3,
                **options: Any) -> st.SearchStrategy:
    """An expression of `type` (random if None) in `scope`."""
    return typed_expressions(scope, type, max_depth, **options).map(lambda te: te.expr)


def predicates(scope: Scope, max_depth: int = 2, **options: Any) -> st.SearchStrategy:
    """A predicate over the index variables, sizes and relations of `scope`."""
    opts = _options(**options)
    return st.composite(lambda draw: _Gen(draw, opts, _Names(scope.names() | set(scope.rels)))
                        .pred(scope, max_depth))()


def indices(scope: Scope, size: Affine | int, **options: Any) -> st.SearchStrategy:
    """An affine index into a dimension of `size` (`i`, `i + 1`, `2*i`, `n - 1 - i`, ...)."""
    opts = _options(**options)
    n = size if isinstance(size, Affine) else Affine.lit(size)
    return st.composite(lambda draw: _Gen(draw, opts, _Names()).index(scope, n))()


# ---------------------------------------------------------------------------------------------
# Inputs


def random_args(d: Def, sizes: Mapping[str, int],
                rng: np.random.Generator | int | None = None, *, low: float = -1.0,
                high: float = 1.0, density: float = 0.4,
                rel_encoding: str = "mixed") -> dict[str, Any]:
    """Random inputs for `d` in the argument format of docs/architecture.md.

    `sizes` gives every size parameter; reals are uniform in [low, high]; relations hold
    each tuple with probability `density`, as a boolean array (`rel_encoding="bool"`), a
    `(k, arity)` coordinate array (`"coo"`) or either at random (`"mixed"`).
    """
    if rel_encoding not in ("bool", "coo", "mixed"):
        raise ValueError(f"rel_encoding must be bool, coo or mixed, not {rel_encoding!r}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    size_env: dict[str, int] = {}
    for p in d.params:
        if isinstance(p.type, TSize):
            if p.name not in sizes:
                raise TLError(f"no value given for size parameter {p.name} of {d.name}", d.loc)
            v = int(sizes[p.name])
            if v < 0:
                raise ShapeError(f"size {p.name} = {v} is negative", d.loc)
            size_env[p.name] = v
    args: dict[str, Any] = {}
    for p in d.params:
        if isinstance(p.type, TSize):
            args[p.name] = size_env[p.name]
        else:
            args[p.name] = random_value(p.type, size_env, rng, low=low, high=high,
                                        density=density, rel_encoding=rel_encoding,
                                        what=f"parameter {p.name}")
    return args


def random_value(t: Type, sizes: Mapping[str, int], rng: np.random.Generator, *,
                 low: float = -1.0, high: float = 1.0, density: float = 0.4,
                 rel_encoding: str = "mixed", what: str = "value") -> Any:
    """A random value of type `t` (tensors of pairs as pairs of tensors)."""
    kw = dict(low=low, high=high, density=density, rel_encoding=rel_encoding, what=what)
    if isinstance(t, TReal):
        return float(rng.uniform(low, high))
    if isinstance(t, TPair):
        return (random_value(t.a, sizes, rng, **kw), random_value(t.b, sizes, rng, **kw))
    if isinstance(t, TArr):
        dims, elem = shape_of(t), scalar_of(t)
        if isinstance(elem, TPair):  # struct of arrays
            return (random_value(tensor(dims, elem.a), sizes, rng, **kw),
                    random_value(tensor(dims, elem.b), sizes, rng, **kw))
        return rng.uniform(low, high, size=_shape(dims, sizes, what)).astype(np.float64)
    if isinstance(t, TIndex):  # the integer array (every stage takes it, SPEC 12)
        return random_index_array(t, sizes, rng, what)
    if isinstance(t, TRel):
        mask = rng.random(_shape(t.sizes, sizes, what)) < density
        enc = rel_encoding if rel_encoding != "mixed" else ("bool", "coo")[int(rng.integers(2))]
        return mask if enc == "bool" else np.argwhere(mask).astype(np.int64)
    raise TLError(f"cannot make a random value of type {t!r} for {what}")


def random_index_array(t: TIndex, sizes: Mapping[str, int], rng: np.random.Generator,
                       what: str = "value") -> np.ndarray:
    """Entries uniform in the range of index array type `t` (the argument users pass)."""
    shape = _shape(t.sizes, sizes, what)
    if shape[-1] == 0 and math.prod(shape[:-1]) > 0:
        raise ShapeError(f"{what}: an index array into an empty range must be empty")
    return rng.integers(0, max(shape[-1], 1), size=shape[:-1]).astype(np.int64)


def type_env(sc: Scope) -> TypeEnv:
    """The type checker's view of a scope (for the front end's lowering functions)."""
    env = TypeEnv.of_params(sc.params)
    for name, size in sc.indices.items():
        env = env.with_index(name, size)
    return env


def _ignore_extent(name: str, extent: Affine) -> None:
    """Generated index arrays declare their range: the extents they index are not needed."""


def _shape(dims: Iterable[Affine], sizes: Mapping[str, int], what: str) -> tuple[int, ...]:
    out = []
    for a in dims:
        missing = a.vars() - sizes.keys()
        if missing:
            raise TLError(f"{what}: unknown size {', '.join(sorted(missing))}")
        v = int(a.evaluate(sizes))
        if v < 0:
            raise ShapeError(f"{what}: dimension evaluates to {v} < 0")
        out.append(v)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Drawing examples outside of a test


def draw_examples(strategy: st.SearchStrategy, n: int) -> list[Any]:
    """`n` examples of `strategy`, the same on every run (derandomized, no shrinking).

    For statistics over many draws (construct coverage) and for tools such as `tl prove`
    that check instances outside pytest.  Do not call it inside a `@given` test.
    """
    out: list[Any] = []

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate],
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x: Any) -> None:
        out.append(x)

    collect()
    return out


# =============================================================================================
# Helpers for users' own tests (docs/testing.md): strategies for a function's sizes and
# inputs, cost bounds, derivative checks.  Usable from any pytest suite:
#
#     from tensorlang.testing import function_inputs, assert_cost_bound, ...
# =============================================================================================


def _size_params(fn: Any) -> list[Param]:
    return [p for p in fn.params if isinstance(p.type, TSize)]


def _dims_ok(fn: Any, sizes: Mapping[str, int]) -> bool:
    """Every dimension of every parameter type is >= 0 at these sizes."""
    def dims(t: Type) -> Iterable[Affine]:
        if isinstance(t, TArr):
            yield t.size
            yield from dims(t.elem)
        elif isinstance(t, TPair):
            yield from dims(t.a)
            yield from dims(t.b)
        elif isinstance(t, TRel):
            yield from t.sizes
    return all(a.evaluate(sizes) >= 0 for p in fn.params for a in dims(p.type))


def function_sizes(fn: Any, min_size: int = 1, max_size: int = 6) -> st.SearchStrategy:
    """Hypothesis strategy: `{size name: int}` for the size parameters of `fn` (a
    `tensorlang.Function`), each in min_size..max_size, every parameter dimension >= 0."""
    names = [p.name for p in _size_params(fn)]
    return st.fixed_dictionaries(
        {n: st.integers(min_size, max_size) for n in names}).filter(
        lambda s: _dims_ok(fn, s))


def function_inputs(fn: Any, min_size: int = 1, max_size: int = 6, low: float = -1.0,
                    high: float = 1.0, density: float = 0.4) -> st.SearchStrategy:
    """Hypothesis strategy: a complete argument dict for `fn` (sizes, arrays uniform in
    [low, high], relations with the given density) drawn at sizes from `function_sizes`;
    call `fn(**args)` or `fn.interpret(**args)`."""
    @st.composite
    def strategy(draw: Callable) -> dict[str, Any]:
        sizes = draw(function_sizes(fn, min_size, max_size))
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        return random_inputs(fn, sizes, rng, low=low, high=high, density=density)

    return strategy()


def random_inputs(fn: Any, sizes: Mapping[str, int], rng: np.random.Generator | int | None = 0,
                  *, low: float = -1.0, high: float = 1.0,
                  density: float = 0.4) -> dict[str, Any]:
    """Random arguments for every parameter of `fn` (a Function) at `sizes`."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    args: dict[str, Any] = {}
    for p in fn.params:
        if isinstance(p.type, TSize):
            if p.name not in sizes:
                raise TLError(f"no value given for size {p.name} of {fn.name}")
            args[p.name] = int(sizes[p.name])
        else:
            args[p.name] = random_value(p.type, sizes, rng, low=low, high=high,
                                        density=density, what=f"parameter {p.name}")
    return args


def assert_cost_bound(fn: Any, bound: Any, **options: Any) -> Any:
    """Assert `cost(fn) <= bound` for all sizes, as `tl check` decides a contract.

    `bound` is a contract clause (`"4 * cost(f) + N"`, `"cost <= ..."`, `"muls < N**2"`;
    names of other functions are looked up in fn's module and among fn's base functions)
    or a Python callable of the sizes (`lambda N: 4 * N**2`), which is checked on the grid
    of sizes 0..`max_size` (default 12) with the cost model.  Returns the
    `ContractResult` (it says whether the bound was proved or only checked); raises
    AssertionError with the counterexample otherwise."""
    from tensorlang.check import contracts
    from tensorlang.syntax import parser as tl_parser

    if callable(bound):
        return _assert_callable_bound(fn, bound, int(options.get("max_size", 12)))
    text = str(bound).strip()
    head = text.split(None, 1)[0] if text else ""
    if not (head in ("cost", "adds", "muls", "calls") and any(
            text[len(head):].lstrip().startswith(op) for op in ("<=", "<"))):
        text = f"cost <= {text}"
    parsed = tl_parser.parse_contract(text, f"<bound of {fn.name}>")
    clause = contracts.Clause(parsed, None, " ".join(text.split()))

    def resolve(name: str) -> Any:
        f = fn
        while f is not None:
            if f.name == name:
                return f
            f = getattr(f, "base", None)
        if fn.module is not None and name in fn.module:
            return fn.module[name]
        raise KeyError(name)

    try:
        result = contracts.check_function_contract(fn, clause, resolve)
    except contracts.ContractError as err:
        raise AssertionError(err.message) from None
    if result.error is not None:
        raise AssertionError(result.error.message)
    return result


def _assert_callable_bound(fn: Any, bound: Callable[..., Any], max_size: int) -> None:
    names = [p.name for p in _size_params(fn)]
    per = max(2, min(max_size + 1, int(round(400 ** (1.0 / max(1, len(names)))))))
    for point in itertools.product(*(range(per) for _ in names)):
        sizes = dict(zip(names, point))
        if not _dims_ok(fn, sizes):
            continue
        cost = fn.cost(**sizes).total
        limit = bound(**sizes)
        if cost > limit:
            where = ", ".join(f"{n}={v}" for n, v in sizes.items())
            raise AssertionError(f"cost of {fn.name} at {where} is {cost} > bound {limit}")


def untuple(value: Any, n: int) -> list[Any]:
    """The n components of a right-nested tuple `(a, (b, c))`."""
    out = []
    for _ in range(n - 1):
        out.append(value[0])
        value = value[1]
    out.append(value)
    return out


def _dot(a: Any, b: Any) -> float:
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


def _close(got: float, want: float, scale: float, rtol: float, what: str) -> None:
    tol = rtol * max(1.0, abs(want), abs(got), scale)
    if not abs(got - want) <= tol:
        raise AssertionError(f"{what}: {got!r} != {want!r} (difference {abs(got - want):.3g}, "
                             f"tolerance {tol:.3g})")


def assert_derivative_correct(g: Any, args: Mapping[str, Any] | None = None, *,
                              seed: int = 0, eps: float = 1e-6, rtol: float = 1e-5,
                              backend: str = "interp", low: float = -1.0,
                              high: float = 1.0) -> None:
    """Assert that a derived function (`grad`, `jvp`, `vjp`, `hvp`, `hessian`, `jacobian`
    of a `.tl` function) computes the derivative of its base function.

    Two independent checks at the inputs `args` (default: random at sizes 2..4 from `seed`,
    reals uniform in [low, high]: pass `low=0.5` for a function that takes logs):
    * finite differences: the derivative along a random direction u against the central
      difference `(f(x + eps u) - f(x - eps u)) / (2 eps)` (for hvp and hessian: of the
      gradient);
    * the dot-product test: `<w, J u> == <J^T w, u>` for random u, w, with J u from the jvp
      and J^T w from the vjp of the same base function (for hvp and hessian: symmetry,
      `<w, H u> == <u, H w>`), to rounding precision.
    The derivative runs on `backend` ("interp" by default; "numba" tests the compiled code).
    Differentiated parameters must be R or tensors of R."""
    from tensorlang import api

    kind = getattr(g, "kind", None)
    if kind not in ("grad", "jvp", "vjp", "hvp", "hessian", "jacobian"):
        raise TLError(f"assert_derivative_correct needs a derived function (grad(f, x), ...),"
                      f" got {getattr(g, 'name', g)!r}")
    f = g.base
    rng = np.random.default_rng(seed)
    if args is None:
        names = [p.name for p in _size_params(f)]
        for _ in range(100):
            sizes = {n: int(rng.integers(2, 5)) for n in names}
            if _dims_ok(f, sizes):
                break
        args = random_inputs(f, sizes, rng, low=low, high=high)
    base_args = {p.name: args[p.name] for p in f.params if p.name in args}
    base_args = f.bind(**base_args)
    xs = list(g.wrt) or [p.name for p in f.params if is_real_tensor(p.type)]
    for x in xs:
        t = next(p.type for p in f.params if p.name == x)
        if not isinstance(scalar_of(t), TReal):
            raise TLError(f"assert_derivative_correct: {x} has type with pairs; differentiate "
                          f"with respect to R or tensors of R")

    def run(fn: Any, extra: Mapping[str, Any] | None = None) -> Any:
        return fn.compile(backend)(**base_args, **(extra or {}))

    def like(x: Any) -> Any:
        return rng.standard_normal(np.shape(x)) if np.ndim(x) else float(rng.standard_normal())

    u = {x: like(base_args[x]) for x in xs}

    def shifted(point: Mapping[str, Any], h: float) -> dict[str, Any]:
        return {**point, **{x: np.asarray(point[x]) + h * u[x] if np.ndim(point[x])
                            else point[x] + h * u[x] for x in xs}}

    def central(fn: Any) -> Any:
        plus = fn.compile(backend)(**shifted(base_args, eps))
        minus = fn.compile(backend)(**shifted(base_args, -eps))
        return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)

    y0 = f.compile(backend)(**base_args)
    w = like(y0)
    if kind in ("hvp", "hessian"):
        grad_f = api.grad(f, *xs)
        fd = central(grad_f)                       # H u by finite differences
        x = xs[0]
        if kind == "hvp":
            hu = np.asarray(run(g, {"v": u[x]}))
            w = like(base_args[x])
            hw = np.asarray(run(g, {"v": w}))
        else:
            hmat = np.asarray(run(g))
            k = np.size(base_args[x])
            flat = hmat.reshape(k, k)
            hu = (flat @ np.ravel(u[x])).reshape(np.shape(base_args[x]))
            w = like(base_args[x])
            hw = (flat @ np.ravel(w)).reshape(np.shape(base_args[x]))
        scale = float(np.max(np.abs(hu), initial=0.0))
        for got, want in zip(np.ravel(hu), np.ravel(fd)):
            _close(float(got), float(want), scale, max(rtol, 1e-4),
                   f"{g.name}: H u against finite differences of the gradient")
        _close(_dot(w, hu), _dot(u[x], hw), scale, 1e-9, f"{g.name}: symmetry <w, H u> = "
               f"<u, H w>")
        return
    fd = central(f)                                # J u by finite differences
    jvp = api.jvp(f, *xs)
    vjp = api.vjp(f, *xs)
    ju = np.asarray(run(jvp, {f"d_{x}": u[x] for x in xs})[1])
    parts = untuple(run(vjp, {"d_y": w}), len(xs) + 1)
    jtw = dict(zip(xs, parts[1:]))
    if kind == "grad":
        grads = untuple(run(g), len(xs)) if len(xs) > 1 else [run(g)]
        jtw = dict(zip(xs, grads))
        w = 1.0
    elif kind == "jvp":
        ju = np.asarray(run(g, {f"d_{x}": u[x] for x in xs})[1])
    elif kind == "vjp":
        parts = untuple(run(g, {"d_y": w}), len(xs) + 1)
        jtw = dict(zip(xs, parts[1:]))
    elif kind == "jacobian":
        x = xs[0]
        jmat = np.asarray(run(g))
        ny, nx = np.size(y0), np.size(base_args[x])
        flat = jmat.reshape(ny, nx)
        ju = (flat @ np.ravel(u[x])).reshape(np.shape(y0))
        jtw = {x: (flat.T @ np.ravel(w)).reshape(np.shape(base_args[x]))}
    scale = float(np.max(np.abs(ju), initial=0.0))
    for got, want in zip(np.ravel(ju), np.ravel(fd)):
        _close(float(got), float(want), scale, max(rtol, 1e-4),
               f"{g.name}: J u against finite differences of {f.name}")
    lhs = _dot(w, ju)
    rhs = sum(_dot(jtw[x], u[x]) for x in xs)
    _close(lhs, rhs, scale, 1e-9, f"{g.name}: dot-product test <w, J u> = <J^T w, u>")
    if kind == "grad":  # the gradient itself along u, against finite differences
        _close(rhs, float(np.sum(fd)), scale, max(rtol, 1e-4),
               f"{g.name}: <grad, u> against finite differences of {f.name}")


__all__ += ["function_sizes", "function_inputs", "random_inputs", "assert_cost_bound",
            "assert_derivative_correct", "untuple"]


# ---------------------------------------------------------------------------------------------
# Deep and long programs (issue 13; the limits of tensorlang/syntax/limits.py)

_DEEP_HEAD = "def f(N: size, x: R[N]) -> R:\n"


def long_statements(n: int) -> str:
    """`f` of n statements, each using the one before: `y{k} = y{k-1} * 0.5 + x[1]`."""
    body = "".join(f"    y{k} = {f'y{k - 1}' if k else 'x[0]'} * 0.5 + x[1]\n" for k in range(n))
    return _DEEP_HEAD + body + f"    return y{n - 1}\n"


def long_sum(n: int) -> str:
    """`f` returning a sum of n terms `x[0] + x[1] + x[0] + ...`."""
    return _DEEP_HEAD + "    return " + " + ".join(f"x[{k % 2}]" for k in range(n)) + "\n"


def chained_defs(n: int) -> str:
    """n defs, each calling the one before (`f` last): inlining nests them n deep."""
    out = "def g0(N: size, x: R[N]) -> R:\n    return x[0]\n"
    for k in range(1, n):
        out += f"def g{k}(N: size, x: R[N]) -> R:\n    return g{k - 1}(N, x) * 0.5 + x[1]\n"
    return out + f"def f(N: size, x: R[N]) -> R:\n    return g{n - 1}(N, x)\n"


def nested_brackets(n: int) -> str:
    """`f` returning `x[0]` inside n pairs of brackets, one product and Iverson each."""
    return _DEEP_HEAD + "    return " + "([0 < 1] * " * n + "x[0]" + ")" * n + "\n"


DEEP_PROGRAMS = {"statements": long_statements, "terms": long_sum, "defs": chained_defs,
                 "brackets": nested_brackets}

__all__ += ["long_statements", "long_sum", "chained_defs", "nested_brackets", "DEEP_PROGRAMS"]


# ---------------------------------------------------------------------------------------------
# Weighted Gram products (backends/gram.py)


class GramCase(NamedTuple):
    """A Tensor-SSA program `sum k. L[.., k] * R[.., k]` whose operands are chains of
    pointwise statements over a base matrix, its arguments, and whether both chains scale
    one base (the input, or the same masked statement) by rows, at least one of them
    non-trivially (so that the product is `X^T diag(d) X`)."""

    program: Any
    args: dict[str, Any]
    weighted_gram: bool


@st.composite
def weighted_gram_programs(draw: Callable, rows: Sequence[int] = (0, 1, 3, 32, 41)
                           ) -> GramCase:
    """Programs for `backends/gram.py`: the base X stored as (N, K) or (K, N); each operand
    a chain of row scalings (by inputs, a map and a sum of them), constant factors,
    transposes and sums of two scaled terms, each step stored in either layout; sometimes
    a masked step or a different base (Y) on one side; the product in either operand
    order and with its output indices either way round.  `rows` are the K drawn (32 and
    more take syrk; the weights have both signs)."""
    from tensorlang.ir.build import Builder

    n_val = draw(st.integers(0, 4))
    k_val = draw(st.sampled_from(tuple(rows)))
    n, k = Affine.var("N"), Affine.var("K")
    x_layout = draw(st.sampled_from(("NK", "KN")))
    shape = [n, k] if x_layout == "NK" else [k, n]
    params = [Param("N", TSize()), Param("K", TSize()), Param("X", tensor(shape)),
              Param("Y", tensor(shape)), Param("a", tensor([k])), Param("b", tensor([k]))]
    b = Builder(params)
    x, y, a, c = b.input("X"), b.input("Y"), b.input("a"), b.input("b")
    row_vectors = [a, c, b.map([("k", k)], "exp", [(a, ["k"])]),
                   b.add([("k", k)], (a, ["k"]), (c, ["k"]))]

    def read(var: str, layout: str, i: str, s: str) -> tuple:
        return (var, [i, s] if layout == "NK" else [s, i])

    def gen(layout: str) -> list:
        return [("n", n), ("k", k)] if layout == "NK" else [("k", k), ("n", n)]

    def chain(base: str) -> tuple[str, str, str, bool]:
        """(variable, layout, base, scaled) of a chain of steps from `base`: a masked step
        is the base of the steps after it (the rewrite does not look through a mask)."""
        var, layout, scaled = base, x_layout, False
        for _ in range(draw(st.integers(0, 3))):
            step = draw(st.sampled_from(("row", "coeff", "sum", "row", "sum", "mask")))
            out = draw(st.sampled_from(("NK", "KN")))
            cur = read(var, layout, "n", "k")
            row = (draw(st.sampled_from(row_vectors)), ["k"])
            if step == "row":
                var = b.contract(gen(out), [], cur, row)
            elif step == "coeff":
                var = b.reduce(gen(out), [], cur, coeff=draw(st.sampled_from((-2.0, 0.5, 3.0))))
            elif step == "sum":
                other = b.contract(gen(out), [], cur, row)
                var = b.add(gen(out), cur, read(other, out, "n", "k"))
            else:
                var = b.contract(gen(out), [], cur, row,
                                 pred=Cmp("<=", Affine.var("n"), Affine.lit(1)))
                base, scaled, layout = var, False, out
                continue
            scaled, layout = True, out
        return var, layout, base, scaled

    left, l_layout, l_base, l_scaled = chain(x)
    right, r_layout, r_base, r_scaled = chain(draw(st.sampled_from((x, x, x, y))))
    lhs, rhs = read(left, l_layout, "p", "s"), read(right, r_layout, "q", "s")
    if draw(st.booleans()):
        lhs, rhs = rhs, lhs
    gens = [("p", n), ("q", n)] if draw(st.booleans()) else [("q", n), ("p", n)]
    out = b.contract(gens, [("s", k)], lhs, rhs, coeff=draw(st.sampled_from((1.0, -1.5))))
    program = b.program(out, name="wgram")
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    sizes = {"N": n_val, "K": k_val}
    dims = [n_val, k_val] if x_layout == "NK" else [k_val, n_val]
    args: dict[str, Any] = dict(sizes, X=rng.standard_normal(dims),
                                Y=rng.standard_normal(dims), a=rng.standard_normal(k_val),
                                b=rng.standard_normal(k_val))
    return GramCase(program, args, l_base == r_base and (l_scaled or r_scaled))


__all__ += ["weighted_gram_programs", "GramCase"]


# ---------------------------------------------------------------------------------------------
# Row-panel products (backends/codegen.py, `RowPanel`)


class PanelCase(NamedTuple):
    """A Tensor-SSA program with a matrix product `P[i, j] = c * sum k. L * R` and a reader
    of it, its arguments, and whether the code generator should compute P in the reader's
    row loop (`codegen.row_panels`)."""

    program: Any
    args: dict[str, Any]
    panel: bool


PANEL_READERS = ("map_sum", "pointwise", "shifted", "reversed", "row_sums", "masked_sum",
                 "column_sums", "two_readers")


@st.composite
def row_panel_programs(draw: Callable) -> PanelCase:
    """Programs for row-panel products: P from L (N x K, or K x N: then not by rows) and R
    (K x M or M x K) with a coefficient, read by one statement: a map summed with a weight
    A, a pointwise product with A (an N x M result), reads at `[i, j + 1]` (zero-extended)
    and `[i, M - 1 - j]`, row sums, a masked total `[j <= i]`; or not by rows (column
    sums, a second reader).  Sizes either above the panel thresholds (the panels run: rows
    that end mid-strip, K small or 40, above `PANEL_MAX_K`) or tiny (the product is
    stored)."""
    from tensorlang.ir.build import Builder

    big = draw(st.booleans())
    n_val = draw(st.sampled_from((129, 150) if big else (0, 1, 3)))
    m_val = draw(st.sampled_from((256, 300) if big else (1, 4)))
    k_val = draw(st.sampled_from((1, 3, 5, 40) if big else (0, 2)))
    n, m, k = Affine.var("N"), Affine.var("M"), Affine.var("K")
    l_rows = draw(st.booleans()) or draw(st.booleans())   # L stored N x K (3 in 4)
    r_rows = draw(st.booleans())                          # R stored K x M
    params = [Param("N", TSize()), Param("M", TSize()), Param("K", TSize()),
              Param("L", tensor([n, k] if l_rows else [k, n])),
              Param("R", tensor([k, m] if r_rows else [m, k])), Param("A", tensor([n, m]))]
    b = Builder(params)
    left, right, a = b.input("L"), b.input("R"), b.input("A")
    coeff = draw(st.sampled_from((1.0, -1.5)))
    prod = b.contract([("i", n), ("j", m)], [("k", k)],
                      (left, ["i", "k"] if l_rows else ["k", "i"]),
                      (right, ["k", "j"] if r_rows else ["j", "k"]), coeff=coeff)
    kind = draw(st.sampled_from(PANEL_READERS))
    ij = [("i", n), ("j", m)]
    i, j = Affine.var("i"), Affine.var("j")
    if kind == "map_sum":
        fn = draw(st.sampled_from(("sin", "square", "tanh")))
        q = b.map(ij, fn, [(prod, ["i", "j"])])
        out = b.contract([], ij, (q, ["i", "j"]), (a, ["i", "j"]))
    elif kind == "pointwise":
        out = b.contract(ij, [], (prod, ["i", "j"]), (a, ["i", "j"]), coeff=0.5)
    elif kind == "shifted":
        out = b.add(ij, (prod, [i, j + 1]), (a, ["i", "j"]))
    elif kind == "reversed":
        out = b.contract(ij, [], (prod, [i, m - 1 - j]), (a, ["i", "j"]))
    elif kind == "row_sums":
        out = b.contract([("i", n)], [("j", m)], (prod, ["i", "j"]), (a, ["i", "j"]))
    elif kind == "masked_sum":
        out = b.reduce([], ij, (prod, ["i", "j"]), pred=Cmp("<=", j, i))
    elif kind == "column_sums":
        out = b.reduce([("j", m)], [("i", n)], (prod, ["i", "j"]))
    else:
        total = b.reduce([], ij, (prod, ["i", "j"]))
        out = b.contract(ij, [], (prod, ["i", "j"]), total)
    program = b.program(out, name="panel")
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    args: dict[str, Any] = dict(
        N=n_val, M=m_val, K=k_val,
        L=rng.standard_normal((n_val, k_val) if l_rows else (k_val, n_val)),
        R=rng.standard_normal((k_val, m_val) if r_rows else (m_val, k_val)),
        A=rng.standard_normal((n_val, m_val)))
    return PanelCase(program, args, l_rows and kind not in ("column_sums", "two_readers"))


__all__ += ["row_panel_programs", "PanelCase", "PANEL_READERS"]
