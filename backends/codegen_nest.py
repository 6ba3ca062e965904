"""Loop nests for the code generators: which loops a statement runs, and their printing.

A statement `v = gen I. sum J. [P] * ...` runs in two *parts*: the outer part binds the
generator indices I (under the conjuncts of P that mention no summation index), the inner
part binds J with I known (under the remaining conjuncts).  Each part is planned by
`plan_part`:

  * the index solver's `loop_nest` turns equalities into assignments (a loop removed),
    inequalities into loop bounds, and keeps relation calls, `or` and `exists` as guards;
  * a relation call `R(a, b, ...)` of the conjunction whose arguments are distinct index
    variables that the solver left as loops *drives* those variables: the loop runs over
    R's coordinate list (sorted so that the arguments already known form a CSR row key),
    so a sparse relation costs O(nnz), not O(box).  Every other conjunct stays a bound or
    a guard of the remaining loops.

`part_steps` lowers a plan into a flat list of `Step`s (guard / loop / assignment / raw
lines) with generated identifiers only; the backends print the steps, choosing for the
first loop a sequential, parallel or chunked-reduction form.

`Facts` and `implies` decide, conservatively, whether a predicate holds at every point a
nest visits (Fourier-Motzkin on the affine facts, structural membership for the rest):
the code generators use it to drop zero-extension guards the solver has already proved.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from tensorlang.ir import tssa
from tensorlang.ir.canon import disjuncts
from tensorlang.ir.ast import (Affine, And, Cmp, Exists, Or, PFalse, Pred, PTrue, RelCall,
                            free_names, pred_and, pred_or)
from tensorlang.ir.ast import subst as ast_subst
from tensorlang.passes.indexsolve import (Bound, LoopBound, LoopNest, affine_to_python,
                                          fourier_motzkin, loop_nest, pred_to_python)

NameFn = Callable[[str], str]
RelFn = Callable[[str, list[str]], str]


# ---------------------------------------------------------------------------------------------
# Facts and implication


def cmp_constraints(p: Cmp) -> list[Affine]:
    """`p` as constraints `a >= 0` (an equality gives two)."""
    d = p.rhs - p.lhs
    if p.op == "<":
        return [d - 1]
    if p.op == "<=":
        return [d]
    return [d, -d]


def _negations(p: Cmp) -> list[list[Affine]]:
    """Alternatives (a disjunction) whose constraints describe `not p`."""
    d = p.rhs - p.lhs
    if p.op == "<":
        return [[-d]]            # d <= 0
    if p.op == "<=":
        return [[-d - 1]]        # d < 0
    return [[d - 1], [-d - 1]]   # d > 0 or d < 0


_MAX_FM_VARS = 8


@functools.lru_cache(maxsize=1 << 14)
def _infeasible(cons: tuple[Affine, ...]) -> bool:
    """True when the integer system `a >= 0 (a in cons)` has no solution (sound: False may
    also mean 'too large to decide')."""
    names = sorted(set().union(*(a.vars() for a in cons))) if cons else []
    if len(names) > _MAX_FM_VARS:
        return False
    return not fourier_motzkin(list(cons), names).feasible


def _relevant(cons: Sequence[Affine], seed: frozenset[str]) -> tuple[Affine, ...]:
    """The constraints connected to `seed` through shared variables (FM stays small)."""
    names = set(seed)
    chosen: list[Affine] = []
    rest = list(cons)
    changed = True
    while changed:
        changed = False
        keep = []
        for a in rest:
            if a.vars() & names or a.is_const():
                chosen.append(a)
                names |= a.vars()
                changed = True
            else:
                keep.append(a)
        rest = keep
    return tuple(sorted(set(chosen), key=lambda a: (a.terms, a.const)))


@dataclass(frozen=True)
class Facts:
    """What holds at every point of a nest: the index ranges, the conjuncts of the mask,
    and non-negative sizes.  `atoms` are canonical conjuncts (for structural matches)."""

    ranges: tuple[tuple[str, Affine], ...]
    sizes: frozenset[str]
    atoms: frozenset[Pred] = frozenset()
    lin: tuple[Affine, ...] = ()

    @staticmethod
    def of(ranges: Mapping[str, Affine], sizes: Iterable[str], preds: Iterable[Pred] = ()
           ) -> "Facts":
        f = Facts(tuple(sorted(ranges.items())), frozenset(sizes))
        lin: list[Affine] = []
        for v, n in f.ranges:
            x = Affine.var(v)
            lin += [x, n - x - 1]
        f = Facts(f.ranges, f.sizes, frozenset(), tuple(lin))
        return f.add(preds)

    def add(self, preds: Iterable[Pred]) -> "Facts":
        atoms = set(self.atoms)
        lin = list(self.lin)
        for p in preds:
            for q in tssa.conjuncts(self.canon(p)):
                atoms.add(q)
                if isinstance(q, Cmp):
                    lin += cmp_constraints(q)
        return Facts(self.ranges, self.sizes, frozenset(atoms), tuple(lin))

    def canon(self, p: Pred) -> Pred:
        return tssa.canon_pred(p, dict(self.ranges))

    def implies(self, goal: Pred) -> bool:
        """Conservative: True only when `goal` provably holds wherever the facts do."""
        return isinstance(self.simplify(goal), PTrue)

    def refutes(self, goal: Pred) -> bool:
        """Conservative: True only when `goal` provably fails wherever the facts hold."""
        return isinstance(self.simplify(goal), PFalse)

    def simplify(self, p: Pred) -> Pred:
        """`p` with the parts the facts decide replaced by true/false (the result is
        equivalent to `p` wherever the facts hold)."""
        return self._simplify(self.canon(p))

    def _simplify(self, p: Pred) -> Pred:
        if isinstance(p, (PTrue, PFalse)):
            return p
        if p in self.atoms:
            return PTrue()
        if isinstance(p, And):
            parts = [self._simplify(q) for q in tssa.conjuncts(p)]
            if any(isinstance(q, PFalse) for q in parts):
                return PFalse()
            return pred_and(*parts)
        if isinstance(p, Or):
            parts = [self._simplify(q) for q in disjuncts(p)]
            if any(isinstance(q, PTrue) for q in parts):
                return PTrue()
            # a case split's union (`1 <= i or i <= 0`, from `(i - 1) % N`): true where
            # no point satisfies every disjunct's negation
            negation = _negation_alternatives(parts)
            if negation is not None and self._all_infeasible(negation):
                return PTrue()
            return pred_or(*parts)
        if isinstance(p, Cmp):
            if self._all_infeasible([[a] for a in _negation_constraints(p)]):
                return PTrue()
            if self._all_infeasible([cmp_constraints(p)]):
                return PFalse()
        if isinstance(p, Exists):
            q = simplify_exists(p)
            if q is not p:      # quantifier-free: decided here, or at worst an O(1) guard
                return self._simplify(self.canon(q))
        return p

    def _all_infeasible(self, alternatives: list[list[Affine]]) -> bool:
        """Each alternative system (facts plus its constraints) is infeasible."""
        for alt in alternatives:
            base = list(self.lin)
            names: set[str] = set()
            for a in base + alt:
                names |= a.vars()
            base += [Affine.var(n) for n in sorted(names & self.sizes)]  # sizes are >= 0
            seed = frozenset().union(*(a.vars() for a in alt))
            if not _infeasible(_relevant(base + alt, seed)):
                return False
        return True


def simplify_exists(p: Exists) -> Pred:
    """`exists k:n. C` without the quantifier where that is exact (else with a smaller body;
    `p` itself when nothing applies), so that a trivially true guard such as
    `exists k. i == k` is a test, not an O(n) flag loop (docs/backends.md, "Guards").

    * inner `exists` of C are simplified first;
    * one-point rule: a conjunct `k == e` (k with coefficient +-1) gives
      `0 <= e < n and C[k := e]`;
    * C a conjunction of comparisons: Fourier-Motzkin elimination of k from `0 <= k < n`
      and C (every lower bound at most every upper bound), where it is exact over the
      integers (`_project_cmps`: unit coefficients, or pairs whose dark shadow always
      holds, as the quotients of `//` and `%` give);
    * k not free in C: `0 < n and C`."""
    k, n = p.idx, p.size
    parts: list[Pred] = []
    changed = False
    for q in tssa.conjuncts(p.body):
        if isinstance(q, Exists):
            r = simplify_exists(q)
            changed |= r is not q
            parts += tssa.conjuncts(r)
        else:
            parts.append(q)
    parts = [q for q in parts if not isinstance(q, PTrue)]
    if any(isinstance(q, PFalse) for q in parts):
        return PFalse()
    if not any(k in free_names(q) for q in parts):
        return pred_and(Cmp("<", Affine.lit(0), n), *parts)
    for t, q in enumerate(parts):
        if isinstance(q, Cmp) and q.op == "==":
            d = q.rhs - q.lhs                    # d == 0, d = c k + r
            c = d.coeff(k)
            if c in (-1, 1) and k not in free_names(n):
                e = (d - Affine.var(k) * c) * (-c)   # k == e
                others = [ast_subst(x, {k: e}) for x in parts[:t] + parts[t + 1:]]
                return pred_and(Cmp("<=", Affine.lit(0), e), Cmp("<", e, n), *others)
    if all(isinstance(q, Cmp) for q in parts):
        projected = _project_cmps(k, n, parts)   # type: ignore[arg-type]
        if projected is not None:
            return projected
    return Exists(k, n, pred_and(*parts)) if changed else p


def _project_cmps(k: str, n: Affine, parts: Sequence[Cmp]) -> Pred | None:
    """`exists k:n. parts` without k, or None where that is not exact.  An integer k with
    lower bounds `b k >= L` and upper bounds `a k <= U` exists iff every pair has one, i.e.
    `ceil(L / b) <= floor(U / a)`: with a = 1 or b = 1 that is the real shadow `a L <= b U`
    (Fourier-Motzkin); otherwise the pair is dropped where its dark shadow
    `b U - a L >= (a - 1)(b - 1)` holds for every value (a constant difference: `2 k <= i <=
    2 k + 1`, every i has its k, as `i // 2` lowers), and not projected where it does not."""
    cons: list[Affine] = [Affine.var(k), n - Affine.var(k) - 1]
    for q in parts:
        cons += cmp_constraints(q)
    lower: list[tuple[int, Affine]] = []    # (b, L): c k + r >= 0 with c = b > 0, L = -r
    upper: list[tuple[int, Affine]] = []    # (a, U): c k + r >= 0 with c = -a < 0, U = r
    rest: list[Pred] = []
    for a in cons:
        c = a.coeff(k)
        r = a - Affine.var(k) * c
        if c == 0:
            rest.append(Cmp("<=", Affine.lit(0), a))
        elif c > 0:
            lower.append((c, -r))
        else:
            upper.append((-c, r))
    for b, lo in lower:
        for a, hi in upper:
            gap = hi * b - lo * a                 # b U - a L
            if a == 1 or b == 1:
                rest.append(Cmp("<=", Affine.lit(0), gap))
            elif not (gap.is_const() and gap.const >= (a - 1) * (b - 1)):
                return None
    return pred_and(*rest) if rest else PTrue()


# ---------------------------------------------------------------------------------------------
# `exists` over a relation: a CSR row test, or (an index array's value) a range test


@dataclass(frozen=True)
class RowTest:
    """`exists ks. R(args) and rest`, where each k is one of R's arguments (a plain
    variable, in one position, ranging at least over that extent) and `rest` does not
    mention the ks: R's CSR row keyed by the other arguments (`key`, positions
    `order[:nbound]`) is not empty.  With `nbound` 0: R is not empty."""

    rel: str
    order: tuple[int, ...]
    nbound: int
    key: tuple[Affine, ...]
    rest: tuple[Pred, ...]

    @property
    def pattern(self) -> tuple[str, tuple[int, ...], int]:
        return (self.rel, self.order, self.nbound)


def _quantified(p: Exists) -> tuple[dict[str, Affine], list[Pred]] | None:
    """The variables of a block of `exists` (nested, or conjuncts of the body) with their
    ranges, and the body's other conjuncts; None when a name is bound twice or the block's
    names are also free in `p` (pulling an inner `exists` out would capture them)."""
    qs: dict[str, Affine] = {}
    parts: list[Pred] = []
    todo = [p]
    while todo:
        q = todo.pop()
        if q.idx in qs:
            return None
        qs[q.idx] = q.size
        for c in tssa.conjuncts(q.body):
            (todo if isinstance(c, Exists) else parts).append(c)
    if free_names(p) & qs.keys() or any(free_names(n) & qs.keys() for n in qs.values()):
        return None
    return qs, parts


def row_test(p: Exists, rel_dims: Mapping[str, tuple[Affine, ...]],
             sizes: Iterable[str]) -> RowTest | None:
    """`p` as a `RowTest`, when it is one (docs/backends.md, "Guards")."""
    got = _quantified(p)
    if got is None:
        return None
    qs, parts = got
    calls = [c for c in parts if free_names(c) & qs.keys()]
    if len(calls) != 1 or not isinstance(calls[0], RelCall) or calls[0].name not in rel_dims:
        return None
    r = calls[0]
    dims = rel_dims[r.name]
    at: dict[str, int] = {}
    for t, a in enumerate(r.args):
        if not a.vars() & qs.keys():
            continue
        v = a.as_var()
        if v is None or v in at:
            return None
        at[v] = t
    known = Facts.of({}, sizes)
    for v, t in at.items():   # k ranges over all of R's extent t (or more)
        if qs[v] != dims[t] and not known.implies(Cmp("<=", dims[t], qs[v])):
            return None
    rest = [c for c in parts if c is not r]
    rest += [Cmp("<", Affine.lit(0), n) for v, n in qs.items() if v not in at]
    free = [t for t in range(len(r.args)) if t not in at.values()]
    return RowTest(r.name, tuple(free) + tuple(sorted(at.values())), len(free),
                   tuple(r.args[t] for t in free), tuple(rest))


def index_array_exists(p: Pred, rel_dims: Mapping[str, tuple[Affine, ...]],
                       index_arrays: frozenset[str], sizes: Iterable[str]) -> Pred:
    """`p` with each `exists ks. idx(a..., k)` over an index array's value replaced by
    the range test of its other arguments: an index array is a total function (its
    binding checks every entry), so every in-range `(a...)` has exactly one value
    (SPEC 12).  Derivatives produce these as supports (`exists v. tok(b, k, v)`); as flag
    loops they cost O(V) per point."""
    if isinstance(p, (And, Or)):
        a = index_array_exists(p.a, rel_dims, index_arrays, sizes)
        b = index_array_exists(p.b, rel_dims, index_arrays, sizes)
        if a is p.a and b is p.b:
            return p
        return pred_and(a, b) if isinstance(p, And) else pred_or(a, b)
    if not isinstance(p, Exists):
        return p
    rt = row_test(p, rel_dims, sizes)
    if rt is not None and rt.rel in index_arrays:
        dims = rel_dims[rt.rel]
        value = len(dims) - 1
        if value in rt.order[rt.nbound:]:
            ranges: list[Pred] = []
            for t, a in zip(rt.order[:rt.nbound], rt.key):
                ranges += in_bounds([a], [dims[t]])
            ranges += [Cmp("<", Affine.lit(0), dims[t]) for t in rt.order[rt.nbound:]
                       if t != value]
            return pred_and(*rt.rest, *ranges)
    body = index_array_exists(p.body, rel_dims, index_arrays, sizes)
    return p if body is p.body else Exists(p.idx, p.size, body)


_MAX_NEGATION_ALTERNATIVES = 64


def _negation_alternatives(parts: Sequence[Pred]) -> list[list[Affine]] | None:
    """`not (p1 or p2 or ...)` as alternative constraint systems, for disjuncts that are
    comparisons or conjunctions of them; None for others, or when there would be more than
    `_MAX_NEGATION_ALTERNATIVES` systems."""
    out: list[list[Affine]] = [[]]
    for q in parts:
        conj = list(tssa.conjuncts(q))
        if not conj or not all(isinstance(c, Cmp) for c in conj):
            return None
        alts = [alt for c in conj for alt in _negations(c)]   # not (a and b) = not a or not b
        if len(out) * len(alts) > _MAX_NEGATION_ALTERNATIVES:
            return None
        out = [sys + alt for sys in out for alt in alts]
    return out


def _negation_constraints(p: Cmp) -> list[Affine]:
    """`not p` is the disjunction of `a >= 0` over the returned constraints."""
    return [alt[0] for alt in _negations(p)]


def in_bounds(idx: Sequence[Affine], dims: Sequence[Affine]) -> list[Pred]:
    """`0 <= a_k < n_k` for each index (the zero-extension test of a read)."""
    out: list[Pred] = []
    for a, n in zip(idx, dims):
        out += [Cmp("<=", Affine.lit(0), a), Cmp("<", a, n)]
    return out


# ---------------------------------------------------------------------------------------------
# Planning


@dataclass(frozen=True)
class Driver:
    """A loop over the coordinates of relation `rel`: positions `order[:nbound]` are known
    before the loop (a CSR row key), positions `order[nbound:]` are bound by it."""

    rel: str
    args: tuple[str, ...]
    order: tuple[int, ...]
    nbound: int
    conjunct: RelCall
    # an index array's value read at known indices: no loop, `v = coords[flat index, -1]`
    # (its coordinates in C order, one member per index tuple)
    lookup: bool = False

    @property
    def pattern(self) -> tuple[str, tuple[int, ...], int]:
        return (self.rel, self.order, 0 if self.lookup else self.nbound)

    def driven(self) -> tuple[str, ...]:
        return tuple(self.args[k] for k in self.order[self.nbound:])

    def bound(self) -> tuple[str, ...]:
        return tuple(self.args[k] for k in self.order[:self.nbound])


@dataclass(frozen=True)
class Part:
    """One nest: `driver` (a relation loop) then `nest`; `conj` is the conjunction it
    enumerates, `exclude` predicates whose points an earlier alternative already visited
    (checked, negated, once every variable is bound)."""

    vars: tuple[str, ...]
    driver: Driver | None
    nest: LoopNest
    conj: tuple[Pred, ...] = ()
    exclude: tuple[Pred, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.nest.feasible

    def has_loop(self) -> bool:
        return (self.driver is not None and not self.driver.lookup) or \
            any(lv.loop is not None and point_level(lv.loop) is None
                for lv in self.nest.levels)

    def static_terms(self) -> int | None:
        """At most how many points the nest visits whatever the sizes, when every loop
        has an upper and a lower bound a constant apart (the window `2 i <= j <= 2 i + 1`
        of an upsampling's adjoint: 2); None when some loop (or a relation driver) has no
        such bound."""
        if self.driver is not None and not self.driver.lookup:
            return None
        total = 1
        for lv in self.nest.levels:
            if lv.loop is None or point_level(lv.loop) is not None:
                continue
            spans = [(u.expr - lo.expr).const + 1 for u in lv.loop.upper
                     for lo in lv.loop.lower
                     if u.div == 1 and lo.div == 1 and (u.expr - lo.expr).is_const()]
            if not spans:
                return None
            total *= max(0, min(spans))
        return total


MAX_ALTERNATIVES = 16


def plan_alternatives(vars_sizes: Sequence[tuple[str, Affine]], conj: Sequence[Pred],
                      rel_dims: Mapping[str, tuple[Affine, ...]], sizes: Iterable[str],
                      use_relations: bool = True, budget: int = MAX_ALTERNATIVES,
                      facts: Facts | None = None,
                      index_arrays: frozenset[str] = frozenset()) -> list[Part]:
    """Nests that together visit each point of the conjunction `conj` exactly once.

    A conjunct `D1 or ... or Dk` whose every disjunct pins a variable (an equality, a
    relation call, or a disjunction of such) is split: alternative t enumerates `Dt` and
    the other conjuncts (simplified knowing `Dt`) and excludes the points of
    `D1 .. D(t-1)`.  So `[a == b or a == b + 1]` costs two thin nests, not a box with a
    guard.  Other disjunctions stay guards.  `facts`: what holds around the nest (index
    ranges, enclosing conditions)."""
    sizes = list(sizes)
    names = {v for v, _ in vars_sizes}
    if facts is None:
        facts = Facts.of(dict(vars_sizes), sizes)
    simple = _simplify_all(conj, facts)
    if simple is None:
        return []
    for k, c in enumerate(simple):
        if not isinstance(c, Or):
            continue
        ds = disjuncts(c)
        if len(ds) > budget or not all(_pins(d, names) for d in ds):
            continue
        rest = simple[:k] + simple[k + 1:]
        out: list[Part] = []
        for t, d in enumerate(ds):
            others = _simplify_all(rest, facts.add([d]))
            if others is None:
                continue
            subs = plan_alternatives(vars_sizes, tssa.conjuncts(d) + others, rel_dims, sizes,
                                     use_relations, budget // len(ds), facts, index_arrays)
            out += [Part(sp.vars, sp.driver, sp.nest, sp.conj, sp.exclude + tuple(ds[:t]))
                    for sp in subs]
        return out
    part = plan_part(vars_sizes, simple, rel_dims, sizes, use_relations, index_arrays)
    return [part] if part.feasible else []


def _simplify_all(conj: Sequence[Pred], facts: Facts) -> list[Pred] | None:
    """The conjuncts the facts do not decide (None: one of them is refuted)."""
    out: list[Pred] = []
    for c in conj:
        c = facts.simplify(c)
        if isinstance(c, PFalse):
            return None
        out += tssa.conjuncts(c)
    return out


def _pins(d: Pred, names: set[str]) -> bool:
    """`d` (a conjunction) contains an equality or a relation call on the variables, or a
    disjunction whose every branch does."""
    for q in tssa.conjuncts(d):
        if isinstance(q, (Cmp, RelCall)) and not free_names(q) & names:
            continue
        if isinstance(q, Cmp) and q.op == "==" or isinstance(q, RelCall):
            return True
        if isinstance(q, Or) and all(_pins(x, names) for x in disjuncts(q)):
            return True
    return False


def plan_part(vars_sizes: Sequence[tuple[str, Affine]], conj: Sequence[Pred],
              rel_dims: Mapping[str, tuple[Affine, ...]], sizes: Iterable[str],
              use_relations: bool = True, index_arrays: frozenset[str] = frozenset()
              ) -> Part:
    """Loops binding `vars_sizes` (outermost first) at the points where the conjunction
    `conj` holds; every other name is known (sizes, outer indices).  `index_arrays`: the
    relations that are index arrays (a value read at known indices is a lookup)."""
    names = tuple(v for v, _ in vars_sizes)
    conj = tuple(conj)
    nest0 = loop_nest(list(vars_sizes), pred_and(*conj))
    if not nest0.feasible or not use_relations:
        return Part(names, None, nest0, conj)
    drv = _choose_driver(names, conj, nest0, rel_dims, index_arrays)
    if drv is None:
        return Part(names, None, nest0, conj)
    driven = set(drv.driven())
    size_of = dict(vars_sizes)
    extra: list[Pred] = []
    for pos in drv.order[drv.nbound:]:
        v = drv.args[pos]
        facts = Facts.of({v: rel_dims[drv.rel][pos]}, sizes)
        if not facts.implies(Cmp("<", Affine.var(v), size_of[v])):
            extra.append(Cmp("<", Affine.var(v), size_of[v]))
    rest = [c for c in conj if c is not drv.conjunct]
    nest = loop_nest([(v, n) for v, n in vars_sizes if v not in driven],
                     pred_and(*rest, *extra))
    return Part(names, drv, nest, conj)


def _choose_driver(names: tuple[str, ...], conj: Sequence[Pred], nest0: LoopNest,
                   rel_dims: Mapping[str, tuple[Affine, ...]],
                   index_arrays: frozenset[str] = frozenset()) -> Driver | None:
    loops = {lv.var for lv in nest0.levels if lv.loop is not None}
    best: Driver | None = None
    for c in conj:
        if not isinstance(c, RelCall) or c.name not in rel_dims:
            continue
        args = tuple(a.as_var() for a in c.args)
        if any(a is None for a in args) or len(set(args)) != len(args):
            continue
        driven = [k for k, a in enumerate(args) if a in names]
        if not driven or any(args[k] not in loops for k in driven):
            continue
        bound = [k for k, a in enumerate(args) if a not in names]
        # Driven positions in the relation's own order (`driven` is already): with the
        # bound ones in order too, the pattern is the relation's sorted coordinates, and
        # otherwise one stable pass per bound column sorts it (semantics/relation.py).
        lookup = c.name in index_arrays and driven == [len(args) - 1]
        d = Driver(c.name, args, tuple(bound) + tuple(driven), len(bound), c,  # type: ignore
                   lookup)
        if best is None or len(driven) > len(best.driven()):
            best = d
    return best


# ---------------------------------------------------------------------------------------------
# Steps: a plan lowered to printable pieces (generated identifiers only)


@dataclass
class Guard:
    code: str
    pre: list[str] = field(default_factory=list)   # lines computing `exists` flags


@dataclass
class Loop:
    var: str
    lo: str
    stop: str
    head: list[str] = field(default_factory=list)  # first lines of the body
    # a loop over a relation's coordinates: (relation, column order, its arguments'
    # program names); `var` is then the coordinate's position in the pattern's sorted
    # array, the same for every `nbound` (`storage.CoordLayout`)
    position: tuple[str, tuple[int, ...], tuple[str, ...]] | None = None


@dataclass
class Assign:
    var: str
    expr: str
    div: int = 1


@dataclass
class Lines:
    lines: list[str]


Step = Guard | Loop | Assign | Lines


class RelNames:
    """Code names of a relation's mask and of the coordinate/CSR arrays of its patterns.

    `dims`: each relation's extents (its parameter type's sizes), printed with the name
    function of the caller: bounds checks of relation arguments read sizes, never the
    mask, so a kernel that only iterates coordinates is not passed a mask built per call.
    `patterns`: the patterns the kernel is given (those a row-nonempty test may use);
    `sizes`: the size names (what `row_test` decides coverage with); `nonneg`: see below.
    Without `dims` (a
    key that is compared, never run: sibling fusion) a dimension prints symbolically."""

    def __init__(self, mask: Callable[[str], str],
                 pattern: Callable[[tuple[str, tuple[int, ...], int]], tuple[str, str]],
                 dims: Mapping[str, tuple[Affine, ...]] | None = None,
                 patterns: Iterable[tuple[str, tuple[int, ...], int]] = (),
                 sizes: Iterable[str] = (), nonneg: str = ""):
        self.mask = mask
        # a function the compiler takes as "the argument is not negative" (numba_rt.
        # tl_nonneg), wrapped around a coordinate loop's position and the coordinates it
        # reads (relation members are never negative): indexing with them then needs no
        # wraparound test (a branch or a select per read); "" prints them bare
        self.nonneg = nonneg
        self.pattern = pattern
        self.dims = dims
        self.patterns = frozenset(patterns)
        self.sizes = frozenset(sizes)

    def dim(self, r: str, k: int, nm: NameFn) -> str:
        """Extent `k` of relation `r` as code."""
        if self.dims is None:
            return f"dim({self.mask(r)}, {k})"
        return affine_to_python(self.dims[r][k], nm)

    def row_test(self, p: Exists) -> "RowTest | None":
        """`p` as a test of one CSR row, when the kernel is given that row's pattern."""
        if self.dims is None:
            return None
        rt = row_test(p, self.dims, self.sizes)
        return rt if rt is not None and rt.pattern in self.patterns else None


