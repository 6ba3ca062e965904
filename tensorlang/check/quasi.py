"""Lowering of quasi-affine indices and index-array reads (SPEC 12) to the affine core.

The parser keeps `e // c`, `e % c` and `idx[a]` (an entry of an integer index-array parameter
`idx: Z[...]`) inside the indices of accesses and the sides of comparisons, as `QuasiAffine`
nodes.  Here each such term becomes a fresh summation variable (in an access) or `exists`
variable (in a predicate) pinned by affine constraints, so every later stage (passes, index
solver, derivatives, backends) sees only the affine core of SPEC 2.1:

  * `e // c`, `e % c` with a positive constant c: the quotient/remainder pair
    `e = c*q + r, 0 <= r < c`.  With `e' = e + c*K >= 0` (K a non-negative shift, affine in
    sizes, 0 when `e >= 0` is provable) a variable `q` over a cover range `0 <= q < n_q`
    with `c*q <= e' < c*q + c` is the unique quotient of e'; then `e // c = q - K` and
    `e % c = e' - c*q`.  The sum over q has exactly one live term (no addition, SPEC 3), and
    SNF + Fourier-Motzkin (passes/indexsolve) turn it into a one-iteration loop; the adjoint
    solves `q` from the access and stays a gather.
  * `e % S`, `e // S` with S a size expression: `S*q` is not affine in an unknown q, so the
    quotient must be a constant: the checker proves `qlo*S <= e < (qhi + 1)*S` for small
    integers `qlo <= qhi` (e.g. `(i + 1) % N` with `i:N`: q in {0, 1}) and the read becomes
    the disjoint cases `[S*q <= e < S*q + S] * x[.. e - S*q ..]`.  Unbounded: a located error.
    With S = 0 no case holds: the read gives 0 (zero extension; `grid.quasi_value` agrees).
  * `idx[a]` with `idx: Z[n...] in m`: a variable `t` over `0 <= t < m` with the relation
    call `idx(a, t)`: `x[idx[i]] = sum t:m. [idx(i, t)] * x[t]` (SPEC 12).  `idx[a] == b` in a
    predicate is the relation call `idx(a, b)` itself.

An index array written `Z[N]` without `in m` gets m from its uses: the extent of the dimension
it indexes (`x[idx[i]]`, x: R[V] gives V) or the range of the index it is compared with
(`[idx[e] == v]`, v:V).  `record` receives those extents; `tensorlang.check.elaborate` runs
the elaboration once to collect them (`infer_index_bounds`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from tensorlang.ir.ast import (
    Add, Affine, And, Cmp, Exists, Expr, IndexDiv, IndexRead, Iverson, Node, Or, PFalse, Pred, PTrue,
    QuasiAffine, RelCall, Sum, TIndex, pred_and, pred_or, quasi_add, quasi_parts, quasi_scale,
)
from tensorlang.syntax.errors import Loc, TypeCheckError
from tensorlang.check.typecheck import TypeEnv, format_affine, pick_loc, prove_nonneg, role_text

__all__ = ["Branch", "MultiBranch", "lower_index", "lower_indices", "lower_pred",
           "lowered_access", "is_quasi_pred", "index_array_of", "QUOTIENT_WINDOW"]

# `e % S` with a size S: the quotients tried, qlo..qhi within [-W, W].
QUOTIENT_WINDOW = 4

Fresh = Callable[[str], str]
Record = Callable[[str, Affine], None]


@dataclass(frozen=True)
class Branch:
    """One case of a lowered index: fresh variables with their ranges (outermost first), the
    predicate that pins them, and the affine value of the index."""

    binders: tuple[tuple[str, Affine], ...]
    pred: Pred
    value: Affine

    def env(self, env: TypeEnv) -> TypeEnv:
        for name, size in self.binders:
            env = env.with_index(name, size)
        return env


def _err(message: str, loc: Loc | None) -> TypeCheckError:
    return TypeCheckError(message, loc)


def is_quasi_pred(p: Pred) -> bool:
    if isinstance(p, Cmp):
        return isinstance(p.lhs, QuasiAffine) or isinstance(p.rhs, QuasiAffine)
    if isinstance(p, (And, Or)):
        return is_quasi_pred(p.a) or is_quasi_pred(p.b)
    if isinstance(p, Exists):
        return is_quasi_pred(p.body)
    return False


def index_array_of(env: TypeEnv, name: str, loc: Loc | None) -> TIndex:
    rel = env.rel_type(name)
    if not isinstance(rel, TIndex):
        what = role_text(env, name) if env.role(name) is not None else f"{name} is not defined"
        raise _err(f"{name}[...] in an index needs an index-array parameter "
                   f"({name}: Z[...]); {what}", loc)
    return rel


def _bounds(e: Affine, env: TypeEnv) -> tuple[Affine, Affine]:
    """Lower and upper bounds of `e` over the ranges of its index variables (affine in sizes;
    size variables stay symbolic)."""
    lo = Affine.lit(e.const)
    hi = Affine.lit(e.const)
    for name, coeff in e.terms:
        size = env.index_size(name)
        if size is None:  # a size variable (or unknown: the checker reports it)
            lo = lo + Affine(((name, coeff),), 0)
            hi = hi + Affine(((name, coeff),), 0)
            continue
        span = (size - 1).scale(coeff)
        if coeff > 0:
            hi = hi + span
        else:
            lo = lo + span
    return lo, hi


def _ceil_div(a: int, c: int) -> int:
    return -((-a) // c)


def _cover(hi: Affine, c: int) -> Affine:
    """An affine n_q (in sizes >= 0) with n_q >= floor(hi / c) + 1 wherever hi >= 0."""
    terms = tuple((n, _ceil_div(max(k, 0), c)) for n, k in hi.terms)
    return Affine(terms, max(hi.const // c + 1, 0))


def _shift(lo: Affine, c: int) -> Affine:
    """K >= 0 (affine in sizes >= 0) with lo + c*K >= 0."""
    terms = tuple((n, _ceil_div(max(-k, 0), c)) for n, k in lo.terms)
    return Affine(terms, _ceil_div(max(-lo.const, 0), c))


def _div_const_shift(e: Affine, c: int, env: TypeEnv) -> Affine:
    return Affine.lit(0) if prove_nonneg(e, env) else _shift(_bounds(e, env)[0], c)


def _div_const(op: str, e: Affine, c: int, env: TypeEnv, fresh: Fresh) -> list[Branch]:
    shift = _div_const_shift(e, c, env)
    shifted = e + shift.scale(c)
    q = fresh("q")
    qv = Affine.var(q)
    size = _cover(_bounds(shifted, env)[1], c)
    pin = And(Cmp("<=", qv.scale(c), shifted), Cmp("<", shifted, qv.scale(c) + c))
    value = qv - shift if op == "//" else shifted - qv.scale(c)
    return [Branch(((q, size),), pin, value)]


def _div_size(op: str, e: Affine, den: Affine, env: TypeEnv, loc: Loc | None) -> list[Branch]:
    window = range(-QUOTIENT_WINDOW, QUOTIENT_WINDOW + 1)
    lows = [q for q in window if prove_nonneg(e - den.scale(q), env)]
    highs = [q for q in window if prove_nonneg(den.scale(q + 1) - 1 - e, env)]
    if not lows or not highs:
        raise _err(f"cannot bound ({format_affine(e)}) {op} {format_affine(den)}: a divisor "
                   f"that is a size needs the dividend within {QUOTIENT_WINDOW} multiples of "
                   f"it, provably from the index ranges (e.g. (i + 1) % N with i:N); "
                   "otherwise divide by a positive integer constant", loc)
    out = []
    for q in range(max(lows), min(highs) + 1):
        pin = pred_and(_unless_known(Cmp("<=", den.scale(q), e), env),
                       _unless_known(Cmp("<", e, den.scale(q) + den), env))
        if isinstance(pin, PFalse):
            continue
        out.append(Branch((), pin, Affine.lit(q) if op == "//" else e - den.scale(q)))
    return out


def _combine(parts: Sequence[list[Branch]], value: Callable[[Sequence[Affine]], Affine]
             ) -> list[Branch]:
    out = []
    for combo in itertools.product(*parts):
        out.append(Branch(tuple(b for br in combo for b in br.binders),
                          pred_and(*(br.pred for br in combo)),
                          value([br.value for br in combo])))
    return out


def lower_index(a: Affine | QuasiAffine, env: TypeEnv, fresh: Fresh, record: Record,
                loc: Loc | None, extent: Affine | None = None) -> list[Branch]:
    """The cases of index expression `a`; `extent`: the dimension it indexes (if any), which
    an index array read alone in that position takes as the range of its entries."""
    base, terms, coeffs = quasi_parts(a)
    parts: list[list[Branch]] = []
    inner = env
    for term, coeff in zip(terms, coeffs):
        here = extent if (coeff == 1 and len(terms) == 1 and base.const == 0
                          and not base.terms) else None
        branches = _lower_term(term, inner, fresh, record, pick_loc(term.loc, loc), here)
        parts.append(branches)
        for br in branches:  # later terms' bounds may use earlier fresh variables
            inner = br.env(inner)
    return _combine(parts, lambda vs: base + _dot(coeffs, vs))


def _dot(coeffs: Iterable[int], values: Iterable[Affine]) -> Affine:
    out = Affine.lit(0)
    for c, v in zip(coeffs, values):
        out = out + v.scale(c)
    return out


def _lower_term(term: Node, env: TypeEnv, fresh: Fresh, record: Record, loc: Loc | None,
                extent: Affine | None) -> list[Branch]:
    if isinstance(term, IndexDiv):
        out = []
        for num in lower_index(term.num, env, fresh, record, loc):
            inner = num.env(env)
            _check_size(term.den, inner, loc)
            if term.den.is_const():
                cases = _div_const(term.op, num.value, term.den.const, inner, fresh)
            else:
                cases = _div_size(term.op, num.value, term.den, inner.with_fact(num.pred), loc)
            out += _combine([[num], cases], lambda vs: vs[1])
        return out
    assert isinstance(term, IndexRead)
    rel = index_array_of(env, term.name, loc)
    if len(term.args) != len(rel.shape):
        raise _err(f"index array {term.name}: Z[{', '.join(format_affine(n) for n in rel.shape)}] "
                   f"takes {len(rel.shape)} ind{'ex' if len(rel.shape) == 1 else 'ices'}, "
                   f"found {len(term.args)}", loc)
    if extent is not None:
        record(term.name, extent)
    bound = rel.sizes[-1] if not rel.unbounded else None
    if bound is None:
        raise _err(f"index array {term.name}: the range of its entries is not known here",
                   loc)
    out = []
    for args in lower_indices(term.args, env, fresh, record, loc):
        t = fresh("t")
        call = RelCall(term.name, tuple(args.value_tuple) + (Affine.var(t),), loc=loc)
        out.append(Branch(args.binders + ((t, bound),), pred_and(args.pred, call),
                          Affine.var(t)))
    return out


def _check_size(den: Affine, env: TypeEnv, loc: Loc | None) -> None:
    for v in den.vars():
        if not env.is_size(v):
            raise _err(f"the divisor {format_affine(den)} must be a positive integer constant "
                       f"or a size, but {role_text(env, v)}", loc)


@dataclass(frozen=True)
class MultiBranch:
    """A case of several indices lowered together."""

    binders: tuple[tuple[str, Affine], ...]
    pred: Pred
    value_tuple: tuple[Affine, ...]

    def env(self, env: TypeEnv) -> TypeEnv:
        for name, size in self.binders:
            env = env.with_index(name, size)
        return env


def lower_indices(idx: Sequence[Affine | QuasiAffine], env: TypeEnv, fresh: Fresh,
                  record: Record, loc: Loc | None,
                  extents: Sequence[Affine | None] = ()) -> list[MultiBranch]:
    """The cases of a tuple of indices (the cartesian product of their cases)."""
    parts = []
    for k, a in enumerate(idx):
        ext = extents[k] if k < len(extents) else None
        parts.append(lower_index(a, env, fresh, record, loc, ext) if isinstance(a, QuasiAffine)
                     else [Branch((), PTrue(), a)])
    out = []
    for combo in itertools.product(*parts):
        out.append(MultiBranch(tuple(b for br in combo for b in br.binders),
                               pred_and(*(br.pred for br in combo)),
                               tuple(br.value for br in combo)))
    return out


def _exists(binders: Sequence[tuple[str, Affine]], body: Pred, loc: Loc | None) -> Pred:
    for name, size in reversed(list(binders)):
        body = Exists(name, size, body, loc=loc)
    return body


def _direct_relation(p: Cmp, env: TypeEnv, record: Record) -> Pred | None:
    """`idx[a] == b` (either side) with affine a, b: the relation call `idx(a, b)`."""
    if p.op != "==":
        return None
    for one, other in ((p.lhs, p.rhs), (p.rhs, p.lhs)):
        if not (isinstance(one, QuasiAffine) and isinstance(other, Affine)):
            continue
        if (one.base.terms or one.base.const or len(one.terms) != 1 or one.coeffs != (1,)
                or not isinstance(one.terms[0], IndexRead)):
            continue
        read = one.terms[0]
        if not all(isinstance(a, Affine) for a in read.args):
            continue
        rel = index_array_of(env, read.name, pick_loc(p.loc, None))
        if len(read.args) != len(rel.shape):
            return None  # lower_index reports the arity
        name = other.as_var()
        if name is not None and env.index_size(name) is not None:
            record(read.name, env.index_size(name))
        return RelCall(read.name, tuple(read.args) + (other,), loc=p.loc)
    return None


def _closed_form(p: Cmp, env: TypeEnv, fresh: Fresh, record: Record,
                 loc: Loc | None) -> Pred | None:
    """Comparisons of one `e // c` or `e % c` (c a constant) with an affine side, without a
    quotient variable where possible: `e // c == k` is `c*k <= e < c*k + c`, `e // c < k` is
    `e < c*k` (and so on), `e % c == k` is `0 <= k < c and exists q. e' == c*q + k`."""
    diff = quasi_add(p.lhs, quasi_scale(p.rhs, -1))  # diff op' 0 with op' = p.op
    base, terms, coeffs = quasi_parts(diff)
    if len(terms) != 1 or coeffs[0] not in (1, -1) or not isinstance(terms[0], IndexDiv):
        return None
    term = terms[0]
    if not (term.den.is_const() and isinstance(term.num, Affine)):
        return None
    c = term.den.const
    e = term.num
    # coeff * term + base  op  0   ->   term  op  k   (or  k  op  term when coeff = -1)
    k = -base if coeffs[0] == 1 else base
    term_left = coeffs[0] == 1
    if term.op == "//":
        lo, hi = k.scale(c), k.scale(c) + c  # term == k  <=>  lo <= e < hi
        if p.op == "==":
            return And(Cmp("<=", lo, e, loc=p.loc), Cmp("<", e, hi, loc=p.loc), loc=p.loc)
        if term_left:  # e // c < k <=> e < c*k;  e // c <= k <=> e < c*k + c
            return Cmp("<", e, lo if p.op == "<" else hi, loc=p.loc)
        # k < e // c <=> c*k + c <= e;  k <= e // c <=> c*k <= e
        return Cmp("<=", hi if p.op == "<" else lo, e, loc=p.loc)
    if p.op != "==":
        return None
    (q, size), = _div_const("//", e, c, env, fresh)[0].binders
    shift = _div_const_shift(e, c, env)
    shifted = e + shift.scale(c)
    in_range = pred_and(_unless_known(Cmp("<=", Affine.lit(0), k), env),
                        _unless_known(Cmp("<", k, Affine.lit(c)), env))
    if isinstance(in_range, PFalse):
        return in_range
    body = pred_and(Cmp("==", shifted, Affine.var(q).scale(c) + k, loc=p.loc), in_range)
    return Exists(q, size, body, loc=loc)


def _unless_known(p: Cmp, env: TypeEnv) -> Pred:
    """`p` (a `<` or `<=` comparison), or true / false where the ranges decide it."""
    gap = p.rhs - p.lhs - (1 if p.op == "<" else 0)  # p  <=>  gap >= 0
    if prove_nonneg(gap, env):
        return PTrue()
    if prove_nonneg(-gap - 1, env):
        return PFalse()
    return p


def lower_pred(p: Pred, env: TypeEnv, fresh: Fresh, record: Record,
               loc: Loc | None) -> Pred:
    """`p` with its quasi-affine comparisons lowered (`exists` over the fresh variables)."""
    loc = pick_loc(p.loc, loc)
    if isinstance(p, Cmp) and (isinstance(p.lhs, QuasiAffine) or isinstance(p.rhs, QuasiAffine)):
        direct = _direct_relation(p, env, record)
        if direct is None:
            direct = _closed_form(p, env, fresh, record, loc)
        if direct is not None:
            return direct
        cases = []
        for br in lower_indices((p.lhs, p.rhs), env, fresh, record, loc):
            lhs, rhs = br.value_tuple
            cases.append(_exists(br.binders, pred_and(br.pred, Cmp(p.op, lhs, rhs, loc=p.loc)),
                                 loc))
        return pred_or(*cases)
    if isinstance(p, (And, Or)):
        a = lower_pred(p.a, env, fresh, record, loc)
        b = lower_pred(p.b, env, fresh, record, loc)
        return p if (a is p.a and b is p.b) else type(p)(a, b, loc=p.loc)
    if isinstance(p, Exists):
        body = lower_pred(p.body, env.with_index(p.idx, p.size), fresh, record, loc)
        return p if body is p.body else Exists(p.idx, p.size, body, loc=p.loc)
    return p


def lowered_access(target: Callable[[tuple[Affine, ...], TypeEnv], Expr],
                   cases: Sequence[MultiBranch], env: TypeEnv, loc: Loc | None) -> Expr:
    """`sum binders. [pred] * target[values]` summed over the disjoint cases (a scalar)."""
    out: Expr | None = None
    for br in cases:
        inner = br.env(env).with_fact(br.pred)
        body: Expr = target(br.value_tuple, inner)
        if not isinstance(br.pred, PTrue):
            body = Iverson(br.pred, body, loc=loc)
        for name, size in reversed(br.binders):
            body = Sum(name, size, body, loc=loc)
        out = body if out is None else Add(out, body, loc=loc)
    assert out is not None
    return out