def rel_test(mask: str, args: list[str], dims: list[str]) -> str:
    """A bounds-checked read of a relation's boolean mask (`dims`: its extents as code)."""
    checks = [f"0 <= {a} < {d}" for a, d in zip(args, dims)]
    return "(" + " and ".join(checks + [f"{mask}[{', '.join(args) or '()'}]"]) + ")"


def pred_code(preds: Sequence[Pred], nm: NameFn, rels: RelNames, counter: list[int],
              indent: str) -> Guard:
    """A guard for the conjunction of `preds` (flag loops for `exists` in `pre`; their
    lines are relative to the guard's own depth)."""
    pre: list[str] = []
    code = " and ".join(_pred_python(p, nm, rels, pre, "", indent, counter) for p in preds)
    return Guard(code, pre)


def _pred_python(p: Pred, nm: NameFn, rels: RelNames, pre: list[str], pad: str, indent: str,
                 counter: list[int]) -> str:
    """`pred_to_python`, with an `exists` that is a CSR row test (`row_test`) printed as
    one: O(1) per point instead of a flag loop over the quantified box."""
    if isinstance(p, (And, Or)):
        op = " and " if isinstance(p, And) else " or "
        return ("(" + _pred_python(p.a, nm, rels, pre, pad, indent, counter) + op
                + _pred_python(p.b, nm, rels, pre, pad, indent, counter) + ")")
    if isinstance(p, Exists):
        rt = rels.row_test(p)
        if rt is not None:
            return _row_code(rt, nm, rels, pre, pad, indent, counter)

    def rel(r: str, args: list[str]) -> str:
        return rel_test(rels.mask(r), args, [rels.dim(r, k, nm) for k in range(len(args))])
    return pred_to_python(p, nm, rel, pre, pad, indent, counter)


def _row_code(rt: "RowTest", nm: NameFn, rels: RelNames, pre: list[str], pad: str,
              indent: str, counter: list[int]) -> str:
    coords, ptr = rels.pattern(rt.pattern)
    parts = [_pred_python(q, nm, rels, pre, pad, indent, counter) for q in rt.rest]
    if not rt.nbound:
        return "(" + " and ".join(parts + [f"{coords}.shape[0] > 0"]) + ")"
    args = [affine_to_python(a, nm) for a in rt.key]
    dims = [rels.dim(rt.rel, t, nm) for t in rt.order[:rt.nbound]]
    parts += [f"0 <= {a} < {d}" for a, d in zip(args, dims)]
    key = args[0]
    for a, d in zip(args[1:], dims[1:]):
        key = f"({key}) * {d} + {a}"
    parts.append(f"{ptr}[{key} + 1] > {ptr}[{key}]")
    return "(" + " and ".join(parts) + ")"


def part_steps(part: Part, nm: NameFn, rels: RelNames, counter: list[int],
               indent: str, tag: str, facts: Facts | None = None) -> list[Step]:
    """The steps of a planned part.  `tag` makes the helper names of this part unique;
    `facts` (what holds at the part's innermost points) simplifies the exclusions."""
    steps: list[Step] = []
    if not part.nest.feasible:
        return [Guard("False")]
    if part.driver is not None:
        steps += _driver_steps(part.driver, nm, rels, tag)
    if part.nest.guard:
        steps.append(pred_code(part.nest.guard, nm, rels, counter, indent))
    for lv in part.nest.levels:
        point = point_level(lv.loop) if lv.loop is not None else None
        if point is not None:   # a loop over one value at most: assigned, then checked
            at, lows, highs = point
            var = nm(lv.var)
            steps.append(Assign(var, at.upper_py(nm)))
            checks = ([f"{b.lower_py(nm)} <= {var}" for b in lows] +
                      [f"{var} <= {b.upper_py(nm)}" for b in highs])
            if checks:
                steps.append(Guard(" and ".join(checks)))
        elif lv.loop is not None:
            lb = lv.loop
            stop = (affine_to_python(lb.upper[0].expr + 1, nm)
                    if len(lb.upper) == 1 and lb.upper[0].div == 1
                    else f"{lb.upper_py(nm)} + 1")
            steps.append(Loop(nm(lv.var), lb.lower_py(nm), stop))
        else:
            assert lv.value is not None
            steps.append(Assign(nm(lv.var), affine_to_python(lv.value.expr, nm),
                                lv.value.div))
        if lv.guards:
            steps.append(pred_code(lv.guards, nm, rels, counter, indent))
    exclude: Pred = _or_all(part.exclude) if part.exclude else PFalse()
    if facts is not None:
        exclude = facts.simplify(exclude)
    if not isinstance(exclude, PFalse):  # points an earlier alternative visited
        g = pred_code([exclude], nm, rels, counter, indent)
        steps.append(Guard(f"not ({g.code})", g.pre))
    return steps


def point_level(lb: LoopBound) -> tuple[Bound, list[Bound], list[Bound]] | None:
    """For a loop that visits at most one value -- a lower bound `ceil(a / d)` equal to an
    upper bound `floor((a + d - 1) / d)` at every point, as the quotient of `x[i // 2]`
    gives (`2 j <= i <= 2 j + 1`) -- (that upper bound, the other lower bounds, the other
    upper bounds): the loop is an assignment and a test, and a sum over it one term."""
    for high in lb.upper:
        for low in lb.lower:
            if low.div == high.div and high.expr == low.expr + (high.div - 1):
                return (high, [b for b in lb.lower if b is not low],
                        [b for b in lb.upper if b is not high])
    return None


def _or_all(ps: Sequence[Pred]) -> Pred:
    out = ps[0]
    for q in ps[1:]:
        out = Or(out, q)
    return out


def _driver_steps(d: Driver, nm: NameFn, rels: RelNames, tag: str) -> list[Step]:
    coords, ptr = rels.pattern(d.pattern)
    steps: list[Step] = []
    e = f"_e{tag}"

    def member(at: str) -> str:   # a coordinate: not negative
        return f"{rels.nonneg}({at})" if rels.nonneg else at
    pos = member(e)
    head = [f"{nm(v)} = {member(f'{coords}[{pos}, {d.nbound + t}]')}"
            for t, v in enumerate(d.driven())]
    if d.lookup:   # (a 0-d index array has the one member: flat index 0)
        bound = [nm(v) for v in d.bound()]
        dims = [rels.dim(d.rel, t, nm) for t in range(len(bound))]
        if bound:
            steps.append(Guard(" and ".join(f"0 <= {b} < {n}" for b, n in zip(bound, dims))))
        key = bound[0] if bound else "0"
        for t in range(1, len(bound)):
            key = f"({key}) * {dims[t]} + {bound[t]}"
        steps.append(Assign(nm(d.driven()[0]), member(f"{coords}[{key}, {d.nbound}]")))
        return steps
    if d.nbound == 0:
        steps.append(Loop(e, "0", f"{coords}.shape[0]", head, (d.rel, d.order, d.args)))
        return steps
    bound = [nm(v) for v in d.bound()]
    dims = [rels.dim(d.rel, d.order[t], nm) for t in range(len(bound))]
    steps.append(Guard(" and ".join(f"0 <= {b} < {n}" for b, n in zip(bound, dims))))
    key = bound[0]
    for t in range(1, len(bound)):
        key = f"({key}) * {dims[t]} + {bound[t]}"
    steps.append(Lines([f"_k{tag} = {key}"]))
    steps.append(Loop(e, f"{ptr}[_k{tag}]", f"{ptr}[_k{tag} + 1]", head,
                      (d.rel, d.order, d.args)))
    return steps
